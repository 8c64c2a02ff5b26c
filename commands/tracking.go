package commands

// Client-side caching, as Redis 6+'s (src/tracking.c): CLIENT TRACKING,
// CACHING, GETREDIR and TRACKINGINFO, and the RESP3 "invalidate" pushes.
//
// In the default mode the keys a tracking client reads (read-only commands
// with keys; OPTIN: only the command after CLIENT CACHING YES; OPTOUT: all
// but the one after CLIENT CACHING NO) are registered with the key's shard
// (store.InterestReq); when the key changes (a write, a delete, expiry, a
// flush), the shard calls the client's tracker, which sends one invalidate
// push and forgets the key, as Redis's tracking table does. In BCAST mode
// nothing is remembered: every change of a key under one of the client's
// prefixes is pushed (the store calls the broadcast table on every change
// while any BCAST client exists).
//
// Pushes are built on the shard goroutine that saw the change and handed to
// the connection without blocking (Client.push, the wire layer's queue), so
// a slow or dead client never holds up a shard.

import (
	"bytes"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/cellserver/cellserver/limit"
	"github.com/cellserver/cellserver/store"
)

// Tracking error texts, Redis 7's.
const (
	ErrTrackPrefixNoBcast = "ERR PREFIX option requires BCAST mode to be enabled"
	ErrTrackBcastSwitch   = "ERR You can't switch BCAST mode on/off before disabling tracking for this client, and then re-enabling it with a different mode."
	ErrTrackBcastOpt      = "ERR OPTIN and OPTOUT are not compatible with BCAST"
	ErrTrackOptBoth       = "ERR You can't specify both OPTIN mode and OPTOUT mode"
	ErrTrackOptSwitch     = "ERR You can't switch OPTIN/OPTOUT mode before disabling tracking for this client, and then re-enabling it with a different mode."
	ErrTrackRedirTwice    = "ERR A client can only redirect to a single other client"
	ErrTrackRedirMissing  = "ERR The client ID you want redirect to does not exist"
	ErrCachingOff         = "ERR CLIENT CACHING can be called only when the client is in tracking mode with OPTIN or OPTOUT mode enabled"
	ErrCachingYes         = "ERR CLIENT CACHING YES is only valid when tracking is enabled in OPTIN mode."
	ErrCachingNo          = "ERR CLIENT CACHING NO is only valid when tracking is enabled in OPTOUT mode."
)

// DefaultTrackingMaxKeys is Config.TrackingMaxKeys's default, Redis 7's
// tracking-table-max-keys.
const DefaultTrackingMaxKeys = 1_000_000

// maxTrackPrefixes bounds one client's BCAST prefixes: every change of any
// key is checked against the distinct prefix lengths, and a client must not
// make every write of the server slow.
const maxTrackPrefixes = 1024

// tracker is one client's tracking state. The fields under mu are read by
// the shard goroutines delivering invalidations and by CLIENT LIST; the
// client's own goroutine is the only writer.
type tracker struct {
	c *Client

	mu     sync.Mutex
	on     bool
	bcast  bool
	optin  bool
	optout bool
	noloop bool
	broken bool // the redirect client is gone (CLIENT LIST's R flag)
	// redirect is the client ID invalidations go to (0: this client) and
	// redir that client, looked up when tracking was switched on.
	redirect int64
	redir    *Client
	prefixes []string // BCAST's, sorted
	// keys are the keys this client has registered with the store and not
	// yet been told of (Redis's tracking table, this client's part): what
	// TRACKING OFF withdraws, and what counts against TrackingMaxKeys.
	keys map[string]struct{}

	// pending are invalidations of keys the client changed itself (RESP3,
	// no redirect), which Redis writes right after the reply of the
	// command that changed the key (its tracking_pending_keys) rather than
	// between pipelines: copies, written by writeSelfInvalidations; npending
	// is their number, read without mu by finish.
	pending  []ownInvalidation
	npending atomic.Int32

	// caching is CLIENT CACHING's flag for the next command, spent that
	// it ends with the command after the running EXEC; only the client's
	// goroutine touches them.
	caching, spent bool
}

