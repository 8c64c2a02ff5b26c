package commands

import (
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/cellserver/cellserver/store"
)

// Transactions: MULTI, EXEC, DISCARD, WATCH, UNWATCH, with Redis 7's
// semantics and texts (multi.c). Inside MULTI a command passes the checks
// Redis makes at queue time (lookup, arity, AUTH, permissions, key size,
// cluster routing, MISCONF) and is copied into the client's queue; a
// refusal makes EXEC answer EXECABORT. EXEC parks every shard the queued
// commands (and the watched keys) live on (store.Session.Hold) and runs
// them through the same dispatch as a pipeline, inline on the parked
// shards: no other client's command runs on any shard in between.

// Error texts of Redis 7.
const (
	ErrExecAbort       = "EXECABORT Transaction discarded because of previous errors."
	ErrExecNoMulti     = "ERR EXEC without MULTI"
	ErrDiscardNoMulti  = "ERR DISCARD without MULTI"
	ErrMultiNested     = "ERR MULTI calls can not be nested"
	ErrWatchInMulti    = "ERR WATCH inside MULTI is not allowed"
	ErrNotInMulti      = "ERR Command not allowed inside a transaction"
	execAbortBecauseOf = "EXECABORT Transaction discarded because of: "
)

// Bounds on what one client makes the server keep for its transaction.
// Redis bounds a transaction by the client's query buffer only; the
// queue here is copied out of the read buffer, so it has bounds of its
// own.
const (
	// MaxTxCommands is the most commands a transaction queues.
	MaxTxCommands = 65536
	// MaxTxBytes is the most argument bytes a transaction queues, each
	// argument counting txArgCost bytes more for its bookkeeping.
	MaxTxBytes = 64 << 20
	txArgCost  = 24
	// MaxWatchedKeys is the most keys a client watches at once, and
	// MaxWatchedBytes the most bytes they hold together (each is kept by
	// the client and by its shard).
	MaxWatchedKeys  = 16384
	MaxWatchedBytes = 16 << 20
)

var (
	errTxTooLarge = "ERR transaction too large: at most " + strconv.Itoa(MaxTxCommands) +
		" commands and " + strconv.Itoa(MaxTxBytes>>20) + " MiB of arguments"
	errTooManyWatched = "ERR too many watched keys: at most " + strconv.Itoa(MaxWatchedKeys) + " keys and " +
		strconv.Itoa(MaxWatchedBytes>>20) + " MiB of them per client"
)

// txState is a client's MULTI and WATCH state; a client that never used
// either has none (Client.tx nil).
type txState struct {
	multi bool // between MULTI and EXEC or DISCARD
	dirty bool // a command was refused while queueing: EXEC aborts
	cmds  []txCmd
	bytes int
	// watched holds the watched keys (copies); w is told when one
	// changes, on the goroutine that changed it.
	watched      map[string]struct{}
	watchedBytes int // the watched keys' bytes
	w            watcher
}

type txCmd struct {
	cmd  *Command // as looked up when queued (subcommand resolved)
	args [][]byte // a copy: the read buffer is reused
}

// watcher is the store.KeyListener of a client's watched keys.
type watcher struct{ changed atomic.Bool }

func (w *watcher) KeyChanged([]byte, uint64) { w.changed.Store(true) }

func registerTx(t Table) {
	t.add(
		&Command{Name: "multi", Arity: 1, Flags: FlagNoScript | FlagLoading | FlagStale | FlagFast | FlagAllowBusy | TxImmediate | KeepsCaching, Cats: CatFast | CatTransaction, Group: "transactions",
			Summary: "Starts a transaction.", Since: "1.2.0", Run: multiCmd},
		&Command{Name: "exec", Arity: 1, Flags: FlagNoScript | FlagLoading | FlagStale | FlagSkipSlowlog | OffLoop | TxExec | TxImmediate, Cats: CatSlow | CatTransaction, Group: "transactions",
			Summary: "Executes all commands in a transaction.", Since: "1.2.0", Run: execCmd},
		&Command{Name: "discard", Arity: 1, Flags: FlagNoScript | FlagLoading | FlagStale | FlagFast | FlagAllowBusy | TxImmediate | TxDiscard, Cats: CatFast | CatTransaction, Group: "transactions",
			Summary: "Discards a transaction.", Since: "2.0.0", Run: discardCmd},
		&Command{Name: "watch", Arity: -2, Flags: FlagNoScript | FlagLoading | FlagStale | FlagFast | FlagAllowBusy | TxImmediate, Cats: CatFast | CatTransaction, FirstKey: 1, LastKey: -1, Step: 1, Group: "transactions",
			Summary: "Monitors changes to keys to determine the execution of a transaction.", Since: "2.2.0", Run: watchCmd},
		&Command{Name: "unwatch", Arity: 1, Flags: FlagNoScript | FlagLoading | FlagStale | FlagFast | FlagAllowBusy, Cats: CatFast | CatTransaction, Group: "transactions",
			Summary: "Forgets about watched keys of a transaction.", Since: "2.2.0", Run: unwatchCmd},
	)
}

