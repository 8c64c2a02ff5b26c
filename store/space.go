package store

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"syscall"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// diskSpace keeps Pebble off a full disk. Pebble treats some failed writes
// as fatal: a WAL it cannot extend or create panics its commit pipeline,
// and the unwinding unlocks a mutex twice, which no recover survives; a
// flush or compaction that fails is retried at once, forever. So the
// committer asks room before each write and feeds Pebble nothing while
// less than reserve bytes would be left: room for what Pebble may still
// write on its own after the last commit (a new WAL's preallocation, a
// memtable flush, some compaction output).
//
// The ballast, a file of zeros in the data dir (CockroachDB's emergency
// ballast), is deleted the moment space runs short, so that Pebble's work in
// flight can finish and a restart can flush its WAL; it is written again
// before writes resume, which therefore needs reserve + ballast + the
// changes waiting free (up to another ballast's worth of them, so that a
// large backlog can still go in parts; the first write of the ballast
// needs room for the first batch alone). Room for the first waiting batch
// alone was not enough: under load near a full disk the batches after it
// took the room at once, and the ballast was deleted and written again
// about once a second.
//
// Its methods are safe for concurrent use (the committer and Pebble's
// background error callback).
type diskSpace struct {
	fs      vfs.FS
	dir     string
	reserve uint64
	size    uint64 // the ballast's size; 0: no ballast
	total   uint64 // the file system's size; 0 if it does not say
	log     *slog.Logger

	mu      sync.Mutex
	ballast bool // the ballast file exists
	// A ballast write that failed for another reason than a lack of space
	// (EIO, EDQUOT: statfs cannot foresee those) does not hold writes
	// back: they go on without it, and it is tried again at retryAt.
	failed  bool
	retryAt time.Time
	// The dir was last found writable (a file created there) at probedAt.
	probedAt time.Time
	// released: the ballast was deleted for lack of space, so writing it
	// back waits for room for the changes waiting too (see resume).
	released bool
}

// probeEvery is how often at most budget checks that a file can be
// created in the data dir.
var probeEvery = time.Second

// ballastRetry is how long writes go on without the ballast after writing
// it failed for another reason than a lack of space.
const ballastRetry = time.Minute

func newDiskSpace(fs vfs.FS, dir string, cfg *Config) *diskSpace {
	d := &diskSpace{fs: fs, dir: dir, reserve: cfg.DiskReserve, log: cfg.Logger}
	if cfg.BallastSize > 0 {
		d.size = uint64(cfg.BallastSize)
	}
	if u, err := fs.GetDiskUsage(dir); err == nil {
		d.total = u.TotalBytes
	}
	_ = fs.Remove(d.tmpPath()) // a write cut short by a crash
	_ = fs.Remove(d.probePath())
	if st, err := fs.Stat(d.path()); err == nil {
		switch {
		case d.size == 0 || uint64(st.Size()) == d.size:
			d.ballast = true
		default:
			// Another size (the setting changed; or a ballast from before
			// it was written atomically, cut short): written again.
			if err := fs.Remove(d.path()); err != nil {
				d.ballast = true // released when space runs short, at least
			}
		}
	}
	return d
}

func (d *diskSpace) tmpPath() string { return d.path() + ".tmp" }

func (d *diskSpace) probePath() string { return d.fs.PathJoin(d.dir, probeFile) }

// probe creates and removes a file in the data dir, at most once per
// probeEvery. Pebble panics when it cannot create its next WAL, and that
// panic unwinds into a double unlock no recover survives (see diskSpace):
// a dir that was deleted, made read-only or immutable, or whose file
// system ran out of inodes (statfs's free bytes do not show it) must hold
// writes back instead, as a full disk does. A change in the second after a
// probe can still reach Pebble.
func (d *diskSpace) probe() error {
	if time.Since(d.probedAt) < probeEvery {
		return nil
	}
	f, err := d.fs.Create(d.probePath(), vfs.WriteCategoryUnspecified)
	if err == nil {
		err = errors.Join(f.Close(), d.fs.Remove(d.probePath()))
	}
	if err != nil {
		if errors.Is(err, syscall.ENOSPC) {
			return fmt.Errorf("%w: cannot create a file in %s (no inodes left?): %v", errNoSpace, d.dir, err)
		}
		return fmt.Errorf("store: cannot create a file in the data dir %s: %w", d.dir, err)
	}
	d.probedAt = time.Now()
	return nil
}

func (d *diskSpace) path() string { return d.fs.PathJoin(d.dir, ballastFile) }

// errNoSpace marks a write held back for lack of disk space.
var errNoSpace = errors.New("store: no space left on device")