// KeyChanged is store.KeyListener: a key this client read changed, so it
// is forgotten and the client told (unless it changed it itself under
// NOLOOP, or tracking is off or in BCAST mode now: Redis drops those).
func (t *tracker) KeyChanged(key []byte, by uint64) {
	flushed := t.c.srv.flushing.has(by)
	own := by == uint64(t.c.ID)
	t.mu.Lock()
	t.forget(key)
	skip := !t.on || t.bcast || (t.noloop && own) || flushed
	// The client's own change, made by its pipeline running now: its
	// invalidation goes after that command's reply (a registration
	// fires once, so there are at most as many as it tracks keys).
	self := !skip && own && t.ownAfterReply()
	if self {
		t.addPending(ownInvalidation{key: bytes.Clone(key)})
	}
	t.mu.Unlock()
	if !skip && !self {
		t.invalidate(key, false)
	}
}

// ownInvalidation is a pending invalidation of the client's own change:
// of key, or (null) of everything, after its flush.
type ownInvalidation struct {
	key  []byte
	null bool
}

// addPending queues p for writeSelfInvalidations. With t.mu.
func (t *tracker) addPending(p ownInvalidation) {
	t.pending = append(t.pending, p)
	t.npending.Store(int32(len(t.pending)))
}

// ownAfterReply reports whether the client's own changes are told after
// the reply of the command that made them: in RESP3, to itself. With t.mu.
func (t *tracker) ownAfterReply() bool { return t.redirect == 0 && t.c.Proto() == 3 }

// writeSelfInvalidations writes to out, as pushes, the pending
// invalidations of the client's own changes of cmd's keys in args (cmd
// nil: all of them). Call it on the client's goroutine after a reply.
func (c *Client) writeSelfInvalidations(out *Out, cmd *Command, args [][]byte) {
	t := c.trk.Load()
	if t == nil || t.npending.Load() == 0 {
		return
	}
	var keys [][]byte
	if cmd != nil {
		keys = commandKeys(cmd, args)
	}
	resp3 := c.Proto() == 3 // a HELLO 2 since: RESP2 has no pushes
	t.mu.Lock()
	kept := t.pending[:0]
	for _, p := range t.pending {
		if cmd != nil && (p.null || !slices.ContainsFunc(keys, func(x []byte) bool { return bytes.Equal(x, p.key) })) {
			kept = append(kept, p)
			continue
		}
		if resp3 {
			out.B = appendInvalidate(out.B, p.key, p.null, 3)
		}
	}
	clear(t.pending[len(kept):])
	t.pending = kept
	if len(kept) == 0 {
		t.pending = nil
	}
	t.npending.Store(int32(len(kept)))
	t.mu.Unlock()
}

// KeyRegistered is store.RegistrationListener: the shard holds a
// registration for key, so the key is counted as remembered (again, if
// the lookup before it fired and forgot an earlier one).
func (t *tracker) KeyRegistered(key []byte) {
	t.mu.Lock()
	t.note(key)
	t.mu.Unlock()
}

// note counts key as remembered; forget stops counting it. With t.mu.
func (t *tracker) note(key []byte) {
	if _, ok := t.keys[string(key)]; ok {
		return
	}
	if t.keys == nil {
		t.keys = map[string]struct{}{}
	}
	t.keys[string(key)] = struct{}{}
	t.c.srv.trackedKeys.Add(1)
	t.c.srv.trackedBytes.Add(int64(len(key)))
}

func (t *tracker) forget(key []byte) {
	if _, ok := t.keys[string(key)]; ok {
		delete(t.keys, string(key))
		t.c.srv.trackedKeys.Add(-1)
		t.c.srv.trackedBytes.Add(-int64(len(key)))
	}
}

// MaxTrackedBytes bounds the bytes of the keys remembered for tracking
// clients, over the server (each is kept by its client and its shard):
// past it, as past TrackingMaxKeys, a key read is invalidated at once.
const MaxTrackedBytes = 256 << 20

