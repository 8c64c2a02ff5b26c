package limit

import (
	"bytes"
	"time"

	"github.com/cellserver/cellserver/gcra"
)

// Spec is one limit of a call: its key, its limit and the cost charged to it.
// The zero value is invalid (no limit).
type Spec struct {
	Key   []byte // aliases the argument it was parsed from
	Limit Limit
	Cost  uint32 // default 1; 0 checks without charging (and never writes)
}

// Call is a parsed CL.LIMIT call.
type Call struct {
	Limits []Spec // 1..MaxLimits, in the order written, no key twice
	Options
}

// ParseLimit parses CL.LIMIT's arguments (spec §2); argv[0] is the command
// name, whatever its spelling. It checks in the spec's order (§2.1 steps
// 1-3): the argument count, then the structure left to right, then limit by
// limit the numbers, the cost, the unit and zone, the SWL and GCRA bounds
// and the repeated keys. The error is one of this package's client-facing
// errors (Error, *UnknownTypeError, *RangeError, *UnknownUnitError,
// *UnknownZoneError, *RepeatedKeyError). Keys alias argv.
func ParseLimit(argv [][]byte) (Call, error) { return ParseLimitInto(nil, argv) }

// ParseLimitInto is ParseLimit with the call's Limits in buf's array when
// it has room, so that a caller that keeps one between calls allocates
// nothing. A call of a shape parsed before is answered from the shape
// (see shapes.go).
func ParseLimitInto(buf []Spec, argv [][]byte) (Call, error) {
	if len(argv) < 5 {
		return Call{}, ErrArity
	}
	h, ok := shapeHash(argv)
	if ok {
		if s := shapes[shapeSlot(h)].Load(); s != nil && s.match(argv) {
			return s.fill(buf, argv)
		}
	}
	var keys [MaxLimits]int
	c, err := parseLimit(buf, argv, &keys)
	if err == nil && ok {
		remember(h, argv, c, keys[:len(c.Limits)])
	}
	return c, err
}

// parseLimit is ParseLimitInto without the shapes; keys receives the
// argument index of each limit's key.
func parseLimit(buf []Spec, argv [][]byte, keys *[MaxLimits]int) (Call, error) {
	var raws [MaxLimits]rawLimit // on the stack: parsing allocates only Limits
	n, opt, err := parseStructure(argv, &raws, keys)
	if err != nil {
		return Call{}, err
	}
	if cap(buf) < n {
		buf = make([]Spec, n)
	}
	c := Call{Limits: buf[:n], Options: opt}
	for j := range n {
		r := &raws[j]
		l, cost, err := r.algo.parse(*r, opt.MS)
		if err != nil {
			return Call{}, err
		}
		for i := range j {
			if bytes.Equal(raws[i].key, r.key) {
				return Call{}, &RepeatedKeyError{Limit: j + 1, Earlier: i + 1}
			}
		}
		c.Limits[j] = Spec{Key: r.key, Limit: l, Cost: cost}
	}
	return c, nil
}

// rawLimit is one limit as the structure pass found it, before any number
// is read.
type rawLimit struct {
	key  []byte
	algo *algorithm
	args [][]byte // the type's positional arguments
	cost []byte   // COST's value, nil without COST
	tz   []byte   // TZ's value, nil without TZ (CAL only)
}

// parseCost is step 3(b): COST's value, 0..MaxValue, default 1.
func (r *rawLimit) parseCost() (uint32, error) {
	if r.cost == nil {
		return 1, nil
	}
	v, err := parseRange(r.cost, "cost", 0, MaxValue)
	return uint32(v), err
}

