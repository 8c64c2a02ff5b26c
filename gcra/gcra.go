// Package gcra is the pure arithmetic of redis-cell's CL.THROTTLE: the
// generic cell rate algorithm exactly as brandur/redis-cell v0.4.0/v0.5.0
// computes it, including its wrap-around on absurd inputs
// (spec/cl-throttle.md §2-§4).
//
// The package has no clock, no I/O, no locks and does not allocate. As in
// golang.org/x/time/rate, time is a parameter: every instant is an int64
// count of nanoseconds since the Unix epoch, supplied by the caller. The
// caller reads the key, calls [Throttle] and, when [Result.Write] is set,
// stores [Result.NewTAT] and applies [Result.Expiry].
//
// # Arithmetic
//
// Steps 1-4 of spec §2.1 use int64 exactly as the Rust module does in release
// mode: T comes from a float division that saturates, and limit, τ and the
// increment wrap (two's complement, like Go's native int64).
//
// Steps 7-11 (new TAT, allow-at, diff, ttl, next) are computed exactly in
// 128-bit integers (int128.go). The inputs are a u64 TAT, an int64 now and
// int64 τ/increment, so every intermediate value is below 2^67 in magnitude
// and 128 bits can never overflow. Only the stored TAT is reduced modulo
// 2^64, as the module does. A fast path (throttle64) does the same steps in
// plain int64 with overflow detection and falls back to the 128-bit path
// (throttleWide) when the stored TAT exceeds MaxInt64 or any intermediate
// value would overflow; the two paths are cross-checked in the tests.
//
// # Conversions of huge values
//
// Worked out from spec §3/§4 and checked against every conformance vector:
//
//   - reset_after and retry_after use secs(): whole seconds truncated toward
//     zero, plus 1 if the signed sub-second remainder is >= 1 ms. So positive
//     durations round up once a millisecond is reached, and negative durations
//     simply truncate (-0.5 s -> 0, -1.5 s -> -1). The spec describes the
//     module's internal float64(whole)+float64(frac)/1e9; for |d| < 2^52 s
//     that is identical to the integer rule, and |d| < 2^67 ns < 2^38 s here,
//     so the integer rule is exact for every reachable input. The largest
//     reachable values (a TAT near 2^64 ns read at 2023) are about 9.2e9 s,
//     far inside int64.
//   - remaining = float64(trunc(next/1µs)) / float64(trunc(T/1µs)), then
//     truncated and saturated like Rust's `f64 as i64` ([satF64]): NaN -> 0,
//     +Inf or >= 2^63 -> MaxInt64, < -2^63 -> MinInt64. The µs numerator is
//     below 2^57, converted with one correct rounding (ties to even).
//   - The TTL in ms is trunc(ttl/1ms) (toward zero). On the allowed path
//     diff >= 0 implies ttl <= τ <= MaxInt64, and new_tat >= now+increment
//     implies ttl >= MinInt64, so ttl always fits int64 and the ms value lies
//     within ±9.3e12. With now_ms = floor(now/1e6) also within ±9.3e12,
//     now_ms + TTLMillis can never overflow int64: the expire time cannot
//     overflow, and no clamping is needed or done.
//   - ms == -1 maps to [ExpireNever] and ms <= -2 to [ExpireError], as
//     RedisModule_SetExpire does on Redis 7 (REDISMODULE_NO_EXPIRE is -1;
//     other negative values are rejected after the value was written).
package gcra

import (
	"errors"
	"math"
	"math/bits"
)

const (
	maxInt64 = math.MaxInt64
	minInt64 = math.MinInt64

	nsPerSecond      = int64(1_000_000_000)
	nsPerMillisecond = int64(1_000_000)
	nsPerMicrosecond = int64(1_000)
)

// Params holds the parsed numeric arguments of one CL.THROTTLE call. No range
// checks apply: zero and negative values are legal and wrap like redis-cell.
type Params struct {
	MaxBurst int64 // max_burst; the limit is MaxBurst+1 (wrapping)
	Count    int64 // requests allowed per Period
	Period   int64 // whole seconds
	Quantity int64 // tokens taken by this call (0 = peek, negative = refund); CL.THROTTLE defaults it to 1
}

// ErrZeroRate is returned when the emission interval works out to 0.
// CL.THROTTLE replies "Cell error: Store error: Zero rates are not supported".
var ErrZeroRate = errors.New("gcra: zero rate")

// Interval returns the emission interval T in nanoseconds for count requests
// per period seconds (spec §2.1 step 1). It returns 0 (a zero rate) when
// count or period is 0, or when the quotient truncates to 0.
//
// T = satF64(trunc(float64(period·10⁹) / float64(count))). The product
// period·10⁹ is formed exactly (it needs up to 94 bits) and rounded once to
// float64, like Rust's `i128 as f64`; the quotient is truncated toward zero
// and saturated to the int64 range, so period >= 9223372037 s gives
// MaxInt64. T may be negative when exactly one of count and period is.
func Interval(count, period int64) int64 {
	if count == 0 || period == 0 {
		return 0
	}
	// |period| <= maxExactPeriod: period·10⁹ fits int64 and the int64 ->
	// float64 conversion is the same single rounding.
	if -maxExactPeriod <= period && period <= maxExactPeriod {
		return satF64(float64(period*nsPerSecond) / float64(count))
	}
	return satF64(periodNanosFloat(period) / float64(count))
}

