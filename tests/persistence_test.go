package tests

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Kill9 kills the server with SIGKILL (a crash), and marks that as expected.
func (s *server) Kill9() {
	s.stopOnce.Do(func() {
		_ = s.cmd.Process.Kill()
		<-s.exited
		s.exitCode = 0
	})
}

func TestRestartKeepsEveryKey(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	srv := startServer(t, "--data-dir", dir)
	rdb := srv.Client(t)
	ctx := ctxT(t, 30*time.Second)
	type st struct {
		tat  string
		pttl int64
		at   time.Time // just before pttl was asked for
	}
	before := map[string]st{}
	for i := 0; i < 300; i++ {
		k := fmt.Sprint("user:", i)
		for j := 0; j <= i%7; j++ {
			require.NoError(t, rdb.Do(ctx, "CL.THROTTLE", k, 10, 1, 3600).Err())
		}
	}
	require.NoError(t, rdb.Del(ctx, "user:5").Err())
	for i := 0; i < 300; i++ {
		k := fmt.Sprint("user:", i)
		tat, _ := rdb.Get(ctx, k).Result()
		// Taken before the PTTL is sent, so the server's reading is no
		// earlier than at, and time.Since(at) bounds the time that passed.
		at := time.Now()
		pttl := rdb.PTTL(ctx, k).Val()
		before[k] = st{tat, pttl.Milliseconds(), at}
	}
	require.Equal(t, 0, srv.Stop())
	srv2 := startServer(t, "--data-dir", dir)
	rdb2 := srv2.Client(t)
	for k, want := range before {
		tat, err := rdb2.Get(ctx, k).Result()
		if want.tat == "" {
			assert.ErrorIs(t, err, redis.Nil, k)
			continue
		}
		assert.Equal(t, want.tat, tat, k)
		pttl := rdb2.PTTL(ctx, k).Val().Milliseconds()
		elapsed := time.Since(want.at).Milliseconds()
		assert.LessOrEqual(t, pttl, want.pttl, k)
		assert.GreaterOrEqual(t, pttl, want.pttl-elapsed-5, k) // the expiry instant itself survived
	}
	info := rdb2.Info(ctx, "persistence").Val()
	assert.Contains(t, info, "loaded_keys:299")
	assert.Contains(t, info, "last_write_status:ok")
}

// hammer runs workers that each call CL.THROTTLE on their own keys (burst
// 19, one token per hour, so no token comes back during the test) until
// stop closes, recording for every key how many allowed replies it got and
// when.
type ack struct {
	at time.Time
	n  int // allowed calls acknowledged so far for the key
}

// The maps are complete once wait returns (after stop is closed).
func hammer(t *testing.T, addr string, workers, keysPer int, stop <-chan struct{}) (acked map[string][]ack, sent map[string]int, wait func()) {
	var mu sync.Mutex
	acked, sent = map[string][]ack{}, map[string]int{}
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, PoolSize: 1})
			defer rdb.Close()
			local := map[string][]ack{}
			lsent := map[string]int{}
			for i := 0; ; i++ {
				select {
				case <-stop:
					mu.Lock()
					for k, v := range local {
						acked[k] = v
					}
					for k, v := range lsent {
						sent[k] = v
					}
					mu.Unlock()
					return
				default:
				}
				// Half the calls go to a few hot keys (exhausted quickly), half
				// cycle over many cold keys (still being written at the kill).
				k := fmt.Sprintf("w%d:hot%d", w, (i/2)%3)
				if i%2 == 1 {
					k = fmt.Sprintf("w%d:cold%d", w, (i/2)%keysPer)
				}
				lsent[k]++
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				v, err := rdb.Do(ctx, "CL.THROTTLE", k, 19, 1, 3600).Int64Slice()
				cancel()
				if err != nil {
					time.Sleep(5 * time.Millisecond) // server gone; wait for stop
					continue
				}
				if v[0] == 0 {
					n := 1
					if l := local[k]; len(l) > 0 {
						n = l[len(l)-1].n + 1
					}
					local[k] = append(local[k], ack{time.Now(), n})
				}
			}
		}()
	}
	return acked, sent, wg.Wait
}

