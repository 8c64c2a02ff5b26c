package commands

import (
	"github.com/cellserver/cellserver/store"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cellserver/cellserver/limit"
)

// clientCtlSubcommands are CLIENT's subcommands that act on other
// connections or on how this one is answered (CLIENT's list in
// connection.go takes them).
func clientCtlSubcommands() []*Command {
	return []*Command{
		{Name: "client|kill", Arity: -3, Flags: FlagAdmin | FlagNoScript | FlagLoading | FlagStale | AdminOnly | KeepsCaching, Cats: CatAdmin | CatSlow | CatDangerous | CatConnection, Run: clientKill, Summary: "Terminates open connections.", Since: "2.4.0"},
		{Name: "client|pause", Arity: -3, Flags: FlagAdmin | FlagNoScript | FlagLoading | FlagStale | AdminOnly | KeepsCaching, Cats: CatAdmin | CatSlow | CatDangerous | CatConnection, Run: clientPause, Summary: "Suspends commands processing.", Since: "3.0.0"},
		{Name: "client|unpause", Arity: 2, Flags: FlagAdmin | FlagNoScript | FlagLoading | FlagStale | AdminOnly | KeepsCaching, Cats: CatAdmin | CatSlow | CatDangerous | CatConnection, Run: clientUnpause, Summary: "Resumes processing commands from paused clients.", Since: "6.2.0"},
		{Name: "client|no-evict", Arity: 3, Flags: FlagAdmin | FlagNoScript | FlagLoading | FlagStale | KeepsCaching, Cats: CatAdmin | CatSlow | CatDangerous | CatConnection, Run: clientNoEvict, Summary: "Sets the client eviction mode of the connection.", Since: "7.0.0"},
		{Name: "client|no-touch", Arity: 3, Flags: FlagNoScript | FlagLoading | FlagStale | KeepsCaching, Cats: CatSlow | CatConnection, Run: clientNoTouch,
			Summary: "Controls whether commands sent by the client affect the LRU/LFU of accessed keys.", Since: "7.2.0"},
		{Name: "client|reply", Arity: 3, Flags: FlagNoScript | FlagLoading | FlagStale | KeepsCaching, Cats: CatSlow | CatConnection, Run: clientReply,
			Summary: "Instructs the server whether to reply to commands.", Since: "3.2.0"},
	}
}

// registerClientCtl registers the connection and replication commands of
// this file; its CLIENT subcommands are in CLIENT's list.
func registerClientCtl(t Table) {
	t.add(
		&Command{Name: "reset", Arity: 1, Flags: FlagNoScript | FlagLoading | FlagStale | FlagFast | FlagNoAuth | FlagAllowBusy | TxImmediate, Cats: CatFast | CatConnection, Group: "connection", Summary: "Resets the connection.", Since: "6.2.0", Run: resetCmd},
		&Command{Name: "role", Arity: 1, Flags: FlagNoScript | FlagLoading | FlagStale | FlagFast, Cats: CatAdmin | CatFast | CatDangerous, Group: "server",
			Summary: "Returns the replication role.", Since: "2.8.12", Run: roleCmd},
		&Command{Name: "wait", Arity: 3, Flags: FlagNoScript, Cats: CatSlow | CatConnection, Group: "generic",
			Tips:    []string{"request_policy:all_shards", "response_policy:agg_min"},
			Summary: "Blocks until the asynchronous replication of all preceding write commands sent by the connection is completed.", Since: "3.0.0", Run: waitCmd},
		&Command{Name: "lastsave", Arity: 1, Flags: FlagLoading | FlagStale | FlagFast, Cats: CatAdmin | CatFast | CatDangerous, Group: "server",
			Tips:    []string{"nondeterministic_output"},
			Summary: "Returns the Unix timestamp of the last successful save to disk.", Since: "1.0.0", Run: lastsaveCmd},
	)
}

// clientCtl is the server's CLIENT PAUSE state. paused is the fast check
// every command makes; the rest is under mu.
type clientCtl struct {
	paused atomic.Bool
	mu     sync.Mutex
	end    time.Time
	all    bool          // ALL: every command waits; else only writes
	done   chan struct{} // closed when the pause ends by CLIENT UNPAUSE
	over   bool          // the server is shutting down: no pause holds any more
}

