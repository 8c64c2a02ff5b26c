package store

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/wal"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fillKeys makes n keys, each with one call, written out in rounds of 500
// keys so that the log has many commits.
func fillKeys(t *testing.T, st *Store, prefix string, n int) {
	t.Helper()
	for lo := 0; lo < n; lo += 500 {
		sess := st.NewSession()
		for i := lo; i < min(lo+500, n); i++ {
			sess.Add(throttleOp(fmt.Sprint(prefix, i), 5, 1, 3600, 1))
		}
		sess.Run()
		st.persistAll()
	}
}

// dirHashes maps each file of dir to its content's hash.
func dirHashes(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		require.NoError(t, err)
		out[e.Name()] = fmt.Sprintf("%x", sha256.Sum256(b))
	}
	return out
}

// newestFile is the last of dir's files named *ext, in name order (Pebble
// numbers its files in creation order).
func newestFile(t *testing.T, dir, ext string) string {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(dir, "*"+ext))
	require.NoError(t, err)
	require.NotEmpty(t, names, "no %s file in %s", ext, dir)
	sort.Strings(names)
	return names[len(names)-1]
}

func flipMiddle(t *testing.T, path string, n int) {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	for i := len(b) / 2; i < len(b)/2+n && i < len(b); i++ {
		b[i] ^= 0x5a
	}
	require.NoError(t, os.WriteFile(path, b, 0o644))
}

func truncateHalf(t *testing.T, path string) {
	t.Helper()
	st, err := os.Stat(path)
	require.NoError(t, err)
	require.NoError(t, os.Truncate(path, st.Size()/2))
}

// TestDamagedWALRefusedUntouchedThenRecovered: a WAL with bytes flipped in
// the middle, or cut to half, after a clean shutdown. The dir is refused in
// one line and left exactly as it was; RecoverCorrupt opens it with what is
// readable and reports the records lost; the next start (without it) sees
// a consistent dir again.
func TestDamagedWALRefusedUntouchedThenRecovered(t *testing.T) {
	for _, tc := range []struct {
		name   string
		policy Fsync
		damage func(*testing.T, string)
		cut    string // "yes": Pebble itself proves the WAL corrupt, and recovery cuts it; "no": it cannot; "": either
	}{
		// Write-outs of 500 keys: whether Pebble's sync offsets, which lag
		// behind whole blocks, vouch for the damaged chunk depends on where
		// the damage falls; the count of records catches it if they don't.
		{"flip", FsyncEverySec, func(t *testing.T, p string) { flipMiddle(t, p, 16) }, ""},
		// A WAL cut short looks like a torn tail to Pebble.
		{"truncate", FsyncEverySec, truncateHalf, "no"},
		// One small synced commit per call: the chunks after the damage
		// vouch for it, and Pebble reports the WAL corrupt.
		{"flip-synced", FsyncAlways, func(t *testing.T, p string) { flipMiddle(t, p, 16) }, "yes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			clk := wallClock()
			const n = 5000
			st := openPersistent(t, dir, tc.policy, clk, nil)
			if tc.policy == FsyncAlways {
				for i := 0; i < n; i++ {
					run(st, throttleOp(fmt.Sprint("k", i), 5, 1, 3600, 1))
				}
			} else {
				fillKeys(t, st, "k", n)
			}
			require.NoError(t, st.Close())
			tc.damage(t, newestFile(t, dir, ".log"))
			before := dirHashes(t, dir)

			cfg := Config{Shards: 4, Clock: clk, SweepInterval: -1, DataDir: dir, Fsync: tc.policy, MemTableSize: 4 << 20}
			_, err := New(cfg)
			require.Error(t, err)
			assert.Contains(t, err.Error(), "is corrupt")
			assert.Contains(t, err.Error(), "refusing to start")
			assert.NotContains(t, err.Error(), "\n")
			assert.Equal(t, before, dirHashes(t, dir), "a refused dir is left as it was")

			cfg.RecoverCorrupt = true
			st, err = New(cfg)
			require.NoError(t, err)
			ps := st.PersistStats()
			assert.Positive(t, ps.CorruptRecordsLost)
			assert.Less(t, ps.KeysLoaded, int64(n))
			kept := ps.KeysLoaded
			run(st, throttleOp("after", 5, 1, 3600, 1))
			require.NoError(t, st.Close())
			copies, _ := filepath.Glob(filepath.Join(dir, "*.corrupt"))
			if tc.cut != "" {
				assert.Equal(t, tc.cut == "yes", len(copies) > 0, "a copy of the WAL Pebble found corrupt is kept: %v", copies)
			}

			cfg.RecoverCorrupt = false
			st, err = New(cfg)
			require.NoError(t, err, "after a recovery the dir is consistent again")
			defer st.Close()
			assert.Equal(t, kept+1, st.PersistStats().KeysLoaded)
			assert.Zero(t, st.PersistStats().CorruptRecordsLost)
		})
	}
}

