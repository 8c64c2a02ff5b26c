package store

import (
	"hash/maphash"
	"sync/atomic"
	"unsafe"

	"github.com/cockroachdb/pebble/v2"

	"github.com/cellserver/cellserver/cluster"
	"github.com/cellserver/cellserver/limit"
)

// shard owns one part of the keyspace. Only its owner's goroutine touches t.
type shard struct {
	id    int
	cfg   Config
	clock *Clock
	o     *Owner // the goroutine that runs the shard
	t     *table
	lw    *limitWork // see limitWork; made on first use

	slotLo, slotHi int // the contiguous hash slot range [lo, hi) this shard owns
	// gate is, in cluster mode, each slot's Slot* state (index slot-slotLo):
	// see admit. nil: no check.
	gate []uint8
	// flying holds the keys a slot move exported and has not landed yet
	// (ExportReq with Fly, LandReq): no keyed request may run on them
	// meanwhile (TRYAGAIN), as the copy on its way is what the target keeps.
	// nil when none.
	flying map[string]struct{}

	// Persistence (nil p: in memory only). Records collect in pb (pbCount
	// changes) and go to the committer after the write-out, or under
	// FsyncAlways after each batch.
	p       *persister
	pb      *pebble.Batch
	pbCount int64
	pbRecs  int64           // log records in pb
	pbDB    *pebble.DB      // the DB pb was made by (a reopen replaces it)
	spare   chan spareBatch // committed batches, for reuse
	sent    uint64          // requests sent to the committer
	synced  atomic.Uint64   // requests the committer has finished
	snap    bool            // pb starts with a full rewrite of the shard (resync)
	rec     []byte          // the record being built
	// Changed keys are written as their latest value, once per write-out:
	// dirty lists their entries. Under everysec and no, a write-out takes
	// the list as writing and writes it a chunk at a time between batches
	// (writePos: how far). Deletions wait in dels as encoded entries (ndels
	// of them) until the next record, which they precede: a record that
	// holds a key's state must come after every deletion made before it.
	dirty    []uint32
	writing  []uint32
	writePos int
	dels     []byte
	ndels    int
	delsPeak int // the most bytes dels held since the last write-out began
	// The snapshot of round snapRound (0: none) began at log sequence number
	// snapStart and has written entries [0, snapPos).
	snapRound, snapStart uint64
	snapPos              uint32
	snapDone             uint64 // round whose snapshot ended, to report with the next send

	sweepPos uint32

	// interest holds the listeners registered for keys of this shard (see
	// notify.go); by is the ID of the session whose batch (or hold) is
	// running, for them.
	interest map[string][]KeyListener
	by       uint64
	bcast    *atomic.Pointer[broadcast] // the store's (SetBroadcast)

	// Counters read by Stats from other goroutines.
	nkeys    atomic.Int64
	nexpires atomic.Int64
	expired  atomic.Int64
	bytes    atomic.Int64
	expires  int64 // owner's copy of nexpires

	// unwritten mirrors the committer's needSnap for INFO: the shard's
	// changes were dropped and its keys wait to be rewritten.
	unwritten atomic.Bool
}

func newShard(id int, seed maphash.Seed, cfg Config, p *persister) *shard {
	lo, hi := shardSlots(id, cfg.Shards)
	return &shard{
		id:     id,
		cfg:    cfg,
		clock:  cfg.Clock,
		t:      newTable(seed),
		slotLo: lo,
		slotHi: hi,
		p:      p,
		spare:  make(chan spareBatch, 4),
		bcast:  new(atomic.Pointer[broadcast]), // New shares the store's instead
	}
}

