package store

import (
	"testing"

	"github.com/stretchr/testify/assert"
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
