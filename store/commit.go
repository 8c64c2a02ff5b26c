package store

import (
	"errors"
	"fmt"
	"log/slog"
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
	resync func()                     // has every shard rewrite its keys (after reopen)
	policy Fsync
	log    *slog.Logger
	in     chan commitReq
	quit   chan struct{}
	done   chan struct{}

	lastErr     atomic.Pointer[string]
	writeErrors atomic.Int64
	commits     atomic.Int64
	changes     atomic.Int64
	pending     atomic.Int64
	lastFsync   atomic.Int64 // Unix ns
	keysLoaded  atomic.Int64
	expiredLoad atomic.Int64
	loadTime    atomic.Int64
	snapshots   atomic.Int64
	corruptLost atomic.Int64 // records a damaged log lost, found at load (RecoverCorrupt)
	retryEvery  time.Duration
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
	markWritten uint64 // the mark's value on disk (mark writer only)
	markFailed  bool
	markPoke    chan struct{}
	markQuit    chan struct{}
	markDone    chan struct{}

	// Snapshot rounds, touched by the committer only.
	logged   int64    // log bytes written since the last round started
	round    uint64   // the round in progress, 0 if none
	rounds   uint64   // rounds started so far
	starts   []uint64 // per shard: where its snapshot of this round began
	reported int      // shards done with this round
}

type commitReq struct {
	b     *pebble.Batch // may be nil: only wait for earlier changes
	count int64         // changes (entries) in b
	recs  int64         // log records in b
	wg    *sync.WaitGroup
	sh    *shard
	n     uint64 // shard's send sequence number of this request
	snap  bool   // b holds the shard's whole state (a resync)
	// sh finished its snapshot of round, begun at log sequence number start.
	round, start uint64
}

// logBatch is a batch of records waiting to be committed.
type logBatch struct {
	b     *pebble.Batch
	count int64
	recs  int64
	sh    *shard
}

// errPebbleFatal marks an error Pebble reported through Logger.Fatalf: its
// commit pipeline cannot be used again, so the DB is reopened.
type errPebbleFatal struct{ msg string }

func (e errPebbleFatal) Error() string { return e.msg }

func newPersister(db *pebble.DB, policy Fsync, log *slog.Logger) *persister {
	p := &persister{
		policy:     policy,
		log:        log,
		in:         make(chan commitReq, 4096),
		quit:       make(chan struct{}),
		done:       make(chan struct{}),
		retryEvery: time.Second,
		snapMin:    snapMinBytes,
	}
	p.dbp.Store(db)
	p.lastFsync.Store(time.Now().UnixNano())
	return p
}

func (p *persister) db() *pebble.DB { return p.dbp.Load() }

// diskBytes is the data dir's size per Pebble; 0 while the DB is closed
// for a reopen (Pebble panics on a closed DB).
func (p *persister) diskBytes() (n uint64) {
	defer func() { _ = recover() }()
	return p.db().Metrics().DiskSpaceUsage()
}

