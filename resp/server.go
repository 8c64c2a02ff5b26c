// Package resp is cellserver's wire layer: it accepts TCP connections, reads
// pipelined RESP requests (with Redis's limits and protocol error texts),
// hands each pipeline to the command layer and writes the replies back with
// one write per pipeline. Replies are encoded with github.com/tidwall/redcon.
//
// Sockets are served by event loops (github.com/panjf2000/gnet, one loop
// per CPU, epoll on Linux) rather than a goroutine per connection: a loop
// reads every ready socket once per wake-up, as Redis does, where Go's
// net package pays a second read syscall per request (the one that returns
// EAGAIN) and a goroutine wake-up per connection (docs/architecture.md
// gives the figures).
//
// Connections are accepted by a goroutine of this package (Go's net
// listener), not by gnet's acceptor, and handed to the event loops: gnet
// stops the whole engine on any accept error it does not expect, such as
// EMFILE when file descriptors run out, and a server must survive that.
//
// Requests are parsed here rather than by redcon's server loop because that
// loop copies every command (two allocations per command), enforces no
// size limits and words protocol errors differently from Redis.
//
// Per-client limits, as Redis's: the query buffer (MaxQueryBuffer), the
// output buffer (OutputHard and OutputSoft/OutputSoftFor, Redis's
// client-output-buffer-limit for normal clients) and the idle timeout
// (IdleTimeout, Redis's timeout). A client over a limit is disconnected and
// counted (INFO stats).
package resp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/panjf2000/gnet/v2"

	"github.com/cellserver/cellserver/commands"
	"github.com/cellserver/cellserver/store"
)

// Config configures the wire layer.
type Config struct {
	// Addr is the TCP listen address. Default "127.0.0.1:6379".
	Addr string
	// MaxClients caps concurrent connections; more are refused with Redis's
	// "ERR max number of clients reached". Default 10000.
	MaxClients int
	// ProtoMaxBulkLen is the largest accepted argument in bytes. Default 512 MiB.
	ProtoMaxBulkLen int64
	// MaxQueryBuffer is the most a connection may buffer for one unfinished
	// request before it is closed. Default 1 GiB; at most 4 GiB - 1.
	MaxQueryBuffer int
	// OutputHard, if positive, is the most reply bytes a client may have
	// waiting (built and not yet taken by its socket); past it the client is
	// disconnected at once. Default 256 MiB; negative: no limit.
	OutputHard int64
	// OutputSoft, if positive, disconnects a client whose waiting replies
	// stay above it for OutputSoftFor. Default 64 MiB for 60 s; negative:
	// no limit.
	OutputSoft    int64
	OutputSoftFor time.Duration
	// IdleTimeout, if positive, closes a client that sent nothing for that
	// long (Redis's timeout). Default 0: never.
	IdleTimeout time.Duration
	// Logger; default slog.Default().
	Logger *slog.Logger
	// Owners are the store's hosted owners (store.Config.Owners), one per
	// event loop: loop i runs owner i, and its connections' commands run
	// inline on its shards (hosts.go). Empty: one loop per usable CPU,
	// hosting none, every command handed to the shards' own goroutines.
	Owners []*store.Owner
}

// Defaults of the per-client output limits. Redis sets none for normal
// clients; a server that any client can reach needs one, and these are far
// above what a rate-limit client's pipeline produces (a CL.THROTTLE reply is
// about 40 bytes) while far below the memory of a small machine.
const (
	DefaultOutputHard    = 256 << 20
	DefaultOutputSoft    = 64 << 20
	DefaultOutputSoftFor = 60 * time.Second
)

