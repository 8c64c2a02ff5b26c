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
	r, err := l.throttle(state, now, cost, ms)
	if err != nil {
		return R5{}, err
	}
	return R5{r.Limited, r.Limit, r.Remaining, r.RetryAfter, r.ResetAfter}, nil
}

// AppendCharged appends the new TAT. The expiry is CL.THROTTLE's,
// now_ms + trunc(ttl / 1 ms); where CL.THROTTLE would store the TAT without
// a TTL (a TAT below now, reachable only through the wrap-around of
// max_burst x T or cost x T on absurd parameters), the key expires at now_ms
// instead: a TAT in the past carries no debt, and a key kept forever would
// be a leak.
func (l GCRA) AppendCharged(dst, state []byte, now int64, cost uint32) ([]byte, int64, error) {
	r, err := l.throttle(state, now, cost, false)
	if err != nil {
		return dst, 0, err
	}
	if cost == 0 || !r.Write {
		return dst, 0, ErrNotAdmitted
	}
	exp := floorMS(now)
	if r.Expiry == gcra.ExpireAfter {
		exp += r.TTLMillis
	}
	return GCRAState{r.NewTAT}.appendTo(dst), exp, nil
}

func (l GCRA) throttle(state []byte, now int64, cost uint32, ms bool) (gcra.Result, error) {
	body, err := checkState(state, KindGCRA)
	if err != nil {
		return gcra.Result{}, err
	}
	var tat uint64
	if state != nil {
		if len(body) != gcraBody {
			return gcra.Result{}, ErrCorrupt
		}
		tat = be.Uint64(body)
	}
	t := l.Interval()
	if t == 0 {
		return gcra.Result{}, ErrRateTooHigh
	}
	p := gcra.Params{MaxBurst: int64(l.MaxBurst), Quantity: int64(cost)}
	return gcra.ThrottleInterval(t, p, tat, state != nil, now, ms), nil
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

// charge: Eval, then AppendCharged (see Limit).
func (l GCRA) charge(dst, state []byte, now int64, cost uint32, ms, write bool) (R5, []byte, int64, error) {
	r, err := l.Eval(state, now, cost, ms)
	if err != nil || !write || r.Limited {
		return r, dst, 0, err
	}
	dst, exp, err := l.AppendCharged(dst, state, now, cost)
	return r, dst, exp, err
}
