package policy

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"

	"github.com/cellserver/cellserver/limit"
)

// Bounds of a policy file. The file is the operator's, not a client's, but
// a typo (a generated file gone wrong) must give an error, not a server
// that runs out of memory or stack.
const (
	// MaxFileBytes is the largest policy file Parse and Open read.
	MaxFileBytes = 8 << 20
	// MaxDepth is the deepest descriptor nesting (Envoy builds one entry
	// per rate-limit action; real files nest two or three levels).
	MaxDepth = 32
	// MaxDomainBytes is the longest domain name: it is part of every key.
	MaxDomainBytes = 128
	// MaxNameBytes is the longest rate_limit name (a header value).
	MaxNameBytes = 128
	// MaxRules is the most configured descriptors (rules) a file holds,
	// counted as loaded: YAML aliases could otherwise make a small file a
	// tree of billions. (gateway.MaxDescriptors is another bound: the
	// descriptors of one request.)
	MaxRules = 100_000
	// MaxDocuments is the most YAML documents (domains) a file holds: a
	// domain with no descriptors costs no rule, but still a domain.
	MaxDocuments = 10_000
	// MaxEntryBytes is the longest descriptor key, and the longest value,
	// a rule may give (a store key above MaxKeyBytes is hashed anyway).
	MaxEntryBytes = 1 << 10
	// MaxScalarBytes bounds the bytes of all the keys and values of the
	// file's mappings, counted as loaded (YAML aliases expanded): aliases
	// of one long scalar could otherwise make a small file gigabytes.
	MaxScalarBytes = 64 << 20
)

// maxRules and maxScalarBytes are MaxRules and MaxScalarBytes; tests lower
// them so as not to build the whole.
var (
	maxRules       = MaxRules
	maxScalarBytes = MaxScalarBytes
)

// Parse parses a policy file's contents (one or more YAML documents). The
// error names the document, the YAML path and the problem in one line.
func Parse(data []byte) (*Config, error) {
	if len(data) > MaxFileBytes {
		return nil, fmt.Errorf("policy: the file is %d bytes, more than %d", len(data), MaxFileBytes)
	}
	c := &Config{domains: map[string]*domain{}}
	budget, scalars := maxRules, maxScalarBytes
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for doc := 1; ; doc++ {
		var root yaml.Node
		err := dec.Decode(&root)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("policy: document %d: %s", doc, oneLine(err.Error()))
		}
		if doc > MaxDocuments {
			return nil, fmt.Errorf("policy: document %d: more than %d documents (domains) in the file", doc, MaxDocuments)
		}
		if len(root.Content) == 0 || isNull(root.Content[0]) {
			continue // an empty document ("---" at the end, comments only)
		}
		p := &parser{doc: doc, budget: &budget, scalars: &scalars}
		d, err := p.domain(root.Content[0])
		if err != nil {
			return nil, err
		}
		if _, dup := c.domains[d.name]; dup {
			return nil, p.errf(root.Content[0], rootPath("domain"), "duplicate domain %q (each domain is one document)", d.name)
		}
		c.domains[d.name] = d
		c.names = append(c.names, d.name)
	}
	if len(c.domains) == 0 {
		return nil, errors.New("policy: the file holds no domain (want a YAML document with domain and descriptors)")
	}
	sort.Strings(c.names)
	return c, nil
}

// parser reads one YAML document.
type parser struct {
	doc   int
	dom   string
	names map[string]bool // the domain's limit names, explicit and generated
	named map[string]int  // the domain's explicit names, by the line of the first
	// next is, per generated name, the suffix uniqueName tries next: the
	// suffixes below it are taken, so n rules sharing a name cost n steps,
	// not n²/2 (100,000 rules whose values differ only in case took ~10 min).
	next map[string]int
	// budget is how many more descriptors the file may hold; scalars how
	// many more bytes of keys and values (aliases expanded).
	budget, scalars *int
}

