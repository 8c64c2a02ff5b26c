package store

import (
	"bytes"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"syscall"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/wal"
)

// Opening a data dir checks it first and writes nothing to one it refuses:
// the checks run on a read-only open, and only a dir that passes them (or
// that Config.RecoverCorrupt lets through) is opened for writing.
//
// What the checks can see. Pebble checksums every table block and every WAL
// chunk, so a damaged table is caught when it is read. A damaged or cut WAL
// is another matter: to Pebble, a WAL that stops making sense is a torn
// tail, the end of a log that a crash cut short, and it replays what comes
// before and drops the rest without a word. (Its WAL sync offsets, meant to
// tell the two apart, undercount in this version, and the last commit's
// offset is only ever carried by the chunks after it: the chunks after a
// flipped byte near the end never prove it.) So cellserver counts for
// itself. Every commit carries the number of log records committed so far
// (a 'c' record), and after each sync, before any reply that waited for the
// sync is sent, the committer writes that number, now durable, to the file
// cellserver.mark beside Pebble's. A crash, kill -9 or power loss, can only
// lose what had not been synced, which the mark never counts: so a log that
// replays to fewer records than the mark lost records that had reached the
// disk, and was damaged after. That is refused; a torn tail (fewer records
// than were committed, never fewer than the mark) is a legitimate loss of
// the last unsynced changes and is not.
//
// (The records' own sequence numbers cannot tell: a shard numbers a record
// when it builds it and the shards' records reach the committer in any
// order, so the numbers on disk have gaps at any time, and after a batch
// dropped for a resync they keep them for good.)
//
// The mark is written in place after every sync without a sync of its own
// (one pwrite: an fsync of the mark per group commit would double the
// cost of --fsync always), and synced at most once a second and at Close.
// After a process crash (kill -9, a panic, the OOM killer) the kernel still
// has the write, so the mark is exact and any damage to a synced record is
// refused. After an OS crash or power loss the mark on disk can lag by the
// last second's syncs, so a WAL damaged in that second's records as well
// passes as a torn tail, unless Pebble's sync offsets prove it.
//
// The file holds two slots, each a checksummed line, 4 KiB apart so that a
// write torn by a power loss damages one slot at most; writes alternate
// between them and the larger valid count wins (within one file the count
// only grows: a reset replaces the whole file). A file of one line, as a
// reset writes it, is a mark with one slot.
const (
	markFile    = "cellserver.mark"
	ballastFile = "cellserver.ballast"
	probeFile   = "cellserver.probe"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// encodeMark is the mark file's content for n synced records: one line,
// checksummed, so that a damaged mark is not mistaken for a small one.
func encodeMark(n uint64) []byte {
	body := fmt.Sprintf("%s synced-records %d", formatValue, n)
	return fmt.Appendf(nil, "%s crc32c %08x\n", body, crc32.Checksum([]byte(body), castagnoli))
}

func decodeMark(b []byte) (uint64, error) {
	line := strings.TrimSuffix(string(b), "\n")
	body, sum, ok := strings.Cut(line, " crc32c ")
	fields := strings.Fields(body)
	if !ok || len(fields) != 3 || fields[0] != formatValue || fields[1] != "synced-records" {
		return 0, errors.New("not a cellserver mark")
	}
	if want := fmt.Sprintf("%08x", crc32.Checksum([]byte(body), castagnoli)); sum != want {
		return 0, errors.New("checksum mismatch")
	}
	return strconv.ParseUint(fields[2], 10, 64)
}

// errMarkDamaged marks a mark file that cannot be decoded.
var errMarkDamaged = errors.New(markFile + " is damaged")

// The mark's slots: where each begins, and the bytes each write covers (a
// line and zeros after it, so that a longer line never leaves a shorter
// one's end behind).
const (
	markSlotStride = 4096
	markSlotBytes  = 128
)

// readMark returns the mark's synced record count, the larger of its valid
// slots; ok is false if there is no mark (a dir written before marks
// existed, or one never synced). A mark with no valid slot is damaged.
func readMark(fs vfs.FS, dir string) (n uint64, ok bool, err error) {
	f, err := fs.Open(fs.PathJoin(dir, markFile))
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return 0, false, nil
		}
		return 0, false, fmt.Errorf("store: data dir %s: cannot read %s: %w", dir, markFile, err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 2*markSlotStride))
	if err != nil {
		return 0, false, fmt.Errorf("store: data dir %s: cannot read %s: %w", dir, markFile, err)
	}
	var firstErr error
	for off := 0; off < len(b); off += markSlotStride {
		slot := bytes.TrimRight(b[off:min(off+markSlotStride, len(b))], "\x00")
		v, err := decodeMark(slot)
		if err != nil {
			if firstErr == nil {
				firstErr = err
			}
			continue
		}
		n, ok = max(n, v), true
	}
	if !ok {
		if firstErr == nil {
			firstErr = errors.New("empty")
		}
		return 0, false, fmt.Errorf("store: data dir %s is corrupt: %w (%v)", dir, errMarkDamaged, firstErr)
	}
	return n, true, nil
}