// parseStructure is step 2: keys, types, argument counts and keywords, left
// to right, limit by limit. It fills raws and keys (each limit's key's
// index in argv) and returns how many it found.
func parseStructure(argv [][]byte, raws *[MaxLimits]rawLimit, keys *[MaxLimits]int) (int, Options, error) {
	n := 0
	var opt Options
	i := 1
	for {
		// A limit: key, type, positional arguments, options.
		if i+1 >= len(argv) {
			return 0, opt, ErrSyntax
		}
		at := i
		r := rawLimit{key: argv[i]}
		if r.algo = lookupType(argv[i+1]); r.algo == nil {
			return 0, opt, &UnknownTypeError{Type: string(argv[i+1])}
		}
		i += 2
		if i+r.algo.nargs > len(argv) {
			return 0, opt, ErrSyntax
		}
		r.args = argv[i : i+r.algo.nargs]
		i += r.algo.nargs
	options:
		for i < len(argv) {
			var slot *[]byte
			switch {
			case keyword(argv[i], "COST"):
				slot = &r.cost
			case keyword(argv[i], "TZ") && r.algo.kind == KindCAL:
				slot = &r.tz
			default:
				break options
			}
			if *slot != nil || i+1 >= len(argv) {
				return 0, opt, ErrSyntax
			}
			*slot = argv[i+1]
			i += 2
		}
		if n == MaxLimits {
			return 0, opt, ErrTooManyLimits
		}
		raws[n] = r
		keys[n] = at
		n++
		switch {
		case i == len(argv):
			return n, opt, nil
		case keyword(argv[i], "AND"):
			i++
			continue
		}
		// The global options, each at most once, then nothing.
		for ; i < len(argv); i++ {
			switch {
			case keyword(argv[i], "PEEK") && !opt.Peek:
				opt.Peek = true
			case keyword(argv[i], "MS") && !opt.MS:
				opt.MS = true
			default:
				return 0, opt, ErrSyntax
			}
		}
		return n, opt, nil
	}
}

// lookupType finds the algorithm a type token names, case-insensitively.
func lookupType(tok []byte) *algorithm {
	for _, a := range algorithms {
		if a != nil && keyword(tok, a.name) {
			return a
		}
	}
	return nil
}

// keyword reports whether tok is kw (upper case ASCII) in any case.
func keyword(tok []byte, kw string) bool {
	if len(tok) != len(kw) {
		return false
	}
	for i := range len(tok) {
		c := tok[i]
		if 'a' <= c && c <= 'z' {
			c -= 'a' - 'A'
		}
		if c != kw[i] {
			return false
		}
	}
	return true
}

// parseRange reads a Redis integer in [lo, hi]: ErrNotInteger if it is not
// one, a *RangeError named name if it is out of range.
func parseRange(tok []byte, name string, lo, hi int64) (int64, error) {
	v, ok := ParseRedisInt(tok)
	if !ok {
		return 0, ErrNotInteger
	}
	if v < lo || v > hi {
		return 0, &RangeError{Name: name, Min: lo, Max: hi}
	}
	return v, nil
}

// parseWindow reads a period or window: 1..31622400 s, or with MS
// 1..31622400000 ms.
func parseWindow(tok []byte, name string, ms bool) (time.Duration, error) {
	unit, hi := time.Second, int64(MaxWindow/time.Second)
	if ms {
		unit, hi = time.Millisecond, maxWindowMS
	}
	v, err := parseRange(tok, name, 1, hi)
	return time.Duration(v) * unit, err
}

// validWindow reports whether d is a whole number of ms in 1 ms..MaxWindow.
func validWindow(d time.Duration) bool {
	return d >= time.Millisecond && d <= MaxWindow && d%time.Millisecond == 0
}

// parseLimitWindow reads FW, SWC and SWL's <limit> <window>, then the cost.
func parseLimitWindow(raw *rawLimit, ms bool) (lim uint32, w time.Duration, cost uint32, err error) {
	l, err := parseRange(raw.args[0], "limit", 1, MaxValue)
	if err != nil {
		return 0, 0, 0, err
	}
	if w, err = parseWindow(raw.args[1], "window", ms); err != nil {
		return 0, 0, 0, err
	}
	cost, err = raw.parseCost()
	return uint32(l), w, cost, err
}

