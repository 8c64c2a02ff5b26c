package policy

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// parseKey reads a key storeKey wrote (not hashed) back into its parts:
// that it can is what makes two descriptors' keys differ.
func parseKey(t *testing.T, key string) (domain, alg string, entries []Entry) {
	t.Helper()
	rest, ok := strings.CutPrefix(key, "rl:")
	require.True(t, ok, key)
	parts := strings.Split(rest, ":")
	require.GreaterOrEqual(t, len(parts), 3, key)
	domain, alg = unescape(t, parts[0]), parts[1]
	for _, p := range parts[2:] {
		k, v, ok := strings.Cut(p, "=")
		require.True(t, ok, key)
		require.NotContains(t, v, "=", key)
		entries = append(entries, Entry{unescape(t, k), unescape(t, v)})
	}
	return domain, alg, entries
}

func unescape(t *testing.T, s string) string {
	t.Helper()
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '%' {
			require.False(t, special(s[i]), "unescaped %q in %q", s[i], s)
			b.WriteByte(s[i])
			continue
		}
		require.Less(t, i+2, len(s), s)
		c, err := strconv.ParseUint(s[i+1:i+3], 16, 8)
		require.NoError(t, err)
		b.WriteByte(byte(c))
		i += 2
	}
	return b.String()
}

// Every key reads back into the domain, algorithm and entries it was made
// of, or is a hashed one of exactly MaxKeyBytes.
func FuzzKeyRoundTrip(f *testing.F) {
	f.Add("d", "a", "b:c", "", "")
	f.Add("d:x", "a:b", "", "c", "=")
	f.Add("{t}", "%3A", "#", "}", "{")
	f.Add("d", strings.Repeat("k", 600), "v", "k2", "v2")
	f.Fuzz(func(t *testing.T, domain, k1, v1, k2, v2 string) {
		entries := []Entry{{k1, v1}, {k2, v2}}
		key := storeKey("rl:"+escape(domain)+":", "gcra", entries, nil)
		if strings.Contains(key, "#") {
			assert.Len(t, key, MaxKeyBytes)
			return
		}
		assert.LessOrEqual(t, len(key), MaxKeyBytes)
		d, alg, got := parseKey(t, key)
		assert.Equal(t, domain, d)
		assert.Equal(t, "gcra", alg)
		assert.Equal(t, entries, got)
	})
}

// Parse never panics, and what it loads matches without panicking.
func FuzzParse(f *testing.F) {
	files, _ := filepath.Glob("testdata/*.yaml")
	for _, p := range files {
		data, err := os.ReadFile(p)
		require.NoError(f, err)
		f.Add(data, "k", "v")
	}
	f.Add([]byte("domain: d\ndescriptors: [{key: k, value: 'v*', rate_limit: {unit: day, requests_per_unit: 1, algorithm: cal}}]"), "k", "vv")
	f.Fuzz(func(t *testing.T, data []byte, k, v string) {
		c, err := Parse(data)
		if err != nil {
			assert.NotContains(t, err.Error(), "\n")
			return
		}
		for _, d := range c.Domains() {
			ms := c.MatchAll(d, []Descriptor{{Entries: []Entry{{k, v}}}, {Entries: []Entry{{k, v}, {k, v}}}}, nil)
			for _, m := range ms {
				if m.Limit != nil && !m.Limit.Unlimited {
					assert.NoError(t, m.Limit.Limit.Validate())
					assert.NotEmpty(t, m.Limit.Name)
				}
			}
		}
	})
}