// markWriter keeps cellserver.mark open to write the synced count in
// place, alternating between its slots. Its methods are called by one
// goroutine at a time (the committer; Close once the committer stopped),
// except sync, which may run beside set.
type markWriter struct {
	f    vfs.File
	slot int64  // the slot the next write goes to
	n    uint64 // the count last written
}

// createMark replaces the mark with one saying n (see writeMark) and opens
// it for in-place writes; the reset's line is slot 0, so writes start at 1.
func createMark(fs vfs.FS, dir string, n uint64) (*markWriter, error) {
	if err := writeMark(fs, dir, n); err != nil {
		return nil, err
	}
	f, err := fs.OpenReadWrite(fs.PathJoin(dir, markFile), vfs.WriteCategoryUnspecified)
	if err != nil {
		return nil, err
	}
	return &markWriter{f: f, slot: 1, n: n}, nil
}

// set writes n to the next slot, not synced. A failed write leaves the
// slot to be written again next time, so the other one keeps the last good
// count whatever the failed write left behind.
func (m *markWriter) set(n uint64) error {
	if n == m.n {
		return nil
	}
	var buf [markSlotBytes]byte
	copy(buf[:], encodeMark(n))
	if _, err := m.f.WriteAt(buf[:], m.slot*markSlotStride); err != nil {
		return err
	}
	m.slot ^= 1
	m.n = n
	return nil
}

func (m *markWriter) sync() error  { return m.f.SyncData() }
func (m *markWriter) close() error { return m.f.Close() }

