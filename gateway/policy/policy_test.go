package policy

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cellserver/cellserver/limit"
)

func load(t *testing.T, file string) *Config {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", file))
	require.NoError(t, err)
	c, err := Parse(data)
	require.NoError(t, err, file)
	return c
}

// desc reads "k=v,k2=v2" ("k=" is an empty value).
func desc(s string) Descriptor {
	var d Descriptor
	for _, kv := range strings.Split(s, ",") {
		k, v, _ := strings.Cut(kv, "=")
		d.Entries = append(d.Entries, Entry{k, v})
	}
	return d
}

// describe is a Match in one line: "-" for no limit, else
// "name rpu/unit" and its flags.
func describe(m Match) string {
	l := m.Limit
	if l == nil {
		return "-"
	}
	if l.Unlimited {
		return l.Name + " unlimited"
	}
	s := fmt.Sprintf("%s %d/%s %s", l.Name, l.RequestsPerUnit, l.Unit, l.Algorithm)
	if l.ShadowMode {
		s += " shadow"
	}
	if l.DetailedMetric {
		s += " detailed"
	}
	return s
}

// Every example configuration of envoyproxy/ratelimit's README loads
// unchanged and matches as the README describes.
func TestReadmeExamples(t *testing.T) {
	cases := []struct {
		file, domain, desc, want string
	}{
		// Example 1: two values of one key, anything else unlimited.
		{"example1.yaml", "mongo_cps", "database=users", "mongo_cps-database_users 500/second fw"},
		{"example1.yaml", "mongo_cps", "database=default", "mongo_cps-database_default 500/second fw"},
		{"example1.yaml", "mongo_cps", "database=other", "-"},
		{"example1.yaml", "other_domain", "database=users", "-"},
		// Example 2: a placeholder level, and a value-less key.
		{"example2.yaml", "messaging", "message_type=marketing,to_number=2061111111", "messaging-message_type_marketing-to_number 5/day fw"},
		{"example2.yaml", "messaging", "to_number=2061111111", "messaging-to_number 100/day fw"},
		{"example2.yaml", "messaging", "message_type=marketing", "-"},
		{"example2.yaml", "messaging", "message_type=transactional,to_number=2061111111", "-"},
		// Example 3: key and value before key alone; 0 blocks.
		{"example3.yaml", "edge_proxy_per_ip", "remote_address=50.0.0.1", "edge_proxy_per_ip-remote_address 10/second fw"},
		{"example3.yaml", "edge_proxy_per_ip", "remote_address=50.0.0.5", "edge_proxy_per_ip-remote_address_50_0_0_5 0/second fw"},
		// Example 4: the request's depth must be the configuration's.
		{"example4a.yaml", "example4", "key=value,subkey=subvalue", "-"},
		{"example4a.yaml", "example4", "key=value", "example4-key_value 300/second fw"},
		{"example4b.yaml", "example4", "key=value,subkey=subvalue", "example4-key_value-subkey 300/second fw"},
		{"example4b.yaml", "example4", "key=value", "-"},
		// Example 5: unlimited.
		{"example5.yaml", "internal", "ldap=alice", "internal-ldap unlimited"},
		{"example5.yaml", "internal", "azure=x", "internal-azure 100/minute fw"},
		// Example 6: shadow mode.
		{"example6.yaml", "example6", "service=auth-service,user=user-a", "example6-service-user_user-a 10/second fw shadow"},
		{"example6.yaml", "example6", "service=auth-service,user=user-b", "example6-service-user_user-b 20/second fw"},
		{"example6.yaml", "example6", "service=auth-service,user=user-c", "-"},
		// Example 7 (replaces: see TestReplaces).
		{"example7.yaml", "example7", "key_1=value_1,user=bkthomps", "specific_limit 5/second fw"},
		{"example7.yaml", "example7", "key_2=value_2,user=bkthomps", "example7-key_2_value_2-user_bkthomps 10/second fw"},
		// Example 8: detailed metrics; the value still picks its rule.
		{"example8.yaml", "example8", "key1=unspecified_value", "example8-key1 10/minute fw detailed"},
		{"example8.yaml", "example8", "key1=value1", "example8-key1_value1 20/minute fw"},
		// Example 9: a wildcard value.
		{"example9.yaml", "example9", "key1=value_1", "example9-key1_value_ 20/minute fw"},
		{"example9.yaml", "example9", "key1=value", "example9-key1_value_ 20/minute fw"},
		{"example9.yaml", "example9", "key1=valu", "-"},
		{"example9.yaml", "example9", "key2=value_1", "-"},
		// The demo configuration of its docker-compose example.
		{"example.yaml", "rl", "source_cluster=proxy,destination_cluster=mock", "rl-source_cluster_proxy-destination_cluster_mock 1/minute fw"},
		{"example.yaml", "rl", "foo=foo", "rl-foo 2/minute fw"},
		{"example.yaml", "rl", "foo=foo,bar=bar", "rl-foo-bar 3/minute fw"},
		{"example.yaml", "rl", "foo=foo,bar=banned", "rl-foo-bar_banned 0/minute fw"},
		{"example.yaml", "rl", "foo=foo,baz=baz", "rl-foo-baz 1/second fw"},
		{"example.yaml", "rl", "foo=foo,baz=shady", "rl-foo-baz_shady 1/minute fw shadow"},
		{"example.yaml", "rl", "foo=foo,bay=x", "rl-foo-bay unlimited"},
		{"example.yaml", "rl", "qux=1", "rl-qux unlimited"},
		{"example.yaml", "rl", "foo=foo,bar=bar,baz=baz", "-"},
	}
	for _, tc := range cases {
		c := load(t, tc.file)
		m := c.Match(tc.domain, desc(tc.desc))
		assert.Equal(t, tc.want, describe(m), "%s %s %s", tc.file, tc.domain, tc.desc)
		if m.Limit != nil {
			assert.True(t, strings.HasPrefix(m.Key, "rl:"+tc.domain+":"), m.Key)
		} else {
			assert.Empty(t, m.Key)
		}
	}
}

