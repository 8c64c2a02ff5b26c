package commands

import (
	"github.com/cellserver/cellserver/limit"
	"github.com/cellserver/cellserver/service"
)

func registerThrottle(t Table) {
	t.add(&Command{
		Name:     "cl.throttle",
		Arity:    -1, // redis-cell checks the argument count itself
		Flags:    FlagWrite,
		Cats:     CatKeyspace | CatWrite | CatSlow,
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
	key, p, err := limit.ParseThrottle(args)
	if err != nil {
		return nil, err.Error()
	}
	t := c.pools().throttles.get()
	t.Key, t.Params, t.Peek = key, p, false
	return t, ""
}

// throttleAnswer writes CL.THROTTLE's (and CL.PEEK's) reply, and counts
// CL.THROTTLE's decision (a peek decides nothing).
func throttleAnswer(c *Client, w *Out, call service.Call) {
	t := call.(*service.Throttle)
	r := &t.Result
	if !t.Peek {
		c.countDecision(decThrottle, r.Limited)
	}
	w.WriteArray(5)
	writeFive(w, r.Limited, r.Limit, r.Remaining, r.RetryAfter, r.ResetAfter)
}