// warm hashes the key of every keyed request of the batch and prefetches
// the memory each lookup will read (index slots, then the entry whose tag
// matches the key's, then a long key's bytes) in passes with no
// dependencies between requests, so the CPU overlaps their cache misses
// instead of taking them one after another. On this workload the misses, not the arithmetic, dominate a
// lookup at millions of keys.
func (sh *shard) warm(ops []*envelope) {
	t := sh.t
	if len(ops) == 1 { // nothing to overlap with
		if op := ops[0]; op.keyed {
			op.hash = t.hash(op.key)
		}
		return
	}
	// Hash every key first, then prefetch: the prefetches go out back to
	// back, their misses (and TLB walks) overlapping, rather than spread
	// between hash computations.
	for _, op := range ops {
		if op.keyed {
			op.hash = t.hash(op.key)
		}
	}
	multi := false // a call of several limits here: its other keys too
	for _, op := range ops {
		if op.keyed {
			t.prefetchHome(op.hash)
			if r, ok := op.req.(*LimitReq); ok && len(r.Call.Limits) > 1 {
				r.warmKeys(nil, sh)
				multi = true
			}
		}
	}
	for _, op := range ops {
		op.cand = -1
		if op.keyed {
			op.cand = t.candidate(t.idx, t.shift, op.hash)
			if op.cand < 0 && t.old != nil {
				op.cand = t.candidate(t.old, t.oldShift, op.hash)
			}
			if op.cand >= 0 {
				prefetch(uintptr(unsafe.Pointer(t.at(uint32(op.cand)))))
			}
		}
	}
	for _, op := range ops {
		if op.cand >= 0 {
			t.prefetchKey(t.at(uint32(op.cand)))
		}
	}
	if multi {
		for _, op := range ops {
			if r, ok := op.req.(*LimitReq); ok && op.keyed && len(r.Call.Limits) > 1 {
				r.warmEntries() // the first key's entry again: one prefetch more
			}
		}
	}
}

// writeThrough reports whether every batch's changes go to disk before its
// replies (FsyncAlways); otherwise they are written out once per
// PersistInterval, each changed key once with its latest value.
func (sh *shard) writeThrough() bool { return sh.p != nil && sh.p.policy == FsyncAlways }

// An owner waits on one channel, in: request batches, and control batches
// for its timers and for Close. (A select over five channels, as the loop
// once had, locks all five for every batch it takes: 3% of the server's
// CPU at pipeline depth 16.)
var (
	ctlSweep   = &batch{ctl: ctlSweepTick}
	ctlPersist = &batch{ctl: ctlPersistTick}
	ctlQuit    = &batch{ctl: ctlStop}
)

const (
	ctlSweepTick = iota + 1
	ctlPersistTick
	ctlStop
	ctlHold // park the owner for a Session's hold (batch.hold)
)

func (sh *shard) runBatch(b *batch) {
	sh.by = b.by
	sh.warm(b.ops)
	// One clock reading serves the whole batch, which is one pipeline's
	// commands for this shard (a reading costs a few percent of a command).
	// Each command still uses a single reading for both its TAT arithmetic
	// and its expiry (spec §9);
	// a pipeline's commands are answered as if they arrived at the same
	// instant, as Redis does for the commands of a MULTI or a script.
	now := sh.clock.Now()
	for _, op := range b.ops {
		sh.exec(op, now)
	}
	sh.endBatch(b.wg, b.synced)
}

// endBatch ends a request batch or a hold: it publishes the shard's
// counters and hands the changes made to persistence, then calls wg.Done
// (under FsyncAlways once they are synced, unless synced is set: then at
// once, and synced.Done once they are synced).
func (sh *shard) endBatch(wg, synced doner) {
	sh.publish()
	if sh.writeThrough() {
		sh.writeDirty()
		if synced == nil {
			sh.sendChanges(wg)
			return
		}
		sh.sendChanges(synced)
	} else if synced != nil {
		synced.Done()
	}
	wg.Done()
}

// writeChunk is how many changed keys a write-out step writes between
// batches, and snapChunk how many entries a snapshot step reads (variables
// so that tests can interleave small steps). A step of 2048 keys takes
// about 0.35 ms at 10M keys, which is what a batch may wait behind it.
var writeChunk, snapChunk = 2048, 2048

