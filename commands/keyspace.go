package commands

import (
	"strconv"
	"strings"

	"github.com/cellserver/cellserver/limit"
	"github.com/cellserver/cellserver/store"
)

func registerKeyspace(t Table) {
	t.add(
		&Command{Name: "get", Arity: 2, Flags: []string{"readonly", "fast"}, FirstKey: 1, LastKey: 1,
			Group: "string", Summary: "Returns the limiter state (TAT in Unix ns) of a key.", Since: "1.0.0",
			Queue: queueEach(store.OpGet), Reply: getReply},
		&Command{Name: "del", Arity: -2, Flags: []string{"write"}, FirstKey: 1, LastKey: -1,
			Group: "generic", Summary: "Deletes one or more keys.", Since: "1.0.0",
			Queue: queueEach(store.OpDel), Reply: sumReply, Many: sumMany(store.OpDel)},
		&Command{Name: "unlink", Arity: -2, Flags: []string{"write", "fast"}, FirstKey: 1, LastKey: -1,
			Group: "generic", Summary: "Deletes one or more keys.", Since: "4.0.0",
			Queue: queueEach(store.OpDel), Reply: sumReply, Many: sumMany(store.OpDel)},
		&Command{Name: "exists", Arity: -2, Flags: []string{"readonly", "fast"}, FirstKey: 1, LastKey: -1,
			Group: "generic", Summary: "Determines whether one or more keys exist.", Since: "1.0.0",
			Queue: queueEach(store.OpExists), Reply: existsReply, Many: sumMany(store.OpExists)},
		&Command{Name: "pttl", Arity: 2, Flags: []string{"readonly", "fast"}, FirstKey: 1, LastKey: 1,
			Group: "generic", Summary: "Returns the expiration time in milliseconds of a key.", Since: "2.6.0",
			Queue: queueEach(store.OpPTTL), Reply: pttlReply},
		&Command{Name: "ttl", Arity: 2, Flags: []string{"readonly", "fast"}, FirstKey: 1, LastKey: 1,
			Group: "generic", Summary: "Returns the expiration time in seconds of a key.", Since: "1.0.0",
			Queue: queueEach(store.OpPTTL), Reply: ttlReply},
		&Command{Name: "type", Arity: 2, Flags: []string{"readonly", "fast"}, FirstKey: 1, LastKey: 1,
			Group: "generic", Summary: "Determines the type of value stored at a key.", Since: "1.0.0",
			Queue: queueEach(store.OpType), Reply: typeReply},
		&Command{Name: "keys", Arity: 2, Flags: []string{"readonly"},
			Group: "generic", Summary: "Returns all key names that match a pattern.", Since: "1.0.0",
			Run: keysCmd},
		&Command{Name: "scan", Arity: -2, Flags: []string{"readonly"},
			Group: "generic", Summary: "Iterates over the key names in the database.", Since: "2.8.0",
			Run: scanCmd},
		&Command{Name: "dbsize", Arity: 1, Flags: []string{"readonly", "fast"},
			Group: "server", Summary: "Returns the number of keys in the database.", Since: "1.0.0",
			Run: dbsizeCmd},
		&Command{Name: "flushdb", Arity: -1, Flags: []string{"write"},
			Group: "server", Summary: "Removes all keys from the current database.", Since: "1.0.0",
			Run: flushCmd},
		&Command{Name: "flushall", Arity: -1, Flags: []string{"write"},
			Group: "server", Summary: "Removes all keys from all databases.", Since: "1.0.0",
			Run: flushCmd},
	)
}

// queueEach queues one op of kind k per key argument.
func queueEach(k store.Kind) func(c *Client, args [][]byte) string {
	return func(c *Client, args [][]byte) string {
		for _, key := range args[1:] {
			op := c.NewOp()
			op.Kind = k
			op.Key = key
			c.Queue(op)
		}
		return ""
	}
}

