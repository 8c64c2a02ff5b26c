package tests

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// mountTmpfs mounts a tmpfs of the given size (e.g. "24m") on a temp dir,
// unmounted at cleanup, or skips the test loudly when it cannot (not root,
// no mount).
func mountTmpfs(t *testing.T, size string) string {
	t.Helper()
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("SKIPPED: this test needs a small file system to fill up and could not mount a tmpfs (run it as root): %v: %s", err, out)
	}
	// Registered before any server starts, so it runs after they stop.
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
		}
	})
	return dir
}

// cpuTicks is the process's user plus system time, in clock ticks.
func cpuTicks(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	require.NoError(t, err)
	// The command name (field 2) may hold spaces; the fields after it don't.
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	utime, err := strconv.ParseInt(f[11], 10, 64) // field 14 of the whole line
	require.NoError(t, err)
	stime, err := strconv.ParseInt(f[12], 10, 64)
	require.NoError(t, err)
	return utime + stime
}

// throttleKeys sends CL.THROTTLE (burst 9, one token per hour, quantity q)
// on keys[lo:hi] in pipelines and returns how many replies had the given
// remaining count.
func throttleKeys(t *testing.T, rdb *redis.Client, keys []string, q int, remaining int64) int {
	t.Helper()
	ctx := ctxT(t, 60*time.Second)
	n := 0
	for lo := 0; lo < len(keys); lo += 1000 {
		pipe := rdb.Pipeline()
		cmds := make([]*redis.Cmd, 0, 1000)
		for _, k := range keys[lo:min(lo+1000, len(keys))] {
			cmds = append(cmds, pipe.Do(ctx, "CL.THROTTLE", k, 9, 1, 3600, q))
		}
		_, err := pipe.Exec(ctx)
		require.NoError(t, err)
		for _, c := range cmds {
			v, err := c.Int64Slice()
			require.NoError(t, err)
			if v[0] == 0 && v[2] == remaining {
				n++
			}
		}
	}
	return n
}

// fillDisk makes n keys named prefix+i with one call each (allowed, 9 of
// 10 left) and waits until the server reports that the disk filled up.
func fillDisk(t *testing.T, rdb *redis.Client, prefix string, n int) []string {
	t.Helper()
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("%s%d", prefix, i)
	}
	require.Equal(t, len(keys), throttleKeys(t, rdb, keys, 1, 9), "every first call is allowed")
	require.Eventually(t, func() bool {
		return strings.Contains(rdb.Info(context.Background(), "persistence").Val(), "last_write_status:err")
	}, 15*time.Second, 100*time.Millisecond, "the disk never filled up: the test proves nothing")
	return keys
}

// TestFullDiskKeepsServing fills a 24 MiB tmpfs data dir while clients
// write 200,000 new keys: the server keeps answering from memory, holds
// still while the disk is full (almost no CPU, almost no log lines), and
// once space is freed writes everything out, so that a restart has every
// key acknowledged with its state.
func TestFullDiskKeepsServing(t *testing.T) {
	mnt := mountTmpfs(t, "24m")
	// 14 MiB of the 24 taken: 200,000 keys (about 8 MiB of log, more with
	// Pebble's WAL and tables) cannot fit in what is left.
	filler := filepath.Join(mnt, "filler")
	require.NoError(t, os.WriteFile(filler, make([]byte, 14<<20), 0o644))
	dir := filepath.Join(mnt, "data")
	srv := startServer(t, "--data-dir", dir)
	rdb := srv.Client(t)
	keys := fillDisk(t, rdb, "full:", 200_000)
	assert.Contains(t, rdb.Info(context.Background(), "persistence").Val(), "no space left on device")

	// Full and idle: next to no CPU and no log lines for 10 s.
	time.Sleep(2 * time.Second) // the last write-outs are held back first
	pid := srv.cmd.Process.Pid
	lines0, cpu0 := strings.Count(srv.Output(), "\n"), cpuTicks(t, pid)
	time.Sleep(10 * time.Second)
	lines, ticks := strings.Count(srv.Output(), "\n")-lines0, cpuTicks(t, pid)-cpu0
	t.Logf("disk full, no traffic, 10 s: %d CPU ticks (%.3f cores), %d log lines", ticks, float64(ticks)/100/10, lines)
	assert.Less(t, ticks, int64(100), "CPU over 10 s while full and idle, in 1/100 s (0.1 cores is 100)")
	assert.Less(t, lines, 10, "log lines over 10 s while full and idle")
	require.Equal(t, len(keys), throttleKeys(t, rdb, keys[:1000], 0, 9)+len(keys)-1000, "still served from memory")

	// Space comes back: everything is written out.
	require.NoError(t, os.Remove(filler))
	require.Eventually(t, func() bool {
		info := rdb.Info(context.Background(), "persistence").Val()
		return strings.Contains(info, "last_write_status:ok") && strings.Contains(info, "changes_pending:0\r")
	}, 20*time.Second, 100*time.Millisecond, "writes did not resume once space was freed")
	out := srv.Output()
	assert.Contains(t, out, "writes succeed again")
	assert.NotContains(t, out, "pebble fatal")
	require.Equal(t, 0, srv.Stop())
	assert.NotContains(t, srv.Output(), "could not be written before shutdown")

	srv2 := startServer(t, "--data-dir", dir)
	rdb2 := srv2.Client(t)
	assert.Equal(t, int64(len(keys)), infoInt(t, rdb2, "persistence", "loaded_keys"))
	// A peek (quantity 0) shows each key's one used token.
	assert.Equal(t, len(keys), throttleKeys(t, rdb2, keys, 0, 9), "keys whose state survived the restart")
}

