package policy

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"

	"github.com/cellserver/cellserver/limit"
)

// MaxKeyBytes is the longest store key Match returns. A longer one (long
// descriptor values) keeps its first bytes, readable, and ends in "#" and
// the SHA-256 of the whole key, so that it stays one bucket per distinct
// descriptor: a key that is not hashed never holds a "#".
const MaxKeyBytes = 512

// hashedTail is the "#" and 64 hex digits a hashed key ends with.
const hashedTail = 1 + 2*sha256.Size

// Domains lists the configured domains, sorted.
func (c *Config) Domains() []string { return append([]string(nil), c.names...) }

// Limits lists domain's configured limits in file order (nil for an
// unknown domain): for metrics and tools that describe a policy.
func (c *Config) Limits(domain string) []*RateLimit {
	if d := c.domains[domain]; d != nil {
		return append([]*RateLimit(nil), d.limits...)
	}
	return nil
}

// Match matches one request descriptor of domain. An unknown domain, or a
// descriptor that matches no rate_limit, gives a Match with a nil Limit.
//
// A descriptor's Override (with a known unit) in a known domain wins over
// the file, as in envoyproxy/ratelimit: a fixed window of its
// RequestsPerUnit per Unit, never in shadow mode, named
// "override_<rpu>_per_<unit>".
func (c *Config) Match(domain string, d Descriptor) Match {
	dom := c.domains[domain]
	if dom == nil || len(d.Entries) == 0 {
		return Match{}
	}
	if o := d.Override; o != nil && o.Unit.Duration() > 0 {
		l := overrideLimit(o)
		return Match{Limit: l, Key: storeKey(dom.prefix, l.bucketKind(), d.Entries, nil)}
	}
	if dom.share {
		return dom.matchShared(d.Entries)
	}
	l := dom.root.find(d.Entries, nil)
	if l == nil {
		return Match{}
	}
	return Match{Limit: l, Key: storeKey(dom.prefix, l.bucketKind(), d.Entries, nil)}
}

// bucketKind is the part of a bucket's key that names its algorithm and
// unit ("fw-minute"): limits of other algorithms or windows on the same
// entries (a per-second override beside the file's per-minute rule, a
// reload that changes a unit) count in buckets of their own, as
// envoyproxy/ratelimit's keys hold the window.
func bucketKind(alg string, u Unit) string { return alg + "-" + u.String() }

func (l *RateLimit) bucketKind() string {
	if l.bucket == "" { // built by hand, not parsed
		return bucketKind(l.Algorithm, l.Unit)
	}
	return l.bucket
}

// matchShared is Match in a domain with share_threshold wildcards (apart,
// so that the others need not clear the array).
func (dom *domain) matchShared(entries []Entry) Match {
	var shared [MaxDepth]string
	l := dom.root.find(entries, &shared)
	if l == nil {
		return Match{}
	}
	return Match{Limit: l, Key: storeKey(dom.prefix, l.bucketKind(), entries, &shared)}
}

// find walks the tree: at each level the entry's key and value, then the
// first wildcard (in file order) whose prefix the value has, then the key
// alone. The limit is that of the node reached by the last entry: a
// request deeper than the tree, or one stopping above a limit, has none.
// shared[i] is set to the wildcard of entry i when it matched one with
// share_threshold (the tree is at most MaxDepth deep, so a request that
// reaches a limit has no more entries than that).
func (n *node) find(entries []Entry, shared *[MaxDepth]string) *RateLimit {
	for i, e := range entries {
		if i >= MaxDepth {
			return nil
		}
		next := n.exact[e]
		if next == nil {
			for j := range n.wild {
				if w := &n.wild[j]; w.key == e.Key && strings.HasPrefix(e.Value, w.prefix) {
					next = w.n
					if next.share && shared != nil {
						shared[i] = w.value
					}
					break
				}
			}
		}
		if next == nil {
			next = n.bare[e.Key]
		}
		switch {
		case next == nil:
			return nil
		case i == len(entries)-1:
			return next.limit
		case next.leaf():
			return nil
		}
		n = next
	}
	return nil
}

// overrideLimit is the fixed window of a per-descriptor override.
func overrideLimit(o *Override) *RateLimit {
	w := o.Unit.Duration()
	l := &RateLimit{
		Name:            "override_" + strconv.FormatUint(uint64(o.RequestsPerUnit), 10) + "_per_" + o.Unit.String(),
		Unit:            o.Unit,
		RequestsPerUnit: o.RequestsPerUnit,
		Algorithm:       "fw",
		Override:        true,
		bucket:          bucketKind("fw", o.Unit),
		Cost:            1,
		Window:          w,
		Limit:           limit.FW{Limit: o.RequestsPerUnit, Window: w},
	}
	if o.RequestsPerUnit == 0 { // refuse every hit, as the file's requests_per_unit 0
		l.Cost, l.Limit = ^uint32(0), limit.FW{Limit: 1, Window: w}
	}
	return l
}

