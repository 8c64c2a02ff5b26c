package store

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// persister is the group committer: shard owners hand it batches of changes
// and one goroutine commits them to Pebble, many per write, syncing per the
// policy. Shards never wait for the disk except under FsyncAlways, and even
// then only their clients' replies wait, not the owner.
type persister struct {
	dbp    atomic.Pointer[pebble.DB]
	dd     *dataDir                   // the data dir (nil in some tests)
	reopen func() (*pebble.DB, error) // opens the data dir again after a fatal error
	resync func()                     // has every shard rewrite its keys
	policy Fsync
	log    *slog.Logger
	in     chan commitReq
	quit   chan struct{}
	// Close asks, before the shards stop, which of them must rewrite their
	// keys for their changes to reach the disk (see prepareClose).
	closeAsk chan chan []int
	// withholdAsk: the store is closing; waiters whose changes are not on
	// disk are released as failed from now on (see withhold).
	withholdAsk chan struct{}
	withheld    bool // committer only
	closing     bool // committer only: Close asked; no more resyncs or drops
	done        chan struct{}

	// INFO's disk_bytes, cached: Pebble's Metrics takes its DB mutex, which
	// a failing flush holds while pebbleEvents pauses it, and INFO runs on
	// an event loop. Refreshed off it (refreshDiskBytes), at most one at a
	// time; diskMu is also held by whoever closes the DB, diskLive saying
	// whether db() is open.
	diskCache atomic.Uint64
	diskBusy  atomic.Bool
	diskMu    sync.Mutex
	diskLive  bool

	lastErr     atomic.Pointer[string]
	writeErrors atomic.Int64
	commits     atomic.Int64
	changes     atomic.Int64
	pending     atomic.Int64
	held        atomic.Int64 // changes in failed, for INFO (pending counts them until the committer takes them)
	lastFsync   atomic.Int64 // Unix ns
	keysLoaded  atomic.Int64
	expiredLoad atomic.Int64
	loadTime    atomic.Int64
	snapshots   atomic.Int64
	corruptLost atomic.Int64 // records a damaged log lost, found at load (RecoverCorrupt)
	shards      []*shard

	seq        atomic.Uint64      // the last log sequence number handed out
	snapMin    int64              // log bytes below which no snapshot round starts
	startRound func(round uint64) // has every shard start a snapshot (Store.snapshotRound)

	// Log records committed since the data dir was created, and how many of
	// them are synced; the mark file says synced (see open.go). The latest
	// count record committed is numbered lastCount.
	recs        uint64 // committer only
	lastCount   uint64 // committer only
	loadedCount uint64 // the count the log replayed to
	synced      atomic.Uint64
	// The mark: written by the committer after each sync (nil until it
	// could be created; tried again at most once per markEvery), synced by
	// the mark loop at most once per markEvery.
	mark       atomic.Pointer[markWriter]
	markTried  time.Time // committer only
	markFailed bool      // committer only
	syncFailed bool      // mark loop only
	markPoke   chan struct{}
	markQuit   chan struct{}
	markDone   chan struct{}

	// Snapshot rounds, touched by the committer only.
	logged   int64    // log bytes written since the last round started
	round    uint64   // the round in progress, 0 if none
	rounds   uint64   // rounds started so far
	starts   []uint64 // per shard: where its snapshot of this round began
	reported int      // shards done with this round

	// Write failures, touched by the committer only (see loop).
	failed      []logBatch      // changes whose commit failed or waits, in order
	failedBytes int64           // their size
	failedCount int64           // their changes
	broken      bool            // Pebble hit a fatal error: reopen needed
	needSnap    map[*shard]bool // shards whose changes a resync will rewrite
	resyncAsked bool            // a resync was requested and not finished
	perKey      uint64          // bytes per key of the last rewrite accepted (setSize before one)
	failing     bool            // since the first failure of a run, until a write succeeds
	holding     bool            // the last attempt failed: changes wait for the next
	failStart   time.Time
	failCount   int64         // failed attempts in this run
	nextRetry   time.Duration // when the next attempt is due after a failure
	backoff     time.Duration // the next failed write's wait (1 s doubling to maxBackoff)
	retry       *time.Timer
	armed       bool

	// Under FsyncAlways, the waiters of requests whose changes are not known
	// to be on disk (a write or sync failed, or a rewrite is due), in order:
	// their replies wait until a later sync succeeds with nothing left
	// behind, so that nothing acknowledged can be lost.
	parked []doner
}

