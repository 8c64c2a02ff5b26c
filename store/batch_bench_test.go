package store

import (
	"fmt"
	"hash/maphash"
	"math/rand/v2"
	"os"
	"testing"

	"github.com/cellserver/cellserver/gcra"
)

// BenchmarkShardBatch runs CL.THROTTLE batches of 8 ops on random live
// keys the way a shard owner does (warm, then exec), in memory: the cost
// of a decision at each table size, cache misses included. Keys are 17
// bytes ("live:" and 12 digits, as the bench's live scenarios send), so
// each takes a pair of entries. CELLSERVER_BENCH_10M=1 adds 10M keys.
func BenchmarkShardBatch(b *testing.B) {
	sizes := []int{100_000, 1_000_000}
	if os.Getenv("CELLSERVER_BENCH_10M") != "" {
		sizes = append(sizes, 10_000_000)
	}
	const depth = 8
	for _, n := range sizes {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			sh := newShard(0, maphash.MakeSeed(), Config{Shards: 1, Clock: &Clock{}}, nil)
			defer sh.t.release()
			params := gcra.Params{MaxBurst: 1000, Count: 1, Period: 3600, Quantity: 1}
			now := int64(1_700_000_000_000_000_000)
			ops := make([]*ThrottleReq, depth)
			envs := make([]*envelope, depth)
			bufs := make([][]byte, depth)
			for i := range ops {
				ops[i] = &ThrottleReq{Params: params}
			}
			for i := 0; i < n; i++ {
				ops[0].Key = liveKey(bufs[0], i)
				bufs[0] = ops[0].Key
				envs[0] = ops[0].route()
				sh.warm(envs[:1])
				sh.exec(envs[0], now)
			}
			r := rand.New(rand.NewPCG(1, 2))
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i += depth {
				for j, op := range ops {
					op.Key = liveKey(bufs[j], r.IntN(n))
					bufs[j] = op.Key
					envs[j] = op.route() // as Session.Add does
				}
				sh.warm(envs)
				for j, op := range ops {
					sh.exec(envs[j], now)
					if op.Status() != nil || op.Err != nil || op.Result.Limited {
						b.Fatal("unexpected", op.Err, op.Result)
					}
				}
			}
		})
	}
}

// liveKey writes "live:" and i in 12 digits into buf. Keys are formatted
// per op rather than kept in a slice: picking one of 10M stored keys at
// random costs two cache misses of its own (the slice header and the
// bytes), which would be counted as the table's.
func liveKey(buf []byte, i int) []byte {
	buf = append(buf[:0], "live:000000000000"...)
	for j := len(buf) - 1; i > 0; j-- {
		buf[j] = byte('0' + i%10)
		i /= 10
	}
	return buf
}
