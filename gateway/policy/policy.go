// Package policy loads rate-limit policies: envoyproxy/ratelimit's YAML
// configuration format, unchanged, plus cellserver's extensions (the
// algorithm of each limit, a burst, a cost, a time zone), and matches
// request descriptors against them with envoyproxy/ratelimit's rules.
//
// A policy file holds one or more YAML documents (separated by "---"), each
// one envoyproxy/ratelimit configuration file: a domain and its nested
// descriptors. A Config is immutable once built; Source keeps the current
// one and swaps it when the file changes (hot reload).
//
// Matching (as envoyproxy/ratelimit): a request descriptor is a list of
// entries (key, value). Level by level, an entry matches a configured
// descriptor with the same key and value first, then one whose value is a
// wildcard ("foo*" matches every value starting with "foo"; "*" any), then
// one with the same key and no value. The limit applied is the rate_limit
// of the node reached after the last entry; a node without one (or a
// descriptor that leaves the tree) is no limit. Wildcards are tried in file
// order, the first that fits wins, as there.
//
// Quick start:
//
//	src, err := policy.Open("policy.yaml", policy.SourceOptions{})
//	if err != nil { ... }                      // the file does not load
//	defer src.Close()
//	ms := src.Current().MatchAll("api", descriptors, nil)
//	// ms[i].Limit: nil, or the limit (ms[i].Limit.Limit its CL.LIMIT
//	// limit); ms[i].Key: the bucket's store key
//
// Each match's Key is "rl:<domain>:<algorithm>:<key>=<value>:...", every
// part percent-escaped for ':', '=', '%', '#', '{' and '}': distinct
// descriptors never share a key, a client cannot choose a Redis Cluster
// hash tag, and a reload that changes a rule's algorithm starts a new
// bucket. Keys stay within MaxKeyBytes (a longer one ends in "#" and the
// SHA-256 of the whole). docs/policy.md describes the format.
package policy

import (
	"strings"
	"time"

	"github.com/cellserver/cellserver/limit"
)

// Unit is a rate limit's unit: envoyproxy/ratelimit's units.
type Unit uint8

// Units, as envoyproxy/ratelimit spells them (case-insensitive in a file).
// Week is Envoy's RateLimitUnit WEEK (7 days), which envoyproxy/ratelimit
// accepts too.
const (
	UnitUnknown Unit = iota
	Second
	Minute
	Hour
	Day
	Week
	Month // 30 days for the window algorithms, as envoyproxy/ratelimit; a calendar month for cal
	Year  // 365 days for the window algorithms; a calendar year for cal
)

var unitNames = [...]string{Second: "second", Minute: "minute", Hour: "hour", Day: "day", Week: "week", Month: "month", Year: "year"}

var unitDurations = [...]time.Duration{
	Second: time.Second, Minute: time.Minute, Hour: time.Hour, Day: 24 * time.Hour,
	Week: 7 * 24 * time.Hour, Month: 30 * 24 * time.Hour, Year: 365 * 24 * time.Hour,
}

// String returns the unit's name in lower case ("minute"), "unknown" for
// UnitUnknown or an out-of-range value.
func (u Unit) String() string {
	if u > UnitUnknown && int(u) < len(unitNames) {
		return unitNames[u]
	}
	return "unknown"
}

// Duration is the unit's length as envoyproxy/ratelimit divides time: a
// month is 30 days, a year 365; 0 for UnitUnknown.
func (u Unit) Duration() time.Duration {
	if u > UnitUnknown && int(u) < len(unitDurations) {
		return unitDurations[u]
	}
	return 0
}

// ParseUnit reads a unit name, case-insensitively ("MINUTE", "minute");
// UnitUnknown for anything else.
func ParseUnit(s string) Unit {
	for u := Second; u <= Year; u++ {
		if strings.EqualFold(s, unitNames[u]) {
			return u
		}
	}
	return UnitUnknown
}

// Entry is one key/value pair of a request descriptor.
type Entry struct{ Key, Value string }

