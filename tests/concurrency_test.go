package tests

import (
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// TestConcurrentOneKeyRealClock: 50 connections hammer one key with
// "9 10 1" (limit 10, T = 100 ms) for about 1.5 s of wall-clock time. GCRA
// allows at most limit + one per elapsed emission interval (+1 for the
// boundary), and at least the initial burst.
func TestConcurrentOneKeyRealClock(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	ctx := ctxT(t, 60*time.Second)
	const (
		workers  = 50
		maxBurst = 9
		limit    = maxBurst + 1
		rate     = 10.0 // per second
		runFor   = 1500 * time.Millisecond
	)
	clients := make([]*redis.Client, workers)
	for i := range clients {
		clients[i] = s.Client(t, func(o *redis.Options) { o.PoolSize = 1; o.MinIdleConns = 0 })
		require.NoError(t, clients[i].Ping(ctx).Err()) // connect before the clock starts
	}

	var allowed, limited, calls atomic.Int64
	var errMu sync.Mutex
	var firstErr error
	var wg sync.WaitGroup
	start := time.Now()
	stop := start.Add(runFor)
	for _, c := range clients {
		wg.Add(1)
		go func(c *redis.Client) {
			defer wg.Done()
			for time.Now().Before(stop) {
				v, err := c.Do(ctx, "CL.THROTTLE", "hot", maxBurst, 10, 1).Int64Slice()
				if err == nil && len(v) != 5 {
					err = fmt.Errorf("reply %v", v)
				}
				if err == nil && (v[1] != limit || (v[0] == 0) != (v[3] == -1)) {
					err = fmt.Errorf("inconsistent reply %v", v)
				}
				if err != nil {
					errMu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					errMu.Unlock()
					return
				}
				calls.Add(1)
				if v[0] == 0 {
					allowed.Add(1)
				} else {
					limited.Add(1)
				}
			}
		}(c)
	}
	wg.Wait()
	elapsed := time.Since(start)
	require.NoError(t, firstErr)

	upper := int64(limit) + int64(math.Floor(elapsed.Seconds()*rate)) + 1
	t.Logf("%d calls in %v: %d allowed, %d limited (upper bound %d)", calls.Load(), elapsed, allowed.Load(), limited.Load(), upper)
	require.Greater(t, limited.Load(), int64(0), "the key was never limited: not hammered hard enough to test anything")
	require.LessOrEqual(t, allowed.Load(), upper, "more calls allowed than GCRA permits")
	require.GreaterOrEqual(t, allowed.Load(), int64(maxBurst+1), "the initial burst must be allowed")
	// Refills must happen: over 1.5 s at 10/s at least a few more are allowed.
	require.GreaterOrEqual(t, allowed.Load(), int64(limit)+int64(elapsed.Seconds()*rate)/2,
		"too few allowed: the limiter does not refill")
}

// TestConcurrentManyKeysFrozenClock: with the clock frozen nothing refills,
// so whatever the interleaving each key with max_burst b allows exactly
// b+1 calls, and the TAT counts exactly those.
func TestConcurrentManyKeysFrozenClock(t *testing.T) {
	t.Parallel()
	s := startServer(t, "--enable-debug-command", "yes")
	ctx := ctxT(t, 60*time.Second)
	admin := s.Client(t)
	const now = int64(1700000000000000000)
	require.NoError(t, admin.Do(ctx, "DEBUG", "CLOCK", "SET", now).Err())

	const (
		keys     = 200
		workers  = 50
		extra    = 6 // calls per key beyond its limit
		periodS  = 3600
		countPer = 1 // T = 3600 s
	)
	type call struct {
		key   string
		burst int
	}
	var work []call
	for round := 0; ; round++ {
		added := false
		for k := 0; k < keys; k++ {
			b := k % 8
			if round < b+1+extra {
				work = append(work, call{fmt.Sprintf("many:%d", k), b})
				added = true
			}
		}
		if !added {
			break
		}
	}
	jobs := make(chan call, len(work))
	for _, w := range work {
		jobs <- w
	}
	close(jobs)

	var mu sync.Mutex
	allowed := map[string]int{}
	var firstErr error
	var wg sync.WaitGroup
	for i := 0; i < workers; i++ {
		c := s.Client(t, func(o *redis.Options) { o.PoolSize = 1 })
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Small pipelines so connections interleave on the same keys.
			batch := make([]call, 0, 8)
			flush := func() error {
				if len(batch) == 0 {
					return nil
				}
				p := c.Pipeline()
				res := make([]*redis.Cmd, len(batch))
				for j, w := range batch {
					res[j] = p.Do(ctx, "CL.THROTTLE", w.key, w.burst, countPer, periodS)
				}
				if _, err := p.Exec(ctx); err != nil {
					return err
				}
				mu.Lock()
				defer mu.Unlock()
				for j, r := range res {
					v, err := r.Int64Slice()
					if err != nil {
						return err
					}
					if v[1] != int64(batch[j].burst+1) {
						return fmt.Errorf("%s: reply %v", batch[j].key, v)
					}
					if v[0] == 0 {
						allowed[batch[j].key]++
					}
				}
				batch = batch[:0]
				return nil
			}
			for w := range jobs {
				batch = append(batch, w)
				if len(batch) == cap(batch) {
					if err := flush(); err != nil {
						mu.Lock()
						firstErr = err
						mu.Unlock()
						return
					}
				}
			}
			if err := flush(); err != nil {
				mu.Lock()
				firstErr = err
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	require.NoError(t, firstErr)

	pipe := admin.Pipeline()
	gets := make([]*redis.StringCmd, keys)
	for k := 0; k < keys; k++ {
		gets[k] = pipe.Get(ctx, fmt.Sprintf("many:%d", k))
	}
	_, err := pipe.Exec(ctx)
	require.NoError(t, err)
	for k := 0; k < keys; k++ {
		key := fmt.Sprintf("many:%d", k)
		b := k % 8
		require.Equal(t, b+1, allowed[key], "%s (max_burst %d): allowed calls", key, b)
		wantTAT := now + int64(b+1)*periodS*1e9
		require.Equal(t, fmt.Sprint(wantTAT), gets[k].Val(), "%s: TAT after %d allowed calls", key, b+1)
	}
}