// A value-less or wildcard rule gives every value its own bucket; an
// exact rule's key is its value's.
func TestKeysPerValue(t *testing.T) {
	c := load(t, "example2.yaml")
	a := c.Match("messaging", desc("message_type=marketing,to_number=2061111111"))
	b := c.Match("messaging", desc("message_type=marketing,to_number=2062222222"))
	o := c.Match("messaging", desc("to_number=2061111111"))
	assert.Same(t, a.Limit, b.Limit)
	assert.Equal(t, "rl:messaging:fw-day:message_type=marketing:to_number=2061111111", a.Key)
	assert.NotEqual(t, a.Key, b.Key)
	assert.Equal(t, "rl:messaging:fw-day:to_number=2061111111", o.Key)

	c9 := load(t, "example9.yaml")
	w1 := c9.Match("example9", desc("key1=value_1"))
	w2 := c9.Match("example9", desc("key1=value_2"))
	assert.Same(t, w1.Limit, w2.Limit)
	assert.NotEqual(t, w1.Key, w2.Key)
}

// The block list entry: every hit is refused, a check-only one passes.
func TestRequestsPerUnitZeroBlocks(t *testing.T) {
	c := load(t, "example3.yaml")
	l := c.Match("edge_proxy_per_ip", desc("remote_address=50.0.0.5")).Limit
	require.NotNil(t, l)
	assert.True(t, l.Blocks())
	assert.False(t, c.Match("edge_proxy_per_ip", desc("remote_address=50.0.0.1")).Limit.Blocks())
	fw, ok := l.Limit.(limit.FW)
	require.True(t, ok)
	r, err := fw.Eval(nil, 0, l.Cost, true)
	require.NoError(t, err)
	assert.True(t, r.Limited, "one hit")
	r, err = fw.Eval(nil, 0, 0, true)
	require.NoError(t, err)
	assert.False(t, r.Limited, "check only")
}

func TestUnlimited(t *testing.T) {
	c := load(t, "example5.yaml")
	m := c.Match("internal", desc("ldap=x"))
	require.NotNil(t, m.Limit)
	assert.True(t, m.Limit.Unlimited)
	assert.Nil(t, m.Limit.Limit, "nothing to charge")

	// requests_per_unit: 0 beside it is what envoyproxy/ratelimit reads a
	// missing one as: accepted, and still unlimited (another is refused,
	// in TestRefusals).
	c, err := Parse([]byte("domain: d\ndescriptors:\n- key: k\n  rate_limit: {unlimited: true, requests_per_unit: 0}\n"))
	require.NoError(t, err)
	m = c.Match("d", desc("k=v"))
	require.NotNil(t, m.Limit)
	assert.True(t, m.Limit.Unlimited)
	assert.Nil(t, m.Limit.Limit)
}

func TestReplaces(t *testing.T) {
	c := load(t, "example7.yaml")
	k1 := desc("key_1=value_1,user=bkthomps")
	k2 := desc("key_2=value_2,user=bkthomps")
	other := desc("key_2=value_2,user=someone")

	// Both match: the replaced one is dropped, wherever it is.
	for _, ds := range [][]Descriptor{{k1, k2}, {k2, k1}, {k1, k1, k2, other}} {
		ms := c.MatchAll("example7", ds, nil)
		require.Len(t, ms, len(ds))
		for i, m := range ms {
			if ds[i].Entries[0].Key == "key_1" {
				assert.Nil(t, m.Limit, "replaced")
				assert.Empty(t, m.Key)
			} else if ds[i].Entries[1].Value == "bkthomps" {
				require.NotNil(t, m.Limit)
				assert.Equal(t, uint32(10), m.Limit.RequestsPerUnit)
			}
		}
	}
	// Alone, the named limit applies.
	ms := c.MatchAll("example7", []Descriptor{k1, other}, nil)
	require.NotNil(t, ms[0].Limit)
	assert.Equal(t, "specific_limit", ms[0].Limit.Name)
	assert.Nil(t, ms[1].Limit)

	// MatchAll appends to out.
	prev := []Match{{Key: "x"}}
	ms = c.MatchAll("example7", []Descriptor{k1, k2}, prev)
	require.Len(t, ms, 3)
	assert.Equal(t, "x", ms[0].Key)
	assert.Nil(t, ms[1].Limit)
	assert.NotNil(t, ms[2].Limit)
}

// Replaces of a limit that is itself replaced still count, and an unnamed
// limit is never replaced (envoyproxy/ratelimit's rules).
func TestReplacesMutual(t *testing.T) {
	c, err := Parse([]byte(`
domain: d
descriptors:
  - key: a
    rate_limit: {name: la, unit: second, requests_per_unit: 1, replaces: [{name: lb}]}
  - key: b
    rate_limit: {name: lb, unit: second, requests_per_unit: 1, replaces: [{name: la}]}
  - key: c
    rate_limit: {unit: second, requests_per_unit: 1, replaces: [{name: la}]}
`))
	require.NoError(t, err)
	ms := c.MatchAll("d", []Descriptor{desc("a=1"), desc("b=1"), desc("c=1")}, nil)
	assert.Nil(t, ms[0].Limit)
	assert.Nil(t, ms[1].Limit)
	require.NotNil(t, ms[2].Limit)
	assert.Equal(t, "d-c", ms[2].Limit.Name)
}

