package commands

import (
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"

	"github.com/cellserver/cellserver/limit"
	"github.com/cellserver/cellserver/store"
)

func registerMemory(t Table) {
	keyed := func(c *Command) *Command {
		c.FirstKey, c.LastKey, c.Step = 2, 2, 1
		c.Queue, c.Reply = memQueue, memReply
		return c
	}
	shardTips := []string{"nondeterministic_output", "request_policy:all_shards", "response_policy:special"}
	t.add(
		&Command{Name: "memory", Arity: -2, Cats: CatSlow, Group: "server", Summary: "A container for memory diagnostics commands.", Since: "4.0.0",
			Subcommands: []*Command{
				keyed(&Command{Name: "memory|usage", Arity: -3, Flags: FlagReadOnly, Cats: CatRead | CatSlow, Summary: "Estimates the memory usage of a key.", Since: "4.0.0"}),
				{Name: "memory|stats", Arity: 2, Cats: CatSlow, Run: memoryStats, Tips: shardTips,
					Summary: "Returns details about memory usage.", Since: "4.0.0"},
				{Name: "memory|doctor", Arity: 2, Cats: CatSlow, Run: memoryDoctor, Tips: shardTips,
					Summary: "Outputs a memory problems report.", Since: "4.0.0"},
				{Name: "memory|malloc-stats", Arity: 2, Cats: CatSlow, Run: memoryMallocStats, Tips: shardTips,
					Summary: "Returns the allocator statistics.", Since: "4.0.0"},
				{Name: "memory|purge", Arity: 2, Cats: CatSlow, Run: memoryPurge,
					Tips:    []string{"request_policy:all_shards", "response_policy:all_succeeded"},
					Summary: "Asks the allocator to release memory.", Since: "4.0.0"},
				{Name: "memory|help", Arity: 2, Flags: FlagLoading | FlagStale, Cats: CatSlow, Run: memoryHelp,
					Summary: "Returns helpful text about the different subcommands.", Since: "4.0.0"},
			}},
		&Command{Name: "strlen", Arity: 2, Flags: FlagReadOnly | FlagFast, Cats: CatRead | CatString | CatFast, FirstKey: 1, LastKey: 1,
			Group: "string", Summary: "Returns the length of a string value.", Since: "2.2.0",
			Queue: memQueue, Reply: strlenReply},
		&Command{Name: "object", Arity: -2, Cats: CatSlow, Group: "generic", Summary: "A container for object introspection commands.", Since: "2.2.3",
			Subcommands: []*Command{
				keyed(&Command{Name: "object|encoding", Arity: 3, Flags: FlagReadOnly, Cats: CatKeyspace | CatRead | CatSlow, Tips: []string{"nondeterministic_output"},
					Summary: "Returns the internal encoding of a Redis object.", Since: "2.2.3"}),
				keyed(&Command{Name: "object|freq", Arity: 3, Flags: FlagReadOnly, Cats: CatKeyspace | CatRead | CatSlow, Tips: []string{"nondeterministic_output"},
					Summary: "Returns the logarithmic access frequency counter of a Redis object.", Since: "4.0.0"}),
				keyed(&Command{Name: "object|idletime", Arity: 3, Flags: FlagReadOnly, Cats: CatKeyspace | CatRead | CatSlow, Tips: []string{"nondeterministic_output"},
					Summary: "Returns the time since the last access to a Redis object.", Since: "2.2.3"}),
				keyed(&Command{Name: "object|refcount", Arity: 3, Flags: FlagReadOnly, Cats: CatKeyspace | CatRead | CatSlow, Tips: []string{"nondeterministic_output"},
					Summary: "Returns the reference count of a value of a key.", Since: "2.2.3"}),
				{Name: "object|help", Arity: 2, Flags: FlagLoading | FlagStale, Cats: CatKeyspace | CatSlow, Run: objectHelp,
					Summary: "Returns helpful text about the different subcommands.", Since: "6.2.0"},
			}},
	)
}