// EndPauses ends any CLIENT PAUSE for good, as the server begins to shut
// down: the commands it holds run and are answered before their
// connections close (a pause can last hours, and a shutdown must neither
// wait for it nor drop commands it accepted), and a later CLIENT PAUSE
// holds nothing. Safe from any goroutine.
func (s *Server) EndPauses() {
	p := &s.ctl
	p.mu.Lock()
	defer p.mu.Unlock()
	p.over = true
	p.endLocked()
}

// pauseState returns the pause in force: its end, mode and the channel
// that closes on unpause; ok false if none.
func (p *clientCtl) pauseState(now time.Time) (end time.Time, all bool, done chan struct{}, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done == nil || p.over {
		return
	}
	if !now.Before(p.end) {
		p.endLocked()
		return
	}
	return p.end, p.all, p.done, true
}

func (p *clientCtl) endLocked() {
	if p.done != nil {
		close(p.done)
		p.done = nil
	}
	p.paused.Store(false)
}

// blocks reports whether cmd waits under a pause of mode all.
func pauseBlocks(all bool, cmd *Command) bool { return all || cmd.write() }

// pauseBlocksCmd is pauseBlocks for c's cmd: an EXEC is a write when its
// transaction queued one (Redis's is_may_replicate_command), and waits
// before it holds any shard.
func pauseBlocksCmd(c *Client, all bool, cmd *Command) bool {
	if cmd.Flags&TxExec != 0 && c.inMulti() {
		return all || c.tx.hasWrite()
	}
	return pauseBlocks(all, cmd)
}

// pausedPipeline reports whether a command of cmds must wait for the
// pause: the wire layer then runs the pipeline off its event loop.
func (s *Server) pausedPipeline(cmds [][][]byte) bool {
	_, all, _, ok := s.ctl.pauseState(time.Now())
	if !ok {
		return false
	}
	if all {
		return true
	}
	for _, args := range cmds {
		if len(args) == 0 {
			continue
		}
		// An EXEC may hold writes: it goes off the loop, and waitPause
		// decides from its transaction.
		if cmd := s.table.Lookup(args[0]); cmd != nil && cmd.Flags&(FlagWrite|TxExec) != 0 {
			return true
		}
	}
	return false
}

// waitPause holds cmd until the pause ends, if it must wait: finishing
// the pipeline's earlier commands first. On an event loop (a pause that
// began after the wire layer checked the pipeline) cmd runs: it was on
// its way when the pause began, and a loop must never wait.
//
// A client whose connection closed meanwhile (CLIENT KILL, a hang-up)
// stops waiting, and its command and the rest of its pipeline are
// dropped (c.closing), as Redis drops a closed client's blocked command.
func (s *Server) waitPause(c *Client, cmd *Command, out *Out) {
	if !c.offLoop {
		return
	}
	for {
		end, all, done, ok := s.ctl.pauseState(time.Now())
		if !ok || !pauseBlocksCmd(c, all, cmd) {
			return
		}
		s.finish(c, out)
		if c.hungUp.Load() || c.killed.Load() {
			c.closing = true
			return
		}
		// Woken by UNPAUSE, the end of the pause or a hang-up.
		t := time.NewTimer(time.Until(end))
		select {
		case <-done:
		case <-t.C:
		case <-c.hangup:
		}
		t.Stop()
		if c.killed.Load() {
			// Killed, then unpaused before its loop closed it: Redis
			// frees a killed client at once, so its command never runs.
			c.closing = true
			return
		}
	}
}

// HangUp tells the client that its connection closed while its pipeline
// runs off the event loops: a command waiting on a pause is dropped.
// Safe from any goroutine; once.
func (c *Client) HangUp() {
	if c.hungUp.CompareAndSwap(false, true) {
		close(c.hangup)
	}
}