// migrateIdle is how many old index slots an idle step moves (about 0.1 ms).
const migrateIdle = 16384

// stepDue reports whether a background step is waiting: a write-out or a
// snapshot in progress, or a migration of the key index (see step).
func (sh *shard) stepDue() bool { return sh.stepSends() || sh.t.old != nil }

// stepSends reports whether the next step writes a chunk for the committer:
// a write-out or a snapshot is in progress.
func (sh *shard) stepSends() bool { return sh.writePos < len(sh.writing) || sh.snapRound != 0 }

// maxInFlight is how many of a shard's write-out or snapshot chunks may
// wait in the committer's queue before the shard stops writing more (its
// changes stay in memory, marked dirty, meanwhile). A snapshot round of 5M
// keys is about 2500 chunks: unpaced, it filled the queue (4096 requests)
// faster than Pebble took it, and the shard then blocked on the queue for
// up to 2 s.
const maxInFlight = 8

// stepWaits reports whether the next step would send a chunk to a
// committer that already has maxInFlight of this shard's.
func (sh *shard) stepWaits() bool {
	return sh.p != nil && sh.stepSends() && sh.sent-sh.synced.Load() >= maxInFlight
}

// step takes the next background step: a chunk of the write-out in
// progress, else of the snapshot in progress, which it then sends; else a
// chunk of the key index's migration (see table).
func (sh *shard) step() {
	switch {
	case sh.writePos < len(sh.writing):
		sh.writeStep(writeChunk)
	case sh.snapRound != 0:
		sh.snapStep()
	case sh.t.old != nil:
		// Inserts move the old index along; an idle shard finishes it so
		// that the old index's memory is not held until more keys come.
		sh.t.migrate(migrateIdle)
		return
	}
	sh.sendChanges(nil)
}

// writeDirty writes every pending change to pb now: the write-out in
// progress, the deletions, and every key changed since.
func (sh *shard) writeDirty() {
	sh.startWriteOut()
	sh.writeRest()
}

// writeRest writes the rest of the write-out in progress, a record per
// writeChunk keys. (A record is one Pebble value, and a table block is at
// least one value: when a block's checksum fails, Pebble retries it with
// each of its first 40 KiB's bits flipped, a checksum of the whole block
// each time, which on a block of megabytes takes a minute before a damaged
// dir can be refused.)
func (sh *shard) writeRest() {
	for {
		sh.writeStep(writeChunk)
		if len(sh.writing) == 0 { // writeStep empties it when done
			return
		}
	}
}

// startWriteOut makes the keys changed since the last write-out the
// write-out in progress, first finishing the previous one.
func (sh *shard) startWriteOut() {
	if sh.writePos < len(sh.writing) {
		sh.writeRest()
	}
	sh.flushDels()
	sh.dels, sh.delsPeak = reuse(sh.dels, sh.delsPeak), 0
	sh.writing, sh.dirty = sh.dirty, sh.writing[:0]
	sh.writePos = 0
}

// writeStep writes up to limit keys of the write-out in progress as one
// record, or fewer once the record holds recordBytes: each key's latest
// state (a key changed again after its chunk was written is on the new
// dirty list).
func (sh *shard) writeStep(limit int) {
	end := min(sh.writePos+limit, len(sh.writing))
	if end > sh.writePos || sh.ndels > 0 {
		sh.batchSized(len(sh.dels) + (end-sh.writePos)*setSize + 2*logKeyLen)
	}
	sh.flushDels()
	rec, n := sh.recBuf(), 0
	i := sh.writePos
	for i < end && len(rec) < recordBytes {
		group := sh.writing[i:min(i+warmGroup, end)]
		sh.warmEntries(group)
		for _, ei := range group {
			i++
			if e := sh.t.at(ei); !e.isFree() && e.isDirty() {
				rec, n = sh.appendEntry(rec, ei, n, true)
			}
			if len(rec) >= recordBytes {
				break
			}
		}
	}
	sh.writePos = i
	sh.writeRecord(rec, n)
	if i == len(sh.writing) {
		sh.writing, sh.writePos = reuse(sh.writing, len(sh.writing)), 0
	}
}