func TestExtensions(t *testing.T) {
	c := load(t, "extensions.yaml")
	assert.Equal(t, []string{"api", "upload"}, c.Domains())
	paris, err := limit.LoadZone("Europe/Paris")
	require.NoError(t, err)
	cases := []struct {
		desc   string
		limit  limit.Limit
		window time.Duration
		cost   uint32
	}{
		{"user=u1", limit.SWC{Limit: 60, Window: time.Minute}, time.Minute, 1},
		{"user_daily=u1", limit.CAL{Limit: 1000, Unit: limit.Day, Zone: paris}, 24 * time.Hour, 1},
		{"burst=x", limit.GCRA{MaxBurst: 19, Count: 10, Period: time.Second}, time.Second, 1},
		{"exact=x", limit.SWL{Limit: 100, Window: time.Minute}, time.Minute, 5},
	}
	for _, tc := range cases {
		m := c.Match("api", desc(tc.desc))
		require.NotNil(t, m.Limit, tc.desc)
		assert.Equal(t, tc.limit, m.Limit.Limit, tc.desc)
		assert.Equal(t, tc.window, m.Limit.Window, tc.desc)
		assert.Equal(t, tc.cost, m.Limit.Cost, tc.desc)
		assert.Contains(t, m.Key, ":"+m.Limit.Algorithm+"-"+m.Limit.Unit.String()+":", tc.desc)
	}
	g := c.Match("upload", desc("tenant=acme"))
	require.NotNil(t, g.Limit)
	assert.Equal(t, limit.GCRA{MaxBurst: 9, Count: 10, Period: time.Hour}, g.Limit.Limit, "burst defaults to requests_per_unit")
	assert.Equal(t, "Europe/Paris", c.Match("api", desc("user_daily=x")).Limit.Timezone)
	assert.Equal(t, "rl:upload:gcra-hour:tenant=acme", g.Key)
}

// The windows are envoyproxy/ratelimit's dividers.
func TestUnitWindows(t *testing.T) {
	want := map[string]time.Duration{
		"second": time.Second, "Minute": time.Minute, "HOUR": time.Hour, "day": 24 * time.Hour,
		"week": 7 * 24 * time.Hour, "month": 30 * 24 * time.Hour, "year": 365 * 24 * time.Hour,
	}
	for unit, w := range want {
		c, err := Parse([]byte("domain: d\ndescriptors:\n- key: k\n  rate_limit: {unit: " + unit + ", requests_per_unit: 3}\n"))
		require.NoError(t, err, unit)
		l := c.Match("d", desc("k=v")).Limit
		require.NotNil(t, l, unit)
		assert.Equal(t, limit.FW{Limit: 3, Window: w}, l.Limit, unit)
		assert.Equal(t, w, l.Window, unit)
		assert.Equal(t, strings.ToLower(unit), l.Unit.String())
		assert.Equal(t, l.Unit, ParseUnit(unit))
	}
	assert.Equal(t, UnitUnknown, ParseUnit("fortnight"))
}

// Wildcards: exact first, then wildcards in file order, then the key alone.
func TestWildcardPrecedence(t *testing.T) {
	c, err := Parse([]byte(`
domain: d
descriptors:
  - key: path
    rate_limit: {name: any, unit: second, requests_per_unit: 1}
  - key: path
    value: /api/*
    rate_limit: {name: api, unit: second, requests_per_unit: 2}
  - key: path
    value: /api/v2/*
    rate_limit: {name: api_v2, unit: second, requests_per_unit: 3}
  - key: path
    value: /api/v2/login
    rate_limit: {name: login, unit: second, requests_per_unit: 4}
  - key: other
    value: "*"
    rate_limit: {name: star, unit: second, requests_per_unit: 5}
`))
	require.NoError(t, err)
	for in, want := range map[string]string{
		"path=/api/v2/login": "login",
		"path=/api/v2/users": "api", // the first wildcard in the file wins, as there
		"path=/api/x":        "api",
		"path=/web":          "any",
		"other=":             "star",
		"other=anything":     "star",
		"apath=/api/x":       "-",
	} {
		got := "-"
		if l := c.Match("d", desc(in)).Limit; l != nil {
			got = l.Name
		}
		assert.Equal(t, want, got, in)
	}
}

// Keys never collide across entry boundaries, domains or algorithms, and
// never carry a hash tag a client chose.
func TestKeysUnambiguous(t *testing.T) {
	c, err := Parse([]byte(`
domain: d
descriptors:
  - key: a
    rate_limit: {unit: second, requests_per_unit: 1}
    descriptors:
      - key: b
        rate_limit: {unit: second, requests_per_unit: 1}
  - key: a:b
    rate_limit: {unit: second, requests_per_unit: 1}
    descriptors:
      - key: c
        rate_limit: {unit: second, requests_per_unit: 1}
  - key: k
    rate_limit: {unit: second, requests_per_unit: 1}
---
domain: "d:fw"
descriptors:
  - key: k
    rate_limit: {unit: second, requests_per_unit: 1}
`))
	require.NoError(t, err)
	seen := map[string]string{}
	add := func(domain, d string, ds Descriptor) {
		m := c.Match(domain, ds)
		require.NotNil(t, m.Limit, d)
		if prev, ok := seen[m.Key]; ok {
			t.Errorf("%s and %s share key %q", prev, d, m.Key)
		}
		seen[m.Key] = d
		assert.NotContains(t, m.Key, "{", d)
		assert.NotContains(t, m.Key, "}", d)
	}
	add("d", "a+b:c", Descriptor{Entries: []Entry{{"a", ""}, {"b", "c"}}})
	add("d", "a:b+c", Descriptor{Entries: []Entry{{"a:b", ""}, {"c", ""}}})
	add("d", "a=b:c", Descriptor{Entries: []Entry{{"a", "b:c"}}})
	add("d", "a=b=c", Descriptor{Entries: []Entry{{"a", "b=c"}}})
	add("d", "a=b%3Ac", Descriptor{Entries: []Entry{{"a", "b%3Ac"}}})
	add("d", "a=b,b=", Descriptor{Entries: []Entry{{"a", "b"}, {"b", ""}}})
	add("d", "a=,b=b", Descriptor{Entries: []Entry{{"a", ""}, {"b", "b"}}})
	add("d", "k={tag}", Descriptor{Entries: []Entry{{"k", "{tag}"}}})
	add("d", "k=x#y", Descriptor{Entries: []Entry{{"k", "x#y"}}})
	add("d:fw", "k=v", Descriptor{Entries: []Entry{{"k", "v"}}})
	add("d", "k=v", Descriptor{Entries: []Entry{{"k", "v"}}})
	assert.Equal(t, "rl:d%3Afw:fw-second:k=v", c.Match("d:fw", desc("k=v")).Key)
}

