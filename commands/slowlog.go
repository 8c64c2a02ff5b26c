package commands

import (
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cellserver/cellserver/limit"
)

// Slow log defaults, as Redis's slowlog-log-slower-than and slowlog-max-len.
const (
	DefaultSlowlogSlowerThan = 10000 // µs
	DefaultSlowlogMaxLen     = 128
)

// Redis's bounds on what one slow log entry keeps of a command.
const (
	slowlogMaxArgc = 32
	slowlogMaxArg  = 128
)

// slowLog is the server's slow log: the latest commands that ran at least
// slowerThan µs, newest first, at most maxLen. Safe for concurrent use;
// a command that is not slow costs one atomic load (record).
type slowLog struct {
	slowerThan atomic.Int64 // µs; negative: off
	maxLen     atomic.Int64

	mu      sync.Mutex
	nextID  int64
	entries []slowEntry // oldest first
}

type slowEntry struct {
	id         int64
	unix       int64
	usec       int64
	args       [][]byte
	addr, name string
}

// slow reports whether a command that took usec µs goes in the log.
func (l *slowLog) slow(usec int64) bool {
	t := l.slowerThan.Load()
	return t >= 0 && usec >= t
}

// record logs a command that took usec µs, if it is slow. args are copied,
// bounded as Redis bounds them; a password never goes in the log
// (redacted).
func (l *slowLog) record(c *Client, cmd *Command, args [][]byte, usec int64) {
	if !l.slow(usec) {
		return
	}
	argc := min(len(args), slowlogMaxArgc)
	kept := make([][]byte, argc)
	for i := 0; i < argc; i++ {
		switch a := args[i]; {
		case redacted(cmd, args, i):
			kept[i] = []byte("(redacted)")
		case argc < len(args) && i == argc-1:
			kept[i] = []byte("... (" + strconv.Itoa(len(args)-argc+1) + " more arguments)")
		case len(a) > slowlogMaxArg:
			kept[i] = append(append([]byte(nil), a[:slowlogMaxArg]...), "... ("+strconv.Itoa(len(a)-slowlogMaxArg)+" more bytes)"...)
		default:
			kept[i] = append([]byte(nil), a...)
		}
	}
	c.mu.Lock()
	name := c.name
	c.mu.Unlock()
	e := slowEntry{unix: time.Now().Unix(), usec: usec, args: kept, addr: c.Addr, name: name}
	l.mu.Lock()
	defer l.mu.Unlock()
	e.id = l.nextID
	l.nextID++
	l.entries = append(l.entries, e)
	l.trimLocked()
}

// redacted reports an argument Redis 7 shows as "(redacted)"
// (redactClientCommandArgument): AUTH's, HELLO's after AUTH, and the value
// of a sensitive parameter in CONFIG SET.
func redacted(cmd *Command, args [][]byte, i int) bool {
	switch cmd.Name {
	case "auth":
		return i >= 1
	case "hello":
		for j := 2; j < i && j < len(args); j++ {
			if strings.EqualFold(string(args[j]), "auth") && i <= j+2 {
				return true
			}
		}
	case "config|set":
		if i >= 3 && i%2 == 1 {
			switch strings.ToLower(string(args[i-1])) {
			case "requirepass", "masterauth":
				return true
			}
		}
	}
	return false
}

func (l *slowLog) trimLocked() {
	if n := int64(len(l.entries)) - l.maxLen.Load(); n > 0 {
		clear(l.entries[:n])
		l.entries = append(l.entries[:0], l.entries[n:]...)
	}
}

func (l *slowLog) setMaxLen(n int64) {
	l.maxLen.Store(n)
	l.mu.Lock()
	l.trimLocked()
	l.mu.Unlock()
}

func registerSlowlog(t Table) {
	t.add(&Command{Name: "slowlog", Arity: -2, Cats: CatSlow, Group: "server", Summary: "A container for slow log commands.", Since: "2.2.12",
		Subcommands: []*Command{
			{Name: "slowlog|get", Arity: -2, Flags: FlagAdmin | FlagLoading | FlagStale, Cats: CatAdmin | CatSlow | CatDangerous, Run: slowlogGet,
				Summary: "Returns the slow log's entries.", Since: "2.2.12",
				Tips: []string{"request_policy:all_nodes", "nondeterministic_output"}},
			{Name: "slowlog|len", Arity: 2, Flags: FlagAdmin | FlagLoading | FlagStale, Cats: CatAdmin | CatSlow | CatDangerous, Run: slowlogLen,
				Summary: "Returns the number of entries in the slow log.", Since: "2.2.12",
				Tips: []string{"request_policy:all_nodes", "response_policy:agg_sum", "nondeterministic_output"}},
			{Name: "slowlog|reset", Arity: 2, Flags: FlagAdmin | FlagLoading | FlagStale | AdminOnly, Cats: CatAdmin | CatSlow | CatDangerous, Run: slowlogReset,
				Summary: "Clears all entries from the slow log.", Since: "2.2.12",
				Tips: []string{"request_policy:all_nodes", "response_policy:all_succeeded"}},
			{Name: "slowlog|help", Arity: 2, Flags: FlagLoading | FlagStale, Cats: CatSlow, Run: slowlogHelp,
				Summary: "Show helpful text about the different subcommands", Since: "6.2.0"},
		}})
}

// SLOWLOG GET [count]: newest first; count -1 is all, default 10.
func slowlogGet(c *Client, w *Out, args [][]byte) {
	if len(args) > 3 {
		w.WriteError(wrongArity("slowlog|get"))
		return
	}
	count := int64(10)
	if len(args) == 3 {
		n, ok := limit.ParseRedisInt(args[2])
		if !ok || n < -1 {
			w.WriteError("ERR count should be greater than or equal to -1")
			return
		}
		count = n
	}
	l := &c.srv.slowlog
	l.mu.Lock()
	list := append([]slowEntry(nil), l.entries...)
	l.mu.Unlock()
	if count == -1 || count > int64(len(list)) {
		count = int64(len(list))
	}
	w.WriteArray(int(count))
	for i := 0; i < int(count); i++ {
		e := &list[len(list)-1-i]
		w.WriteArray(6)
		w.WriteInt(e.id)
		w.WriteInt(e.unix)
		w.WriteInt(e.usec)
		w.WriteArray(len(e.args))
		for _, a := range e.args {
			w.WriteBulk(a)
		}
		w.WriteBulkString(e.addr)
		w.WriteBulkString(e.name)
	}
}

// SLOWLOG LEN
func slowlogLen(c *Client, w *Out, _ [][]byte) {
	l := &c.srv.slowlog
	l.mu.Lock()
	n := len(l.entries)
	l.mu.Unlock()
	w.WriteInt(int64(n))
}

// SLOWLOG RESET
func slowlogReset(c *Client, w *Out, _ [][]byte) {
	l := &c.srv.slowlog
	l.mu.Lock()
	l.entries = nil
	l.mu.Unlock()
	w.WriteOK()
}

// SLOWLOG HELP
func slowlogHelp(_ *Client, w *Out, _ [][]byte) {
	writeHelp(w, []string{
		"SLOWLOG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
		"GET [<count>]",
		"    Return top <count> entries from the slowlog (default: 10, -1 mean all).",
		"    Entries are made of:",
		"    id, timestamp, time in microseconds, arguments array, client IP and port,",
		"    client name",
		"LEN",
		"    Return the length of the slowlog.",
		"RESET",
		"    Reset the slowlog.",
		"HELP",
		"    Prints this help.",
	})
}