// maxBackoff bounds the wait between attempts to write after Pebble failed
// a write. (A lack of space is checked every second instead: statfs costs
// nothing, and writes resume as soon as space comes back.)
const maxBackoff = 30 * time.Second

// maxFailedBytes is how many bytes of failed changes the committer holds
// for a retry; beyond, it drops them and has every shard rewrite its keys
// from memory once writes work (tests lower it). Under everysec a write-out
// holds each changed key once, so this is reached only by a long outage.
var maxFailedBytes int64 = 64 << 20

type commitReq struct {
	b     *pebble.Batch // may be nil: only wait for earlier changes
	db    *pebble.DB    // the DB b was made by (nil: the current one)
	count int64         // changes (entries) in b
	recs  int64         // log records in b
	wg    doner
	// noPark: wg is released after the attempt even if it failed (its
	// waiter checks PersistErr itself, see SyncHeld).
	noPark bool
	sh     *shard
	n      uint64 // shard's send sequence number of this request
	snap   bool   // b holds the shard's whole state (a resync)
	// sh finished its snapshot of round, begun at log sequence number start.
	round, start uint64
	// group, if set, are the parts of several shards committed as one
	// batch (see hold); the request's own fields other than wg are unused.
	group []commitReq
}

// logBatch is a batch of records waiting to be committed.
type logBatch struct {
	b     *pebble.Batch
	db    *pebble.DB // the DB b was made by (nil: the current one)
	count int64
	recs  int64
	sh    *shard // nil: the committer's own (a probe)
	// room is what the space check asks for this batch if more than its
	// length: a probe standing for the rewrite it lets through.
	room  uint64
	probe bool // made by probe: not held when it fails, as it holds no change
}

// size is what the space check asks for lb.
func (lb *logBatch) size() uint64 { return max(uint64(lb.b.Len()), lb.room) }

// errPebbleFatal marks an error Pebble reported through Logger.Fatalf: its
// commit pipeline cannot be used again, so the DB is reopened.
type errPebbleFatal struct {
	msg   string
	stack string // where a panic other than Fatalf's was raised, for the log
}

func (e errPebbleFatal) Error() string { return e.msg }

func newPersister(db *pebble.DB, policy Fsync, log *slog.Logger) *persister {
	p := &persister{
		policy:      policy,
		log:         log,
		in:          make(chan commitReq, 4096),
		quit:        make(chan struct{}),
		closeAsk:    make(chan chan []int),
		withholdAsk: make(chan struct{}),
		done:        make(chan struct{}),
		snapMin:     snapMinBytes,
		needSnap:    map[*shard]bool{},
		perKey:      setSize,
		backoff:     time.Second,
	}
	p.dbp.Store(db)
	p.lastFsync.Store(time.Now().UnixNano())
	return p
}

func (p *persister) db() *pebble.DB { return p.dbp.Load() }

// diskBytes is the data dir's size per Pebble, as of the last refresh; it
// starts another without waiting for it.
func (p *persister) diskBytes() uint64 {
	if p.diskBusy.CompareAndSwap(false, true) {
		go func() {
			defer p.diskBusy.Store(false)
			p.refreshDiskBytes()
		}()
	}
	return p.diskCache.Load()
}

// refreshDiskBytes asks Pebble the data dir's size, unless the DB is closed
// (for a reopen, or at Close).
func (p *persister) refreshDiskBytes() {
	p.diskMu.Lock()
	defer p.diskMu.Unlock()
	p.refreshDiskLocked()
}

func (p *persister) refreshDiskLocked() {
	if !p.diskLive {
		return
	}
	defer func() { _ = recover() }()
	p.diskCache.Store(p.db().Metrics().DiskSpaceUsage())
}

// setDiskLive says whether db() may be asked for metrics; false waits for
// a refresh in progress.
func (p *persister) setDiskLive(live bool) {
	p.diskMu.Lock()
	defer p.diskMu.Unlock()
	p.diskLive = live
	p.refreshDiskLocked()
}