// TestDamagedTableRefused: a flipped byte in a table is refused in one
// line naming the file, with or without RecoverCorrupt, and the dir is
// left as it was.
func TestDamagedTableRefused(t *testing.T) {
	dir := t.TempDir()
	clk := wallClock()
	st := openPersistent(t, dir, FsyncEverySec, clk, nil)
	fillKeys(t, st, "k", 5000)
	require.NoError(t, st.Close())
	st = openPersistent(t, dir, FsyncEverySec, clk, nil) // opening flushes the WAL into a table
	require.NoError(t, st.Close())
	table := newestFile(t, dir, ".sst")
	flipMiddle(t, table, 1)
	before := dirHashes(t, dir)
	for _, recover := range []bool{false, true} {
		_, err := New(Config{Shards: 4, Clock: clk, SweepInterval: -1, DataDir: dir, MemTableSize: 4 << 20, RecoverCorrupt: recover})
		require.Error(t, err)
		assert.Contains(t, err.Error(), "is corrupt: table "+filepath.Base(table))
		assert.Contains(t, err.Error(), "checksum mismatch")
		assert.NotContains(t, err.Error(), "\n")
		assert.Equal(t, before, dirHashes(t, dir))
	}
}

// TestCrashNeverLooksCorrupt: a crash loses what was not synced, with a
// random part of it kept (a torn tail), under every fsync policy, after
// snapshot rounds cut old records off. The clone must open as it is: no
// refusal, nothing reported lost, and every change synced before the crash
// is there.
func TestCrashNeverLooksCorrupt(t *testing.T) {
	defer func(v int64, m time.Duration) { snapMinBytes, markEvery = v, m }(snapMinBytes, markEvery)
	snapMinBytes, markEvery = 64<<10, time.Millisecond
	for _, policy := range []Fsync{FsyncAlways, FsyncEverySec, FsyncNo} {
		t.Run(policy.String(), func(t *testing.T) {
			mem := vfs.NewCrashableMem()
			clk := wallClock()
			cfg := Config{Shards: 4, Clock: clk, SweepInterval: -1, DataDir: "db", Fsync: policy, FS: mem,
				MemTableSize: 1 << 20, PersistInterval: time.Hour}
			st, err := New(cfg)
			require.NoError(t, err)
			fillKeys(t, st, "base", 3000)
			if policy == FsyncNo {
				// Nothing is synced while running: a clean restart syncs.
				require.NoError(t, st.Close())
				st, err = New(cfg)
				require.NoError(t, err)
			}
			rng := rand.New(rand.NewPCG(uint64(policy), 7))
			for round := 0; round < 30; round++ {
				fillKeys(t, st, fmt.Sprintf("r%d:", round), 200)
				fillKeys(t, st, "base", 3000) // enough rewriting for snapshot rounds
				clone := mem.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: rng.IntN(100), RNG: rng})
				ccfg := cfg
				ccfg.FS = clone
				st2, err := New(ccfg)
				require.NoError(t, err, "round %d", round)
				ps := st2.PersistStats()
				assert.Zero(t, ps.CorruptRecordsLost)
				assert.GreaterOrEqual(t, ps.KeysLoaded, int64(3000), "the synced keys are there")
				require.NoError(t, st2.Close())
			}
			assert.Positive(t, st.PersistStats().Snapshots, "snapshot rounds ran")
			require.NoError(t, st.Close())
		})
	}
}

func TestMarkRoundTrip(t *testing.T) {
	for _, n := range []uint64{0, 1, 1 << 40} {
		got, err := decodeMark(encodeMark(n))
		require.NoError(t, err)
		assert.Equal(t, n, got)
	}
	bad := encodeMark(12345)
	bad[strings.Index(string(bad), "12345")] = '9'
	_, err := decodeMark(bad)
	assert.ErrorContains(t, err, "checksum")
	_, err = decodeMark([]byte("something else\n"))
	assert.Error(t, err)
}

// TestMarkSlots: the mark is written in place, alternating between two
// slots; the larger valid count wins, so a write torn in one slot leaves
// the count before it, and only a mark with no valid slot is damaged. A
// one-line mark (what a reset writes) is read as one slot.
func TestMarkSlots(t *testing.T) {
	fs := vfs.NewMem()
	require.NoError(t, fs.MkdirAll("d", 0o755))
	read := func() (uint64, error) {
		n, ok, err := readMark(fs, "d")
		if err == nil {
			require.True(t, ok)
		}
		return n, err
	}
	m, err := createMark(fs, "d", 5)
	require.NoError(t, err)
	n, err := read()
	require.NoError(t, err)
	assert.Equal(t, uint64(5), n, "the reset's one line")
	require.NoError(t, m.set(7))
	require.NoError(t, m.set(9))
	n, err = read()
	require.NoError(t, err)
	assert.Equal(t, uint64(9), n)

	damage := func(slot int64) {
		f, err := fs.OpenReadWrite("d/"+markFile, vfs.WriteCategoryUnspecified)
		require.NoError(t, err)
		_, err = f.WriteAt([]byte("torn"), slot*markSlotStride+10)
		require.NoError(t, err)
		require.NoError(t, f.Close())
	}
	damage(0) // 9 was written to slot 0, 7 to slot 1
	n, err = read()
	require.NoError(t, err)
	assert.Equal(t, uint64(7), n, "a torn slot leaves the other's count")
	require.NoError(t, m.set(11)) // slot 0 again
	n, err = read()
	require.NoError(t, err)
	assert.Equal(t, uint64(11), n)
	damage(0)
	damage(1)
	_, err = read()
	assert.ErrorIs(t, err, errMarkDamaged)
	require.NoError(t, m.close())

	_, ok, err := readMark(fs, "none")
	require.NoError(t, err)
	assert.False(t, ok, "no mark")
}

