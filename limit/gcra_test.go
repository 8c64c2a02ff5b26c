package limit

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/cellserver/cellserver/gcra"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// CL.LIMIT ... GCRA b c p is CL.THROTTLE k b c p, reply and state, for every
// in-range argument and any stored TAT.
func TestGCRAIsThrottle(t *testing.T) {
	rng := rand.New(rand.NewPCG(16, 5))
	pick := func(vals ...int64) int64 { return vals[rng.IntN(len(vals))] }
	for range 20000 {
		p := gcra.Params{
			MaxBurst: pick(0, 1, 4, 15, 1000, MaxValue, rng.Int64N(MaxValue)),
			Count:    pick(1, 2, 30, 1000, 1e9, MaxValue, 1+rng.Int64N(MaxValue)),
			Period:   pick(1, 2, 60, 3600, 31622400, 1+rng.Int64N(31622400)),
			Quantity: pick(0, 1, 2, 7, MaxValue, rng.Int64N(MaxValue)),
		}
		l := GCRA{MaxBurst: uint32(p.MaxBurst), Count: uint32(p.Count), Period: time.Duration(p.Period) * time.Second}
		if gcra.Interval(p.Count, p.Period) == 0 {
			require.Equal(t, ErrRateTooHigh, l.Validate())
			continue
		}
		require.Equal(t, gcra.Interval(p.Count, p.Period), l.Interval())
		now := t0 + rng.Int64N(1e12)
		var state []byte
		tat, exists := uint64(0), rng.IntN(3) > 0
		if exists {
			tat = uint64(now + rng.Int64N(200e9) - 100e9)
			if rng.IntN(10) == 0 {
				tat = rng.Uint64()
			}
			state = GCRAState{tat}.appendTo(nil)
		}
		want, err := gcra.Throttle(p, tat, exists, now)
		require.NoError(t, err)
		got, err := l.Eval(state, now, uint32(p.Quantity), false)
		require.NoError(t, err)
		require.Equal(t, R5{want.Limited, want.Limit, want.Remaining, want.RetryAfter, want.ResetAfter}, got, "%+v tat %d", p, tat)
		if got.Limited || p.Quantity == 0 {
			continue
		}
		enc, exp, err := l.AppendCharged(nil, state, now, uint32(p.Quantity))
		require.NoError(t, err)
		require.Equal(t, GCRAState{want.NewTAT}.appendTo(nil), enc)
		if want.Expiry == gcra.ExpireAfter {
			require.Equal(t, floorMS(now)+want.TTLMillis, exp)
		} else {
			require.Equal(t, floorMS(now), exp, "a TAT in the past expires now")
		}
	}
}

func TestGCRASteps(t *testing.T) {
	// The spec's g:1 example, then in ms.
	runSteps(t, GCRA{MaxBurst: 15, Count: 30, Period: time.Minute}, false, []step{
		{at: t0, cost: 1, want: r5(0, 16, 15, -1, 2), pttl: pt(2000)},
		{at: t0, cost: 0, want: r5(0, 16, 15, -1, 2), pttl: pt(2000), note: "COST 0 writes nothing"},
		{at: t0, cost: 17, want: r5(1, 16, 15, -1, 2), note: "can never fit"},
		{at: t0, cost: 15, want: r5(0, 16, 0, -1, 32), pttl: pt(32000)},
		{at: t0, cost: 1, want: r5(1, 16, 0, 2, 32)},
		{at: sec(-3), cost: 1, want: r5(1, 16, 0, 5, 35), note: "clock back: as CL.THROTTLE"},
	})
	runSteps(t, GCRA{MaxBurst: 15, Count: 30, Period: time.Minute}, true, []step{
		{at: t0, cost: 3, want: r5(0, 16, 13, -1, 6000), pttl: pt(6000)},
		{at: t0, cost: 13, want: r5(0, 16, 0, -1, 32000)},
		{at: msec(1), cost: 1, want: r5(1, 16, 0, 1999, 31999), note: "ms, not secs()"},
		{at: msec(1) + 1, cost: 1, want: r5(1, 16, 0, 1999, 31999), note: "ns rounded up to ms"},
	})
	// A 1 ns interval: TTL 0 ms, reset 1 ms.
	runSteps(t, GCRA{MaxBurst: 1, Count: 1000000, Period: time.Millisecond}, true, []step{
		{at: t0, cost: 1, want: r5(0, 2, 0, -1, 1), pttl: pt(0)},
	})
}

// cost x T wraps past MaxInt64 (CL.THROTTLE's arithmetic is kept): the new
// TAT lies in the past, and the key expires at once instead of being kept
// without a TTL as CL.THROTTLE keeps it.
func TestGCRAWrapExpiresNow(t *testing.T) {
	l := GCRA{MaxBurst: 0, Count: 1, Period: 10 * time.Second} // T = 1e10 ns
	const cost = 1_000_000_000                                 // T x cost = 1e19 > MaxInt64
	want, err := gcra.Throttle(gcra.Params{MaxBurst: 0, Count: 1, Period: 10, Quantity: cost}, 0, false, t0)
	require.NoError(t, err)
	require.True(t, want.Write)
	require.Equal(t, gcra.ExpireError, want.Expiry)
	r, err := l.Eval(nil, t0, cost, false)
	require.NoError(t, err)
	assert.False(t, r.Limited)
	_, exp, err := l.AppendCharged(nil, nil, t0, cost)
	require.NoError(t, err)
	assert.Equal(t, floorMS(t0), exp)
}
