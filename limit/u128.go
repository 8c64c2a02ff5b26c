package limit

import "math/bits"

// u128 is an unsigned 128-bit integer, for the sliding-window counter's
// exact comparisons: a count (up to 2^64 once merged states add up) times
// a window (up to 2^35 ms) needs 99 bits.
type u128 struct{ hi, lo uint64 }

// mul64 returns a * b exactly.
func mul64(a, b uint64) u128 {
	hi, lo := bits.Mul64(a, b)
	return u128{hi, lo}
}

// add returns a + b; the callers' values stay below 2^101, far from a carry
// out of 128 bits.
func (a u128) add(b u128) u128 {
	lo, c := bits.Add64(a.lo, b.lo, 0)
	hi, _ := bits.Add64(a.hi, b.hi, c)
	return u128{hi, lo}
}

// sub returns a - b for a >= b.
func (a u128) sub(b u128) u128 {
	lo, c := bits.Sub64(a.lo, b.lo, 0)
	hi, _ := bits.Sub64(a.hi, b.hi, c)
	return u128{hi, lo}
}

// less reports a < b.
func (a u128) less(b u128) bool { return a.hi < b.hi || (a.hi == b.hi && a.lo < b.lo) }

// div64 returns floor(a / d), saturated at MaxUint64 when the quotient does
// not fit (d > 0).
func (a u128) div64(d uint64) uint64 {
	if a.hi >= d {
		return ^uint64(0)
	}
	q, _ := bits.Div64(a.hi, a.lo, d)
	return q
}