// noTablesFS fails the creation of every table, so that no flush succeeds
// and the WALs a flush would retire stay in the dir.
type noTablesFS struct{ vfs.FS }

func (fs noTablesFS) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	if strings.HasSuffix(name, ".sst") {
		return nil, errors.New("injected: no tables")
	}
	return fs.FS.Create(name, c)
}

// TestDamagedOlderWALCountsItsLoss: a WAL older than the newest, damaged in
// the middle. Pebble refuses it, and RecoverCorrupt cuts it; the records
// after the cut are gone although the newer WALs carry the count on to the
// mark, so the loss is counted from the commits' counts around the cut
// (before, it was reported as 0).
func TestDamagedOlderWALCountsItsLoss(t *testing.T) {
	dir := t.TempDir()
	clk := wallClock()
	st, err := New(Config{Shards: 4, Clock: clk, SweepInterval: -1, DataDir: dir, Fsync: FsyncEverySec,
		FS: noTablesFS{vfs.Default}, MemTableSize: 1 << 20, Logger: new(lockedLog).logger()})
	require.NoError(t, err)
	const n = 40000
	fillKeys(t, st, "k", n)
	require.NoError(t, st.Close())
	logs, err := filepath.Glob(filepath.Join(dir, "*.log"))
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(logs), 2, "flushes failed, so the WALs stayed: %v", logs)
	sort.Strings(logs)
	written := walRecords(t, dir)
	flipMiddle(t, logs[0], 16)
	readable := walRecords(t, dir)
	require.Less(t, readable, written, "the damage hides records from a reader")

	var log lockedLog
	cfg := Config{Shards: 4, Clock: clk, SweepInterval: -1, DataDir: dir, Fsync: FsyncEverySec, MemTableSize: 4 << 20,
		Logger: log.logger()}
	_, err = New(cfg)
	require.Error(t, err, "Pebble proves an older WAL corrupt")
	assert.Contains(t, err.Error(), "--recover-corrupt yes")

	cfg.RecoverCorrupt = true
	st, err = New(cfg)
	require.NoError(t, err)
	ps := st.PersistStats()
	lost := ps.CorruptRecordsLost
	assert.Equal(t, int64(written-readable), lost, "the records cut from the older WAL are counted: %s", log.b.String())
	assert.Less(t, ps.KeysLoaded, int64(n))
	// Every key was written once, and a record holds one or more of them.
	assert.LessOrEqual(t, lost, int64(n)-ps.KeysLoaded, "no record counted twice")
	require.NoError(t, st.Close())

	cfg.RecoverCorrupt = false
	st, err = New(cfg)
	require.NoError(t, err, "after a recovery the dir is consistent again")
	defer st.Close()
	assert.Zero(t, st.PersistStats().CorruptRecordsLost)
}

// walRecords counts the log records a reader of dir's WALs gets, up to
// the first unreadable chunk of each.
func walRecords(t *testing.T, dir string) uint64 {
	t.Helper()
	logs, err := wal.Scan(wal.Dir{FS: vfs.Default, Dirname: dir})
	require.NoError(t, err)
	var n uint64
	for _, ll := range logs {
		require.NoError(t, eachBatch(ll, func(repr []byte) {
			_, recs, _ := batchCount(repr)
			n += recs
		}))
	}
	return n
}

// BenchmarkMarkSet is the cost the mark adds to each group commit (one
// write in place, not synced) beside the sync it follows (SyncData of a
// WAL-sized append), on the file system of the test's temporary dir:
//
//	go test -run '^$' -bench BenchmarkMarkSet ./store
func BenchmarkMarkSet(b *testing.B) {
	dir := b.TempDir()
	b.Run("set", func(b *testing.B) {
		m, err := createMark(vfs.Default, dir, 1)
		require.NoError(b, err)
		defer m.close()
		for i := 0; b.Loop(); i++ {
			if err := m.set(uint64(i) + 2); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("sync", func(b *testing.B) {
		f, err := vfs.Default.Create(filepath.Join(dir, "wal"), vfs.WriteCategoryUnspecified)
		require.NoError(b, err)
		defer f.Close()
		buf := make([]byte, 1024)
		for b.Loop() {
			if _, err := f.Write(buf); err != nil {
				b.Fatal(err)
			}
			if err := f.SyncData(); err != nil {
				b.Fatal(err)
			}
		}
	})
}
