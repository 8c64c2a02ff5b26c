package store

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/cellserver/cellserver/cluster"
	"github.com/cellserver/cellserver/limit"
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
//	's' slot(2) keylen(uvarint) key tat(8) expiry(8)   the key's GCRA state (its TAT)
//	'S' slot(2) keylen(uvarint) key statelen(uvarint) state expiry(8)
//	                                                   the key's state of another kind
//	                                                   (limit.Encode's bytes: kind, version, fields)
//	'd' slot(2) keylen(uvarint) key                    the key is gone
//	'r' lo(2) hi(2)                                    slots [lo, hi) are empty
//	'c' count(8)                                       log records committed so far
//
// Numbers are big endian, the expiry in Unix ms. The committer adds a 'c'
// record to every commit, counting the shards' records committed since the
// dir was created (what the mark file checks at load, see open.go); it lives
// in the log's own key range, numbered at commit, so that the log stays one
// stream of ascending keys. Replaying the records in
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
	recState    = 'S'
	recDel      = 'd'
	recDrop     = 'r'
	recCount    = 'c'
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

// errCorruptLog: a log record that Pebble read intact does not decode.
var errCorruptLog = errors.New("store: corrupt log record")

// ErrDataDirInUse: another process holds the data dir's lock.
var ErrDataDirInUse = errors.New("store: data dir is in use by another process")

// lastCount reads the count of the newest commit the log holds (ok false
// with none among its last maxCountScan records). A commit's count record
// is numbered after its records, so it is normally the log's last key.
func lastCount(db *pebble.DB) (n uint64, ok bool, err error) {
	err = guardAll(func() error {
		it, err := db.NewIter(&pebble.IterOptions{LowerBound: []byte{prefixLog}, UpperBound: []byte{prefixLog + 1}})
		if err != nil {
			return err
		}
		scanned := 0
		for valid := it.Last(); valid && scanned < maxCountScan; valid = it.Prev() {
			v, err := it.ValueAndErr()
			if err != nil {
				_ = it.Close()
				return err
			}
			if n, ok = countRecord(v); ok {
				break
			}
			scanned++
		}
		return errors.Join(it.Error(), it.Close())
	})
	return n, ok, err
}

// maxCountScan bounds lastCount's walk back through records without a
// count (a dir converted from cellserver/1 has no count until its first
// commit).
const maxCountScan = 1 << 16

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

// appendState appends a key's state of a kind other than GCRA to a record.
func appendState(dst []byte, slot int, key, state []byte, exp int64) []byte {
	dst = appendKeyEntry(dst, recState, slot, key)
	dst = binary.AppendUvarint(dst, uint64(len(state)))
	dst = append(dst, state...)
	return binary.BigEndian.AppendUint64(dst, uint64(exp))
}

// appendKeyEntry appends an entry's kind, slot and key.
func appendKeyEntry(dst []byte, kind byte, slot int, key []byte) []byte {
	dst = append(dst, kind, byte(slot>>8), byte(slot))
	dst = binary.AppendUvarint(dst, uint64(len(key)))
	return append(dst, key...)
}

// appendCount appends "n records committed so far" to a record.
func appendCount(dst []byte, n uint64) []byte {
	return binary.BigEndian.AppendUint64(append(dst, recCount), n)
}

// countRecord decodes a log record that is a commit's count alone (what
// the committer writes with appendCount); ok is false for any other record.
func countRecord(v []byte) (n uint64, ok bool) {
	if len(v) != 9 || v[0] != recCount {
		return 0, false
	}
	return binary.BigEndian.Uint64(v[1:]), true
}

// appendDrop appends "slots [lo, hi) are empty" to a record.
func appendDrop(dst []byte, lo, hi int) []byte {
	return append(dst, recDrop, byte(lo>>8), byte(lo), byte(hi>>8), byte(hi))
}

// recReader decodes a record's entries: for r.next() { r.kind ... }.
type recReader struct {
	b     []byte
	kind  byte
	slot  int // recSet, recDel; recDrop: lo
	hi    int // recDrop
	key   []byte
	tat   uint64
	state []byte // recState
	exp   int64
	count uint64 // recCount
	bad   bool
}

