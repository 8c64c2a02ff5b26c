package header

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func fields(fs []Field) http.Header {
	h := http.Header{}
	for _, f := range fs {
		h.Add(f.Name, f.Value)
	}
	return h
}

var now = time.Unix(1_800_000_000, 0)

func twoPolicies() *Values {
	return &Values{
		Policies: []Policy{
			{Name: "per-minute", Quota: 10, Window: time.Minute, Algorithm: "fw"},
			{Name: "per-day", Quota: 1000, Window: 24 * time.Hour, Algorithm: "cal"},
		},
		Deciding:   0,
		Remaining:  3,
		Reset:      1500 * time.Millisecond,
		ResetAfter: 1500 * time.Millisecond,
		Now:        now,
	}
}

func TestAllowedHeaders(t *testing.T) {
	h := fields(Default.Append(nil, twoPolicies()))
	assert.Equal(t, `"per-minute";q=10;w=60;cellserver-alg="fw", "per-day";q=1000;w=86400;cellserver-alg="cal"`, h.Get("RateLimit-Policy"))
	assert.Equal(t, `"per-minute";r=3;t=2`, h.Get("RateLimit")) // 1.5 s rounds up
	assert.Empty(t, h.Get("Retry-After"), "no Retry-After on a 200")
	assert.Equal(t, "10", h.Get("X-RateLimit-Limit"))
	assert.Equal(t, "3", h.Get("X-RateLimit-Remaining"))
	assert.Equal(t, "7", h.Get("X-RateLimit-Used"))
	assert.Equal(t, "1800000002", h.Get("X-RateLimit-Reset"), "GitHub's convention: epoch seconds")
	assert.Equal(t, "per-minute", h.Get("X-RateLimit-Resource"))
}

func TestLimitedHeaders(t *testing.T) {
	v := twoPolicies()
	v.Limited, v.Remaining, v.RetryAfter, v.Reset, v.ResetAfter = true, 0, 41*time.Second+time.Millisecond, 42*time.Second, 42*time.Second
	h := fields(Default.Append(nil, v))
	assert.Equal(t, "42", h.Get("Retry-After"))
	assert.Equal(t, `"per-minute";r=0;t=42`, h.Get("RateLimit"), "t is never later than Retry-After")
	assert.Equal(t, "10", h.Get("X-RateLimit-Used"))
}

func TestConventions(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Convention
		err  bool
	}{
		{"ietf,x", Default, false},
		{"ietf", Convention{IETF: true}, false},
		{"x-delta", Convention{X: true, XResetDelta: true}, false},
		{"none", Convention{}, false},
		{"ietf,bogus", Convention{}, true},
	} {
		c, err := ParseConvention(tc.in)
		if tc.err {
			assert.Error(t, err, tc.in)
			continue
		}
		require.NoError(t, err, tc.in)
		assert.Equal(t, tc.want, c, tc.in)
		assert.Equal(t, tc.in, c.String())
	}
	h := fields(Convention{X: true, XResetDelta: true}.Append(nil, twoPolicies()))
	assert.Equal(t, "2", h.Get("X-RateLimit-Reset"), "draft-03's delta seconds")
	assert.Empty(t, h.Get("RateLimit"))
	h = fields(Convention{IETF: true}.Append(nil, twoPolicies()))
	assert.Empty(t, h.Get("X-RateLimit-Limit"))
	assert.NotEmpty(t, h.Get("RateLimit"))
}

func TestNoPolicyNoHeaders(t *testing.T) {
	assert.Empty(t, Default.Append(nil, &Values{Deciding: -1, Now: now}))
	fs := Default.Append(nil, &Values{Deciding: -1, Limited: true, RetryAfter: 0, Now: now})
	assert.Equal(t, []Field{{"Retry-After", "1"}}, fs, "a refusal always says when to come back, at least 1 s")
}

func TestSFStringEscapes(t *testing.T) {
	assert.Equal(t, `"a\"b\\c"`, sfString("a\"b\\c\n\x7f"))
}

func TestProblemJSON(t *testing.T) {
	v := twoPolicies()
	v.Limited, v.RetryAfter = true, 30*time.Second
	var p map[string]any
	require.NoError(t, json.Unmarshal(ProblemJSON(v, []string{"per-minute"}), &p))
	assert.Equal(t, ProblemType, p["type"])
	assert.Equal(t, float64(429), p["status"])
	assert.Equal(t, []any{"per-minute"}, p["violated-policies"])
	assert.Equal(t, float64(30), p["retry-after"])
	require.NoError(t, json.Unmarshal(ProblemJSON(v, nil), &p))
	assert.Equal(t, []any{}, p["violated-policies"], "an empty array, never null")
}
