package limit

import "time"

// KindFW is the fixed window.
const KindFW Kind = 2

var fwAlgorithm = algorithm{
	kind: KindFW, name: "FW", label: "fw", nargs: 2,
	parse: parseFW, decode: decodeFW,
}

// FW is FW <limit> <window>: at most Limit units of cost per window, the
// windows aligned to the Unix epoch ([iW, (i+1)W), so FW n 60 is per UTC
// minute). The zero value is invalid.
type FW struct {
	Limit  uint32        // cost allowed per window, at least 1
	Window time.Duration // whole ms, 1 ms..MaxWindow
}

// Kind returns KindFW.
func (FW) Kind() Kind { return KindFW }

// Validate checks Limit and Window (a RangeError in ms).
func (l FW) Validate() error { return validateLimitWindow(l.Limit, l.Window) }

func validateLimitWindow(lim uint32, w time.Duration) error {
	if lim == 0 {
		return &RangeError{"limit", 1, MaxValue}
	}
	if !validWindow(w) {
		return &RangeError{"window", 1, maxWindowMS}
	}
	return nil
}

// fwWindow is the window a call is evaluated in and the count already in it.
type fwWindow struct {
	w, start int64  // ms
	n        uint64 // stored count if the stored window is this one, else 0
}

// windowOf finds the window of now_ms, or of the stored window's start
// when the clock is behind it (spec §3: a clock that goes back never lowers
// a count), for the key's decoded state s (found false: a missing key). A
// state of another window length is a fresh key.
func (l FW) windowOf(s FWState, found bool, nowMS int64) fwWindow {
	x := fwWindow{w: l.Window.Milliseconds()}
	at := nowMS
	same := found && s.WindowMS == x.w
	if same {
		at = max(at, s.StartMS)
	}
	x.start = windowStart(at, x.w, s.StartMS, same)
	if same && s.StartMS == x.start {
		x.n = s.Count
	}
	return x
}

// fwOf decodes an encoded state for an FW limit: found is false for a
// missing key (nil); another kind is ErrWrongType, a bad one ErrCorrupt.
func fwOf(state []byte) (s FWState, found bool, err error) {
	body, err := checkState(state, KindFW)
	if err != nil || body == nil {
		return FWState{}, false, err
	}
	s, err = fwState(body)
	return s, err == nil, err
}

// step is FW's whole decision on a decoded state: the R5, written to *r
// (spec §4 FW: admits iff n + cost <= Limit), and, when write, the cost is
// above 0 and it admits, the charged state and the key's expiry, the
// window's end (wrote true). Every path to an FW decision (Eval,
// AppendCharged, charge, DecideFW) is this one function.
func (l FW) step(s FWState, found bool, now int64, cost uint32, ms, write bool, r *R5) (next FWState, exp int64, wrote bool) {
	nowMS := floorMS(now)
	x := l.windowOf(s, found, nowMS)
	*r = windowR5(uint64(l.Limit), x.n, uint64(cost), x.start+x.w-nowMS, ms)
	if !write || r.Limited || cost == 0 {
		return FWState{}, 0, false
	}
	return FWState{WindowMS: x.w, StartMS: x.start, Count: satAdd(x.n, uint64(cost))}, x.start + x.w, true
}

// Eval: admits iff n + cost <= Limit (spec §4 FW).
func (l FW) Eval(state []byte, now int64, cost uint32, ms bool) (R5, error) {
	s, found, err := fwOf(state)
	if err != nil {
		return R5{}, err
	}
	var r R5
	l.step(s, found, now, cost, ms, false, &r)
	return r, nil
}

