// Package commands is cellserver's command table: every command's name,
// arity, flags and key positions, its argument parsing, and its replies and
// error texts, which match Redis 7 and redis-cell byte for byte.
//
// The wire layer hands each pipeline to Server.Exec with a Client and an Out
// buffer. Keyed commands are parsed on the connection goroutine into typed
// store requests, batched per shard; every other command runs in order
// after the requests before it are done.
package commands

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"log/slog"
	"net"
	"runtime/debug"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cellserver/cellserver/metrics"
	"github.com/cellserver/cellserver/peer"
	"github.com/cellserver/cellserver/service"
	"github.com/cellserver/cellserver/store"
)

// Version is cellserver's own version, reported in INFO.
const Version = "0.1.0"

// RedisVersion is the Redis version cellserver reports to clients (INFO,
// HELLO), which gate features on it.
const RedisVersion = "7.2.0"

// Config configures a Server.
type Config struct {
	// RequirePass, if set, is the password of the default user (AUTH).
	RequirePass string
	// AdminPassword, if set, is the password of the user "admin" (AUTH
	// admin <password>), the only one that may run admin commands (those
	// flagged "admin": CLUSTER SETTOPOLOGY, CLUSTER IMPORTSTATE, DEBUG);
	// admin may run every other command too. If empty there is no admin
	// user, and admin commands are accepted from loopback clients only.
	// It must differ from RequirePass.
	AdminPassword string
	// EnableDebug is "no" (default), "yes" or "local" (loopback clients only),
	// as Redis's enable-debug-command.
	EnableDebug string
	// Addr is the listen address, reported by INFO and CONFIG GET.
	Addr string
	// Logger receives warnings such as recovered panics. Default slog.Default().
	Logger *slog.Logger
	// Cluster configures cluster mode (default: off).
	Cluster ClusterConfig
	// StopWrites makes state-changing commands answer MISCONF while
	// persistence writes fail (like stop-writes-on-bgsave-error).
	StopWrites bool
	// Params are extra values for CONFIG GET and INFO (e.g. "maxclients"),
	// by Redis parameter name.
	Params map[string]string
	// MaxKeyBytes is the longest key a command accepts; longer ones get
	// ErrKeyTooLong. Limiter keys are short and every one is kept in memory
	// and written to disk, so a client must not make the server hold a
	// huge one. Default DefaultMaxKeyBytes; negative: no limit.
	MaxKeyBytes int
	// SlowlogLogSlowerThan is the slow log's threshold in µs (Redis's
	// slowlog-log-slower-than): 0 logs every command, -1 none. nil:
	// DefaultSlowlogSlowerThan.
	SlowlogLogSlowerThan *int64
	// SlowlogMaxLen is how many entries the slow log keeps (Redis's
	// slowlog-max-len, at least 0). nil: DefaultSlowlogMaxLen.
	SlowlogMaxLen *int64
	// LatencyMonitorThreshold is the latency monitor's threshold in ms
	// (Redis's latency-monitor-threshold); 0, the default, is off.
	LatencyMonitorThreshold int64
	// TrackingMaxKeys bounds the keys tracking clients have read and not
	// yet been told of (CLIENT TRACKING; counted per client and key), as
	// Redis's tracking-table-max-keys. Past it a read key is invalidated at
	// once instead of remembered. Default DefaultTrackingMaxKeys.
	TrackingMaxKeys int
	// Metrics is the server's metrics registry: New registers the server's
	// collectors in it (connections, commands, errors, persistence, keys,
	// RESP's decisions), INFO ratelimit renders it, and the gateways
	// report to it. nil: New makes one (Server.Metrics). One per server:
	// a second Server on the same registry fails New.
	Metrics *metrics.Registry
}

// DefaultMaxKeyBytes is Config.MaxKeyBytes's default (64 KiB).
const DefaultMaxKeyBytes = 64 << 10

// Server executes commands against a store. Safe for concurrent use by
// many connections.
type Server struct {
	cfg   Config
	st    *store.Store
	clock *store.Clock
	table Table
	// slowLens: see Table.slowLens.
	slowLens uint64
	// writesOffLoop: writes run off the event loops (see New).
	writesOffLoop bool
	started       time.Time
	runID         string // 40 random hex characters, new at every start (INFO run_id), as Redis
	log           *slog.Logger
	// xprotoLogged: Unix time of the last cross-protocol warning.
	xprotoLogged atomic.Int64
	// loopPools are each event loop's call pools, by its owner's ID.
	loopPools []loopPools

	nextID      atomic.Int64
	clientsMu   sync.Mutex
	clients     map[int64]*Client
	retired     []*cmdStat // counts of closed clients, per command id
	stats       serverStats
	errorCounts sync.Map // error code -> *atomic.Int64

	opsMu      sync.Mutex
	opsSamples [16]float64 // commands/s over the last 16 sampling periods
	opsIdx     int
	opsLast    int64
	opsLastT   time.Time
	stop       chan struct{}
	stopOnce   sync.Once

	svc *service.Service // the decision API the CL.* commands call

	myID string     // cluster node id
	node *peer.Node // the node's slot states and moves, its peers
	// orphanCheck: warn of keys of slots not served here, once serving
	// (peer.Node.WarnOrphans, at the first connection).
	orphanCheck bool
	orphanOnce  sync.Once

	sleep func(time.Duration) // the pause after a failed AUTH; tests record it instead

	// The diagnostics of slowlog.go and latency.go: hists per command id.
	slowlog slowLog
	latency latencyMonitor
	hists   []cmdHist
	ctl     clientCtl // CLIENT PAUSE (clientctl.go)
	// MEMORY STATS's peak and startup figures.
	memPeak      atomic.Int64
	startMem     int64
	trackedKeys  atomic.Int64 // keys remembered for tracking clients (TrackingMaxKeys)
	trackedBytes atomic.Int64 // their bytes (MaxTrackedBytes)
	bcast        broadcasts   // the BCAST tracking clients
	flushing     flushers     // the sessions running a FLUSHALL or FLUSHDB

	metrics *metrics.Registry
	// decisions counts the CL.THROTTLE and CL.LIMIT decisions answered
	// (metrics.go), by command and outcome.
	decisions [decCommands][decOutcomes]atomic.Int64
}

type serverStats struct {
	connections  atomic.Int64 // total accepted
	rejectedConn atomic.Int64
	commands     atomic.Int64
	netIn        atomic.Int64
	netOut       atomic.Int64
	hits, misses atomic.Int64
	errorReplies atomic.Int64
	moved        atomic.Int64
	// Clients disconnected for a limit (Redis's INFO stats names).
	queryBufLimit, outputBufLimit, idleTimeouts atomic.Int64
	authDenied                                  atomic.Int64 // failed AUTH and HELLO AUTH (acl_access_denied_auth)
	cmdDenied                                   atomic.Int64 // NOPERM replies (acl_access_denied_cmd)
}

// New returns a Server executing against st.
func New(cfg Config, st *store.Store) (*Server, error) {
	if cfg.EnableDebug == "" {
		cfg.EnableDebug = "no"
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.MaxKeyBytes == 0 {
		cfg.MaxKeyBytes = DefaultMaxKeyBytes
	}
	if cfg.TrackingMaxKeys <= 0 {
		cfg.TrackingMaxKeys = DefaultTrackingMaxKeys
	}
	if cfg.AdminPassword != "" && cfg.AdminPassword == cfg.RequirePass {
		return nil, errors.New("commands: the admin password must differ from the default user's (requirepass)")
	}
	s := &Server{
		cfg:      cfg,
		st:       st,
		clock:    st.Clock(),
		table:    newTable(),
		started:  time.Now(),
		runID:    newRunID(),
		log:      cfg.Logger,
		clients:  map[int64]*Client{},
		stop:     make(chan struct{}),
		opsLastT: time.Now(),
		sleep:    time.Sleep,
		metrics:  cfg.Metrics,

		loopPools: make([]loopPools, len(st.Owners())),
	}
	// Under --fsync always every write waits for its fsync. With shards on
	// goroutines of their own (a store no event loop hosts), writes run off
	// the event loops so that many connections wait at once and share each
	// fsync (group commit), instead of a loop waiting for one connection's
	// fsync after another. (Loops that host the shards need not: their
	// sessions defer the wait, and the loop writes a pipeline's replies
	// once its changes are synced; see Client.AwaitSync.)
	s.writesOffLoop = st.SyncsWrites() && !st.Hosted()
	s.slowLens = s.table.slowLens()
	s.hists = make([]cmdHist, s.table.size())
	s.initDiagnostics()
	if err := s.initMetrics(); err != nil {
		return nil, err
	}
	if err := s.initCluster(); err != nil {
		return nil, err
	}
	sc := service.Config{Store: st, MaxKeyBytes: cfg.MaxKeyBytes}
	if s.clusterOn() {
		sc.Slots = s
	}
	s.svc = service.New(sc)
	go s.sampleOps()
	return s, nil
}

// Service returns the decision API the CL.* commands call, for the other
// front ends (HTTP, gRPC) to share: same store, same routing rules.
func (s *Server) Service() *service.Service { return s.svc }

// newRunID returns 40 random hex characters, as Redis's run_id: tools tell
// a restarted server by it.
func newRunID() string {
	var b [20]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Close stops the server's background sampling. Idempotent.
func (s *Server) Close() { s.stopOnce.Do(func() { close(s.stop); s.node.Close() }) }

// sampleOps keeps instantaneous_ops_per_sec as Redis does: the mean rate
// over the last 16 samples taken every 100 ms.
func (s *Server) sampleOps() {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case now := <-t.C:
			n := s.stats.commands.Load()
			s.opsMu.Lock()
			if dt := now.Sub(s.opsLastT).Seconds(); dt > 0 {
				s.opsSamples[s.opsIdx%len(s.opsSamples)] = float64(n-s.opsLast) / dt
				s.opsIdx++
			}
			s.opsLast, s.opsLastT = n, now
			s.opsMu.Unlock()
		}
	}
}