// The texts of OBJECT FREQ and IDLETIME. cellserver keeps neither an
// access frequency nor an access time per key: FREQ answers what Redis
// answers without an LFU policy (cellserver's is noeviction); IDLETIME,
// which Redis answers under that policy, says plainly that it is not kept
// rather than answer a made-up time.
const (
	errNoLFU      = "ERR An LFU maxmemory policy is not selected, access frequency not tracked. Please note that when switching between policies at runtime LRU and LFU data will take some time to adjust."
	errNoIdleTime = "ERR cellserver keeps no access time per key: idle time not tracked."
)

// MEMORY USAGE key [SAMPLES count] | STRLEN key | OBJECT ENCODING|FREQ|IDLETIME|REFCOUNT key
func memQueue(c *Client, args [][]byte) string {
	key := args[1]
	if !strings.EqualFold(string(args[0]), "strlen") {
		key = args[2]
	}
	if strings.EqualFold(string(args[0]), "memory") {
		// SAMPLES is checked as Redis does; every state here is one value.
		for j := 3; j < len(args); j++ {
			if !strings.EqualFold(string(args[j]), "samples") || j+1 >= len(args) {
				return ErrSyntax
			}
			n, ok := limit.ParseRedisInt(args[j+1])
			if !ok {
				return ErrNotInteger
			}
			if n < 0 {
				return ErrSyntax
			}
			j++
		}
	}
	r := &store.MemReq{Key: key}
	queue(c, r)
	return ""
}

func memReply(c *Client, w *Out, args [][]byte, reqs []store.Request) {
	r := reqs[0].(*store.MemReq)
	sub := strings.ToLower(string(args[1]))
	if !r.Found {
		if sub == "usage" {
			w.WriteNull()
			return
		}
		w.WriteNull() // OBJECT on a missing key: Redis's null
		return
	}
	switch sub {
	case "usage":
		w.WriteInt(r.Bytes)
	case "encoding":
		// A GCRA key reads as the integer string GET returns, which Redis
		// keeps as "int"; any other state is an opaque value, which Redis
		// reports "raw" for (a module type's).
		if r.Kind == limit.KindGCRA {
			w.WriteBulkString("int")
		} else {
			w.WriteBulkString("raw")
		}
	case "refcount":
		w.WriteInt(1)
	case "freq":
		c.srv.countError(errNoLFU)
		w.WriteError(errNoLFU)
	case "idletime":
		c.srv.countError(errNoIdleTime)
		w.WriteError(errNoIdleTime)
	}
}

// STRLEN key: the length of what GET returns (a GCRA key's TAT in
// decimal); WRONGTYPE for a CL.LIMIT state, which GET does not read.
func strlenReply(c *Client, w *Out, _ [][]byte, reqs []store.Request) {
	r := reqs[0].(*store.MemReq)
	switch {
	case !r.Found:
		w.WriteInt(0)
	case r.Kind != limit.KindGCRA:
		c.srv.countError(ErrWrongType)
		w.WriteError(ErrWrongType)
	default:
		var tmp [20]byte
		w.WriteInt(int64(len(strconv.AppendUint(tmp[:0], r.TAT, 10))))
	}
}