// guard runs f, turning a panic into an errPebbleFatal: Pebble's Fatalf
// (see pebbleEvents), and any other panic of a Pebble call too (a closed
// DB, a batch of another DB), which the committer then treats the same way:
// it closes the DB, reopens it and has every shard rewrite its keys, rather
// than take the server down.
func guard(f func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			if fe, ok := r.(errPebbleFatal); ok {
				err = fe
				return
			}
			err = errPebbleFatal{msg: oneLine(fmt.Sprintf("pebble panicked: %v", r)), stack: string(debug.Stack())}
		}
	}()
	return f()
}

// guardAll runs f, turning any panic into an error: for Pebble calls whose
// DB is dropped on failure (opening, loading), where a panic on damaged data
// must be a refusal, not a crash.
func guardAll(f func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			if e, ok := r.(error); ok {
				err = fmt.Errorf("pebble panicked: %w", e)
				return
			}
			err = fmt.Errorf("pebble panicked: %v", r)
		}
	}()
	return f()
}

// loop commits what shards send, merging whatever is queued into one write.
// Commits are synced except under FsyncNo; under FsyncAlways waiters are
// released after the sync. (Under everysec the shards send their changes
// once per PersistInterval, so this is about one sync a second.)
//
// When writes fail the server keeps answering from memory, and the changes
// wait, in order, for the next attempt: in a second if the disk lacked
// space (diskSpace says so before Pebble is asked), else after a back-off
// of 1 s doubling to 30 s; new changes queue behind them meanwhile. A fatal
// error (Pebble's commit pipeline is then unusable) closes the DB, reopens
// it on the next attempt and has every shard rewrite its state, dropping
// the changes in between, which that rewrite covers; so does a backlog
// larger than maxFailedBytes. Idle, the loop wakes only for the next
// attempt, if any is due.
func (p *persister) loop() {
	defer close(p.done)
	p.setDiskLive(true)
	p.retry = time.NewTimer(time.Hour)
	p.retry.Stop()
	reqs := make([]commitReq, 0, 256)
	for {
		reqs = reqs[:0]
		var retried, quitting bool
		select {
		case r := <-p.in:
			reqs = append(reqs, r)
		drain:
			for len(reqs) < cap(reqs) {
				select {
				case r := <-p.in:
					reqs = append(reqs, r)
				default:
					break drain
				}
			}
		case <-p.retry.C:
			p.armed, retried = false, true
		case reply := <-p.closeAsk:
			reply <- p.prepareClose()
			continue
		case <-p.withholdAsk:
			p.withheld = true
			if n := len(p.parked); n > 0 && !p.durable() {
				p.log.Error("persistence: closing while writes fail: replies withheld, their changes are not on disk", "waiters", n)
			}
			p.releaseWaiters(nil, p.durable())
			continue
		case <-p.quit:
			quitting = true
			for {
				select {
				case r := <-p.in:
					reqs = append(reqs, r)
					continue
				default:
				}
				break
			}
		}
		if retried && p.broken {
			p.tryReopen(true)
			p.rearm()
			continue
		}
		todo := p.accept(reqs)
		committed := false
		switch {
		case p.broken:
			p.drop(todo)
		case p.holding && !retried && !quitting:
			p.hold(todo) // the next attempt is due when the timer says
		default:
			if len(todo) == 0 && retried && p.holding {
				todo = append(todo, p.probe())
			}
			committed = p.commit(todo)
		}
		p.capFailed()
		p.roundStep(committed, quitting)
		synced := true
		if committed && !p.broken && (p.policy != FsyncNo || quitting) {
			synced = p.sync()
		}
		if committed && synced && len(p.failed) == 0 && !p.broken {
			p.ok()
		}
		if !p.broken && !p.failing && !p.closing && len(p.needSnap) > 0 && !p.resyncAsked {
			p.resyncAsked = true
			go p.resync()
		}
		p.held.Store(p.failedCount) // after sync, which may drop them (breakDB)
		p.releaseWaiters(reqs, p.durable())
		clear(reqs)
		if quitting {
			p.giveUp()
			p.held.Store(0)
			return
		}
		p.rearm()
	}
}