// hasWrite reports whether the transaction queued a write command.
func (tx *txState) hasWrite() bool {
	for i := range tx.cmds {
		if tx.cmds[i].cmd.write() {
			return true
		}
	}
	return false
}

// inMulti reports whether the client is queueing a transaction.
func (c *Client) inMulti() bool { return c.tx != nil && c.tx.multi }

// txQueued queues cmd inside MULTI, or refuses it, and answers QUEUED or
// the refusal. It reports false for the commands that run at once.
func (s *Server) txQueued(c *Client, cmd *Command, args [][]byte, out *Out) bool {
	if cmd.Flags&TxImmediate != 0 {
		return false
	}
	tx := c.tx
	if cmd.Flags&TxForbidden != 0 {
		c.reject(cmd, ErrNotInMulti)
		return true
	}
	n := 0
	for _, a := range args {
		n += len(a)
	}
	if len(tx.cmds) >= MaxTxCommands || tx.bytes+n+len(args)*txArgCost > MaxTxBytes {
		c.reject(cmd, errTxTooLarge)
		tx.dropQueue() // EXEC aborts: nothing need be kept
		return true
	}
	s.finish(c, out) // the refusals before it
	if !c.quiet() {  // CLIENT REPLY OFF or SKIP silences QUEUED too
		out.WriteString("QUEUED")
	}
	if tx.dirty {
		return true // EXEC aborts: nothing need be kept
	}
	buf := make([]byte, 0, n)
	cp := make([][]byte, len(args))
	for i, a := range args {
		buf = append(buf, a...)
		cp[i] = buf[len(buf)-len(a) : len(buf) : len(buf)]
	}
	tx.cmds = append(tx.cmds, txCmd{cmd: cmd, args: cp})
	tx.bytes += n + len(args)*txArgCost
	c.multiN.Store(int32(len(tx.cmds)))
	return true
}

// txRefused notes that a command was refused inside MULTI (Redis's
// flagTransaction), returning the reply: EXEC's own refusal discards the
// transaction and answers EXECABORT with the reason.
func (c *Client) txRefused(cmd *Command, e string) string {
	if cmd == nil || cmd.Flags&TxExec == 0 {
		c.tx.dirty = true
		return e
	}
	c.discardTx()
	return execAbortBecauseOf + strings.TrimPrefix(e, "ERR ")
}

func (tx *txState) dropQueue() {
	tx.dirty = true
	clear(tx.cmds)
	tx.cmds, tx.bytes = nil, 0
}

// MULTI
func multiCmd(c *Client, w *Out, _ [][]byte) {
	if c.inMulti() {
		w.WriteError(ErrMultiNested)
		return
	}
	if c.tx == nil {
		c.tx = &txState{}
	}
	c.tx.multi = true
	c.multiN.Store(0)
	w.WriteOK()
}

// DISCARD
func discardCmd(c *Client, w *Out, _ [][]byte) {
	if !c.inMulti() {
		w.WriteError(ErrDiscardNoMulti)
		return
	}
	c.discardTx()
	w.WriteOK()
}