// TestFullDiskAlwaysRepliesOnlyOnceWritten: under --fsync always a reply
// says its change is on disk. With the disk full, a call is decided but its
// reply waits; with --stop-writes-on-persist-error yes later writes are
// refused with MISCONF meanwhile, and reads go on. Once space is back the
// waiting reply comes, and a kill -9 then keeps its change.
func TestFullDiskAlwaysRepliesOnlyOnceWritten(t *testing.T) {
	mnt := mountTmpfs(t, "24m")
	dir := filepath.Join(mnt, "data")
	srv := startServer(t, "--data-dir", dir, "--fsync", "always", "--stop-writes-on-persist-error", "yes")
	rdb := srv.Client(t)
	ctx := ctxT(t, 60*time.Second)
	require.NoError(t, rdb.Do(ctx, "CL.THROTTLE", "before", 9, 1, 3600).Err())

	// Leave 1 MiB: less than the reserve kept for Pebble's own writes.
	var fs syscall.Statfs_t
	require.NoError(t, syscall.Statfs(mnt, &fs))
	filler := filepath.Join(mnt, "filler")
	require.NoError(t, os.WriteFile(filler, make([]byte, int64(fs.Bavail)*fs.Bsize-1<<20), 0o644))

	type reply struct {
		v   []int64
		err error
	}
	waiting := make(chan reply, 1)
	rdb2 := srv.Client(t)
	go func() {
		v, err := rdb2.Do(ctx, "CL.THROTTLE", "during", 9, 1, 3600).Int64Slice()
		waiting <- reply{v, err}
	}()
	require.Eventually(t, func() bool {
		return strings.Contains(rdb.Info(ctx, "persistence").Val(), "last_write_status:err")
	}, 15*time.Second, 50*time.Millisecond)
	select {
	case r := <-waiting:
		t.Fatalf("a call was acknowledged while its change could not be written: %v %v", r.v, r.err)
	case <-time.After(2 * time.Second):
	}
	err := rdb.Do(ctx, "CL.THROTTLE", "other", 9, 1, 3600).Err()
	require.Error(t, err)
	assert.True(t, strings.HasPrefix(err.Error(), "MISCONF "), err.Error())
	assert.NoError(t, rdb.Do(ctx, "CL.PEEK", "before", 9, 1, 3600).Err(), "reads go on")

	require.NoError(t, os.Remove(filler))
	var r reply
	select {
	case r = <-waiting:
	case <-time.After(20 * time.Second):
		t.Fatal("the waiting reply did not come once space was freed")
	}
	require.NoError(t, r.err)
	require.Len(t, r.v, 5)
	assert.Equal(t, []int64{0, 10, 9, -1}, r.v[:4], "allowed, 9 left")

	srv.Kill9()
	srv2 := startServer(t, "--data-dir", dir)
	v, err := srv2.Client(t).Do(ctx, "CL.THROTTLE", "during", 9, 1, 3600, 0).Int64Slice()
	require.NoError(t, err)
	assert.Equal(t, int64(9), v[2], "the acknowledged call's change survived kill -9")
}

// TestTinyDiskFilledStillOpens: a data dir that filled a 3 MiB file system
// must open again after a shutdown. The running reserve leaves room for
// what a restart needs to flush the WAL (before, on file systems under
// about 12 MiB it did not, and the restart was refused until space was
// freed).
func TestTinyDiskFilledStillOpens(t *testing.T) {
	mnt := mountTmpfs(t, "3m")
	dir := filepath.Join(mnt, "data")
	srv := startServer(t, "--data-dir", dir)
	rdb := srv.Client(t)
	// Written while there is room: these must survive the restart.
	early := make([]string, 1000)
	for i := range early {
		early[i] = fmt.Sprintf("early:%d", i)
	}
	require.Equal(t, len(early), throttleKeys(t, rdb, early, 1, 9))
	require.Eventually(t, func() bool {
		info := rdb.Info(context.Background(), "persistence").Val()
		return strings.Contains(info, "changes_pending:0\r") && strings.Contains(info, "last_write_status:ok")
	}, 15*time.Second, 50*time.Millisecond, "the first keys are written while there is room")
	keys := fillDisk(t, rdb, "tiny:", 100_000)
	require.Equal(t, 0, srv.Stop())

	srv2 := startServer(t, "--data-dir", dir)
	rdb2 := srv2.Client(t)
	loaded := infoInt(t, rdb2, "persistence", "loaded_keys")
	t.Logf("keys loaded after the restart: %d of %d", loaded, len(keys))
	assert.Positive(t, loaded, "what was written before the disk filled up is there")
	assert.GreaterOrEqual(t, loaded, int64(len(early)))
}