// recordBytes is about the most bytes of state or deletions a record holds
// (a record passes it by one key's state at most). 2048 GCRA keys take
// about as much; keys of larger states (an SWL log is up to 120 KB) go
// fewer to a record, so that a step's time on the shard stays short, a
// table block stays small (see writeRest), and no record is one of the
// batches Pebble takes as large (half a memtable), which it commits apart.
const recordBytes = 64 << 10

// warmGroup is how many entries warmEntries touches ahead of their use.
const warmGroup = 32

// warmEntries prefetches the given entries, then their long keys (see
// warm), before the write-out encodes them: at millions of keys, two cache
// misses per key.
func (sh *shard) warmEntries(eis []uint32) {
	t := sh.t
	for _, ei := range eis {
		prefetch(uintptr(unsafe.Pointer(t.at(ei))))
	}
	for _, ei := range eis {
		t.prefetchKey(t.at(ei))
	}
}

// flushDels appends the pending deletions to pb, as records of about
// recordBytes at most (see writeRest).
func (sh *shard) flushDels() {
	if sh.ndels == 0 {
		return
	}
	b, from, n := sh.dels, 0, 0
	for r := (recReader{b: b}); r.next(); {
		n++
		if at := len(b) - len(r.b); at-from >= recordBytes {
			sh.addRecord(b[from:at], n)
			from, n = at, 0
		}
	}
	if n > 0 {
		sh.addRecord(b[from:], n)
	}
	sh.delsPeak = max(sh.delsPeak, len(sh.dels))
	sh.dels, sh.ndels = sh.dels[:0], 0
}

// reuse empties a buffer for its next use, or drops it if the last use
// (used elements at most) filled less than a quarter of a large one: a
// burst's worth of memory goes back, a steady load keeps its buffer instead
// of growing a new one each time.
func reuse[T any](b []T, used int) []T {
	if cap(b) > 1<<16 && used < cap(b)/4 {
		return nil
	}
	return b[:0]
}

// writeRecord is addRecord for a record built in recBuf's buffer, which it
// keeps for the next record.
func (sh *shard) writeRecord(rec []byte, n int) {
	sh.addRecord(rec, n)
	sh.rec = rec[:0]
}

// addRecord appends rec, holding n changes, to pb as the next log record;
// rec may be reused after.
func (sh *shard) addRecord(rec []byte, n int) {
	if n > 0 {
		var k [logKeyLen]byte
		b := sh.batchSized(logKeyLen + len(rec) + 16)
		_ = b.Set(logKey(&k, sh.p.seq.Add(1)), rec, nil)
		sh.pbCount += int64(n)
		sh.pbRecs++
	}
}

// recBuf returns an empty buffer for a record, giving back one that grew
// large for a burst (a write-out under --fsync always, a resync).
func (sh *shard) recBuf() []byte {
	if cap(sh.rec) > 1<<20 {
		sh.rec = nil
	}
	return sh.rec[:0]
}

// clearDirty forgets the pending changes (covered by a rewrite or a flush).
func (sh *shard) clearDirty() {
	sh.dirty, sh.writing, sh.writePos = nil, nil, 0
	sh.dels, sh.ndels = nil, 0
}