// maxExactPeriod is the largest period whose ns count fits int64.
const maxExactPeriod = maxInt64 / nsPerSecond

// periodNanosFloat returns period·10⁹, computed exactly and then rounded
// once to the nearest float64.
func periodNanosFloat(period int64) float64 {
	m := uint64(period)
	if period < 0 {
		m = -m // also right for MinInt64: 2^63
	}
	hi, lo := bits.Mul64(m, uint64(nsPerSecond))
	f := u128ToFloat64(hi, lo)
	if period < 0 {
		f = -f
	}
	return f
}

// satF64 converts f to int64 like Rust's `f64 as i64`: truncation toward
// zero, NaN -> 0, +Inf and values >= 2^63 -> MaxInt64, -Inf and values
// < -2^63 -> MinInt64. (Go's int64(f) is implementation-defined outside the
// int64 range, so the bounds are checked explicitly.)
func satF64(f float64) int64 {
	switch {
	case f != f:
		return 0
	case f >= 0x1p63:
		return maxInt64
	case f < -0x1p63:
		return minInt64
	}
	return int64(f)
}

// secs64 is secs for an int64 duration (same rule, constant divisors).
func secs64(d int64) int64 {
	s := d / nsPerSecond
	if d%nsPerSecond >= nsPerMillisecond {
		s++
	}
	return s
}

// secs converts a duration in ns to the whole seconds redis-cell replies with
// (spec §3): truncate toward zero, then add 1 if the remainder, which has the
// sign of d, is at least 1 ms. Examples: 2.0 s -> 2, 3.9 s -> 4,
// 0.999999999 s -> 1, 1.0004 s -> 1, 0.0005 s -> 0, -0.5 s -> 0,
// -1.5 s -> -1. The result saturates at the int64 bounds (unreachable for
// the values Throttle produces, which are below 2^38 s).
func secs(d int128) int64 {
	q, r := d.quoRem(nsPerSecond)
	s := q.sat64()
	if r >= nsPerMillisecond && s != maxInt64 {
		s++
	}
	return s
}

// MaxTTLMillis is the largest TTLMillis Throttle returns with ExpireAfter:
// on the allowed path the TTL is at most τ, an int64 count of ns, so a key's
// expiry is never more than MaxInt64 ns (about 292 years) after the call's
// clock.
const MaxTTLMillis = maxInt64 / nsPerMillisecond

// ExpiryKind says what the caller must do with the key's TTL when
// [Result.Write] is true.
type ExpiryKind uint8

const (
	// ExpireAfter: set the key to expire at now_ms + Result.TTLMillis, where
	// now_ms = floor(now/1e6) is the call's clock in whole ms. TTLMillis >= 0;
	// 0 means the key expires as soon as the clock's millisecond moves on.
	ExpireAfter ExpiryKind = iota
	// ExpireNever: the TTL in ms worked out to -1 (REDISMODULE_NO_EXPIRE):
	// the value is stored with no TTL and the key becomes persistent.
	ExpireNever
	// ExpireError: the TTL in ms worked out to <= -2. The value is still
	// stored with no TTL, AND the command replies with the error
	// "Cell error: Store error: Error while setting key expire" instead of
	// the array.
	ExpireError
)

// String returns the constant's name.
func (k ExpiryKind) String() string {
	switch k {
	case ExpireAfter:
		return "ExpireAfter"
	case ExpireNever:
		return "ExpireNever"
	case ExpireError:
		return "ExpireError"
	}
	return "ExpiryKind(?)"
}

// Result is the outcome of one CL.THROTTLE decision. The first five fields
// are the reply array, in order.
type Result struct {
	Limited    bool  // reply[0]: 1 if the call is limited
	Limit      int64 // reply[1]: MaxBurst+1, wrapped
	Remaining  int64 // reply[2]: quantity-1 calls still allowed after this one
	RetryAfter int64 // reply[3]: whole seconds (secs rounding); -1 when allowed or when the call can never fit
	ResetAfter int64 // reply[4]: whole seconds (secs rounding) until the limiter is full again; may be negative

	// Write is true for allowed calls: store NewTAT (replacing the value and
	// clearing any old TTL), then apply Expiry. Limited calls write nothing.
	Write bool
	// NewTAT is the value to store, ns since the Unix epoch modulo 2^64
	// (stored as a decimal u64 string). Valid when Write is true.
	NewTAT uint64
	// Expiry says how to set the TTL after storing NewTAT. Valid when Write
	// is true.
	Expiry ExpiryKind
	// TTLMillis is trunc(ttl / 1 ms), the relative expiry in ms. Only
	// meaningful when Write is true and Expiry == ExpireAfter (then >= 0);
	// for the other kinds it holds the raw negative value.
	TTLMillis int64
}

