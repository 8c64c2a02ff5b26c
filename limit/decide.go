package limit

// Result is one limit's part of a decision.
type Result struct {
	R5 // what the reply shows for this limit (spec §5)

	// Write is set when the call charged this key: store State, replacing
	// the key's value, and make the key expire at ExpireAt (Unix ms; the
	// key is gone once now_ms > ExpireAt). Only admitted calls without
	// PEEK write, and only the keys charged a cost above 0.
	Write    bool
	State    []byte // the new encoded state, a sub-slice of Decide's buffer
	ExpireAt int64
}

// Decision is the call's outcome: the deciding limit's R5 and its index,
// elements 1-6 of CL.LIMIT's reply.
type Decision struct {
	R5
	Index int // 1-based index of the deciding limit
}

// Decide runs one CL.LIMIT call (spec §5): every limit in specs against its
// key's encoded state in states (nil for a missing key) at now (Unix ns).
// The call is admitted iff every limit admits it; then, unless opt.Peek,
// every limit with a cost above 0 is charged (res[i].Write); otherwise
// nothing is. res[i] receives limit i's result (len(res) >= len(specs)).
// New states are appended to buf, which is returned; keep it for the next
// call to decide without allocating.
//
// A state of another kind than its limit's is ErrWrongType, checked before
// anything is decided: the caller replies it and charges nothing. A state
// that does not decode is ErrCorrupt, with one exception: an SWL log's
// entries are trusted (only its header and length are checked), since
// checking up to 10,000 of them would cost every call tens of µs. Pass
// only states this package wrote, or states Decode accepted.
//
// The deciding limit is, in an admitted call, the one with the least
// remaining; in a rejected call the rejecting one with the largest
// retry_after as reported (-1, never, counting as largest). Ties go to the
// lowest index.
func Decide(specs []Spec, states [][]byte, now int64, opt Options, res []Result, buf []byte) (Decision, []byte, error) {
	n := len(specs)
	if n == 0 || n > MaxLimits || len(states) < n || len(res) < n {
		return Decision{}, buf, ErrBadCall
	}
	for i := range specs {
		if s := states[i]; s != nil && KindOf(s) != specs[i].Limit.Kind() {
			if _, err := checkState(s, specs[i].Limit.Kind()); err != nil {
				return Decision{}, buf, err
			}
		}
	}
	var ends [MaxLimits]int
	start := len(buf)
	d, admitted, err := decideSteps(specs, opt, res[:n], func(i int, cost uint32, write bool) (R5, bool, int64, error) {
		r, b, exp, err := specs[i].Limit.charge(buf, states[i], now, cost, opt.MS, write)
		wrote := err == nil && write && !r.Limited
		if wrote {
			buf = b
			ends[i] = len(buf)
		}
		return r, wrote, exp, err
	})
	if err != nil || !admitted {
		return d, buf[:start], err
	}
	// Slice at the end: buf may have moved while it grew.
	for i := range specs {
		if res[i].Write {
			res[i].State = buf[start:ends[i]:ends[i]]
			start = ends[i]
		}
	}
	return d, buf, nil
}

// stepFunc decides limit i of a call on its own with cost and, if write
// and it admits, charges it: the R5, whether it wrote, and the key's new
// expiry. A step with write false changes nothing.
type stepFunc func(i int, cost uint32, write bool) (r R5, wrote bool, exp int64, err error)

// decideSteps is the all-or-nothing decision over specs (spec §5), each
// limit decided by step: Decide and DecideFields differ only in how a
// step reads and writes a state. Each limit is evaluated and, while the
// call may still be admitted, charged in the same step (one reading of
// its state); admitted false says that a rejection dropped the charges
// (no res[i].Write), and the limits that would admit then show their state
// before charging, with retry_after -1.
func decideSteps(specs []Spec, opt Options, res []Result, step stepFunc) (Decision, bool, error) {
	admitted := true
	for i := range specs {
		write := admitted && charges(opt, specs[i].Cost)
		r, wrote, exp, err := step(i, specs[i].Cost, write)
		if err != nil {
			return Decision{}, false, err
		}
		res[i] = Result{R5: r}
		if wrote {
			res[i].Write, res[i].ExpireAt = true, exp
		}
		admitted = admitted && !r.Limited
	}
	if !admitted {
		d := Decision{Index: 0}
		for i := range specs {
			res[i].Write, res[i].ExpireAt = false, 0
			if res[i].Limited {
				if d.Index == 0 || later(res[i].RetryAfter, d.RetryAfter) {
					d = Decision{R5: res[i].R5, Index: i + 1}
				}
				continue
			}
			r, _, _, err := step(i, 0, false)
			if err != nil {
				return Decision{}, false, err
			}
			r.Limited, r.RetryAfter = false, -1
			res[i].R5 = r
		}
		return d, false, nil
	}
	d := Decision{R5: res[0].R5, Index: 1}
	for i := 1; i < len(specs); i++ {
		if res[i].Remaining < d.Remaining {
			d = Decision{R5: res[i].R5, Index: i + 1}
		}
	}
	return d, true, nil
}