// persistedUsed reads how many tokens each key has used, with a peek
// (quantity 0), which does not consume.
func persistedUsed(t *testing.T, rdb *redis.Client, key string) int {
	v, err := rdb.Do(context.Background(), "CL.THROTTLE", key, 19, 1, 3600, 0).Int64Slice()
	require.NoError(t, err)
	return int(20 - v[2])
}

func killUnderLoad(t *testing.T, fsync string, run time.Duration) (acked map[string][]ack, sent map[string]int, killedAt time.Time, after *redis.Client) {
	dir := filepath.Join(t.TempDir(), "data")
	srv := startServer(t, "--data-dir", dir, "--fsync", fsync)
	stop := make(chan struct{})
	a, s, wait := hammer(t, srv.Addr, 8, 300, stop)
	time.Sleep(run)
	killedAt = time.Now()
	srv.Kill9()
	close(stop)
	wait()
	srv2 := startServer(t, "--data-dir", dir, "--fsync", fsync)
	return a, s, killedAt, srv2.Client(t)
}

// TestKill9AlwaysLosesNothingAcknowledged: with --fsync always, every
// allowed decision acknowledged before kill -9 is there after restart, and
// exhausted keys stay limited. Run three times.
func TestKill9AlwaysLosesNothingAcknowledged(t *testing.T) {
	for round := 0; round < 3; round++ {
		acked, sent, _, rdb := killUnderLoad(t, "always", 1500*time.Millisecond)
		require.NotEmpty(t, acked)
		exhausted, total := 0, 0
		for k, list := range acked {
			n := list[len(list)-1].n
			total += n
			used := persistedUsed(t, rdb, k)
			require.GreaterOrEqual(t, used, n, "round %d key %s: %d allowed calls acknowledged, %d survived", round, k, n, used)
			require.LessOrEqual(t, used, min(sent[k], 20), "key %s", k)
			if n == 20 {
				exhausted++
				v, err := rdb.Do(context.Background(), "CL.THROTTLE", k, 19, 1, 3600).Int64Slice()
				require.NoError(t, err)
				require.Equal(t, int64(1), v[0], "exhausted key %s must stay limited", k)
			}
		}
		t.Logf("round %d: %d keys, %d acknowledged allowed calls, %d exhausted keys: all survived kill -9", round, len(acked), total, exhausted)
	}
}

// TestKill9EverySecLossBounded: with everysec, what kill -9 loses is bounded
// by the sync interval: every decision acknowledged more than 2 s (one sync
// interval plus scheduling slack) before the kill survives.
func TestKill9EverySecLossBounded(t *testing.T) {
	acked, _, killedAt, rdb := killUnderLoad(t, "everysec", 3*time.Second)
	require.NotEmpty(t, acked)
	var lostMax time.Duration
	for k, list := range acked {
		used := persistedUsed(t, rdb, k)
		for _, a := range list {
			if a.n > used {
				// This acknowledged call was lost: how long before the kill?
				if d := killedAt.Sub(a.at); d > lostMax {
					lostMax = d
				}
				break
			}
		}
	}
	t.Logf("oldest lost acknowledgement: %v before kill -9", lostMax)
	assert.Less(t, lostMax, 2*time.Second)
}

func TestSecondProcessOnSameDirRefused(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	startServer(t, "--data-dir", dir)
	out, err := exec.Command(binPath, "--addr", fmt.Sprintf("127.0.0.1:%d", freePort(t)), "--data-dir", dir).CombinedOutput()
	require.Error(t, err)
	assert.Contains(t, string(out), "in use by another process")
}

func TestExpiredKeysGoneAfterRestart(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	srv := startServer(t, "--data-dir", dir)
	rdb := srv.Client(t)
	ctx := ctxT(t, 10*time.Second)
	for i := 0; i < 50; i++ {
		require.NoError(t, rdb.Do(ctx, "CL.THROTTLE", fmt.Sprint("short", i), 0, 1, 1).Err()) // 1 s TTL
	}
	require.NoError(t, rdb.Do(ctx, "CL.THROTTLE", "long", 0, 1, 3600).Err())
	require.Equal(t, 0, srv.Stop())
	time.Sleep(1100 * time.Millisecond) // loading judges expiry by the wall clock
	srv2 := startServer(t, "--data-dir", dir)
	rdb2 := srv2.Client(t)
	assert.Equal(t, int64(1), rdb2.DBSize(ctx).Val())
	info := rdb2.Info(ctx, "persistence").Val()
	assert.True(t, strings.Contains(info, "loaded_keys:1\r\n") && strings.Contains(info, "loaded_expired_dropped:50\r\n"), info)
}