// MatchAll matches every descriptor of one request and applies replaces:
// a matched limit named in another matched limit's Replaces is dropped
// (its Match's Limit set to nil). out[i] is descriptor i's match.
//
// As in envoyproxy/ratelimit, every matched limit's Replaces count (also
// those of limits that are themselves replaced), and a limit without a
// name is never replaced.
func (c *Config) MatchAll(domain string, ds []Descriptor, out []Match) []Match {
	start := len(out)
	replacing := false
	for _, d := range ds {
		m := c.Match(domain, d)
		replacing = replacing || (m.Limit != nil && len(m.Limit.Replaces) > 0)
		out = append(out, m)
	}
	if !replacing {
		return out
	}
	ms := out[start:]
	var small [limit.MaxLimits]bool
	drop := small[:0]
	if len(ms) > len(small) {
		drop = make([]bool, len(ms))
	} else {
		drop = small[:len(ms)]
	}
	for i := range ms {
		if ms[i].Limit == nil || ms[i].Limit.Name == "" {
			continue
		}
		for j := range ms {
			if ms[j].Limit != nil && contains(ms[j].Limit.Replaces, ms[i].Limit.Name) {
				drop[i] = true
				break
			}
		}
	}
	for i := range ms {
		if drop[i] {
			ms[i] = Match{}
		}
	}
	return out
}

// storeKey is "rl:<domain>:<algorithm>:<key>=<value>:...", each part
// escaped (see escape) so that the parts can be told apart: entries
// ("a","b:c") and ("a:b","c") never share a key. A non-empty shared[i]
// stands for entry i's value. It is one allocation.
func storeKey(prefix, alg string, entries []Entry, shared *[MaxDepth]string) string {
	n := len(prefix) + len(alg)
	for i, e := range entries {
		n += 2 + escapedLen(e.Key) + escapedLen(valueOf(e, i, shared))
	}
	if n <= MaxKeyBytes {
		var b strings.Builder
		b.Grow(n)
		writeKey(&b, prefix, alg, entries, shared)
		return b.String()
	}
	var full strings.Builder
	full.Grow(n)
	writeKey(&full, prefix, alg, entries, shared)
	s := full.String()
	h := sha256.Sum256([]byte(s))
	return s[:MaxKeyBytes-hashedTail] + "#" + hex.EncodeToString(h[:])
}

func writeKey(b *strings.Builder, prefix, alg string, entries []Entry, shared *[MaxDepth]string) {
	b.WriteString(prefix)
	b.WriteString(alg)
	for i, e := range entries {
		b.WriteByte(':')
		writeEscaped(b, e.Key)
		b.WriteByte('=')
		writeEscaped(b, valueOf(e, i, shared))
	}
}

// valueOf is the value entry i puts in a key: its own, or the wildcard
// its bucket is shared under.
func valueOf(e Entry, i int, shared *[MaxDepth]string) string {
	if shared != nil && i < len(shared) && shared[i] != "" {
		return shared[i]
	}
	return e.Value
}

// escape percent-encodes the bytes that structure a key: ':' and '=' (the
// separators), '%' (the escape), '#' (a hashed key's mark), and '{' '}'
// (a Redis Cluster hash tag: a client must not pick which slot, and so
// which shard, its buckets land on).
func escape(s string) string {
	var b strings.Builder
	b.Grow(escapedLen(s))
	writeEscaped(&b, s)
	return b.String()
}

func special(c byte) bool {
	switch c {
	case ':', '=', '%', '#', '{', '}':
		return true
	}
	return false
}

func escapedLen(s string) int {
	n := len(s)
	for i := 0; i < len(s); i++ {
		if special(s[i]) {
			n += 2
		}
	}
	return n
}

func writeEscaped(b *strings.Builder, s string) {
	const hexDigits = "0123456789ABCDEF"
	for i := 0; i < len(s); i++ {
		c := s[i]
		if special(c) {
			b.WriteByte('%')
			b.WriteByte(hexDigits[c>>4])
			b.WriteByte(hexDigits[c&15])
			continue
		}
		b.WriteByte(c)
	}
}