// WATCH key [key ...]
func watchCmd(c *Client, w *Out, args [][]byte) {
	if c.inMulti() {
		w.WriteError(ErrWatchInMulti)
		return
	}
	if c.tx == nil {
		c.tx = &txState{}
	}
	tx := c.tx
	if tx.watched == nil {
		tx.watched = map[string]struct{}{}
	}
	var add []string
	var seen map[string]struct{} // a key named twice in this WATCH counts once
	if len(args) > 2 {
		seen = make(map[string]struct{}, len(args)-1)
	}
	n := 0
	for _, k := range args[1:] {
		if _, ok := tx.watched[string(k)]; ok {
			continue
		}
		if seen != nil {
			if _, ok := seen[string(k)]; ok {
				continue
			}
			seen[string(k)] = struct{}{}
		}
		if len(tx.watched)+len(add) >= MaxWatchedKeys || tx.watchedBytes+n+len(k) > MaxWatchedBytes {
			w.WriteError(errTooManyWatched)
			return
		}
		add = append(add, string(k))
		n += len(k)
	}
	reqs := make([]store.InterestReq, len(add))
	tx.watchedBytes += n
	for i, k := range add {
		tx.watched[k] = struct{}{}
		reqs[i] = store.InterestReq{Key: []byte(k), Listener: &tx.w}
		c.sess.Add(&reqs[i])
	}
	c.sess.Run()
	for i := range reqs {
		if reqs[i].Status() != nil {
			w.WriteError(c.srv.statusError([]store.Request{&reqs[i]}))
			return
		}
	}
	w.WriteOK()
}

// UNWATCH (inside MULTI it is queued, and EXEC has unwatched by the time
// it runs, as in Redis)
func unwatchCmd(c *Client, w *Out, _ [][]byte) {
	c.unwatch(c.sess)
	w.WriteOK()
}

// unwatch withdraws the client's watches through sess: at once if sess
// holds their shards, else with a run of its own.
func (c *Client) unwatch(sess *store.Session) {
	if c.tx == nil || len(c.tx.watched) == 0 {
		if c.tx != nil {
			c.tx.w.changed.Store(false)
		}
		return
	}
	tx := c.tx
	for k := range tx.watched {
		sess.Add(&store.InterestReq{Key: []byte(k), Listener: &tx.w, Remove: true})
	}
	if !sess.Holding() {
		sess.Run()
	}
	clear(tx.watched)
	tx.watchedBytes = 0
	// After the withdrawals nothing can tell w any more.
	tx.w.changed.Store(false)
}

// discardTx ends MULTI without running it and unwatches (DISCARD, an
// aborted EXEC).
func (c *Client) discardTx() {
	tx := c.tx
	tx.multi = false
	tx.dirty = false
	c.multiN.Store(-1)
	clear(tx.cmds)
	if cap(tx.cmds) > maxKeptOps {
		tx.cmds = nil
	}
	tx.cmds, tx.bytes = tx.cmds[:0], 0
	c.unwatch(c.sess)
}

// resetTx discards MULTI state and unwatches every key: for RESET.
func (c *Client) resetTx() {
	if c.tx != nil {
		c.discardTx()
	}
}

// closeTx withdraws the watches of a client that goes away.
func (c *Client) closeTx() {
	if c.tx != nil && len(c.tx.watched) > 0 {
		sess := c.srv.st.NewSession()
		sess.SetHome(c.sess.Home()) // on the loop: its shards run here
		sess.DeferSync(true)        // nothing to acknowledge: never wait for the disk
		c.unwatch(sess)
	}
}

// EXEC
func execCmd(c *Client, w *Out, _ [][]byte) {
	if !c.inMulti() {
		w.WriteError(ErrExecNoMulti)
		return
	}
	s, tx := c.srv, c.tx
	if tx.dirty {
		c.discardTx()
		w.WriteError(ErrExecAbort)
		return
	}
	if s.clusterOn() {
		// The queued commands' keys together, as Redis's getNodeByQuery
		// checks them at EXEC: one slot, served here.
		var keys [][]byte
		for i := range tx.cmds {
			keys = cmdKeys(tx.cmds[i].cmd, tx.cmds[i].args, keys)
		}
		if e := s.refusal(s.svc.Route(keys)); e != "" {
			c.discardTx()
			w.WriteError(e)
			return
		}
	}
	if s.cfg.StopWrites && tx.hasWrite() && s.st.PersistErr() != nil {
		c.discardTx()
		w.WriteError(execAbortBecauseOf + ErrMisconf) // EXEC is a write then, as in Redis
		return
	}
	cmds := tx.cmds
	tx.cmds, tx.multi = nil, false // the commands run as a pipeline's now
	c.multiN.Store(-1)
	defer func() {
		clear(cmds)
		if cap(cmds) <= maxKeptOps {
			tx.cmds = cmds[:0]
		}
		tx.bytes = 0
	}()
	sess := c.sess
	defer func() { c.asking = false }() // an ASKING it ran lasts no longer than EXEC
	defer c.payAuthPause()              // after Release: defers run last first
	sess.Hold(s.txShards(tx, cmds))
	defer sess.Release() // also if a command panics: the shards must go
	// A watched key that expired since WATCH changed (Redis 7): looking
	// it up drops it, which tells the watcher.
	for k := range tx.watched {
		sess.Add(&store.ExistsReq{Key: []byte(k)})
	}
	aborted := tx.w.changed.Load()
	c.unwatch(sess)
	if aborted {
		w.WriteNullArray()
		return
	}
	if e := s.txOpenSlot(c, cmds); e != "" {
		w.WriteError(e) // nothing ran, as Redis's EXEC in a slot being moved
		return
	}
	sess.SetInTx(true)
	defer sess.SetInTx(false)
	w.WriteArray(len(cmds))
	// Every queued command runs (the transaction is all or nothing), but
	// once the replies pass the client's output limit the rest are
	// dropped: the wire layer then closes the client, as Redis closes one
	// over its hard limit, and the server never holds more than the limit
	// and one reply for it. (The queued commands were counted in
	// total_commands_processed when queued, as Redis counts them once.)
	over := false
	for i := range cmds {
		mark := w.Len()
		s.execOne(c, cmds[i].args, w)
		if over {
			s.finish(c, w)
			w.Truncate(mark)
		} else if w.OverRoom() {
			s.finish(c, w)
			over = true
		}
	}
	s.finish(c, w)
}

