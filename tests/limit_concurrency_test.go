package tests

import (
	"errors"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cellserver/cellserver/cluster"
)

// TestLimitAtomicAcrossShards: many clients run overlapping CL.LIMIT calls
// of one to three keys without hash tags (so on different shards), under a
// frozen clock inside one window, some with PEEK, mixed with pipelines of
// single-key calls. Every key's final count must equal the admitted calls
// that named it (all or nothing) and never exceed its limit (isolation:
// no call decided on a state another call was changing).
func TestLimitAtomicAcrossShards(t *testing.T) {
	t.Parallel()
	s := startServer(t, "--enable-debug-command", "yes", "--shards", "4", "--in-memory")
	ctx := ctxT(t, 120*time.Second)
	admin := s.Client(t)
	// The middle of an hour, so that FW 3600 stays in one window.
	require.NoError(t, admin.Do(ctx, "DEBUG", "CLOCK", "SET", "1700001800000000000").Err())
	keys := []string{"ka", "kb", "kc", "kd", "ke", "kf", "kg"}
	const (
		workers = 12
		calls   = 150
		limit   = 380
	)
	type tally struct{ admitted map[string]int }
	tallies := make([]tally, workers)
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		rdb := s.Client(t, func(o *redis.Options) { o.PoolSize = 1; o.Protocol = 2 })
		tallies[w].admitted = map[string]int{}
		go func(w int) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for range calls {
				n := 1 + rng.IntN(3)
				perm := rng.Perm(len(keys))[:n]
				args := []any{"CL.LIMIT"}
				for i, k := range perm {
					if i > 0 {
						args = append(args, "AND")
					}
					args = append(args, keys[k], "FW", limit, 3600)
				}
				peek := rng.IntN(5) == 0
				if peek {
					args = append(args, "PEEK")
				}
				// Pipelines of two: a single-shard call beside the atomic one.
				var cmd *redis.Cmd
				_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
					cmd = p.Do(ctx, args...)
					p.Do(ctx, "CL.INSPECT", keys[rng.IntN(len(keys))])
					return nil
				})
				if err != nil && !errors.Is(err, redis.Nil) {
					errs <- err
					return
				}
				v, err := cmd.Slice()
				if err != nil {
					errs <- err
					return
				}
				if v[0].(int64) == 0 && !peek {
					for _, k := range perm {
						tallies[w].admitted[keys[k]]++
					}
				}
			}
		}(w)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	limitedSomewhere := false
	for _, k := range keys {
		want := 0
		for _, tl := range tallies {
			want += tl.admitted[k]
		}
		got := 0
		if v, err := admin.Do(ctx, "CL.INSPECT", k).Slice(); err == nil {
			for i := 0; i+1 < len(v); i += 2 {
				if v[i] == "count" {
					got = int(v[i+1].(int64))
				}
			}
		}
		assert.Equal(t, want, got, "key %s: count vs admitted calls naming it", k)
		assert.LessOrEqual(t, got, limit, "key %s", k)
		limitedSomewhere = limitedSomewhere || got == limit
		t.Logf("%s: %d admitted charges (limit %d)", k, got, limit)
	}
	assert.True(t, limitedSomewhere, "the load must reach a limit, or the test proves nothing")
	// The keys really live on several of the 4 shards.
	shards := map[int]bool{}
	for _, k := range keys {
		shards[cluster.KeySlot([]byte(k))*4/cluster.SlotCount] = true
	}
	assert.GreaterOrEqual(t, len(shards), 3, "keys on %d shards", len(shards))
}