// invalidate sends an invalidate push for key (null: every key, after a
// flush) to where the client's invalidations go. Safe on any goroutine.
func (t *tracker) invalidate(key []byte, null bool) {
	t.mu.Lock()
	redirect, target := t.redirect, t.c
	if redirect != 0 {
		target = t.redir
		if target == nil || target.gone.Load() {
			// As Redis: the tracking client learns, in RESP3, that its
			// redirect is gone, with every invalidation it misses.
			t.broken = true
			t.mu.Unlock()
			if t.c.Proto() == 3 {
				msg := append([]byte(">2\r\n$21\r\ntracking-redir-broken\r\n:"), strconv.FormatInt(redirect, 10)...)
				t.c.push(append(msg, '\r', '\n'))
			}
			return
		}
	}
	t.mu.Unlock()
	switch {
	case target.Proto() == 3:
		target.push(appendInvalidate(nil, key, null, t.c.Proto()))
	case redirect != 0 && target.subInvalidate.Load():
		// RESP2 has no pushes: a redirect target gets a Pub/Sub message
		// if it subscribed to the channel, as in Redis.
		target.push(appendTrackingMessage(nil, key, null, t.c.Proto()))
	}
}

// appendInvalidate appends RESP3's invalidate push for key (null: the
// null that tells of a flush, in the tracking client's protocol proto, as
// Redis writes it even to a RESP3 redirect target).
func appendInvalidate(dst, key []byte, null bool, proto int) []byte {
	return appendInvalidated(append(dst, ">2\r\n$10\r\ninvalidate\r\n"...), key, null, proto)
}

// appendInvalidated appends what an invalidation carries: a one-key array,
// or (null) the null of a flush in protocol proto.
func appendInvalidated(dst, key []byte, null bool, proto int) []byte {
	if null {
		if proto == 3 {
			return append(dst, "_\r\n"...)
		}
		return append(dst, "$-1\r\n"...)
	}
	dst = append(dst, "*1\r\n$"...)
	dst = strconv.AppendInt(dst, int64(len(key)), 10)
	dst = append(dst, '\r', '\n')
	dst = append(dst, key...)
	return append(dst, '\r', '\n')
}

// push hands msg to the connection (the wire layer's queue, which writes it
// between pipelines and never blocks); a client that is gone or has no
// connection (a test's) drops it.
func (c *Client) push(msg []byte) {
	if c.gone.Load() {
		return
	}
	if p := c.pusher.Load(); p != nil {
		(*p)(msg)
	}
}

// SetPusher sets how pushes reach the client's connection: p is called on
// any goroutine, must not block, and must bound what it keeps (a client
// that does not read its pushes is disconnected, as Redis's output buffer
// limit does). Set it before the client runs a command.
func (c *Client) SetPusher(p func(msg []byte)) { c.pusher.Store(&p) }

// trackCommand is execOne's hook for a client that has ever switched
// tracking on: it remembers the keys of a read-only command, and consumes
// CLIENT CACHING's flag as Redis's resetClient does: CLIENT commands and
// MULTI keep it, and so does a transaction, through the commands EXEC
// runs (a session holding its shards), until the command after EXEC.
func (c *Client) trackCommand(cmd *Command, args [][]byte) {
	t := c.trk.Load()
	inExec := c.sess.Holding()
	if t.spent && !inExec {
		t.caching, t.spent = false, false
	}
	t.mu.Lock()
	remember := t.on && !t.bcast && !(t.optin && !t.caching) && !(t.optout && t.caching)
	t.mu.Unlock()
	if remember && cmd.Flags&FlagReadOnly != 0 && (cmd.FirstKey > 0 || cmd.Keys != nil) {
		for _, key := range commandKeys(cmd, args) {
			c.remember(key)
		}
	}
	switch {
	case inExec || cmd.Flags&KeepsCaching != 0:
	case cmd.Flags&TxExec != 0 && c.inMulti():
		t.spent = true
	case !c.inMulti() || cmd.Flags&TxDiscard != 0:
		t.caching = false
	}
}

// commandKeys is cmd's key arguments in args.
func commandKeys(cmd *Command, args [][]byte) [][]byte {
	if cmd.Keys != nil {
		return cmd.Keys(args)
	}
	var keys [][]byte
	last := cmd.LastKey
	if last < 0 {
		last += len(args)
	}
	for i := cmd.FirstKey; i <= last && i < len(args); i += cmd.Step {
		keys = append(keys, args[i])
	}
	return keys
}

