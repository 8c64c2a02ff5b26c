package store

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A write-out that starts while a batch is queued: "batches go first: a step
// runs when none is queued, or once writeChunk/2 commands ran since it was
// due". The queued batch (FLUSH, which writes one record and cancels the
// write-out) must therefore run before any write-out chunk, however many
// commands the shard ran before the write-out was due. (Found in review: the
// loop counted commands while no step was due, so the first chunk of every
// write-out went ahead of queued batches.)
func TestQueuedBatchGoesBeforeFirstStep(t *testing.T) {
	st, err := New(Config{Shards: 1, SweepInterval: -1, DataDir: t.TempDir(), Fsync: FsyncNo,
		PersistInterval: time.Hour, MemTableSize: 4 << 20})
	require.NoError(t, err)
	defer st.Close()

	var ins []Request
	for i := 0; i < 3000; i++ {
		ins = append(ins, throttleOp(fmt.Sprint("key", i), 10, 1, 3600, 1))
	}
	run(st, ins...) // 3000 dirty keys
	// Let the idle shard finish migrating its index.
	for {
		var n int
		st.onShard(0, func(sh *shard) { n = len(sh.t.old) - sh.t.oldPos })
		if n == 0 {
			break
		}
		time.Sleep(time.Millisecond)
	}

	// b1: a long batch (no step is due while it runs) that starts a write-out.
	var b1 []Request
	for i := 0; i < 5000; i++ {
		b1 = append(b1, &SlotCountReq{Slot: i})
	}
	b1 = append(b1, &shardFunc{f: func(sh *shard, _ int64) { sh.startWriteOut() }})
	seq0 := st.p.seq.Load()
	var b1done atomic.Bool
	go func() {
		s := st.NewSession()
		for _, op := range b1 {
			s.AddTo(0, op)
		}
		s.Run()
		b1done.Store(true)
	}()
	time.Sleep(10 * time.Millisecond)
	require.False(t, b1done.Load(), "b1 ended before b2 was queued: inconclusive")
	s2 := st.NewSession()
	s2.AddTo(0, &FlushReq{}) // queued behind b1
	s2.Run()
	// 1: only FLUSH's record (the batch went first, the flush cancelled the
	// write-out). 2: a 2048-key write-out chunk ran before the queued batch.
	require.Equal(t, uint64(1), st.p.seq.Load()-seq0, "records written before the queued batch completed")
}