// errf is a refusal: "policy: document 2 (domain "x"), descriptors[0].rate_limit.unit: ... (line 7)".
func (p *parser) errf(n *yaml.Node, path ypath, format string, args ...any) error {
	var b strings.Builder
	fmt.Fprintf(&b, "policy: document %d", p.doc)
	if p.dom != "" {
		fmt.Fprintf(&b, " (domain %q)", p.dom)
	}
	if s := path.String(); s != "" {
		b.WriteString(", ")
		b.WriteString(s)
	}
	b.WriteString(": ")
	b.WriteString(oneLine(fmt.Sprintf(format, args...)))
	if n != nil && n.Line > 0 {
		fmt.Fprintf(&b, " (line %d)", n.Line)
	}
	return errors.New(b.String())
}

// ypath is a YAML path ("descriptors[0].rate_limit.unit"), made into text
// only for an error: a file of many rules builds none.
type ypath struct {
	up   *ypath
	name string // a key; "" for an index
	idx  int
}

func rootPath(k string) ypath { return ypath{name: k} }

// key is the path of field k of the mapping at y.
func (y *ypath) key(k string) ypath { return ypath{up: y, name: k} }

// index is the path of item i of the list at y.
func (y *ypath) index(i int) ypath { return ypath{up: y, idx: i} }

func (y *ypath) String() string {
	var elems []*ypath
	for e := y; e != nil; e = e.up {
		elems = append(elems, e)
	}
	var b strings.Builder
	for i := len(elems) - 1; i >= 0; i-- {
		switch e := elems[i]; {
		case e.name == "" && e.up != nil:
			b.WriteString("[" + strconv.Itoa(e.idx) + "]")
		case e.name == "":
		default:
			if b.Len() > 0 {
				b.WriteByte('.')
			}
			b.WriteString(e.name)
		}
	}
	return b.String()
}

// oneLine joins a multi-line message (yaml's lists of errors) into one.
func oneLine(s string) string {
	return strings.Join(strings.Fields(strings.ReplaceAll(s, "\n", "; ")), " ")
}

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.Tag == "!!null"
}

// fields checks that n is a mapping with only the allowed keys, each once,
// and returns its values by key (a null value counts as absent, as
// envoyproxy/ratelimit reads it).
func (p *parser) fields(n *yaml.Node, path ypath, allowed ...string) (map[string]*yaml.Node, error) {
	if n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	if n.Kind != yaml.MappingNode {
		return nil, p.errf(n, path, "want a mapping, got %s", kindName(n))
	}
	m := make(map[string]*yaml.Node, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind == yaml.ScalarNode && k.Tag == "!!merge" {
			return nil, p.errf(k, path, "merge keys (<<) are not supported: write the fields out")
		}
		if k.Kind != yaml.ScalarNode {
			return nil, p.errf(k, path, "a key that is not a string")
		}
		known := false
		for _, a := range allowed {
			known = known || k.Value == a
		}
		if !known {
			return nil, p.errf(k, path, "unknown key %q (want one of %s)", k.Value, strings.Join(allowed, ", "))
		}
		if _, dup := m[k.Value]; dup {
			return nil, p.errf(k, path, "key %q given twice", k.Value)
		}
		if v.Kind == yaml.AliasNode {
			v = v.Alias
		}
		if *p.scalars -= len(k.Value) + len(v.Value); *p.scalars < 0 {
			return nil, p.errf(v, path, "more than %d bytes of keys and values in the file (YAML aliases expanded)", maxScalarBytes)
		}
		if !isNull(v) {
			m[k.Value] = v
		}
	}
	return m, nil
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.SequenceNode:
		return "a list"
	case yaml.MappingNode:
		return "a mapping"
	case yaml.ScalarNode:
		return fmt.Sprintf("%q", n.Value)
	}
	return "nothing"
}

func (p *parser) str(n *yaml.Node, path ypath) (string, error) {
	if n == nil {
		return "", nil
	}
	if n.Kind != yaml.ScalarNode {
		return "", p.errf(n, path, "want a string, got %s", kindName(n))
	}
	return n.Value, nil
}

// boolean reads YAML 1.1's booleans too (yes, on, ...): envoyproxy/ratelimit
// reads its files with gopkg.in/yaml.v2, which takes them.
func (p *parser) boolean(n *yaml.Node, path ypath) (bool, error) {
	if n == nil {
		return false, nil
	}
	if n.Kind == yaml.ScalarNode && n.Style&(yaml.DoubleQuotedStyle|yaml.SingleQuotedStyle) == 0 {
		switch strings.ToLower(n.Value) {
		case "true", "yes", "on", "y":
			return true, nil
		case "false", "no", "off", "n":
			return false, nil
		}
	}
	return false, p.errf(n, path, "want true or false, got %s", kindName(n))
}

