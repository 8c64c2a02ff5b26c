package gcra

import (
	"math"
	"math/bits"
)

// int128 is a minimal two's-complement signed 128-bit integer, just wide
// enough for the exact arithmetic of spec §2.1 steps 7-11. Every value that
// occurs there is below 2^67 in magnitude (a u64 TAT plus or minus a few
// int64 quantities), so none of the operations below can overflow 128 bits.
//
// All methods are value-receiver, branch-light and allocation-free.
type int128 struct {
	hi int64  // high 64 bits, carries the sign
	lo uint64 // low 64 bits
}

// i128 sign-extends an int64.
func i128(v int64) int128 { return int128{hi: v >> 63, lo: uint64(v)} }

// u128 zero-extends a uint64.
func u128(v uint64) int128 { return int128{lo: v} }

func (a int128) add(b int128) int128 {
	lo, c := bits.Add64(a.lo, b.lo, 0)
	return int128{hi: a.hi + b.hi + int64(c), lo: lo}
}

func (a int128) sub(b int128) int128 {
	lo, c := bits.Sub64(a.lo, b.lo, 0)
	return int128{hi: a.hi - b.hi - int64(c), lo: lo}
}

func (a int128) neg() int128 { return int128{}.sub(a) }

// cmp returns -1, 0 or +1 as a <, ==, > b.
func (a int128) cmp(b int128) int {
	switch {
	case a.hi < b.hi:
		return -1
	case a.hi > b.hi:
		return 1
	case a.lo < b.lo:
		return -1
	case a.lo > b.lo:
		return 1
	}
	return 0
}

func (a int128) isNeg() bool { return a.hi < 0 }

// isInt64 reports whether a is representable as an int64.
func (a int128) isInt64() bool { return a.hi == int64(a.lo)>>63 }

// sat64 converts a to int64, saturating to [MinInt64, MaxInt64].
func (a int128) sat64() int64 {
	switch {
	case a.isInt64():
		return int64(a.lo)
	case a.hi < 0:
		return minInt64
	default:
		return maxInt64
	}
}

// quoRem divides a by d (d > 0), truncating toward zero like Go's / and %.
// The remainder has the sign of a. It is small enough to inline, so for the
// common int64 case a constant divisor is strength-reduced by the compiler;
// wider values take quoRemWide.
func (a int128) quoRem(d int64) (q int128, r int64) {
	if a.isInt64() {
		v := int64(a.lo)
		return i128(v / d), v % d
	}
	return a.quoRemWide(d)
}

//go:noinline
func (a int128) quoRemWide(d int64) (q int128, r int64) {
	neg := a.hi < 0
	m := a
	if neg {
		m = a.neg()
	}
	uhi, ulo, ud := uint64(m.hi), m.lo, uint64(d)
	q1 := uhi / ud
	q0, ur := bits.Div64(uhi%ud, ulo, ud)
	q = int128{hi: int64(q1), lo: q0}
	r = int64(ur)
	if neg {
		q, r = q.neg(), -r
	}
	return q, r
}

// float64 converts a to the nearest float64 (ties to even), exactly like
// Rust's `i128 as f64`.
func (a int128) float64() float64 {
	if a.isInt64() {
		return float64(int64(a.lo))
	}
	return a.float64Wide()
}

//go:noinline
func (a int128) float64Wide() float64 {
	if a.hi < 0 {
		m := a.neg() // cannot overflow: |a| < 2^127 for every value used here
		return -u128ToFloat64(uint64(m.hi), m.lo)
	}
	return u128ToFloat64(uint64(a.hi), a.lo)
}

// u128ToFloat64 converts the unsigned 128-bit value hi:lo to the nearest
// float64 (ties to even). It keeps the top 64 significant bits, ORs a sticky
// bit for everything shifted out (far below the 53-bit rounding point, so a
// single correct rounding happens in the uint64->float64 conversion), then
// scales by an exact power of two.
func u128ToFloat64(hi, lo uint64) float64 {
	if hi == 0 {
		return float64(lo)
	}
	n := uint(bits.LeadingZeros64(hi))
	s := 64 - n // bits dropped from the bottom, 1..64
	top := hi<<n | lo>>s
	if lo&(1<<s-1) != 0 {
		top |= 1
	}
	return float64(top) * pow2(s)
}

// pow2 returns 2^e for 0 <= e <= 1023.
func pow2(e uint) float64 {
	return math.Float64frombits(uint64(1023+e) << 52)
}
