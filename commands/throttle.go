package commands

import (
	"github.com/cellserver/cellserver/gcra"
	"github.com/cellserver/cellserver/limit"
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
		n, ok := limit.ParseCellInt(a)
		if !ok {
			return ErrCellParsePrefix + string(a)
		}
		*fields[i] = n
	}
	if gcra.Interval(p.Count, p.Period) == 0 {
		return ErrCellZeroRate
	}
	r := c.reqs.throttle.get()
	r.Key, r.Params = args[1], p
	queue(c, r)
	return ""
}

func throttleReply(c *Client, w *Out, _ [][]byte, reqs []store.Request) {
	r := reqs[0].(*store.ThrottleReq)
	writeThrottle(c, w, r.Err, &r.Result)
}

// writeThrottle writes CL.THROTTLE's (and CL.PEEK's) reply for a decision
// and the store's error. ErrZeroRate never gets here: the arguments'
// check refused it already.
func writeThrottle(c *Client, w *Out, err error, r *gcra.Result) {
	switch {
	case err == store.ErrWrongType:
		c.srv.countError(ErrWrongType)
		w.WriteError(ErrWrongType)
		return
	case err != nil:
		w.WriteError(ErrInternal)
		return
	case r.Write && r.Expiry == gcra.ExpireError:
		c.srv.countError(ErrCellExpire)
		w.WriteError(ErrCellExpire)
		return
	}
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
