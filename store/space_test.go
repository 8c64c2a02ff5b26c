package store

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// lockedLog collects log lines for tests.
type lockedLog struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedLog) lines(substr string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Count(l.b.String(), substr)
}

func (l *lockedLog) logger() *slog.Logger { return slog.New(slog.NewTextHandler(l, nil)) }

// failCfg is the Config of the disk-failure tests: two shards under
// FsyncAlways, a 1 MiB memtable (a 4 MiB reserve, a 2 MiB ballast), the
// data dir "db" on fs, logging to log.
func failCfg(fs vfs.FS, log *lockedLog) Config {
	return Config{Shards: 2, Clock: wallClock(), SweepInterval: -1, DataDir: "db", Fsync: FsyncAlways, FS: fs,
		MemTableSize: 1 << 20, Logger: log.logger()}
}

// fullDisk is a file system whose free space the test sets.
func fullDisk() (*vfs.MemFS, func(avail uint64)) {
	mem := vfs.NewMem()
	set := func(avail uint64) {
		mem.TestingSetDiskUsage(vfs.DiskUsage{AvailBytes: avail, TotalBytes: 1 << 30, UsedBytes: 1<<30 - avail})
	}
	set(1 << 30)
	return mem, set
}

// TestFullDiskWaitsThenWritesOut: with less free space than the reserve,
// nothing reaches Pebble and the ballast is given up, while decisions keep
// coming from memory; once space is back the ballast is written again and
// so is every change.
func TestFullDiskWaitsThenWritesOut(t *testing.T) {
	mem, setAvail := fullDisk()
	var log lockedLog
	clk := wallClock()
	cfg := Config{Shards: 2, Clock: clk, SweepInterval: -1, DataDir: "db", Fsync: FsyncAlways, FS: mem,
		MemTableSize: 1 << 20, Logger: log.logger()} // reserve 4 MiB, ballast 2 MiB
	st, err := New(cfg)
	require.NoError(t, err)
	run(st, throttleOp("before", 5, 1, 3600, 1))
	ballast := mem.PathJoin("db", ballastFile)
	_, err = mem.Stat(ballast)
	require.NoError(t, err, "the ballast is written with the first commit")

	commits := st.PersistStats().Commits
	setAvail(3 << 20)
	// Under FsyncAlways a reply says its changes are on disk: the calls are
	// decided from memory, but they return only once space is back.
	var wg sync.WaitGroup
	var returned atomic.Int32
	ops := make([]*ThrottleReq, 100)
	for i := range ops {
		ops[i] = throttleOp(fmt.Sprint("full:", i), 5, 1, 3600, 1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			run(st, ops[i])
			returned.Add(1)
		}()
	}
	require.Eventually(t, func() bool { return st.PersistErr() != nil }, 5*time.Second, 10*time.Millisecond)
	require.ErrorContains(t, st.PersistErr(), "no space left on device")
	require.Never(t, func() bool { return returned.Load() > 0 }, 1500*time.Millisecond, 10*time.Millisecond,
		"no call is acknowledged while its changes cannot be written")
	assert.Equal(t, commits, st.PersistStats().Commits, "nothing reaches Pebble while the disk is full")
	_, err = mem.Stat(ballast)
	assert.Error(t, err, "the ballast is given up")
	assert.Equal(t, 1, log.lines("write failed"), "one line when writes start failing")
	assert.Equal(t, int64(100), st.PersistStats().Pending, "the held changes are pending (INFO changes_pending)")

	setAvail(1 << 30)
	wg.Wait()
	for _, op := range ops {
		require.NoError(t, op.Err)
		require.Equal(t, int64(5), op.Result.Remaining)
	}
	require.Eventually(t, func() bool { return st.PersistErr() == nil }, 5*time.Second, 10*time.Millisecond)
	assert.Zero(t, st.PersistStats().Pending)
	_, err = mem.Stat(ballast)
	assert.NoError(t, err, "the ballast is back")
	assert.Equal(t, 1, log.lines("writes succeed again"))
	require.NoError(t, st.Close())

	st, err = New(cfg)
	require.NoError(t, err)
	defer st.Close()
	for i := 0; i < 100; i++ {
		_, ok, _ := state(st, fmt.Sprint("full:", i))
		require.True(t, ok, "full:%d, changed while the disk was full, was written once space came back", i)
	}
}

