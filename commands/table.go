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
	Flags    []string
	FirstKey int
	LastKey  int
	Step     int
	Group    string // COMMAND DOCS group
	Summary  string // COMMAND DOCS summary
	Since    string
	NoAuth   bool // may run before AUTH
	// SelfRouted: in cluster mode the handler checks its keys' slot itself
	// (MIGRATE moves keys of slots this node may not serve), so execOne
	// does not refuse them with MOVED.
	SelfRouted bool
	// Protected is DEBUG: refused unless --enable-debug-command allows the
	// client, before AUTH is even checked, as Redis's CMD_PROTECTED.
	Protected bool
	// Slow marks a command that waits on other servers, may run for
	// seconds, or pauses (a failed AUTH): the wire layer runs a pipeline
	// holding one off its event loop, so the loop's other connections are
	// not held up, and a node never waits on a peer that waits on it.
	Slow bool
	Tips []string // COMMAND tips, e.g. "request_policy:all_shards" (cluster clients fan out on it)

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

	// infoFlags and acl are what COMMAND INFO reports (applyRedisMeta):
	// Redis's for a command Redis has, else Flags and the categories they
	// imply.
	infoFlags []string
	acl       []string

	write bool // has the "write" flag (refused with MISCONF while persistence fails)
	admin bool // has the "admin" flag: only the admin user may run it (Client.isAdmin)
	id    int  // index of this command's counters in every client's stats
}

// cmdStat counts one command's calls for INFO commandstats. Each client
// keeps its own (one writer, no cache line shared between connections);
// INFO adds them up. rejected counts calls refused before running (Redis's
// rejected_calls), failed those that ran and answered an error.
type cmdStat struct {
	calls, failed, rejected, usec atomic.Int64
}

// Table maps lower-case command names to commands.
type Table map[string]*Command

func (t Table) add(cmds ...*Command) {
	for _, c := range cmds {
		n := t.size()
		for i, x := range append([]*Command{c}, c.Subcommands...) {
			if x.Step == 0 && x.FirstKey > 0 {
				x.Step = 1
			}
			x.write = hasFlag(x.Flags, "write")
			x.admin = hasFlag(x.Flags, "admin")
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
		slow := c.Slow
		for _, sc := range c.Subcommands {
			slow = slow || sc.Slow
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
	t.applyRedisMeta()
	return t
}
