// Package store is cellserver's keyspace: limiter keys split into shards, each
// owned by one goroutine that alone reads and writes its keys, so every
// decision is atomic without a mutex on the key map.
//
// Quick start:
//
//	st, _ := store.New(store.Config{Shards: 4})
//	defer st.Close()
//	sess := st.NewSession()
//	r := &store.ThrottleReq{Key: []byte("user1"),
//		Params: gcra.Params{MaxBurst: 15, Count: 30, Period: 60, Quantity: 1}}
//	sess.Add(r)
//	sess.Run() // r.Status() is nil; r.Result and r.Err hold the decision
//
// Every kind of work is a typed request with its own inputs and outputs: on
// one key (ThrottleReq, GetReq, DelReq, ExistsReq, PTTLReq, TypeReq,
// PeekReq, InspectReq: Session.Add), on a shard (DBSizeReq, FlushReq,
// ScanReq, KeysReq and the cluster's slot requests: Session.AddTo), or on
// several keys of one shard (LimitReq: AddTo, or Session.AddHeld across
// shards). Session.Hold parks several shards for a transaction (MULTI/EXEC):
// what is added until Release runs at once, isolated from every other
// session. Key listeners (KeyListener, InterestReq) learn that a key
// changed (WATCH, CLIENT TRACKING).
//
// Keys map to shards by their Redis Cluster hash slot, so keys that share a
// {hash tag} share an owner.
package store

import (
	"errors"
	"fmt"
	"hash/maphash"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/cellserver/cellserver/cluster"
)

// Config configures a Store. The zero value is usable: EnsureDefaults fills it.
type Config struct {
	// Shards is the number of shards. Default 16 (the binary passes the
	// number of CPUs). Must be 1..16384.
	Shards int
	// Owners, if set, is the number of hosted owners the shards are spread
	// over (shard i to owner i mod Owners), each run by the goroutine of
	// the Host it is given (Owner.Adopt): the wire layer's event loops.
	// 0 gives every shard an owner running a goroutine of its own. Must be
	// 0..Shards.
	Owners int
	// Clock is the server clock; nil means a new wall clock.
	Clock *Clock
	// SweepInterval is how often each shard runs one step of its incremental
	// expiry sweep. Default 100ms; negative turns the sweep off (tests).
	SweepInterval time.Duration
	// SweepFraction: each step examines 1/SweepFraction of the shard's
	// entries (at least 256), so a full pass takes SweepFraction steps.
	// Default 50 (a full pass every 5 s at the default interval).
	SweepFraction int

	// DataDir is the Pebble directory limiter state persists to; empty keeps
	// everything in memory only.
	DataDir string
	// Fsync is the durability policy when DataDir is set.
	Fsync Fsync
	// PersistInterval is how often shards write their changed keys out
	// under FsyncEverySec and FsyncNo (FsyncAlways writes every batch).
	// Default 1s: with everysec, kill -9 loses at most about this much.
	PersistInterval time.Duration
	// FS is the file system Pebble uses; nil is the OS's. Tests inject
	// faults through it (pebble's vfs/errorfs).
	FS vfs.FS
	// MemTableSize is Pebble's memtable size in bytes: how much is
	// buffered (and how large the log grows) before a flush. Default 16 MiB,
	// or a 32nd of the data dir's file system if that is less (at least
	// 256 KiB): the space kept free below scales with it, so that a small
	// disk is not all reserve.
	MemTableSize uint64
	// DiskReserve is the free space in bytes below which nothing more is
	// written to Pebble (changes wait in memory and are written once space
	// comes back): room for what Pebble may still write on its own, a new
	// WAL's preallocation (1.1 memtables), a flush (one) and some
	// compaction output; and what a restart needs to flush the WAL beyond
	// it (openSlack), so that a dir that filled its disk can still be
	// opened. Default 4 * MemTableSize + 1 MiB.
	DiskReserve uint64
	// BallastSize is the size in bytes of the file of zeros kept in the data
	// dir and deleted when space runs short, so that Pebble's work in flight
	// and a restart's flush of its WAL (up to two memtables) have room.
	// Default 2 * MemTableSize; negative: no ballast.
	BallastSize int64
	// RecoverCorrupt starts from a damaged data dir anyway, with what is
	// readable: a WAL that lost synced records, or one Pebble finds corrupt
	// (kept as NAME.corrupt and cut where its readable records end). The
	// loss is logged and reported by PersistStats. Without it such a dir is
	// refused and left as it is. A damaged table is refused either way.
	RecoverCorrupt bool
	// Logger; default slog.Default().
	Logger *slog.Logger
}

