package store

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cellserver/cellserver/limit"
	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func openPersistent(t *testing.T, dir string, policy Fsync, clk *Clock, fs vfs.FS) *Store {
	t.Helper()
	st, err := New(Config{Shards: 4, Clock: clk, SweepInterval: -1, DataDir: dir, Fsync: policy, FS: fs, MemTableSize: 4 << 20})
	require.NoError(t, err)
	return st
}

func state(st *Store, key string) (uint64, bool, int64) {
	get := &GetReq{Key: []byte(key)}
	pttl := &PTTLReq{Key: []byte(key)}
	run(st, get, pttl)
	return get.TAT, get.Found, pttl.PTTL
}

// wallClock returns a clock frozen at the current wall time: loading judges
// expiry by the wall clock, so test keys must be current.
func wallClock() *Clock {
	c := &Clock{}
	c.Set(time.Now().UnixNano())
	return c
}

func TestRestartKeepsState(t *testing.T) {
	for _, policy := range []Fsync{FsyncAlways, FsyncEverySec, FsyncNo} {
		t.Run(policy.String(), func(t *testing.T) {
			dir := t.TempDir()
			clk := wallClock()
			st := openPersistent(t, dir, policy, clk, nil)
			for i := 0; i < 500; i++ {
				for j := 0; j <= i%5; j++ {
					run(st, throttleOp(fmt.Sprint("key", i), 10, 1, 3600, 1))
				}
			}
			run(st, &DelReq{Key: []byte("key7")})
			// A negative quantity can store a TAT with no TTL (spec §4).
			run(st, throttleOp("forever", 4, 1, 1, 3))
			run(st, throttleOp("forever", 4, 1, 1, -5))
			before := map[string][3]int64{}
			for i := 0; i < 500; i++ {
				k := fmt.Sprint("key", i)
				tat, ok, pttl := state(st, k)
				before[k] = [3]int64{int64(tat), b2i(ok), pttl}
			}
			ftat, _, fpttl := state(st, "forever")
			require.Equal(t, int64(-1), fpttl)
			require.NoError(t, st.Close())

			st2 := openPersistent(t, dir, policy, clk, nil)
			defer st2.Close()
			for k, want := range before {
				tat, ok, pttl := state(st2, k)
				assert.Equal(t, want, [3]int64{int64(tat), b2i(ok), pttl}, k)
			}
			tat, ok, pttl := state(st2, "forever")
			assert.True(t, ok)
			assert.Equal(t, ftat, tat)
			assert.Equal(t, int64(-1), pttl)
			assert.Equal(t, int64(500), st2.PersistStats().KeysLoaded) // 499 keys + forever
		})
	}
}

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

func TestExpiredEntriesDroppedAtLoad(t *testing.T) {
	dir := t.TempDir()
	clk := &Clock{}
	clk.Set(time.Now().Add(-time.Hour).UnixNano()) // an hour ago: 60 s keys are long expired
	st := openPersistent(t, dir, FsyncAlways, clk, nil)
	for i := 0; i < 100; i++ {
		run(st, throttleOp(fmt.Sprint("old", i), 5, 1, 60, 1))
	}
	clk.Set(time.Now().UnixNano())
	run(st, throttleOp("new", 5, 1, 60, 1))
	require.NoError(t, st.Close())

	st = openPersistent(t, dir, FsyncAlways, wallClock(), nil)
	ps := st.PersistStats()
	assert.Equal(t, int64(1), ps.KeysLoaded)
	assert.Equal(t, int64(100), ps.ExpiredAtLoad)
	require.NoError(t, st.Close())
	// They were deleted from disk too.
	st = openPersistent(t, dir, FsyncAlways, wallClock(), nil)
	defer st.Close()
	assert.Equal(t, int64(0), st.PersistStats().ExpiredAtLoad)
	assert.Equal(t, int64(1), st.PersistStats().KeysLoaded)
}

