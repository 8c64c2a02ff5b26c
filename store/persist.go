package store

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/cellserver/cellserver/cluster"
)

// Fsync is the durability policy, like Redis's appendfsync.
type Fsync int

const (
	// FsyncEverySec syncs the log once a second: kill -9 or power loss loses
	// at most about one second of decisions. The default.
	FsyncEverySec Fsync = iota
	// FsyncAlways replies only after the change is synced; concurrent
	// clients share each sync (group commit).
	FsyncAlways
	// FsyncNo never syncs explicitly: the OS decides when data reaches disk.
	FsyncNo
)

// ParseFsync parses "always", "everysec" or "no".
func ParseFsync(s string) (Fsync, error) {
	switch s {
	case "always":
		return FsyncAlways, nil
	case "everysec":
		return FsyncEverySec, nil
	case "no":
		return FsyncNo, nil
	}
	return 0, fmt.Errorf("store: fsync must be always, everysec or no, got %q", s)
}

func (f Fsync) String() string {
	switch f {
	case FsyncAlways:
		return "always"
	case FsyncNo:
		return "no"
	}
	return "everysec"
}

// On-disk layout ("cellserver/2"): an append-only log of records in Pebble.
// A record's key is 'l' + a sequence number (8 bytes, big endian) that grows
// across restarts; its value is a run of entries:
//
//	's' slot(2) keylen(uvarint) key tat(8) expiry(8)   the key's state
//	'd' slot(2) keylen(uvarint) key                    the key is gone
//	'r' lo(2) hi(2)                                    slots [lo, hi) are empty
//
// Numbers are big endian, the expiry in Unix ms. Replaying the records in
// order rebuilds the keyspace, whatever the number of shards that wrote them.
// A shard numbers a record when it builds it, so each shard's records are
// in the order of its changes, and a key's records all come from the shard
// that owned it then. Every write lands at (or next to) the end of the key
// space and old records are cut off at the start, the pattern an LSM
// handles best: compactions mostly move files instead of merging random
// keys into the whole tree, so a change costs the same at any number of
// keys.
//
// Snapshot rounds bound the log: once it grows past twice the live state,
// every shard writes all its keys as new records, a chunk at a time between
// request batches, and when all are done the records older than the earliest
// snapshot's start are excised. A chunk holds state as of its own sequence
// number, later than any change it supersedes, so a snapshot needs no pause.
//
// Metadata keys start with 'm'.
const (
	prefixLog   = 'l'
	prefixOld   = 'k' // "cellserver/1": one Pebble key per limiter key
	recSet      = 's'
	recDel      = 'd'
	recDrop     = 'r'
	valueLen    = 16
	logKeyLen   = 9
	formatKey   = "mformat"
	formatOld   = "cellserver/1"
	formatValue = "cellserver/2"
	// pebbleFormat is pinned so that an upgrade of the library never
	// silently rewrites a data dir into a format an older binary can't read.
	pebbleFormat = pebble.FormatTableFormatV6
	// setSize estimates one key's bytes in the log, to size snapshots.
	setSize = 40
)

// MaxOpenFiles caps the files Pebble keeps open (its default is 1000): the
// server counts them in the descriptors it keeps back from clients.
const MaxOpenFiles = 256

// snapMinBytes is the least log that starts a snapshot round (tests lower it).
var snapMinBytes int64 = 16 << 20

// ErrDataDirInUse: another process holds the data dir's lock.
var ErrDataDirInUse = errors.New("store: data dir is in use by another process")

func logKey(dst *[logKeyLen]byte, seq uint64) []byte {
	dst[0] = prefixLog
	binary.BigEndian.PutUint64(dst[1:], seq)
	return dst[:]
}

// appendSet appends a key's state to a record.
func appendSet(dst []byte, slot int, key []byte, tat uint64, exp int64) []byte {
	dst = appendKeyEntry(dst, recSet, slot, key)
	dst = binary.BigEndian.AppendUint64(dst, tat)
	return binary.BigEndian.AppendUint64(dst, uint64(exp))
}