// EnsureDefaults fills zero fields with defaults.
func (c *Config) EnsureDefaults() {
	if c.Shards == 0 {
		c.Shards = 16
	}
	if c.Clock == nil {
		c.Clock = &Clock{}
	}
	if c.SweepInterval == 0 {
		c.SweepInterval = 100 * time.Millisecond
	}
	if c.SweepFraction == 0 {
		c.SweepFraction = 50
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.PersistInterval == 0 {
		c.PersistInterval = time.Second
	}
}

// ensureDiskDefaults fills the fields whose defaults depend on the size in
// bytes of the data dir's file system (0: unknown).
func (c *Config) ensureDiskDefaults(total uint64) {
	if c.MemTableSize == 0 {
		c.MemTableSize = 16 << 20
		if total > 0 {
			c.MemTableSize = min(max(total/32, 256<<10), 16<<20)
		}
	}
	if c.DiskReserve == 0 {
		c.DiskReserve = 4*c.MemTableSize + openSlack
	}
	if c.BallastSize == 0 {
		c.BallastSize = int64(2 * c.MemTableSize)
	}
}

// Validate reports a configuration error.
func (c *Config) Validate() error {
	if c.Shards < 1 || c.Shards > cluster.SlotCount {
		return fmt.Errorf("store: shards must be between 1 and %d, got %d", cluster.SlotCount, c.Shards)
	}
	if c.Owners < 0 || c.Owners > c.Shards {
		return fmt.Errorf("store: owners must be between 0 and the number of shards (%d), got %d", c.Shards, c.Owners)
	}
	if c.SweepFraction < 1 {
		return fmt.Errorf("store: invalid sweep settings")
	}
	return nil
}

// Store is the sharded keyspace. Its methods are safe for concurrent use.
type Store struct {
	cfg    Config
	shards []*shard
	owners []*Owner
	// Sessions count themselves in active while they run batches; Close
	// sets closed, then waits for active to fall to 0. (Not an RWMutex: a
	// waiting Close would block a new session's read lock on an event
	// loop that another loop's session waits for, a deadlock.)
	active    atomic.Int64
	closed    atomic.Bool
	closeOnce sync.Once
	closeErr  error
	tickStop  chan struct{}
	wg        sync.WaitGroup
	p         *persister                // nil: in memory only
	bcast     atomic.Pointer[broadcast] // SetBroadcast's, shared by the shards
}

// New starts a store and its shard goroutines.
func New(cfg Config) (*Store, error) {
	cfg.EnsureDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Store{cfg: cfg, tickStop: make(chan struct{})}
	var dd *dataDir
	if cfg.DataDir != "" {
		var db *pebble.DB
		var err error
		if dd, db, err = openDataDir(&s.cfg); err != nil {
			return nil, err
		}
		cfg = s.cfg // with the disk's defaults
		s.p = newPersister(db, cfg.Fsync, cfg.Logger)
		s.p.dd = dd
		s.p.reopen = dd.reopen
		s.p.resync = s.resync
		s.p.startRound = s.snapshotRound
		if t := int64(dd.space.total); t > 0 {
			s.p.snapMin = min(s.p.snapMin, t/8) // a small disk must not fill with old records first
		}
	}
	seed := maphash.MakeSeed()
	for i := 0; i < cfg.Shards; i++ {
		sh := newShard(i, seed, cfg, s.p)
		sh.bcast = &s.bcast
		s.shards = append(s.shards, sh)
	}
	n, hosted := cfg.Owners, cfg.Owners > 0
	if !hosted {
		n = cfg.Shards
	}
	for i := range n {
		s.owners = append(s.owners, newOwner(s, i, hosted))
	}
	for i, sh := range s.shards {
		o := s.owners[i%n]
		sh.o = o
		o.shards = append(o.shards, sh)
	}
	if s.p != nil {
		s.p.shards = s.shards
		if err := s.load(); err != nil {
			_ = guardAll(s.p.db().Close)
			dd.close()
			return nil, err
		}
		go s.p.loop()
		for _, sh := range s.shards {
			sh.writeDirty() // deletions of entries found expired
			sh.sendChanges(nil)
		}
	}
	for _, o := range s.owners {
		s.wg.Add(1)
		go o.ticks(s.tickStop)
		if !hosted {
			o.start()
		}
	}
	return s, nil
}

// Owners returns the store's owners: with Config.Owners, the hosted ones
// to Adopt.
func (s *Store) Owners() []*Owner { return s.owners }

// Hosted reports whether the owners are hosted (Config.Owners).
func (s *Store) Hosted() bool { return s.cfg.Owners > 0 }

// enter counts a session in; false: the store is closed.
func (s *Store) enter() bool {
	s.active.Add(1)
	if s.closed.Load() {
		s.active.Add(-1)
		return false
	}
	return true
}

func (s *Store) leave() { s.active.Add(-1) }

// load replays the log into every shard before any is served, checks it
// lost nothing synced, and opens the dir for writing. Expiry is judged by
// the wall clock.
func (s *Store) load() error {
	start := time.Now()
	p, dd := s.p, s.p.dd
	err := p.load(s.shards, floorMs(time.Now().UnixNano()))
	switch {
	case err != nil && errors.Is(err, errCorruptLog):
		return fmt.Errorf("store: data dir %s is corrupt: %s; refusing to start (nothing was changed)", s.cfg.DataDir, strings.TrimPrefix(err.Error(), "store: "))
	case err != nil && (dd.events.corruptFile() != "" || pebble.IsCorruptionError(err)):
		return dd.refusal(err)
	case err != nil:
		return fmt.Errorf("store: loading %s: %w", s.cfg.DataDir, err)
	}
	committed := p.loadedCount
	if err := dd.checkLoaded(committed); err != nil {
		return err
	}
	db, err := dd.writable(p.db(), committed)
	if err != nil {
		return err
	}
	p.dbp.Store(db)
	p.recs = committed
	p.synced.Store(committed)
	p.corruptLost.Store(dd.lost)
	p.startMarks(committed)
	dd.events.serving.Store(true)
	for _, sh := range s.shards {
		sh.publish()
	}
	p.loadTime.Store(int64(time.Since(start)))
	s.cfg.Logger.Info("loaded limiter state", "dir", s.cfg.DataDir, "keys", s.p.keysLoaded.Load(),
		"expired_dropped", s.p.expiredLoad.Load(), "took", time.Since(start).Round(time.Millisecond).String())
	return nil
}

// resync has every shard rewrite its keys to disk, in order with its other
// changes.
func (s *Store) resync() { s.onEveryShard(func(sh *shard, _ int64) { sh.snapshot() }) }

// snapshotRound has every shard start its snapshot of a round (the
// committer calls it when the log has grown enough).
func (s *Store) snapshotRound(round uint64) {
	s.onEveryShard(func(sh *shard, _ int64) { sh.startSnapshot(round) })
}

// onEveryShard runs f on every shard's goroutine, in order with its
// requests, and waits for all of them, but not, under FsyncAlways, for
// the disk: f answers no client, and while writes fail (a full disk) that
// wait would last until space comes back, or forever for a resync the
// committer started.
func (s *Store) onEveryShard(f func(sh *shard, now int64)) {
	sess := s.NewSession()
	sess.DeferSync(true)
	for i := range s.shards {
		sess.AddTo(i, &shardFunc{f: f})
	}
	sess.Run()
}

// SyncsWrites reports whether a batch that changes state waits for fsync
// before it completes (FsyncAlways).
func (s *Store) SyncsWrites() bool { return s.p != nil && s.p.policy == FsyncAlways }

// PersistStats reports persistence state for INFO.
func (s *Store) PersistStats() PersistStats {
	p := s.p
	if p == nil {
		return PersistStats{}
	}
	st := PersistStats{
		Enabled:       true,
		Fsync:         p.policy.String(),
		KeysLoaded:    p.keysLoaded.Load(),
		ExpiredAtLoad: p.expiredLoad.Load(),
		LoadTime:      time.Duration(p.loadTime.Load()),
		LastWriteOK:   true,
		WriteErrors:   p.writeErrors.Load(),
		Commits:       p.commits.Load(),
		Changes:       p.changes.Load(),
		LastFsync:     time.Unix(0, p.lastFsync.Load()),
		DiskBytes:     p.diskBytes(),
		Pending:       p.pending.Load() + p.held.Load() + p.unwrittenKeys(),
		Snapshots:     p.snapshots.Load(),

		CorruptRecordsLost: p.corruptLost.Load(),
	}
	if e := p.errText(); e != "" {
		st.LastWriteOK = false
		st.LastWriteErr = e
	}
	return st
}

// PersistErr returns the last persistence write error while writes are
// failing, else nil.
func (s *Store) PersistErr() error {
	if s.p == nil {
		return nil
	}
	if e := s.p.errText(); e != "" {
		return errors.New(e)
	}
	return nil
}

// Clock returns the store's clock.
func (s *Store) Clock() *Clock { return s.cfg.Clock }

// NumShards returns the number of shards.
func (s *Store) NumShards() int { return len(s.shards) }

// ShardOf returns the shard that owns key: shards own contiguous ranges of
// hash slots.
func (s *Store) ShardOf(key []byte) int { return s.ShardOfSlot(cluster.KeySlot(key)) }

// ShardOfSlot returns the shard that owns a hash slot.
func (s *Store) ShardOfSlot(slot int) int { return slot * len(s.shards) / cluster.SlotCount }

// Close stops the shard goroutines after in-flight sessions finish. Later
// Runs fail their requests with ErrClosed (their Status). Close is idempotent.
func (s *Store) Close() error {
	s.closeOnce.Do(func() { s.closeErr = s.close() })
	return s.closeErr
}

func (s *Store) close() error {
	s.closed.Store(true)
	if s.p != nil {
		s.p.withhold() // sessions waiting for a failing disk give up
	}
	// Sessions in flight finish (their hosts keep serving meanwhile).
	for s.active.Load() > 0 {
		time.Sleep(50 * time.Microsecond)
	}
	for _, o := range s.owners {
		if o.hosted && o.host.Load() == nil && !o.running {
			o.start() // never adopted, or detached before it started
		}
	}
	s.rewriteBeforeClose()
	close(s.tickStop)
	for _, o := range s.owners {
		o.post(ctlQuit, nil)
	}
	for _, o := range s.owners {
		<-o.done
	}
	s.wg.Wait()
	if s.p != nil {
		return s.p.close()
	}
	return nil
}

// Stats are cheap, approximate counters for INFO.
type Stats struct {
	Keys        int64 // live and not yet swept keys
	Expires     int64 // keys with a TTL
	ExpiredKeys int64 // keys removed because they expired (lazily or by the sweep)
	TableBytes  int64 // bytes held by key tables (entries, index, arenas)
}

// Stats sums every shard's counters without stopping them.
func (s *Store) Stats() Stats {
	var st Stats
	for _, sh := range s.shards {
		st.Keys += sh.nkeys.Load()
		st.Expires += sh.nexpires.Load()
		st.ExpiredKeys += sh.expired.Load()
		st.TableBytes += sh.bytes.Load()
	}
	return st
}

// Session batches requests from one connection: Add and AddTo queue them
// per shard and Run sends each touched shard one batch and waits for all
// of them. A Session is used by one goroutine at a time and is reusable;
// it allocates nothing once warm.
type Session struct {
	// ID identifies the session to key listeners (KeyListener's by): its
	// owner sets it (commands: the client's ID). 0 is the store's own.
	ID      uint64
	st      *Store
	home    *Owner // the owner whose goroutine runs the session (SetHome)
	asking  bool   // SetAsking
	inTx    bool   // SetInTx
	pending [][]*envelope
	touched []int
	batches []batch
	sig     signal
	local   []*batch // runBatches' batches for home's shards
	// deferSync: Run does not wait for FsyncAlways's syncs; dur counts
	// the batches whose changes are not synced yet (DeferSync).
	deferSync bool
	dur       syncWait
	async     bool        // a RunAsync is not finished
	asyncCB   func()      // the signal's callback for RunAsync: leave, then asyncDone
	asyncDone func()      // RunAsync's done
	held      []*envelope // AddHeld's requests, not run yet
	hold      *hold       // reused by runHeld and Hold; nil until the first
	inline    *inline     // non-nil between Hold and Release
	// keptInline is the last Hold's state, for the next.
	keptInline *inline
}

type batch struct {
	ops []*envelope // the requests, in their envelopes
	sh  *shard      // the shard they run on (a request batch's)
	by  uint64      // the sending session's ID
	wg  doner
	// synced, if set, is told once the batch's changes are synced under
	// FsyncAlways; wg is then told as soon as the batch ran
	// (Session.DeferSync).
	synced doner
	ctl    uint8 // 0: a request batch; else a control batch (see shard.loop)
	hold   *hold // a ctlHold batch's
}

// NewSession returns a Session on s.
func (s *Store) NewSession() *Session {
	return &Session{
		st:      s,
		pending: make([][]*envelope, len(s.shards)),
		batches: make([]batch, len(s.shards)),
		sig:     signal{c: make(chan struct{}, 1)},
	}
}

// SetHome says that the session runs on o's goroutine (an event loop
// hosting o), until it is set again; nil: on any other goroutine. The
// session then runs requests for o's shards inline, and serves o's inbox
// while it waits for other owners. A session whose home is set must not be
// used on any other goroutine.
func (ss *Session) SetHome(o *Owner) { ss.home = o }

// Home is the session's home owner (SetHome).
func (ss *Session) Home() *Owner { return ss.home }

// DeferSync sets whether Run waits, under FsyncAlways, until the changes
// it made are synced (the default) or returns once its requests ran;
// AwaitSync then tells when they are synced. It is for an event loop,
// which serves its other connections while one connection's replies wait
// for the disk, and whose connections' waits are then grouped into one
// fsync. A held request's changes (and a Hold's) are counted the same way.
func (ss *Session) DeferSync(on bool) { ss.deferSync = on }

// AwaitSync returns false if every change the session's runs made is
// synced; otherwise it returns true and calls f, on another goroutine,
// once they are (a later AwaitSync before that replaces f). f must not
// block, nor run store sessions: it runs on the committer.
func (ss *Session) AwaitSync(f func()) bool {
	if !ss.st.SyncsWrites() {
		return false // nothing is ever counted: no lock per pipeline
	}
	return ss.dur.await(f)
}

// WaitSync returns once every change the session's runs made is synced.
func (ss *Session) WaitSync() {
	if !ss.st.SyncsWrites() || !ss.dur.pending() {
		return
	}
	ch := make(chan struct{})
	if ss.dur.await(func() { close(ch) }) {
		<-ch
	}
}

// syncWait counts a session's batches whose changes are not synced yet,
// and calls the function AwaitSync left once none is.
type syncWait struct {
	mu   sync.Mutex
	n    int
	f    func()
	lost bool // see failer
}

func (w *syncWait) fail() {
	w.mu.Lock()
	w.lost = true
	w.mu.Unlock()
}

// SyncLost reports, once, whether changes the session's replies waited for
// were given up at Close instead of synced (see failer): the caller must
// not send those replies.
func (ss *Session) SyncLost() bool {
	w := &ss.dur
	w.mu.Lock()
	defer w.mu.Unlock()
	lost := w.lost
	w.lost = false
	return lost
}

func (w *syncWait) add(n int) {
	w.mu.Lock()
	w.n += n
	w.mu.Unlock()
}

// Done counts one batch synced (the committer's).
func (w *syncWait) Done() {
	w.mu.Lock()
	w.n--
	var f func()
	if w.n == 0 {
		f, w.f = w.f, nil
	}
	w.mu.Unlock()
	if f != nil {
		f()
	}
}

func (w *syncWait) pending() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.n > 0
}