func (r *recReader) next() bool {
	if len(r.b) == 0 || r.bad {
		return false
	}
	if len(r.b) < 4 { // the shortest entry: a delete of the empty key
		r.bad = true
		return false
	}
	r.kind, r.slot = r.b[0], int(r.b[1])<<8|int(r.b[2])
	switch r.kind {
	case recCount:
		if len(r.b) < 9 {
			r.bad = true
			return false
		}
		r.count = binary.BigEndian.Uint64(r.b[1:])
		r.b = r.b[9:]
		return true
	case recDrop:
		if len(r.b) < 5 {
			r.bad = true
			return false
		}
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
		if w <= 0 || uint64(len(rest)) < need || r.slot >= cluster.SlotCount {
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
	case recState:
		n, w := binary.Uvarint(r.b[3:])
		if w <= 0 || uint64(len(r.b)-3-w) < n || r.slot >= cluster.SlotCount {
			r.bad = true
			return false
		}
		rest := r.b[3+w:]
		r.key, rest = rest[:n], rest[n:]
		sn, sw := binary.Uvarint(rest)
		if sw <= 0 || sn < 2 || uint64(len(rest)-sw) < sn+8 {
			r.bad = true
			return false
		}
		rest = rest[sw:]
		r.state = rest[:sn]
		if _, err := limit.Decode(r.state); err != nil {
			r.bad = true
			return false
		}
		r.exp = int64(binary.BigEndian.Uint64(rest[sn:]))
		r.b = rest[sn+8:]
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
	Pending       int64 // changes waiting to be committed, and the keys of shards waiting to be rewritten
	Snapshots     int64 // snapshot rounds finished (old records deleted)
	// CorruptRecordsLost is how many synced log records a damaged data dir
	// had lost when it was loaded anyway (Config.RecoverCorrupt).
	CorruptRecordsLost int64
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
	end := slices.Min(p.starts)
	if p.lastCount != 0 {
		end = min(end, p.lastCount) // the latest count stays: load checks it
	}
	span := pebble.KeyRange{Start: logKey(&lo, 0), End: logKey(&hi, end)}
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

// readLog calls fn with every entry of every record, in order, but the
// counts, of which it keeps the last; it sets the last sequence number and
// returns the log's size in bytes.
func (p *persister) readLog(fn func(r *recReader, entry []byte)) (size int64, err error) {
	// Pebble may panic on damaged data instead of failing the read: that is
	// a refusal to load, not a crash.
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("pebble panicked: %v", r)
		}
	}()
	it, err := p.db().NewIter(&pebble.IterOptions{LowerBound: []byte{prefixLog}, UpperBound: []byte{prefixLog + 1}})
	if err != nil {
		return 0, err
	}
	for it.First(); it.Valid(); it.Next() {
		k := it.Key()
		if len(k) != logKeyLen {
			_ = it.Close()
			return 0, fmt.Errorf("%w: a record key is %q", errCorruptLog, k)
		}
		v, err := it.ValueAndErr()
		if err != nil {
			_ = it.Close()
			return 0, err
		}
		size += int64(len(k) + len(v))
		r := recReader{b: v}
		for rest := r.b; r.next(); rest = r.b {
			if r.kind == recCount {
				p.loadedCount, p.lastCount = r.count, binary.BigEndian.Uint64(k[1:])
				continue
			}
			fn(&r, rest[:len(rest)-len(r.b)])
		}
		if r.bad {
			_ = it.Close()
			return 0, fmt.Errorf("%w: record %d does not decode", errCorruptLog, binary.BigEndian.Uint64(k[1:]))
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
		case recState:
			h := sh.t.hash(r.key)
			ei := sh.t.findHash(r.key, h)
			if ei < 0 {
				ei = int64(sh.t.insertFor(r.key, h, limit.KindOf(r.state)))
			}
			sh.setState(uint32(ei), r.state, r.exp)
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
