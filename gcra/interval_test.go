package gcra

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// ThrottleInterval with millis false must be Throttle itself, on every kind
// of input (fresh, existing, limited, wrapping, above MaxInt64).
func TestThrottleIntervalMatchesThrottle(t *testing.T) {
	rng := rand.New(rand.NewPCG(16, 1))
	pick := []int64{0, 1, -1, 2, 5, 15, 30, 60, 1000, 1e9, 1e10, math.MaxInt64, math.MinInt64, math.MaxInt64 / 3}
	const now = int64(1_700_000_000_000_000_000)
	for i := 0; i < 20000; i++ {
		p := Params{
			MaxBurst: pick[rng.IntN(len(pick))],
			Count:    pick[rng.IntN(len(pick))],
			Period:   pick[rng.IntN(len(pick))],
			Quantity: pick[rng.IntN(len(pick))],
		}
		tat := uint64(now + rng.Int64N(100e9) - 50e9)
		if rng.IntN(8) == 0 {
			tat = math.MaxUint64 - rng.Uint64N(1e12)
		}
		exists := rng.IntN(4) != 0
		want, err := Throttle(p, tat, exists, now)
		if err != nil {
			continue
		}
		got := ThrottleInterval(Interval(p.Count, p.Period), p, tat, exists, now, false)
		require.Equal(t, want, got, "%+v tat=%d exists=%v", p, tat, exists)
	}
}

// With millis true only the two durations change, to ms rounded up.
func TestThrottleIntervalMillis(t *testing.T) {
	const now = int64(1_700_000_000_000_000_000)
	// T = 1 ms (1 per 1000 ms), limit 3.
	p := Params{MaxBurst: 2, Quantity: 1}
	r := ThrottleInterval(1e6, p, 0, false, now, true)
	assert.Equal(t, Result{Limit: 3, Remaining: 2, RetryAfter: -1, ResetAfter: 1, Write: true, NewTAT: uint64(now + 1e6), TTLMillis: 1}, r)
	// TAT 2.5 ms ahead, τ = 3 ms, q = 1: new_tat - τ = now + 0.5 ms: limited,
	// retry 0.5 ms -> 1, reset 2.5 ms -> 3 (secs would give 0 and 0).
	r = ThrottleInterval(1e6, p, uint64(now+2_500_000), true, now, true)
	assert.Equal(t, Result{Limited: true, Limit: 3, Remaining: 0, RetryAfter: 1, ResetAfter: 3}, r)
	// 1 ns interval: reset 1 ns -> 1 ms, and the TTL truncates to 0 ms.
	r = ThrottleInterval(1, Params{MaxBurst: 1, Quantity: 1}, 0, false, now, true)
	assert.Equal(t, Result{Limit: 2, Remaining: 0, RetryAfter: -1, ResetAfter: 1, Write: true, NewTAT: uint64(now + 1)}, r)
	// Can never fit (I > τ): retry stays -1.
	r = ThrottleInterval(1e6, Params{MaxBurst: 2, Quantity: 4}, 0, false, now, true)
	assert.Equal(t, Result{Limited: true, Limit: 3, Remaining: 3, RetryAfter: -1, ResetAfter: 0}, r)
	// A TAT above MaxInt64 (wide path): exact, no saturation in ms.
	r = ThrottleInterval(1e9, Params{MaxBurst: 4, Quantity: 1}, math.MaxUint64, true, now, true)
	assert.True(t, r.Limited)
	assert.Equal(t, int64((math.MaxUint64-uint64(now)+999_999)/1e6), r.ResetAfter)
}