// droppingStore is a store of failCfg on a disk whose free space the test
// sets, which drops any change that waits for the disk (maxFailedBytes 1,
// restored at the test's end).
func droppingStore(t *testing.T) (*Store, Config, func(uint64), *lockedLog) {
	t.Helper()
	v := maxFailedBytes
	t.Cleanup(func() { maxFailedBytes = v })
	maxFailedBytes = 1
	mem, setAvail := fullDisk()
	log := &lockedLog{}
	cfg := failCfg(mem, log)
	st, err := New(cfg)
	require.NoError(t, err)
	return st, cfg, setAvail, log
}

// TestFailedBacklogDroppedThenResynced: when more changes wait for the disk
// than maxFailedBytes, they are dropped, and every shard rewrites its keys
// from memory once writes work again: nothing is lost.
func TestFailedBacklogDroppedThenResynced(t *testing.T) {
	st, cfg, setAvail, log := droppingStore(t)
	setAvail(1 << 20)
	// Under FsyncAlways the calls return once their changes are on disk,
	// here after the rewrite.
	var wg sync.WaitGroup
	for i := 0; i < 300; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			run(st, throttleOp(fmt.Sprint("k", i), 5, 1, 3600, 1))
		}()
	}
	require.Eventually(t, func() bool { return log.lines("dropped them") > 0 }, 5*time.Second, 10*time.Millisecond)
	// Dropped changes are still pending (INFO changes_pending): every key
	// of the shards waiting for the rewrite, here all 300 once decided.
	require.Eventually(t, func() bool { return st.Stats().Keys == 300 }, 5*time.Second, 10*time.Millisecond)
	require.Eventually(t, func() bool { return st.PersistStats().Pending == 300 }, 5*time.Second, 10*time.Millisecond,
		"pending %d", st.PersistStats().Pending)
	setAvail(1 << 30)
	wg.Wait()
	require.Eventually(t, func() bool { return st.PersistErr() == nil && st.PersistStats().Pending == 0 }, 5*time.Second, 10*time.Millisecond)
	// The rewrite runs on the shards after the committer asks for it.
	require.Eventually(t, func() bool {
		return st.PersistStats().Changes >= 300
	}, 5*time.Second, 10*time.Millisecond)
	require.NoError(t, st.Close())
	st, err := New(cfg)
	require.NoError(t, err)
	defer st.Close()
	assert.Equal(t, int64(300), st.PersistStats().KeysLoaded)
}