// EnsureDefaults fills zero fields.
func (c *Config) EnsureDefaults() {
	if c.Addr == "" {
		c.Addr = "127.0.0.1:6379"
	}
	if c.MaxClients == 0 {
		c.MaxClients = 10000
	}
	if c.ProtoMaxBulkLen == 0 {
		c.ProtoMaxBulkLen = defaultProtoMaxBulk
	}
	if c.MaxQueryBuffer == 0 {
		c.MaxQueryBuffer = defaultMaxQueryBytes
	}
	if c.OutputHard == 0 {
		c.OutputHard = DefaultOutputHard
	}
	if c.OutputSoft == 0 {
		c.OutputSoft, c.OutputSoftFor = DefaultOutputSoft, DefaultOutputSoftFor
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Validate reports a configuration error.
func (c *Config) Validate() error {
	if c.MaxClients < 1 {
		return fmt.Errorf("resp: maxclients must be at least 1")
	}
	if c.ProtoMaxBulkLen < 1 || c.MaxQueryBuffer < 1 {
		return fmt.Errorf("resp: buffer limits must be positive")
	}
	if int64(c.MaxQueryBuffer) >= 1<<32 {
		return fmt.Errorf("resp: the query buffer limit must be below 4 GiB")
	}
	if c.OutputSoft > 0 && c.OutputSoftFor <= 0 {
		return fmt.Errorf("resp: the soft output limit needs a positive duration")
	}
	if c.IdleTimeout < 0 {
		return fmt.Errorf("resp: the idle timeout must not be negative")
	}
	return nil
}

// Server serves the Redis protocol.
type Server struct {
	gnet.BuiltinEventEngine

	cfg  Config
	exec *commands.Server

	ln      net.Listener
	cli     *gnet.Client
	addr    net.Addr
	stopped chan struct{} // closed when the accept loop has returned
	runErr  error         // why it returned; read after stopped is closed
	spare   *os.File      // a descriptor given up to refuse a client when none are left

	nconns   atomic.Int64
	detached atomic.Int64 // Slow pipelines running off the loops
	waiting  atomic.Int64 // connections whose replies wait on the loop (hold)
	closing  atomic.Bool

	// now is a coarse clock (Unix ms, kept by the sweeper every 100 ms), as
	// Redis's server.unixtime: the loops stamp each read with it instead of
	// reading the time.
	now atomic.Int64

	connsMu sync.Mutex
	conns   map[*conn]gnet.Conn // every open connection, for the sweeper
	sweep   chan struct{}       // closed to stop the sweeper
	freeing atomic.Bool         // a FreeOSMemory is running

	loops    int                             // event loops
	homes    map[gnet.EventLoop]*store.Owner // each loop's owner (hostOwners)
	writers  map[gnet.EventLoop]*loopWriter  // each loop's round write-out (writer.go), under connsMu
	hosts    []*store.Owner                  // the owners adopted, to detach
	ctlPeers []net.Conn                      // the far ends of the loops' control connections
}

// New returns a server that runs commands on exec.
func New(cfg Config, exec *commands.Server) (*Server, error) {
	cfg.EnsureDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, exec: exec, stopped: make(chan struct{}), conns: map[*conn]gnet.Conn{}, writers: map[gnet.EventLoop]*loopWriter{}, sweep: make(chan struct{})}
	s.now.Store(time.Now().UnixMilli())
	return s, nil
}

// Listen binds the listen address and starts the event loops; connections
// are served from then on. Addr reports the bound address.
func (s *Server) Listen() error {
	ln, err := net.Listen("tcp", s.cfg.Addr)
	if err != nil {
		return err
	}
	// One loop per usable CPU (GOMAXPROCS follows cgroup limits), or one
	// per owner to host.
	loops := runtime.GOMAXPROCS(0)
	if len(s.cfg.Owners) > 0 {
		loops = len(s.cfg.Owners)
	}
	s.loops = loops
	cli, err := gnet.NewClient(s,
		gnet.WithNumEventLoop(loops),
		gnet.WithLoadBalancing(gnet.RoundRobin),
		gnet.WithTCPNoDelay(gnet.TCPNoDelay),
		gnet.WithTCPKeepAlive(300*time.Second), // Redis's tcp-keepalive default
		gnet.WithLogger(gnetLogger{s.cfg.Logger}))
	if err == nil {
		err = cli.Start()
	}
	if err != nil {
		_ = ln.Close()
		return fmt.Errorf("resp: starting the event loops: %w", err)
	}
	s.cli = cli
	if err := s.hostOwners(); err != nil {
		_ = ln.Close()
		_ = cli.Stop()
		s.detachOwners()
		return err
	}
	s.ln, s.addr = ln, ln.Addr()
	s.spare, _ = os.Open(os.DevNull) // best effort: without it a refusal is a silent close
	go s.acceptLoop()
	go s.sweeper()
	return nil
}

// NumLoops is the number of event loops (after Listen).
func (s *Server) NumLoops() int { return s.loops }

// Addr is the bound address (after Listen).
func (s *Server) Addr() net.Addr { return s.addr }

// Serve blocks until the server stops. It returns nil after Shutdown, and
// otherwise why it stopped.
func (s *Server) Serve() error {
	<-s.stopped
	if s.closing.Load() {
		return nil
	}
	if s.runErr == nil {
		return errors.New("resp: the accept loop stopped")
	}
	return s.runErr
}

// acceptLoop accepts connections and hands each to an event loop until the
// listener is closed. An accept error (out of file descriptors, out of
// memory) never stops it: it logs once per failing spell, refuses the
// waiting client with Redis's max-clients error if it can, and retries with
// a back-off that keeps a full descriptor table from spinning a core.
func (s *Server) acceptLoop() {
	defer close(s.stopped)
	var (
		fails int
		delay time.Duration
	)
	for {
		nc, err := s.ln.Accept()
		if err != nil {
			if s.closing.Load() {
				return
			}
			if errors.Is(err, net.ErrClosed) {
				s.runErr = fmt.Errorf("resp: the listener closed: %w", err)
				return
			}
			if fails == 0 {
				s.cfg.Logger.Error("accepting a connection failed; the server keeps running and retries", "err", err)
			}
			fails++
			if !outOfFiles(err) || !s.refuseOne() {
				if delay == 0 {
					delay = 5 * time.Millisecond
				} else if delay *= 2; delay > time.Second {
					delay = time.Second
				}
				time.Sleep(delay)
			}
			continue
		}
		if fails > 0 {
			s.cfg.Logger.Info("accepting connections again", "failed_accepts", fails)
			fails, delay = 0, 0
		}
		// Enroll duplicates the descriptor for the loop and closes nc: the
		// spare makes room for the duplicate, and takes nc's place after.
		if s.spare != nil {
			_ = s.spare.Close()
		}
		_, err = s.cli.Enroll(nc)
		s.spare, _ = os.Open(os.DevNull)
		if err != nil && !s.closing.Load() {
			s.exec.RejectConnection()
			s.cfg.Logger.Warn("could not hand a connection to an event loop; closed it", "addr", nc.RemoteAddr().String(), "err", err)
		}
	}
}

// outOfFiles reports whether an accept error is the descriptor table being
// full (the only case where refusing a waiting client helps).
func outOfFiles(err error) bool {
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE)
}

