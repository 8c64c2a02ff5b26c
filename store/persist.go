package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
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

// On-disk layout. Limiter keys are 'k' + slot (2 bytes, big endian) + key, so
// a shard's keys (a contiguous slot range) and a cluster slot are key ranges.
// The value is the TAT and the expiry in Unix ms, 8 bytes each, big endian.
// Metadata keys start with 'm'.
const (
	prefixKey   = 'k'
	valueLen    = 16
	formatKey   = "mformat"
	formatValue = "cellserver/1"
	// pebbleFormat is pinned so that an upgrade of the library never
	// silently rewrites a data dir into a format an older binary can't read.
	pebbleFormat = pebble.FormatTableFormatV6
)

// ErrDataDirInUse: another process holds the data dir's lock.
var ErrDataDirInUse = errors.New("store: data dir is in use by another process")

func encodeKey(dst []byte, slot int, key []byte) []byte { return appendKey(dst[:0], slot, key) }

// appendKey appends key's disk key (prefix, slot, key) to dst.
func appendKey(dst []byte, slot int, key []byte) []byte {
	return append(append(dst, prefixKey, byte(slot>>8), byte(slot)), key...)
}

func slotBound(slot int) []byte { return []byte{prefixKey, byte(slot >> 8), byte(slot)} }

func encodeValue(dst *[valueLen]byte, tat uint64, exp int64) []byte {
	binary.BigEndian.PutUint64(dst[:8], tat)
	binary.BigEndian.PutUint64(dst[8:], uint64(exp))
	return dst[:]
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
	retryEvery  time.Duration
	shards      []*shard
}

type commitReq struct {
	b    *pebble.Batch // may be nil: only wait for earlier changes
	wg   *sync.WaitGroup
	sh   *shard
	n    uint64 // shard's send sequence number of this request
	snap bool   // b holds the shard's whole state (a resync)
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
		// Every write-out is a batch of random keys spread over the whole
		// keyspace, so each L0 file overlaps all of Lbase: letting more L0
		// files gather before an L0 compaction rewrites Lbase once for
		// several write-outs instead of once per write-out.
		L0CompactionThreshold:     16,
		L0CompactionFileThreshold: 1000,
		L0StopWritesThreshold:     64,
	}
	// Values are 16 binary bytes and keys share prefixes that blocks already
	// compress: snappy would cost flush and compaction CPU for little space.
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
	var failed []*pebble.Batch // changes whose commit failed, retried first
	broken := false            // Pebble hit a fatal error: reopen needed
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
			if r.b == nil {
				continue
			}
			p.pending.Add(-int64(r.b.Count()))
			if r.snap {
				delete(needSnap, r.sh)
			}
			if broken || needSnap[r.sh] {
				_ = r.b.Close() // memory is the truth; the resync rewrites it
				continue
			}
			todo = append(todo, r.b)
		}
		committed := false
		for i, b := range todo {
			if broken {
				_ = b.Close()
				continue
			}
			db := p.db()
			err := guard(func() error { return db.Apply(b, pebble.NoSync) })
			var fatal errPebbleFatal
			switch {
			case errors.As(err, &fatal):
				p.fail(err)
				broken = true
				_ = b.Close()
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
				p.changes.Add(int64(b.Count()))
				_ = b.Close()
			}
			if len(todo) == 0 {
				break
			}
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
			}
			if r.wg != nil {
				r.wg.Done()
			}
		}
		clear(reqs)
		if quitting {
			for _, b := range failed {
				p.log.Error("persistence: changes could not be written before shutdown", "changes", b.Count())
				_ = b.Close()
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

// load reads shard sh's slot range into its table, dropping (and deleting
// from disk) entries that expired by nowMs.
func (p *persister) load(sh *shard, nowMs int64) error {
	lo, hi := sh.slotLo, sh.slotHi
	it, err := p.db().NewIter(&pebble.IterOptions{LowerBound: slotBound(lo), UpperBound: slotBound(hi)})
	if err != nil {
		return err
	}
	var loaded, expired int64
	for it.First(); it.Valid(); it.Next() {
		k, v := it.Key(), it.Value()
		if len(k) < 3 || len(v) != valueLen {
			_ = it.Close()
			return fmt.Errorf("store: corrupt entry %q in data dir", k)
		}
		tat := binary.BigEndian.Uint64(v[:8])
		exp := int64(binary.BigEndian.Uint64(v[8:]))
		if exp < nowMs {
			sh.batch().Delete(k, nil)
			expired++
			continue
		}
		ei := sh.t.insert(k[3:])
		sh.set(ei, tat, exp)
		sh.t.at(ei).setOnDisk()
		loaded++
	}
	if err := it.Close(); err != nil {
		return err
	}
	p.keysLoaded.Add(loaded)
	p.expiredLoad.Add(expired)
	return nil
}

// shardSlots returns the contiguous slot range [lo, hi) owned by shard i of n.
func shardSlots(i, n int) (lo, hi int) {
	return i * cluster.SlotCount / n, (i + 1) * cluster.SlotCount / n
}