// uint32Of reads an integer 0..max (has: the key was given).
func (p *parser) uint32Of(n *yaml.Node, path ypath, lo, hi uint64) (v uint32, has bool, err error) {
	if n == nil {
		return 0, false, nil
	}
	var u uint64
	if n.Kind != yaml.ScalarNode || n.Decode(&u) != nil || u < lo || u > hi {
		return 0, true, p.errf(n, path, "want an integer from %d to %d, got %s", lo, hi, kindName(n))
	}
	return uint32(u), true, nil
}

func (p *parser) list(n *yaml.Node, path ypath) ([]*yaml.Node, error) {
	if n == nil {
		return nil, nil
	}
	if n.Kind != yaml.SequenceNode {
		return nil, p.errf(n, path, "want a list, got %s", kindName(n))
	}
	return n.Content, nil
}

func (p *parser) domain(n *yaml.Node) (*domain, error) {
	// The domain names the document in every error, even one found
	// before the domain key is read.
	if n.Kind == yaml.MappingNode {
		for i := 0; i+1 < len(n.Content); i += 2 {
			if k, v := n.Content[i], n.Content[i+1]; k.Value == "domain" && v.Kind == yaml.ScalarNode && len(v.Value) <= MaxDomainBytes {
				p.dom = v.Value
				break
			}
		}
	}
	f, err := p.fields(n, ypath{}, "domain", "descriptors")
	if err != nil {
		return nil, err
	}
	name, err := p.str(f["domain"], rootPath("domain"))
	if err != nil {
		return nil, err
	}
	switch {
	case name == "":
		return nil, p.errf(n, rootPath("domain"), "config file cannot have empty domain")
	case len(name) > MaxDomainBytes:
		return nil, p.errf(f["domain"], rootPath("domain"), "longer than %d bytes", MaxDomainBytes)
	}
	p.names, p.named, p.next = map[string]bool{}, map[string]int{}, map[string]int{}
	d := &domain{name: name, prefix: "rl:" + escape(name) + ":"}
	if err := p.descriptors(d, &d.root, f["descriptors"], rootPath("descriptors"), &composite{key: name}, shortName(sanitize(name)), 1); err != nil {
		return nil, err
	}
	// Generated names last, so that they avoid every explicit one.
	for _, l := range d.limits {
		if l.Name == "" {
			continue
		}
		p.names[l.Name] = true
	}
	for _, l := range d.limits {
		if l.Name == "" {
			l.Name = p.uniqueName(l.generated)
		}
	}
	return d, nil
}