// appendKeyEntry appends an entry's kind, slot and key.
func appendKeyEntry(dst []byte, kind byte, slot int, key []byte) []byte {
	dst = append(dst, kind, byte(slot>>8), byte(slot))
	dst = binary.AppendUvarint(dst, uint64(len(key)))
	return append(dst, key...)
}

// appendDrop appends "slots [lo, hi) are empty" to a record.
func appendDrop(dst []byte, lo, hi int) []byte {
	return append(dst, recDrop, byte(lo>>8), byte(lo), byte(hi>>8), byte(hi))
}

// recReader decodes a record's entries: for r.next() { r.kind ... }.
type recReader struct {
	b    []byte
	kind byte
	slot int // recSet, recDel; recDrop: lo
	hi   int // recDrop
	key  []byte
	tat  uint64
	exp  int64
	bad  bool
}

func (r *recReader) next() bool {
	if len(r.b) == 0 || r.bad {
		return false
	}
	if len(r.b) < 5 {
		r.bad = true
		return false
	}
	r.kind, r.slot = r.b[0], int(r.b[1])<<8|int(r.b[2])
	switch r.kind {
	case recDrop:
		r.hi = int(r.b[3])<<8 | int(r.b[4])
		r.b = r.b[5:]
		r.bad = r.slot > r.hi || r.hi > cluster.SlotCount
		return !r.bad
	case recSet, recDel:
		n, w := binary.Uvarint(r.b[3:])
		rest := r.b[3+max(w, 0):]
		need := n
		if r.kind == recSet {
			need += valueLen
		}
		if w <= 0 || n == 0 || uint64(len(rest)) < need || r.slot >= cluster.SlotCount {
			r.bad = true
			return false
		}
		r.key = rest[:n]
		if r.kind == recSet {
			r.tat = binary.BigEndian.Uint64(rest[n:])
			r.exp = int64(binary.BigEndian.Uint64(rest[n+8:]))
		}
		r.b = rest[need:]
		return true
	}
	r.bad = true
	return false
}

// PersistStats describes persistence for INFO persistence.
type PersistStats struct {
	Enabled       bool
	Fsync         string
	KeysLoaded    int64
	ExpiredAtLoad int64
	LoadTime      time.Duration
	LastWriteOK   bool
	LastWriteErr  string
	WriteErrors   int64
	Commits       int64
	Changes       int64
	LastFsync     time.Time
	DiskBytes     uint64
	Pending       int64 // changes waiting to be committed
	Snapshots     int64 // snapshot rounds finished (old records deleted)
}

// persister is the group committer: shard owners hand it batches of changes
// and one goroutine commits them to Pebble, many per write, syncing per the
// policy. Shards never wait for the disk except under FsyncAlways, and even
// then only their clients' replies wait, not the owner.
type persister struct {
	dbp    atomic.Pointer[pebble.DB]
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
	retryEvery  time.Duration
	shards      []*shard

	seq        atomic.Uint64      // the last log sequence number handed out
	snapMin    int64              // log bytes below which no snapshot round starts
	startRound func(round uint64) // has every shard start a snapshot (Store.snapshotRound)

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
	sh    *shard
}

// errPebbleFatal marks an error Pebble reported through Logger.Fatalf: its
// commit pipeline cannot be used again, so the DB is reopened.
type errPebbleFatal struct{ msg string }

func (e errPebbleFatal) Error() string { return e.msg }

type pebbleLogger struct{ l *slog.Logger }

func (p pebbleLogger) Infof(format string, args ...any) {
	p.l.Debug("pebble: " + strings.TrimSpace(fmt.Sprintf(format, args...)))
}
func (p pebbleLogger) Errorf(format string, args ...any) {
	p.l.Error("pebble: " + strings.TrimSpace(fmt.Sprintf(format, args...)))
}