// SetOffLoop tells the client that its pipeline runs off the event loops
// (the wire layer's Slow path), where a paused command may wait.
func (c *Client) SetOffLoop(v bool) {
	c.offLoop = v
	if v {
		c.sess.SetHome(nil) // another goroutine must not run the loop's shards
		c.sess.DeferSync(false)
	} else {
		c.sess.SetHome(c.home)
		c.sess.DeferSync(c.home != nil)
	}
}

// SetHome gives the client the store owner its event loop hosts: on the
// loop, its commands run that owner's shards inline (store.Session.SetHome).
// The wire layer sets it when the connection opens, on the loop.
func (c *Client) SetHome(o *store.Owner) {
	c.home = o
	if !c.offLoop {
		c.sess.SetHome(o)
		// On its loop, a pipeline's replies wait for the disk without
		// holding up the loop (AwaitSync).
		c.sess.DeferSync(o != nil)
	}
}

// AwaitSync returns false if the changes of every command the client ran
// are synced (or need no sync); otherwise true, and it calls f from
// another goroutine once they are. Under --fsync always the wire layer
// writes a pipeline's replies only then (nothing acknowledged is lost), and
// serves its loop's other connections meanwhile, whose syncs the committer
// groups into one fsync.
func (c *Client) AwaitSync(f func()) bool { return c.sess.AwaitSync(f) }

// SyncLost reports, once, whether the changes the client's replies waited
// for were given up at shutdown instead of synced: those replies must not
// be sent (the connection is closed instead).
func (c *Client) SyncLost() bool { return c.sess.SyncLost() }

// WaitSync returns once the changes of every command the client ran are
// synced.
func (c *Client) WaitSync() { c.sess.WaitSync() }

// SetQueryBuffer and SetOutputBuffer record the connection's buffered
// unfinished request and unsent replies (CLIENT LIST's qbuf and omem). The
// wire layer calls them as the sizes change; a store only when they do,
// as most calls see the same (none).
func (c *Client) SetQueryBuffer(n int) {
	if int64(n) != c.qbuf.Load() {
		c.qbuf.Store(int64(n))
	}
}

// SetOutputBuffer: see SetQueryBuffer.
func (c *Client) SetOutputBuffer(n int) {
	if int64(n) != c.omem.Load() {
		c.omem.Store(int64(n))
	}
}

// OutputBuffer is the last size SetOutputBuffer recorded.
func (c *Client) OutputBuffer() int64 { return c.omem.Load() }

// SetKill sets how another connection's CLIENT KILL closes this one; the
// wire layer sets it. It must be safe to call from any goroutine.
func (c *Client) SetKill(f func()) {
	c.mu.Lock()
	c.kill = f
	pending := c.killPending
	c.mu.Unlock()
	if pending && f != nil {
		f() // killed between NewClient and SetKill
	}
}

// CLIENT PAUSE timeout [WRITE|ALL]
func clientPause(c *Client, w *Out, args [][]byte) {
	ms, e := parseTimeoutMs(args[2])
	if e != "" {
		w.WriteError(e)
		return
	}
	all := true
	if len(args) == 4 {
		switch strings.ToLower(string(args[3])) {
		case "write":
			all = false
		case "all":
		default:
			w.WriteError("ERR CLIENT PAUSE mode must be WRITE or ALL")
			return
		}
	} else if len(args) > 4 {
		w.WriteError(ErrSyntax)
		return
	}
	p := &c.srv.ctl
	end := time.Now().Add(time.Duration(min(ms, int64(1<<62)/int64(time.Millisecond))) * time.Millisecond)
	p.mu.Lock()
	if p.over {
		p.mu.Unlock()
		w.WriteOK()
		return
	}
	// As Redis's pauseActions: the new mode, and the later of the ends.
	p.all = all
	if p.done == nil {
		p.done = make(chan struct{})
		p.end = end
	} else if end.After(p.end) {
		p.end = end
	}
	p.paused.Store(true)
	p.mu.Unlock()
	w.WriteOK()
}

