package commands

import (
	"errors"

	"github.com/cellserver/cellserver/limit"
	"github.com/cellserver/cellserver/store"
)

// The CL.LIMIT family (shared/spec/cl-limit.md): grammar and error texts
// come from package limit, the decision runs on the keys' shard as a typed
// store request (store.LimitReq), or across shards with store.RunHeld.
func registerLimit(t Table) {
	t.add(
		&Command{Name: "cl.limit", Arity: -5, Flags: []string{"write", "movablekeys"},
			FirstKey: 1, LastKey: 1, Step: 1, Keys: limitKeys,
			Group: "module", Summary: "Checks and charges 1-16 limits (GCRA, FW, SWC, SWL, CAL) all or nothing.", Since: "0.2.0",
			Queue: limitQueue, Reply: limitReply, Alone: limitAlone},
		&Command{Name: "cl.peek", Arity: -1, Flags: []string{"readonly", "fast"},
			FirstKey: 1, LastKey: 1, Step: 1,
			Group: "module", Summary: "Replies what CL.THROTTLE would, writing nothing.", Since: "0.2.0",
			Queue: peekQueue, Reply: peekReply},
		&Command{Name: "cl.reset", Arity: -2, Flags: []string{"write"},
			FirstKey: 1, LastKey: -1, Step: 1,
			Group: "module", Summary: "Removes the limiter state of keys.", Since: "0.2.0",
			Queue: resetQueue, Reply: delReply},
		&Command{Name: "cl.inspect", Arity: 2, Flags: []string{"readonly"},
			FirstKey: 1, LastKey: 1, Step: 1,
			Group: "module", Summary: "Shows a key's limiter state.", Since: "0.2.0",
			Queue: inspectQueue, Reply: inspectReply},
	)
}

// runAlone is what a Queue handler returns to have its call run on its
// own through the command's Alone handler, after the calls queued before
// it are done (a CL.LIMIT whose keys live on several shards).
const runAlone = "\x00alone"

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

// parseLimit parses a CL.LIMIT call and checks its keys' lengths.
func (c *Client) parseLimit(args [][]byte) (limit.Call, string) {
	call, err := limit.ParseLimit(args)
	if err != nil {
		return call, err.Error()
	}
	if m := c.srv.cfg.MaxKeyBytes; m > 0 {
		for _, s := range call.Limits {
			if len(s.Key) > m {
				return call, ErrKeyTooLong
			}
		}
	}
	return call, ""
}

// CL.LIMIT <key> <TYPE> <args> [COST n] [TZ zone] [AND <key> ...] [PEEK] [MS]
func limitQueue(c *Client, args [][]byte) string {
	call, e := c.parseLimit(args)
	if e != "" {
		return e
	}
	st := c.srv.st
	sh := st.ShardOf(call.Limits[0].Key)
	for _, s := range call.Limits[1:] {
		if st.ShardOf(s.Key) != sh {
			return runAlone
		}
	}
	r := c.reqs.limit.get()
	r.Call = call
	c.QueueTo(sh, r)
	return ""
}

func limitReply(c *Client, w *Out, _ [][]byte, reqs []store.Request) {
	r := reqs[0].(*store.LimitReq)
	writeLimit(c, w, r)
	r.Call = limit.Call{}
}

// limitAlone runs a CL.LIMIT whose keys live on several shards, all or
// nothing and isolated (store.RunHeld).
func limitAlone(c *Client, w *Out, args [][]byte) {
	call, e := c.parseLimit(args)
	if e != "" {
		w.WriteError(e)
		return
	}
	r := c.reqs.limit.get()
	r.Call = call
	c.srv.st.RunHeld(r)
	writeLimit(c, w, r)
	r.Call = limit.Call{}
}

// writeLimit writes CL.LIMIT's 7-element reply, or its error.
func writeLimit(c *Client, w *Out, r *store.LimitReq) {
	switch {
	case r.Err == store.ErrWrongType:
		c.srv.countError(ErrWrongType)
		w.WriteError(ErrWrongType)
		return
	case errors.Is(r.Err, store.ErrClosed):
		w.WriteError(ErrShuttingDown)
		return
	case r.Err != nil:
		w.WriteError(ErrInternal)
		return
	}
	w.WriteArray(7)
	writeR5Fields(w, r.Decision.R5)
	w.WriteInt(int64(r.Decision.Index))
	n := len(r.Call.Limits)
	w.WriteArray(n)
	for i := range n {
		writeR5(w, r.Results[i].R5)
	}
}

// writeR5 writes one limit's [limited, limit, remaining, retry_after,
// reset_after].
func writeR5(w *Out, r limit.R5) {
	w.WriteArray(5)
	writeR5Fields(w, r)
}

// writeR5Fields writes the five integers of an R5, not wrapped in an array.
func writeR5Fields(w *Out, r limit.R5) {
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

// CL.PEEK <key> <max_burst> <count per period> <period> [<quantity>]
func peekQueue(c *Client, args [][]byte) string {
	key, p, err := limit.ParsePeek(args)
	if err != nil {
		return err.Error()
	}
	r := c.reqs.peek.get()
	r.Key, r.Params = key, p
	queue(c, r)
	return ""
}

func peekReply(c *Client, w *Out, _ [][]byte, reqs []store.Request) {
	r := reqs[0].(*store.PeekReq)
	writeThrottle(c, w, r.Err, &r.Result)
}

// CL.RESET <key> [<key> ...]: every stored value is a limiter state (a
// GCRA TAT or a cl-limit state), so it removes each live key named, once.
func resetQueue(c *Client, args [][]byte) string {
	keys, err := limit.ParseReset(args)
	if err != nil {
		return err.Error()
	}
	for _, key := range keys {
		c.queueDel(key)
	}
	return ""
}

// CL.INSPECT <key>
func inspectQueue(c *Client, args [][]byte) string {
	key, err := limit.ParseInspect(args)
	if err != nil {
		return err.Error()
	}
	r := c.reqs.inspect.get()
	r.Key = key
	queue(c, r)
	return ""
}

func inspectReply(c *Client, w *Out, _ [][]byte, reqs []store.Request) {
	r := reqs[0].(*store.InspectReq)
	if !r.Found {
		w.WriteNull()
		return
	}
	fs, err := limit.Inspect(r.State)
	if err != nil {
		w.WriteError(ErrInternal)
		return
	}
	fs = append(fs, limit.Field{Name: "pttl", Value: r.PTTL})
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