// remember registers the client's interest in key with the key's shard, in
// the pipeline's batch (a change made after the read, even in the same
// batch, is told). Past TrackingMaxKeys a new key is not remembered but
// invalidated at once, so the client does not keep what it read: Redis
// evicts old keys instead, with the same invalidation.
func (c *Client) remember(key []byte) {
	t, s := c.trk.Load(), c.srv
	t.mu.Lock()
	_, known := t.keys[string(key)]
	if !known {
		if s.trackedKeys.Load() >= int64(s.cfg.TrackingMaxKeys) || s.trackedBytes.Load()+int64(len(key)) > MaxTrackedBytes {
			t.mu.Unlock()
			t.invalidate(key, false)
			return
		}
		t.note(key)
	}
	t.mu.Unlock()
	// Registered even when known: the shard may be telling of it right
	// now, and a registration of a registered key is one registration.
	c.sess.Add(&store.InterestReq{Key: key, Listener: t})
}

// resetTracking switches tracking off, as CLIENT TRACKING OFF and RESET do:
// the client's registrations are withdrawn and its prefixes dropped. Call
// it on the client's goroutine with nothing queued.
func (c *Client) resetTracking() {
	t := c.trk.Load()
	if t == nil {
		return
	}
	t.mu.Lock()
	wasBcast := t.on && t.bcast
	keys := make([][]byte, 0, len(t.keys))
	for k := range t.keys {
		keys = append(keys, []byte(k))
	}
	t.on, t.bcast, t.optin, t.optout, t.noloop, t.broken = false, false, false, false, false, false
	t.prefixes, t.redir, t.caching, t.spent = nil, nil, false, false
	t.mu.Unlock()
	if wasBcast {
		c.srv.bcast.remove(t)
	}
	if c.sess.Holding() {
		// Inside EXEC, which holds only its keys' shards: the keys stay
		// registered and counted (a change is told to no one) until the
		// next TRACKING OFF or the close withdraws them.
		return
	}
	// In chunks: a client may have a million keys, and the session keeps
	// what it queued until it runs.
	for len(keys) > 0 {
		chunk := keys[:min(len(keys), maxKeptOps)]
		keys = keys[len(chunk):]
		for _, k := range chunk {
			c.sess.Add(&store.InterestReq{Key: k, Listener: t, Remove: true})
		}
		c.sess.Run()
	}
	// What fired meanwhile was already subtracted.
	t.mu.Lock()
	for k := range t.keys {
		t.forget([]byte(k))
	}
	t.keys = nil
	t.mu.Unlock()
}

// closeTracking is Client.Close's part: the client is gone for clients
// redirecting to it, and its registrations are withdrawn.
func (c *Client) closeTracking() {
	c.gone.Store(true)
	if c.trk.Load() != nil {
		c.resetTracking()
	}
}