// writeMark replaces the mark atomically with one saying n (a synced
// temporary file renamed over it, then the directory synced).
func writeMark(fs vfs.FS, dir string, n uint64) error {
	tmp := fs.PathJoin(dir, markFile+".tmp")
	f, err := fs.Create(tmp, vfs.WriteCategoryUnspecified)
	if err != nil {
		return err
	}
	_, err = f.Write(encodeMark(n))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = fs.Rename(tmp, fs.PathJoin(dir, markFile))
	}
	if err != nil {
		_ = fs.Remove(tmp)
		return err
	}
	d, err := fs.OpenDir(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// dataDir is a data dir being opened or in use: its lock, held from the
// first check to Close, and what opening it found.
type dataDir struct {
	dir     string
	fs      vfs.FS
	cfg     *Config
	log     *slog.Logger
	lock    *pebble.Lock
	events  *pebbleEvents
	space   *diskSpace
	ro      bool   // the DB open returned is read-only
	mark    uint64 // synced records per the mark (0: no mark)
	hasMark bool
	badMark bool   // the mark was damaged and is ignored (RecoverCorrupt): rewrite it
	lost    int64  // records the mark counts that the log no longer has (RecoverCorrupt)
	cutLost uint64 // records lost from older WALs cut by cutDamagedWALs (countGaps)
}

// openDataDir opens cfg.DataDir for loading, refusing anything it should
// not touch: a dir locked by another process, a non-empty dir that holds no
// cellserver data, a corrupt or incompatible database. The DB it returns is
// read-only unless the dir was just created or converted; once the log is
// loaded and checked (checkLoaded), writable reopens it for writing.
func openDataDir(cfg *Config) (*dataDir, *pebble.DB, error) {
	fs := cfg.FS
	if fs == nil {
		fs = vfs.Default
	}
	d := &dataDir{dir: cfg.DataDir, fs: fs, cfg: cfg, log: cfg.Logger}
	if err := fs.MkdirAll(d.dir, 0o755); err != nil {
		return nil, nil, fmt.Errorf("store: cannot create data dir %s: %w", d.dir, err)
	}
	names, err := fs.List(d.dir)
	if err != nil {
		return nil, nil, fmt.Errorf("store: cannot read data dir %s: %w", d.dir, err)
	}
	var total uint64
	if u, err := fs.GetDiskUsage(d.dir); err == nil {
		total = u.TotalBytes
	}
	cfg.ensureDiskDefaults(total)
	fresh := !looksLikePebble(names)
	if fresh && !onlyLeftovers(names) {
		return nil, nil, fmt.Errorf("store: data dir %s is not empty and holds no cellserver data; refusing to use it (choose an empty or new directory)", d.dir)
	}
	if d.lock, err = pebble.LockDirectory(d.dir, fs); err != nil {
		if errors.Is(err, syscall.EROFS) || errors.Is(err, os.ErrPermission) {
			return nil, nil, fmt.Errorf("store: data dir %s cannot be written: %v", d.dir, err)
		}
		return nil, nil, fmt.Errorf("%w: %s (%v)", ErrDataDirInUse, d.dir, err)
	}
	d.space = newDiskSpace(fs, d.dir, cfg)
	d.events = newPebbleEvents(cfg.Logger, d.space)
	db, err := d.open(fresh)
	if err != nil {
		d.close()
		return nil, nil, err
	}
	return d, db, nil
}

func (d *dataDir) open(fresh bool) (*pebble.DB, error) {
	if fresh {
		db, err := d.pebbleOpen(false)
		if err != nil {
			return nil, err
		}
		if err := guard(func() error { return db.Set([]byte(formatKey), []byte(formatValue), pebble.Sync) }); err != nil {
			_ = guardAll(db.Close)
			return nil, fmt.Errorf("store: cannot write to data dir %s: %w", d.dir, err)
		}
		return db, nil
	}
	var err error
	if d.mark, d.hasMark, err = readMark(d.fs, d.dir); err != nil {
		if !errors.Is(err, errMarkDamaged) {
			return nil, err
		}
		if !d.cfg.RecoverCorrupt {
			return nil, fmt.Errorf("%w; refusing to start (nothing was changed; --recover-corrupt yes ignores it and writes it anew)", err)
		}
		// The mark only tells how much the log must hold: without it the
		// log is taken as it replays, and the mark is written anew.
		d.badMark = true
		d.log.Warn("data dir: "+markFile+" is damaged; ignoring it, the log is not checked against it (--recover-corrupt yes)", "dir", d.dir, "err", oneLine(err.Error()))
	}
	db, err := d.pebbleOpenRaw(true)
	if err != nil && d.cfg.RecoverCorrupt && pebble.IsCorruptionError(err) && d.events.corruptFile() == "" {
		// A WAL Pebble proved damaged (an older WAL that does not end
		// cleanly, or a chunk its sync offsets vouch for): keep a copy,
		// cut it where its readable records end, and open what is left.
		if err := d.cutDamagedWALs(); err != nil {
			return nil, err
		}
		db, err = d.pebbleOpenRaw(true)
	}
	if err != nil {
		return nil, d.refusal(err)
	}
	got, err := readFormat(db)
	if errors.Is(err, errNoFormat) && !d.hasMark && !d.badMark && isEmpty(db) {
		// A first start that stopped after Pebble made its files, before
		// the format key was written: nothing was ever stored here.
		_ = guardAll(db.Close)
		d.log.Info("data dir holds no data yet (an earlier first start stopped early); starting it anew", "dir", d.dir)
		return d.open(true)
	}
	if err != nil {
		_ = guardAll(db.Close)
		return nil, d.refusal(err)
	}
	if got == formatOld {
		// Converting writes, so the dir is opened for writing; the
		// conversion reads every old entry first, and refuses on error.
		_ = guardAll(db.Close)
		if db, err = d.pebbleOpen(false); err != nil {
			return nil, err
		}
		n, err := migrateV1(db)
		if err != nil {
			_ = guardAll(db.Close)
			return nil, fmt.Errorf("store: cannot convert data dir %s from %s: %w", d.dir, formatOld, err)
		}
		d.log.Info("data dir converted to the log format", "dir", d.dir, "from", formatOld, "to", formatValue, "keys", n)
		return db, nil
	}
	if got != formatValue {
		_ = guardAll(db.Close)
		return nil, fmt.Errorf("store: data dir %s holds format %q, this cellserver reads %q; refusing to start", d.dir, got, formatValue)
	}
	d.ro = true
	return db, nil
}

// readFormat returns the data dir's format marker.
func readFormat(db *pebble.DB) (string, error) {
	var got string
	err := guardAll(func() error {
		v, closer, err := db.Get([]byte(formatKey))
		if err != nil {
			return err
		}
		got = string(v)
		return closer.Close()
	})
	if errors.Is(err, pebble.ErrNotFound) {
		return "", fmt.Errorf("store: %w", errNoFormat)
	}
	return got, err
}

// errNoFormat: the format key is missing.
var errNoFormat = fmt.Errorf("format marker %q missing", formatKey)

// isEmpty reports whether db holds no key at all.
func isEmpty(db *pebble.DB) bool {
	empty := false
	_ = guardAll(func() error {
		it, err := db.NewIter(nil)
		if err != nil {
			return err
		}
		empty = !it.First() && it.Error() == nil
		return it.Close()
	})
	return empty
}

// checkLoaded compares the records the log replayed to (committed) with
// the mark. Fewer is a loss of synced records: refused, or under
// RecoverCorrupt counted and logged, with what cutDamagedWALs found missing
// before the newest WAL (which the mark cannot see: later WALs carry the
// count on). It reads nothing from the dir.
func (d *dataDir) checkLoaded(committed uint64) error {
	if d.cutLost > 0 {
		d.lost = int64(d.cutLost)
		d.log.Warn("data dir is corrupt; starting with what is readable (--recover-corrupt yes)", "dir", d.dir,
			"problem", "commits are missing between the readable records of the write-ahead logs, where an older one was cut", "records_lost", d.cutLost)
	}
	if !d.hasMark || committed >= d.mark {
		return nil
	}
	lost := d.mark - committed
	what := fmt.Sprintf("its log replays to %d records, but %d had been synced (per %s): %d records are missing, a write-ahead log (newest: %s) is truncated or corrupt",
		committed, d.mark, markFile, lost, d.newestWAL())
	if !d.cfg.RecoverCorrupt {
		return fmt.Errorf("store: data dir %s is corrupt: %s; refusing to start (nothing was changed; --recover-corrupt yes starts with what is readable)", d.dir, what)
	}
	d.lost += int64(lost)
	d.log.Warn("data dir is corrupt; starting with what is readable (--recover-corrupt yes)", "dir", d.dir, "problem", what, "records_lost", lost)
	return nil
}

// newestWAL names the newest WAL file, where a torn or cut tail would be.
func (d *dataDir) newestWAL() string {
	logs, err := wal.Scan(wal.Dir{FS: d.fs, Dirname: d.dir})
	if err != nil || len(logs) == 0 || logs[len(logs)-1].NumSegments() == 0 {
		return "none"
	}
	ll := logs[len(logs)-1]
	_, path := ll.SegmentLocation(ll.NumSegments() - 1)
	return d.fs.PathBase(path)
}

// cutDamagedWALs copies every WAL whose records stop before its end to
// NAME.corrupt and truncates it where its readable records end, so that
// Pebble replays up to there (RecoverCorrupt only).
func (d *dataDir) cutDamagedWALs() error {
	logs, err := wal.Scan(wal.Dir{FS: d.fs, Dirname: d.dir})
	if err != nil {
		return fmt.Errorf("store: data dir %s: %w", d.dir, err)
	}
	cut := map[int]bool{}
	for i, ll := range logs {
		if ll.NumSegments() != 1 {
			continue
		}
		_, path := ll.SegmentLocation(0)
		end, size, err := readableEnd(ll, d.fs, path)
		if err != nil {
			return fmt.Errorf("store: data dir %s: reading %s: %w", d.dir, d.fs.PathBase(path), err)
		}
		if end >= size {
			continue
		}
		keep := path + ".corrupt"
		if err := vfs.Copy(d.fs, path, keep); err != nil {
			return fmt.Errorf("store: data dir %s: cannot keep a copy of %s: %w", d.dir, d.fs.PathBase(path), err)
		}
		if err := cutFile(d.fs, d.dir, path, end); err != nil {
			return fmt.Errorf("store: data dir %s: cannot cut %s: %w", d.dir, d.fs.PathBase(path), err)
		}
		d.log.Warn("write-ahead log cut where its readable records end (--recover-corrupt yes)", "file", d.fs.PathBase(path),
			"kept_bytes", end, "dropped_bytes", size-end, "copy", d.fs.PathBase(keep))
		cut[i] = true
	}
	if len(cut) == 0 {
		return nil
	}
	// The mark counts only what the newest WAL lacks: records cut from an
	// older one are missing between the counts of the WALs around it.
	lost, unknown, err := countGaps(logs, cut)
	if err != nil {
		return fmt.Errorf("store: data dir %s: counting the records the cut lost: %w", d.dir, err)
	}
	d.cutLost = lost
	if unknown {
		d.log.Warn("data dir: a write-ahead log was cut before any count of records it can be compared with; corrupt_records_lost does not include what it lost (--recover-corrupt yes)", "dir", d.dir)
	}
	return nil
}

// countGaps reads the readable records of every WAL, oldest first, and adds
// up the log records committed between one commit's count record and the
// next that none of the WALs holds any more: each commit's count includes
// its own records, so the count before a commit is its count less the
// records it holds, and it must equal the previous commit's count. A commit
// the disk never took (a failed Apply) gives a smaller count, never a gap.
// unknown reports a cut WAL with no count before its cut point to compare.
func countGaps(logs []wal.LogicalLog, cut map[int]bool) (lost uint64, unknown bool, err error) {
	var last uint64
	have := false
	for i, ll := range logs {
		if err := eachBatch(ll, func(repr []byte) {
			count, recs, ok := batchCount(repr)
			if !ok {
				return
			}
			if have && count >= recs && count-recs > last {
				lost += count - recs - last
			}
			last, have = count, true
		}); err != nil {
			return 0, false, err
		}
		if cut[i] && !have {
			unknown = true
		}
	}
	return lost, unknown, nil
}

// eachBatch calls f with every batch a WAL holds up to its first unreadable
// record.
func eachBatch(ll wal.LogicalLog, f func(repr []byte)) error {
	r := ll.OpenForRead()
	defer r.Close()
	for {
		rr, _, err := r.NextRecord()
		if err != nil {
			return nil // EOF, or where a cut WAL's readable records end
		}
		b, err := io.ReadAll(rr)
		if err != nil {
			return nil
		}
		f(b)
	}
}

// batchCount finds a commit's count record in a WAL batch and counts the
// log records beside it; ok is false for a batch with none (the format
// key, a cut of old records).
func batchCount(repr []byte) (count, recs uint64, ok bool) {
	var b pebble.Batch
	if b.SetRepr(repr) != nil {
		return 0, 0, false
	}
	r := b.Reader()
	for {
		kind, k, v, more, err := r.Next()
		if err != nil || !more {
			return count, recs, ok
		}
		if kind != pebble.InternalKeyKindSet || len(k) != logKeyLen || k[0] != prefixLog {
			continue
		}
		if n, isCount := countRecord(v); isCount {
			count, ok = n, true
		} else {
			recs++
		}
	}
}

// cutFile keeps the first n bytes of path: a synced copy of them is renamed
// over it.
func cutFile(fs vfs.FS, dir, path string, n int64) error {
	src, err := fs.Open(path)
	if err != nil {
		return err
	}
	defer src.Close()
	tmp := path + ".cut"
	dst, err := fs.Create(tmp, vfs.WriteCategoryUnspecified)
	if err != nil {
		return err
	}
	_, err = io.Copy(dst, io.LimitReader(src, n))
	if err == nil {
		err = dst.Sync()
	}
	if cerr := dst.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = fs.Rename(tmp, path)
	}
	if err != nil {
		_ = fs.Remove(tmp)
		return err
	}
	dd, err := fs.OpenDir(dir)
	if err != nil {
		return err
	}
	defer dd.Close()
	return dd.Sync()
}