// sendChanges hands the batch's changes to the committer and arranges for
// wg.Done: at once, or under FsyncAlways once this shard's changes so far
// are synced (so no reply reports state that a crash could still undo).
func (sh *shard) sendChanges(wg doner) {
	if sh.p == nil {
		if wg != nil {
			wg.Done()
		}
		return
	}
	always := sh.p.policy == FsyncAlways
	if sh.pb != nil || sh.snapDone != 0 {
		r := sh.takeChanges()
		if always {
			r.wg = wg
			wg = nil
		}
		sh.p.in <- r
	} else if always && wg != nil && sh.sent > sh.synced.Load() {
		sh.p.in <- commitReq{wg: wg, sh: sh, n: sh.sent}
		wg = nil
	}
	if wg != nil {
		wg.Done()
	}
}

// takeChanges is the committer's request for the shard's changes, for
// sendChanges or a grouped commit (a hold of several shards under
// FsyncAlways, see hold); with none, a request that only waits for what the
// shard sent before.
func (sh *shard) takeChanges() commitReq {
	r := commitReq{sh: sh}
	if sh.pb != nil || sh.snapDone != 0 {
		sh.sent++
		r = commitReq{b: sh.pb, db: sh.pbDB, count: sh.pbCount, recs: sh.pbRecs, sh: sh, n: sh.sent, snap: sh.snap}
		if sh.snapDone != 0 {
			r.round, r.start = sh.snapDone, sh.snapStart
			sh.snapDone = 0
		}
		sh.p.pending.Add(sh.pbCount)
		sh.pb, sh.pbCount, sh.pbRecs = nil, 0, 0
		sh.snap = false
	}
	r.n = sh.sent
	return r
}

// startSnapshot begins this shard's snapshot of a round. Every record of
// this shard numbered before snapStart is superseded once it ends: the
// snapshot writes each key's state as of a later number.
func (sh *shard) startSnapshot(round uint64) {
	if sh.p == nil {
		return
	}
	sh.snapRound, sh.snapStart, sh.snapPos = round, sh.p.seq.Load()+1, 0
}

// snapStep writes the next chunk of the snapshot in progress as one record,
// after the pending deletions; after the last chunk the shard reports the
// round done with its next send. A chunk leaves its keys' changes pending
// for the write-out too, so a snapshot never decides what a write-out
// writes.
func (sh *shard) snapStep() {
	sh.flushDels()
	rec, n := sh.recBuf(), 0
	end := min(sh.snapPos+uint32(snapChunk), sh.t.nent)
	for ; sh.snapPos < end && len(rec) < recordBytes; sh.snapPos++ {
		rec, n = sh.appendEntry(rec, sh.snapPos, n, false)
	}
	sh.writeRecord(rec, n)
	if sh.snapPos >= sh.t.nent {
		sh.snapDone, sh.snapRound = sh.snapRound, 0
	}
}

// appendEntry appends entry i's state to rec if it holds a key, counting it
// in n; the key is then on disk, and if clean it no longer needs a
// write-out.
func (sh *shard) appendEntry(rec []byte, i uint32, n int, clean bool) ([]byte, int) {
	e := sh.t.at(i)
	if e.isFree() {
		return rec, n
	}
	if clean {
		e.setDirty(false)
	}
	e.setOnDisk()
	k := sh.t.keyOf(e)
	if e.outKind() != 0 {
		return appendState(rec, cluster.KeySlot(k), k, sh.t.state(e, nil), e.exp()), n + 1
	}
	return appendSet(rec, cluster.KeySlot(k), k, e.tat, e.exp()), n + 1
}

// snapshot replaces the pending changes with a rewrite of the shard's whole
// range from memory, in one batch: records that empty the range, then hold
// every key (after a reopen, the disk may have missed any change).
func (sh *shard) snapshot() {
	if sh.p == nil {
		return
	}
	if sh.pb != nil {
		_ = sh.pb.Close()
		sh.pb, sh.pbCount, sh.pbRecs = nil, 0, 0
	}
	sh.batchSized(sh.t.len()*setSize + (sh.t.len()/snapChunk+2)*(logKeyLen+16))
	sh.clearDirty()
	rec, n := appendDrop(sh.recBuf(), sh.slotLo, sh.slotHi), 1
	for i := uint32(0); i < sh.t.nent; i++ {
		if rec, n = sh.appendEntry(rec, i, n, true); n == snapChunk || len(rec) >= recordBytes {
			sh.addRecord(rec, n)
			rec, n = rec[:0], 0
		}
	}
	sh.writeRecord(rec, n)
	sh.snap = true
}

