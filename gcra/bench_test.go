package gcra

import (
	"math"
	"testing"
)

// sink keeps results alive so the compiler cannot drop the calls.
var sink Result

func BenchmarkThrottle(b *testing.B) {
	const now = int64(1_700_000_000_000_000_000)
	cases := []struct {
		name   string
		p      Params
		tat    uint64
		exists bool
	}{
		// Missing/expired key: tat = now.
		{"fresh", Params{MaxBurst: 15, Count: 30, Period: 60, Quantity: 1}, 0, false},
		// Existing key with room left (TAT 10 s ahead, τ = 32 s).
		{"existing", Params{MaxBurst: 15, Count: 30, Period: 60, Quantity: 1}, uint64(now + 10e9), true},
		// Exhausted key: TAT 32 s ahead, the call is limited.
		{"limited", Params{MaxBurst: 15, Count: 30, Period: 60, Quantity: 1}, uint64(now + 32e9), true},
		// TAT beyond int64 and saturated T: the widest (128-bit) values.
		{"huge", Params{MaxBurst: 15, Count: 1, Period: math.MaxInt64, Quantity: 1}, math.MaxUint64, true},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			var r Result
			for b.Loop() {
				r, _ = Throttle(c.p, c.tat, c.exists, now)
			}
			sink = r
		})
	}
}