// accept returns the failed batches, then the new ones, dropping those of
// shards a resync will rewrite; it notes the snapshot reports.
//
// A batch is made by one DB and can be applied to it alone (Pebble panics
// otherwise), so a batch of a DB since closed (one a shard built before a
// reopen, or while the DB was broken) is dropped, and its shard waits for a
// rewrite made on the current DB; such a rewrite alone lets its changes
// through again.
func (p *persister) accept(reqs []commitReq) []logBatch {
	cur := p.db()
	var todo []logBatch
	for _, lb := range p.failed {
		if lb.db != nil && lb.db != cur {
			p.stale(lb.b, lb.sh) // breakDB drops them: this is only a safeguard
			continue
		}
		todo = append(todo, lb)
	}
	p.clearFailed()
	for _, r := range reqs {
		if len(r.group) > 0 {
			todo = p.acceptGroup(todo, r.group, cur)
			continue
		}
		todo = p.acceptOne(todo, r, cur)
	}
	if len(p.needSnap) == 0 {
		p.resyncAsked = false
	}
	return todo
}

// acceptGroup accepts the parts of a grouped request as acceptOne does,
// then merges those left into one batch, so that they reach the log
// together or not at all.
func (p *persister) acceptGroup(todo []logBatch, parts []commitReq, cur *pebble.DB) []logBatch {
	from := len(todo)
	for _, r := range parts {
		todo = p.acceptOne(todo, r, cur)
	}
	if len(todo)-from < 2 {
		return todo
	}
	m := cur.NewBatch()
	var count, recs int64
	for _, lb := range todo[from:] {
		if err := m.Apply(lb.b, nil); err != nil {
			_ = m.Close()
			return todo // committed one by one: still every change, in order
		}
		count += lb.count
		recs += lb.recs
	}
	for _, lb := range todo[from:] {
		lb.sh.recycle(lb.b, lb.db)
	}
	return append(todo[:from], logBatch{b: m, db: cur, count: count, recs: recs})
}

// acceptOne accepts one request's batch into todo (see accept).
func (p *persister) acceptOne(todo []logBatch, r commitReq, cur *pebble.DB) []logBatch {
	if r.round != 0 && r.round == p.round {
		p.starts[r.sh.id] = r.start
		p.reported++
	}
	if r.b == nil {
		return todo
	}
	p.pending.Add(-r.count)
	if p.broken {
		_ = r.b.Close() // memory is the truth; the resync rewrites it
		return todo
	}
	if r.db != nil && r.db != cur {
		p.stale(r.b, r.sh)
		return todo
	}
	if r.snap {
		p.rewritten(r.sh)
		p.perKey = max(uint64(r.b.Len())/uint64(max(r.count, 1)), 1)
	}
	if p.needSnap[r.sh] {
		_ = r.b.Close() // memory is the truth; the resync rewrites it
		return todo
	}
	return append(todo, logBatch{b: r.b, db: r.db, count: r.count, recs: r.recs, sh: r.sh})
}

// stale drops a batch of a DB since closed: its shard's changes wait for a
// rewrite (a resync is asked if none is pending for it).
func (p *persister) stale(b *pebble.Batch, sh *shard) {
	_ = b.Close()
	if sh != nil && !p.needSnap[sh] {
		p.needRewrite(sh)
		p.resyncAsked = false
	}
}

