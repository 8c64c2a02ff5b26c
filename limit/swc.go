package limit

import "time"

// KindSWC is the sliding-window counter.
const KindSWC Kind = 3

var swcAlgorithm = algorithm{
	kind: KindSWC, name: "SWC", label: "swc", nargs: 2,
	parse: parseSWC, decode: decodeSWC,
}

// SWC is SWC <limit> <window>: the sliding-window counter of Cloudflare and
// the seeds. Two counts per key, the previous epoch-aligned window's and the
// current one's; the previous is weighted by the share of it still inside a
// window ending now: E = prev x (W - e) / W + cur, e the time into the
// current window. The zero value is invalid.
type SWC struct {
	Limit  uint32        // the estimate must stay below Limit (see Eval), at least 1
	Window time.Duration // whole ms, 1 ms..MaxWindow
}

// Kind returns KindSWC.
func (SWC) Kind() Kind { return KindSWC }

// Validate checks Limit and Window (a RangeError in ms).
func (l SWC) Validate() error { return validateLimitWindow(l.Limit, l.Window) }

// swcView is the evaluation of an SWC key at one instant.
type swcView struct {
	w, start, at int64 // ms: window length, current window's start, evaluation instant
	prev, cur    uint64
}

// viewOf aligns the stored counts of s (found false: a missing key) to
// the window of now_ms, or of the stored window's start when the clock is
// behind it (spec §3). A state of another window length is a fresh key.
func (l SWC) viewOf(s SWCState, found bool, nowMS int64) swcView {
	v := swcView{w: l.Window.Milliseconds(), at: nowMS}
	same := found && s.WindowMS == v.w
	if same {
		v.at = max(v.at, s.StartMS)
	}
	v.start = windowStart(v.at, v.w, s.StartMS, same)
	if same {
		switch s.StartMS {
		case v.start:
			v.prev, v.cur = s.Prev, s.Cur
		case v.start - v.w:
			v.prev = s.Cur
		}
	}
	return v
}

// swcOf decodes an encoded state for an SWC limit, as fwOf does for FW.
func swcOf(state []byte) (s SWCState, found bool, err error) {
	body, err := checkState(state, KindSWC)
	if err != nil || body == nil {
		return SWCState{}, false, err
	}
	s, err = swcState(body)
	return s, err == nil, err
}

// step is SWC's whole decision on a decoded state, as FW's step is FW's:
// the R5, written to *r, and, when write, the cost is above 0 and it
// admits, the charged state and the key's expiry, the end of the window
// after the current one.
func (l SWC) step(s SWCState, found bool, now int64, cost uint32, ms, write bool, r *R5) (next SWCState, exp int64, wrote bool) {
	nowMS := floorMS(now)
	v := l.viewOf(s, found, nowMS)
	l.r5(&v, nowMS, cost, ms, r)
	if !write || r.Limited || cost == 0 {
		return SWCState{}, 0, false
	}
	return SWCState{WindowMS: v.w, StartMS: v.start, Prev: v.prev, Cur: satAdd(v.cur, uint64(cost))}, v.start + 2*v.w, true
}

// admits reports E + c - 1 < L, exactly: prev(W-e) + (cur+c)W < (L+1)W.
func (v *swcView) admits(lim, c uint64) bool {
	w := uint64(v.w)
	lhs := mul64(v.prev, uint64(v.w-(v.at-v.start))).add(mul64(satAdd(v.cur, c), w))
	return lhs.less(mul64(lim+1, w))
}

// Eval: admits iff E + cost - 1 < Limit, so that a COST 0 check is limited
// only once E >= Limit + 1 (spec §4 SWC).
func (l SWC) Eval(state []byte, now int64, cost uint32, ms bool) (R5, error) {
	s, found, err := swcOf(state)
	if err != nil {
		return R5{}, err
	}
	var r R5
	l.step(s, found, now, cost, ms, false, &r)
	return r, nil
}

// charge: Eval and AppendCharged on one reading of the state (see Limit).
func (l SWC) charge(dst, state []byte, now int64, cost uint32, ms, write bool) (R5, []byte, int64, error) {
	s, found, err := swcOf(state)
	if err != nil {
		return R5{}, dst, 0, err
	}
	var r R5
	next, exp, wrote := l.step(s, found, now, cost, ms, write, &r)
	if wrote {
		dst = next.appendTo(dst)
	}
	return r, dst, exp, nil
}

// r5 is Eval's reply for view v of the state at nowMS.
func (l SWC) r5(v *swcView, nowMS int64, cost uint32, ms bool, r *R5) {
	lim, c := uint64(l.Limit), uint64(cost)
	*r = R5{Limit: int64(lim), RetryAfter: -1}
	cur := v.cur
	if v.admits(lim, c) {
		cur = satAdd(cur, c)
	} else {
		r.Limited = true
		if c <= lim {
			r.RetryAfter = reply(v.retry(lim, c)+v.at-nowMS, ms)
		}
	}
	// Remaining is floor((L*W - used) / W), used = prev(W-e) + cur*W;
	// with no previous count (a key's first window, or one after an idle
	// window) that is L - cur, with no division.
	if w := uint64(v.w); v.prev != 0 {
		used := mul64(v.prev, uint64(v.w-(v.at-v.start))).add(mul64(cur, w))
		if lw := mul64(lim, w); used.less(lw) {
			r.Remaining = int64(lw.sub(used).div64(w))
		}
	} else if cur < lim {
		r.Remaining = int64(lim - cur)
	}
	switch {
	case cur > 0:
		r.ResetAfter = reply(v.start+2*v.w-nowMS, ms)
	case v.prev > 0:
		r.ResetAfter = reply(v.start+v.w-nowMS, ms)
	}
}

