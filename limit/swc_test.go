package limit

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestSWCSteps(t *testing.T) {
	swc := SWC{Limit: 10, Window: 10 * time.Second} // t0 is a multiple of 10 s
	low := SWC{Limit: 5, Window: 10 * time.Second}
	runSteps(t, swc, false, []step{
		{at: sec(2), cost: 10, want: r5(0, 10, 0, -1, 18), pttl: pt(18000)},
		// Full: the next window's first ms weighs prev at 9999/10000.
		{at: sec(5), cost: 1, want: r5(1, 10, 0, 6, 15), note: "retry 5001 ms"},
		{at: sec(10.001), cost: 1, want: r5(0, 10, 0, -1, 20), pttl: pt(19999), note: "E = 10*0.9999 + 0 < 10"},
		{at: sec(15), cost: 1, want: r5(0, 10, 3, -1, 15), note: "E = 5 + 2 = 7"},
		{at: sec(15), cost: 5, want: r5(1, 10, 3, 2, 15), note: "retry 1001 ms, within the window"},
		{at: sec(25), cost: 0, want: r5(0, 10, 9, -1, 5), pttl: pt(5000), note: "cur 0, prev 2: reset is the window's end"},
		{at: sec(30), cost: 0, want: r5(0, 10, 10, -1, 0), pttl: pt(0), note: "two windows on: fresh, key at its last ms"},
		{at: sec(31), cost: 7, want: r5(0, 10, 3, -1, 19), pttl: pt(19000)},
		// A limit lowered under the estimate limits even COST 0, once E >= L+1.
		{at: sec(31), cost: 0, lim: low, want: r5(1, 5, 0, 11, 19), note: "retry 10429 ms: e' > W/7"},
		{at: sec(31), cost: 0, lim: SWC{Limit: 6, Window: 10 * time.Second}, want: r5(1, 6, 0, 10, 19), note: "E = 7 = L+1"},
		{at: sec(31), cost: 0, lim: SWC{Limit: 7, Window: 10 * time.Second}, want: r5(0, 7, 0, -1, 19), note: "E = 7 < L+1"},
		// The clock goes back 2 s: evaluated at the stored window's start.
		{at: sec(29), cost: 1, want: r5(0, 10, 2, -1, 21), pttl: pt(21000)},
		// Another window: fresh.
		{at: sec(29), cost: 1, lim: SWC{Limit: 10, Window: time.Second}, want: r5(0, 10, 9, -1, 2), pttl: pt(2000)},
	})
}

func TestSWCStepsMS(t *testing.T) {
	runSteps(t, SWC{Limit: 10, Window: 4 * time.Millisecond}, true, []step{
		{at: msec(1), cost: 7, want: r5(0, 10, 3, -1, 7), pttl: pt(7)},
		// cost 5 against 5 with 7 in the window: not in this window, not in
		// the next (7*(4-e')/4 + 4 >= 5 for every e' < 4): the one after.
		{at: msec(1), cost: 5, lim: SWC{Limit: 5, Window: 4 * time.Millisecond}, want: r5(1, 5, 0, 7, 7)},
		{at: msec(8), cost: 5, lim: SWC{Limit: 5, Window: 4 * time.Millisecond}, want: r5(0, 5, 0, -1, 8), note: "7 ms later: admitted"},
	})
	// The spec's Cloudflare example at ms precision.
	runSteps(t, SWC{Limit: 50, Window: time.Minute}, true, append(repeat(step{at: sec(-30), cost: 1}, 42),
		append(repeat(step{at: sec(15), cost: 1}, 18),
			step{at: sec(15), cost: 1, want: r5(0, 50, 0, -1, 105000)},
			step{at: sec(15), cost: 1, want: r5(1, 50, 0, 715, 105000)},
			step{at: sec(15.714), cost: 1, want: r5(1, 50, 0, 1, 104286)},
			step{at: sec(15.715), cost: 1, want: r5(0, 50, 0, -1, 104285)},
		)...))
}

// repeat returns n copies of s that check nothing but that they admit.
func repeat(s step, n int) []step {
	out := make([]step, n)
	for i := range out {
		out[i] = s
		out[i].want = R5{Limited: false, Limit: -1}
	}
	return out
}

// retry_after is the smallest wait after which the same call is admitted
// with no other traffic: checked against every shorter wait.
func TestSWCRetryIsSmallest(t *testing.T) {
	rng := rand.New(rand.NewPCG(16, 3))
	checked := 0
	for range 3000 {
		w := int64(1 + rng.IntN(40))
		l := SWC{Limit: uint32(1 + rng.IntN(8)), Window: time.Duration(w) * time.Millisecond}
		var state []byte
		now := t0 + rng.Int64N(1000)*1e6
		for range rng.IntN(12) {
			now += rng.Int64N(2*w) * 1e6
			r, err := l.Eval(state, now, 1, true)
			require.NoError(t, err)
			if !r.Limited {
				state, _, err = l.AppendCharged(nil, state, now, 1)
				require.NoError(t, err)
			}
		}
		q := SWC{Limit: uint32(1 + rng.IntN(8)), Window: l.Window}
		c := uint32(rng.IntN(int(q.Limit) + 1))
		r, err := q.Eval(state, now, c, true)
		require.NoError(t, err)
		if !r.Limited {
			continue
		}
		checked++
		require.Positive(t, r.RetryAfter)
		for d := int64(1); d < r.RetryAfter; d++ {
			x, err := q.Eval(state, now+d*1e6, c, true)
			require.NoError(t, err)
			require.True(t, x.Limited, "admitted after %d ms, retry said %d", d, r.RetryAfter)
		}
		x, err := q.Eval(state, now+r.RetryAfter*1e6, c, true)
		require.NoError(t, err)
		require.False(t, x.Limited, "limited after retry %d ms", r.RetryAfter)
	}
	require.Greater(t, checked, 300)
}