func TestFlushAndDeletePersist(t *testing.T) {
	dir := t.TempDir()
	clk := wallClock()
	st := openPersistent(t, dir, FsyncEverySec, clk, nil)
	for i := 0; i < 200; i++ {
		run(st, throttleOp(fmt.Sprint("k", i), 5, 1, 60, 1))
	}
	s := st.NewSession()
	for i := 0; i < st.NumShards(); i++ {
		s.AddTo(i, &FlushReq{})
	}
	s.Run()
	run(st, throttleOp("after", 5, 1, 60, 1))
	require.NoError(t, st.Close())
	st = openPersistent(t, dir, FsyncEverySec, clk, nil)
	defer st.Close()
	assert.Equal(t, int64(1), st.PersistStats().KeysLoaded)
	_, ok, _ := state(st, "after")
	assert.True(t, ok)
}

func TestDataDirRefusals(t *testing.T) {
	dir := t.TempDir()
	st := openPersistent(t, dir, FsyncEverySec, wallClock(), nil)
	// A second store on the same dir (as a second process would) is refused.
	_, err := New(Config{Shards: 2, DataDir: dir})
	assert.ErrorIs(t, err, ErrDataDirInUse)
	require.NoError(t, st.Close())

	// A non-empty directory that is not ours is never touched.
	other := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(other, "notes.txt"), []byte("mine"), 0o644))
	_, err = New(Config{Shards: 2, DataDir: other})
	assert.ErrorContains(t, err, "holds no cellserver data")
	names, _ := os.ReadDir(other)
	assert.Len(t, names, 1)

	// A Pebble dir written by something else (another format marker).
	foreign := t.TempDir()
	db, err := pebble.Open(foreign, &pebble.Options{FormatMajorVersion: pebbleFormat})
	require.NoError(t, err)
	require.NoError(t, db.Set([]byte(formatKey), []byte("something/9"), pebble.Sync))
	require.NoError(t, db.Close())
	_, err = New(Config{Shards: 2, DataDir: foreign})
	assert.ErrorContains(t, err, "holds format")

	// A corrupt database: the manifest is garbage.
	corrupt := t.TempDir()
	st = openPersistent(t, corrupt, FsyncEverySec, wallClock(), nil)
	require.NoError(t, st.Close())
	entries, _ := os.ReadDir(corrupt)
	for _, e := range entries {
		if len(e.Name()) > 9 && e.Name()[:9] == "MANIFEST-" {
			require.NoError(t, os.WriteFile(filepath.Join(corrupt, e.Name()), []byte("garbage garbage garbage"), 0o644))
		}
	}
	_, err = New(Config{Shards: 2, DataDir: corrupt})
	assert.ErrorContains(t, err, "is corrupt")
	assert.ErrorContains(t, err, "MANIFEST")
	assert.NotContains(t, err.Error(), "\n")
}