// refuseOne frees the spare descriptor to accept one waiting client and
// tell it "max number of clients reached" (the kernel would otherwise keep
// it waiting, and the listener keep reporting the error), then takes the
// spare back. It reports whether a client was refused.
func (s *Server) refuseOne() bool {
	if s.spare == nil {
		if s.spare, _ = os.Open(os.DevNull); s.spare == nil {
			return false
		}
	}
	_ = s.spare.Close()
	s.spare = nil
	defer func() { s.spare, _ = os.Open(os.DevNull) }()
	tl, ok := s.ln.(*net.TCPListener)
	if !ok {
		return false
	}
	// Without a deadline Accept would wait for the next client.
	_ = tl.SetDeadline(time.Now().Add(time.Millisecond))
	defer tl.SetDeadline(time.Time{})
	nc, err := tl.Accept()
	if err != nil {
		return false
	}
	s.exec.RejectConnection()
	_ = nc.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
	_, _ = nc.Write(errMaxClients)
	_ = nc.Close()
	return true
}

// Shutdown stops accepting, lets every event loop finish the pipeline it is
// executing (its replies are written), then closes all connections. It
// returns when they are gone or ctx ends.
func (s *Server) Shutdown(ctx context.Context) error {
	if !s.closing.CompareAndSwap(false, true) {
		return nil
	}
	if s.ln == nil {
		return nil // never started
	}
	close(s.sweep)
	_ = s.ln.Close()
	done := make(chan error, 1)
	go func() {
		<-s.stopped
		// Pipelines running off the loops finish while the loops still
		// run, so that their replies are written; connections take no new
		// commands meanwhile (OnTraffic closes them).
		// So do pipelines whose replies wait for another loop or for the
		// disk.
		for (s.detached.Load() > 0 || s.waiting.Load() > 0) && ctx.Err() == nil {
			time.Sleep(5 * time.Millisecond)
		}
		// Clients close while every loop still runs: closing one may need
		// another loop's shards (its watched keys are withdrawn there), and
		// a loop that has stopped serves nothing.
		s.closeAll(ctx)
		err := s.cli.Stop()
		s.detachOwners()
		if s.spare != nil {
			_ = s.spare.Close()
		}
		done <- err
	}()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// conn is one client connection's state, used only by its event loop
// (lastIO and softSince are also read by the sweeper).
type conn struct {
	cl   *commands.Client
	home *store.Owner // the owner its loop hosts (nil: none)
	// A pipeline left pending for another loop's shards (pend): pinned is
	// the buffer its requests and replies read, kept until it is answered
	// (then it is alt, the spare that the next pend swaps in); perr the
	// protocol error that followed it; room its reply room.
	pinned, alt []byte
	pinnedArgs  [][]byte // the parsed arguments of that pipeline (parser.hand)
	swapped     bool
	waiting     bool // counted in Server.waiting (hold)
	perr        error
	room        int
	remote      func() // ExecAsync's done: finishRemote on the loop
	syncDone    func() // AwaitSync's: synced
	p           parser
	buf         []byte // an unfinished request carried over between reads
	out         commands.Out
	cmds        [][][]byte
	segs        [][]byte // the replies' pieces, for a write with references
	// busy: a Slow pipeline runs on its own goroutine (see detach), or a
	// pipeline's replies wait for another loop's shards (pend) or for the
	// disk (synced); what the client sends meanwhile waits in buf. closed: the connection
	// closed while busy, so the goroutine's completion releases the client.
	busy, closed bool
	// lastIO: Server.now at the last read. softSince: Server.now when the
	// waiting replies went above OutputSoft (0: they are not).
	lastIO, softSince atomic.Int64
	// peak is the largest buffer this connection held, to give memory back
	// to the OS when a big one leaves.
	peak int
	push pushes // push messages waiting for the event loop (push.go)
	// w is the loop's writer; listed: c is on its list until the round's
	// write-out (writer.go).
	w      *loopWriter
	listed bool
	// kept, keptFD: a duplicate of the socket of a busy connection that
	// the client shut down, for the replies still to come (hangup.go).
	kept   bool
	keptFD int
}

var errMaxClients = []byte("-ERR max number of clients reached\r\n")

// OnOpen admits a connection, or refuses it over maxclients as Redis does.
func (s *Server) OnOpen(gc gnet.Conn) ([]byte, gnet.Action) {
	if _, ok := gc.Context().(ctlConn); ok {
		return nil, gnet.None
	}
	s.nconns.Add(1) // OnClose runs for every opened connection, refused ones too
	if s.closing.Load() {
		return nil, gnet.Close // shutting down: no new clients, no reply
	}
	if s.nconns.Load() > int64(s.cfg.MaxClients) {
		s.exec.RejectConnection()
		return errMaxClients, gnet.Close
	}
	c := &conn{
		cl: s.exec.NewClient(gc.RemoteAddr(), gc.LocalAddr()),
		p:  parser{protoMaxBulk: s.cfg.ProtoMaxBulkLen},
	}
	c.lastIO.Store(s.now.Load())
	c.home = s.homeOf(gc)
	c.cl.SetHome(c.home)
	if c.home != nil {
		c.remote = func() { s.remoteDone(gc, c) }
		c.syncDone = func() { s.synced(gc, c) }
	}
	c.cl.SetFD(gc.Fd())
	// CLIENT KILL from another connection closes this one on its own loop.
	c.cl.SetKill(func() {
		_ = gc.EventLoop().Execute(context.Background(), gnet.RunnableFunc(func(context.Context) error {
			if gc.Context() == c {
				_ = gc.Close()
			}
			return nil
		}))
	})
	c.cl.SetPusher(s.pusher(gc, c))
	gc.SetContext(c)
	s.connsMu.Lock()
	s.conns[c] = gc
	c.w = s.writerOf(gc)
	s.connsMu.Unlock()
	return nil, gnet.None
}

// OnClose releases a connection.
func (s *Server) OnClose(gc gnet.Conn, err error) gnet.Action {
	if _, ok := gc.Context().(ctlConn); ok {
		return gnet.None
	}
	s.nconns.Add(-1)
	if c, ok := gc.Context().(*conn); ok {
		s.connsMu.Lock()
		delete(s.conns, c)
		s.connsMu.Unlock()
		// A client that shut its side down still reads what it is owed
		// (hangup.go).
		if c.busy {
			c.closed = true // the busy pipeline's completion releases the client
			if peerClosed(err) {
				c.keepSocket(gc)
			}
			c.cl.HangUp()
		} else {
			if peerClosed(err) {
				s.flush(gc, c) // replies waiting for the round's write-out
			}
			c.cl.Close()
		}
		gc.SetContext(nil)
		if max(c.peak, gc.OutboundBuffered()) >= bigBuffer {
			s.giveBackMemory()
		}
	}
	return gnet.None
}

// bigBuffer is the buffer size from which a leaving client's memory is
// handed back to the OS at once rather than when the runtime gets to it.
const bigBuffer = 32 << 20

// giveBackMemory returns freed memory to the OS in the background, one run
// at a time: after a client with a huge buffer leaves, the process should
// shrink as Redis's does, not wait minutes for the scavenger.
func (s *Server) giveBackMemory() {
	if !s.freeing.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer s.freeing.Store(false)
		// The loop releases the connection's buffers after OnClose returns,
		// into gnet's sync.Pools, which keep them until the second
		// collection after: one GC, then FreeOSMemory's.
		time.Sleep(100 * time.Millisecond)
		runtime.GC()
		debug.FreeOSMemory()
	}()
}