// parseTimeoutMs parses a timeout in ms as Redis's getTimeoutFromObjectOrReply.
func parseTimeoutMs(b []byte) (int64, string) {
	n, ok := limit.ParseRedisInt(b)
	if !ok {
		return 0, "ERR timeout is not an integer or out of range"
	}
	if n < 0 {
		return 0, "ERR timeout is negative"
	}
	return n, ""
}

// CLIENT UNPAUSE
func clientUnpause(c *Client, w *Out, _ [][]byte) {
	p := &c.srv.ctl
	p.mu.Lock()
	p.endLocked()
	p.mu.Unlock()
	w.WriteOK()
}

// onOff parses ON|OFF.
func onOff(b []byte) (v, ok bool) {
	switch strings.ToLower(string(b)) {
	case "on":
		return true, true
	case "off":
		return false, true
	}
	return false, false
}

// CLIENT NO-EVICT ON|OFF: recorded and shown in CLIENT LIST (flag e);
// cellserver evicts no client for memory.
func clientNoEvict(c *Client, w *Out, args [][]byte) { setOnOff(w, args[2], &c.noEvict) }

// CLIENT NO-TOUCH ON|OFF: recorded and shown in CLIENT LIST (flag T);
// cellserver keeps no access times for it to spare.
func clientNoTouch(c *Client, w *Out, args [][]byte) { setOnOff(w, args[2], &c.noTouch) }

// setOnOff sets flag from an ON|OFF argument, answering OK or a syntax error.
func setOnOff(w *Out, arg []byte, flag *atomic.Bool) {
	v, ok := onOff(arg)
	if !ok {
		w.WriteError(ErrSyntax)
		return
	}
	flag.Store(v)
	w.WriteOK()
}

// CLIENT REPLY ON|OFF|SKIP: OFF and SKIP answer nothing, as in Redis.
func clientReply(c *Client, w *Out, args [][]byte) {
	switch strings.ToLower(string(args[2])) {
	case "on":
		c.replyOff, c.skipCur, c.skipNext = false, false, false
		w.WriteOK()
	case "off":
		c.replyOff = true
	case "skip":
		if !c.replyOff {
			c.skipNext = true
		}
	default:
		w.WriteError(ErrSyntax)
	}
}

// flags is the client's flags field in CLIENT LIST, Redis 7.2's letters
// in its order (MULTI's x and tracking's t come before e).
func (c *Client) flags() string {
	// Redis's order (getClientInfoString): P x t R B ... e T.
	b := []byte(c.pubsubFlags())
	if c.multiN.Load() >= 0 {
		b = append(b, 'x')
	}
	b = append(b, c.trackingFlags()...)
	if c.noEvict.Load() {
		b = append(b, 'e')
	}
	if c.noTouch.Load() {
		b = append(b, 'T')
	}
	if len(b) == 0 {
		return "N"
	}
	return string(b)
}

// killFilter is CLIENT KILL's filters; zero fields match every client.
type killFilter struct {
	id          int64
	addr, laddr string
	user        string
	typeNone    bool // TYPE master|replica|pubsub: no client here is one
	maxAge      int64
	skipMe      bool
}

func (f *killFilter) match(self, cl *Client, now time.Time) bool {
	switch {
	case f.typeNone:
		return false
	case f.id != 0 && cl.ID != f.id:
		return false
	case f.addr != "" && cl.Addr != f.addr:
		return false
	case f.laddr != "" && cl.LAddr != f.laddr:
		return false
	case f.user != "" && cl.user() != f.user:
		return false
	case f.maxAge != 0 && int64(now.Sub(cl.created).Seconds()) < f.maxAge:
		return false
	case f.skipMe && cl == self:
		return false
	}
	return true
}