// TestWriteErrorsServeFromMemoryAndRetry injects write errors with errorfs:
// the error is reported, the queued changes reach disk once writes work
// again, and under FsyncAlways a call's reply waits until then (its change
// is decided from memory at once).
func TestWriteErrorsServeFromMemoryAndRetry(t *testing.T) {
	mem := vfs.NewMem()
	var failing atomic.Bool
	fs := errorfs.Wrap(mem, errorfs.InjectorFunc(func(op errorfs.Op) error {
		if failing.Load() && op.Kind.ReadOrWrite() == errorfs.OpIsWrite {
			return errors.New("injected: no space left on device")
		}
		return nil
	}))
	clk := wallClock()
	st := openPersistent(t, "db", FsyncAlways, clk, fs)
	run(st, throttleOp("before", 5, 1, 60, 1))
	failing.Store(true)
	first := make(chan *ThrottleReq, 1)
	go func() {
		op := throttleOp("during", 5, 1, 60, 1)
		run(st, op)
		first <- op
	}()
	require.Eventually(t, func() bool { return st.PersistErr() != nil }, 5*time.Second, 10*time.Millisecond)
	ps := st.PersistStats()
	assert.False(t, ps.LastWriteOK)
	assert.Contains(t, ps.LastWriteErr, "no space left")
	select {
	case <-first:
		t.Fatal("a call was acknowledged while its change could not be written")
	case <-time.After(time.Second):
	}
	failing.Store(false)
	op := <-first
	require.NoError(t, op.Err)
	assert.False(t, op.Result.Limited)
	for i := 1; i < 7; i++ {
		op := throttleOp("during", 5, 1, 60, 1)
		run(st, op)
		require.NoError(t, op.Err)
		assert.Equal(t, i >= 6, op.Result.Limited, "call %d", i)
	}
	require.Eventually(t, func() bool { return st.PersistErr() == nil }, 10*time.Second, 20*time.Millisecond)
	require.NoError(t, st.Close())

	st = openPersistent(t, "db", FsyncAlways, clk, mem)
	defer st.Close()
	tat, ok, _ := state(st, "during")
	assert.True(t, ok, "changes made while the disk failed reach it after recovery")
	assert.Equal(t, uint64(clk.Now()+6*60e9), tat) // six allowed calls, T = 60 s
}

// TestChurnKeepsDiskBounded: short-lived keys that expire and are swept
// leave the directory bounded, not growing with the number ever written:
// snapshot rounds (every 16 MiB of log here, the live state being tiny)
// delete the records they supersede.
func TestChurnKeepsDiskBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("slow")
	}
	dir := t.TempDir()
	clk := wallClock()
	st := openPersistent(t, dir, FsyncNo, clk, nil)
	defer st.Close()
	const rounds, perRound = 150, 10000
	var largest uint64
	for round := 0; round < rounds; round++ {
		sess := st.NewSession()
		for i := 0; i < perRound; i++ {
			sess.Add(throttleOp(fmt.Sprintf("churn:%d:%d", round, i), 0, 1, 1, 1))
			if i%256 == 255 {
				sess.Run()
			}
		}
		sess.Run()
		st.persistAll() // the keys reach the disk...
		clk.Advance(2e9)
		for i := 0; i < 60; i++ {
			st.sweepAll()
		}
		st.persistAll() // ...and so do their deletions
		require.Equal(t, int64(0), st.Stats().Keys)
		largest = max(largest, dirSize(t, dir))
	}
	// Every key was written once and deleted once.
	require.Eventually(t, func() bool { return st.PersistStats().Changes >= 2*rounds*perRound }, 10*time.Second, 10*time.Millisecond)
	written := st.PersistStats().Changes * 36 // bytes per entry in the log, at least
	t.Logf("%d keys written and deleted (over %d MB of log); the dir peaked at %d MB", rounds*perRound, written>>20, largest>>20)
	assert.Less(t, largest, uint64(48<<20))
	assert.Greater(t, written, int64(2*48<<20), "the test must write more than the bound")
}

func dirSize(t *testing.T, dir string) uint64 {
	var n uint64
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	for _, e := range entries {
		if info, err := e.Info(); err == nil && !e.IsDir() {
			n += uint64(info.Size())
		}
	}
	return n
}

// TestLimitedCallsAndPeeksWriteNothing: only state changes reach the disk.
func TestLimitedCallsAndPeeksWriteNothing(t *testing.T) {
	st := openPersistent(t, t.TempDir(), FsyncAlways, wallClock(), nil)
	defer st.Close()
	run(st, throttleOp("k", 0, 1, 3600, 1)) // allowed: one change
	require.Eventually(t, func() bool { return st.PersistStats().Changes == 1 }, 5*time.Second, 5*time.Millisecond)
	for i := 0; i < 10; i++ {
		limited := throttleOp("k", 0, 1, 3600, 1)
		peek := throttleOp("k", 0, 1, 3600, 0)
		run(st, limited, peek)
		require.True(t, limited.Result.Limited)
		require.False(t, peek.Result.Limited)
	}
	run(st, throttleOp("other", 0, 1, 3600, 1))
	require.Eventually(t, func() bool { return st.PersistStats().Changes == 2 }, 5*time.Second, 5*time.Millisecond)
	assert.Equal(t, int64(2), st.PersistStats().Commits)
}