func (w *syncWait) await(f func()) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.n == 0 {
		return false
	}
	w.f = f
	return true
}

// SetAsking marks the requests added from now on as following an ASK
// redirect (the client sent ASKING): a shard serves them in a slot it
// imports. The caller sets it for one command's requests, then clears it.
func (ss *Session) SetAsking(on bool) { ss.asking = on }

// SetInTx marks the requests added from now on as an EXEC's whose keys
// were checked together under its hold (all of them here): in a slot
// migrating away they run whether or not each key is still here, as
// Redis redirects nothing inside EXEC (a key a transaction deletes and
// makes again cannot be on the target meanwhile: the hold stops moves).
func (ss *Session) SetInTx(on bool) { ss.inTx = on }

// Asking reports SetAsking's setting.
func (ss *Session) Asking() bool { return ss.asking }

// Add queues a request on its key's shard.
func (ss *Session) Add(r KeyedRequest) {
	op := r.route()
	op.asking, op.inTx = ss.asking, ss.inTx
	ss.queue(ss.st.ShardOf(op.key), op)
}

// AddTo queues r on the given shard: a shard-wide request, or one whose
// keys the caller knows all live there (a LimitReq, see LimitReq.Shards).
func (ss *Session) AddTo(shard int, r Request) {
	op := r.env()
	op.req, op.key, op.keyed = r, nil, false
	ss.queue(shard, op)
}