func (s *Server) opsPerSec() int64 {
	s.opsMu.Lock()
	defer s.opsMu.Unlock()
	var sum float64
	for _, v := range s.opsSamples {
		sum += v
	}
	return int64(sum / float64(len(s.opsSamples)))
}

// Client is one connection's state. Its pipeline fields are used only by the
// connection's goroutine; fields read by CLIENT LIST from other connections
// are guarded by mu or atomic.
type Client struct {
	srv    *Server
	ID     int64
	Addr   string // remote address, host:port
	LAddr  string // local address
	local  bool   // loopback or unix socket: DEBUG under "local"
	asking bool   // ASKING was sent: the next command may use a slot importing here

	// calls are the pools the pipeline's service calls come from (see
	// pools); nil between pipelines. own are the client's, used off the
	// event loops; on a loop, calls are the loop's, from from.
	calls *callPools
	from  *loopPools
	own   callPools

	created  time.Time
	lastUsed atomic.Int64 // Unix ns of the last command
	fd       atomic.Int64 // the socket's descriptor, for CLIENT LIST (-1: none known)
	// qbuf, omem: the connection's buffered unfinished request and unsent
	// replies in bytes, as the wire layer last saw them (SetQueryBuffer,
	// SetOutputBuffer), for CLIENT LIST and INFO.
	qbuf, omem atomic.Int64
	lastCmd    atomic.Pointer[Command]
	closing    bool

	mu      sync.Mutex
	name    string
	libName string
	libVer  string
	authed  atomic.Bool
	admin   atomic.Bool // authenticated as the admin user
	// proto is the connection's protocol, 2 (RESP2) until HELLO 3, which
	// makes it 3; CLIENT LIST reads it from other connections.
	proto atomic.Int32
	// authFails counts the connection's failed AUTHs (see authFailed).
	// Only the goroutine running the connection's pipeline touches it.
	authFails int

	sess  *store.Session
	stats []cmdStat // per command id
	// The last command name looked up, as sent, and its command: clients
	// mostly repeat one command, and comparing the name is cheaper than
	// folding its case and hashing it for the table.
	lastName []byte
	lastLook *Command
	// queued are the pipeline's requests in queue order, from free lists
	// in reqs; both are reused from one pipeline to the next.
	queued []store.Request
	reqs   requests
	slots  []slot

	tx *txState // MULTI and WATCH (tx.go); nil until first used
	// multiN is the number of commands queued since MULTI, -1 outside
	// MULTI, for CLIENT LIST (multi=, flag x) from other connections.
	multiN atomic.Int32
	// authPause is the pause owed for AUTHs that failed inside EXEC, paid
	// once its shards are let go (authFailed).
	authPause time.Duration

	// clientctl.go's state. offLoop, replyOff, skipCur and skipNext are
	// the pipeline goroutine's; kill is under mu.
	offLoop           bool         // the pipeline runs off the event loops (SetOffLoop)
	home              *store.Owner // the owner the client's event loop hosts (SetHome)
	queuedSince       time.Time    // when the slots finish writes next began to queue (zero: finish reads the clock)
	replyOff          bool         // CLIENT REPLY OFF
	skipCur, skipNext bool         // CLIENT REPLY SKIP: this command's reply, the next one's
	kill              func()
	killPending       bool // CLIENT KILL came before SetKill
	// killed is set by another connection's CLIENT KILL before it asks the
	// wire layer to close this one: from then on none of this client's
	// commands runs (Redis frees a killed client at once, so a command it
	// sent after the kill was answered is never run).
	killed           atomic.Bool
	noEvict, noTouch atomic.Bool
	hungUp           atomic.Bool   // the connection closed (HangUp)
	hangup           chan struct{} // closed by HangUp
	// trk is the client's CLIENT TRACKING state, nil until it first
	// switches tracking on (set once; CLIENT LIST and INFO read it from
	// other goroutines); pusher writes push messages to the connection
	// (SetPusher); gone is set once the client closed.
	trk    atomic.Pointer[tracker]
	pusher atomic.Pointer[func([]byte)]
	gone   atomic.Bool
	// subs are the channels the client subscribed to (pubsub.go), only
	// touched by its goroutine; nsubs counts them and subInvalidate says
	// whether __redis__:invalidate is one, for other goroutines.
	subs          map[string]struct{}
	nsubs         atomic.Int32
	subInvalidate atomic.Bool
	// hooked: the client tracks or subscribed, so execOne calls hooks.
	hooked bool
	// decided are the pipeline's decision counts not yet added to the
	// server's (flushDecisions); only the pipeline's goroutine uses them.
	decided [decCommands][decOutcomes]int64
}

// quiet reports whether the command being run gets no reply (CLIENT REPLY
// OFF or SKIP).
func (c *Client) quiet() bool { return c.replyOff || c.skipCur }

type slot struct {
	cmd      *Command
	args     [][]byte
	from, to int          // queued[from:to]
	call     service.Call // a Call command's, queued through the service
	err      string
	quiet    bool // CLIENT REPLY OFF or SKIP: the reply is dropped
}