// OnTraffic runs every whole command the connection has sent.
func (s *Server) OnTraffic(gc gnet.Conn) (action gnet.Action) {
	c, ok := gc.Context().(*conn)
	if !ok {
		return gnet.Close
	}
	defer s.recoverConn(c, &action)
	if c.home != nil {
		c.home.Poll() // another loop may be waiting for this one's shards
	}
	data, err := gc.Next(-1)
	if err != nil {
		return gnet.Close
	}
	if len(data) == 0 {
		return gnet.None
	}
	if s.closing.Load() && !c.busy {
		s.flush(gc, c)    // the replies left for the round, as before shutdown
		return gnet.Close // shutting down: no new commands
	}
	if now := s.now.Load(); c.lastIO.Load() != now {
		c.lastIO.Store(now) // the clock moves every 100 ms; most reads see the same
	}
	s.exec.CountNet(len(data), 0)
	// Parse in place when nothing is carried over (the common case);
	// otherwise append to the unfinished request first.
	// A connection of a loop that hosts shards parses from its own buffer:
	// a pipeline that waits for another loop's shards leaves the loop, and
	// gnet's buffer is the next read's.
	if len(c.buf) > 0 || c.busy || c.home != nil {
		if s.overQueryBuffer(c, len(c.buf)+len(data)) {
			return gnet.Close
		}
		c.buf = s.keep(c, c.buf, data)
		if c.busy {
			c.cl.SetQueryBuffer(len(c.buf))
			return gnet.None
		}
		data = c.buf
	}
	action = s.consume(gc, c, data)
	c.cl.SetQueryBuffer(len(c.buf)) // what is left of an unfinished request
	return action
}

