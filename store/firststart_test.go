package store

import (
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestFirstStartFailedInsideOpenRetried: a first start that failed inside
// pebble.Open (here: its MANIFEST cannot be created) leaves Pebble's LOCK
// and format version marker behind; the next start must take the dir as
// new, not refuse it forever as someone else's.
func TestFirstStartFailedInsideOpenRetried(t *testing.T) {
	mem := vfs.NewMem()
	var failing atomic.Bool
	failing.Store(true)
	fs := errorfs.Wrap(mem, errorfs.InjectorFunc(func(op errorfs.Op) error {
		if failing.Load() && strings.Contains(op.Path, "MANIFEST") && op.Kind.ReadOrWrite() == errorfs.OpIsWrite {
			return errors.New("injected: i/o error")
		}
		return nil
	}))
	cfg := Config{Shards: 2, Clock: wallClock(), SweepInterval: -1, DataDir: "db", FS: fs, Logger: slog.New(slog.DiscardHandler)}
	_, err := New(cfg)
	require.Error(t, err)
	names, err := mem.List("db")
	require.NoError(t, err)
	require.NotEmpty(t, names, "the failed start left files")
	t.Logf("left behind: %v", names)

	failing.Store(false)
	startsAnew(t, cfg, "left behind: %v", names)
}

// startsAnew opens cfg's data dir, which holds no data, writes a key and
// checks that the next open loads it.
func startsAnew(t *testing.T, cfg Config, msgAndArgs ...any) {
	t.Helper()
	st, err := New(cfg)
	require.NoError(t, err, msgAndArgs...)
	run(st, throttleOp("k", 5, 1, 3600, 1))
	require.NoError(t, st.Close())
	st, err = New(cfg)
	require.NoError(t, err)
	defer st.Close()
	assert.Equal(t, int64(1), st.PersistStats().KeysLoaded)
}

// TestFirstStartFailedBeforeFormatKey: a first start that stopped after
// Pebble made its files but before the format key was written leaves a
// Pebble dir with nothing in it; it is taken as new, not refused for a
// missing format marker. One that holds records but no format key is still
// refused.
func TestFirstStartFailedBeforeFormatKey(t *testing.T) {
	dir := t.TempDir()
	db, err := pebble.Open(dir, &pebble.Options{FormatMajorVersion: pebbleFormat})
	require.NoError(t, err)
	require.NoError(t, db.Close())
	cfg := Config{Shards: 2, Clock: wallClock(), SweepInterval: -1, DataDir: dir, Logger: slog.New(slog.DiscardHandler)}
	st, err := New(cfg)
	require.NoError(t, err)
	run(st, throttleOp("k", 5, 1, 3600, 1))
	require.NoError(t, st.Close())
	st, err = New(cfg)
	require.NoError(t, err)
	assert.Equal(t, int64(1), st.PersistStats().KeysLoaded)
	require.NoError(t, st.Close())

	other := t.TempDir()
	db, err = pebble.Open(other, &pebble.Options{FormatMajorVersion: pebbleFormat})
	require.NoError(t, err)
	require.NoError(t, db.Set([]byte("someone else's"), []byte("x"), pebble.Sync))
	require.NoError(t, db.Close())
	cfg.DataDir = other
	_, err = New(cfg)
	assert.ErrorContains(t, err, "format marker")
}

// TestDamagedMarkUnderRecoverCorrupt: a damaged cellserver.mark is refused,
// and under --recover-corrupt yes taken as no mark, with a warning; the
// mark is then written anew, so the next start passes without the flag.
func TestDamagedMarkUnderRecoverCorrupt(t *testing.T) {
	dir := t.TempDir()
	var log lockedLog
	cfg := Config{Shards: 2, Clock: wallClock(), SweepInterval: -1, DataDir: dir, Logger: log.logger()}
	st, err := New(cfg)
	require.NoError(t, err)
	fillKeys(t, st, "k", 100)
	require.NoError(t, st.Close())
	require.NoError(t, os.WriteFile(filepath.Join(dir, markFile), []byte("garbage\n"), 0o644))

	_, err = New(cfg)
	require.ErrorContains(t, err, "is damaged")
	require.ErrorContains(t, err, "--recover-corrupt yes ignores it")
	cfg.RecoverCorrupt = true
	st, err = New(cfg)
	require.NoError(t, err)
	assert.Equal(t, int64(100), st.PersistStats().KeysLoaded)
	assert.Equal(t, 1, log.lines(markFile+" is damaged; ignoring it"))
	require.NoError(t, st.Close())

	cfg.RecoverCorrupt = false
	st, err = New(cfg)
	require.NoError(t, err, "the mark was written anew")
	defer st.Close()
	assert.Equal(t, int64(100), st.PersistStats().KeysLoaded)
}

// TestMissingManifestMarkerRefused: a dir whose marker naming the current
// MANIFEST was deleted is refused as corrupt, in words that say what is
// missing (Pebble's own says the database does not exist), and left as it
// was.
func TestMissingManifestMarkerRefused(t *testing.T) {
	dir := t.TempDir()
	cfg := Config{Shards: 2, Clock: wallClock(), SweepInterval: -1, DataDir: dir}
	st, err := New(cfg)
	require.NoError(t, err)
	fillKeys(t, st, "k", 10)
	require.NoError(t, st.Close())
	markers, err := filepath.Glob(filepath.Join(dir, "marker.manifest.*"))
	require.NoError(t, err)
	require.NotEmpty(t, markers)
	for _, m := range markers {
		require.NoError(t, os.Remove(m))
	}
	before := dirHashes(t, dir)
	_, err = New(cfg)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "is corrupt: it holds Pebble's files but no marker.manifest.*")
	assert.Contains(t, err.Error(), "refusing to start")
	assert.Equal(t, before, dirHashes(t, dir))
}

// TestFirstStartStoppedBeforeManifestMarker: a first start that stopped
// after Pebble wrote its first MANIFEST but before the marker naming it
// left no data: the dir is taken as new, as for the other leftovers of an
// early stop, and keeps what the next run writes.
func TestFirstStartStoppedBeforeManifestMarker(t *testing.T) {
	dir := t.TempDir()
	cfg := Config{Shards: 2, Clock: wallClock(), SweepInterval: -1, DataDir: dir}
	st, err := New(cfg)
	require.NoError(t, err)
	require.NoError(t, st.Close())
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	for _, e := range entries {
		n := e.Name()
		if n == "LOCK" || strings.HasPrefix(n, "marker.format-version") || strings.HasPrefix(n, "MANIFEST-") {
			continue
		}
		require.NoError(t, os.Remove(filepath.Join(dir, n)))
	}
	startsAnew(t, cfg, "no data: taken as new")
}