// A long key stays within MaxKeyBytes and one bucket per descriptor.
func TestLongKeys(t *testing.T) {
	c, err := Parse([]byte("domain: d\ndescriptors:\n- key: k\n  rate_limit: {unit: second, requests_per_unit: 1}\n"))
	require.NoError(t, err)
	long := strings.Repeat("v", 2000)
	a := c.Match("d", desc("k="+long+"a")).Key
	b := c.Match("d", desc("k="+long+"b")).Key
	assert.Len(t, a, MaxKeyBytes)
	assert.Len(t, b, MaxKeyBytes)
	assert.NotEqual(t, a, b)
	assert.True(t, strings.HasPrefix(a, "rl:d:fw-second:k=vvv"))
	assert.Equal(t, byte('#'), a[MaxKeyBytes-hashedTail])
	assert.Equal(t, a, c.Match("d", desc("k="+long+"a")).Key, "stable")
	// Just at the bound: not hashed.
	exact := strings.Repeat("v", MaxKeyBytes-len("rl:d:fw-second:k="))
	assert.Equal(t, "rl:d:fw-second:k="+exact, c.Match("d", desc("k="+exact)).Key)
	assert.Len(t, c.Match("d", desc("k="+exact+"v")).Key, MaxKeyBytes)
	assert.Contains(t, c.Match("d", desc("k="+exact+"v")).Key, "#")
}

// A change of algorithm on reload is a new bucket (no WRONGTYPE); a
// change of the limit alone keeps the bucket.
func TestKeyFollowsAlgorithm(t *testing.T) {
	doc := func(extra string) *Config {
		c, err := Parse([]byte("domain: d\ndescriptors:\n- key: k\n  rate_limit: {unit: minute, requests_per_unit: 10" + extra + "}\n"))
		require.NoError(t, err)
		return c
	}
	fw := doc("").Match("d", desc("k=v")).Key
	fw2 := doc("").Match("d", desc("k=v")).Key
	gcra := doc(", algorithm: gcra").Match("d", desc("k=v")).Key
	assert.Equal(t, fw, fw2)
	assert.NotEqual(t, fw, gcra)
}

func TestOverride(t *testing.T) {
	c := load(t, "example6.yaml")
	d := desc("service=auth-service,user=user-a")
	d.Override = &Override{RequestsPerUnit: 42, Unit: Hour}
	m := c.Match("example6", d)
	require.NotNil(t, m.Limit)
	assert.Equal(t, limit.FW{Limit: 42, Window: time.Hour}, m.Limit.Limit)
	assert.False(t, m.Limit.ShadowMode, "an override is never shadow")
	assert.Equal(t, "override_42_per_hour", m.Limit.Name)
	assert.Equal(t, "rl:example6:fw-hour:service=auth-service:user=user-a", m.Key)
	d.Override = &Override{RequestsPerUnit: 1000, Unit: Second}
	assert.Equal(t, "rl:example6:fw-second:service=auth-service:user=user-a", c.Match("example6", d).Key,
		"a per-second override beside a per-hour rule counts in a bucket of its own")

	// Even for a descriptor the file does not know, in a known domain.
	d = desc("nothing=here")
	d.Override = &Override{RequestsPerUnit: 1, Unit: Second}
	assert.NotNil(t, c.Match("example6", d).Limit)
	// Not in an unknown domain.
	assert.Nil(t, c.Match("nope", d).Limit)
	// An override without a known unit is ignored.
	d = desc("service=auth-service,user=user-b")
	d.Override = &Override{RequestsPerUnit: 1}
	assert.Equal(t, uint32(20), c.Match("example6", d).Limit.RequestsPerUnit)
	// 0 refuses every hit, as in the file.
	d.Override = &Override{RequestsPerUnit: 0, Unit: Minute}
	l := c.Match("example6", d).Limit
	r, err := l.Limit.Eval(nil, 0, l.Cost, true)
	require.NoError(t, err)
	assert.True(t, r.Limited)
}

func TestEmptyDescriptor(t *testing.T) {
	c := load(t, "example1.yaml")
	assert.Nil(t, c.Match("mongo_cps", Descriptor{}).Limit)
}