// keep appends data to buf. When the unfinished request at buf's start has
// told the parser how long it is, buf grows once to that length instead of
// step by step: a 100 MB argument then costs 100 MB, not the sum of every
// smaller buffer it grew through.
func (s *Server) keep(c *conn, buf, data []byte) []byte {
	want := len(buf) + len(data)
	exact := false
	if part, need := c.p.pending(); part && need > want && need <= s.cfg.MaxQueryBuffer {
		// Room for the short arguments that usually follow a long one.
		want, exact = need+initialReadBuffer, true
	}
	if want > cap(buf) {
		grown := 2 * cap(buf)
		if cap(buf) >= 4<<20 {
			grown = cap(buf) + cap(buf)/4 // a big buffer grows by less than its size
		}
		if exact {
			grown = 0
		}
		nb := make([]byte, len(buf), max(want, grown, initialReadBuffer))
		copy(nb, buf)
		buf = nb
	}
	buf = append(buf, data...)
	c.peak = max(c.peak, cap(buf))
	return buf
}

// overQueryBuffer reports (and logs) that a connection would buffer more
// than MaxQueryBuffer bytes of unfinished request.
func (s *Server) overQueryBuffer(c *conn, n int) bool {
	if n <= s.cfg.MaxQueryBuffer {
		return false
	}
	s.exec.CountQueryBufferLimit()
	s.cfg.Logger.Warn("closing client that reached max query buffer length", "addr", c.cl.Addr, "bytes", n)
	return true
}

// recoverConn, deferred, turns a panic on a connection's path into closing
// that connection: a bug there must not take the server down.
func (s *Server) recoverConn(c *conn, action *gnet.Action) {
	if r := recover(); r != nil {
		s.cfg.Logger.Error("connection panicked; closing it", "addr", c.cl.Addr, "panic", r, "stack", string(debug.Stack()))
		*action = gnet.Close
	}
}

// consume runs the whole commands in data and keeps the unfinished rest in
// c.buf (data may be c.buf itself).
func (s *Server) consume(gc gnet.Conn, c *conn, data []byte) gnet.Action {
	used, open := s.process(gc, c, data)
	if c.swapped { // a pipeline left pending (see pend): c.buf holds the rest
		c.swapped = false
		if !open {
			return gnet.Close
		}
		return gnet.None
	}
	rest := data[used:]
	switch {
	case !open:
		return gnet.Close
	case len(rest) == 0:
		if cap(c.buf) > 4*initialReadBuffer {
			c.buf = nil
		} else {
			c.buf = c.buf[:0]
		}
	case len(c.buf) > 0:
		// data is c.buf: shift the rest down, unless nothing was used (a
		// large request arriving in many reads must not be copied per read).
		if used > 0 {
			c.buf = c.buf[:copy(c.buf, rest)]
		}
	default:
		if s.overQueryBuffer(c, len(rest)) {
			return gnet.Close
		}
		c.buf = s.keep(c, c.buf[:0], rest)
	}
	return gnet.None
}