// Fatalf panics instead of exiting: the committer recovers it (a failed
// write must not take the server down) and reopens the database.
func (p pebbleLogger) Fatalf(format string, args ...any) {
	msg := strings.TrimSpace(fmt.Sprintf(format, args...))
	p.l.Error("pebble fatal: " + msg)
	panic(errPebbleFatal{msg})
}

// openDB opens (or creates) the data dir, refusing anything it should not
// touch: a dir locked by another process, a non-empty dir that holds no
// cellserver data, a corrupt or incompatible database.
func openDB(dir string, fs vfs.FS, memTable uint64, log *slog.Logger) (*pebble.DB, error) {
	if fs == nil {
		fs = vfs.Default
	}
	if err := fs.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("store: cannot create data dir %s: %w", dir, err)
	}
	names, err := fs.List(dir)
	if err != nil {
		return nil, fmt.Errorf("store: cannot read data dir %s: %w", dir, err)
	}
	if len(names) > 0 && !looksLikePebble(names) {
		return nil, fmt.Errorf("store: data dir %s is not empty and holds no cellserver data; refusing to use it (choose an empty or new directory)", dir)
	}
	opts := &pebble.Options{
		FS:                 fs,
		FormatMajorVersion: pebbleFormat,
		Logger:             pebbleLogger{log},
		MemTableSize:       memTable,
		// Records arrive in key order, so flushed files hardly overlap and
		// most compactions just move files down. These thresholds (kept
		// from the first format, where they measured better) let flushes
		// of a snapshot round's burst gather without stalling writes.
		L0CompactionThreshold:     16,
		L0CompactionFileThreshold: 1000,
		L0StopWritesThreshold:     64,
		MaxOpenFiles:              MaxOpenFiles,
	}
	// Records are mostly binary state and random keys: snappy would cost
	// flush and compaction CPU for little space.
	for i := range opts.Levels {
		opts.Levels[i].Compression = func() *sstable.CompressionProfile { return sstable.NoCompression }
	}
	db, err := pebble.Open(dir, opts)
	if err != nil {
		msg := err.Error()
		if strings.Contains(msg, "lock") || strings.Contains(msg, "resource temporarily unavailable") {
			return nil, fmt.Errorf("%w: %s (%v)", ErrDataDirInUse, dir, err)
		}
		return nil, fmt.Errorf("store: cannot open data dir %s (not modified): %w", dir, err)
	}
	v, closer, err := db.Get([]byte(formatKey))
	switch {
	case errors.Is(err, pebble.ErrNotFound):
		if err := db.Set([]byte(formatKey), []byte(formatValue), pebble.Sync); err != nil {
			db.Close()
			return nil, fmt.Errorf("store: cannot write to data dir %s: %w", dir, err)
		}
	case err != nil:
		db.Close()
		return nil, fmt.Errorf("store: cannot read data dir %s: %w", dir, err)
	default:
		got := string(v)
		closer.Close()
		if got == formatOld {
			n, err := migrateV1(db)
			if err != nil {
				db.Close()
				return nil, fmt.Errorf("store: cannot convert data dir %s from %s: %w", dir, formatOld, err)
			}
			log.Info("data dir converted to the log format", "dir", dir, "from", formatOld, "to", formatValue, "keys", n)
			got = formatValue
		}
		if got != formatValue {
			db.Close()
			return nil, fmt.Errorf("store: data dir %s holds format %q, this cellserver reads %q; refusing to start", dir, got, formatValue)
		}
	}
	return db, nil
}