// NewClient registers a connection. Call Close when it ends.
func (s *Server) NewClient(remote, local net.Addr) *Client {
	if s.orphanCheck {
		// Once the wire layer serves (its event loops run the shards): a
		// session started before could wait forever on a store that never
		// serves, and hold up its Close.
		s.orphanOnce.Do(func() { go s.node.WarnOrphans() })
	}
	c := &Client{
		srv:     s,
		ID:      s.nextID.Add(1),
		created: time.Now(),
		sess:    s.st.NewSession(),
		stats:   make([]cmdStat, s.table.size()),
	}
	c.sess.ID = uint64(c.ID) // key listeners learn who changed a key
	if remote != nil {
		c.Addr = remote.String()
		c.local = isLocal(remote)
	}
	if local != nil {
		c.LAddr = local.String()
	}
	c.lastUsed.Store(time.Now().UnixNano())
	c.fd.Store(-1)
	c.multiN.Store(-1)
	c.hangup = make(chan struct{})
	c.authed.Store(s.cfg.RequirePass == "")
	c.proto.Store(2)
	s.stats.connections.Add(1)
	s.clientsMu.Lock()
	s.clients[c.ID] = c
	s.clientsMu.Unlock()
	return c
}

func isLocal(a net.Addr) bool {
	switch a := a.(type) {
	case *net.TCPAddr:
		return a.IP.IsLoopback()
	case *net.UnixAddr:
		return true
	}
	return false
}

// Close unregisters the client, keeping its command counts for INFO.
func (c *Client) Close() {
	c.closeTx()
	c.closeTracking()
	s := c.srv
	s.clientsMu.Lock()
	delete(s.clients, c.ID)
	for i := range c.stats {
		r := s.retiredStat(i)
		r.calls.Add(c.stats[i].calls.Load())
		r.failed.Add(c.stats[i].failed.Load())
		r.rejected.Add(c.stats[i].rejected.Load())
		r.usec.Add(c.stats[i].usec.Load())
	}
	s.clientsMu.Unlock()
}

// stat returns the client's counters for cmd.
func (c *Client) stat(cmd *Command) *cmdStat {
	if cmd.id >= len(c.stats) { // a command added after the client connected
		c.stats = append(c.stats, make([]cmdStat, cmd.id+1-len(c.stats))...)
	}
	return &c.stats[cmd.id]
}

// retiredStat returns the counters of closed clients for command id i.
// Call with clientsMu held.
func (s *Server) retiredStat(i int) *cmdStat {
	for i >= len(s.retired) {
		s.retired = append(s.retired, &cmdStat{})
	}
	return s.retired[i]
}

// commandStat sums a command's counters over closed and live clients.
func (s *Server) commandStat(cmd *Command) (calls, failed, rejected, usec int64) {
	s.clientsMu.Lock()
	defer s.clientsMu.Unlock()
	r := s.retiredStat(cmd.id)
	calls, failed, rejected, usec = r.calls.Load(), r.failed.Load(), r.rejected.Load(), r.usec.Load()
	for _, c := range s.clients {
		if cmd.id < len(c.stats) {
			st := &c.stats[cmd.id]
			calls += st.calls.Load()
			failed += st.failed.Load()
			rejected += st.rejected.Load()
			usec += st.usec.Load()
		}
	}
	return
}

// SetFD records the connection's socket descriptor for CLIENT LIST/INFO.
func (c *Client) SetFD(fd int) { c.fd.Store(int64(fd)) }

// Authenticated reports whether the client passed AUTH (or none is required).
// The wire layer uses it for Redis's tighter limits on unauthenticated input.
func (c *Client) Authenticated() bool { return c.authed.Load() }

// Proto is the client's protocol version: 2 (RESP2) or 3 (RESP3, after
// HELLO 3).
func (c *Client) Proto() int { return int(c.proto.Load()) }

// Closing reports whether the client asked to close (QUIT): the wire layer
// flushes the replies and closes the connection.
func (c *Client) Closing() bool { return c.closing }

// CountNet adds to the network byte counters in INFO stats.
func (s *Server) CountNet(in, out int) {
	s.stats.netIn.Add(int64(in))
	s.stats.netOut.Add(int64(out))
}

// RejectConnection counts a connection refused by the wire layer (maxclients).
func (s *Server) RejectConnection() { s.stats.rejectedConn.Add(1) }

// CountQueryBufferLimit counts a client closed for its query buffer.
func (s *Server) CountQueryBufferLimit() { s.stats.queryBufLimit.Add(1) }

// CountOutputBufferLimit counts a client closed for its output buffer.
func (s *Server) CountOutputBufferLimit() { s.stats.outputBufLimit.Add(1) }

// CountIdleTimeout counts a client closed for being idle (timeout).
func (s *Server) CountIdleTimeout() { s.stats.idleTimeouts.Add(1) }

// queue hands r to the store as part of this pipeline's batch for its key's
// shard. (A function of R rather than a method taking a KeyedRequest: the
// request is kept as a Request too, and converting one interface to
// another looks its method table up on every call.)
func queue[R store.KeyedRequest](c *Client, r R) {
	c.sess.Add(r)
	c.queued = append(c.queued, r)
}

// QueueTo hands r to shard i: a shard-wide request, or one whose keys all
// live there.
func (c *Client) QueueTo(i int, r store.Request) {
	c.sess.AddTo(i, r)
	c.queued = append(c.queued, r)
}