// Throttle runs one GCRA decision (spec §2.1 steps 1-12).
//
// tat and exists describe the key's current stored value: exists=false means
// the key is missing or expired, and then tat is ignored and the TAT is now.
// tat is the stored unsigned count of ns since the Unix epoch. now is the
// call's clock in Unix ns (read once per call by the caller).
//
// Throttle returns [ErrZeroRate] if the emission interval is 0; otherwise
// the error is nil. Note that [ExpireError] is not a Go error: the result
// then still has Write set and must be stored before replying with the
// expiry error.
func Throttle(p Params, tat uint64, exists bool, now int64) (r Result, err error) {
	t := Interval(p.Count, p.Period)
	if t == 0 {
		return r, ErrZeroRate
	}
	// Steps 2-4: wrapping int64, like the release-mode module.
	limit := p.MaxBurst + 1
	tau := t * limit
	inc := t * p.Quantity

	if !exists || tat <= maxInt64 {
		tat64 := now
		if exists {
			tat64 = int64(tat)
		}
		if throttle64(&r, t, limit, tau, inc, tat64, now) {
			return r, nil
		}
	}
	throttleWide(&r, t, limit, tau, inc, tat, exists, now)
	return r, nil
}

// throttle64 is the fast path of steps 5-12 in plain int64. It fills *r and
// returns true, or returns false (leaving *r to be overwritten by the
// caller's fallback, throttleWide) if any intermediate value left the int64
// range. Overflow is detected with the sign-bit rule and accumulated in
// over. When it returns true, *r is identical to throttleWide's result
// (TestFastPathMatchesWide).
func throttle64(r *Result, t, limit, tau, inc, tat, now int64) bool {
	if t == minInt64 { // -T below would overflow
		return false
	}
	base := max(now, tat)
	newTat := base + inc
	over := (base ^ newTat) & (inc ^ newTat) // < 0 iff base+inc overflowed
	allowAt := newTat - tau
	over |= (newTat ^ tau) & (newTat ^ allowAt)
	diff := now - allowAt
	over |= (now ^ allowAt) & (now ^ diff)

	*r = Result{Limit: limit, RetryAfter: -1}
	var ttl int64
	if diff < 0 {
		r.Limited = true
		if inc <= tau {
			r.RetryAfter = secs64(-diff) // meaningless (and discarded) if over < 0
		}
		ttl = tat - now
		over |= (tat ^ now) & (tat ^ ttl)
	} else {
		ttl = newTat - now
		over |= (newTat ^ now) & (newTat ^ ttl)
		r.Write = true
		r.NewTAT = uint64(newTat)
		r.TTLMillis, r.Expiry = expiryFor(ttl / nsPerMillisecond)
	}
	next := tau - ttl
	over |= (tau ^ ttl) & (tau ^ next)
	if over < 0 {
		return false
	}
	if next > -t {
		r.Remaining = satF64(float64(next/nsPerMicrosecond) / float64(t/nsPerMicrosecond))
	}
	r.ResetAfter = secs64(ttl)
	return true
}

// throttleWide is steps 5-12 in exact 128-bit arithmetic; it handles every
// input, including a stored TAT above MaxInt64.
func throttleWide(r *Result, t, limit, tau, inc int64, tat uint64, exists bool, now int64) {
	nowX := i128(now)
	tatX := nowX
	if exists {
		tatX = u128(tat)
	}
	base := tatX
	if nowX.cmp(tatX) > 0 {
		base = nowX
	}
	tauX := i128(tau)
	newTat := base.add(i128(inc))
	diff := nowX.sub(newTat.sub(tauX)) // now - allow_at

	*r = Result{Limit: limit, RetryAfter: -1}
	var ttl int128
	if diff.isNeg() {
		// Step 9: limited, nothing written.
		r.Limited = true
		if inc <= tau {
			r.RetryAfter = secs(diff.neg())
		}
		ttl = tatX.sub(nowX)
	} else {
		// Step 10: allowed. ttl fits int64 here (see package doc).
		ttl = newTat.sub(nowX)
		r.Write = true
		r.NewTAT = newTat.lo // mod 2^64
		ms, _ := ttl.quoRem(nsPerMillisecond)
		r.TTLMillis, r.Expiry = expiryFor(ms.sat64())
	}

	// Step 11: remaining.
	next := tauX.sub(ttl)
	if next.cmp(i128(t).neg()) > 0 {
		nus, _ := next.quoRem(nsPerMicrosecond)
		r.Remaining = satF64(nus.float64() / float64(t/nsPerMicrosecond))
	}
	// Step 12: reset.
	r.ResetAfter = secs(ttl)
}

// expiryFor classifies a TTL of ms milliseconds (trunc(ttl/1ms)) the way
// RedisModule_SetExpire on Redis 7 treats it.
func expiryFor(ms int64) (int64, ExpiryKind) {
	switch {
	case ms >= 0:
		return ms, ExpireAfter
	case ms == -1:
		return ms, ExpireNever
	default:
		return ms, ExpireError
	}
}