// CLIENT KILL addr:port | CLIENT KILL <filter> <value> [<filter> <value> ...]
func clientKill(c *Client, w *Out, args [][]byte) {
	s := c.srv
	if len(args) == 3 {
		f := killFilter{addr: string(args[2])}
		if s.killClients(c, &f) == 0 {
			w.WriteError("ERR No such client")
			return
		}
		w.WriteOK()
		return
	}
	if len(args)%2 != 0 {
		w.WriteError(ErrSyntax)
		return
	}
	f := killFilter{skipMe: true}
	for i := 2; i < len(args); i += 2 {
		v := args[i+1]
		switch strings.ToLower(string(args[i])) {
		case "id":
			id, ok := limit.ParseRedisInt(v)
			if !ok || id <= 0 {
				w.WriteError("ERR client-id should be greater than 0")
				return
			}
			f.id = id
		case "type":
			switch strings.ToLower(string(v)) {
			case "normal":
			case "master", "replica", "slave", "pubsub":
				f.typeNone = true
			default:
				w.WriteError("ERR Unknown client type '" + cstr(v) + "'")
				return
			}
		case "addr":
			f.addr = string(v)
		case "laddr":
			f.laddr = string(v)
		case "user":
			u := string(v)
			if u != UserDefault && (u != UserAdmin || s.cfg.AdminPassword == "") {
				w.WriteError("ERR No such user '" + cstr(v) + "'")
				return
			}
			f.user = u
		case "skipme":
			switch strings.ToLower(string(v)) {
			case "yes":
				f.skipMe = true
			case "no":
				f.skipMe = false
			default:
				w.WriteError(ErrSyntax)
				return
			}
		case "maxage":
			n, ok := limit.ParseRedisInt(v)
			if !ok {
				w.WriteError(ErrSyntax)
				return
			}
			f.maxAge = n
		default:
			w.WriteError(ErrSyntax)
			return
		}
	}
	w.WriteInt(int64(s.killClients(c, &f)))
}

// killClients closes every client f matches and returns how many: c
// itself after this pipeline's replies, as Redis's close-after-reply.
func (s *Server) killClients(c *Client, f *killFilter) int {
	now := time.Now()
	n := 0
	for _, cl := range s.sortedClients() {
		if !f.match(c, cl, now) {
			continue
		}
		n++
		if cl == c {
			c.closing = true
			continue
		}
		cl.killed.Store(true)
		cl.mu.Lock()
		kill := cl.kill
		cl.killPending = kill == nil
		cl.mu.Unlock()
		if kill != nil {
			kill()
		}
	}
	return n
}

// RESET: the connection as a new one's, as Redis's
// clearClientConnectionState: no name, protocol 2, the default user
// (authenticated only if it needs no password), replies on, NO-EVICT and
// NO-TOUCH off.
func resetCmd(c *Client, w *Out, _ [][]byte) {
	// It also discards the transaction, switches tracking off and ends
	// the subscriptions.
	c.resetTx()
	c.resetTracking()
	c.resetPubsub()
	c.mu.Lock()
	c.name = ""
	c.mu.Unlock()
	c.proto.Store(2)
	w.Proto = 2
	c.admin.Store(false)
	c.authed.Store(c.srv.cfg.RequirePass == "")
	c.replyOff, c.skipCur, c.skipNext = false, false, false
	c.noEvict.Store(false)
	c.noTouch.Store(false)
	w.WriteString("RESET")
}

// ROLE: a master with no replicas; offset 0 (cellserver does not
// replicate).
func roleCmd(_ *Client, w *Out, _ [][]byte) {
	w.WriteArray(3)
	w.WriteBulkString("master")
	w.WriteInt(0)
	w.WriteArray(0)
}

// WAIT numreplicas timeout: no replicas to wait for, so 0 at once.
func waitCmd(_ *Client, w *Out, args [][]byte) {
	if _, ok := limit.ParseRedisInt(args[1]); !ok {
		w.WriteError(ErrNotInteger)
		return
	}
	if _, e := parseTimeoutMs(args[2]); e != "" {
		w.WriteError(e)
		return
	}
	w.WriteInt(0)
}

// LASTSAVE: persistence is continuous, so the last save is the last
// completed write-out to disk (its fsync); the start time if none yet or
// under --in-memory.
func lastsaveCmd(c *Client, w *Out, _ [][]byte) {
	t := c.srv.started
	if ps := c.srv.st.PersistStats(); ps.Enabled && ps.LastFsync.After(t) {
		t = ps.LastFsync
	}
	w.WriteInt(t.Unix())
}