// Descriptor is one request descriptor (Envoy's RateLimitDescriptor).
type Descriptor struct {
	Entries []Entry
	// HitsAddend overrides the request's hits for this descriptor when
	// HasHits is set (0 then checks without charging).
	HitsAddend uint64
	HasHits    bool
	// Override, when set, replaces the configured limit (Envoy's
	// per-descriptor limit override): a fixed window of RequestsPerUnit a
	// Unit.
	Override *Override
}

// Override is a per-descriptor limit override.
type Override struct {
	RequestsPerUnit uint32
	Unit            Unit
}

// RateLimit is one configured limit (a descriptor's rate_limit).
type RateLimit struct {
	// Name is rate_limit.name, or, when the file names none, one made of
	// the descriptor path in [a-z0-9_-]: "domain-key_value-key", lower
	// case, other characters '_', "-2", "-3", ... against a name already
	// in the domain, at most MaxNameBytes (stable across reloads of the
	// same file): what metrics, RateLimit-Policy items and replaces refer
	// to.
	Name            string
	Unit            Unit
	RequestsPerUnit uint32
	Unlimited       bool
	Replaces        []string // names of limits this one drops when both match
	ShadowMode      bool
	DetailedMetric  bool
	// Extensions.
	Algorithm string // "fw" (default), "swc", "swl", "gcra", "cal"
	Burst     uint32 // gcra: requests allowed at once (default RequestsPerUnit)
	Cost      uint32 // units charged per hit (default 1)
	Timezone  string // cal: IANA zone (default UTC)

	// Limit is the CL.LIMIT limit the fields above build (nil when
	// Unlimited).
	Limit limit.Limit
	// Window is the limit's window (GCRA: its period): RateLimit-Policy's w.
	Window time.Duration

	// Override: built from a request's per-descriptor limit override, not
	// the file. Its Name carries the request's numbers, so metrics label
	// it by MetricName instead.
	Override bool

	bucket string // bucketKind of the algorithm and unit, part of every key

	generated string // the name made from the descriptor path, before it is made unique
}

// Blocks reports whether l refuses every hit: requests_per_unit 0 (an
// envoyproxy/ratelimit block list entry). Its Limit is then a fixed window
// of 1 and its Cost the largest, so that every charge above 0 is refused
// (a check-only one passes, as there); what a response shows of it should
// be a quota of 0 and nothing remaining.
func (l *RateLimit) Blocks() bool { return !l.Unlimited && l.RequestsPerUnit == 0 }

// Match is one request descriptor's match.
type Match struct {
	// Limit is the matched limit; nil: no limit applies (the descriptor
	// is allowed and charges nothing).
	Limit *RateLimit
	// Key is the store key of the matched bucket: the domain, the
	// algorithm, and the request's own entries down the matched path
	// (a wildcard or value-less rule gives every distinct value its own
	// bucket, a share_threshold wildcard one bucket for all). Stable
	// across reloads for the same rule and algorithm.
	Key string
}

// Config is a loaded policy: every domain of a file. Immutable once built,
// safe for concurrent use; the zero Config has no domain.
type Config struct {
	domains map[string]*domain
	names   []string // sorted
}

// domain is one YAML document: its descriptor tree and its limits.
type domain struct {
	name   string
	prefix string // the store keys' "rl:<escaped domain>:"
	root   node
	limits []*RateLimit // in file order
	share  bool         // some descriptor has share_threshold
}

// node is one level of a descriptor tree: the configured descriptors under
// it, looked up by key and value, by key and value prefix (in file order),
// then by key alone.
type node struct {
	exact map[Entry]*node
	wild  []wildNode
	bare  map[string]*node
	limit *RateLimit
	// share: a wildcard descriptor with share_threshold: every value it
	// matches counts in one bucket (its key holds the wildcard, not the
	// value).
	share bool
}

// wildNode is a descriptor whose value ends in "*".
type wildNode struct {
	key, value, prefix string // prefix: value without its "*"
	n                  *node
}

func (n *node) leaf() bool { return len(n.exact) == 0 && len(n.wild) == 0 && len(n.bare) == 0 }

// MetricName is the name metrics count l under: its Name, or for an
// override "override_per_<unit>", so that the numbers a request sends never
// become label values (bounded by the file and seven units).
func (l *RateLimit) MetricName() string {
	if l.Override {
		return "override_per_" + l.Unit.String()
	}
	return l.Name
}