// infoInt reads an integer field of INFO's section.
func infoInt(t *testing.T, rdb *redis.Client, section, field string) int64 {
	info := rdb.Info(context.Background(), section).Val()
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			var n int64
			_, err := fmt.Sscan(v, &n)
			require.NoError(t, err, line)
			return n
		}
	}
	t.Fatalf("INFO %s has no %s", section, field)
	return 0
}

// TestKill9AfterSnapshotRounds: every key written once, then a hot four
// fifths changed until the log passes its snapshot threshold, so shards
// rewrite their keys and the records before are cut off (the cold keys'
// only records then are the snapshot's); then more changes and deletions
// on top, a pause longer than the write-out interval, kill -9, and a
// restart that must hold exactly the state read before the kill.
func TestKill9AfterSnapshotRounds(t *testing.T) {
	if testing.Short() {
		t.Skip("writes over 16 MiB of log")
	}
	dir := filepath.Join(t.TempDir(), "data")
	srv := startServer(t, "--data-dir", dir)
	rdb := srv.Client(t)
	ctx := ctxT(t, 120*time.Second)
	const n = 100_000
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("snap:{%d}:%d", i%997, i)
	}
	pass := func(keys []string) {
		var wg sync.WaitGroup
		for w := 0; w < 4; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for lo := w * 256; lo < len(keys); lo += 4 * 256 {
					pipe := rdb.Pipeline()
					for _, k := range keys[lo:min(lo+256, len(keys))] {
						pipe.Do(ctx, "CL.THROTTLE", k, 1000, 1, 3600)
					}
					_, err := pipe.Exec(ctx)
					assert.NoError(t, err)
				}
			}()
		}
		wg.Wait()
	}
	pass(keys)
	time.Sleep(1500 * time.Millisecond) // written out before the round starts
	deadline := time.Now().Add(60 * time.Second)
	for infoInt(t, rdb, "persistence", "snapshot_rounds") == 0 {
		require.True(t, time.Now().Before(deadline), "no snapshot round after 60 s of changes")
		pass(keys[:n*4/5])
	}
	t.Logf("%d snapshot rounds after the hot passes", infoInt(t, rdb, "persistence", "snapshot_rounds"))
	pass(keys[:n/2])
	pipe := rdb.Pipeline()
	for _, k := range keys[n/4 : n/4+5000] {
		pipe.Del(ctx, k)
	}
	_, err := pipe.Exec(ctx)
	require.NoError(t, err)
	time.Sleep(2500 * time.Millisecond) // past the next write-out and its sync

	read := func(rdb *redis.Client) []string {
		out := make([]string, n)
		for lo := 0; lo < n; lo += 1000 {
			pipe := rdb.Pipeline()
			cmds := make([]*redis.StringCmd, 0, 1000)
			for _, k := range keys[lo:min(lo+1000, n)] {
				cmds = append(cmds, pipe.Get(ctx, k))
			}
			_, _ = pipe.Exec(ctx)
			for i, c := range cmds {
				v, err := c.Result()
				if err != redis.Nil {
					require.NoError(t, err)
				}
				out[lo+i] = v
			}
		}
		return out
	}
	want := read(rdb)
	srv.Kill9()
	srv2 := startServer(t, "--data-dir", dir)
	rdb2 := srv2.Client(t)
	got := read(rdb2)
	diff := 0
	for i := range want {
		if want[i] != got[i] {
			if diff < 5 {
				t.Errorf("%s: %q before kill -9, %q after", keys[i], want[i], got[i])
			}
			diff++
		}
	}
	assert.Zero(t, diff, "keys that differ after the restart")
	assert.Equal(t, int64(n-5000), infoInt(t, rdb2, "persistence", "loaded_keys"))
}