// batch returns the pending change batch, creating it.
func (sh *shard) batch() *pebble.Batch { return sh.batchSized(0) }

// batchSized is batch with room for about size more bytes, so a large
// write-out does not grow (and copy) the batch over and over. A batch the
// committer has handed back is reused: a steady load then allocates none.
func (sh *shard) batchSized(size int) *pebble.Batch {
	if sh.pb == nil {
		db := sh.p.db()
		sh.pbDB = db
		select {
		case s := <-sh.spare:
			if s.db == db {
				s.b.Reset()
				sh.pb = s.b
				break
			}
			_ = s.b.Close() // from before a reopen
			sh.pb = db.NewBatchWithSize(size)
		default:
			sh.pb = db.NewBatchWithSize(size)
		}
	}
	return sh.pb
}

// spareBatch is a committed batch of db, to reuse.
type spareBatch struct {
	b  *pebble.Batch
	db *pebble.DB
}

// recycle takes back a batch the committer has applied to db, closing it if
// the shard already holds enough spares.
func (sh *shard) recycle(b *pebble.Batch, db *pebble.DB) {
	select {
	case sh.spare <- spareBatch{b, db}:
	default:
		_ = b.Close()
	}
}

// markDirty notes that entry ei changed and must be written out.
func (sh *shard) markDirty(ei uint32) {
	if sh.p == nil {
		return
	}
	if e := sh.t.at(ei); !e.isDirty() {
		e.setDirty(true)
		sh.dirty = append(sh.dirty, ei)
	}
}

// recordDelete notes that key is gone, for the next write-out.
func (sh *shard) recordDelete(key []byte) {
	if sh.p == nil {
		return
	}
	sh.dels = appendKeyEntry(sh.dels, recDel, cluster.KeySlot(key), key)
	sh.ndels++
}

func (sh *shard) publish() {
	sh.nkeys.Store(int64(sh.t.len()))
	sh.nexpires.Store(sh.expires)
	sh.bytes.Store(sh.t.bytes())
}

// exec runs one request at clock reading now; a panic fails that request
// only.
func (sh *shard) exec(op *envelope, now int64) {
	defer func() {
		if r := recover(); r != nil {
			op.status = ErrPanic
		}
	}()
	if sh.gate != nil && op.keyed && !op.nogate && !sh.admit(op, now) {
		return
	}
	op.req.run(sh, now)
}

func (sh *shard) set(ei uint32, tat uint64, exp int64) {
	e := sh.t.at(ei)
	sh.t.setTAT(e, tat)
	sh.setExp(e, exp)
}

// setState stores an encoded state (any kind) and its expiry in entry ei.
func (sh *shard) setState(ei uint32, enc []byte, exp int64) {
	e := sh.t.at(ei)
	sh.t.setState(e, enc)
	sh.setExp(e, exp)
}

// setExp sets e's expiry, keeping the count of keys with one.
func (sh *shard) setExp(e *entry, exp int64) {
	if e.exp() != noExpiry {
		sh.expires--
	}
	e.setExp(exp)
	if exp != noExpiry {
		sh.expires++
	}
}

// find returns the entry index of a live key, removing it first if it has
// expired (lazy expiry); -1 if absent. h is the key's table hash.
func (sh *shard) find(key []byte, h uint64, nowMs int64) int64 {
	ei, _ := sh.findOrStale(key, h, nowMs, 0) // kind 0: no expired entry is kept
	return ei
}