// TestDroppedBacklogWaitsForRoomForTheRewrite: after a backlog was dropped,
// writes resume only once there is room for the rewrite of every key, not
// for the retry's probe alone. With room for the probe alone, each retry
// ended the spell, the rewrite (the whole keyspace) was built, did not fit,
// was dropped, and the ballast was written and deleted again, every second
// or two, until space came back.
func TestDroppedBacklogWaitsForRoomForTheRewrite(t *testing.T) {
	st, cfg, setAvail, log := droppingStore(t)
	const keys = 20_000 // a rewrite of about 700 KiB
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := g; i < keys; i += 8 {
				run(st, throttleOp(fmt.Sprint("key:", i), 5, 1, 3600, 1))
			}
		}()
	}
	wg.Wait()
	require.Equal(t, int64(keys), st.Stats().Keys)

	// Full: the next changes wait, are dropped, and every key waits for a
	// rewrite. Then room for the reserve, the ballast and a little more,
	// not for the rewrite.
	reserve, ballast := uint64(4<<20+openSlack), uint64(2<<20)
	setAvail(1 << 20)
	for i := range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			run(st, throttleOp(fmt.Sprint("key:", i), 5, 1, 3600, 1))
		}()
	}
	require.Eventually(t, func() bool { return log.lines("dropped them") == 1 }, 5*time.Second, 10*time.Millisecond)
	setAvail(reserve + ballast + 100<<10)
	changes := st.PersistStats().Changes
	time.Sleep(3500 * time.Millisecond) // the retries come every second
	assert.Equal(t, 1, log.lines("dropped them"), "the rewrite was not built, to be dropped again")
	assert.Equal(t, 1, log.lines("ballast deleted"), "the ballast was not written and deleted again")
	assert.Zero(t, log.lines("ballast written"))
	assert.Equal(t, changes, st.PersistStats().Changes, "nothing was written")
	require.ErrorContains(t, st.PersistErr(), "writes resume once")
	assert.Equal(t, int64(keys), st.PersistStats().Pending, "every key waits for the rewrite")

	setAvail(1 << 30)
	wg.Wait()
	require.Eventually(t, func() bool { return st.PersistErr() == nil && st.PersistStats().Pending == 0 }, 5*time.Second, 10*time.Millisecond)
	assert.Equal(t, 1, log.lines("ballast written"), "written back once, and said so")
	require.NoError(t, st.Close())
	st, err := New(cfg)
	require.NoError(t, err)
	defer st.Close()
	assert.Equal(t, int64(keys), st.PersistStats().KeysLoaded)
}

// TestWriteRetryBackoff: the wait before the next attempt after a failed
// write doubles from 1 s to 30 s; a lack of space is checked every second;
// success starts over. The run of failures is logged once each way.
func TestWriteRetryBackoff(t *testing.T) {
	var log lockedLog
	p := newPersister(nil, FsyncEverySec, log.logger())
	plain, full := errors.New("injected: i/o error"), fmt.Errorf("%w: injected", errNoSpace)
	for _, step := range []struct {
		err  error // nil: a write succeeds
		want time.Duration
	}{
		{plain, 1 * time.Second},
		{plain, 2 * time.Second},
		{plain, 4 * time.Second},
		{plain, 8 * time.Second},
		{full, 1 * time.Second},
		{plain, 16 * time.Second},
		{plain, 30 * time.Second},
		{plain, 30 * time.Second},
		{nil, 0},
		{plain, 1 * time.Second},
	} {
		if step.err == nil {
			p.ok()
			continue
		}
		p.fail(step.err)
		assert.Equal(t, step.want, p.nextRetry, "after %v", step.err)
	}
	assert.Equal(t, 2, log.lines("write failed"))
	assert.Equal(t, 1, log.lines("writes succeed again"))
	assert.Equal(t, int64(9), p.writeErrors.Load())
}

// TestPebbleEventsQuiet: Pebble's retry loop of failing background work
// logs one line when it starts and one when it ends, pausing longer after
// each error; its other error lines are rate limited.
func TestPebbleEventsQuiet(t *testing.T) {
	var log lockedLog
	e := newPebbleEvents(log.logger(), nil)
	for i := 0; i < 3; i++ {
		e.backgroundError(errors.New("write 000012.sst: no space left on device"))
	}
	assert.Equal(t, 1, log.lines("background work failed"))
	assert.Equal(t, 100*time.Millisecond, e.bgPause, "no pause after the first two errors, then 50 ms doubling")
	e.backgroundOK() // a success between two failures of the retry loop
	assert.Zero(t, log.lines("succeeds again"))
	e.mu.Lock()
	e.bgLast = time.Now().Add(-2 * time.Second)
	e.mu.Unlock()
	e.backgroundOK()
	assert.Equal(t, 1, log.lines("succeeds again\" errors=3"))
	assert.Zero(t, e.bgPause)

	for i := 0; i < 100; i++ {
		e.Errorf("cannot delete obsolete file %d", i)
	}
	assert.Equal(t, 1, log.lines("cannot delete obsolete file"))
	assert.Panics(t, func() { e.Fatalf("fatal %s", "x") })
}

