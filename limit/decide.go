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
// that does not decode is ErrCorrupt.
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
	// Each limit is evaluated and, while the call may still be admitted,
	// charged in the same pass (one reading of its state); a rejection
	// drops the charged states.
	admitted := true
	var ends [MaxLimits]int
	start := len(buf)
	for i := range specs {
		write := admitted && charges(opt, specs[i].Cost)
		r, b, exp, err := specs[i].Limit.charge(buf, states[i], now, specs[i].Cost, opt.MS, write)
		if err != nil {
			return Decision{}, buf, err
		}
		res[i] = Result{R5: r}
		if write && !r.Limited {
			buf = b
			res[i].Write, res[i].ExpireAt = true, exp
			ends[i] = len(buf)
		}
		admitted = admitted && !r.Limited
	}
	if !admitted {
		for i := range specs {
			res[i].Write, res[i].ExpireAt = false, 0
		}
		return rejected(specs, states, now, opt, res[:n], buf[:start])
	}
	d := Decision{R5: res[0].R5, Index: 1}
	for i := 1; i < n; i++ {
		if res[i].Remaining < d.Remaining {
			d = Decision{R5: res[i].R5, Index: i + 1}
		}
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

// charges reports whether a call with options opt charges a limit of cost
// if it is admitted: not with PEEK, and not a cost of 0.
func charges(opt Options, cost uint32) bool { return !opt.Peek && cost > 0 }

// single is the outcome of an admitted or rejected call of one limit, what
// Decide gives for it: that limit decides (index 1), and its result wrote
// iff it charged. The typed single-limit decisions (DecideFW, DecideSWC,
// DecideGCRA) end with it.
func single(r R5, wrote bool, exp int64) (Decision, Result) {
	return Decision{R5: r, Index: 1}, Result{R5: r, Write: wrote, ExpireAt: exp}
}

// rejected completes a rejected call: the limits that would admit show their
// state before charging, with retry_after -1; nothing is written.
func rejected(specs []Spec, states [][]byte, now int64, opt Options, res []Result, buf []byte) (Decision, []byte, error) {
	d := Decision{Index: 0}
	for i := range specs {
		if res[i].Limited {
			if d.Index == 0 || later(res[i].RetryAfter, d.RetryAfter) {
				d = Decision{R5: res[i].R5, Index: i + 1}
			}
			continue
		}
		r, err := specs[i].Limit.Eval(states[i], now, 0, opt.MS)
		if err != nil {
			return Decision{}, buf, err
		}
		r.Limited, r.RetryAfter = false, -1
		res[i].R5 = r
	}
	return d, buf, nil
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