// CLIENT TRACKING ON|OFF [REDIRECT id] [PREFIX prefix ...] [BCAST] [OPTIN] [OPTOUT] [NOLOOP]
func clientTracking(c *Client, w *Out, args [][]byte) {
	var redirect int64
	var redir *Client
	var bcast, optin, optout, noloop bool
	var prefixes [][]byte
	for j := 3; j < len(args); j++ {
		more := len(args) - 1 - j
		switch opt := string(args[j]); {
		case strings.EqualFold(opt, "redirect") && more > 0:
			j++
			if redirect != 0 {
				w.WriteError(ErrTrackRedirTwice)
				return
			}
			id, ok := limit.ParseRedisInt(args[j])
			if !ok {
				w.WriteError(ErrNotInteger)
				return
			}
			c.srv.clientsMu.Lock()
			redir = c.srv.clients[id]
			c.srv.clientsMu.Unlock()
			if redir == nil {
				w.WriteError(ErrTrackRedirMissing)
				return
			}
			redirect = id
		case strings.EqualFold(opt, "bcast"):
			bcast = true
		case strings.EqualFold(opt, "optin"):
			optin = true
		case strings.EqualFold(opt, "optout"):
			optout = true
		case strings.EqualFold(opt, "noloop"):
			noloop = true
		case strings.EqualFold(opt, "prefix") && more > 0:
			j++
			prefixes = append(prefixes, args[j])
		default:
			w.WriteError(ErrSyntax)
			return
		}
	}
	switch {
	case strings.EqualFold(string(args[2]), "off"):
		c.resetTracking()
		w.WriteOK()
		return
	case !strings.EqualFold(string(args[2]), "on"):
		w.WriteError(ErrSyntax)
		return
	}
	if c.trk.Load() == nil {
		c.trk.Store(&tracker{c: c})
		c.hooked = true
	}
	t := c.trk.Load()
	t.mu.Lock()
	on, wasBcast, wasIn, wasOut, old := t.on, t.bcast, t.optin, t.optout, t.prefixes
	t.mu.Unlock()
	switch {
	case !bcast && len(prefixes) > 0:
		w.WriteError(ErrTrackPrefixNoBcast)
		return
	case on && wasBcast != bcast:
		w.WriteError(ErrTrackBcastSwitch)
		return
	case bcast && (optin || optout):
		w.WriteError(ErrTrackBcastOpt)
		return
	case optin && optout:
		w.WriteError(ErrTrackOptBoth)
		return
	case on && (optin && wasOut || optout && wasIn):
		w.WriteError(ErrTrackOptSwitch)
		return
	}
	var all []string
	if bcast {
		// Counted first: the overlap check below compares every pair.
		if len(old)+max(len(prefixes), 1) > maxTrackPrefixes {
			w.WriteError("ERR too many tracking prefixes for one client (at most " + strconv.Itoa(maxTrackPrefixes) + ")")
			return
		}
		if e := prefixCollision(prefixes, old); e != "" {
			w.WriteError(e)
			return
		}
		if len(prefixes) == 0 {
			prefixes = [][]byte{{}} // every key, as Redis's empty prefix
		}
		all = append(all, old...)
		for _, p := range prefixes {
			all = append(all, string(p))
		}
		sort.Strings(all)
		if !c.srv.bcast.fits(all) {
			w.WriteError(errTooManyPrefixLens)
			return
		}
	}
	t.mu.Lock()
	t.on, t.bcast, t.optin, t.optout, t.noloop = true, bcast, optin, optout, noloop
	t.redirect, t.redir, t.broken = redirect, redir, false
	if bcast {
		t.prefixes = all
	}
	t.mu.Unlock()
	if bcast {
		c.srv.bcast.add(c.srv, t)
	}
	w.WriteOK()
}

// prefixCollision is Redis's checkPrefixCollisionsOrReply: no new prefix
// may be a prefix of, or have as a prefix, one the client has or another
// new one.
func prefixCollision(prefixes [][]byte, existing []string) string {
	overlap := func(a []byte, b string) bool {
		n := min(len(a), len(b))
		return string(a[:n]) == b[:n]
	}
	for i, p := range prefixes {
		for _, e := range existing {
			if overlap(p, e) {
				return "ERR Prefix '" + cstr(p) + "' overlaps with an existing prefix '" + cstr([]byte(e)) + "'. Prefixes for a single client must not overlap."
			}
		}
		for _, q := range prefixes[i+1:] {
			if n := min(len(p), len(q)); bytes.Equal(p[:n], q[:n]) {
				return "ERR Prefix '" + cstr(p) + "' overlaps with another provided prefix '" + cstr(q) + "'. Prefixes for a single client must not overlap."
			}
		}
	}
	return ""
}

// CLIENT CACHING YES|NO
func clientCaching(c *Client, w *Out, args [][]byte) {
	t := c.trk.Load()
	var on, optin, optout bool
	if t != nil {
		t.mu.Lock()
		on, optin, optout = t.on, t.optin, t.optout
		t.mu.Unlock()
	}
	switch opt := string(args[2]); {
	case !on:
		w.WriteError(ErrCachingOff)
	case strings.EqualFold(opt, "yes") && !optin:
		w.WriteError(ErrCachingYes)
	case strings.EqualFold(opt, "no") && !optout:
		w.WriteError(ErrCachingNo)
	case strings.EqualFold(opt, "yes"), strings.EqualFold(opt, "no"):
		t.caching = true
		w.WriteOK()
	default:
		w.WriteError(ErrSyntax)
	}
}

// CLIENT GETREDIR
func clientGetRedir(c *Client, w *Out, _ [][]byte) { w.WriteInt(c.trackingRedir()) }

