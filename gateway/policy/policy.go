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
// descriptor that leaves the tree) is no limit.
package policy

import (
	"log/slog"
	"time"

	"github.com/cellserver/cellserver/limit"
)

// Unit is a rate limit's unit: envoyproxy/ratelimit's units.
type Unit uint8

// Units, as envoyproxy/ratelimit spells them (case-insensitive in a file).
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
	// Name is rate_limit.name, or, when the file names none, the
	// descriptor path "domain.key_value.key" (stable across reloads):
	// what metrics, RateLimit-Policy items and replaces refer to.
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
}

// Match is one request descriptor's match.
type Match struct {
	// Limit is the matched limit; nil: no limit applies (the descriptor
	// is allowed and charges nothing).
	Limit *RateLimit
	// Key is the store key of the matched bucket: the domain, the
	// algorithm, and the request's own entries down the matched path
	// (a wildcard or value-less rule gives every distinct value its own
	// bucket). Stable across reloads for the same rule.
	Key string
}

// Config is a loaded policy: every domain of a file. Immutable.
type Config struct {
	// unexported: domains and their descriptor trees
}

// Parse parses a policy file's contents (one or more YAML documents). The
// error names the document, the YAML path and the problem in one line.
func Parse(data []byte) (*Config, error) { panic("policy.Parse: not written yet") }

// Domains lists the configured domains, sorted.
func (c *Config) Domains() []string { panic("not written yet") }

// Match matches one request descriptor of domain. An unknown domain, or a
// descriptor that matches no rate_limit, gives a Match with a nil Limit.
func (c *Config) Match(domain string, d Descriptor) Match { panic("not written yet") }

// MatchAll matches every descriptor of one request and applies replaces:
// a matched limit named in another matched limit's Replaces is dropped
// (its Match's Limit set to nil). out[i] is descriptor i's match.
func (c *Config) MatchAll(domain string, ds []Descriptor, out []Match) []Match {
	panic("not written yet")
}

// Source keeps the current Config of a policy file and reloads it when the
// file changes: a file that does not parse is refused (logged, counted),
// and the previous Config stays in force.
type Source struct {
	// unexported
}

// Current returns the Config in force. Safe for concurrent use.
func (s *Source) Current() *Config { panic("not written yet") }

// SourceOptions configure Open.
type SourceOptions struct {
	// Poll is how often the file is checked for a change (its size,
	// modification time and contents); default 1 s. Polling, not inotify,
	// so a ConfigMap's symlink swap and an editor's rename are both seen.
	Poll   time.Duration
	Logger *slog.Logger
	// OnReload, if set, is called after every attempt to load a changed
	// file: err nil when the new Config is in force.
	OnReload func(err error)
}

// Open loads path (an error if it does not parse: a server must not start
// on a bad policy) and keeps watching it until Close.
func Open(path string, opt SourceOptions) (*Source, error) { panic("not written yet") }

// Static is a Source that never changes: tests and embedded uses.
func Static(c *Config) *Source { panic("not written yet") }

// SourceStats are a Source's reload counts.
type SourceStats struct {
	Reloads, Failures int64  // changed files loaded, and refused
	LastError         string // the last refusal ("" if none)
	LoadedAt          time.Time
}

// Stats returns the reload counts.
func (s *Source) Stats() SourceStats { panic("not written yet") }

// Close stops watching. Idempotent.
func (s *Source) Close() { panic("not written yet") }