// TestOpenOnFullDisk: opening for writing flushes the WAL Pebble replays,
// which it would retry forever on a full disk; so a start without the space
// for it is refused in one line, and the ballast is given up to make room.
func TestOpenOnFullDisk(t *testing.T) {
	mem, setAvail := fullDisk()
	cfg := Config{Shards: 2, Clock: wallClock(), SweepInterval: -1, DataDir: "db", Fsync: FsyncAlways, FS: mem,
		MemTableSize: 1 << 20, Logger: slog.New(slog.DiscardHandler)}
	st, err := New(cfg)
	require.NoError(t, err)
	for i := 0; i < 2000; i++ {
		run(st, throttleOp(fmt.Sprint("k", i), 5, 1, 3600, 1))
	}
	require.NoError(t, st.Close())
	ballast := mem.PathJoin("db", ballastFile)
	_, err = mem.Stat(ballast)
	require.NoError(t, err)

	setAvail(64 << 10)
	_, err = New(cfg)
	require.ErrorContains(t, err, "no space left on device to open it")
	assert.NotContains(t, err.Error(), "\n")
	_, err = mem.Stat(ballast)
	assert.Error(t, err, "the ballast was given up for the flush")

	setAvail(1 << 30)
	st, err = New(cfg)
	require.NoError(t, err)
	defer st.Close()
	assert.Equal(t, int64(2000), st.PersistStats().KeysLoaded)
}

// TestCloseWhileRepliesWaitFailsThem: under FsyncAlways, Close while a
// call waits for a full disk does not wait for the disk forever: the call
// fails with ErrClosed (its change is not on disk, so it is not
// acknowledged), and the loss is logged.
func TestCloseWhileRepliesWaitFailsThem(t *testing.T) {
	mem, setAvail := fullDisk()
	var log lockedLog
	cfg := failCfg(mem, &log)
	st, err := New(cfg)
	require.NoError(t, err)
	run(st, throttleOp("before", 5, 1, 3600, 1))
	setAvail(1 << 20)
	op := throttleOp("during", 5, 1, 3600, 1)
	done := make(chan struct{})
	go func() {
		run(st, op)
		close(done)
	}()
	require.Eventually(t, func() bool { return st.PersistErr() != nil }, 5*time.Second, 10*time.Millisecond)
	closed := make(chan error, 1)
	go func() { closed <- st.Close() }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Close left a call waiting for the disk")
	}
	assert.ErrorIs(t, op.Status(), ErrClosed)
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return")
	}
	assert.Equal(t, 1, log.lines("replies withheld"))
}

// TestUncreatableDirHoldsWrites: a data dir where no file can be created
// (deleted, read-only, out of inodes) holds writes back as a full disk
// does, since Pebble panics past any recover when it cannot create its
// next WAL; they go on once files can be created again.
func TestUncreatableDirHoldsWrites(t *testing.T) {
	defer func(v time.Duration) { probeEvery = v }(probeEvery)
	probeEvery = 0
	mem := vfs.NewMem()
	var failing atomic.Bool
	fs := errorfs.Wrap(mem, errorfs.InjectorFunc(func(op errorfs.Op) error {
		if failing.Load() && op.Kind == errorfs.OpCreate {
			return fmt.Errorf("injected: %w", syscall.EROFS)
		}
		return nil
	}))
	st := openPersistent(t, "db", FsyncAlways, wallClock(), fs)
	defer st.Close()
	run(st, throttleOp("before", 5, 1, 3600, 1))
	commits := st.PersistStats().Commits
	failing.Store(true)
	done := make(chan struct{})
	go func() {
		run(st, throttleOp("during", 5, 1, 3600, 1))
		close(done)
	}()
	require.Eventually(t, func() bool { return st.PersistErr() != nil }, 5*time.Second, 10*time.Millisecond)
	assert.ErrorContains(t, st.PersistErr(), "cannot create a file in the data dir")
	assert.Equal(t, commits, st.PersistStats().Commits, "nothing reaches Pebble")
	failing.Store(false)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("writes did not resume")
	}
	assert.NoError(t, st.PersistErr())
}