func (ss *Session) queue(shard int, op *envelope) {
	op.status = nil
	if ss.inline != nil {
		ss.runInline(shard, op)
		return
	}
	if len(ss.held) > 0 {
		ss.runHeld() // they were added first, so they run first
	}
	if len(ss.pending[shard]) == 0 {
		ss.touched = append(ss.touched, shard)
	}
	ss.pending[shard] = append(ss.pending[shard], op)
}

// Run executes every queued request, each shard's in the order they were
// added, and returns when all are done.
func (ss *Session) Run() {
	if len(ss.held) > 0 {
		ss.runHeld() // never both: AddHeld ran the ops added before
	}
	ss.runBatches()
}

// RunAsync is Run for a session on its home owner's goroutine that must
// not wait for other owners (an event loop serving other connections
// meanwhile): it runs the held requests and the home's shards' batches
// now and, if it sent batches to other owners, returns true at once; done
// is then called, on another owner's goroutine, once they ran, and the
// session's owner calls Finish before it uses the session again. It
// returns false when everything ran (Finish is then not needed). Without
// a home it is Run.
func (ss *Session) RunAsync(done func()) bool {
	if len(ss.held) > 0 {
		ss.runHeld()
	}
	home := ss.home
	remote := false
	for _, i := range ss.touched {
		remote = remote || ss.st.shards[i].o != home
	}
	if home == nil || !remote {
		ss.runBatches()
		return false
	}
	st := ss.st
	if !st.enter() {
		ss.failClosed()
		return false
	}
	// Whoever counts the last batch calls the callback, unless it is the
	// session itself (sendCounted), which then knows that everything ran.
	if ss.asyncCB == nil { // made once: a session allocates nothing once warm
		ss.asyncCB = func() {
			ss.st.leave()
			ss.asyncDone()
		}
	}
	ss.asyncDone = done
	ss.sig.cb = ss.asyncCB
	if ss.sendCounted() {
		ss.sig.cb = nil
		st.leave()
		ss.reset()
		return false
	}
	ss.async = true
	return true
}

