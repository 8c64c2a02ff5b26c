package store

import (
	"fmt"
	"hash/maphash"
	"log/slog"
	"math/rand/v2"
	"testing"

	"github.com/cockroachdb/pebble/v2"
)

// BenchmarkWriteOut measures one shard's write-out of 100k changed keys
// picked at random from a table of N (17-byte keys, as redis-benchmark's
// live:__rand_int__ makes): reading the changed entries, encoding them as
// one log record and adding it to the Pebble batch. The batch is dropped,
// not committed, so this is the shard owner's own cost, not Pebble's.
//
//	go test -run xxx -bench WriteOut ./store/
func BenchmarkWriteOut(b *testing.B) {
	const changed = 100_000
	for _, n := range []int{100_000, 5_000_000} {
		b.Run(fmt.Sprintf("keys=%d", n), func(b *testing.B) {
			db, err := pebble.Open(b.TempDir(), &pebble.Options{FormatMajorVersion: pebbleFormat})
			if err != nil {
				b.Fatal(err)
			}
			defer db.Close()
			sh := newShard(0, maphash.MakeSeed(), Config{Shards: 1}, newPersister(db, FsyncNo, slog.New(slog.DiscardHandler)))
			defer sh.t.release()
			eis := make([]uint32, n)
			for i := range n {
				eis[i] = sh.t.insert(fmt.Appendf(nil, "live:%012d", i))
				sh.t.at(eis[i]).tat = uint64(i)
			}
			rng := rand.New(rand.NewPCG(1, 2))
			b.ResetTimer()
			for b.Loop() {
				b.StopTimer()
				for range changed {
					sh.markDirty(eis[rng.IntN(n)])
				}
				b.StartTimer()
				sh.writeDirty()
				b.StopTimer()
				_ = sh.pb.Close()
				sh.pb, sh.pbCount = nil, 0
				b.StartTimer()
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/changed, "ns/key")
		})
	}
}
