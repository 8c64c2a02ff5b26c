package commands

import (
	"github.com/cellserver/cellserver/gcra"
	"github.com/cellserver/cellserver/limit"
	"github.com/cellserver/cellserver/service"
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
		Call:    throttleCall,
		Answer:  throttleAnswer,
	})
}

// CL.THROTTLE <key> <max_burst> <count per period> <period> [<quantity>]
func throttleCall(c *Client, args [][]byte) (service.Call, string) {
	p, e := parseThrottle(args)
	if e != "" {
		return nil, e
	}
	t := c.calls.throttles.get()
	t.Key, t.Params, t.Peek = args[1], p, false
	return t, ""
}

// parseThrottle parses CL.THROTTLE's arguments as redis-cell does, with its
// error texts.
func parseThrottle(args [][]byte) (gcra.Params, string) {
	var p gcra.Params
	if len(args) != 5 && len(args) != 6 {
		return p, ErrCellUsage
	}
	p.Quantity = 1
	fields := [...]*int64{&p.MaxBurst, &p.Count, &p.Period, &p.Quantity}
	for i, a := range args[2:] {
		n, ok := limit.ParseCellInt(a)
		if !ok {
			return p, ErrCellParsePrefix + string(a)
		}
		*fields[i] = n
	}
	if gcra.Interval(p.Count, p.Period) == 0 {
		return p, ErrCellZeroRate
	}
	return p, ""
}

// throttleAnswer writes CL.THROTTLE's (and CL.PEEK's) reply.
func throttleAnswer(_ *Client, w *Out, call service.Call) {
	r := &call.(*service.Throttle).Result
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
