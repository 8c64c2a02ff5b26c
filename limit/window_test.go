package limit

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// windowStart must be floorDiv(at, w) * w whatever the stored start, as
// long as that start is a multiple of w: near it, far from it, before it,
// and where at - start wraps around int64 (a start far off, from a state
// imported as it was stored).
func TestWindowStartIsFloorDiv(t *testing.T) {
	rnd := rand.New(rand.NewPCG(3, 4))
	check := func(at, w, start int64) {
		t.Helper()
		want := floorDiv(at, w) * w
		require.Equal(t, want, windowStart(at, w, start, true), "at=%d w=%d start=%d", at, w, start)
		require.Equal(t, want, windowStart(at, w, start, false), "at=%d w=%d start=%d unknown", at, w, start)
	}
	for range 200_000 {
		w := 1 + rnd.Int64N(maxWindowMS)
		if rnd.IntN(2) == 0 {
			w = 1 + rnd.Int64N(120_000)
		}
		at := rnd.Int64N(1<<45) - 1<<44
		start := floorDiv(at, w) * w
		switch rnd.IntN(4) {
		case 0: // at in the stored window, the next, or the one after
			start -= w * rnd.Int64N(3)
		case 1: // at before the stored window (a clock set back)
			start += w * (1 + rnd.Int64N(3))
		case 2: // far apart, either way
			start = floorDiv(rnd.Int64N(1<<62)-1<<61, w) * w
		}
		check(at, w, start)
	}
	// at - start overflows int64 (either way) and wraps.
	w := int64(1000)
	check(math.MaxInt64/2, w, floorDiv(math.MinInt64+w, w)*w)
	check(math.MinInt64/2, w, floorDiv(math.MaxInt64-w, w)*w)
	for _, d := range []int64{0, 1, w - 1, w, w + 1, 2*w - 1, 2 * w, 3 * w} {
		check(5*w+d, w, 5*w)
	}
}

// SWC's remaining with no previous count is L - cur (after the charge), as
// the exact formula floor((L*W - cur*W) / W) gives, from an empty window
// to past the limit.
func TestSWCRemainingWithoutPrevious(t *testing.T) {
	rnd := rand.New(rand.NewPCG(5, 6))
	for range 100_000 {
		l := SWC{Limit: uint32(1 + rnd.Uint64N(math.MaxUint32)), Window: time.Duration(1+rnd.Int64N(maxWindowMS)) * time.Millisecond}
		if rnd.IntN(2) == 0 {
			l.Limit = uint32(1 + rnd.IntN(100))
		}
		w := l.Window.Milliseconds()
		lim := uint64(l.Limit)
		cur := rnd.Uint64N(lim + 3)
		if rnd.IntN(50) == 0 {
			cur = math.MaxUint64 - rnd.Uint64N(3) // a saturated merge
		}
		start := int64(7) * w
		v := swcView{w: w, start: start, at: start + rnd.Int64N(w), cur: cur}
		c := uint64(rnd.IntN(3))
		var r R5
		l.r5(&v, v.at, uint32(c), true, &r)
		if !r.Limited {
			cur = satAdd(cur, c) // the reply counts the charge it admits
		}
		var want int64
		used := mul64(cur, uint64(w))
		if lw := mul64(lim, uint64(w)); used.less(lw) {
			want = int64(lw.sub(used).div64(uint64(w)))
		}
		require.Equal(t, want, r.Remaining, "limit %d window %d cur %d", lim, w, cur)
	}
}
