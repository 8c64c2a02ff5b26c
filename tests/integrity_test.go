package tests

import (
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// runCellserver runs the binary to its end (a start that is refused) and
// returns its exit code and output.
func runCellserver(t *testing.T, args ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binPath, append([]string{"--addr", fmt.Sprintf("127.0.0.1:%d", freePort(t))}, args...)...)
	out, _ := cmd.CombinedOutput()
	require.NoError(t, ctx.Err(), "cellserver neither refused nor stopped in 60 s; output:\n%s", out)
	return cmd.ProcessState.ExitCode(), string(out)
}

// dirSums maps each file of dir to its content's hash.
func dirSums(t *testing.T, dir string) map[string]string {
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

// pebbleFile is dir's newest (highest numbered) file named *ext.
func pebbleFile(t *testing.T, dir, ext string) string {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(dir, "*"+ext))
	require.NoError(t, err)
	require.NotEmpty(t, names, "no %s file in %s", ext, dir)
	sort.Strings(names)
	return names[len(names)-1]
}

// requireRefusal checks a refused start: a non-zero exit and, after the
// start's first line, one line of output saying what is wrong, no Go
// panic or stack.
func requireRefusal(t *testing.T, code int, out string, wants ...string) {
	t.Helper()
	assert.NotZero(t, code, "exit code of a refused start")
	first, rest, _ := strings.Cut(strings.TrimSpace(out), "\n")
	assert.Contains(t, first, "cellserver starting", "the start's first line, got:\n%s", out)
	assert.Equal(t, 1, strings.Count(strings.TrimSpace(rest), "\n")+1, "one line of output after it, got:\n%s", out)
	for _, w := range wants {
		assert.Contains(t, out, w)
	}
	assert.NotContains(t, out, "goroutine")
	assert.NotContains(t, out, "panic")
}

// writtenDir is a data dir holding n keys (one call each), after a clean
// shutdown right behind the writes, so the newest WAL holds the last ones.
func writtenDir(t *testing.T, n int) (dir string, keys []string) {
	dir = filepath.Join(t.TempDir(), "data")
	srv := startServer(t, "--data-dir", dir)
	keys = make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("wal:%d", i)
	}
	require.Equal(t, n, throttleKeys(t, srv.Client(t), keys, 1, 9))
	require.Equal(t, 0, srv.Stop())
	return dir, keys
}

// TestDamagedWALRefused: 16 bytes flipped in the middle of the newest WAL,
// or the WAL cut to half, after a clean shutdown: the start is refused in
// one line with a non-zero exit and the dir is left exactly as it was;
// --recover-corrupt yes starts with what is readable and reports the loss
// in the log and in INFO; the next plain start is clean again.
func TestDamagedWALRefused(t *testing.T) {
	for _, tc := range []struct {
		name   string
		damage func(t *testing.T, path string)
	}{
		{"flip", func(t *testing.T, path string) {
			b, err := os.ReadFile(path)
			require.NoError(t, err)
			for i := len(b) / 2; i < len(b)/2+16; i++ {
				b[i] ^= 0xa5
			}
			require.NoError(t, os.WriteFile(path, b, 0o644))
		}},
		{"truncate", func(t *testing.T, path string) {
			st, err := os.Stat(path)
			require.NoError(t, err)
			require.NoError(t, os.Truncate(path, st.Size()/2))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const n = 50_000
			dir, _ := writtenDir(t, n)
			wal := pebbleFile(t, dir, ".log")
			st, err := os.Stat(wal)
			require.NoError(t, err)
			require.Greater(t, st.Size(), int64(64<<10), "the newest WAL %s holds the last writes", wal)
			tc.damage(t, wal)
			before := dirSums(t, dir)

			code, out := runCellserver(t, "--data-dir", dir)
			requireRefusal(t, code, out, "is corrupt", "refusing to start", "--recover-corrupt yes")
			assert.Equal(t, before, dirSums(t, dir), "a refused data dir is left as it was")

			srv := startServer(t, "--data-dir", dir, "--recover-corrupt", "yes")
			rdb := srv.Client(t)
			lost := infoInt(t, rdb, "persistence", "corrupt_records_lost")
			loaded := infoInt(t, rdb, "persistence", "loaded_keys")
			t.Logf("recovered %d of %d keys, %d records lost", loaded, n, lost)
			assert.Positive(t, lost)
			assert.Less(t, loaded, int64(n))
			assert.Contains(t, srv.Output(), "records_lost=")
			require.Equal(t, 0, srv.Stop())

			srv = startServer(t, "--data-dir", dir)
			rdb = srv.Client(t)
			assert.Equal(t, loaded, infoInt(t, rdb, "persistence", "loaded_keys"))
			assert.Zero(t, infoInt(t, rdb, "persistence", "corrupt_records_lost"))
		})
	}
}