// Deletions wait for the write-out and are merged with the changed keys; a
// key deleted and created again (or created and deleted) within one interval
// must reach disk as its final state, whether the key is held in its entry,
// in a pair of entries or in the arena.
func TestDeleteAndRecreateInOneWriteOut(t *testing.T) {
	for _, policy := range []Fsync{FsyncAlways, FsyncEverySec} {
		t.Run(policy.String(), func(t *testing.T) {
			dir := t.TempDir()
			clk := wallClock()
			st := openPersistent(t, dir, policy, clk, nil)
			long := "a-key-longer-than-thirty-one-bytes:"
			want := map[string]bool{}
			for i := 0; i < 300; i++ {
				for _, k := range []string{fmt.Sprint("s", i), fmt.Sprint("a-pair-sized-key:", i), fmt.Sprint(long, i)} {
					run(st, throttleOp(k, 5, 1, 60, 1))
					switch i % 3 {
					case 0: // created, deleted
						run(st, &DelReq{Key: []byte(k)})
						want[k] = false
					case 1: // created, deleted, created again
						run(st, &DelReq{Key: []byte(k)})
						run(st, throttleOp(k, 5, 1, 60, 2))
						want[k] = true
					case 2: // created, deleted twice over
						run(st, &DelReq{Key: []byte(k)})
						run(st, throttleOp(k, 5, 1, 60, 1))
						run(st, &DelReq{Key: []byte(k)})
						want[k] = false
					}
				}
			}
			before := map[string]uint64{}
			for k := range want {
				tat, ok, _ := state(st, k)
				require.Equal(t, want[k], ok, k)
				before[k] = tat
			}
			require.NoError(t, st.Close())
			st = openPersistent(t, dir, policy, clk, nil)
			defer st.Close()
			for k, live := range want {
				tat, ok, _ := state(st, k)
				assert.Equal(t, live, ok, k)
				assert.Equal(t, before[k], tat, k)
			}
			assert.Equal(t, int64(300), st.PersistStats().KeysLoaded)
		})
	}
}

// A key deleted after a write-out is deleted on disk; a key created and
// deleted between two write-outs writes nothing at all.
func TestDeletesReachDiskOnlyForWrittenKeys(t *testing.T) {
	dir := t.TempDir()
	clk := wallClock()
	st := openPersistent(t, dir, FsyncEverySec, clk, nil)
	for i := 0; i < 100; i++ {
		run(st, throttleOp(fmt.Sprint("written", i), 5, 1, 60, 1))
	}
	st.persistAll()
	require.Eventually(t, func() bool { return st.PersistStats().Changes >= 100 }, 5*time.Second, time.Millisecond)
	for i := 0; i < 100; i++ {
		run(st, &DelReq{Key: []byte(fmt.Sprint("written", i))})
		run(st, throttleOp(fmt.Sprint("transient", i), 5, 1, 60, 1))
		run(st, &DelReq{Key: []byte(fmt.Sprint("transient", i))})
	}
	st.persistAll()
	require.Eventually(t, func() bool { return st.PersistStats().Changes >= 200 }, 5*time.Second, time.Millisecond)
	assert.Equal(t, int64(200), st.PersistStats().Changes, "100 sets and 100 deletes, nothing for transient keys")
	require.NoError(t, st.Close())
	st = openPersistent(t, dir, FsyncEverySec, clk, nil)
	defer st.Close()
	assert.Equal(t, int64(0), st.PersistStats().KeysLoaded)
}