// readableEnd returns the offset where ll's readable records end, and the
// file's size.
func readableEnd(ll wal.LogicalLog, fs vfs.FS, path string) (end, size int64, err error) {
	st, err := fs.Stat(path)
	if err != nil {
		return 0, 0, err
	}
	r := ll.OpenForRead()
	defer r.Close()
	for {
		_, off, err := r.NextRecord()
		if errors.Is(err, io.EOF) {
			return st.Size(), st.Size(), nil
		}
		if err != nil {
			return off.Physical, st.Size(), nil
		}
	}
}

// pebbleOpen opens the dir with Pebble (read-only for the checks), turning
// a panic or a Fatalf into an error: every failure is one line.
func (d *dataDir) pebbleOpen(readOnly bool) (*pebble.DB, error) {
	db, err := d.pebbleOpenRaw(readOnly)
	if err != nil {
		return nil, d.refusal(err)
	}
	return db, nil
}

// pebbleOpenRaw is pebbleOpen returning Pebble's error as it is.
func (d *dataDir) pebbleOpenRaw(readOnly bool) (db *pebble.DB, err error) {
	err = guardAll(func() error {
		db, err = pebble.Open(d.dir, d.options(readOnly))
		return err
	})
	return db, err
}

// refusal words an error met while opening or loading as one line, naming
// the damaged file when Pebble reported one.
func (d *dataDir) refusal(err error) error {
	msg := oneLine(err.Error())
	if path := d.events.corruptFile(); path != "" {
		return fmt.Errorf("store: data dir %s is corrupt: table %s: %s; refusing to start (nothing was changed; --recover-corrupt cannot skip a damaged table: restore the dir from a backup, or move it away to start empty)",
			d.dir, d.fs.PathBase(path), msg)
	}
	if pebble.IsCorruptionError(err) {
		return fmt.Errorf("store: data dir %s is corrupt: %s; refusing to start (nothing was changed; if a write-ahead log is damaged, --recover-corrupt yes starts with what is readable)", d.dir, msg)
	}
	if errors.Is(err, pebble.ErrDBDoesNotExist) {
		// Open only gets here for a dir that holds Pebble's files: what
		// is missing is the marker naming the current MANIFEST.
		return fmt.Errorf("store: data dir %s is corrupt: it holds Pebble's files but no marker.manifest.* naming the current MANIFEST (%s); refusing to start (nothing was changed; restore the dir from a backup, or move it away to start empty)", d.dir, msg)
	}
	return fmt.Errorf("store: cannot open data dir %s (not modified): %s", d.dir, msg)
}

