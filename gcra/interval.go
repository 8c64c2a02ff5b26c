package gcra

// ThrottleInterval is [Throttle] for a caller that has already worked out the
// emission interval t, in ns (t != 0; see [Interval]), and that may want the
// reply's durations in milliseconds. It exists for CL.LIMIT ... GCRA, whose
// period may be given in milliseconds (so t is not Interval(count, period)
// of whole seconds) and whose MS option reports milliseconds
// (spec/cl-limit.md §4).
//
// p.Count and p.Period are ignored; p.MaxBurst and p.Quantity are used as
// Throttle uses them. With millis false the result is exactly Throttle's for
// the same interval. With millis true, RetryAfter (when not -1) and
// ResetAfter are the same exact durations in whole milliseconds rounded up
// (toward +Inf) instead of secs(); every other field is unchanged.
func ThrottleInterval(t int64, p Params, tat uint64, exists bool, now int64, millis bool) Result {
	limit := p.MaxBurst + 1
	tau := t * limit
	inc := t * p.Quantity
	var r Result
	if !millis && (!exists || tat <= maxInt64) {
		tat64 := now
		if exists {
			tat64 = int64(tat)
		}
		if throttle64(&r, t, limit, tau, inc, tat64, now) {
			return r
		}
	}
	throttleWide(&r, t, limit, tau, inc, tat, exists, now)
	if !millis {
		return r
	}
	// The same exact values throttleWide used, converted with ms rounding.
	nowX := i128(now)
	tatX := nowX
	if exists {
		tatX = u128(tat)
	}
	base := tatX
	if nowX.cmp(tatX) > 0 {
		base = nowX
	}
	newTat := base.add(i128(inc))
	if r.Limited {
		if inc <= tau {
			r.RetryAfter = millisCeil(newTat.sub(i128(tau)).sub(nowX)) // -diff
		}
		r.ResetAfter = millisCeil(tatX.sub(nowX))
	} else {
		r.ResetAfter = millisCeil(newTat.sub(nowX))
	}
	return r
}

// millisCeil converts d ns to whole milliseconds, rounding toward +Inf and
// saturating at the int64 bounds.
func millisCeil(d int128) int64 {
	q, r := d.quoRem(nsPerMillisecond)
	s := q.sat64()
	if r > 0 && s != maxInt64 {
		s++
	}
	return s
}
