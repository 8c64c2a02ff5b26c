package limit

import (
	"math"
	"time"

	"github.com/cellserver/cellserver/gcra"
)

// KindGCRA is CL.THROTTLE's generic cell rate algorithm.
const KindGCRA Kind = 1

var gcraAlgorithm = algorithm{
	kind: KindGCRA, name: "GCRA", label: "gcra", nargs: 3,
	parse: parseGCRA, decode: decodeGCRA,
}

// GCRA is CL.LIMIT's GCRA <max_burst> <count> <period>: CL.THROTTLE's
// arithmetic (package gcra) with quantity = cost, sharing CL.THROTTLE's state,
// so that CL.LIMIT ... GCRA 15 30 60 replies exactly what
// CL.THROTTLE k 15 30 60 does (spec §4). The zero value is invalid (Count 0).
type GCRA struct {
	MaxBurst uint32        // requests allowed at once beyond the first; the limit is MaxBurst+1
	Count    uint32        // requests per Period, at least 1
	Period   time.Duration // at least 1 ms, at most MaxWindow
}

// Kind returns KindGCRA.
func (GCRA) Kind() Kind { return KindGCRA }

// Interval returns the emission interval T in ns, CL.THROTTLE's
// trunc(float64(period_ns) / float64(count)) (cl-throttle.md §2.1 step 1);
// 0 for an invalid limit or a rate above one request a ns.
func (l GCRA) Interval() int64 {
	if l.Count == 0 || l.Period <= 0 || l.Period > MaxWindow {
		return 0
	}
	return int64(float64(l.Period) / float64(l.Count))
}

// Validate checks Count, Period (whole ms, 1 ms..MaxWindow; a RangeError in
// ms) and the emission interval.
func (l GCRA) Validate() error {
	switch {
	case l.Count == 0:
		return &RangeError{"count", 1, MaxValue}
	case !validWindow(l.Period):
		return &RangeError{"period", 1, maxWindowMS}
	case l.Interval() == 0:
		return ErrRateTooHigh
	}
	return nil
}

// Eval is CL.THROTTLE's decision with quantity cost (see Limit.Eval).
func (l GCRA) Eval(state []byte, now int64, cost uint32, ms bool) (R5, error) {
	tat, found, err := gcraOf(state)
	if err != nil {
		return R5{}, err
	}
	var r R5
	_, _, _, err = l.step(tat, found, now, cost, ms, false, &r)
	return r, err
}

// AppendCharged appends the new TAT. The expiry is CL.THROTTLE's,
// now_ms + trunc(ttl / 1 ms); where CL.THROTTLE would store the TAT without
// a TTL (a TAT below now, reachable only through the wrap-around of
// max_burst x T or cost x T on absurd parameters), the key expires at now_ms
// instead: a TAT in the past carries no debt, and a key kept forever would
// be a leak.
func (l GCRA) AppendCharged(dst, state []byte, now int64, cost uint32) ([]byte, int64, error) {
	tat, found, err := gcraOf(state)
	if err != nil {
		return dst, 0, err
	}
	var r R5
	next, exp, wrote, err := l.step(tat, found, now, cost, false, true, &r)
	if err != nil {
		return dst, 0, err
	}
	if !wrote {
		return dst, 0, ErrNotAdmitted
	}
	return next.appendTo(dst), exp, nil
}

// gcraOf decodes an encoded state for a GCRA limit, as fwOf does for FW:
// the TAT, found false for a missing key.
func gcraOf(state []byte) (tat uint64, found bool, err error) {
	body, err := checkState(state, KindGCRA)
	if err != nil || state == nil {
		return 0, false, err
	}
	if len(body) != gcraBody {
		return 0, false, ErrCorrupt
	}
	return be.Uint64(body), true, nil
}

// step is GCRA's whole decision on a TAT (found false: a missing key),
// as FW's step is FW's: CL.THROTTLE's reply with quantity cost, written to
// *r (the zero R5 with an error), and, when write, the cost is above 0 and
// it admits, the new TAT and the key's expiry (see AppendCharged). One
// gcra call gives both: its ms option changes the reply's durations only.
func (l GCRA) step(tat uint64, found bool, now int64, cost uint32, ms, write bool, r *R5) (next GCRAState, exp int64, wrote bool, err error) {
	t := l.Interval()
	if t == 0 {
		*r = R5{}
		return GCRAState{}, 0, false, ErrRateTooHigh
	}
	p := gcra.Params{MaxBurst: int64(l.MaxBurst), Quantity: int64(cost)}
	g := gcra.ThrottleInterval(t, p, tat, found, now, ms)
	*r = R5{g.Limited, g.Limit, g.Remaining, g.RetryAfter, g.ResetAfter}
	if !write || !g.Write || cost == 0 {
		return GCRAState{}, 0, false, nil
	}
	exp = floorMS(now)
	if g.Expiry == gcra.ExpireAfter {
		exp += g.TTLMillis
	}
	return GCRAState{g.NewTAT}, exp, true, nil
}