// TestDamagedTableRefused: a flipped byte in a table is refused in one line
// naming it, with a non-zero exit and no Go stack, even with
// --recover-corrupt yes; the dir is left as it was.
func TestDamagedTableRefused(t *testing.T) {
	dir, _ := writtenDir(t, 50_000)
	srv := startServer(t, "--data-dir", dir) // opening flushes the WAL into a table
	require.Equal(t, 0, srv.Stop())
	table := pebbleFile(t, dir, ".sst")
	b, err := os.ReadFile(table)
	require.NoError(t, err)
	b[len(b)/2] ^= 0x01
	require.NoError(t, os.WriteFile(table, b, 0o644))
	before := dirSums(t, dir)
	for _, args := range [][]string{{"--data-dir", dir}, {"--data-dir", dir, "--recover-corrupt", "yes"}} {
		code, out := runCellserver(t, args...)
		requireRefusal(t, code, out, "is corrupt: table "+filepath.Base(table), "checksum mismatch")
		assert.Equal(t, before, dirSums(t, dir))
	}
}

// TestKill9NeverLooksCorrupt: under every fsync policy, a restart after
// kill -9 under load starts (what a crash lost is not corruption) and
// reports nothing lost to corruption.
func TestKill9NeverLooksCorrupt(t *testing.T) {
	for _, fsync := range []string{"always", "everysec", "no"} {
		t.Run(fsync, func(t *testing.T) {
			acked, _, _, rdb := killUnderLoad(t, fsync, 1500*time.Millisecond)
			require.NotEmpty(t, acked)
			assert.Zero(t, infoInt(t, rdb, "persistence", "corrupt_records_lost"))
			assert.Positive(t, infoInt(t, rdb, "persistence", "loaded_keys"))
		})
	}
}

// TestKill9DamagedTailNeverLosesAcknowledged: under --fsync always every
// reply is sent after its sync, so a record any client saw acknowledged
// can be missing after kill -9 only if the log was damaged. Keys charged
// once each in many small group commits, kill -9, then, on a copy of the
// dir each time, 16 bytes flipped at one of many places of the newest
// WAL, most near its end (the records synced last, which no later chunk
// vouches for). Each start is refused in one line, or serves every
// acknowledged key; --recover-corrupt yes on a refused copy reports what
// it lost.
func TestKill9DamagedTailNeverLosesAcknowledged(t *testing.T) {
	const n, depth = 4000, 20
	dir := filepath.Join(t.TempDir(), "data")
	srv := startServer(t, "--data-dir", dir, "--fsync", "always")
	rdb := srv.Client(t)
	ctx := ctxT(t, 60*time.Second)
	acked := 0
	for lo := 0; lo < n; lo += depth {
		pipe := rdb.Pipeline()
		for i := lo; i < lo+depth; i++ {
			pipe.Do(ctx, "CL.THROTTLE", fmt.Sprintf("tail:%d", i), 9, 1, 3600, 1)
		}
		cmds, err := pipe.Exec(ctx)
		require.NoError(t, err)
		for _, c := range cmds {
			v, err := c.(*redis.Cmd).Int64Slice()
			require.NoError(t, err)
			require.Equal(t, int64(0), v[0])
			acked++
		}
	}
	srv.Kill9()
	wal := filepath.Base(pebbleFile(t, dir, ".log"))
	st, err := os.Stat(filepath.Join(dir, wal))
	require.NoError(t, err)
	size := st.Size()
	require.Greater(t, size, int64(96<<10), "the newest WAL holds the writes")

	// Every 1.5 KiB over the last 48 KiB, and the middle.
	offsets := []int64{size / 2}
	for off := size - 48<<10; off < size-16; off += 1536 {
		offsets = append(offsets, off)
	}
	refused, whole := 0, 0
	for _, off := range offsets {
		cp := filepath.Join(t.TempDir(), "copy")
		require.NoError(t, exec.Command("cp", "-a", dir, cp).Run())
		f, err := os.OpenFile(filepath.Join(cp, wal), os.O_RDWR, 0)
		require.NoError(t, err)
		b := make([]byte, 16)
		_, err = f.ReadAt(b, off)
		require.NoError(t, err)
		for i := range b {
			b[i] ^= 0xa5
		}
		_, err = f.WriteAt(b, off)
		require.NoError(t, err)
		require.NoError(t, f.Close())

		srv, err := tryStartServer(t, "127.0.0.1", []string{"--data-dir", cp, "--fsync", "always"})
		if err == nil {
			loaded := infoInt(t, srv.Client(t), "persistence", "loaded_keys")
			require.GreaterOrEqual(t, loaded, int64(acked), "flip at %d of %d: the start served %d keys of %d acknowledged, without refusing", off, size, loaded, acked)
			require.Equal(t, 0, srv.Stop())
			whole++
			continue
		}
		code, out := runCellserver(t, "--data-dir", cp, "--fsync", "always")
		requireRefusal(t, code, out, "is corrupt", "refusing to start")
		refused++
		if refused <= 2 {
			srv := startServer(t, "--data-dir", cp, "--recover-corrupt", "yes")
			r := srv.Client(t)
			loaded := infoInt(t, r, "persistence", "loaded_keys")
			assert.Less(t, loaded, int64(acked), "flip at %d: a refused dir lost keys", off)
			assert.Positive(t, infoInt(t, r, "persistence", "corrupt_records_lost"), "flip at %d: %d of %d keys recovered, the loss must be reported", off, loaded, acked)
			require.Equal(t, 0, srv.Stop())
		}
	}
	t.Logf("%d flips: %d refused, %d started with every acknowledged key", len(offsets), refused, whole)
	assert.Positive(t, refused, "flips in the synced records must be refused")
}
