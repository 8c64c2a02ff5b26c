package store

import (
	"hash/maphash"
	"testing"

	"github.com/cellserver/cellserver/limit"
)

// BenchmarkShardSWLFull is an admitted call on an SWL key that holds its
// whole limit, 10,000 entries, one per ms: every call drops the oldest
// entry and appends one, the worst a client can make a call cost.
func BenchmarkShardSWLFull(b *testing.B) {
	sh := newShard(0, maphash.MakeSeed(), Config{Shards: 1, Clock: &Clock{}}, nil)
	defer sh.t.release()
	now := int64(1_700_000_000_000_000_000)
	c, err := limit.ParseLimit([][]byte{[]byte("CL.LIMIT"), []byte("login"), []byte("SWL"), []byte("10000"), []byte("10000"), []byte("MS")})
	if err != nil {
		b.Fatal(err)
	}
	var r LimitReq
	call := func() {
		r.Call = c
		now += 1e6
		r.run(sh, now)
		if r.Err != nil || r.Decision.Limited {
			b.Fatal("unexpected", r.Err, r.Decision)
		}
	}
	for range 10_000 {
		call()
	}
	b.ReportAllocs()
	for b.Loop() {
		call()
	}
}