// MEMORY STATS: Redis's fields that have a meaning here. The key tables
// live outside the Go heap (see store's flatmem); total.allocated counts
// both.
func memoryStats(c *Client, w *Out, _ [][]byte) {
	s := c.srv
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	st := s.st.Stats()
	heap := int64(ms.HeapAlloc)
	total := heap + st.TableBytes
	s.clientsMu.Lock()
	nclients := len(s.clients)
	s.clientsMu.Unlock()
	perKey := int64(0)
	if st.Keys > 0 {
		perKey = total / st.Keys
	}
	pct := 0.0
	if total > 0 {
		pct = float64(st.TableBytes) * 100 / float64(total)
	}
	rss := readRSS()
	frag := 0.0
	if total > 0 {
		frag = float64(rss) / float64(total)
	}
	w.WriteMap(14)
	kv := func(k string, v int64) {
		w.WriteBulkString(k)
		w.WriteInt(v)
	}
	kv("peak.allocated", max(s.peakMem(total), total))
	kv("total.allocated", total)
	kv("startup.allocated", s.startMem)
	kv("replication.backlog", 0)
	kv("clients.slaves", 0)
	kv("clients.normal", int64(nclients))
	kv("overhead.total", heap)
	kv("keys.count", st.Keys)
	kv("keys.bytes-per-key", perKey)
	kv("dataset.bytes", st.TableBytes)
	w.WriteBulkString("dataset.percentage")
	w.WriteDouble(pct)
	w.WriteBulkString("db.0")
	w.WriteMap(2)
	kv("overhead.hashtable.main", st.TableBytes)
	kv("overhead.hashtable.expires", 0)
	w.WriteBulkString("fragmentation")
	w.WriteDouble(frag)
	kv("fragmentation.bytes", rss-total)
}

// peakMem keeps the largest total seen by MEMORY STATS and returns it.
func (s *Server) peakMem(total int64) int64 {
	for {
		p := s.memPeak.Load()
		if total <= p || s.memPeak.CompareAndSwap(p, total) {
			return max(p, total)
		}
	}
}

// MEMORY DOCTOR: Redis's reports for an instance under 5 MB (too small to
// judge) and for one with no issue; cellserver has none of the problems
// Redis looks for (fork, big client buffers, allocator fragmentation).
func memoryDoctor(c *Client, w *Out, _ [][]byte) {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	if int64(ms.HeapAlloc)+c.srv.st.Stats().TableBytes < 5<<20 {
		w.WriteVerbatim("Hi Sam, this instance is empty or is using very little memory, my issues detector can't be used in these conditions. Please, leave for your mission on Earth and fill it with some data. The new Sam and I will be back to our programming as soon as I finished rebooting.")
		return
	}
	w.WriteVerbatim("Hi Sam, I can't find any memory issue in your instance. I can only account for what occurs on this base.")
}

// MEMORY MALLOC-STATS: Redis's answer built without jemalloc (a bulk
// string, where jemalloc's report is verbatim).
func memoryMallocStats(_ *Client, w *Out, _ [][]byte) {
	w.WriteBulkString("Stats not supported for the current allocator")
}

// MEMORY PURGE: hands freed Go heap back to the OS.
func memoryPurge(_ *Client, w *Out, _ [][]byte) {
	debug.FreeOSMemory()
	w.WriteOK()
}

// MEMORY HELP
func memoryHelp(_ *Client, w *Out, _ [][]byte) {
	writeHelp(w, []string{
		"MEMORY <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
		"DOCTOR",
		"    Return memory problems reports.",
		"MALLOC-STATS",
		"    Return internal statistics report from the memory allocator.",
		"PURGE",
		"    Attempt to purge dirty pages for reclamation by the allocator.",
		"STATS",
		"    Return information about the memory usage of the server.",
		"USAGE <key> [SAMPLES <count>]",
		"    Return memory in bytes used by <key> and its value. Nested values are",
		"    sampled up to <count> times (default: 5, 0 means sample all).",
		"HELP",
		"    Prints this help.",
	})
}

// OBJECT HELP
func objectHelp(_ *Client, w *Out, _ [][]byte) {
	writeHelp(w, []string{
		"OBJECT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
		"ENCODING <key>",
		"    Return the kind of internal representation used in order to store the value",
		"    associated with a <key>.",
		"FREQ <key>",
		"    Return the access frequency index of the <key>. The returned integer is",
		"    proportional to the logarithm of the recent access frequency of the key.",
		"IDLETIME <key>",
		"    Return the idle time of the <key>, that is the approximated number of",
		"    seconds elapsed since the last access to the key.",
		"REFCOUNT <key>",
		"    Return the number of references of the value associated with the specified",
		"    <key>.",
		"HELP",
		"    Prints this help.",
	})
}