// sumMany runs DEL|UNLINK|EXISTS over many keys a chunk at a time, summing
// their counts. Each chunk goes to its shards as one batch; keys on
// different shards were never checked at one instant anyway.
func sumMany(k store.Kind) func(c *Client, w *Out, args [][]byte) {
	return func(c *Client, w *Out, args [][]byte) {
		var n int64
		for keys := args[1:]; len(keys) > 0; {
			chunk := keys[:min(len(keys), maxKeptOps)]
			keys = keys[len(chunk):]
			for _, key := range chunk {
				op := c.NewOp()
				op.Kind = k
				op.Key = key
				c.Queue(op)
			}
			ops := c.ops[:c.nops]
			c.runNow()
			if e := opsError(ops); e != "" {
				w.WriteError(e) // counted by execOne, as every Run error
				return
			}
			for _, op := range ops {
				n += op.N
				if k == store.OpExists {
					c.srv.countLookup(op.N > 0)
				}
			}
		}
		w.WriteInt(n)
	}
}

// countLookup counts a key read for INFO's keyspace_hits and
// keyspace_misses, as Redis's lookupKeyRead does for GET, EXISTS (each
// key), TTL, PTTL and TYPE.
func (s *Server) countLookup(found bool) {
	if found {
		s.stats.hits.Add(1)
	} else {
		s.stats.misses.Add(1)
	}
}

// GET key
func getReply(c *Client, w *Out, _ [][]byte, ops []*store.Op) {
	c.srv.countLookup(ops[0].Found)
	if ops[0].Err == store.ErrWrongType {
		c.srv.countError(ErrWrongType)
		w.WriteError(ErrWrongType)
		return
	}
	if !ops[0].Found {
		w.WriteNull()
		return
	}
	w.WriteBulkUint(ops[0].TAT)
}

// DEL|UNLINK|EXISTS key [key ...]
func sumReply(_ *Client, w *Out, _ [][]byte, ops []*store.Op) {
	var n int64
	for _, op := range ops {
		n += op.N
	}
	w.WriteInt(n)
}

// EXISTS key [key ...]
func existsReply(c *Client, w *Out, args [][]byte, ops []*store.Op) {
	for _, op := range ops {
		c.srv.countLookup(op.N > 0)
	}
	sumReply(c, w, args, ops)
}

// PTTL key
func pttlReply(c *Client, w *Out, _ [][]byte, ops []*store.Op) {
	c.srv.countLookup(ops[0].N != -2)
	w.WriteInt(ops[0].N)
}

// TTL key: seconds, rounded to nearest as Redis does.
func ttlReply(c *Client, w *Out, _ [][]byte, ops []*store.Op) {
	ms := ops[0].N
	c.srv.countLookup(ms != -2)
	if ms < 0 {
		w.WriteInt(ms)
		return
	}
	w.WriteInt((ms + 500) / 1000)
}

// TYPE key
func typeReply(c *Client, w *Out, _ [][]byte, ops []*store.Op) {
	c.srv.countLookup(ops[0].N != 0)
	if ops[0].N != 0 {
		w.WriteString(limit.Kind(ops[0].N).TypeName())
	} else {
		w.WriteString("none")
	}
}

// everyShard runs one op of kind k on every shard and returns the ops.
func (c *Client) everyShard(k store.Kind, setup func(*store.Op)) []*store.Op {
	n := c.srv.st.NumShards()
	ops := make([]*store.Op, n)
	for i := range ops {
		op := c.NewOp()
		op.Kind = k
		if setup != nil {
			setup(op)
		}
		ops[i] = op
		c.QueueTo(i, op)
	}
	c.runNow()
	return ops
}

// globPattern returns nil for "*", which matches everything (Redis skips
// matching for it, so even the empty key is listed).
func globPattern(p []byte) []byte {
	if len(p) == 1 && p[0] == '*' {
		return nil
	}
	return p
}

// KEYS pattern
func keysCmd(c *Client, w *Out, args [][]byte) {
	pat := globPattern(args[1])
	ops := c.everyShard(store.OpKeys, func(op *store.Op) { op.Pattern = pat })
	n := 0
	for _, op := range ops {
		n += len(op.Keys)
	}
	w.WriteArray(n)
	for _, op := range ops {
		for _, k := range op.Keys {
			w.WriteBulk(k)
		}
		op.Keys = nil
	}
}

