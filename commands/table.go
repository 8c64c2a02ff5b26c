package commands

import (
	"strings"
	"sync/atomic"

	"github.com/cellserver/cellserver/service"
	"github.com/cellserver/cellserver/store"
)

// Command is one entry of the command table: what COMMAND reports about it,
// and how it runs.
//
// A keyed command (Queue and Reply set) parses its arguments on the
// connection goroutine and queues typed store requests; the pipeline's
// requests go to each shard as one batch, and Reply then writes its answer
// from the finished requests. Any other command (Run set) runs in order
// after the requests queued before it are done, and writes its reply
// directly.
type Command struct {
	Name     string // lower case; for subcommands "parent|sub"
	Arity    int    // Redis convention: N exact, -N at least N (command name included)
	Flags    Flags  // Redis's flags (COMMAND INFO) and cellserver's behaviour flags
	Cats     Cats   // ACL categories (COMMAND INFO, COMMAND LIST FILTERBY ACLCAT)
	FirstKey int
	LastKey  int
	Step     int
	Group    string   // COMMAND DOCS group
	Summary  string   // COMMAND DOCS summary
	Since    string   // COMMAND DOCS since
	Tips     []string // COMMAND tips, e.g. "request_policy:all_shards" (cluster clients fan out on it)

	// Queue checks and parses args, queuing typed store requests with
	// queue or c.QueueTo. A non-empty return is an error reply for this
	// command, and no request may be queued.
	Queue func(c *Client, args [][]byte) string
	// Reply writes the reply from this command's requests, in queue order
	// (each of the type its Queue handler queued).
	Reply func(c *Client, w *Out, args [][]byte, reqs []store.Request)
	// Run executes a non-keyed command.
	Run func(c *Client, w *Out, args [][]byte)
	// Many, if set, runs a keyed command instead of Queue when it has more
	// than maxKeptOps arguments: in chunks of keys, so that a command naming
	// millions of keys does not hold a request for each at once.
	Many func(c *Client, w *Out, args [][]byte)
	// Call, if set, parses args into a call of the decision API (package
	// service), taken from the client's pools; the server queues it through
	// the service and, once the pipeline's session ran, writes an error
	// outcome itself or calls Answer. A non-empty string is the command's
	// error reply.
	Call func(c *Client, args [][]byte) (service.Call, string)
	// Answer writes a Call command's reply from its call's successful
	// outcome.
	Answer func(c *Client, w *Out, call service.Call)
	// Keys, if set, finds the key arguments by parsing (a movablekeys
	// command): COMMAND GETKEYS and cluster routing use it instead of
	// FirstKey, LastKey and Step.
	Keys func(argv [][]byte) [][]byte

	Subcommands []*Command

	id int // index of this command's counters in every client's stats
}

// write reports whether the command changes the keyspace (refused with
// MISCONF while persistence fails, held by CLIENT PAUSE WRITE).
func (c *Command) write() bool { return c.Flags&FlagWrite != 0 }

// cmdStat counts one command's calls for INFO commandstats. Each client
// keeps its own (one writer, no cache line shared between connections);
// INFO adds them up. rejected counts calls refused before running (Redis's
// rejected_calls), failed those that ran and answered an error.
type cmdStat struct {
	calls, failed, rejected, usec atomic.Int64
}

// Table maps lower-case command names to commands.
type Table map[string]*Command

// add registers cmds and their subcommands. A name registered twice is a
// bug of the table, refused at once.
func (t Table) add(cmds ...*Command) {
	for _, c := range cmds {
		if _, dup := t[c.Name]; dup {
			panic("commands: " + c.Name + " registered twice")
		}
		n := t.size()
		seen := map[string]bool{}
		for i, x := range append([]*Command{c}, c.Subcommands...) {
			if seen[x.Name] {
				panic("commands: " + x.Name + " registered twice")
			}
			seen[x.Name] = true
			if x.Step == 0 && x.FirstKey > 0 {
				x.Step = 1
			}
			x.id = n + i
		}
		t[c.Name] = c
	}
}

// size counts commands and subcommands.
func (t Table) size() int {
	n := 0
	for _, c := range t {
		n += 1 + len(c.Subcommands)
	}
	return n
}

// Lookup finds a command by name, case-insensitively, without allocating
// for names up to 32 bytes.
func (t Table) Lookup(name []byte) *Command {
	var buf [32]byte
	if len(name) <= len(buf) {
		for i, c := range name {
			if c >= 'A' && c <= 'Z' {
				c += 'a' - 'A'
			}
			buf[i] = c
		}
		return t[string(buf[:len(name)])]
	}
	return t[strings.ToLower(string(name))]
}

// slowLens is a bit set of the name lengths of commands that are Slow or
// have Slow subcommands, so Slow can skip nearly every command with no
// table lookup.
func (t Table) slowLens() uint64 {
	var m uint64
	for name, c := range t {
		slow := c.Flags&OffLoop != 0
		for _, sc := range c.Subcommands {
			slow = slow || sc.Flags&OffLoop != 0
		}
		if slow && len(name) < 64 {
			m |= 1 << len(name)
		}
	}
	return m
}

// sub finds a subcommand of c by name, case-insensitively.
func (c *Command) sub(name []byte) *Command {
	for _, s := range c.Subcommands {
		if strings.EqualFold(s.Name[len(c.Name)+1:], string(name)) {
			return s
		}
	}
	return nil
}

// arityOK reports whether n arguments (name included) fit the arity.
func arityOK(arity, n int) bool {
	if arity >= 0 {
		return n == arity
	}
	return n >= -arity
}

func newTable() Table {
	t := Table{}
	registerThrottle(t)
	registerLimit(t)
	registerKeyspace(t)
	registerConnection(t)
	registerServer(t)
	registerCluster(t)
	registerPubsub(t)
	registerTx(t)
	registerSlowlog(t)
	registerLatency(t)
	registerMemory(t)
	registerClientCtl(t)
	return t
}
