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
// single-key calls, in pipelines. Every key's final count must equal the admitted calls
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
		calls   = 100
		limit   = 500
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
				// Pipelines of one to four calls, mixing cross-shard calls
				// (which run under one hold when consecutive) with
				// single-shard ones and an INSPECT.
				type call struct {
					cmd  *redis.Cmd
					keys []int
					peek bool
				}
				var cs []call
				_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
					for range 1 + rng.IntN(4) {
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
						cs = append(cs, call{p.Do(ctx, args...), perm, peek})
						if rng.IntN(3) == 0 {
							p.Do(ctx, "CL.INSPECT", keys[rng.IntN(len(keys))])
						}
					}
					return nil
				})
				if err != nil && !errors.Is(err, redis.Nil) {
					errs <- err
					return
				}
				for _, c := range cs {
					v, err := c.cmd.Slice()
					if err != nil {
						errs <- err
						return
					}
					if v[0].(int64) == 0 && !c.peek {
						for _, k := range c.keys {
							tallies[w].admitted[keys[k]]++
						}
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

// TestLimitPipelineKeepsOrderAcrossShards: one connection's pipeline runs
// in request order even when cross-shard calls (run under a hold of both
// shards) and single-shard calls on the same keys alternate, so each call
// sees exactly the charges of the calls sent before it.
func TestLimitPipelineKeepsOrderAcrossShards(t *testing.T) {
	t.Parallel()
	s := startServer(t, "--shards", "4", "--in-memory")
	ctx := ctxT(t, 30*time.Second)
	rdb := s.Client(t, func(o *redis.Options) { o.PoolSize = 1; o.Protocol = 2 })
	// ka and kc live on different shards of four.
	require.NotEqual(t, cluster.KeySlot([]byte("ka"))*4/cluster.SlotCount, cluster.KeySlot([]byte("kc"))*4/cluster.SlotCount)
	one := []any{"CL.LIMIT", "ka", "FW", 10, 3600}
	both := []any{"CL.LIMIT", "ka", "FW", 10, 3600, "AND", "kc", "FW", 10, 3600}
	seq := [][]any{one, both, both, one, one, both, {"CL.RESET", "kc"}, both, one, both}
	var cmds []*redis.Cmd
	_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, a := range seq {
			cmds = append(cmds, p.Do(ctx, a...))
		}
		return nil
	})
	require.NoError(t, err)
	var ka, kc int64 = 10, 10
	for i, a := range seq {
		switch {
		case a[0] == "CL.RESET":
			kc = 10
			continue
		case len(a) == 5:
			ka--
		default:
			ka--
			kc--
		}
		v, err := cmds[i].Slice()
		require.NoError(t, err, "call %d", i)
		per := v[6].([]any)
		assert.Equal(t, ka, per[0].([]any)[2], "call %d: ka's remaining", i)
		if len(a) > 5 {
			assert.Equal(t, kc, per[1].([]any)[2], "call %d: kc's remaining", i)
		}
	}
}