// A SCAN cursor is shard<<scanShardShift | position in that shard's entries.
const scanShardShift = 40

// SCAN cursor [MATCH pattern] [COUNT count] [TYPE type]
func scanCmd(c *Client, w *Out, args [][]byte) {
	cur, ok := parseScanCursor(args[1])
	if !ok {
		w.WriteError(ErrInvalidCursor)
		return
	}
	var pat []byte
	count := int64(10)
	typeOK := true
	for i := 2; i < len(args); i += 2 {
		if i+1 >= len(args) {
			w.WriteError(ErrSyntax)
			return
		}
		switch strings.ToLower(string(args[i])) {
		case "match":
			pat = globPattern(args[i+1])
		case "count":
			n, ok := limit.ParseRedisInt(args[i+1])
			if !ok {
				w.WriteError(ErrNotInteger)
				return
			}
			if n < 1 {
				w.WriteError(ErrSyntax)
				return
			}
			count = n
		case "type":
			typeOK = strings.EqualFold(string(args[i+1]), "string")
		default:
			w.WriteError(ErrSyntax)
			return
		}
	}
	shards := uint64(c.srv.st.NumShards())
	sh, pos := cur>>scanShardShift, cur&(1<<scanShardShift-1)
	var keys [][]byte
	budget := count
	for sh < shards && budget > 0 {
		op := c.NewOp()
		op.Kind = store.OpScan
		op.Cursor = pos
		op.Count = int(min(budget, 1<<30))
		op.Pattern = pat
		c.QueueTo(int(sh), op)
		c.runNow()
		if typeOK {
			keys = append(keys, op.Keys...)
		}
		op.Keys = nil
		budget -= op.N
		if op.Cursor == 0 {
			sh, pos = sh+1, 0
		} else {
			pos = op.Cursor
		}
	}
	next := uint64(0)
	if sh < shards {
		next = sh<<scanShardShift | pos
	}
	w.WriteArray(2)
	w.WriteBulkString(strconv.FormatUint(next, 10))
	w.WriteArray(len(keys))
	for _, k := range keys {
		w.WriteBulk(k)
	}
}

// parseScanCursor parses a cursor as Redis 7.2's parseScanCursorOrReply
// does, with strtoul: no leading space; an optional sign (a negative
// cursor wraps around, "-1" is 2^64-1); "" is 0; nothing after the digits;
// no overflow.
func parseScanCursor(b []byte) (uint64, bool) {
	s := cstr(b)
	if s != "" && strings.ContainsRune(" \t\n\v\f\r", rune(s[0])) {
		return 0, false
	}
	neg := false
	digits := s
	if digits != "" && (digits[0] == '+' || digits[0] == '-') {
		neg = digits[0] == '-'
		digits = digits[1:]
	}
	if digits == "" {
		return 0, s == "" // strtoul read nothing: only the empty string ends there
	}
	n, err := strconv.ParseUint(digits, 10, 64)
	if err != nil {
		return 0, false
	}
	if neg {
		n = -n
	}
	return n, true
}

// DBSIZE
func dbsizeCmd(c *Client, w *Out, _ [][]byte) {
	var n int64
	for _, op := range c.everyShard(store.OpDBSize, nil) {
		n += op.N
	}
	w.WriteInt(n)
}

// FLUSHDB|FLUSHALL [ASYNC|SYNC]
func flushCmd(c *Client, w *Out, args [][]byte) {
	if len(args) > 2 {
		w.WriteError(ErrSyntax)
		return
	}
	if len(args) == 2 && !strings.EqualFold(string(args[1]), "async") && !strings.EqualFold(string(args[1]), "sync") {
		w.WriteError(ErrSyntax)
		return
	}
	c.everyShard(store.OpFlush, nil)
	w.WriteOK()
}