// The refusals: one line, naming the document, the path and the problem.
func TestRefusals(t *testing.T) {
	const head = "domain: d\ndescriptors:\n"
	cases := []struct{ yaml, want string }{
		{"", "policy: the file holds no domain"},
		{"# just a comment\n", "policy: the file holds no domain"},
		{"descriptors: []\n", "policy: document 1, domain: config file cannot have empty domain (line 1)"},
		{"domain: ''\n", "config file cannot have empty domain"},
		{"domain: d\nfoo: 1\n", `policy: document 1 (domain "d"): unknown key "foo" (want one of domain, descriptors) (line 2)`},
		{"domain: d\ndomain: e\n", `key "domain" given twice`},
		{"domain: d\n---\ndomain: e\n---\ndomain: d\n", `policy: document 3 (domain "d"), domain: duplicate domain "d"`},
		{"domain: [a]\n", "domain: want a string, got a list"},
		{"- a\n", "want a mapping, got a list"},
		{"domain: d\ndescriptors: {}\n", "descriptors: want a list, got a mapping"},
		{head + "- value: x\n", `descriptors[0]: descriptor has empty key (line 3)`},
		{head + "- <<: {key: k}\n", `descriptors[0]: merge keys (<<) are not supported`},
		{head + "- key: [k]\n", `descriptors[0].key: want a string, got a list`},
		{head + "- key: k\n  vaule: x\n", `descriptors[0]: unknown key "vaule"`},
		{head + "- key: k\n- key: k\n", `descriptors[1]: duplicate descriptor composite key 'd.k'`},
		{head + "- key: k\n  value: v\n- key: k\n  value: v\n", `duplicate descriptor composite key 'd.k_v'`},
		{head + "- key: a\n  descriptors:\n  - key: b\n    value: c\n  - key: b\n    value: c\n", `descriptors[0].descriptors[1]: duplicate descriptor composite key 'd.a.b_c'`},
		{head + "- key: k\n  rate_limit: {unit: fortnight, requests_per_unit: 1}\n", `descriptors[0].rate_limit.unit: invalid rate limit unit 'fortnight'`},
		{head + "- key: k\n  rate_limit: {requests_per_unit: 1}\n", `descriptors[0].rate_limit.unit: invalid rate limit unit ''`},
		{head + "- key: k\n  rate_limit: {unit: second}\n", `descriptors[0].rate_limit: requests_per_unit is required`},
		{head + "- key: k\n  rate_limit: {unit: second, requests_per_unit: -1}\n", `requests_per_unit: want an integer from 0 to 4294967295, got "-1"`},
		{head + "- key: k\n  rate_limit: {unit: second, requests_per_unit: 4294967296}\n", `want an integer from 0 to 4294967295`},
		{head + "- key: k\n  rate_limit: {unit: second, requests_per_unit: ten}\n", `want an integer`},
		{head + "- key: k\n  rate_limit: {unlimited: true, unit: second}\n", `descriptors[0].rate_limit: should not specify rate limit unit when unlimited`},
		{head + "- key: k\n  rate_limit: {unlimited: true, requests_per_unit: 5}\n", `should not specify requests_per_unit when unlimited`},
		{head + "- key: k\n  rate_limit: {unlimited: true, algorithm: gcra}\n", `should not specify algorithm when unlimited`},
		{head + "- key: k\n  rate_limit: {unlimited: maybe}\n", `unlimited: want true or false, got "maybe"`},
		{head + "- key: k\n  shadow_mode: 1\n", `shadow_mode: want true or false`},
		{head + "- key: k\n  rate_limit: {name: n, unit: second, requests_per_unit: 1, replaces: [{name: n}]}\n", `replaces[0]: replaces should not contain name of same descriptor`},
		{head + "- key: k\n  rate_limit: {unit: second, requests_per_unit: 1, replaces: [{}]}\n", `replaces[0]: should not have an empty replaces entry`},
		{head + "- key: k\n  rate_limit: {unit: second, requests_per_unit: 1, replaces: [{nme: x}]}\n", `replaces[0]: unknown key "nme"`},
		{head + "- key: k\n  rate_limit: {unit: second, requests_per_unit: 1, foo: 2}\n", `descriptors[0].rate_limit: unknown key "foo"`},
		// Extensions.
		{head + "- key: k\n  rate_limit: {unit: second, requests_per_unit: 1, algorithm: leaky}\n", `algorithm: unknown algorithm "leaky"`},
		{head + "- key: k\n  rate_limit: {unit: second, requests_per_unit: 1, burst: 3}\n", `burst: burst is for algorithm gcra only`},
		{head + "- key: k\n  rate_limit: {unit: second, requests_per_unit: 1, algorithm: gcra, burst: 0}\n", `burst: want an integer from 1 to 4294967295`},
		{head + "- key: k\n  rate_limit: {unit: second, requests_per_unit: 1, timezone: UTC}\n", `timezone: timezone is for algorithm cal only`},
		{head + "- key: k\n  rate_limit: {unit: day, requests_per_unit: 1, algorithm: cal, timezone: Mars/Olympus}\n", `timezone: unknown time zone "Mars/Olympus"`},
		{head + "- key: k\n  rate_limit: {unit: hour, requests_per_unit: 1, algorithm: cal}\n", `algorithm cal counts calendar periods: want day, week, month or year, got "hour"`},
		{head + "- key: k\n  rate_limit: {unit: hour, requests_per_unit: 10001, algorithm: swl}\n", `10001 is above swl's largest limit 10000`},
		{head + "- key: k\n  rate_limit: {unit: hour, requests_per_unit: 0, algorithm: swc}\n", `requests_per_unit 0 (refuse every request) is for algorithm fw only`},
		{head + "- key: k\n  rate_limit: {unit: hour, requests_per_unit: 5, cost: 6}\n", `cost: cost 6 is above the limit's 5: every request would be refused`},
		{head + "- key: k\n  rate_limit: {unit: hour, requests_per_unit: 5, algorithm: gcra, burst: 2, cost: 3}\n", `cost 3 is above the limit's 2`},
		{head + "- key: k\n  rate_limit: {unit: hour, requests_per_unit: 5, cost: 0}\n", `cost: want an integer from 1`},
		{head + "- key: k\n  rate_limit: {unit: second, requests_per_unit: 4294967295, algorithm: gcra}\n", `rate too high`},
		{head + "- key: k\n  rate_limit: {unit: day, requests_per_unit: 1, algorithm: gcra, burst: 200000}\n", `burst 200000 at 1 per day takes longer than 36 years to drain`},
		{head + "- key: k\n  rate_limit: {unit: month, requests_per_unit: 10, algorithm: gcra, burst: 100000}\n", `takes longer than 36 years to drain`},
		{"domain: d\ndescriptors:\n- key: k\n  rate_limit: {unit: second\n", "policy: document 1: yaml:"},
		{"domain: " + strings.Repeat("x", MaxDomainBytes+1) + "\n", "domain: longer than 128 bytes"},
		// Names: one per limit in a domain, and header-safe.
		{head + "- key: a\n  rate_limit: {name: x, unit: second, requests_per_unit: 1}\n- key: b\n  rate_limit: {name: x, unit: second, requests_per_unit: 2}\n",
			`descriptors[1].rate_limit.name: name "x" given twice in the domain (first at line 4)`},
		{head + "- key: a\n  rate_limit: &r {name: x, unit: second, requests_per_unit: 1}\n- key: b\n  rate_limit: *r\n", `name "x" given twice in the domain`},
		{head + "- key: k\n  rate_limit: {name: 'a b', unit: second, requests_per_unit: 1}\n", `rate_limit.name: "a b" holds ' ': a name is printable ASCII without space`},
		{head + "- key: k\n  rate_limit: {name: 'a,b', unit: second, requests_per_unit: 1}\n", `"a,b" holds ','`},
		{head + "- key: k\n  rate_limit: {name: 'a;b', unit: second, requests_per_unit: 1}\n", `"a;b" holds ';'`},
		{head + "- key: k\n  rate_limit: {name: 'a\"b', unit: second, requests_per_unit: 1}\n", `holds '"'`},
		{head + "- key: k\n  rate_limit: {name: 'a\\b', unit: second, requests_per_unit: 1}\n", `holds '\\'`},
		{head + "- key: k\n  rate_limit: {name: \"a\\tb\", unit: second, requests_per_unit: 1}\n", `holds '\t'`},
		{head + "- key: k\n  rate_limit: {name: café, unit: second, requests_per_unit: 1}\n", `"café" holds 'é'`},
	}
	for _, tc := range cases {
		_, err := Parse([]byte(tc.yaml))
		if !assert.Error(t, err, tc.yaml) {
			continue
		}
		assert.Contains(t, err.Error(), tc.want, tc.yaml)
		assert.NotContains(t, err.Error(), "\n", "one line")
	}
}