// oneLine keeps the first line of a message, and at most 400 bytes of it.
func oneLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	if len(s) > 400 {
		s = s[:400] + "..."
	}
	return s
}

// writable closes the read-only DB the log was loaded from (if it is) and
// opens the dir for writing. Pebble flushes the WAL it replays before Open returns,
// and on a full disk it would retry that flush forever: so the space it
// needs is checked first (the ballast is given up for it if need be).
func (d *dataDir) writable(ro *pebble.DB, committed uint64) (*pebble.DB, error) {
	db := ro // created or converted: already writable
	if d.ro {
		if err := guard(ro.Close); err != nil {
			return nil, fmt.Errorf("store: data dir %s: %w", d.dir, err)
		}
		if err := d.space.roomToOpen(d.walBytes()); err != nil {
			return nil, err
		}
		var err error
		if db, err = d.pebbleOpen(false); err != nil {
			return nil, err
		}
	}
	if d.lost > 0 || d.badMark {
		// The mark must match the log from now on, or the next start
		// would report the same loss (or damage) again.
		if err := writeMark(d.fs, d.dir, committed); err != nil {
			_ = guardAll(db.Close)
			return nil, fmt.Errorf("store: data dir %s: cannot reset %s after recovery: %w", d.dir, markFile, err)
		}
	}
	return db, nil
}