// runNow executes the requests queued so far and makes the client's free
// lists reusable. Only Run handlers call it (after finish, so no pipeline
// slot still holds requests); what they read of a request after it must
// come before they take another of its kind.
func (c *Client) runNow() {
	c.sess.Run()
	c.recycle()
}

// Slow reports whether a pipeline holds a Slow command (see Command.Slow).
func (s *Server) Slow(cmds [][][]byte) bool {
	if s.ctl.paused.Load() && s.pausedPipeline(cmds) {
		return true // a paused command waits off the event loop
	}
	for _, args := range cmds {
		if len(args) == 0 || len(args[0]) >= 64 || s.slowLens&(1<<len(args[0])) == 0 {
			continue
		}
		cmd := s.table.Lookup(args[0])
		if cmd == nil {
			continue
		}
		if s.offLoop(cmd) {
			return true
		}
		if len(args) >= 2 {
			if sc := cmd.sub(args[1]); sc != nil && s.offLoop(sc) {
				return true
			}
		}
	}
	return false
}

// offLoop reports whether cmd runs off the event loop (see OffLoop).
func (s *Server) offLoop(cmd *Command) bool {
	return cmd.Flags&OffLoop != 0 || s.writesOffLoop && cmd.write()
}

// crossProtocol reports whether a command is named as an HTTP request's
// first lines are: a web page made to post to this port (cross-protocol
// scripting) sends "POST / HTTP/1.1" and "Host: ..." before its body, whose
// lines a Redis-protocol server would run as commands.
func crossProtocol(name []byte) bool {
	return bytes.EqualFold(name, []byte("post")) || bytes.EqualFold(name, []byte("host:"))
}

// crossProtocolAttack does what Redis does on such a line
// (securityWarningCommand): no reply, nothing after it runs, the
// connection is closed, and a warning is logged at most once a minute.
func (s *Server) crossProtocolAttack(c *Client) {
	c.closing = true
	now := time.Now().Unix()
	if last := s.xprotoLogged.Load(); now-last > 60 && s.xprotoLogged.CompareAndSwap(last, now) {
		s.log.Warn("Possible SECURITY ATTACK detected. It looks like somebody is sending POST or Host: commands to cellserver. This is likely due to an attacker attempting to use Cross Protocol Scripting to compromise your cellserver instance. Connection aborted.", "addr", c.Addr)
	}
}

// Exec runs one pipeline: the commands in cmds (each the full argv), with
// replies appended to out in request order, in the client's protocol
// (Exec sets out.Proto; a HELLO in the pipeline changes it for the replies
// after its own). It returns how many it ran: all of them, unless the
// client quit or the replies went past out.Limit first (the wire layer then
// writes them and runs the rest, or drops the client).
func (s *Server) Exec(c *Client, cmds [][][]byte, out *Out) int {
	n, _ := s.ExecAsync(c, cmds, out, nil)
	return n
}

// ExecAsync is Exec for a client on its event loop (SetHome): when the
// pipeline's queued requests need another loop's shards, it hands them
// over and returns pending instead of waiting. done is then called, on
// another goroutine, once they ran, and the caller calls Resume on the
// loop to write the replies. The pipeline's arguments must stay unchanged
// until then: the requests in flight read them. With done nil it is Exec.
func (s *Server) ExecAsync(c *Client, cmds [][][]byte, out *Out, done func()) (n int, pending bool) {
	out.Proto = c.Proto()
	now := time.Now()
	c.lastUsed.Store(now.UnixNano())
	// The pipeline's commands count their time from its start, as Redis
	// counts a command's from before it parses it (one clock read fewer a
	// pipeline), unless a finish before theirs took it (see finish).
	c.queuedSince = now
	for _, args := range cmds {
		if c.killed.Load() {
			c.closing = true
		}
		if c.closing || out.Exceeded() {
			break
		}
		s.execOne(c, args, out)
		n++
	}
	if n > 0 {
		s.stats.commands.Add(int64(n))
	}
	// Only a pipeline that ran whole is left pending (one stopped early
	// has its rest run by the caller after its replies).
	if done != nil && n == len(cmds) && len(c.slots) > 0 {
		if c.queuedSince.IsZero() {
			c.queuedSince = time.Now() // its wait on other loops counts
		}
		if c.sess.RunAsync(done) {
			return n, true
		}
	}
	s.finish(c, out)
	return n, false
}

// Resume writes the replies of a pipeline ExecAsync left pending, once its
// done was called; on the client's loop.
func (s *Server) Resume(c *Client, out *Out) {
	c.sess.Finish()
	s.finish(c, out)
}