func TestDepthBound(t *testing.T) {
	var b strings.Builder
	b.WriteString("domain: d\ndescriptors:\n")
	for i := 0; i <= MaxDepth; i++ {
		ind := strings.Repeat("  ", 2*i)
		fmt.Fprintf(&b, "%s- key: k%d\n%s  descriptors:\n", ind, i, ind)
	}
	_, err := Parse([]byte(b.String()))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "nested deeper than 32 levels")
}

// YAML 1.1 booleans load as envoyproxy/ratelimit (yaml.v2) reads them.
func TestYAML11Booleans(t *testing.T) {
	c, err := Parse([]byte("domain: d\ndescriptors:\n- key: k\n  shadow_mode: yes\n  rate_limit: {unit: second, requests_per_unit: 1}\n- key: u\n  rate_limit: {unlimited: on}\n"))
	require.NoError(t, err)
	assert.True(t, c.Match("d", desc("k=v")).Limit.ShadowMode)
	assert.True(t, c.Match("d", desc("u=v")).Limit.Unlimited)
}

// Generated names are [a-z0-9_-], unique in their domain, and short.
func TestGeneratedNames(t *testing.T) {
	long := strings.Repeat("x", 300)
	c, err := Parse([]byte(`
domain: My.Domain
descriptors:
  - key: Path
    value: /API/*
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: path
    value: /api/*
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: x
    rate_limit: {name: my_domain-path__api__, unit: second, requests_per_unit: 1}
  - key: ` + long + `
    rate_limit: {unit: second, requests_per_unit: 1}
`))
	require.NoError(t, err)
	var names []string
	for _, l := range c.Limits("My.Domain") {
		names = append(names, l.Name)
		assert.LessOrEqual(t, len(l.Name), MaxNameBytes)
		for _, r := range l.Name {
			assert.True(t, r == '_' || r == '-' || ('a' <= r && r <= 'z') || ('0' <= r && r <= '9'), l.Name)
		}
	}
	assert.Equal(t, "my_domain-path__api__-2", names[0])
	assert.Equal(t, "my_domain-path__api__-3", names[1])
	assert.Equal(t, "my_domain-path__api__", names[2])
	assert.True(t, strings.HasPrefix(names[3], "my_domain-xxxx"), names[3])
	assert.Nil(t, c.Limits("nope"))
}

func TestStatic(t *testing.T) {
	c := load(t, "example1.yaml")
	s := Static(c)
	assert.Same(t, c, s.Current())
	assert.False(t, s.Stats().LoadedAt.IsZero())
	s.Close()
	s.Close()
	assert.Same(t, c, s.Current(), "still readable after Close")
}

func TestFileTooLarge(t *testing.T) {
	_, err := Parse(make([]byte, MaxFileBytes+1))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "more than")
}