// process runs every whole command in buf, writing replies. It returns the
// bytes consumed and whether the connection stays open.
func (s *Server) process(gc gnet.Conn, c *conn, buf []byte) (int, bool) {
	start := 0
	for {
		var perr error
		for start < len(buf) {
			used, err := c.p.next(buf[start:], c.cl.Authenticated())
			if err != nil {
				if err != errIncomplete {
					perr = err
				}
				break
			}
			start += used
			// AUTH changes the limits that apply to the next commands, so an
			// unauthenticated client's commands run one at a time.
			if !c.cl.Authenticated() && len(c.p.ends) > 0 {
				break
			}
		}
		if len(c.p.ends) == 0 && perr == nil {
			return start, true
		}
		if len(c.p.ends) > 0 {
			c.cmds = c.p.commands(c.cmds[:0])
			if s.exec.Slow(c.cmds) {
				// Earlier replies left for the round go first.
				if !s.flush(gc, c) {
					return start, false
				}
				s.detach(gc, c, perr)
				return start, true
			}
			ok, pending := s.run(gc, c, c.cmds)
			clear(c.cmds)
			if cap(c.cmds) > maxKeptArgs {
				c.cmds = nil
			}
			if pending {
				c.pinnedArgs = c.p.hand()
				s.pend(c, buf, start, perr)
				return start, true
			}
			c.p.reset()
			if !ok {
				return start, false
			}
		}
		// Replies go out once the pipeline's changes are on disk (--fsync
		// always); the loop serves its other connections meanwhile.
		// (Not with replies that reference the request's bytes, which the
		// next read may overwrite.)
		if perr == nil && !c.cl.Closing() && !c.out.Refs() && c.cl.AwaitSync(c.syncDone) {
			s.hold(c)
			return start, true
		}
		c.cl.WaitSync()
		if perr != nil || c.cl.Closing() {
			if perr != nil {
				c.out.WriteError("ERR " + perr.Error())
			}
			s.flush(gc, c)
			return start, false
		}
		// The replies go out with the loop's round (writer.go).
		if !c.w.later(gc, c) && !s.flush(gc, c) {
			return start, false
		}
	}
}

// flushAt is the reply size from which a pipeline's replies are written
// before the rest of it runs: a pipeline of small replies is written once,
// and one of huge replies (COMMAND DOCS) holds about this much, not all.
const flushAt = 1 << 20

// run executes a pipeline, writing its replies once they pass flushAt.
// false: the client went over its hard output limit and must be closed.
// pending: the pipeline's requests wait for another loop's shards (see
// pend), and its replies are written once they ran.
func (s *Server) run(gc gnet.Conn, c *conn, cmds [][][]byte) (ok, pending bool) {
	for len(cmds) > 0 {
		room := s.replyRoom(gc)
		c.out.Limit, c.out.Room = flushAt, room
		if room > 0 && room < flushAt {
			c.out.Limit = room
		}
		var n int
		if c.home != nil {
			n, pending = s.exec.ExecAsync(c.cl, cmds, &c.out, c.remote)
		} else {
			n = s.exec.Exec(c.cl, cmds, &c.out)
		}
		if pending {
			c.room = room
			return true, true
		}
		cmds = cmds[n:]
		if room > 0 && c.out.Len() > room {
			s.overOutput(c, int64(c.out.Len())+int64(gc.OutboundBuffered()))
			c.out.Reset(0)
			return false, false
		}
		if len(cmds) == 0 || c.cl.Closing() {
			return true, false
		}
		// The buffer is kept for the rest of the pipeline; what it holds is
		// acknowledged once written, so it waits for the disk first.
		c.cl.WaitSync()
		if !s.flushKeep(gc, c, 2*flushAt) {
			return false, false
		}
	}
	return true, false
}

// flush writes the replies built so far (gnet keeps whatever the socket
// does not take at once). false: the connection must be closed.
func (s *Server) flush(gc gnet.Conn, c *conn) bool {
	return s.flushKeep(gc, c, maxKeptOutBuffer)
}

// flushKeep is flush, keeping a reply buffer of up to keep bytes.
func (s *Server) flushKeep(gc gnet.Conn, c *conn, keep int) bool {
	n := c.out.Len()
	if n == 0 {
		return true
	}
	var err error
	if c.out.Refs() || n > writePiece {
		c.segs = writeSegments(&c.out, c.segs[:0])
		_, err = gc.Writev(c.segs)
		clear(c.segs)
	} else {
		_, err = gc.Write(c.out.B)
	}
	if err != nil {
		return false
	}
	s.exec.CountNet(0, n)
	c.peak = max(c.peak, cap(c.out.B))
	c.out.Reset(keep)
	return s.outputOK(gc, c)
}

// writePiece is the size large replies are cut to before gnet copies what
// the socket does not take: gnet's buffers are powers of two, so a 1 MiB
// piece costs 1 MiB, where a piece of 1 MiB and a little would cost 2.
const writePiece = 1 << 20