// commit applies each batch as it came (failed ones first, in order), each
// recording the count of records committed with it; it does not sync. It
// reports whether any was applied.
func (p *persister) commit(todo []logBatch) bool {
	if len(todo) == 0 {
		return false
	}
	budget := uint64(math.MaxUint64)
	if p.dd != nil {
		var err error
		var all uint64
		for _, lb := range todo {
			all += lb.size()
		}
		if budget, err = p.dd.space.budget(todo[0].size(), all); err != nil {
			p.fail(err)
			p.hold(todo)
			return false
		}
	}
	committed := false
	var key [logKeyLen]byte
	var cnt [9]byte
	for i, lb := range todo {
		n := uint64(lb.b.Len())
		if n > budget {
			// The batches before it left the reserve whole: the ballast
			// stays (deleting it here undid the write that had just put
			// it back), and the rest waits for the next attempt.
			p.fail(p.dd.space.full(n))
			p.hold(todo[i:])
			return committed
		}
		budget -= n
		db := p.db()
		seq := p.seq.Add(1)
		err := guard(func() error {
			if err := lb.b.Set(logKey(&key, seq), appendCount(cnt[:0], p.recs+uint64(lb.recs)), nil); err != nil {
				return err
			}
			return db.Apply(lb.b, pebble.NoSync)
		})
		var fatal errPebbleFatal
		switch {
		case errors.As(err, &fatal):
			p.fail(err)
			p.drop(todo[i:])
			p.breakDB(db, fatal)
			return committed
		case err != nil:
			p.fail(err)
			p.hold(todo[i:]) // retried in order
			return committed
		}
		committed = true
		p.recs += uint64(lb.recs)
		p.lastCount = seq
		p.commits.Add(1)
		p.changes.Add(lb.count)
		p.logged += int64(n) // not lb.b.Len(): Pebble empties a large batch it applied
		if lb.sh != nil {
			lb.sh.recycle(lb.b, db)
		} else {
			_ = lb.b.Close()
		}
	}
	return committed
}

// probe is a batch that records the commit count alone: a retry with
// nothing queued writes it to learn whether writes work again.
//
// While shards wait for a rewrite (their changes were dropped), it stands
// for the rewrite that its success lets through, which is every shard's
// keys (see Store.resync): the space check asks for room for that. With
// room for the probe alone, the spell ended, the rewrite did not fit, was
// dropped again, and the next retry began over, every second or two: the
// whole keyspace rebuilt in memory and the ballast written and deleted
// each time (seen on a full ext4 disk holding 3M keys).
func (p *persister) probe() logBatch {
	db := p.db()
	lb := logBatch{b: db.NewBatch(), db: db, probe: true}
	if len(p.needSnap) > 0 {
		for _, sh := range p.shards {
			lb.room += uint64(sh.nkeys.Load())*p.perKey + 2*logKeyLen
		}
	}
	return lb
}

// clearFailed empties failed (its batches were taken, dropped or closed).
func (p *persister) clearFailed() {
	p.failed, p.failedBytes, p.failedCount = nil, 0, 0
}

// hold queues batches for the next attempt.
func (p *persister) hold(lbs []logBatch) {
	for _, lb := range lbs {
		if lb.probe {
			_ = lb.b.Close() // the next retry makes another
			continue
		}
		p.failedBytes += int64(lb.b.Len())
		p.failedCount += lb.count
		p.failed = append(p.failed, lb)
	}
}

// drop closes batches a resync will cover.
func (p *persister) drop(lbs []logBatch) {
	for _, lb := range lbs {
		_ = lb.b.Close()
	}
}

// capFailed drops the held changes once they pass maxFailedBytes: every
// shard then rewrites its keys from memory when writes work again.
func (p *persister) capFailed() {
	if p.failedBytes <= maxFailedBytes || p.closing {
		return
	}
	p.log.Warn("persistence: too many changes wait for the disk; dropped them, every key will be rewritten from memory once writes succeed",
		"bytes", p.failedBytes, "batches", len(p.failed))
	p.drop(p.failed)
	p.clearFailed()
	p.needAll()
}

// needAll has every shard's changes wait for a resync.
func (p *persister) needAll() {
	for _, sh := range p.shards {
		p.needRewrite(sh)
	}
	p.resyncAsked = false
}

// needRewrite notes that sh's changes wait for a resync (its keys are then
// counted as pending in INFO, as they are what a crash now would lose).
func (p *persister) needRewrite(sh *shard) {
	p.needSnap[sh] = true
	sh.unwritten.Store(true)
}

// rewritten notes that sh's resync batch has reached the committer.
func (p *persister) rewritten(sh *shard) {
	delete(p.needSnap, sh)
	sh.unwritten.Store(false)
}

// breakDB gives up on a DB whose commit pipeline failed: closing it
// releases it so that the dir can be reopened. The changes held for a retry
// are dropped with it (they were made by this DB, and the resync after the
// reopen rewrites them).
func (p *persister) breakDB(db *pebble.DB, cause errPebbleFatal) {
	if cause.stack != "" {
		p.log.Error("persistence: a Pebble call panicked; closing the data dir to reopen it", "err", cause.msg, "stack", cause.stack)
	}
	p.broken = true
	p.drop(p.failed)
	p.clearFailed()
	p.setDiskLive(false)
	_ = guardAll(db.Close)
	p.needAll()
}

