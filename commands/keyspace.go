package commands

import (
	"strconv"
	"strings"

	"github.com/cellserver/cellserver/limit"
	"github.com/cellserver/cellserver/store"
)

func registerKeyspace(t Table) {
	t.add(
		&Command{Name: "get", Arity: 2, Flags: FlagReadOnly | FlagFast, Cats: CatRead | CatString | CatFast, FirstKey: 1, LastKey: 1,
			Group: "string", Summary: "Returns the limiter state (TAT in Unix ns) of a key.", Since: "1.0.0",
			Queue: getQueue, Reply: getReply},
		&Command{Name: "del", Arity: -2, Flags: FlagWrite, Cats: CatKeyspace | CatWrite | CatSlow, FirstKey: 1, LastKey: -1,
			Group: "generic", Summary: "Deletes one or more keys.", Since: "1.0.0",
			Queue: delQueue, Reply: delReply, Many: countMany((*Client).queueDel, delCount)},
		&Command{Name: "unlink", Arity: -2, Flags: FlagWrite | FlagFast, Cats: CatKeyspace | CatWrite | CatFast, FirstKey: 1, LastKey: -1,
			Group: "generic", Summary: "Deletes one or more keys.", Since: "4.0.0",
			Queue: delQueue, Reply: delReply, Many: countMany((*Client).queueDel, delCount)},
		&Command{Name: "exists", Arity: -2, Flags: FlagReadOnly | FlagFast, Cats: CatKeyspace | CatRead | CatFast, FirstKey: 1, LastKey: -1,
			Group: "generic", Summary: "Determines whether one or more keys exist.", Since: "1.0.0",
			Queue: existsQueue, Reply: existsReply, Many: countMany((*Client).queueExists, existsCount)},
		&Command{Name: "pttl", Arity: 2, Flags: FlagReadOnly | FlagFast, Cats: CatKeyspace | CatRead | CatFast, FirstKey: 1, LastKey: 1,
			Group: "generic", Summary: "Returns the expiration time in milliseconds of a key.", Since: "2.6.0",
			Queue: pttlQueue, Reply: pttlReply},
		&Command{Name: "ttl", Arity: 2, Flags: FlagReadOnly | FlagFast, Cats: CatKeyspace | CatRead | CatFast, FirstKey: 1, LastKey: 1,
			Group: "generic", Summary: "Returns the expiration time in seconds of a key.", Since: "1.0.0",
			Queue: pttlQueue, Reply: ttlReply},
		&Command{Name: "type", Arity: 2, Flags: FlagReadOnly | FlagFast, Cats: CatKeyspace | CatRead | CatFast, FirstKey: 1, LastKey: 1,
			Group: "generic", Summary: "Determines the type of value stored at a key.", Since: "1.0.0",
			Queue: typeQueue, Reply: typeReply},
		&Command{Name: "keys", Arity: 2, Flags: FlagReadOnly, Cats: CatKeyspace | CatRead | CatSlow | CatDangerous, Group: "generic", Summary: "Returns all key names that match a pattern.", Since: "1.0.0",
			Run: keysCmd},
		&Command{Name: "scan", Arity: -2, Flags: FlagReadOnly, Cats: CatKeyspace | CatRead | CatSlow, Group: "generic", Summary: "Iterates over the key names in the database.", Since: "2.8.0",
			Run: scanCmd},
		&Command{Name: "dbsize", Arity: 1, Flags: FlagReadOnly | FlagFast, Cats: CatKeyspace | CatRead | CatFast, Group: "server", Summary: "Returns the number of keys in the database.", Since: "1.0.0",
			Run: dbsizeCmd},
		&Command{Name: "flushdb", Arity: -1, Flags: FlagWrite, Cats: CatKeyspace | CatWrite | CatSlow | CatDangerous, Group: "server", Summary: "Removes all keys from the current database.", Since: "1.0.0",
			Run: flushCmd},
		&Command{Name: "flushall", Arity: -1, Flags: FlagWrite, Cats: CatKeyspace | CatWrite | CatSlow | CatDangerous, Group: "server", Summary: "Removes all keys from all databases.", Since: "1.0.0",
			Run: flushCmd},
	)
}

// GET key
func getQueue(c *Client, args [][]byte) string {
	r := c.reqs.get.get()
	r.Key = args[1]
	queue(c, r)
	return ""
}

// DEL|UNLINK key [key ...]
func delQueue(c *Client, args [][]byte) string {
	for _, key := range args[1:] {
		c.queueDel(key)
	}
	return ""
}

func (c *Client) queueDel(key []byte) {
	r := c.reqs.del.get()
	r.Key = key
	queue(c, r)
}

// EXISTS key [key ...]
func existsQueue(c *Client, args [][]byte) string {
	for _, key := range args[1:] {
		c.queueExists(key)
	}
	return ""
}

func (c *Client) queueExists(key []byte) {
	r := c.reqs.exists.get()
	r.Key = key
	queue(c, r)
}

// PTTL|TTL key
func pttlQueue(c *Client, args [][]byte) string {
	r := c.reqs.pttl.get()
	r.Key = args[1]
	queue(c, r)
	return ""
}