// ParseRedisInt parses an integer the way Redis does (string2ll): an
// optional '-', no '+', no leading zeros ("0" itself is fine), no spaces,
// at most 20 bytes, within the int64 range.
func ParseRedisInt(b []byte) (int64, bool) {
	if len(b) == 0 || len(b) > 20 {
		return 0, false
	}
	if len(b) == 1 && b[0] == '0' {
		return 0, true
	}
	neg := b[0] == '-'
	digits := b
	if neg {
		digits = b[1:]
	}
	if len(digits) == 0 || digits[0] < '1' || digits[0] > '9' {
		return 0, false
	}
	return parseDecimal(digits, neg)
}

// parseDecimal reads one or more ASCII digits as an int64, negated if neg,
// rejecting anything else and any overflow.
func parseDecimal(digits []byte, neg bool) (int64, bool) {
	if len(digits) == 0 {
		return 0, false
	}
	// Accumulate as a negative number so that MinInt64 fits.
	const minI64 = -1 << 63
	var n int64
	for _, ch := range digits {
		if ch < '0' || ch > '9' {
			return 0, false
		}
		d := int64(ch - '0')
		if n < minI64/10 || (n == minI64/10 && d > -(minI64%10)) {
			return 0, false
		}
		n = n*10 - d
	}
	if neg {
		return n, true
	}
	if n == minI64 {
		return 0, false
	}
	return -n, true
}

// ParseThrottle parses CL.THROTTLE <key> <max_burst> <count per period>
// <period> [<quantity>] exactly as redis-cell does (cl-throttle.md §1: an
// optional '+' or '-', leading zeros allowed, no range checks). argv[0] is
// the command name.
func ParseThrottle(argv [][]byte) (key []byte, p gcra.Params, err error) {
	return parseCell(argv, ErrThrottleUsage)
}

// ParsePeek parses CL.PEEK's arguments, CL.THROTTLE's grammar with
// CL.PEEK's usage text (spec §1). The reply is then gcra.Throttle(p, ...)
// at the same instant, written nowhere (a result with Expiry
// gcra.ExpireError replies ErrCellExpire).
func ParsePeek(argv [][]byte) (key []byte, p gcra.Params, err error) {
	return parseCell(argv, ErrPeekUsage)
}

// parseCell is CL.THROTTLE's grammar, with the command's usage text.
func parseCell(argv [][]byte, usage Error) (key []byte, p gcra.Params, err error) {
	if len(argv) != 5 && len(argv) != 6 {
		return nil, p, usage
	}
	p.Quantity = 1
	fields := [...]*int64{&p.MaxBurst, &p.Count, &p.Period, &p.Quantity}
	for i, a := range argv[2:] {
		n, ok := ParseCellInt(a)
		if !ok {
			return nil, p, &CellParseError{Arg: string(a)}
		}
		*fields[i] = n
	}
	if gcra.Interval(p.Count, p.Period) == 0 {
		return nil, p, ErrCellZeroRate
	}
	return argv[1], p, nil
}

// ParseCellInt parses a number as redis-cell does (Rust's i64::from_str):
// an optional single '+' or '-', then ASCII digits, leading zeros allowed.
func ParseCellInt(b []byte) (int64, bool) {
	neg := false
	if len(b) > 0 && (b[0] == '+' || b[0] == '-') {
		neg = b[0] == '-'
		b = b[1:]
	}
	return parseDecimal(b, neg)
}

// ParseReset parses CL.RESET <key> [<key> ...]: the keys, each once, in the
// order first named (a key named twice counts once). argv[0] is the command
// name. The keys alias argv.
func ParseReset(argv [][]byte) ([][]byte, error) {
	if len(argv) < 2 {
		return nil, ErrResetArity
	}
	keys := make([][]byte, 0, len(argv)-1)
	seen := make(map[string]struct{}, len(argv)-1)
	for _, k := range argv[1:] {
		if _, dup := seen[string(k)]; dup {
			continue
		}
		seen[string(k)] = struct{}{}
		keys = append(keys, k)
	}
	return keys, nil
}

// ParseInspect parses CL.INSPECT <key>; argv[0] is the command name.
func ParseInspect(argv [][]byte) ([]byte, error) {
	if len(argv) != 2 {
		return nil, ErrInspectArity
	}
	return argv[1], nil
}