// writeSegments appends out's replies to dst as pieces for one writev:
// with more references than one writev takes (IOV_MAX is 1024), it copies
// them into one buffer first.
func writeSegments(out *commands.Out, dst [][]byte) [][]byte {
	segs := out.Segments(dst)
	if len(segs)-len(dst) > maxSegments {
		var flat []byte
		for _, b := range segs[len(dst):] {
			flat = append(flat, b...)
		}
		clear(segs[len(dst):])
		segs = append(segs[:len(dst)], flat)
	}
	return append(segs[:len(dst)], pieces(segs[len(dst):])...)
}

// maxSegments is the most segments writeSegments passes on uncopied.
const maxSegments = 500

// pieces cuts segs in place into pieces of at most writePiece bytes (a
// larger power of two for replies near 1 GiB: one writev takes at most
// IOV_MAX, 1024, pieces), the first ones of each segment exactly that.
func pieces(segs [][]byte) [][]byte {
	n, total := len(segs), 0
	for _, b := range segs {
		total += len(b)
	}
	piece := writePiece
	for total/piece+n > 1000 {
		piece *= 2
	}
	for i := 0; i < n; i++ {
		for b := segs[i]; len(b) > 0; {
			k := min(len(b), piece)
			segs = append(segs, b[:k])
			b = b[k:]
		}
	}
	out := segs[:copy(segs, segs[n:])]
	clear(segs[len(out):])
	return out
}

// replyRoom is how many reply bytes a pipeline may build before the client
// is over its hard output limit (0: no limit).
func (s *Server) replyRoom(gc gnet.Conn) int {
	if s.cfg.OutputHard <= 0 {
		return 0
	}
	return max(int(s.cfg.OutputHard)-gc.OutboundBuffered(), 1)
}

// outputOK checks the replies waiting for the client's socket against the
// output limits; on the event loop. false: the client must be closed.
func (s *Server) outputOK(gc gnet.Conn, c *conn) bool {
	waiting := int64(gc.OutboundBuffered())
	c.peak = max(c.peak, int(waiting))
	c.cl.SetOutputBuffer(int(waiting))
	if s.cfg.OutputHard > 0 && waiting > s.cfg.OutputHard {
		s.overOutput(c, waiting)
		return false
	}
	if s.cfg.OutputSoft <= 0 || waiting <= s.cfg.OutputSoft {
		if c.softSince.Load() != 0 { // a store per flush would dirty the line for the sweeper
			c.softSince.Store(0)
		}
		return true
	}
	now := s.now.Load()
	since := c.softSince.Load()
	if since == 0 {
		c.softSince.Store(now)
		return true
	}
	if time.Duration(now-since)*time.Millisecond >= s.cfg.OutputSoftFor+clockTick {
		s.overOutput(c, waiting)
		return false
	}
	return true
}

// overOutput counts and logs a client closed for its output buffer, in
// Redis's words.
func (s *Server) overOutput(c *conn, n int64) {
	s.exec.CountOutputBufferLimit()
	s.cfg.Logger.Warn("Client scheduled to be closed ASAP for overcoming of output buffer limits.", "id", c.cl.ID, "addr", c.cl.Addr, "bytes", n)
}

// clockTick is how often the coarse clock moves.
const clockTick = 100 * time.Millisecond

// sweeper is Redis's clientsCron for what needs a clock: it keeps the
// coarse clock, closes clients idle past IdleTimeout, and those whose
// replies stayed above the soft output limit even though they stopped
// sending; once a second it also refreshes the unsent-reply size CLIENT
// LIST shows. It looks at atomics only; a candidate is checked again, and
// closed, on its own event loop.
func (s *Server) sweeper() {
	tk := time.NewTicker(clockTick)
	defer tk.Stop()
	var round int
	var cands []gnet.Conn
	for {
		select {
		case <-s.sweep:
			return
		case t := <-tk.C:
			s.now.Store(t.UnixMilli())
		}
		if round++; round%10 != 0 {
			continue
		}
		now := s.now.Load()
		cands = cands[:0]
		s.connsMu.Lock()
		for c, gc := range s.conns {
			// Also every connection last seen with unsent replies: the loop
			// sends them without telling, and CLIENT LIST's omem is
			// refreshed here, within a second.
			if s.idle(c, now) || c.softSince.Load() != 0 || c.cl.OutputBuffer() != 0 {
				cands = append(cands, gc)
			}
		}
		s.connsMu.Unlock()
		for _, gc := range cands {
			_ = gc.EventLoop().Execute(context.Background(), gnet.RunnableFunc(func(context.Context) error {
				s.recheck(gc)
				return nil
			}))
		}
		clear(cands)
	}
}

// idle reports whether c sent nothing for IdleTimeout.
func (s *Server) idle(c *conn, now int64) bool {
	// A stamp may be a tick old: never close a client early for that.
	return s.cfg.IdleTimeout > 0 && time.Duration(now-c.lastIO.Load())*time.Millisecond > s.cfg.IdleTimeout+clockTick
}