// descriptors loads one level's list into parent. full is the level's
// envoyproxy/ratelimit key ("domain.key_value", for an error), at the
// generated name so far (cut to fit MaxNameBytes at every level, so that
// neither grows with the depth times a long value).
func (p *parser) descriptors(d *domain, parent *node, n *yaml.Node, path ypath, full *composite, at string, depth int) error {
	items, err := p.list(n, path)
	if err != nil {
		return err
	}
	if len(items) > 0 && depth > MaxDepth {
		return p.errf(n, path, "descriptors nested deeper than %d levels", MaxDepth)
	}
	for i, it := range items {
		ipath := path.index(i)
		if *p.budget--; *p.budget < 0 {
			return p.errf(it, ipath, "more than %d descriptors in the file", maxRules)
		}
		f, err := p.fields(it, ipath, "key", "value", "rate_limit", "descriptors",
			"shadow_mode", "detailed_metric", "value_to_metric", "share_threshold")
		if err != nil {
			return err
		}
		key, err := p.str(f["key"], ipath.key("key"))
		if err != nil {
			return err
		}
		switch {
		case key == "":
			return p.errf(it, ipath, "descriptor has empty key")
		case len(key) > MaxEntryBytes:
			return p.errf(f["key"], ipath.key("key"), "longer than %d bytes", MaxEntryBytes)
		}
		value, err := p.str(f["value"], ipath.key("value"))
		if err != nil {
			return err
		}
		if len(value) > MaxEntryBytes {
			return p.errf(f["value"], ipath.key("value"), "longer than %d bytes", MaxEntryBytes)
		}
		var flags [4]bool // shadow_mode, detailed_metric, value_to_metric, share_threshold
		for j, k := range []string{"shadow_mode", "detailed_metric", "value_to_metric", "share_threshold"} {
			if flags[j], err = p.boolean(f[k], ipath.key(k)); err != nil {
				return err
			}
		}
		shadow, detailed, share := flags[0], flags[1], flags[3]
		if share && !strings.HasSuffix(value, "*") {
			return p.errf(f["share_threshold"], ipath.key("share_threshold"),
				"share_threshold can only be used with wildcard values (ending with '*'), but found value %q", value)
		}
		child := &node{share: share}
		d.share = d.share || share
		here := &composite{up: full, key: key, value: value}
		if !parent.add(key, value, child) {
			return p.errf(it, ipath, "duplicate descriptor composite key '%s'", here)
		}
		name := shortName(at + "-" + namePart(key, value))
		if rl := f["rate_limit"]; rl != nil {
			rlPath := ipath.key("rate_limit")
			l, err := p.rateLimit(rl, rlPath)
			if err != nil {
				return err
			}
			l.ShadowMode, l.DetailedMetric = shadow, detailed
			if l.Name != "" {
				if line, dup := p.named[l.Name]; dup {
					return p.errf(rl, rlPath.key("name"), "name %q given twice in the domain (first at line %d): replaces and headers could not tell them apart", l.Name, line)
				}
				p.named[l.Name] = rl.Line
			}
			l.generated = name
			child.limit = l
			d.limits = append(d.limits, l)
		}
		if err := p.descriptors(d, child, f["descriptors"], ipath.key("descriptors"), here, name, depth+1); err != nil {
			return err
		}
	}
	return nil
}

// composite is a rule's envoyproxy/ratelimit composite key
// ("domain.key_value.key"), made into text only for an error.
type composite struct {
	up         *composite // nil for the domain (key)
	key, value string
}

func (c *composite) String() string {
	if c.up == nil {
		return c.key
	}
	s := c.up.String() + "." + c.key
	if c.value != "" {
		s += "_" + c.value
	}
	return s
}

// add files child under key and value; false if that place is taken
// (envoyproxy/ratelimit's "duplicate descriptor composite key").
func (n *node) add(key, value string, child *node) bool {
	if value == "" {
		if n.bare[key] != nil {
			return false
		}
		if n.bare == nil {
			n.bare = map[string]*node{}
		}
		n.bare[key] = child
		return true
	}
	e := Entry{key, value}
	if n.exact[e] != nil {
		return false
	}
	if n.exact == nil {
		n.exact = map[Entry]*node{}
	}
	n.exact[e] = child
	if strings.HasSuffix(value, "*") {
		n.wild = append(n.wild, wildNode{key: key, value: value, prefix: strings.TrimSuffix(value, "*"), n: child})
	}
	return true
}

var algorithms = []string{"fw", "swc", "swl", "gcra", "cal"}

// block is a rate_limit block as written, before it is checked.
type block struct {
	n    *yaml.Node            // the block
	path ypath                 // its YAML path
	f    map[string]*yaml.Node // its fields by key

	unit, alg, tz             string
	rpu, burst, cost          uint32
	hasRPU, hasBurst, hasCost bool
}

// at is the node of field k for an error, the block's when k is absent.
func (b *block) at(k string) *yaml.Node { return orNode(b.f[k], b.n) }

// rateLimit reads a rate_limit block and builds its CL.LIMIT limit.
func (p *parser) rateLimit(n *yaml.Node, path ypath) (*RateLimit, error) {
	l, b, err := p.readBlock(n, path)
	if err != nil {
		return nil, err
	}
	if l.Unlimited {
		return l, p.checkUnlimited(b)
	}
	if err := p.window(l, b); err != nil {
		return nil, err
	}
	if err := p.buildLimit(l, b); err != nil {
		return nil, err
	}
	return l, nil
}

// readBlock reads a block's fields; the RateLimit gets those that need no
// other field to be checked (unlimited, name, replaces).
func (p *parser) readBlock(n *yaml.Node, path ypath) (*RateLimit, *block, error) {
	f, err := p.fields(n, path, "unit", "requests_per_unit", "unlimited", "name", "replaces",
		"algorithm", "burst", "cost", "timezone")
	if err != nil {
		return nil, nil, err
	}
	b := &block{n: n, path: path, f: f}
	l := &RateLimit{}
	if l.Unlimited, err = p.boolean(f["unlimited"], path.key("unlimited")); err != nil {
		return nil, nil, err
	}
	if l.Name, err = p.str(f["name"], path.key("name")); err != nil {
		return nil, nil, err
	}
	if len(l.Name) > MaxNameBytes {
		return nil, nil, p.errf(f["name"], path.key("name"), "longer than %d bytes", MaxNameBytes)
	}
	if i := strings.IndexFunc(l.Name, badNameRune); i >= 0 {
		r, _ := utf8.DecodeRuneInString(l.Name[i:])
		return nil, nil, p.errf(f["name"], path.key("name"),
			"%q holds %q: a name is printable ASCII without space, '\"', '\\', ',' or ';' (it is a header value)", l.Name, r)
	}
	if l.Replaces, err = p.replaces(f["replaces"], path.key("replaces"), l.Name); err != nil {
		return nil, nil, err
	}
	for _, s := range []struct {
		k   string
		dst *string
	}{{"unit", &b.unit}, {"algorithm", &b.alg}, {"timezone", &b.tz}} {
		if *s.dst, err = p.str(f[s.k], path.key(s.k)); err != nil {
			return nil, nil, err
		}
	}
	for _, u := range []struct {
		k   string
		lo  uint64
		dst *uint32
		has *bool
	}{{"requests_per_unit", 0, &b.rpu, &b.hasRPU}, {"burst", 1, &b.burst, &b.hasBurst}, {"cost", 1, &b.cost, &b.hasCost}} {
		if *u.dst, *u.has, err = p.uint32Of(f[u.k], path.key(u.k), u.lo, math.MaxUint32); err != nil {
			return nil, nil, err
		}
	}
	return l, b, nil
}

// replaces reads a replaces list, refusing what envoyproxy/ratelimit does.
func (p *parser) replaces(n *yaml.Node, path ypath, own string) ([]string, error) {
	items, err := p.list(n, path)
	if err != nil {
		return nil, err
	}
	var names []string
	for i, r := range items {
		rpath := path.index(i)
		rf, err := p.fields(r, rpath, "name")
		if err != nil {
			return nil, err
		}
		name, err := p.str(rf["name"], rpath.key("name"))
		switch {
		case err != nil:
			return nil, err
		case name == "":
			return nil, p.errf(r, rpath, "should not have an empty replaces entry")
		case name == own:
			return nil, p.errf(r, rpath, "replaces should not contain name of same descriptor")
		}
		names = append(names, name)
	}
	return names, nil
}

// checkUnlimited refuses an unlimited block with anything of a limit.
func (p *parser) checkUnlimited(b *block) error {
	if b.f["unit"] != nil {
		return p.errf(b.f["unit"], b.path, "should not specify rate limit unit when unlimited")
	}
	for _, k := range []string{"requests_per_unit", "algorithm", "burst", "cost", "timezone"} {
		if b.f[k] != nil && !(k == "requests_per_unit" && b.rpu == 0) {
			return p.errf(b.f[k], b.path, "should not specify %s when unlimited", k)
		}
	}
	return nil
}

// window sets the unit, window, algorithm and cost, and checks which
// extensions go with which algorithm.
func (p *parser) window(l *RateLimit, b *block) error {
	if l.Unit = ParseUnit(b.unit); l.Unit == UnitUnknown {
		return p.errf(b.at("unit"), b.path.key("unit"), "invalid rate limit unit '%s' (want second, minute, hour, day, week, month or year)", b.unit)
	}
	l.Window = l.Unit.Duration()
	if !b.hasRPU {
		// envoyproxy/ratelimit reads a missing requests_per_unit as 0,
		// which refuses everything: too easy to do by mistake.
		return p.errf(b.n, b.path, "requests_per_unit is required (0 refuses every request; or set unlimited: true)")
	}
	l.RequestsPerUnit = b.rpu
	l.Algorithm = "fw"
	if b.alg != "" {
		if l.Algorithm = strings.ToLower(b.alg); !contains(algorithms, l.Algorithm) {
			return p.errf(b.f["algorithm"], b.path.key("algorithm"), "unknown algorithm %q (want fw, swc, swl, gcra or cal)", b.alg)
		}
	}
	l.Cost = 1
	if b.hasCost {
		l.Cost = b.cost
	}
	if b.hasBurst && l.Algorithm != "gcra" {
		return p.errf(b.f["burst"], b.path.key("burst"), "burst is for algorithm gcra only")
	}
	if b.f["timezone"] != nil && l.Algorithm != "cal" {
		return p.errf(b.f["timezone"], b.path.key("timezone"), "timezone is for algorithm cal only")
	}
	l.bucket = bucketKind(l.Algorithm, l.Unit)
	return nil
}

// buildLimit builds l's CL.LIMIT limit and checks it as CL.LIMIT would.
func (p *parser) buildLimit(l *RateLimit, b *block) error {
	rpu := l.RequestsPerUnit
	if rpu == 0 {
		// envoyproxy/ratelimit's block list entry (its README's example
		// 3): every hit is over the limit. A window of 1 whose every
		// charge costs more than it refuses each one; a check-only
		// request (hits 0) passes, as it does there.
		if l.Algorithm != "fw" {
			return p.errf(b.at("requests_per_unit"), b.path.key("requests_per_unit"),
				"requests_per_unit 0 (refuse every request) is for algorithm fw only")
		}
		if b.hasCost {
			return p.errf(b.f["cost"], b.path.key("cost"), "cost with requests_per_unit 0 (every request is refused anyway)")
		}
		l.Cost = math.MaxUint32
		l.Limit = limit.FW{Limit: 1, Window: l.Window}
		return nil
	}
	switch l.Algorithm {
	case "fw":
		l.Limit = limit.FW{Limit: rpu, Window: l.Window}
	case "swc":
		l.Limit = limit.SWC{Limit: rpu, Window: l.Window}
	case "swl":
		if rpu > limit.MaxSWLLimit {
			return p.errf(b.f["requests_per_unit"], b.path.key("requests_per_unit"),
				"%d is above swl's largest limit %d (use swc, its constant-size estimate)", rpu, limit.MaxSWLLimit)
		}
		l.Limit = limit.SWL{Limit: rpu, Window: l.Window}
	case "gcra":
		l.Burst = rpu
		if b.hasBurst {
			l.Burst = b.burst
		}
		l.Limit = limit.GCRA{MaxBurst: l.Burst - 1, Count: rpu, Period: l.Window}
	case "cal":
		cal, err := p.calendar(l, b)
		if err != nil {
			return err
		}
		l.Limit = cal
	}
	if err := l.Limit.Validate(); err != nil {
		return p.errf(b.n, b.path, "%s", strings.TrimPrefix(err.Error(), "ERR "))
	}
	if g, ok := l.Limit.(limit.GCRA); ok && int64(g.MaxBurst)+1 > maxGCRASpan/g.Interval() {
		// CL.THROTTLE's arithmetic wraps in int64 nanoseconds (redis-cell's,
		// which CL.LIMIT GCRA keeps): a bucket that takes longer than this
		// to drain answers nonsense (a first request refused), so it is
		// refused here instead. A TAT is at most now plus twice this.
		return p.errf(b.n, b.path, "burst %d at %d per %s takes longer than %d years to drain, past what GCRA's nanosecond arithmetic holds (use cal or fw for long quotas)",
			l.Burst, rpu, l.Unit, maxGCRASpan/(365*24*int64(time.Hour)))
	}
	if most := limit.Capacity(l.Limit); int64(l.Cost) > most {
		return p.errf(b.f["cost"], b.path.key("cost"), "cost %d is above the limit's %d: every request would be refused", l.Cost, most)
	}
	return nil
}