// payAuthPause pays the pause of the AUTHs that failed inside EXEC.
func (c *Client) payAuthPause() {
	if d := c.authPause; d > 0 {
		c.authPause = 0
		c.srv.sleep(d)
	}
}

// txShards returns the shards EXEC holds: those of the queued commands'
// keys and of the watched keys, without repeats (Hold orders them); nil
// (every shard) if a queued command without keys may touch the keyspace
// (FLUSHALL, DBSIZE, SCAN, CLUSTER GETKEYSINSLOT, ...).
func (s *Server) txShards(tx *txState, cmds []txCmd) []int {
	var ids []int
	var keys [][]byte
	add := func(k []byte) {
		i := s.st.ShardOf(k)
		for _, x := range ids {
			if x == i {
				return
			}
		}
		ids = append(ids, i)
	}
	for i := range cmds {
		cmd := cmds[i].cmd
		if cmd.FirstKey == 0 && cmd.Keys == nil {
			if !storeFree(cmd) {
				return nil
			}
			continue
		}
		keys = cmdKeys(cmd, cmds[i].args, keys[:0])
		for _, k := range keys {
			add(k)
		}
	}
	for k := range tx.watched {
		add([]byte(k))
	}
	if ids == nil {
		ids = []int{} // no shard: not nil, which is every shard
	}
	return ids
}

// storeFree reports whether a command without keys leaves the keyspace
// alone. Any other (and any command added later) makes EXEC hold every
// shard, which is always safe.
func storeFree(cmd *Command) bool {
	name := cmd.Name
	switch name {
	case "cluster|info", "cluster|myid", "cluster|nodes", "cluster|shards", "cluster|slots", "cluster|keyslot", "cluster|help":
		return true
	}
	if i := strings.IndexByte(name, '|'); i >= 0 {
		name = name[:i]
	}
	switch name {
	case "ping", "echo", "select", "auth", "hello", "client", "command", "config", "time", "info",
		"readonly", "readwrite", "asking", "multi", "exec", "discard", "unwatch":
		return true
	}
	return false
}

// cmdKeys appends cmd's key arguments in args to dst.
func cmdKeys(cmd *Command, args [][]byte, dst [][]byte) [][]byte {
	if cmd.Keys != nil {
		return append(dst, cmd.Keys(args)...)
	}
	if cmd.FirstKey == 0 {
		return dst
	}
	last := cmd.LastKey
	if last < 0 {
		last += len(args)
	}
	for i := cmd.FirstKey; i <= last && i < len(args); i += cmd.Step {
		dst = append(dst, args[i])
	}
	return dst
}

// txOpenSlot is Redis's check of a transaction's keys in a slot being
// moved (peer.Node.CheckTx), made under EXEC's hold so that no key moves
// meanwhile. "" to run, else the redirect (ASK, TRYAGAIN).
func (s *Server) txOpenSlot(c *Client, cmds []txCmd) string {
	if !s.clusterOn() || !s.nodeState().Open() {
		return ""
	}
	var keys [][]byte
	for i := range cmds {
		keys = cmdKeys(cmds[i].cmd, cmds[i].args, keys)
	}
	return s.peerError(s.node.CheckTx(c.sess, keys))
}