func looksLikePebble(names []string) bool {
	for _, n := range names {
		if strings.HasPrefix(n, "marker.manifest") || n == "CURRENT" || strings.HasPrefix(n, "MANIFEST-") {
			return true
		}
	}
	return false
}

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
			todo = append(todo, logBatch{r.b, r.count, r.sh})
		}
		committed := false
		for i, lb := range todo {
			if broken {
				_ = lb.b.Close()
				continue
			}
			db := p.db()
			err := guard(func() error { return db.Apply(lb.b, pebble.NoSync) })
			var fatal errPebbleFatal
			switch {
			case errors.As(err, &fatal):
				p.fail(err)
				broken = true
				_ = lb.b.Close()
				_ = guard(db.Close) // releases the lock so the dir can be reopened
				for _, sh := range p.shards {
					needSnap[sh] = true
				}
			case err != nil:
				p.fail(err)
				failed = append(failed, todo[i:]...) // retried in order
				todo = todo[:0]
			default:
				committed = true
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
					_ = guard(db.Close)
					for _, sh := range p.shards {
						needSnap[sh] = true
					}
				}
			} else {
				p.lastFsync.Store(time.Now().UnixNano())
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

// close commits and syncs everything still queued and closes Pebble.
func (p *persister) close() error {
	close(p.quit)
	<-p.done
	return guard(p.db().Close)
}

// snapThreshold is how many log bytes start a snapshot round: twice the
// live state, so the log holds at most about three times the keys' size.
func (p *persister) snapThreshold() int64 {
	var keys int64
	for _, sh := range p.shards {
		keys += sh.nkeys.Load()
	}
	return max(2*keys*setSize, p.snapMin)
}

// dropOldRecords deletes the records every shard's snapshot of the finished
// round supersedes: those older than the earliest snapshot's start. (A
// shard's own older records are covered by its snapshot; the others' by
// theirs, which all began later.) Pebble's Excise removes them from the
// tree at once, so the space comes back without waiting for a compaction
// to reach them. A failed or lost excise only leaves records that replay
// before the snapshots.
func (p *persister) dropOldRecords() {
	var lo, hi [logKeyLen]byte
	db := p.db()
	span := pebble.KeyRange{Start: logKey(&lo, 0), End: logKey(&hi, slices.Min(p.starts))}
	if err := guard(func() error { return db.Excise(context.Background(), span) }); err != nil {
		p.fail(err) // a later round deletes them
		return
	}
	p.snapshots.Add(1)
}

// load replays the log into the shards' tables (the shards are not running
// yet), then drops the keys that expired by nowMs. One goroutine reads the
// records in order and hands each shard its entries, in order, in chunks;
// every shard fills its table on its own goroutine.
func (p *persister) load(shards []*shard, nowMs int64) error {
	n := len(shards)
	work := make([]chan []byte, n)
	free := make(chan []byte, 4*n)
	var wg sync.WaitGroup
	for i, sh := range shards {
		work[i] = make(chan []byte, 4)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for buf := range work[i] {
				sh.replay(buf)
				select {
				case free <- buf[:0]:
				default:
				}
			}
		}()
	}
	bufs := make([][]byte, n)
	send := func(i int) {
		work[i] <- bufs[i]
		select {
		case bufs[i] = <-free:
		default:
			bufs[i] = make([]byte, 0, replayChunk+256)
		}
	}
	logBytes, err := p.readLog(func(r *recReader, entry []byte) {
		if r.kind == recDrop {
			for i, sh := range shards {
				if lo, hi := max(r.slot, sh.slotLo), min(r.hi, sh.slotHi); lo < hi {
					bufs[i] = appendDrop(bufs[i], lo, hi)
				}
			}
			return
		}
		i := r.slot * n / cluster.SlotCount
		if bufs[i] = append(bufs[i], entry...); len(bufs[i]) >= replayChunk {
			send(i)
		}
	})
	for i := range shards {
		work[i] <- bufs[i]
		close(work[i])
	}
	wg.Wait()
	if err != nil {
		return err
	}
	var loaded, expired int64
	for _, sh := range shards {
		for i := uint32(0); i < sh.t.nent; i++ {
			if e := sh.t.at(i); !e.isFree() && e.exp() < nowMs {
				sh.remove(i) // and from disk, with the first write-out
				expired++
			}
		}
		loaded += int64(sh.t.len())
	}
	p.keysLoaded.Add(loaded)
	p.expiredLoad.Add(expired)
	p.logged = max(logBytes-loaded*setSize, 0) // garbage already on disk counts toward the next round
	return nil
}