// TestSlowDiskDoesNotStallShard: while the committer cannot finish (here
// every sync blocks; on a real disk, Pebble holding writes back while it
// flushes a snapshot round's burst), the shard owner keeps answering. A
// snapshot of 20000 keys in chunks of 4 is 5000 chunks, more than the
// committer's queue holds: sent unpaced, they filled it and blocked the
// owner until the disk came back. Once it does, everything reaches it.
func TestSlowDiskDoesNotStallShard(t *testing.T) {
	defer func(w, c int) { writeChunk, snapChunk = w, c }(writeChunk, snapChunk)
	writeChunk, snapChunk = 4, 4
	mem := vfs.NewMem()
	var blocking atomic.Bool
	gate := make(chan struct{})
	fs := errorfs.Wrap(mem, errorfs.InjectorFunc(func(op errorfs.Op) error {
		if blocking.Load() && (op.Kind == errorfs.OpFileSync || op.Kind == errorfs.OpFileSyncData || op.Kind == errorfs.OpFileSyncTo) {
			<-gate
		}
		return nil
	}))
	clk := wallClock()
	st, err := New(Config{Shards: 1, Clock: clk, SweepInterval: -1, DataDir: "db", Fsync: FsyncEverySec,
		FS: fs, MemTableSize: 4 << 20, PersistInterval: time.Hour})
	require.NoError(t, err)
	const n = 20000
	sess := st.NewSession()
	for i := 0; i < n; i++ {
		sess.Add(throttleOp(fmt.Sprintf("slow:%d", i), 5, 1, 60, 1))
		if i%512 == 511 {
			sess.Run()
		}
	}
	sess.Run()

	blocking.Store(true)
	st.snapshotRound(1)
	// Decisions keep coming while the disk is stuck and the snapshot waits.
	answered := make(chan struct{})
	go func() {
		defer close(answered)
		for i := 0; i < 200; i++ {
			op := throttleOp(fmt.Sprintf("slow:%d", i), 5, 1, 60, 1)
			run(st, op)
			if op.Err != nil || op.Result.Remaining != 4 {
				t.Errorf("call %d: err %v, remaining %d", i, op.Err, op.Result.Remaining)
				return
			}
			time.Sleep(time.Millisecond) // let the owner take steps between calls
		}
	}()
	select {
	case <-answered:
	case <-time.After(20 * time.Second):
		close(gate)
		t.Fatal("the shard owner stopped answering while the disk was stuck")
	}
	blocking.Store(false)
	close(gate)
	require.NoError(t, st.Close())

	st = openPersistent(t, "db", FsyncEverySec, clk, mem)
	defer st.Close()
	for _, i := range []int{0, 199, 200, n - 1} {
		tat, ok, _ := state(st, fmt.Sprintf("slow:%d", i))
		require.True(t, ok, "key %d", i)
		calls := uint64(1)
		if i < 200 {
			calls = 2
		}
		assert.Equal(t, uint64(clk.Now())+calls*60e9, tat, "key %d", i)
	}
}

// TestRecordsStaySmall: a write-out of many keys, or of many deletions, is
// split into records of at most writeChunk keys or about recordBytes bytes:
// before a damaged table block fails, Pebble checksums the whole block
// again for each of up to 320k single flipped bits.
func TestRecordsStaySmall(t *testing.T) {
	dir := t.TempDir()
	clk := wallClock()
	st, err := New(Config{Shards: 1, Clock: clk, SweepInterval: -1, DataDir: dir, Fsync: FsyncNo,
		MemTableSize: 4 << 20, PersistInterval: time.Hour})
	require.NoError(t, err)
	sess := st.NewSession()
	for i := 0; i < 20000; i++ {
		sess.Add(throttleOp(fmt.Sprint("a-key-of-some-length:", i), 5, 1, 3600, 1))
	}
	sess.Run()
	st.persistAll()
	for i := 0; i < 20000; i++ {
		sess.Add(&DelReq{Key: []byte(fmt.Sprint("a-key-of-some-length:", i))})
	}
	sess.Run()
	require.NoError(t, st.Close()) // the deletions are written at Close

	db, err := pebble.Open(dir, &pebble.Options{FormatMajorVersion: pebbleFormat, ReadOnly: true})
	require.NoError(t, err)
	defer db.Close()
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: []byte{prefixLog}, UpperBound: []byte{prefixLog + 1}})
	require.NoError(t, err)
	records, largest := 0, 0
	for it.First(); it.Valid(); it.Next() {
		records++
		largest = max(largest, len(it.Value()))
		r, n := recReader{b: it.Value()}, 0
		for r.next() {
			n++
		}
		assert.LessOrEqual(t, n, max(writeChunk, recordBytes/20), "entries in one record")
	}
	require.NoError(t, it.Close())
	assert.GreaterOrEqual(t, records, 20000/writeChunk+2)
	assert.LessOrEqual(t, largest, 128<<10, "bytes in the largest record")
}

