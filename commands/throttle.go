package commands

import (
	"github.com/cellserver/cellserver/gcra"
	"github.com/cellserver/cellserver/store"
)

func registerThrottle(t Table) {
	t.add(&Command{
		Name:     "cl.throttle",
		Arity:    -1, // redis-cell checks the argument count itself
		Flags:    []string{"write"},
		FirstKey: 1, LastKey: 1, Step: 1,
		Group:   "module",
		Summary: "Rate-limit a key with GCRA, exactly as the redis-cell module does.",
		Since:   "0.1.0",
		Queue:   throttleQueue,
		Reply:   throttleReply,
	})
}

// CL.THROTTLE <key> <max_burst> <count per period> <period> [<quantity>]
func throttleQueue(c *Client, args [][]byte) string {
	if len(args) != 5 && len(args) != 6 {
		return ErrCellUsage
	}
	var p gcra.Params
	p.Quantity = 1
	fields := [...]*int64{&p.MaxBurst, &p.Count, &p.Period, &p.Quantity}
	for i, a := range args[2:] {
		n, ok := parseI64(a)
		if !ok {
			return ErrCellParsePrefix + string(a)
		}
		*fields[i] = n
	}
	if gcra.Interval(p.Count, p.Period) == 0 {
		return ErrCellZeroRate
	}
	op := c.NewOp()
	op.Kind = store.OpThrottle
	op.Key = args[1]
	op.Params = p
	c.Queue(op)
	return ""
}

func throttleReply(c *Client, w *Out, _ [][]byte, ops []*store.Op) {
	op := ops[0]
	switch {
	case op.Err == store.ErrWrongType:
		c.srv.countError(ErrWrongType)
		w.WriteError(ErrWrongType)
		return
	case op.Err != nil: // not ErrZeroRate: throttleQueue rejected that already
		w.WriteError(ErrInternal)
		return
	case op.Result.Write && op.Result.Expiry == gcra.ExpireError:
		c.srv.countError(ErrCellExpire)
		w.WriteError(ErrCellExpire)
		return
	}
	r := &op.Result
	w.WriteArray(5)
	if r.Limited {
		w.WriteInt(1)
	} else {
		w.WriteInt(0)
	}
	w.WriteInt(r.Limit)
	w.WriteInt(r.Remaining)
	w.WriteInt(r.RetryAfter)
	w.WriteInt(r.ResetAfter)
}

// parseI64 parses a signed 64-bit decimal as redis-cell does (Rust's
// i64::from_str): an optional single '+' or '-', then one or more ASCII
// digits, leading zeros allowed, nothing else, within the int64 range.
func parseI64(b []byte) (int64, bool) {
	if len(b) == 0 {
		return 0, false
	}
	neg := false
	switch b[0] {
	case '+':
		b = b[1:]
	case '-':
		neg = true
		b = b[1:]
	}
	if len(b) == 0 {
		return 0, false
	}
	// Accumulate as a negative number so that MinInt64 fits.
	const minI64 = -1 << 63
	var n int64
	for _, ch := range b {
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

// parseRedisInt parses an integer argument the way Redis does (string2ll):
// an optional '-', no '+', no leading zeros ("0" itself is fine), no spaces.
func parseRedisInt(b []byte) (int64, bool) {
	if len(b) == 0 || len(b) > 20 {
		return 0, false
	}
	if len(b) == 1 && b[0] == '0' {
		return 0, true
	}
	digits := b
	if digits[0] == '-' {
		digits = digits[1:]
	}
	if len(digits) == 0 || digits[0] < '1' || digits[0] > '9' {
		return 0, false
	}
	return parseI64(b)
}
