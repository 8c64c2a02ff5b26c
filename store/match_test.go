package store

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestMatch(t *testing.T) {
	cases := []struct {
		pat, s string
		ok     bool
	}{
		{"*", "anything", true},
		{"*", "", false}, // as stringmatchlen; KEYS/SCAN special-case a lone "*"
		{"", "", true},
		{"", "a", false},
		{"h?llo", "hello", true},
		{"h?llo", "hllo", false},
		{"h*llo", "heeeello", true},
		{"h*llo", "hllo", true},
		{"h[ae]llo", "hallo", true},
		{"h[ae]llo", "hillo", false},
		{"h[^e]llo", "hallo", true},
		{"h[^e]llo", "hello", false},
		{"h[a-b]llo", "hbllo", true},
		{"h[b-a]llo", "hallo", true},
		{"h[a-b]llo", "hcllo", false},
		{`h\*llo`, "h*llo", true},
		{`h\*llo`, "hello", false},
		{"user:*", "user:1", true},
		{"user:*", "users", false},
		{"a*b*c", "aXXbYYc", true},
		{"a*b*c", "aXXbYY", false},
		{"*a", "bbba", true},
		{"[abc", "a", true},
	}
	for _, c := range cases {
		assert.Equal(t, c.ok, Match([]byte(c.pat), []byte(c.s), false), "%q ~ %q", c.pat, c.s)
	}
	assert.True(t, Match([]byte("HELLO"), []byte("hello"), true))
	assert.False(t, Match([]byte("HELLO"), []byte("hello"), false))
}

// TestMatchManyStarsIsLinear: a pattern of many stars against a long
// string that it does not match ends at once, as in Redis since
// CVE-2022-36021 (exponential before: KEYS or SCAN MATCH with such a
// pattern held a shard for minutes).
func TestMatchManyStarsIsLinear(t *testing.T) {
	long := []byte(strings.Repeat("a", 60000))
	pat := []byte(strings.Repeat("*a", 30) + "b")
	assert.False(t, Match(pat, long, false))
	assert.True(t, Match([]byte(strings.Repeat("*a", 30)), long, false))
	assert.True(t, Match(pat, append(long, 'b'), false))
}

// TestMatchAgainstReference compares Match with a plain dynamic-programming
// glob over random patterns of '*', '?' and letters (Redis's one quirk
// kept: nothing matches the empty string but the empty pattern).
func TestMatchAgainstReference(t *testing.T) {
	ref := func(p, s string) bool {
		if s == "" {
			return p == ""
		}
		// m[i][j]: p[i:] matches s[j:]
		m := make([][]bool, len(p)+1)
		for i := range m {
			m[i] = make([]bool, len(s)+1)
		}
		m[len(p)][len(s)] = true
		for i := len(p) - 1; i >= 0; i-- {
			for j := len(s); j >= 0; j-- {
				switch {
				case p[i] == '*':
					m[i][j] = m[i+1][j] || (j < len(s) && m[i][j+1])
				case j < len(s) && (p[i] == '?' || p[i] == s[j]):
					m[i][j] = m[i+1][j+1]
				}
			}
		}
		return m[0][0]
	}
	rng := rand.New(rand.NewPCG(1, 2))
	pick := func(alphabet string, n int) string {
		b := make([]byte, rng.IntN(n+1))
		for i := range b {
			b[i] = alphabet[rng.IntN(len(alphabet))]
		}
		return string(b)
	}
	for range 20000 {
		p, s := pick("ab*?", 8), pick("ab", 10)
		require.Equal(t, ref(p, s), Match([]byte(p), []byte(s), false), "%q ~ %q", p, s)
	}
}