// The hot path allocates the key string and nothing else.
func TestMatchAllocations(t *testing.T) {
	c := load(t, "example7.yaml")
	ds := []Descriptor{desc("key_1=value_1,user=bkthomps"), desc("key_2=value_2,user=bkthomps"), desc("x=y")}
	out := make([]Match, 0, 4)
	allocs := testing.AllocsPerRun(100, func() { out = c.MatchAll("example7", ds, out[:0]) })
	assert.Equal(t, 2.0, allocs, "two keys (the third descriptor matches nothing)")
}

// sameNames is a policy of n rules whose generated names all sanitize to
// "d-k_aaaaaaaaaaaaaaaaaaaa", the values differing only in case, after
// explicit names taking its "-2" and "-4".
func sameNames(n int) []byte {
	var b strings.Builder
	b.WriteString("domain: d\ndescriptors:\n")
	b.WriteString("  - {key: x, rate_limit: {name: d-k_aaaaaaaaaaaaaaaaaaaa-2, unit: second, requests_per_unit: 1}}\n")
	b.WriteString("  - {key: y, rate_limit: {name: d-k_aaaaaaaaaaaaaaaaaaaa-4, unit: second, requests_per_unit: 1}}\n")
	for i := range n {
		v := []byte(strings.Repeat("a", 20))
		for j := range v {
			if i>>j&1 == 1 {
				v[j] = 'A'
			}
		}
		fmt.Fprintf(&b, "  - {key: k, value: %s, rate_limit: {unit: second, requests_per_unit: 1}}\n", v)
	}
	return []byte(b.String())
}

// Generated names that collide take the next free suffix, in file order,
// around explicit names.
func TestGeneratedNamesCollide(t *testing.T) {
	c, err := Parse(sameNames(2000))
	require.NoError(t, err)
	ls := c.Limits("d")
	require.Len(t, ls, 2002)
	seen := map[string]bool{}
	for _, l := range ls {
		require.False(t, seen[l.Name], l.Name)
		seen[l.Name] = true
	}
	const base = "d-k_aaaaaaaaaaaaaaaaaaaa"
	assert.Equal(t, base, ls[2].Name)
	assert.Equal(t, base+"-3", ls[3].Name)
	assert.Equal(t, base+"-5", ls[4].Name)
	assert.Equal(t, base+"-2002", ls[2001].Name)
}

// BenchmarkParseSameNames: rules sharing a generated name cost linear time
// (each took a walk over the suffixes before it: 16,000 such rules took 17 s).
func BenchmarkParseSameNames(b *testing.B) {
	data := sameNames(16000)
	for b.Loop() {
		if _, err := Parse(data); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkMatchAll(b *testing.B) {
	data, err := os.ReadFile("testdata/example.yaml")
	require.NoError(b, err)
	c, err := Parse(data)
	require.NoError(b, err)
	ds := []Descriptor{desc("foo=foo,bar=bar"), desc("source_cluster=proxy,destination_cluster=mock")}
	out := make([]Match, 0, 4)
	b.ReportAllocs()
	for b.Loop() {
		out = c.MatchAll("rl", ds, out[:0])
	}
}

// The examples of docs/policy.md load.
func TestDocExamples(t *testing.T) {
	data, err := os.ReadFile("../../docs/policy.md")
	require.NoError(t, err)
	_, examples, ok := strings.Cut(string(data), "## Examples")
	require.True(t, ok)
	blocks := strings.Split(examples, "```yaml\n")[1:]
	require.Len(t, blocks, 3)
	for _, b := range blocks {
		doc, _, ok := strings.Cut(b, "```")
		require.True(t, ok)
		_, err := Parse([]byte(doc))
		assert.NoError(t, err, doc)
	}
}

// Aliases cannot blow a small file up into a huge tree; used with
// measure, they load.
func TestAliasBomb(t *testing.T) {
	c, err := Parse([]byte(bomb(2)))
	require.NoError(t, err)
	assert.Equal(t, "d-level2-k3-k4-k5", c.Match("d", desc("level2=x,k3=y,k4=z,k5=w")).Limit.Name)
	// A million rules from 3 KB, against a bound lowered to 1000 (the real
	// one would take seconds under -race to reach): refused at the bound.
	defer func(n int) { maxRules = n }(maxRules)
	maxRules = 1000
	_, err = Parse([]byte(bomb(6)))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "more than 1000 descriptors in the file")
}

// bomb is a document whose descriptors, through aliases, form a tree of
// 10^levels rules.
func bomb(levels int) string {
	var b strings.Builder
	b.WriteString("domain: d\ndescriptors:\n")
	// Level 0 is written out with an anchor; every further level is 10
	// rules whose descriptors alias the level below.
	ind := "  "
	b.WriteString(ind + "- key: root\n" + ind + "  descriptors: &l0\n")
	for j := range 10 {
		fmt.Fprintf(&b, "%s    - {key: k%d, rate_limit: {unit: second, requests_per_unit: 1}}\n", ind, j)
	}
	for i := 1; i <= levels; i++ {
		fmt.Fprintf(&b, "%s- key: level%d\n%s  descriptors: &l%d\n", ind, i, ind, i)
		for j := range 10 {
			fmt.Fprintf(&b, "%s    - {key: k%d, descriptors: *l%d}\n", ind, j, i-1)
		}
	}
	return b.String()
}

// share_threshold and value_to_metric, envoyproxy/ratelimit's newer
// descriptor fields: every value a share_threshold wildcard matches
// counts in one bucket; value_to_metric is about its metrics only.
func TestShareThreshold(t *testing.T) {
	c, err := Parse([]byte(`
domain: share-threshold-test
descriptors:
  - key: files
    value: files/*
    share_threshold: true
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: path
    value: /api/*
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: tenant
    value: t*
    share_threshold: true
    value_to_metric: true
    descriptors:
      - key: user
        rate_limit: {unit: hour, requests_per_unit: 10}
`))
	require.NoError(t, err)
	m := func(s string) Match { return c.Match("share-threshold-test", desc(s)) }
	a, b := m("files=files/a.pdf"), m("files=files/b.csv")
	require.NotNil(t, a.Limit)
	assert.Equal(t, a.Key, b.Key, "one bucket for every value of the wildcard")
	assert.Equal(t, "rl:share-threshold-test:fw-hour:files=files/*", a.Key)
	assert.Equal(t, a.Key, m("files=files/*").Key, "the wildcard written out is the same bucket")
	assert.NotEqual(t, m("path=/api/a").Key, m("path=/api/b").Key, "without share_threshold, a bucket per value")
	// At an inner level: the wildcard's entry is shared, the next one not.
	x, y := m("tenant=t1,user=u"), m("tenant=t2,user=u")
	assert.Equal(t, "rl:share-threshold-test:fw-hour:tenant=t*:user=u", x.Key)
	assert.Equal(t, x.Key, y.Key)
	assert.NotEqual(t, x.Key, m("tenant=t1,user=v").Key)

	_, err = Parse([]byte("domain: d\ndescriptors:\n- key: k\n  value: v\n  share_threshold: true\n"))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "descriptors[0].share_threshold: share_threshold can only be used with wildcard values")
	_, err = Parse([]byte("domain: d\ndescriptors:\n- key: k\n  value_to_metric: sometimes\n"))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "value_to_metric: want true or false")
}