// charges reports whether a call with options opt charges a limit of cost
// if it is admitted: not with PEEK, and not a cost of 0.
func charges(opt Options, cost uint32) bool { return !opt.Peek && cost > 0 }

// single completes the outcome of an admitted or rejected call of one
// limit, what Decide gives for it, once the limit's step has written its
// R5 into res.R5: that limit decides (index 1), and its result wrote iff
// it charged. The typed single-limit decisions (DecideFW, DecideSWC,
// DecideGCRA) end with it; they fill the caller's d and res in place, and
// their steps write the R5 through a pointer, since returning it with the
// next state and the expiry passes them all through memory, which costs
// about a tenth of SWC's decision.
func single(wrote bool, exp int64, d *Decision, res *Result) {
	res.Write, res.State, res.ExpireAt = wrote, nil, exp
	d.R5, d.Index = res.R5, 1
}

// later reports whether retry a is strictly later than b, -1 (never) being
// the latest.
func later(a, b int64) bool {
	switch {
	case b == -1:
		return false
	case a == -1:
		return true
	}
	return a > b
}

// Fields is one key's state decoded, as a store that keeps GCRA, FW and
// SWC states as fields in place holds it: Kind is the state's kind, 0 for
// a missing key, and the field of that kind holds it.
type Fields struct {
	Kind Kind
	GCRA GCRAState
	FW   FWState
	SWC  SWCState
}

// DecideFields is Decide on decoded states, for a call whose limits are
// all GCRA, FW or SWC: the same decision (decideSteps, each limit's own
// step), without encoding the states for it or decoding its answers back.
// states[i] is limit i's key's state, missing or of its limit's kind;
// next[i] receives the state to store for every res[i].Write (its Kind and
// the field of that kind; res[i].State is not set; next must not overlap
// states). A call with a limit of another algorithm is ErrBadCall, a
// state of another kind than its limit's ErrWrongType; the caller checks
// both first and runs such a call through Decide.
func DecideFields(specs []Spec, states []Fields, now int64, opt Options, res []Result, next []Fields) (Decision, error) {
	n := len(specs)
	if n == 0 || n > MaxLimits || len(states) < n || len(res) < n || len(next) < n {
		return Decision{}, ErrBadCall
	}
	for i := range specs {
		switch k := specs[i].Limit.Kind(); {
		case k != KindGCRA && k != KindFW && k != KindSWC:
			return Decision{}, ErrBadCall
		case states[i].Kind != 0 && states[i].Kind != k:
			return Decision{}, ErrWrongType
		}
	}
	d, _, err := decideSteps(specs, opt, res[:n], func(i int, cost uint32, write bool) (R5, bool, int64, error) {
		s, found, nx := &states[i], states[i].Kind != 0, &next[i]
		// Only the field of next's Kind is set: zeroing the whole of it,
		// per limit and step, costs more than FW's step.
		switch l := specs[i].Limit.(type) {
		case GCRA:
			var r R5
			ns, exp, wrote, err := l.step(s.GCRA.TAT, found, now, cost, opt.MS, write, &r)
			nx.Kind, nx.GCRA = KindGCRA, ns
			return r, wrote, exp, err
		case FW:
			var r R5
			ns, exp, wrote := l.step(s.FW, found, now, cost, opt.MS, write, &r)
			nx.Kind, nx.FW = KindFW, ns
			return r, wrote, exp, nil
		case SWC:
			var r R5
			ns, exp, wrote := l.step(s.SWC, found, now, cost, opt.MS, write, &r)
			nx.Kind, nx.SWC = KindSWC, ns
			return r, wrote, exp, nil
		}
		return R5{}, false, 0, ErrBadCall
	})
	return d, err
}