// walBytes is the size of the WAL files a writable open replays and flushes.
func (d *dataDir) walBytes() uint64 {
	logs, err := wal.Scan(wal.Dir{FS: d.fs, Dirname: d.dir})
	if err != nil {
		return 0
	}
	var n uint64
	for _, ll := range logs {
		s, _ := ll.PhysicalSize()
		n += s
	}
	return n
}

// reopen opens the dir for writing again after a fatal Pebble error (the
// committer closed the broken DB; the lock is still held).
func (d *dataDir) reopen() (*pebble.DB, error) {
	if err := d.space.roomToOpen(d.walBytes()); err != nil {
		return nil, err
	}
	return d.pebbleOpen(false)
}

// close releases the dir's lock (after its DB is closed).
func (d *dataDir) close() {
	if d.lock != nil {
		_ = d.lock.Close()
		d.lock = nil
	}
}

func (d *dataDir) options(readOnly bool) *pebble.Options {
	opts := &pebble.Options{
		FS:                 d.fs,
		FormatMajorVersion: pebbleFormat,
		Logger:             d.events,
		EventListener:      d.events.listener(),
		MemTableSize:       d.cfg.MemTableSize,
		Lock:               d.lock,
		ReadOnly:           readOnly,
		// Records arrive in key order, so flushed files hardly overlap and
		// most compactions just move files down. These thresholds (kept
		// from the first format, where they did better in benchmarks) let flushes
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
	return opts
}

// onlyLeftovers reports whether a dir that holds no Pebble database holds
// nothing but what a first start that failed early leaves: Pebble's LOCK
// and format version marker (pebble.Open makes them first), a MANIFEST the
// marker naming it was not written for yet, and files of cellserver's own.
// Such a dir is taken as new.
func onlyLeftovers(names []string) bool {
	for _, n := range names {
		switch {
		case n == "LOCK", strings.HasPrefix(n, "marker.format-version"), strings.HasPrefix(n, "MANIFEST-"),
			n == ballastFile, n == ballastFile+".tmp", n == markFile+".tmp", n == probeFile:
		default:
			return false
		}
	}
	return true
}

// looksLikePebble reports whether dir holds a Pebble database: the marker
// naming its current MANIFEST (CURRENT in older formats), or a MANIFEST
// with data beside it (its marker lost: refused as corrupt). A MANIFEST
// alone is a first start that stopped before Pebble wrote its marker.
func looksLikePebble(names []string) bool {
	manifest, data := false, false
	for _, n := range names {
		switch {
		case strings.HasPrefix(n, "marker.manifest") || n == "CURRENT":
			return true
		case strings.HasPrefix(n, "MANIFEST-"):
			manifest = true
		case strings.HasSuffix(n, ".sst") || strings.HasSuffix(n, ".log") || n == markFile:
			data = true
		}
	}
	return manifest && data
}