// tryReopen reopens the dir after a fatal error and, with resync, has every
// shard rewrite its keys (at Close, the caller has them do it).
func (p *persister) tryReopen(resync bool) {
	db, err := p.reopen()
	if err != nil {
		p.fail(err)
		return
	}
	p.log.Warn("persistence: data dir reopened; rewriting every key from memory")
	// A commit applied before the fatal error may not have reached the
	// WAL: the count goes on from the last one the log holds, or a later
	// check (countGaps) would see its records as missing.
	if n, ok, err := lastCount(db); err == nil && ok && n < p.recs {
		p.log.Warn("persistence: the reopened log lacks the last commits; counting on from its last", "count", n, "counted", p.recs)
		p.recs = n
	}
	p.dbp.Store(db)
	p.setDiskLive(true)
	p.broken, p.holding = false, false
	if resync {
		p.resyncAsked = true
		go p.resync()
	}
}

// prepareClose is the committer's part of Close before the shards stop:
// from now on it drops nothing for a resync and starts none. A broken DB is
// reopened (one attempt), and it returns the shards whose changes wait for
// a rewrite, which Close has them make now, synchronously, so that their
// keys go with the final commit (no resync would run after).
func (p *persister) prepareClose() []int {
	p.closing = true
	if p.broken {
		p.tryReopen(false)
	}
	if p.broken {
		return nil // nothing can be written: giveUp says what is lost
	}
	var ids []int
	for _, sh := range p.shards {
		if p.needSnap[sh] {
			ids = append(ids, sh.id)
		}
	}
	return ids
}

// shardsToRewrite asks the committer which shards must rewrite their keys
// before Close stops them (see prepareClose).
func (p *persister) shardsToRewrite() []int {
	reply := make(chan []int, 1)
	select {
	case p.closeAsk <- reply:
		return <-reply
	case <-p.done:
		return nil
	}
}

// rewriteBeforeClose has every shard whose changes wait for a resync (after
// a fatal error, or a backlog dropped) rewrite its keys now, before Close
// stops the shards: else the changes since the failure would be lost
// without a word. Close has stopped new sessions, so nothing else runs on
// the shards meanwhile.
func (s *Store) rewriteBeforeClose() {
	if s.p == nil {
		return
	}
	ids := s.p.shardsToRewrite()
	if len(ids) == 0 {
		return
	}
	s.cfg.Logger.Warn("persistence: rewriting keys from memory before shutdown (their changes since writes failed were not written)", "shards", len(ids))
	var wg sync.WaitGroup
	wg.Add(len(ids))
	for _, i := range ids {
		sh := s.shards[i]
		sh.o.post(&batch{ops: []*envelope{newShardFunc(func(sh *shard, _ int64) { sh.snapshot() })}, sh: sh, wg: &wg}, nil)
	}
	wg.Wait()
}

// roundStep starts, finishes or abandons a snapshot round. A round counts
// only if every chunk reached the disk: a failed write, or chunks dropped
// while waiting for a resync, abandon it.
func (p *persister) roundStep(committed, quitting bool) {
	healthy := !p.broken && len(p.failed) == 0 && len(p.needSnap) == 0
	switch {
	case p.round != 0 && !healthy:
		p.round = 0 // a later round starts over
	case p.round != 0 && p.reported == len(p.shards):
		p.dropOldRecords()
		p.round = 0
	case p.round == 0 && healthy && committed && !quitting && p.logged >= p.snapThreshold():
		p.rounds++
		p.round, p.reported, p.logged = p.rounds, 0, 0
		p.starts = make([]uint64, len(p.shards))
		go p.startRound(p.round)
	}
}

// sync syncs what was committed and lets the mark writer know; it reports
// whether the sync succeeded.
func (p *persister) sync() bool {
	db := p.db()
	if err := guard(func() error { return db.LogData(nil, pebble.Sync) }); err != nil {
		p.fail(err) // holding until a commit and sync succeed (see durable)
		var fatal errPebbleFatal
		if errors.As(err, &fatal) {
			p.breakDB(db, fatal)
		}
		return false
	}
	p.lastFsync.Store(time.Now().UnixNano())
	p.synced.Store(p.recs)
	p.setMark(p.recs)
	select {
	case p.markPoke <- struct{}{}:
	default:
	}
	return true
}

