package commands

import (
	"github.com/cellserver/cellserver/limit"
	"github.com/cellserver/cellserver/service"
)

// The CL.LIMIT family (spec/cl-limit.md): grammar and error texts
// come from package limit, the decisions from the decision API (package
// service), which runs each call atomically wherever its keys live.
func registerLimit(t Table) {
	t.add(
		&Command{Name: "cl.limit", Arity: -5, Flags: FlagWrite | FlagMovableKeys | KeysTogether, Cats: CatKeyspace | CatWrite | CatSlow, FirstKey: 1, LastKey: 1, Step: 1, Keys: limitKeys,
			Group: "module", Summary: "Checks and charges 1-16 limits (GCRA, FW, SWC, SWL, CAL) all or nothing.", Since: "0.2.0",
			Call: limitCall, Answer: limitAnswer},
		&Command{Name: "cl.peek", Arity: -1, Flags: FlagReadOnly | FlagFast, Cats: CatKeyspace | CatRead | CatFast, FirstKey: 1, LastKey: 1, Step: 1,
			Group: "module", Summary: "Replies what CL.THROTTLE would, writing nothing.", Since: "0.2.0",
			Call: peekCall, Answer: throttleAnswer},
		&Command{Name: "cl.reset", Arity: -2, Flags: FlagWrite, Cats: CatKeyspace | CatWrite | CatSlow, FirstKey: 1, LastKey: -1, Step: 1,
			Group: "module", Summary: "Removes the limiter state of keys.", Since: "0.2.0",
			Call: resetCall, Answer: resetAnswer},
		&Command{Name: "cl.inspect", Arity: 2, Flags: FlagReadOnly, Cats: CatKeyspace | CatRead | CatSlow, FirstKey: 1, LastKey: 1, Step: 1,
			Group: "module", Summary: "Shows a key's limiter state.", Since: "0.2.0",
			Call: inspectCall, Answer: inspectAnswer},
	)
}

// limitKeys is CL.LIMIT's key finder (COMMAND GETKEYS, cluster routing):
// the key of every limit; an unparsable call gives its first argument, so
// that the error comes from the command itself.
func limitKeys(argv [][]byte) [][]byte {
	call, err := limit.ParseLimit(argv)
	if err != nil {
		if len(argv) > 1 {
			return argv[1:2]
		}
		return nil
	}
	keys := make([][]byte, len(call.Limits))
	for i, s := range call.Limits {
		keys[i] = s.Key
	}
	return keys
}

// CL.LIMIT <key> <TYPE> <args> [COST n] [TZ zone] [AND <key> ...] [PEEK] [MS]
func limitCall(c *Client, args [][]byte) (service.Call, string) {
	l := c.pools().limits.get()
	call, err := limit.ParseLimitInto(l.Call.Limits[:0], args)
	if err != nil {
		return nil, err.Error()
	}
	l.Call = call
	return l, ""
}

// limitAnswer writes CL.LIMIT's 7-element reply, and counts its decision
// (with PEEK too: it decides, charging nothing).
func limitAnswer(c *Client, w *Out, call service.Call) {
	l := call.(*service.Limit)
	c.countDecision(decLimit, l.Decision.Limited)
	w.B = append(w.B, "*7\r\n"...)
	// The deciding limit's five integers are the reply's first five and
	// again in its own row: formatted once, copied there (a call of one
	// limit writes no other).
	from := len(w.B)
	writeR5Fields(w, l.Decision.R5)
	to := len(w.B)
	w.WriteInt(int64(l.Decision.Index))
	rs := l.Results()
	if len(rs) == 1 {
		w.B = append(w.B, "*1\r\n"...)
	} else {
		w.WriteArray(len(rs))
	}
	for i := range rs {
		w.B = append(w.B, "*5\r\n"...)
		if i+1 == l.Decision.Index && rs[i].R5 == l.Decision.R5 {
			w.B = append(w.B, w.B[from:to]...)
			continue
		}
		writeR5Fields(w, rs[i].R5)
	}
}

// writeR5Fields writes the five integers of an R5, not wrapped in an array.
func writeR5Fields(w *Out, r limit.R5) {
	writeFive(w, r.Limited, r.Limit, r.Remaining, r.RetryAfter, r.ResetAfter)
}

// writeFive writes redis-cell's five integers (CL.THROTTLE's reply, each
// of CL.LIMIT's limits), not wrapped in an array.
func writeFive(w *Out, limited bool, lim, remaining, retryAfter, resetAfter int64) {
	if limited {
		w.WriteInt(1)
	} else {
		w.WriteInt(0)
	}
	w.WriteInt(lim)
	w.WriteInt(remaining)
	w.WriteInt(retryAfter)
	w.WriteInt(resetAfter)
}

// CL.PEEK <key> <max_burst> <count per period> <period> [<quantity>]
func peekCall(c *Client, args [][]byte) (service.Call, string) {
	key, p, err := limit.ParsePeek(args)
	if err != nil {
		return nil, err.Error()
	}
	t := c.pools().throttles.get()
	t.Key, t.Params, t.Peek = key, p, true
	return t, ""
}

// CL.RESET <key> [<key> ...]: every stored value is a limiter state (a
// GCRA TAT or a cl-limit state), so it removes each live key named, once.
func resetCall(c *Client, args [][]byte) (service.Call, string) {
	keys, err := limit.ParseReset(args)
	if err != nil {
		return nil, err.Error()
	}
	r := c.pools().resets.get()
	r.Keys = keys
	return r, ""
}

func resetAnswer(_ *Client, w *Out, call service.Call) {
	r := call.(*service.Reset)
	w.WriteInt(r.Removed)
	r.Keys = nil
}

// CL.INSPECT <key>
func inspectCall(c *Client, args [][]byte) (service.Call, string) {
	key, err := limit.ParseInspect(args)
	if err != nil {
		return nil, err.Error()
	}
	in := c.pools().inspects.get()
	in.Key = key
	return in, ""
}

func inspectAnswer(_ *Client, w *Out, call service.Call) {
	in := call.(*service.Inspect)
	if !in.Found {
		w.WriteNull()
		return
	}
	fs := append(in.Fields, limit.Field{Name: "pttl", Value: in.PTTL})
	w.WriteArray(2 * len(fs))
	for _, f := range fs {
		w.WriteBulkString(f.Name)
		switch v := f.Value.(type) {
		case int64:
			w.WriteInt(v)
		case string:
			w.WriteBulkString(v)
		case [][2]int64:
			w.WriteArray(len(v))
			for _, e := range v {
				w.WriteArray(2)
				w.WriteInt(e[0])
				w.WriteInt(e[1])
			}
		default:
			w.WriteNull()
		}
	}
}
