package store

import (
	"fmt"
	"hash/maphash"
	"math/rand/v2"
	"testing"
	"unsafe"

	"github.com/cellserver/cellserver/limit"
)

// BenchmarkShardLimit runs single-limit CL.LIMIT calls on random live keys
// the way a shard owner does, in memory, parse included: what one call
// costs the server besides the wire, cache misses included. Keys are 10
// bytes ("k:" and 8 digits), inline in their entry as redis-benchmark's
// are. "throttle" is CL.THROTTLE's op on the same keys, for comparison.
func BenchmarkShardLimit(b *testing.B) {
	const n = 100_000
	cases := []struct{ name, typ string }{
		{"fw", "FW 4000000000 60"}, {"swc", "SWC 4000000000 60"}, {"gcra", "GCRA 1000000000 1000000000 1"},
	}
	for _, c := range cases {
		b.Run(fmt.Sprint(c.name, "/", n), func(b *testing.B) {
			sh := newShard(0, maphash.MakeSeed(), Config{Shards: 1, Clock: &Clock{}}, nil)
			defer sh.t.release()
			now := int64(1_700_000_000_000_000_000)
			key := make([]byte, 0, 16)
			argv := func(i int) [][]byte {
				key = fmt.Appendf(key[:0], "k:%08d", i)
				a := [][]byte{[]byte("CL.LIMIT"), key}
				for _, f := range splitFields(c.typ) {
					a = append(a, []byte(f))
				}
				return a
			}
			var r LimitReq
			call := func(a [][]byte) {
				var err error
				if r.Call, err = limit.ParseLimit(a); err != nil {
					b.Fatal(err)
				}
				now += 1000
				r.run(sh, now)
				if r.Err != nil || r.Decision.Limited {
					b.Fatal("unexpected", r.Err, r.Decision)
				}
			}
			for i := range n {
				call(argv(i))
			}
			rnd := rand.New(rand.NewPCG(1, 2))
			args := make([][][]byte, 1024)
			for i := range args {
				a := argv(rnd.IntN(n))
				a[1] = append([]byte(nil), a[1]...)
				args[i] = a
			}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				call(args[i&1023])
				i++
			}
		})
	}
}

func splitFields(s string) []string {
	var out []string
	for len(s) > 0 {
		i := 0
		for i < len(s) && s[i] != ' ' {
			i++
		}
		out = append(out, s[:i])
		s = s[min(i+1, len(s)):]
	}
	return out
}

// BenchmarkShardLimitWarmed compares single-limit CL.LIMIT calls run one
// by one, as a shard runs typed requests today, with the same calls whose
// keys were first prefetched 16 at a time as warm does for CL.THROTTLE's
// ops (hash, index slot, candidate entry): the cost of the cache misses a
// warm pass for typed requests would overlap. 1M keys, FW.
func BenchmarkShardLimitWarmed(b *testing.B) {
	const n, depth = 1_000_000, 16
	for _, warmed := range []bool{false, true} {
		b.Run(fmt.Sprint("warmed=", warmed), func(b *testing.B) {
			sh := newShard(0, maphash.MakeSeed(), Config{Shards: 1, Clock: &Clock{}}, nil)
			defer sh.t.release()
			now := int64(1_700_000_000_000_000_000)
			parse := func(key []byte) limit.Call {
				c, err := limit.ParseLimit([][]byte{[]byte("CL.LIMIT"), key, []byte("FW"), []byte("4000000000"), []byte("60")})
				if err != nil {
					b.Fatal(err)
				}
				return c
			}
			var r LimitReq
			for i := range n {
				r.Call = parse(fmt.Appendf(nil, "k:%08d", i))
				r.run(sh, now)
			}
			rnd := rand.New(rand.NewPCG(1, 2))
			calls := make([]limit.Call, 1<<14)
			for i := range calls {
				calls[i] = parse(fmt.Appendf(nil, "k:%08d", rnd.IntN(n)))
			}
			reqs := make([]LimitReq, depth)
			t := sh.t
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i += depth {
				group := calls[i&(len(calls)-1)&^(depth-1):][:depth]
				if warmed {
					var hs [depth]uint64
					for j := range group {
						hs[j] = t.hash(group[j].Limits[0].Key)
						prefetch(uintptr(unsafe.Pointer(&t.idx[home(hs[j], t.shift)])))
					}
					for j := range group {
						if ei := t.candidate(t.idx, t.shift, hs[j]); ei >= 0 {
							prefetch(uintptr(unsafe.Pointer(t.at(uint32(ei)))))
						}
					}
				}
				for j := range group {
					now += 1000
					reqs[j].Call = group[j]
					reqs[j].run(sh, now)
				}
			}
		})
	}
}