// releaseWaiters frees the requests' room in the queue (a shard paces its
// background chunks on it, so a rewrite after a failure can always finish)
// and, if durable, releases their waiters (FsyncAlways), after those
// parked before. Otherwise their waiters are parked: a reply under
// FsyncAlways says its changes are on disk, and after a failed write or
// sync they are not, so it waits until they are. The server goes on
// deciding from memory meanwhile (with --stop-writes-on-persist-error,
// later writes are refused at once with MISCONF instead).
func (p *persister) releaseWaiters(reqs []commitReq, durable bool) {
	if (durable || p.withheld) && len(p.parked) > 0 {
		for _, wg := range p.parked {
			if !durable {
				failed(wg)
			}
			wg.Done()
		}
		clear(p.parked)
		p.parked = p.parked[:0]
	}
	for _, r := range reqs {
		if len(r.group) > 0 {
			p.releaseWaiters(r.group, durable)
		}
		if r.sh != nil {
			r.sh.synced.Store(r.n)
			r.sh.o.roomFreed()
		}
		switch {
		case r.wg == nil:
		case durable || r.noPark || p.policy != FsyncAlways:
			r.wg.Done()
		case p.withheld:
			failed(r.wg)
			r.wg.Done()
		default:
			p.parked = append(p.parked, r.wg)
		}
	}
}

// failed tells a waiter, if it can be told, that its changes are not on
// disk (see failer).
func failed(wg doner) {
	if f, ok := wg.(failer); ok {
		f.fail()
	}
}

// withhold is Close's first step: sessions whose replies wait for a disk
// that fails give up, their requests failed (ErrClosed) rather than
// acknowledged, so that Close does not wait for the disk forever.
func (p *persister) withhold() {
	select {
	case p.withholdAsk <- struct{}{}:
	case <-p.done:
	}
}

// durable reports whether every change committed so far is synced, with
// none waiting for a retry or a rewrite. A failed write or sync sets
// holding, which only a later commit and sync clear (ok), or a reopen,
// which has every shard rewrite its keys (needSnap).
func (p *persister) durable() bool {
	return !p.broken && !p.holding && len(p.failed) == 0 && len(p.needSnap) == 0
}

// rearm schedules the next attempt while writes fail.
func (p *persister) rearm() {
	if p.armed || !(p.broken || p.holding || len(p.failed) > 0) {
		return
	}
	p.retry.Reset(p.nextRetry)
	p.armed = true
}

// giveUp reports the changes that never reached the disk, at shutdown:
// those held for a retry, and the keys of shards whose rewrite did not
// happen or was not written (the disk lacks their changes since writes
// failed).
func (p *persister) giveUp() {
	if len(p.failed) > 0 {
		var n, recs int64
		for _, lb := range p.failed {
			n += lb.count
			recs += lb.recs
		}
		p.log.Error("persistence: changes could not be written before shutdown", "changes", n, "records", recs, "err", p.errText())
		p.drop(p.failed)
		p.clearFailed()
	}
	if len(p.needSnap) > 0 {
		var keys int64
		for sh := range p.needSnap {
			keys += sh.nkeys.Load()
		}
		p.log.Error("persistence: keys could not be rewritten before shutdown; the data dir lacks their changes since writes failed",
			"shards", len(p.needSnap), "keys", keys, "err", p.errText())
	}
}

// unwrittenKeys counts the keys of the shards whose changes were dropped
// and wait for a resync: until it is written, all of them are out of date
// on disk.
func (p *persister) unwrittenKeys() int64 {
	var n int64
	for _, sh := range p.shards {
		if sh.unwritten.Load() {
			n += sh.nkeys.Load()
		}
	}
	return n
}

// errText is the last write error, or "".
func (p *persister) errText() string {
	if e := p.lastErr.Load(); e != nil {
		return *e
	}
	if p.dd != nil {
		return p.dd.events.bgErr()
	}
	return ""
}