// replayChunk is how many bytes of entries load hands a shard at a time.
const replayChunk = 64 << 10

// readLog calls fn with every entry of every record, in order, and sets the
// last sequence number; it returns the log's size in bytes.
func (p *persister) readLog(fn func(r *recReader, entry []byte)) (int64, error) {
	it, err := p.db().NewIter(&pebble.IterOptions{LowerBound: []byte{prefixLog}, UpperBound: []byte{prefixLog + 1}})
	if err != nil {
		return 0, err
	}
	var size int64
	for it.First(); it.Valid(); it.Next() {
		k := it.Key()
		if len(k) != logKeyLen {
			_ = it.Close()
			return 0, fmt.Errorf("store: corrupt record key %q in data dir", k)
		}
		v, err := it.ValueAndErr()
		if err != nil {
			_ = it.Close()
			return 0, err
		}
		size += int64(len(k) + len(v))
		r := recReader{b: v}
		for rest := r.b; r.next(); rest = r.b {
			fn(&r, rest[:len(rest)-len(r.b)])
		}
		if r.bad {
			_ = it.Close()
			return 0, fmt.Errorf("store: corrupt record %d in data dir", binary.BigEndian.Uint64(k[1:]))
		}
		p.seq.Store(binary.BigEndian.Uint64(k[1:]))
	}
	return size, it.Close()
}

// replay applies entries of this shard's keys (and drops clipped to its
// slots), as load hands them over.
func (sh *shard) replay(buf []byte) {
	r := recReader{b: buf}
	for r.next() {
		switch r.kind {
		case recSet:
			h := sh.t.hash(r.key)
			ei := sh.t.findHash(r.key, h)
			if ei < 0 {
				ei = int64(sh.t.insertHash(r.key, h))
			}
			sh.set(uint32(ei), r.tat, r.exp)
			sh.t.at(uint32(ei)).setOnDisk()
		case recDel:
			if ei := sh.t.find(r.key); ei >= 0 {
				sh.drop(uint32(ei), false)
			}
		case recDrop:
			sh.dropSlotsMem([][2]int{{r.slot, r.hi - 1}})
		}
	}
}

// migrateV1 rewrites a "cellserver/1" data dir (one Pebble key per limiter
// key: 'k' + slot + key, value TAT and expiry) as log records, in one
// atomic, synced batch.
func migrateV1(db *pebble.DB) (int, error) {
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: []byte{prefixOld}, UpperBound: []byte{prefixOld + 1}})
	if err != nil {
		return 0, err
	}
	b := db.NewBatch()
	defer b.Close()
	var rec []byte
	var kb [logKeyLen]byte
	seq, n := uint64(0), 0
	flush := func() {
		seq++
		_ = b.Set(logKey(&kb, seq), rec, nil)
		rec = rec[:0]
	}
	for it.First(); it.Valid(); it.Next() {
		k, v := it.Key(), it.Value()
		if len(k) < 4 || len(v) != valueLen {
			_ = it.Close()
			return 0, fmt.Errorf("store: corrupt entry %q in data dir", k)
		}
		rec = appendSet(rec, int(k[1])<<8|int(k[2]), k[3:], binary.BigEndian.Uint64(v), int64(binary.BigEndian.Uint64(v[8:])))
		if n++; n%snapChunk == 0 {
			flush()
		}
	}
	if err := it.Close(); err != nil {
		return 0, err
	}
	if len(rec) > 0 {
		flush()
	}
	_ = b.DeleteRange([]byte{prefixOld}, []byte{prefixOld + 1}, nil)
	_ = b.Set([]byte(formatKey), []byte(formatValue), nil)
	return n, db.Apply(b, pebble.Sync)
}

// shardSlots returns the contiguous slot range [lo, hi) owned by shard i of n.
func shardSlots(i, n int) (lo, hi int) {
	return i * cluster.SlotCount / n, (i + 1) * cluster.SlotCount / n
}