// trackingRedir is CLIENT GETREDIR's and CLIENT LIST's redir: -1 when not
// tracking, else the redirect client's ID (0: none).
func (c *Client) trackingRedir() int64 {
	t := c.trk.Load()
	if t == nil {
		return -1
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.on {
		return -1
	}
	return t.redirect
}

// trackingFlags is the tracking part of CLIENT LIST's flags, Redis's t
// (tracking), R (its redirect is gone) and B (BCAST).
func (c *Client) trackingFlags() string {
	t := c.trk.Load()
	if t == nil {
		return ""
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.on {
		return ""
	}
	f := "t"
	if t.broken {
		f += "R"
	}
	if t.bcast {
		f += "B"
	}
	return f
}

// tracking reports whether tracking is on; safe from any goroutine.
func (c *Client) tracking() bool {
	t := c.trk.Load()
	if t == nil {
		return false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.on
}

// trackingPrefixes is INFO's tracking_total_prefixes: the distinct BCAST
// prefixes (the empty one for a BCAST client without PREFIX), as Redis's.
func (s *Server) trackingPrefixes() int {
	if tb := s.bcast.cur.Load(); tb != nil {
		return len(tb.byPrefix)
	}
	return 0
}

// CLIENT TRACKINGINFO
func clientTrackingInfo(c *Client, w *Out, _ [][]byte) {
	flags := []string{"off"}
	redirect := int64(-1)
	var prefixes []string
	if t := c.trk.Load(); t != nil {
		t.mu.Lock()
		if t.on {
			flags[0] = "on"
			redirect = t.redirect
			if t.bcast {
				flags = append(flags, "bcast")
			}
			if t.optin {
				flags = append(flags, "optin")
				if t.caching {
					flags = append(flags, "caching-yes")
				}
			}
			if t.optout {
				flags = append(flags, "optout")
				if t.caching {
					flags = append(flags, "caching-no")
				}
			}
			if t.noloop {
				flags = append(flags, "noloop")
			}
			if t.broken {
				flags = append(flags, "broken_redirect")
			}
			prefixes = t.prefixes
		}
		t.mu.Unlock()
	}
	w.WriteMap(3)
	w.WriteBulkString("flags")
	w.WriteSet(len(flags))
	for _, f := range flags {
		w.WriteBulkString(f)
	}
	w.WriteBulkString("redirect")
	w.WriteInt(redirect)
	w.WriteBulkString("prefixes")
	w.WriteArray(len(prefixes))
	for _, p := range prefixes {
		w.WriteBulkString(p)
	}
}

// trackFlush runs flush (FLUSHALL's or FLUSHDB's, for c) and tells every
// tracking client that all keys changed, with the one null invalidation
// Redis sends: the keys the flush removes are forgotten without a push each.
func (s *Server) trackFlush(c *Client, flush func()) {
	s.flushing.begin(uint64(c.ID))
	defer s.flushing.end(uint64(c.ID))
	flush()
	s.trackingFlushed(c)
}

// flushers are the sessions running a flush (their changes are told by
// trackFlush's null invalidation). A flush's session runs nothing else
// meanwhile: FLUSHALL runs after the requests queued before it.
type flushers struct {
	n   atomic.Int32 // len(ids), checked first: flushes are rare
	mu  sync.Mutex
	ids map[uint64]int
}

func (f *flushers) begin(id uint64) {
	f.mu.Lock()
	if f.ids == nil {
		f.ids = map[uint64]int{}
	}
	f.ids[id]++
	f.n.Store(int32(len(f.ids)))
	f.mu.Unlock()
}

func (f *flushers) end(id uint64) {
	f.mu.Lock()
	if f.ids[id]--; f.ids[id] <= 0 {
		delete(f.ids, id)
	}
	f.n.Store(int32(len(f.ids)))
	f.mu.Unlock()
}

// has reports whether session id is running a flush.
func (f *flushers) has(id uint64) bool {
	if id == 0 || f.n.Load() == 0 {
		return false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.ids[id] > 0
}

// trackingFlushed sends every tracking client the null invalidation;
// the flusher's own comes after its reply (ownAfterReply).
func (s *Server) trackingFlushed(by *Client) {
	s.clientsMu.Lock()
	var ts []*tracker
	for _, cl := range s.clients {
		if t := cl.trk.Load(); t != nil {
			ts = append(ts, t)
		}
	}
	s.clientsMu.Unlock()
	for _, t := range ts {
		t.mu.Lock()
		on, own := t.on, t.c == by && t.ownAfterReply()
		if on && own {
			t.addPending(ownInvalidation{null: true})
		}
		t.mu.Unlock()
		if on && !own {
			t.invalidate(nil, true)
		}
	}
}

// listFlags is CLIENT LIST's flags: N when none is set, as Redis's.