// fail records a failed attempt: logged when a run of failures begins,
// counted after. A lack of space is retried in a second, other errors after
// the back-off.
func (p *persister) fail(err error) {
	p.writeErrors.Add(1)
	msg := err.Error()
	p.lastErr.Store(&msg)
	p.holding = true
	if !p.failing {
		p.failing, p.failStart, p.failCount = true, time.Now(), 0
		p.log.Error("persistence: write failed; serving from memory and retrying (logged again when writes succeed)", "err", oneLine(err.Error()))
	}
	p.failCount++
	if isNoSpace(err) {
		p.nextRetry = time.Second
		return
	}
	p.nextRetry = p.backoff
	p.backoff = min(2*p.backoff, maxBackoff)
}

// ok ends a run of failures.
func (p *persister) ok() {
	p.backoff, p.holding = time.Second, false
	if !p.failing {
		return
	}
	p.failing = false
	p.lastErr.Store(nil)
	p.log.Info("persistence: writes succeed again", "failed_attempts", p.failCount, "after", time.Since(p.failStart).Round(time.Millisecond).String())
}

// markEvery is how often at most the mark is synced (tests lower it).
var markEvery = time.Second

// markLoop syncs the mark after the committer wrote it, at most once per
// markEvery, until close.
func (p *persister) markLoop() {
	defer close(p.markDone)
	for {
		select {
		case <-p.markPoke:
		case <-p.markQuit:
			return
		}
		p.syncMark()
		select {
		case <-time.After(markEvery):
		case <-p.markQuit:
			return
		}
	}
}

// startMarks writes the mark anew, saying n (every record the log replayed
// is durable once the dir is open for writing), and starts the mark loop.
func (p *persister) startMarks(n uint64) {
	p.markPoke = make(chan struct{}, 1)
	p.markQuit = make(chan struct{})
	p.markDone = make(chan struct{})
	p.setMark(n)
	go p.markLoop()
}

// setMark writes the synced count n to the mark, in place and not synced,
// so that a restart after a process crash checks the log against exactly
// what was synced (see open.go). It runs on the committer after a sync and
// before the replies that waited for it are released. A failure is logged
// once per run of failures: the mark only lags, and a restart checks less.
func (p *persister) setMark(n uint64) {
	if p.dd == nil {
		return
	}
	m := p.mark.Load()
	var err error
	switch {
	case m != nil:
		err = m.set(n)
	case time.Since(p.markTried) < markEvery:
		return
	default:
		p.markTried = time.Now()
		if m, err = createMark(p.dd.fs, p.dd.dir, n); err == nil {
			p.mark.Store(m)
		}
	}
	if err != nil {
		if !p.markFailed {
			p.log.Error("persistence: cannot write "+markFile+"; a restart will check the log against an older count", "err", oneLine(err.Error()))
		}
		p.markFailed = true
		return
	}
	if p.markFailed {
		p.log.Info("persistence: " + markFile + " written again")
	}
	p.markFailed = false
}

// syncMark syncs what setMark wrote, so that it also survives a power loss;
// a failure is logged once per run of failures.
func (p *persister) syncMark() {
	m := p.mark.Load()
	if m == nil {
		return
	}
	if err := m.sync(); err != nil {
		if !p.syncFailed {
			p.log.Error("persistence: cannot sync "+markFile+"; after a power loss a restart will check the log against an older count", "err", oneLine(err.Error()))
		}
		p.syncFailed = true
		return
	}
	p.syncFailed = false
}

// close commits and syncs everything still queued, writes the mark (now
// exact) and closes Pebble and the dir.
func (p *persister) close() error {
	close(p.quit)
	<-p.done
	if p.markQuit != nil {
		close(p.markQuit)
		<-p.markDone
	}
	var err error
	p.setDiskLive(false)
	if !p.broken {
		db := p.db()
		if p.synced.Load() < p.recs {
			if guardAll(func() error { return db.LogData(nil, pebble.Sync) }) == nil {
				p.synced.Store(p.recs)
			}
		}
		p.setMark(p.synced.Load())
		p.syncMark()
		err = guardAll(db.Close)
	}
	if m := p.mark.Load(); m != nil {
		_ = m.close()
	}
	if p.dd != nil {
		p.dd.close()
	}
	return err
}