// budget returns how many bytes may go to Pebble now, the first write
// being of first bytes, of all waiting. It writes the ballast first if it
// is missing and there is room for it and what waits (see resume), so that
// the two do not take turns.
// With no room it deletes the ballast and says why (see shortLocked). A file
// system that reports no usage (some test ones) has no limit.
func (d *diskSpace) budget(first, all uint64) (uint64, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.probe(); err != nil {
		return 0, err
	}
	u, err := d.fs.GetDiskUsage(d.dir)
	if errors.Is(err, vfs.ErrUnsupported) {
		return math.MaxUint64, nil
	}
	if err != nil {
		return 0, fmt.Errorf("store: cannot read the free space of the data dir %s: %w", d.dir, err)
	}
	avail := u.AvailBytes
	if !d.ballast && d.size > 0 && (!d.failed || !time.Now().Before(d.retryAt)) {
		if avail < d.resume(first, all) {
			return 0, d.shortLocked(avail, first, all)
		}
		switch err := d.writeBallast(); {
		case err == nil:
			if d.failed || d.released {
				d.log.Info("persistence: ballast written", "file", d.path())
			}
			d.ballast, d.failed = true, false
			avail -= d.size
		case errors.Is(err, syscall.ENOSPC):
			return 0, fmt.Errorf("%w: cannot write the ballast %s: %v", errNoSpace, d.path(), err)
		default:
			if !d.failed {
				d.log.Error("persistence: cannot write the ballast; writing without it, trying again every "+ballastRetry.String(), "file", d.path(), "err", oneLine(err.Error()))
			}
			d.failed, d.retryAt = true, time.Now().Add(ballastRetry)
		}
	}
	if avail < d.reserve+first {
		return 0, d.shortLocked(avail, first, all)
	}
	return avail - d.reserve, nil
}

// full is the error for n bytes of changes that do not fit in what budget
// allowed after the batches before them: the ballast stays.
func (d *diskSpace) full(n uint64) error {
	avail := uint64(0)
	if u, err := d.fs.GetDiskUsage(d.dir); err == nil {
		avail = u.AvailBytes
	}
	return fmt.Errorf("%w: %s free in %s; the next %s to write would leave less than the reserve of %s for Pebble",
		errNoSpace, mib(avail), d.dir, mib(n), mib(d.reserve))
}

// shortLocked deletes the ballast, the changes waiting (first bytes of
// all) not fitting, and says when writes resume.
func (d *diskSpace) shortLocked(avail, first, all uint64) error {
	d.releaseLocked(avail)
	need := d.resume(first, all)
	return fmt.Errorf("%w: %s free in %s; writes resume once %s are (a reserve of %s for Pebble, %s for the ballast, %s to write)",
		errNoSpace, mib(avail), d.dir, mib(need), mib(d.reserve), mib(d.size), mib(need-d.reserve-d.size))
}

// resume is the free space that writing the ballast needs, the first
// waiting write being of first bytes, of all waiting: room for the first
// alone the first time, and once it was deleted for lack of space, room
// for the changes waiting too (see diskSpace), which on a small disk may
// not come back before the backlog is dropped.
func (d *diskSpace) resume(first, all uint64) uint64 {
	if !d.released {
		return d.reserve + d.size + first
	}
	return d.reserve + d.size + max(first, min(all, d.size))
}

// release deletes the ballast (Pebble's background work ran out of space).
func (d *diskSpace) release() {
	avail := uint64(0)
	if u, err := d.fs.GetDiskUsage(d.dir); err == nil {
		avail = u.AvailBytes
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.releaseLocked(avail)
}

func (d *diskSpace) releaseLocked(avail uint64) {
	if !d.ballast {
		return
	}
	if err := d.fs.Remove(d.path()); err != nil && !errors.Is(err, syscall.ENOENT) {
		d.log.Error("persistence: cannot delete the ballast", "file", d.path(), "err", oneLine(err.Error()))
		return
	}
	d.ballast, d.released = false, true
	d.log.Warn("persistence: disk nearly full; ballast deleted to leave Pebble room, writes wait in memory", "dir", d.dir, "free", mib(avail), "ballast", mib(d.size))
}

// openSlack is what a writable open needs beyond 1.125 × its WALs to
// flush them (a MANIFEST, an OPTIONS file, a new WAL).
const openSlack = 1 << 20

// roomToOpen checks that a writable open can flush the walBytes of WAL it
// replays (giving up the ballast for it if need be).
func (d *diskSpace) roomToOpen(walBytes uint64) error {
	need := walBytes + walBytes/8 + openSlack
	u, err := d.fs.GetDiskUsage(d.dir)
	if err != nil || u.AvailBytes >= need {
		return nil
	}
	d.release()
	if u, err = d.fs.GetDiskUsage(d.dir); err != nil || u.AvailBytes >= need {
		return nil
	}
	return fmt.Errorf("store: data dir %s: no space left on device to open it: %s free, flushing its write-ahead log needs about %s (its data is unchanged; free some space)",
		d.dir, mib(u.AvailBytes), mib(need))
}

// writeBallast writes the ballast atomically: a synced temporary file
// renamed to its name, then the dir synced. A crash leaves no short one.
func (d *diskSpace) writeBallast() error {
	tmp := d.tmpPath()
	f, err := d.fs.Create(tmp, vfs.WriteCategoryUnspecified)
	if err != nil {
		return err
	}
	zeros := make([]byte, 1<<20)
	for left := d.size; left > 0 && err == nil; {
		n := min(left, uint64(len(zeros)))
		_, err = f.Write(zeros[:n])
		left -= n
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = d.fs.Rename(tmp, d.path())
	}
	if err != nil {
		_ = d.fs.Remove(tmp)
		return err
	}
	dir, err := d.fs.OpenDir(d.dir)
	if err != nil {
		return nil // the ballast is whole; only its name may not survive a crash
	}
	_ = dir.Sync()
	_ = dir.Close()
	return nil
}

// isNoSpace reports whether err is the file system being full.
func isNoSpace(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) || errors.Is(err, errNoSpace)
}

// mib formats a byte count for messages.
func mib(n uint64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }
