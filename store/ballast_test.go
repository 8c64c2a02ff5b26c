package store

import (
	"errors"
	"fmt"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestBallastWrittenAtomically: the ballast is never written in place (a
// crash mid-write would leave a short one, trusted forever), and one found
// short at a start is written again.
func TestBallastWrittenAtomically(t *testing.T) {
	mem, _ := fullDisk()
	var inPlace atomic.Int64
	fs := errorfs.Wrap(mem, errorfs.InjectorFunc(func(op errorfs.Op) error {
		if op.Kind.ReadOrWrite() == errorfs.OpIsWrite && mem.PathBase(op.Path) == ballastFile && op.Kind != errorfs.OpRemove {
			inPlace.Add(1)
		}
		return nil
	}))
	var log lockedLog
	cfg := failCfg(fs, &log) // ballast 2 MiB
	st, err := New(cfg)
	require.NoError(t, err)
	run(st, throttleOp("k", 5, 1, 3600, 1))
	require.NoError(t, st.Close())
	ballast := mem.PathJoin("db", ballastFile)
	fi, err := mem.Stat(ballast)
	require.NoError(t, err)
	require.Equal(t, int64(2<<20), fi.Size())
	assert.Zero(t, inPlace.Load(), "the ballast is written under another name, then renamed")

	// A ballast cut short (as by a crash mid-write, before it was atomic).
	f, err := mem.Create(ballast, vfs.WriteCategoryUnspecified)
	require.NoError(t, err)
	_, err = f.Write(make([]byte, 4096))
	require.NoError(t, err)
	require.NoError(t, f.Close())
	st, err = New(cfg)
	require.NoError(t, err)
	defer st.Close()
	run(st, throttleOp("k2", 5, 1, 3600, 1))
	fi, err = mem.Stat(ballast)
	require.NoError(t, err)
	assert.Equal(t, int64(2<<20), fi.Size(), "a short ballast is written again")
}

// TestBallastWriteErrorDoesNotBlockWrites: a ballast write failing for
// another reason than a full disk (EIO, EDQUOT) is not taken for a full
// disk, retried every second while every change waits: writes go on
// without the ballast, and the failure is logged once.
func TestBallastWriteErrorDoesNotBlockWrites(t *testing.T) {
	for _, errno := range []syscall.Errno{syscall.EIO, syscall.EDQUOT} {
		t.Run(errno.Error(), func(t *testing.T) {
			mem, _ := fullDisk()
			fs := errorfs.Wrap(mem, errorfs.InjectorFunc(func(op errorfs.Op) error {
				if op.Kind == errorfs.OpFileWrite && mem.PathBase(op.Path) != "" &&
					(mem.PathBase(op.Path) == ballastFile || mem.PathBase(op.Path) == ballastFile+".tmp") {
					return fmt.Errorf("injected: %w", errno)
				}
				return nil
			}))
			var log lockedLog
			cfg := failCfg(fs, &log)
			st, err := New(cfg)
			require.NoError(t, err)
			for i := 0; i < 20; i++ {
				run(st, throttleOp(fmt.Sprint("k", i), 5, 1, 3600, 1))
			}
			require.Eventually(t, func() bool { return st.PersistStats().Changes >= 20 }, 3*time.Second, 10*time.Millisecond,
				"changes are written without the ballast")
			assert.NoError(t, st.PersistErr())
			assert.Equal(t, 1, log.lines("cannot write the ballast"))
			require.NoError(t, st.Close())
			st, err = New(Config{Shards: 2, Clock: wallClock(), SweepInterval: -1, DataDir: "db", FS: mem, MemTableSize: 1 << 20})
			require.NoError(t, err)
			defer st.Close()
			assert.Equal(t, int64(20), st.PersistStats().KeysLoaded)
			assert.False(t, errors.Is(st.PersistErr(), errNoSpace))
		})
	}
}

// TestBallastComesBackWithRoomAfterIt: once deleted, the ballast is written
// again only when it fits with the changes waiting (up to a ballast's worth
// of them), not with the first batch alone: under load near a full disk
// the batches after it took its room at once, and it was deleted and
// written again about once a second.
func TestBallastComesBackWithRoomAfterIt(t *testing.T) {
	mem, setAvail := fullDisk()
	require.NoError(t, mem.MkdirAll("db", 0o755))
	var log lockedLog
	const reserve, size, first, all = 4 << 20, 2 << 20, 4096, 1 << 20
	d := newDiskSpace(mem, "db", &Config{DiskReserve: reserve, BallastSize: size, Logger: log.logger()})
	// Written with the first batch, then deleted when the disk fills up.
	_, err := d.budget(first, first)
	require.NoError(t, err)
	setAvail(reserve / 2)
	_, err = d.budget(first, first)
	require.ErrorIs(t, err, errNoSpace)
	require.Equal(t, 1, log.lines("ballast deleted"))

	setAvail(reserve + size + first) // the ballast and the first batch fit, not the rest
	_, err = d.budget(first, all)
	require.ErrorIs(t, err, errNoSpace)
	assert.Contains(t, err.Error(), "writes resume once 7.0 MiB are")
	_, err = mem.Stat(d.path())
	require.Error(t, err, "not written")

	setAvail(reserve + size + all)
	b, err := d.budget(first, all)
	require.NoError(t, err)
	_, err = mem.Stat(d.path())
	require.NoError(t, err, "written")
	assert.Equal(t, uint64(all), b, "every waiting batch fits after the ballast")

	// A backlog larger than the ballast waits for a ballast's worth of
	// room after it, no more: it goes in parts.
	require.NoError(t, mem.Remove(d.path()))
	d.ballast = false
	setAvail(reserve + 2*size)
	b, err = d.budget(first, 64<<20)
	require.NoError(t, err)
	assert.Equal(t, uint64(size), b)
}

// TestBallastStaysWhileABacklogGoesInParts: a backlog larger than the room
// after the ballast is written in parts; the batches that do not fit wait
// for the next attempt, and the ballast just written stays (it was deleted
// again in the same attempt, and written again at the next, over and over).
func TestBallastStaysWhileABacklogGoesInParts(t *testing.T) {
	mem, setAvail := fullDisk()
	var log lockedLog
	const reserve, size = 1 << 20, 256 << 10
	cfg := Config{Shards: 2, Clock: wallClock(), SweepInterval: -1, DataDir: "db", Fsync: FsyncEverySec, FS: mem,
		MemTableSize: 1 << 20, DiskReserve: reserve, BallastSize: size, PersistInterval: time.Hour, Logger: log.logger()}
	st, err := New(cfg)
	require.NoError(t, err)
	defer st.Close()
	run(st, throttleOp("first", 5, 1, 3600, 1))
	st.persistAll()
	require.Eventually(t, func() bool { _, err := mem.Stat("db/" + ballastFile); return err == nil }, 5*time.Second, 10*time.Millisecond)
	setAvail(reserve / 2)
	fillKeys(t, st, "k", 30000) // about 1 MiB waits
	require.Eventually(t, func() bool { return log.lines("ballast deleted") == 1 }, 5*time.Second, 10*time.Millisecond)
	setAvail(reserve + 2*size + 4096) // room for the ballast and a ballast's worth after it
	// (At the next attempt: the retries back off up to 30 s.)
	require.Eventually(t, func() bool { _, err := mem.Stat("db/" + ballastFile); return err == nil }, 35*time.Second, 10*time.Millisecond)
	time.Sleep(3 * time.Second) // the retries after the first part (1 s, then 2 s)
	assert.Equal(t, 1, log.lines("ballast deleted"), "the ballast was deleted once, when the disk filled up")
}

// TestBallastFirstWriteNeedsRoomForTheFirstBatch: the ballast's first write
// (at a start, or never deleted for lack of space) waits for room for the
// first batch alone, whatever waits behind it: on a small disk, room for a
// ballast's worth of backlog too may never come, and nothing was written.
func TestBallastFirstWriteNeedsRoomForTheFirstBatch(t *testing.T) {
	mem, setAvail := fullDisk()
	require.NoError(t, mem.MkdirAll("db", 0o755))
	var log lockedLog
	const reserve, size, first = 4 << 20, 2 << 20, 4096
	d := newDiskSpace(mem, "db", &Config{DiskReserve: reserve, BallastSize: size, Logger: log.logger()})
	setAvail(reserve + size + first)
	b, err := d.budget(first, 64<<20)
	require.NoError(t, err)
	assert.Equal(t, uint64(first), b)
	_, err = mem.Stat(d.path())
	require.NoError(t, err, "written")
}