// maxGCRASpan bounds a gcra limit's burst times its emission interval (its
// τ), in ns: 2^60, about 36 years.
const maxGCRASpan = int64(1) << 60

var calUnits = map[Unit]limit.Unit{Day: limit.Day, Week: limit.Week, Month: limit.Month, Year: limit.Year}

// calendar is a cal limit: a calendar unit in a zone.
func (p *parser) calendar(l *RateLimit, b *block) (limit.CAL, error) {
	cu := calUnits[l.Unit]
	if cu == 0 {
		return limit.CAL{}, p.errf(b.f["unit"], b.path.key("unit"), "algorithm cal counts calendar periods: want day, week, month or year, got %q", b.unit)
	}
	var z limit.Zone
	l.Timezone = "UTC"
	if b.tz != "" {
		var err error
		if z, err = limit.LoadZone(b.tz); err != nil {
			return limit.CAL{}, p.errf(b.f["timezone"], b.path.key("timezone"), "unknown time zone %q (want an IANA name such as Europe/Paris)", b.tz)
		}
		l.Timezone = b.tz
	}
	return limit.CAL{Limit: l.RequestsPerUnit, Unit: cu, Zone: z}, nil
}

func orNode(a, b *yaml.Node) *yaml.Node {
	if a != nil {
		return a
	}
	return b
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// sanitize maps a descriptor part to a name in [a-z0-9_-]: ASCII letters
// lowered, other characters '_'.
func sanitize(s string) string {
	return string(appendSanitized(nil, s, len(s)))
}

// appendSanitized appends s sanitized, at most n bytes of it, to b.
func appendSanitized(b []byte, s string, n int) []byte {
	for i := 0; i < len(s) && i < n; i++ {
		switch c := s[i]; {
		case 'a' <= c && c <= 'z', '0' <= c && c <= '9', c == '_', c == '-':
			b = append(b, c)
		case 'A' <= c && c <= 'Z':
			b = append(b, c+'a'-'A')
		default:
			b = append(b, '_')
		}
	}
	return b
}

// badNameRune reports a character an explicit name may not hold: what
// headers would change or split (outside printable ASCII, space, '"', '\\',
// ',' and ';').
func badNameRune(r rune) bool {
	return r <= ' ' || r > '~' || strings.ContainsRune("\"\\,;", r)
}

// maxGenerated is the longest generated name before uniqueName's "-2",
// "-3", ... suffix.
const maxGenerated = MaxNameBytes - 12

// hashTail is the "-" and 8 hex digits a cut name ends with.
const hashTail = 1 + 8

// shortName is s, or, when longer than maxGenerated, its first bytes and a
// hash of the whole.
func shortName(s string) string {
	if len(s) <= maxGenerated {
		return s
	}
	h := sha256.Sum256([]byte(s))
	return s[:maxGenerated-hashTail] + "-" + hex.EncodeToString(h[:4])
}

// namePart is a level's part of a generated name: its key, or key_value,
// sanitized, and cut as shortName cuts (the hash of the part as written)
// without building the whole part first.
func namePart(key, value string) string {
	n := len(key)
	if value != "" {
		n += 1 + len(value)
	}
	cut := n > maxGenerated
	room := n
	if cut {
		room = maxGenerated - hashTail
	}
	b := appendSanitized(make([]byte, 0, min(n, maxGenerated)), key, room)
	if value != "" && len(b) < room {
		b = append(b, '_')
		b = appendSanitized(b, value, room-len(b))
	}
	if !cut {
		return string(b)
	}
	h := sha256.New()
	io.WriteString(h, key)
	if value != "" {
		io.WriteString(h, "_")
		io.WriteString(h, value)
	}
	return string(append(append(b, '-'), hex.EncodeToString(h.Sum(nil)[:4])...))
}

// uniqueName is the generated name for a path (already shortName's, at
// most maxGenerated bytes) unlike every other name of the domain (a "-2",
// "-3" suffix in file order).
func (p *parser) uniqueName(path string) string {
	path = shortName(path)
	name := path
	i := max(p.next[path], 2)
	for ; p.names[name]; i++ {
		name = path + "-" + strconv.Itoa(i)
	}
	p.next[path] = i
	p.names[name] = true
	return name
}