func (s *Server) execOne(c *Client, args [][]byte, out *Out) {
	if len(args) == 0 {
		return
	}
	c.skipCur, c.skipNext = c.skipNext, false
	cmd := c.lastLook
	if cmd == nil || !bytes.Equal(args[0], c.lastName) {
		if cmd = s.table.Lookup(args[0]); cmd == nil {
			// Not in the table, so checked only here, off the path of
			// known commands.
			if crossProtocol(args[0]) {
				s.crossProtocolAttack(c)
				return
			}
			if c.asking || c.sess.Asking() {
				c.consumeAsking(nil)
			}
			c.errSlot(unknownCommand(args))
			return
		}
		c.lastName = append(c.lastName[:0], args[0]...)
		c.lastLook = cmd
	}
	// A container dispatches to its subcommand; one that also runs bare
	// (COMMAND) does so only without arguments.
	if len(cmd.Subcommands) > 0 && (cmd.Run == nil || len(args) >= 2) {
		if len(args) < 2 {
			c.reject(cmd, wrongArity(cmd.Name))
			return
		}
		sub := cmd.sub(args[1])
		if sub == nil {
			c.errSlot("ERR unknown subcommand '" + trunc(cstr(args[1]), 128) + "'. Try " + strings.ToUpper(cmd.Name) + " HELP.")
			return
		}
		cmd = sub
	}
	if c.asking || c.sess.Asking() {
		c.consumeAsking(cmd) // before any refusal: a refused command consumes it too
	}
	if !arityOK(cmd.Arity, len(args)) {
		c.reject(cmd, wrongArity(cmd.Name))
		return
	}
	// Redis's order: a protected command, then AUTH, then ACL permissions.
	if cmd.Flags&Protected != 0 && !s.debugAllowed(c) {
		c.reject(cmd, ErrDebugNotAllowed)
		return
	}
	if cmd.Flags&FlagNoAuth == 0 && !c.authed.Load() {
		c.reject(cmd, ErrNoAuth)
		return
	}
	if cmd.Flags&AdminOnly != 0 && !c.isAdmin() {
		s.stats.cmdDenied.Add(1)
		c.reject(cmd, noPerm(c.user(), cmd.Name))
		return
	}
	if cmd.FirstKey > 0 && s.cfg.MaxKeyBytes > 0 && s.keyTooLong(cmd, args) {
		c.reject(cmd, ErrKeyTooLong)
		return
	}
	if cmd.FirstKey > 0 && s.clusterOn() && cmd.Flags&SelfRouted == 0 {
		if e := s.route(c, cmd, args); e != "" {
			c.reject(cmd, e)
			return
		}
	}
	if s.cfg.StopWrites && cmd.write() && s.st.PersistErr() != nil {
		c.reject(cmd, ErrMisconf)
		return
	}
	if s.ctl.paused.Load() && !c.sess.Holding() {
		c.lastCmd.Store(cmd) // CLIENT LIST shows the command waiting, as Redis's
		// Before queueing, as Redis's processCommand; never inside EXEC,
		// which holds shards (it waited before it began).
		s.waitPause(c, cmd, out)
		if c.closing {
			return // hung up while paused: nothing more runs
		}
	}
	if c.inMulti() && s.txQueued(c, cmd, args, out) {
		return
	}
	if c.hooked {
		if e := c.pubsubOnly(cmd); e != "" {
			c.reject(cmd, e)
			return
		}
		if c.trk.Load() != nil {
			c.trackCommand(cmd, args)
		}
	}
	if c.lastCmd.Load() != cmd { // a pipeline mostly repeats one command: no locked store each
		c.lastCmd.Store(cmd)
	}
	st := c.stat(cmd)
	run := cmd.Run
	if cmd.Many != nil && len(args) > maxKeptOps {
		run = cmd.Many
	}
	if cmd.Call != nil {
		s.queueCall(c, cmd, st, args)
		return
	}
	if cmd.Queue != nil && run == nil {
		from := len(c.queued)
		e := s.queue(cmd, c, args)
		st.calls.Add(1)
		if e != "" {
			// The handler queued nothing on error (contract), but be safe.
			c.slots = append(c.slots, slot{cmd: cmd, err: e, quiet: c.quiet()})
			st.failed.Add(1)
			return
		}
		c.slots = append(c.slots, slot{cmd: cmd, args: args, from: from, to: len(c.queued), quiet: c.quiet()})
		return
	}
	s.finish(c, out)
	start := time.Now()
	mark, bmark := out.Len(), len(out.B)
	func() {
		defer func() {
			if r := recover(); r != nil {
				out.Truncate(mark)
				out.WriteError(ErrInternal)
				s.log.Error("command panicked", "cmd", cmd.Name, "panic", r, "stack", string(debug.Stack()))
			}
		}()
		run(c, out, args)
	}()
	// As Redis's call(): the call counts once it has run (INFO does not
	// count itself, CONFIG RESETSTAT does), and an error reply makes it a
	// failed call and counts in errorstats.
	took := time.Since(start)
	st.usec.Add(took.Microseconds())
	st.calls.Add(1)
	s.recordCommand(c, cmd, args, took.Nanoseconds())
	if len(out.B) > bmark && out.B[bmark] == '-' {
		st.failed.Add(1)
		e := out.B[bmark+1:]
		if i := bytes.IndexByte(e, '\r'); i >= 0 {
			e = e[:i]
		}
		s.countError(string(e))
	}
	if c.quiet() {
		out.Truncate(mark)
	}
	if c.hooked {
		c.writeSelfInvalidations(out, nil, nil) // EXEC's, say: after its reply, as Redis
	}
}