// TestBigStatesKeepLogBounded: keys of large states (SWL logs of 6 KB)
// changed over and over under FsyncAlways, where each pipeline's changes
// are one batch, larger than the half memtable Pebble commits apart (and
// empties once applied). Snapshot rounds must still start, so the data dir
// stays within a few times the live state; and no record passes
// recordBytes by more than one key's state.
func TestBigStatesKeepLogBounded(t *testing.T) {
	defer func(v int64) { snapMinBytes = v }(snapMinBytes)
	// Above what a round writes (the live state), so that rounds start
	// only as the changes' batches are counted.
	snapMinBytes = 4 << 20
	dir := t.TempDir()
	clk := wallClock()
	st, err := New(Config{Shards: 2, Clock: clk, SweepInterval: -1, DataDir: dir, Fsync: FsyncAlways, MemTableSize: 1 << 20})
	require.NoError(t, err)
	nowMs := floorMs(clk.Now())
	swl := kindStates(t, nowMs)["swl"]
	const keys = 200
	names := make([]string, keys)
	for i := range names {
		names[i] = fmt.Sprint("swl:", i)
		r := &ImportReq{Key: []byte(names[i]), State: swl.state, Expires: swl.exp}
		runReq(st, names[i:i+1], r)
		require.NoError(t, r.Err)
	}
	live := uint64(keys * len(swl.state))
	calls := make([]limit.Call, keys)
	for i := range calls {
		calls[i] = parseLimitLine(t, names[i]+" SWL 10000 2592000000 MS")
	}
	for round := 0; round < 150; round++ {
		clk.Advance(int64(time.Millisecond))
		reqs := make([]Request, keys)
		for i := range reqs {
			reqs[i] = &LimitReq{Call: calls[i]}
		}
		runReq(st, names, reqs...)
		for _, r := range reqs {
			require.NoError(t, r.(*LimitReq).Err)
			require.False(t, r.(*LimitReq).Decision.Limited)
		}
	}
	ps := st.PersistStats()
	size := dirSize(t, dir)
	t.Logf("live state %d KB, %d snapshot rounds, data dir %d KB", live>>10, ps.Snapshots, size>>10)
	assert.Positive(t, ps.Snapshots, "snapshot rounds ran")
	// Three times what starts a round for the records, plus Pebble's WALs
	// (a memtable's worth each, a few of them) and the ballast; the test
	// writes 150 rounds of the live state, over 170 MB.
	assert.Less(t, size, 3*max(2*live, uint64(snapMinBytes))+16<<20, "data dir size")
	require.NoError(t, st.Close())

	db, err := pebble.Open(dir, &pebble.Options{FormatMajorVersion: pebbleFormat, ReadOnly: true})
	require.NoError(t, err)
	defer db.Close()
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: []byte{prefixLog}, UpperBound: []byte{prefixLog + 1}})
	require.NoError(t, err)
	largest := 0
	for it.First(); it.Valid(); it.Next() {
		largest = max(largest, len(it.Value()))
	}
	require.NoError(t, it.Close())
	assert.LessOrEqual(t, largest, recordBytes+len(swl.state)+64, "bytes in the largest record")
}