// retry is the smallest whole number of ms d >= 1 after v.at at which a
// charge of c <= lim would be admitted with no other traffic: first within
// this window as the previous count's weight falls, else in the next one
// (where cur becomes prev), else at the start of the one after.
func (v *swcView) retry(lim, c uint64) int64 {
	w := uint64(v.w)
	rem := uint64(v.w - (v.at - v.start)) // W - e >= 1
	// This window, at e+d: prev(rem-d) + (cur+c)W < (L+1)W
	// <=> d > (prev*rem - (L+1-cur-c)W) / prev.
	if cc := satAdd(v.cur, c); cc <= lim && v.prev > 0 {
		num := mul64(v.prev, rem).sub(mul64(lim+1-cc, w)) // >= 0: limited at d = 0
		if d := num.div64(v.prev) + 1; d < rem {
			return int64(d)
		}
	}
	// The next window, at e' = d - rem: cur(W-e') + cW < (L+1)W
	// <=> e' > (cur*W - (L+1-c)W) / cur.
	room := mul64(lim+1-c, w) // >= W: c <= L
	if cw := mul64(v.cur, w); v.cur == 0 || cw.less(room) {
		return int64(rem)
	} else if e2 := cw.sub(room).div64(v.cur) + 1; e2 < w {
		return int64(rem + e2)
	}
	return int64(rem + w)
}

// AppendCharged: the current count grows by cost; the key expires at the end
// of the window after the current one.
func (l SWC) AppendCharged(dst, state []byte, now int64, cost uint32) ([]byte, int64, error) {
	s, found, err := swcOf(state)
	if err != nil {
		return dst, 0, err
	}
	var r R5
	next, exp, wrote := l.step(s, found, now, cost, false, true, &r)
	if !wrote {
		return dst, 0, ErrNotAdmitted
	}
	return next.appendTo(dst), exp, nil
}

// DecideSWC is DecideFW for a call whose one limit is an SWC.
func DecideSWC(l SWC, s SWCState, found bool, now int64, cost uint32, opt Options, d *Decision, res *Result) (next SWCState) {
	next, exp, wrote := l.step(s, found, now, cost, opt.MS, charges(opt, cost), &res.R5)
	single(wrote, exp, d, res)
	return next
}

func parseSWC(raw rawLimit, ms bool) (Limit, uint32, error) {
	lim, w, cost, err := parseLimitWindow(&raw, ms)
	if err != nil {
		return nil, 0, err
	}
	return intern(internKey{kind: KindSWC, a: lim, w: w}), cost, nil
}

// SWCState is a sliding-window counter's two counts.
// Encoding (34 bytes): kind, version, WindowMS, StartMS, Prev, Cur, each 8
// bytes big-endian. The zero value is invalid (WindowMS 0).
type SWCState struct {
	WindowMS int64  // the window length W, ms (1..MaxWindow)
	StartMS  int64  // the current window's start, Unix ms, a multiple of WindowMS
	Prev     uint64 // cost charged in the window before [StartMS-W, StartMS)
	Cur      uint64 // cost charged in [StartMS, StartMS+W)
}

const swcBody = 32

// Kind returns KindSWC.
func (SWCState) Kind() Kind { return KindSWC }

// AppendBinary appends the 34-byte encoding.
func (s SWCState) AppendBinary(dst []byte) ([]byte, error) { return s.appendTo(dst), nil }

func (s SWCState) appendTo(dst []byte) []byte {
	dst = appendHeader(dst, KindSWC)
	dst = be.AppendUint64(dst, uint64(s.WindowMS))
	dst = be.AppendUint64(dst, uint64(s.StartMS))
	dst = be.AppendUint64(dst, s.Prev)
	return be.AppendUint64(dst, s.Cur)
}

func decodeSWC(body []byte) (State, error) {
	s, err := swcState(body)
	if err != nil {
		return nil, err
	}
	return s, nil
}

func swcState(body []byte) (SWCState, error) {
	if len(body) != swcBody {
		return SWCState{}, ErrCorrupt
	}
	s := SWCState{
		WindowMS: int64(be.Uint64(body)),
		StartMS:  int64(be.Uint64(body[8:])),
		Prev:     be.Uint64(body[16:]),
		Cur:      be.Uint64(body[24:]),
	}
	if !validWindowMS(s.WindowMS) || s.StartMS%s.WindowMS != 0 {
		return SWCState{}, ErrCorrupt
	}
	return s, nil
}

// fields: window_ms, window_start_ms, prev, cur.
func (s SWCState) fields() []Field {
	return []Field{{"window_ms", s.WindowMS}, {"window_start_ms", s.StartMS},
		{"prev", satInt(s.Prev)}, {"cur", satInt(s.Cur)}}
}

// merge: both states are aligned to the later window index and their counts
// added (one window apart, the earlier's current count is the later's
// previous); two or more windows apart only the later counts; other window
// lengths: see pickLater. The expiry is the end of the window after the
// kept one.
func (s SWCState) merge(other State, _ int64) (State, int64) {
	o := other.(SWCState)
	var m SWCState
	switch {
	case s.WindowMS != o.WindowMS:
		m = pickLater(s, o, s.StartMS, o.StartMS, s.WindowMS, o.WindowMS).(SWCState)
	case s.StartMS == o.StartMS:
		m = SWCState{s.WindowMS, s.StartMS, satAdd(s.Prev, o.Prev), satAdd(s.Cur, o.Cur)}
	default:
		late, early := s, o
		if o.StartMS > s.StartMS {
			late, early = o, s
		}
		m = late
		if early.StartMS == late.StartMS-late.WindowMS {
			m.Prev = satAdd(m.Prev, early.Cur)
		}
	}
	return m, m.StartMS + 2*m.WindowMS
}