// recheck records gc's unsent replies and closes gc if it is still idle or
// over its soft output limit; on gc's event loop.
func (s *Server) recheck(gc gnet.Conn) {
	c, ok := gc.Context().(*conn)
	if !ok || c.busy {
		return // closed meanwhile, or waiting for a command it sent
	}
	c.cl.SetOutputBuffer(gc.OutboundBuffered())
	if s.idle(c, s.now.Load()) && gc.OutboundBuffered() > 0 {
		// Still taking its replies: that is activity (Redis counts writes).
		c.lastIO.Store(s.now.Load())
	}
	if s.idle(c, s.now.Load()) {
		s.exec.CountIdleTimeout()
		s.cfg.Logger.Debug("closing idle client", "id", c.cl.ID, "addr", c.cl.Addr)
		_ = gc.Close()
		return
	}
	if c.softSince.Load() != 0 && !s.outputOK(gc, c) {
		_ = gc.Close()
	}
}

// detach runs the parsed pipeline, which holds a Slow command, on its own
// goroutine; its replies (and perr's, if a protocol error followed it) go
// out through the event loop, which then resumes the connection. Until then
// the connection is busy: nothing else of it runs, so replies stay in order.
func (s *Server) detach(gc gnet.Conn, c *conn, perr error) {
	// The args point into buffers the loop reuses: copy them.
	cmds := make([][][]byte, len(c.cmds))
	for i, args := range c.cmds {
		cmds[i] = make([][]byte, len(args))
		for j, a := range args {
			cmds[i][j] = append([]byte(nil), a...)
		}
	}
	clear(c.cmds)
	c.p.reset()
	c.busy = true
	room := s.replyRoom(gc)
	s.detached.Add(1)
	go func() {
		defer s.detached.Add(-1)
		out := commands.Out{Limit: room}
		func() {
			defer func() {
				if r := recover(); r != nil {
					s.cfg.Logger.Error("command panicked", "addr", c.cl.Addr, "panic", r, "stack", string(debug.Stack()))
				}
			}()
			c.cl.SetOffLoop(true) // a paused command may wait here (CLIENT PAUSE)
			defer c.cl.SetOffLoop(false)
			s.exec.Exec(c.cl, cmds, &out)
		}()
		over := out.Exceeded()
		if over {
			out.Reset(0)
		} else if perr != nil {
			out.WriteError("ERR " + perr.Error())
		}
		quit := over || perr != nil || c.cl.Closing()
		n := out.Len()
		segs := writeSegments(&out, nil)
		err := gc.AsyncWritev(segs, func(gc gnet.Conn, werr error) error {
			// On the event loop again.
			c.busy = false
			if c.closed {
				s.lastWords(c, segs...)
				c.cl.Close()
				return nil
			}
			s.exec.CountNet(0, n)
			if over {
				s.overOutput(c, int64(room))
			}
			// Then the pushes held back while the replies were pending.
			if werr != nil || quit || !s.outputOK(gc, c) || s.closing.Load() || !s.drainPushes(gc, c) {
				return gc.Close()
			}
			if len(c.buf) > 0 && s.resume(gc, c) == gnet.Close {
				return gc.Close()
			}
			return nil
		})
		if err != nil {
			// The engine is shutting down: the connection is gone (or
			// about to be) and the callback will not run. Not on the loop:
			// the client's session must not run the loop's shards.
			c.cl.SetOffLoop(true)
			c.cl.Close()
		}
	}()
}

// resume runs what a busy connection received meanwhile.
func (s *Server) resume(gc gnet.Conn, c *conn) (action gnet.Action) {
	defer s.recoverConn(c, &action)
	return s.consume(gc, c, c.buf)
}

// gnetLogger sends gnet's log lines to slog; its routine start-up lines are
// debug detail.
type gnetLogger struct{ l *slog.Logger }

func (g gnetLogger) Debugf(format string, args ...any) {
	g.l.Debug("gnet: " + fmt.Sprintf(format, args...))
}
func (g gnetLogger) Infof(format string, args ...any) {
	g.l.Debug("gnet: " + fmt.Sprintf(format, args...))
}
func (g gnetLogger) Warnf(format string, args ...any) {
	g.l.Warn("gnet: " + fmt.Sprintf(format, args...))
}
func (g gnetLogger) Errorf(format string, args ...any) {
	g.l.Error("gnet: " + fmt.Sprintf(format, args...))
}
func (g gnetLogger) Fatalf(format string, args ...any) {
	g.l.Error("gnet: fatal: " + fmt.Sprintf(format, args...))
}