// keyTooLong reports whether any of cmd's keys in args is longer than
// MaxKeyBytes.
func (s *Server) keyTooLong(cmd *Command, args [][]byte) bool {
	last := cmd.LastKey
	if last < 0 {
		last += len(args)
	}
	for i := cmd.FirstKey; i <= last && i < len(args); i += cmd.Step {
		if len(args[i]) > s.cfg.MaxKeyBytes {
			return true
		}
	}
	return false
}

// queueCall parses a Call command into its service call and queues it on
// the client's session through the service, in order with the pipeline's
// other commands; the reply is written by finish. A parse error is the
// command's failure; a refusal of the service (routing, key size) is a
// rejected call, as the same refusal by execOne's own checks.
func (s *Server) queueCall(c *Client, cmd *Command, st *cmdStat, args [][]byte) {
	call, e := s.parseCall(cmd, c, args)
	if e == "" {
		if err := s.svc.Queue(c.sess, call); err != nil {
			c.reject(cmd, s.refusal(err))
			return
		}
	}
	st.calls.Add(1)
	if e != "" {
		c.slots = append(c.slots, slot{cmd: cmd, err: e, quiet: c.quiet()})
		st.failed.Add(1)
		return
	}
	c.slots = append(c.slots, slot{cmd: cmd, args: args, call: call, quiet: c.quiet()})
}

// parseCall runs cmd's Call handler; a panic there becomes an error reply.
func (s *Server) parseCall(cmd *Command, c *Client, args [][]byte) (call service.Call, e string) {
	defer func() {
		if r := recover(); r != nil {
			s.log.Error("command panicked", "cmd", cmd.Name, "panic", r, "stack", string(debug.Stack()))
			call, e = nil, ErrInternal
		}
	}()
	return cmd.Call(c, args)
}

// refusal words a service error as Redis does, "" for nil: the same
// refusal reads the same whichever way a command reached it.
func (s *Server) refusal(err error) string {
	if err == nil {
		return "" // before no: it escapes, and this is every call's path
	}
	var no *service.NotOwnerError
	if rd := store.AsRedirect(err); rd != nil {
		return s.redirect(rd)
	}
	switch {
	case errors.As(err, &no):
		s.stats.moved.Add(1)
		return "MOVED " + strconv.Itoa(no.Slot) + " " + no.Addr
	case errors.Is(err, service.ErrCrossSlot):
		return ErrCrossSlot
	case errors.Is(err, service.ErrClusterDown):
		return ErrClusterDown
	case errors.Is(err, service.ErrKeyTooLong):
		return ErrKeyTooLong
	case errors.Is(err, service.ErrWrongType):
		return ErrWrongType
	case errors.Is(err, service.ErrClosed):
		return ErrShuttingDown
	case errors.Is(err, service.ErrExpireRange):
		return ErrCellExpire
	case errors.Is(err, service.ErrBadCall):
		return ErrSyntax // the parsers refuse such calls first, in their own words
	default:
		return ErrInternal
	}
}

// queue runs cmd's Queue handler; a panic there becomes an error reply.
func (s *Server) queue(cmd *Command, c *Client, args [][]byte) (e string) {
	defer func() {
		if r := recover(); r != nil {
			s.log.Error("command panicked", "cmd", cmd.Name, "panic", r, "stack", string(debug.Stack()))
			e = ErrInternal
		}
	}()
	return cmd.Queue(c, args)
}

func (c *Client) errSlot(e string) {
	if c.inMulti() {
		c.tx.dirty = true // Redis's flagTransaction
	}
	c.slots = append(c.slots, slot{err: e, quiet: c.quiet()})
}

// reject answers e instead of running cmd, counted in cmd's rejected_calls
// as Redis's rejectCommand counts a command refused before it runs (arity,
// NOAUTH, NOPERM, a redirection, MISCONF).
func (c *Client) reject(cmd *Command, e string) {
	c.stat(cmd).rejected.Add(1)
	if c.inMulti() {
		e = c.txRefused(cmd, e)
	}
	c.errSlot(e)
}

// finish runs the queued requests and writes the replies of every pending slot.
func (s *Server) finish(c *Client, out *Out) {
	// The pipeline's start counts for the slots queued since then, once:
	// what runs after this finish (a Run command, a pause's wait, a failed
	// AUTH's delay) must not count for the slots queued after it.
	start := c.queuedSince
	c.queuedSince = time.Time{}
	if len(c.slots) == 0 {
		return
	}
	if start.IsZero() {
		start = time.Now()
	}
	c.sess.Run()
	var per, perNs int64
	if n := int64(len(c.slots)); n > 0 {
		perNs = time.Since(start).Nanoseconds() / n
		per = perNs / 1e3
	}
	rec := s.batch(c, perNs)
	for i := range c.slots {
		sl := &c.slots[i]
		cmd, args := sl.cmd, sl.args
		mark := out.Len()
		s.finishSlot(c, out, sl, per, &rec)
		if sl.quiet {
			out.Truncate(mark)
		}
		if c.hooked && cmd != nil && cmd.write() {
			c.writeSelfInvalidations(out, cmd, args)
		}
	}
	if c.hooked {
		c.writeSelfInvalidations(out, nil, nil)
	}
	rec.flush()
	c.flushDecisions()
	if cap(c.slots) > maxKeptOps {
		c.slots = nil
	} else {
		c.slots = c.slots[:0]
	}
	c.recycle()
}