// guard runs f, turning a Pebble fatal panic into an error.
func guard(f func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			if fe, ok := r.(errPebbleFatal); ok {
				err = fe
				return
			}
			panic(r)
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
// On a write error the server keeps answering from memory: a plain error
// keeps the changes and retries them every second; a fatal one (Pebble's
// commit pipeline is then unusable) reopens the database on the retry tick
// and has every shard rewrite its state, dropping the changes in between,
// which that rewrite covers.
func (p *persister) loop() {
	defer close(p.done)
	retry := time.NewTicker(p.retryEvery)
	defer retry.Stop()
	var failed []logBatch // changes whose commit failed, retried first
	broken := false       // Pebble hit a fatal error: reopen needed
	needSnap := map[*shard]bool{}
	reqs := make([]commitReq, 0, 256)
	for {
		var quitting bool
		select {
		case r := <-p.in:
			reqs = append(reqs[:0], r)
		drain:
			for len(reqs) < cap(reqs) {
				select {
				case r := <-p.in:
					reqs = append(reqs, r)
				default:
					break drain
				}
			}
		case <-retry.C:
			if broken {
				if db, err := p.reopen(); err != nil {
					p.fail(err)
				} else {
					p.log.Warn("persistence: data dir reopened; rewriting every key from memory")
					p.dbp.Store(db)
					broken = false
					go p.resync()
				}
				continue
			}
			if len(failed) == 0 {
				continue
			}
			reqs = reqs[:0]
		case <-p.quit:
			quitting = true
			reqs = reqs[:0]
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
		// Commit each batch as it came (failed ones first, in order), then
		// sync once: no copying of batches into a merged one.
		todo := failed
		failed = nil
		for _, r := range reqs {
			if r.round != 0 && r.round == p.round {
				p.starts[r.sh.id] = r.start
				p.reported++
			}
			if r.b == nil {
				continue
			}
			p.pending.Add(-r.count)
			if r.snap {
				delete(needSnap, r.sh)
			}
			if broken || needSnap[r.sh] {
				_ = r.b.Close() // memory is the truth; the resync rewrites it
				continue
			}
			todo = append(todo, logBatch{r.b, r.count, r.recs, r.sh})
		}
		committed := false
		var key [logKeyLen]byte
		var cnt [9]byte
		for i, lb := range todo {
			if broken {
				_ = lb.b.Close()
				continue
			}
			db := p.db()
			// The commit counts the records committed so far (see open.go).
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
				broken = true
				_ = lb.b.Close()
				_ = guardAll(db.Close) // releases the dir so that it can be reopened
				for _, sh := range p.shards {
					needSnap[sh] = true
				}
			case err != nil:
				p.fail(err)
				failed = append(failed, todo[i:]...) // retried in order
				todo = todo[:0]
			default:
				committed = true
				p.recs += uint64(lb.recs)
				p.lastCount = seq
				p.commits.Add(1)
				p.changes.Add(lb.count)
				p.logged += int64(lb.b.Len())
				lb.sh.recycle(lb.b, db)
			}
			if len(todo) == 0 {
				break
			}
		}
		// A round counts only if every chunk reached the disk: a failed
		// write, or chunks dropped while waiting for a resync, abandon it.
		healthy := !broken && len(failed) == 0 && len(needSnap) == 0
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
		if committed && !broken && (p.policy != FsyncNo || quitting) {
			db := p.db()
			if err := guard(func() error { return db.LogData(nil, pebble.Sync) }); err != nil {
				p.fail(err)
				var fatal errPebbleFatal
				if errors.As(err, &fatal) {
					broken = true
					_ = guardAll(db.Close)
					for _, sh := range p.shards {
						needSnap[sh] = true
					}
				}
			} else {
				p.lastFsync.Store(time.Now().UnixNano())
				p.synced.Store(p.recs)
				select {
				case p.markPoke <- struct{}{}:
				default:
				}
			}
		}
		if committed && len(failed) == 0 && !broken {
			p.ok()
		}
		// Release waiters (FsyncAlways). On a write error they are released
		// too: the server keeps answering from memory and reports the error.
		for _, r := range reqs {
			if r.sh != nil {
				r.sh.synced.Store(r.n)
				select { // wake a shard waiting for room (see shard.stepWaits)
				case r.sh.room <- struct{}{}:
				default:
				}
			}
			if r.wg != nil {
				r.wg.Done()
			}
		}
		clear(reqs)
		if quitting {
			for _, lb := range failed {
				p.log.Error("persistence: changes could not be written before shutdown", "changes", lb.count)
				_ = lb.b.Close()
			}
			return
		}
	}
}

func (p *persister) fail(err error) {
	p.writeErrors.Add(1)
	msg := err.Error()
	if prev := p.lastErr.Load(); prev == nil || *prev != msg {
		p.log.Error("persistence: write failed; serving from memory and retrying every second", "err", err)
	}
	p.lastErr.Store(&msg)
}

func (p *persister) ok() {
	if prev := p.lastErr.Load(); prev != nil {
		p.log.Info("persistence: writes succeed again")
		p.lastErr.Store(nil)
	}
}

// markEvery is how often at most the mark is written (tests lower it).
var markEvery = time.Second

// markLoop writes the synced record count to the mark file after syncs, at
// most once per markEvery, until close.
func (p *persister) markLoop() {
	defer close(p.markDone)
	for {
		select {
		case <-p.markPoke:
		case <-p.markQuit:
			return
		}
		p.writeMark()
		select {
		case <-time.After(markEvery):
		case <-p.markQuit:
			return
		}
	}
}

// startMarks starts the mark writer, the mark on disk saying written.
func (p *persister) startMarks(written uint64) {
	p.markWritten = written
	p.markPoke = make(chan struct{}, 1)
	p.markQuit = make(chan struct{})
	p.markDone = make(chan struct{})
	go p.markLoop()
}

// writeMark writes the synced count if it moved; a failure is logged once
// per run of failures (the mark only lags: a restart then checks less).
func (p *persister) writeMark() {
	n := p.synced.Load()
	if n == p.markWritten || p.dd == nil {
		return
	}
	if err := writeMark(p.dd.fs, p.dd.dir, n); err != nil {
		if !p.markFailed {
			p.log.Error("persistence: cannot write "+markFile+"; a restart will check the log against an older count", "err", err)
		}
		p.markFailed = true
		return
	}
	p.markFailed = false
	p.markWritten = n
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
	db := p.db()
	if p.synced.Load() < p.recs {
		if guardAll(func() error { return db.LogData(nil, pebble.Sync) }) == nil {
			p.synced.Store(p.recs)
		}
	}
	p.writeMark()
	err := guardAll(db.Close)
	if p.dd != nil {
		p.dd.close()
	}
	return err
}