// Finish ends a RunAsync that returned true, once its done was called.
func (ss *Session) Finish() {
	if ss.async {
		ss.async = false
		ss.reset()
	}
}

func (ss *Session) failClosed() {
	for _, i := range ss.touched {
		for _, op := range ss.pending[i] {
			op.status = ErrClosed
		}
	}
	ss.reset()
}

// sendCounted sends the batches (send) with one count more than them, the
// session's own, and counts that one after: true when it was the last,
// every batch having run here, so that nobody signalled and there is
// nothing to wait for.
func (ss *Session) sendCounted() bool {
	ss.sig.add(len(ss.touched) + 1)
	ss.send()
	return ss.sig.n.Add(-1) == 0
}

// send hands each touched shard its batch: the other owners' through
// their inboxes, then the home's run here, while the others run on their
// owners.
func (ss *Session) send() {
	st, home := ss.st, ss.home
	defer_ := ss.deferSync && st.SyncsWrites()
	if defer_ {
		ss.dur.add(len(ss.touched))
	}
	for _, i := range ss.touched {
		b := &ss.batches[i]
		b.ops = ss.pending[i]
		b.wg = &ss.sig
		b.by = ss.ID
		b.sh = st.shards[i]
		b.synced = nil
		if defer_ {
			b.synced = &ss.dur
		}
		if b.sh.o == home {
			ss.local = append(ss.local, b)
		} else {
			b.sh.o.post(b, home)
		}
	}
	for _, b := range ss.local {
		b.sh.runBatch(b)
	}
	clear(ss.local)
	ss.local = ss.local[:0]
}

// runBatches sends each touched shard its batch and waits for all.
func (ss *Session) runBatches() {
	if len(ss.touched) == 0 {
		return
	}
	st := ss.st
	if !st.enter() {
		ss.failClosed()
		return
	}
	if !ss.sendCounted() {
		ss.sig.wait(ss.home)
	}
	st.leave()
	if ss.sig.lost.Load() { // set only at a Close while writes fail
		ss.sig.lost.Store(false)
		ss.failClosed() // their changes are not on disk: no acknowledgement
		return
	}
	ss.reset()
}

// maxKeptPending is the most queued-request capacity a session keeps per
// shard between pipelines.
const maxKeptPending = 4096

func (ss *Session) reset() {
	for _, i := range ss.touched {
		p := ss.pending[i]
		clear(p)
		if cap(p) > maxKeptPending {
			p = nil // one huge command's; not kept for the connection's life
		}
		ss.pending[i] = p[:0]
		ss.batches[i].ops = nil
	}
	ss.touched = ss.touched[:0]
}