// finishSlot writes one pending slot's reply.
func (s *Server) finishSlot(c *Client, out *Out, sl *slot, per int64, rec *batchRecorder) {
	if sl.err != "" {
		s.countError(sl.err)
		out.WriteError(sl.err)
		return
	}
	if sl.call != nil {
		rec.add(sl.cmd, sl.args)
		s.answer(c, out, sl, per)
		return
	}
	reqs := c.queued[sl.from:sl.to]
	if e := s.statusError(reqs); e != "" {
		s.countError(e)
		out.WriteError(e)
		c.stat(sl.cmd).failed.Add(1)
		return
	}
	c.stat(sl.cmd).usec.Add(per)
	rec.add(sl.cmd, sl.args)
	mark := out.Len()
	func() {
		defer func() {
			if r := recover(); r != nil {
				out.Truncate(mark)
				out.WriteError(ErrInternal)
				s.log.Error("reply panicked", "cmd", sl.cmd.Name, "panic", r, "stack", string(debug.Stack()))
			}
		}()
		sl.cmd.Reply(c, out, sl.args, reqs)
	}()
	sl.args = nil
}

// answer writes a Call command's reply once its session ran: its error
// in Redis's words, or the command's Answer.
func (s *Server) answer(c *Client, out *Out, sl *slot, usec int64) {
	call := sl.call
	sl.call, sl.args = nil, nil
	mark := out.Len()
	defer func() {
		if r := recover(); r != nil {
			out.Truncate(mark)
			out.WriteError(ErrInternal)
			s.log.Error("reply panicked", "cmd", sl.cmd.Name, "panic", r, "stack", string(debug.Stack()))
		}
	}()
	call.Done()
	st := c.stat(sl.cmd)
	st.usec.Add(usec) // a call that ran counts its time, failed or not, as in Redis
	if e := s.refusal(service.ErrOf(call)); e != "" {
		s.countError(e)
		out.WriteError(e)
		st.failed.Add(1)
		return
	}
	sl.cmd.Answer(c, out, call)
}

// maxKeptOps is how many requests of each kind (and reply slots) a client
// keeps for its next pipeline: a command with millions of keys needs as
// many, and they must not stay allocated for as long as the connection
// lives.
const maxKeptOps = 4096

// recycle makes the free lists and the queue reusable, dropping what is
// past maxKeptOps. The requests stay as they are until taken again, so a
// Run handler reads them after runNow.
func (c *Client) recycle() {
	if cp := c.calls; cp != nil {
		cp.recycle()
		c.calls = nil
		if c.from != nil {
			c.from.put(cp)
			c.from = nil
		}
	}
	c.reqs.reset()
	if cap(c.queued) > maxKeptOps {
		c.queued = nil
	} else {
		c.queued = c.queued[:0]
	}
}

// statusError maps store-level failures (not command errors) to a reply.
func (s *Server) statusError(reqs []store.Request) string {
	for _, r := range reqs {
		if rd := store.AsRedirect(r.Status()); rd != nil {
			return s.redirect(rd)
		}
		switch r.Status() {
		case store.ErrPanic, store.ErrNotHeld:
			return ErrInternal
		case store.ErrClosed:
			return ErrShuttingDown
		}
	}
	return ""
}

// countError records an error reply for INFO errorstats by its first word.
func (s *Server) countError(e string) {
	s.stats.errorReplies.Add(1)
	code := e
	if i := strings.IndexByte(e, ' '); i >= 0 {
		code = e[:i]
	}
	v, ok := s.errorCounts.Load(code)
	if !ok {
		v, _ = s.errorCounts.LoadOrStore(code, new(atomic.Int64))
	}
	v.(*atomic.Int64).Add(1)
}

// unknownCommand builds Redis 7's text: the name and the first arguments,
// each quoted and followed by a space, up to about 128 bytes.
func unknownCommand(args [][]byte) string {
	var b strings.Builder
	for _, a := range args[1:] {
		if b.Len() >= 128 {
			break
		}
		room := 128 - b.Len()
		v := cstr(a)
		if len(v) > room {
			v = v[:room]
		}
		b.WriteByte('\'')
		b.WriteString(v)
		b.WriteString("' ")
	}
	return "ERR unknown command '" + trunc(cstr(args[0]), 128) + "', with args beginning with: " + b.String()
}

// trunc cuts s to at most n bytes, like C's %.*s.
func trunc(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// cstr is what C's %s prints of b: up to the first NUL byte.
func cstr(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}

func wrongArity(name string) string {
	return "ERR wrong number of arguments for '" + name + "' command"
}

// commandNames returns the sorted names of the top-level commands.
func (s *Server) commandNames() []string {
	names := make([]string, 0, len(s.table))
	for n := range s.table {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
