package header

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/cellserver/cellserver/limit"
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

// X-RateLimit-Reset is the reset instant rounded up, not now's second plus
// the rounded duration: at that second the quota is back.
func TestResetEpochRoundsTheInstant(t *testing.T) {
	v := twoPolicies()
	v.Now = now.Add(900 * time.Millisecond)
	v.Limited, v.RetryAfter, v.ResetAfter = true, 59100*time.Millisecond, 59100*time.Millisecond
	h := fields(Default.Append(nil, v))
	assert.Equal(t, "60", h.Get("Retry-After"))
	assert.Equal(t, "1800000060", h.Get("X-RateLimit-Reset"), "now+59.1 s = ...60.0")
	v.ResetAfter, v.RetryAfter = 59200*time.Millisecond, 59200*time.Millisecond
	assert.Equal(t, "1800000061", fields(Default.Append(nil, v)).Get("X-RateLimit-Reset"))
}

func TestUntilMore(t *testing.T) {
	at := time.UnixMilli(1_800_000_045_000) // 45 s into a minute
	assert.Zero(t, UntilMore(limit.FW{Limit: 10, Window: time.Minute}, 10, 0, at), "nothing used")
	assert.Equal(t, 15*time.Second, UntilMore(limit.FW{Limit: 10, Window: time.Minute}, 3, 15*time.Second, at))
	// SWC: the current window ends in 15 s, though its state lasts 75 s.
	assert.Equal(t, 15*time.Second, UntilMore(limit.SWC{Limit: 10, Window: time.Minute}, 0, 75*time.Second, at))
	// GCRA 6 a minute (T = 10 s), burst 3: 2 used, state 20 s: one back in 10 s.
	g := limit.GCRA{MaxBurst: 2, Count: 6, Period: time.Minute}
	assert.Equal(t, 10*time.Second, UntilMore(g, 1, 20*time.Second, at))
	assert.Equal(t, 8*time.Second, UntilMore(g, 1, 18*time.Second, at))
	assert.Equal(t, 30*time.Second, UntilMore(limit.SWL{Limit: 5, Window: time.Minute}, 4, 30*time.Second, at))
}

// The decision's instant has nanoseconds; the limits count from its whole
// millisecond: a window ending at a whole second is reset at that second.
func TestResetEpochFromTheMillisecond(t *testing.T) {
	v := twoPolicies()
	v.Now = now.Add(700*time.Millisecond + 123456) // ...000.700123456
	v.ResetAfter = 59300 * time.Millisecond        // the window ends at ...060.000
	assert.Equal(t, "1800000060", fields(Default.Append(nil, v)).Get("X-RateLimit-Reset"))
}