// DecideGCRA is DecideFW for a call whose one limit is a GCRA, on the
// key's TAT. With an error (ErrRateTooHigh) res does not write.
func DecideGCRA(l GCRA, s GCRAState, found bool, now int64, cost uint32, opt Options, d *Decision, res *Result) (next GCRAState, err error) {
	next, exp, wrote, err := l.step(s.TAT, found, now, cost, opt.MS, charges(opt, cost), &res.R5)
	single(wrote, exp, d, res)
	return next, err
}

// parseGCRA: max_burst, count, period, then cost, then the interval.
func parseGCRA(raw rawLimit, ms bool) (Limit, uint32, error) {
	burst, err := parseRange(raw.args[0], "max_burst", 0, MaxValue)
	if err != nil {
		return nil, 0, err
	}
	count, err := parseRange(raw.args[1], "count", 1, MaxValue)
	if err != nil {
		return nil, 0, err
	}
	period, err := parseWindow(raw.args[2], "period", ms)
	if err != nil {
		return nil, 0, err
	}
	cost, err := raw.parseCost()
	if err != nil {
		return nil, 0, err
	}
	l := GCRA{MaxBurst: uint32(burst), Count: uint32(count), Period: period}
	if l.Interval() == 0 {
		return nil, 0, ErrRateTooHigh
	}
	return intern(internKey{kind: KindGCRA, a: l.MaxBurst, b: l.Count, w: l.Period}), cost, nil
}

// GCRAState is CL.THROTTLE's state: the theoretical arrival time.
// Encoding: kind, version, TAT (8 bytes, big-endian).
//
// The zero value is a TAT in 1970: a key with no debt.
type GCRAState struct {
	TAT uint64 // ns since the Unix epoch (CL.THROTTLE's stored u64; GET returns it)
}

const gcraBody = 8

// Kind returns KindGCRA.
func (GCRAState) Kind() Kind { return KindGCRA }

// AppendBinary appends the 10-byte encoding.
func (s GCRAState) AppendBinary(dst []byte) ([]byte, error) { return s.appendTo(dst), nil }

func (s GCRAState) appendTo(dst []byte) []byte {
	return be.AppendUint64(appendHeader(dst, KindGCRA), s.TAT)
}

func decodeGCRA(body []byte) (State, error) {
	if len(body) != gcraBody {
		return nil, ErrCorrupt
	}
	return GCRAState{be.Uint64(body)}, nil
}

// fields: tat_ns, an integer, or a decimal string above MaxInt64.
func (s GCRAState) fields() []Field {
	if s.TAT > math.MaxInt64 {
		return []Field{{"tat_ns", utoa(s.TAT)}}
	}
	return []Field{{"tat_ns", int64(s.TAT)}}
}

// merge: the debts above now add up, TAT = now + (a-now)+ + (b-now)+ (at
// most MaxUint64); with no debt on either side the later TAT is kept. The
// expiry is CL.THROTTLE's for that TAT.
func (s GCRAState) merge(other State, now int64) (State, int64) {
	o := other.(GCRAState)
	n := uint64(max(now, 0))
	debt := func(t uint64) uint64 {
		if t > n {
			return t - n
		}
		return 0
	}
	d := satAdd(debt(s.TAT), debt(o.TAT))
	nowMS := floorMS(now)
	if d == 0 {
		return GCRAState{max(s.TAT, o.TAT)}, nowMS
	}
	tat := satAdd(n, d)
	return GCRAState{tat}, nowMS + int64((tat-n)/uint64(nsPerMS))
}

// utoa formats v in decimal.
func utoa(v uint64) string {
	if v <= math.MaxInt64 {
		return itoa(int64(v))
	}
	return itoa(int64(v/10)) + string(rune('0'+v%10))
}

// charge: Eval and AppendCharged on one reading of the state (see Limit).
func (l GCRA) charge(dst, state []byte, now int64, cost uint32, ms, write bool) (R5, []byte, int64, error) {
	tat, found, err := gcraOf(state)
	if err != nil {
		return R5{}, dst, 0, err
	}
	var r R5
	next, exp, wrote, err := l.step(tat, found, now, cost, ms, write, &r)
	if wrote {
		dst = next.appendTo(dst)
	}
	return r, dst, exp, err
}