// TYPE key
func typeQueue(c *Client, args [][]byte) string {
	r := c.reqs.typ.get()
	r.Key = args[1]
	queue(c, r)
	return ""
}

// countMany runs DEL|UNLINK|EXISTS over many keys a chunk at a time:
// queue queues a key's request, count says what a request adds to the
// reply. Each chunk goes to its shards as one batch; keys on different
// shards were never checked at one instant anyway.
func countMany(queue func(c *Client, key []byte), count func(c *Client, r store.Request) int64) func(c *Client, w *Out, args [][]byte) {
	return func(c *Client, w *Out, args [][]byte) {
		var n int64
		for keys := args[1:]; len(keys) > 0; {
			chunk := keys[:min(len(keys), maxKeptOps)]
			keys = keys[len(chunk):]
			for _, key := range chunk {
				queue(c, key)
			}
			reqs := c.queued
			c.runNow()
			if e := c.srv.statusError(reqs); e != "" {
				w.WriteError(e) // counted by execOne, as every Run error
				return
			}
			for _, r := range reqs {
				n += count(c, r)
			}
		}
		w.WriteInt(n)
	}
}

// delCount is 1 for a DelReq that removed its key.
func delCount(_ *Client, r store.Request) int64 {
	if r.(*store.DelReq).Removed {
		return 1
	}
	return 0
}

// existsCount is 1 for an ExistsReq whose key is live, and counts the
// lookup.
func existsCount(c *Client, r store.Request) int64 {
	found := r.(*store.ExistsReq).Exists
	c.srv.countLookup(found)
	if found {
		return 1
	}
	return 0
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
func getReply(c *Client, w *Out, _ [][]byte, reqs []store.Request) {
	r := reqs[0].(*store.GetReq)
	c.srv.countLookup(r.Found)
	if r.Err == store.ErrWrongType {
		c.srv.countError(ErrWrongType)
		w.WriteError(ErrWrongType)
		return
	}
	if !r.Found {
		w.WriteNull()
		return
	}
	w.WriteBulkUint(r.TAT)
}

// DEL|UNLINK|CL.RESET key [key ...]
func delReply(c *Client, w *Out, _ [][]byte, reqs []store.Request) {
	var n int64
	for _, r := range reqs {
		n += delCount(c, r)
	}
	w.WriteInt(n)
}

// EXISTS key [key ...]
func existsReply(c *Client, w *Out, _ [][]byte, reqs []store.Request) {
	var n int64
	for _, r := range reqs {
		n += existsCount(c, r)
	}
	w.WriteInt(n)
}

// PTTL key
func pttlReply(c *Client, w *Out, _ [][]byte, reqs []store.Request) {
	ms := reqs[0].(*store.PTTLReq).PTTL
	c.srv.countLookup(ms != -2)
	w.WriteInt(ms)
}

// TTL key: seconds, rounded to nearest as Redis does.
func ttlReply(c *Client, w *Out, _ [][]byte, reqs []store.Request) {
	ms := reqs[0].(*store.PTTLReq).PTTL
	c.srv.countLookup(ms != -2)
	if ms < 0 {
		w.WriteInt(ms)
		return
	}
	w.WriteInt((ms + 500) / 1000)
}

// TYPE key
func typeReply(c *Client, w *Out, _ [][]byte, reqs []store.Request) {
	k := reqs[0].(*store.TypeReq).Kind
	c.srv.countLookup(k != 0)
	if k != 0 {
		w.WriteString(k.TypeName())
	} else {
		w.WriteString("none")
	}
}

// everyShard runs one request on every shard, each taken from fl and
// filled by setup (if set), and returns them.
func everyShard[T any, P interface {
	*T
	store.Request
}](c *Client, fl *freeList[T], setup func(P)) []P {
	n := c.srv.st.NumShards()
	reqs := make([]P, n)
	for i := range reqs {
		r := P(fl.get())
		if setup != nil {
			setup(r)
		}
		reqs[i] = r
		c.QueueTo(i, r)
	}
	c.runNow()
	return reqs
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
	reqs := everyShard(c, &c.reqs.keys, func(r *store.KeysReq) { r.Pattern = pat })
	n := 0
	for _, r := range reqs {
		n += len(r.Keys)
	}
	w.WriteArray(n)
	for _, r := range reqs {
		for _, k := range r.Keys {
			w.WriteBulk(k)
		}
		r.Keys = nil
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
	typ := "" // TYPE's name, lower-case; a type no key has (hash, ...) lists nothing, as in Redis
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
			typ = strings.ToLower(string(args[i+1]))
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
		r := c.reqs.scan.get()
		r.Cursor = pos
		r.Count = int(min(budget, 1<<30))
		r.Pattern = pat
		r.Type = typ
		c.QueueTo(int(sh), r)
		c.runNow()
		keys = append(keys, r.Keys...)
		r.Keys = nil
		budget -= r.Examined
		if r.Next == 0 {
			sh, pos = sh+1, 0
		} else {
			pos = r.Next
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
	for _, r := range everyShard[store.DBSizeReq](c, &c.reqs.dbsize, nil) {
		n += r.Keys
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
	c.srv.trackFlush(c, func() { everyShard[store.FlushReq](c, &c.reqs.flush, nil) })
	w.WriteOK()
}