// findOrStale is lazy expiry for a call about to write the key with a
// state of kind k (0 for none, as find): an expired entry that holds a
// state of kind k in place (a GCRA TAT, an FW or SWC state inline) is
// counted and notified as expired like any other, but left in the table
// (stale) for the call to overwrite, or to remove if it writes nothing.
// A limiter's key typically expires between two calls (a GCRA key once
// it has refilled, a window's at the window's end), so under load many
// calls find it expired, and a removal and an insertion each would cost
// more than the decision.
func (sh *shard) findOrStale(key []byte, h uint64, nowMs int64, k limit.Kind) (ei int64, stale bool) {
	ei = sh.t.findHash(key, h)
	if ei < 0 {
		return -1, false
	}
	e := sh.t.at(uint32(ei))
	if e.exp() >= nowMs {
		return ei, false
	}
	sh.changed(key, 0)
	sh.expired.Add(1)
	if k == limit.KindGCRA && e.outKind() == 0 || wideKind(k) && e.outKind() == k && e.inlineState() {
		return ei, true
	}
	sh.removeHash(uint32(ei), h)
	return -1, false
}

// remove deletes a key from memory and from disk.
func (sh *shard) remove(ei uint32) { sh.drop(ei, true) }

// removeHash is remove for a key whose table hash the caller has (a keyed
// request's, computed by warm), so a request does not hash its key twice.
func (sh *shard) removeHash(ei uint32, h uint64) { sh.dropHash(ei, h, true) }

// drop deletes a key from memory, and from disk if onDisk (a caller that
// deletes a whole range on disk passes false).
func (sh *shard) drop(ei uint32, onDisk bool) {
	sh.dropHash(ei, sh.t.hashAt(ei), onDisk)
}

// dropHash is drop with the key's table hash already computed.
func (sh *shard) dropHash(ei uint32, h uint64, onDisk bool) {
	e := sh.t.at(ei)
	if e.exp() != noExpiry {
		sh.expires--
	}
	// A key never written out since it was created has nothing on disk to
	// delete: under churn most keys come and go between two write-outs.
	if onDisk && e.isOnDisk() {
		sh.recordDelete(sh.t.keyOf(e))
	}
	sh.t.removeHash(ei, h)
}

// sweep is one step of the incremental active expiry: it examines the next
// slice of entries and removes the expired ones, so keys nobody touches again
// do not hold memory for longer than about a full pass.
func (sh *shard) sweep(now int64) {
	n := sh.t.nent
	if n == 0 {
		return
	}
	budget := n / uint32(sh.cfg.SweepFraction)
	if budget < 256 {
		budget = 256
	}
	nowMs := floorMs(now)
	for ; budget > 0; budget-- {
		if sh.sweepPos >= sh.t.nent {
			sh.sweepPos = 0
		}
		e := sh.t.at(sh.sweepPos)
		if !e.isFree() && e.exp() < nowMs {
			sh.changed(sh.t.keyOf(e), 0)
			sh.remove(sh.sweepPos)
			sh.expired.Add(1)
		}
		sh.sweepPos++
	}
}

// dropSlotsMem removes the keys of the given inclusive slot ranges from
// memory only, returning how many.
func (sh *shard) dropSlotsMem(ranges [][2]int) int {
	n := 0
	for i := uint32(0); i < sh.t.nent; i++ {
		if e := sh.t.at(i); !e.isFree() && inRanges(cluster.KeySlot(sh.t.keyOf(e)), ranges) {
			sh.changed(sh.t.keyOf(e), 0)
			sh.drop(i, false) // the caller's record covers the disk
			n++
		}
	}
	return n
}

func inRanges(slot int, ranges [][2]int) bool {
	for _, r := range ranges {
		if slot >= r[0] && slot <= r[1] {
			return true
		}
	}
	return false
}

// floorMs converts Unix ns to Unix ms, rounding toward minus infinity.
func floorMs(ns int64) int64 {
	ms := ns / 1e6
	if ns%1e6 < 0 {
		ms--
	}
	return ms
}