// charge: Eval and AppendCharged on one reading of the state (see Limit).
func (l FW) charge(dst, state []byte, now int64, cost uint32, ms, write bool) (R5, []byte, int64, error) {
	s, found, err := fwOf(state)
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

// windowR5 is FW's and CAL's R5 for count n, a charge of c and toEnd ms
// from the real now to the window's end.
func windowR5(lim, n, c uint64, toEnd int64, ms bool) R5 {
	r := R5{Limit: int64(lim), RetryAfter: -1}
	if after := satAdd(n, c); after <= lim {
		r.Remaining = int64(lim - after)
		if after > 0 {
			r.ResetAfter = reply(toEnd, ms)
		}
		return r
	}
	r.Limited = true
	if n < lim {
		r.Remaining = int64(lim - n)
	}
	if c <= lim {
		r.RetryAfter = reply(toEnd, ms)
	}
	if n > 0 {
		r.ResetAfter = reply(toEnd, ms)
	}
	return r
}

// AppendCharged: the window's count grows by cost; the key expires at the
// window's end.
func (l FW) AppendCharged(dst, state []byte, now int64, cost uint32) ([]byte, int64, error) {
	s, found, err := fwOf(state)
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

// DecideFW is Decide for a call whose one limit is l with cost, on the
// key's state decoded (found false: the key is missing): the same
// arithmetic on the same fields (FW's step), without encoding them, for a
// store that keeps a state's fields rather than its bytes. When res.Write,
// next is the state to store (res.State is not set). It sets *d and *res
// in place.
func DecideFW(l FW, s FWState, found bool, now int64, cost uint32, opt Options, d *Decision, res *Result) (next FWState) {
	next, exp, wrote := l.step(s, found, now, cost, opt.MS, charges(opt, cost), &res.R5)
	single(wrote, exp, d, res)
	return next
}

func parseFW(raw rawLimit, ms bool) (Limit, uint32, error) {
	lim, w, cost, err := parseLimitWindow(&raw, ms)
	if err != nil {
		return nil, 0, err
	}
	return intern(internKey{kind: KindFW, a: lim, w: w}), cost, nil
}

// FWState is a fixed window's count.
// Encoding (26 bytes): kind, version, WindowMS, StartMS, Count, each 8
// bytes big-endian. The zero value is invalid (WindowMS 0).
type FWState struct {
	WindowMS int64  // the window length W, ms (1..MaxWindow)
	StartMS  int64  // the window's start, Unix ms, a multiple of WindowMS
	Count    uint64 // cost charged in the window
}

const fwBody = 24

// Kind returns KindFW.
func (FWState) Kind() Kind { return KindFW }

// AppendBinary appends the 26-byte encoding.
func (s FWState) AppendBinary(dst []byte) ([]byte, error) { return s.appendTo(dst), nil }

func (s FWState) appendTo(dst []byte) []byte {
	dst = appendHeader(dst, KindFW)
	dst = be.AppendUint64(dst, uint64(s.WindowMS))
	dst = be.AppendUint64(dst, uint64(s.StartMS))
	return be.AppendUint64(dst, s.Count)
}

func decodeFW(body []byte) (State, error) {
	s, err := fwState(body)
	if err != nil {
		return nil, err
	}
	return s, nil
}

func fwState(body []byte) (FWState, error) {
	if len(body) != fwBody {
		return FWState{}, ErrCorrupt
	}
	s := FWState{
		WindowMS: int64(be.Uint64(body)),
		StartMS:  int64(be.Uint64(body[8:])),
		Count:    be.Uint64(body[16:]),
	}
	if !validWindowMS(s.WindowMS) || s.StartMS%s.WindowMS != 0 {
		return FWState{}, ErrCorrupt
	}
	return s, nil
}

func validWindowMS(w int64) bool { return 1 <= w && w <= maxWindowMS }

// fields: window_ms, window_start_ms, count.
func (s FWState) fields() []Field {
	return []Field{{"window_ms", s.WindowMS}, {"window_start_ms", s.StartMS}, {"count", satInt(s.Count)}}
}

// merge: the same window's counts add up; of two windows the later is kept
// (the other's counts are already out of their window); other window
// lengths: see pickLater. The expiry is the kept window's end.
func (s FWState) merge(other State, _ int64) (State, int64) {
	o := other.(FWState)
	if s.WindowMS == o.WindowMS && s.StartMS == o.StartMS {
		m := FWState{s.WindowMS, s.StartMS, satAdd(s.Count, o.Count)}
		return m, m.StartMS + m.WindowMS
	}
	var m FWState
	if s.WindowMS == o.WindowMS {
		m = s
		if o.StartMS > s.StartMS {
			m = o
		}
	} else {
		m = pickLater(s, o, s.StartMS, o.StartMS, s.WindowMS, o.WindowMS).(FWState)
	}
	return m, m.StartMS + m.WindowMS
}