// longBomb is a document whose rules all alias one value of n bytes:
// width rules a level, each level's descriptors aliasing the level below,
// levels deep, every rule with a rate_limit (a generated name).
func longBomb(width, levels, n int) string {
	var b strings.Builder
	b.WriteString("domain: d\ndescriptors:\n")
	fmt.Fprintf(&b, "- key: root\n  value: &v %q\n  descriptors: &l0\n", strings.Repeat("A", n))
	for j := range width {
		fmt.Fprintf(&b, "    - {key: k%d, value: *v, rate_limit: {unit: second, requests_per_unit: 1}}\n", j)
	}
	for i := 1; i <= levels; i++ {
		fmt.Fprintf(&b, "- key: level%d\n  descriptors: &l%d\n", i, i)
		for j := range width {
			fmt.Fprintf(&b, "    - {key: k%d, value: *v, rate_limit: {unit: second, requests_per_unit: 1}, descriptors: *l%d}\n", j, i-1)
		}
	}
	return b.String()
}

// Aliases of one long value cannot make a small file cost gigabytes: the
// bytes of the keys and values as loaded are bounded, and refused past the
// bound at once (not after allocating the tree's names and paths).
func TestLongValueAliasBomb(t *testing.T) {
	// 2^17 rules of a 1 KiB value, 16 levels deep, from a 5 KB file: past
	// 64 MiB of scalars (before the rule budget).
	data := []byte(longBomb(2, 16, MaxEntryBytes))
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, err := Parse(data)
	runtime.ReadMemStats(&after)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "more than 67108864 bytes of keys and values in the file (YAML aliases expanded)")
	alloc := after.TotalAlloc - before.TotalAlloc
	t.Logf("%d bytes of file: %d MB allocated", len(data), alloc>>20)
	assert.Less(t, alloc, uint64(400<<20), "allocated while refusing")

	// What loads has names of at most MaxNameBytes.
	c, err := Parse([]byte(longBomb(2, 3, MaxEntryBytes)))
	require.NoError(t, err)
	for _, l := range c.Limits("d") {
		assert.LessOrEqual(t, len(l.Name), MaxNameBytes)
	}
}

// Keys and values are at most MaxEntryBytes.
func TestEntryBounds(t *testing.T) {
	_, err := Parse([]byte(longBomb(1, 1, MaxEntryBytes+1)))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "descriptors[0].value: longer than 1024 bytes")
	_, err = Parse([]byte("domain: d\ndescriptors:\n- key: " + strings.Repeat("k", MaxEntryBytes+1) + "\n"))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "descriptors[0].key: longer than 1024 bytes")

}

// Domains without descriptors cost no rule, but a file holds at most
// MaxDocuments documents (empty ones included).
func TestDocumentBound(t *testing.T) {
	var b strings.Builder
	for i := range MaxDocuments {
		fmt.Fprintf(&b, "domain: d%d\n---\n", i)
	}
	c, err := Parse([]byte(strings.TrimSuffix(b.String(), "---\n")))
	require.NoError(t, err)
	assert.Len(t, c.Domains(), MaxDocuments)
	b.WriteString("domain: one_more\n")
	_, err = Parse([]byte(b.String()))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "policy: document 10001: more than 10000 documents (domains) in the file")
}

// Explicit names: any printable ASCII but what headers change or split;
// one name per limit within a domain, the same in two domains.
func TestExplicitNames(t *testing.T) {
	c, err := Parse([]byte(`
domain: a
descriptors:
  - key: k
    rate_limit: {name: "api/v1:read=1'", unit: second, requests_per_unit: 1}
---
domain: b
descriptors:
  - key: k
    rate_limit: {name: "api/v1:read=1'", unit: second, requests_per_unit: 1}
`))
	require.NoError(t, err)
	assert.Equal(t, "api/v1:read=1'", c.Match("a", desc("k=v")).Limit.Name)
	assert.Equal(t, "api/v1:read=1'", c.Match("b", desc("k=v")).Limit.Name)
}
