package tests

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The shards run on the event loops by default (issue #19): a command on a
// loop's own shards runs inline, one on another loop's is handed over and
// answered when it comes back. Every layout must answer exactly alike:
// pipelines mixing keys of every shard, cross-shard CL.LIMIT calls,
// transactions and reads, from many connections at once, at one frozen
// clock so that the answers are comparable, byte for byte, including under
// --fsync always, whose replies wait for the disk.
func TestShardLayoutsAnswerAlike(t *testing.T) {
	layouts := [][]string{
		{},                                      // the default: one loop fewer than threads
		{"--event-loops", "2"},                  // two loops: commands cross between them
		{"--event-loops", "2", "--shards", "8"}, // several shards per loop
		{"--threads", "1"},                      // one thread, one loop owns them all
		{"--shard-owners", "goroutines"},        // the design before #19
		{"--fsync", "always", "--event-loops", "2", "--shards", "4"}, // replies wait for their sync
		{"--fsync", "always"}, // one loop, group commit
	}
	var want []string
	for _, args := range layouts {
		name := fmt.Sprint(args)
		t.Run(name, func(t *testing.T) {
			s := startServer(t, append([]string{"--enable-debug-command", "yes"}, args...)...)
			got := layoutWorkload(t, s)
			if want == nil {
				want = got
				return
			}
			require.Len(t, got, len(want))
			for i := range want {
				require.Equal(t, want[i], got[i], "reply %d differs from the default layout's", i)
			}
		})
	}
}

// layoutWorkload runs the same calls on s from 8 connections, each its own
// keys (so that the answers do not depend on the interleaving) plus shared
// keys only read, and returns every reply in order.
func layoutWorkload(t *testing.T, s *server) []string {
	ctx := context.Background()
	admin := s.Client(t)
	require.NoError(t, admin.Do(ctx, "DEBUG", "CLOCK", "SET", "1700000000000000000").Err())
	const conns, rounds = 8, 30
	out := make([][]string, conns)
	var wg sync.WaitGroup
	for c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cl := s.Client(t, func(o *redis.Options) { o.PoolSize = 1 })
			rng := rand.New(rand.NewPCG(7, uint64(c)))
			for r := range rounds {
				p := cl.Pipeline()
				var cmds []redis.Cmder
				for range 1 + rng.IntN(20) {
					k := fmt.Sprintf("c%d:k%d", c, rng.IntN(40))
					k2 := fmt.Sprintf("c%d:k%d", c, 40+rng.IntN(40))
					switch rng.IntN(6) {
					case 0, 1:
						cmds = append(cmds, p.Do(ctx, "CL.THROTTLE", k, 3, 10, 60, 1))
					case 2:
						cmds = append(cmds, p.Do(ctx, "CL.LIMIT", k, "FW", 5, 60, "AND", k2, "SWC", 8, 60))
					case 3:
						cmds = append(cmds, p.Do(ctx, "CL.PEEK", k, 3, 10, 60))
					case 4:
						cmds = append(cmds, p.Do(ctx, "PTTL", k))
					default:
						cmds = append(cmds, p.Do(ctx, "EXISTS", k, k2, "shared:none"))
					}
				}
				_, _ = p.Exec(ctx)
				for _, cmd := range cmds {
					out[c] = append(out[c], fmt.Sprint(cmd.(*redis.Cmd).Val(), cmd.Err()))
				}
				if r%10 == 9 { // a transaction over keys of several shards
					tx := cl.TxPipeline()
					a := tx.Do(ctx, "CL.THROTTLE", fmt.Sprintf("c%d:k1", c), 3, 10, 60, 1)
					b := tx.Do(ctx, "CL.THROTTLE", fmt.Sprintf("c%d:k50", c), 3, 10, 60, 1)
					_, err := tx.Exec(ctx)
					out[c] = append(out[c], fmt.Sprint(a.Val(), b.Val(), err))
				}
			}
		}()
	}
	wg.Wait()
	var all []string
	for c := range conns {
		assert.NotEmpty(t, out[c])
		all = append(all, out[c]...)
	}
	return all
}
