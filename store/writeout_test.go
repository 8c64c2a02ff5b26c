package store

import (
	"encoding/binary"
	"errors"
	"hash/maphash"
	"log/slog"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cellserver/cellserver/cluster"
)

// testShard is one persistent shard driven by hand, with no goroutines:
// the test calls the owner's steps itself and commits its batches.
type testShard struct {
	*shard
	t  *testing.T
	db *pebble.DB
}

func newTestShard(t *testing.T) *testShard {
	db, err := openDB(t.TempDir(), nil, 4<<20, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	sh := newShard(0, maphash.MakeSeed(), Config{Shards: 1, Clock: wallClock()}, newPersister(db, FsyncEverySec, slog.New(slog.DiscardHandler)))
	t.Cleanup(sh.t.release)
	return &testShard{shard: sh, t: t, db: db}
}

// do runs ops as the owner does a batch.
func (ts *testShard) do(ops ...*Op) {
	ts.warm(ops)
	for _, op := range ops {
		ts.exec(op)
		require.NoError(ts.t, op.Err)
	}
}

// commit writes what the owner has handed to the committer, then what it
// has put in its batch so far.
func (ts *testShard) commit() {
	for len(ts.p.in) > 0 {
		r := <-ts.p.in
		if ts.p.prepare(&r, true) {
			require.NoError(ts.t, r.b.Commit(pebble.Sync))
			_ = r.b.Close()
		}
	}
	if ts.pb != nil {
		require.NoError(ts.t, ts.pb.Commit(pebble.Sync))
		_ = ts.pb.Close()
		ts.pb = nil
	}
}

// onDisk returns the TAT stored for key, if any.
func (ts *testShard) onDisk(key string) (uint64, bool) {
	v, closer, err := ts.db.Get(encodeKey(nil, cluster.KeySlot([]byte(key)), []byte(key)))
	if errors.Is(err, pebble.ErrNotFound) {
		return 0, false
	}
	require.NoError(ts.t, err)
	defer closer.Close()
	return binary.BigEndian.Uint64(v[:8]), true
}

// inMemory returns the TAT held in memory for key, if any.
func (ts *testShard) inMemory(key string) (uint64, bool) {
	op := &Op{Kind: OpGet, Key: []byte(key)}
	ts.do(op)
	return op.TAT, op.Found
}

func (ts *testShard) clockStep() { ts.clock.Set(ts.clock.Now() + 1_000_000) }

// A write-out runs in chunks between request batches. Whatever happens to a
// key between two chunks, before or after its own copy, the disk ends up
// with the key's latest state once the write-outs are done.
func TestWriteOutInChunksKeepsLatestState(t *testing.T) {
	ts := newTestShard(t)
	keys := []string{"k1", "k2", "k3", "k4", "k5", "k6"}
	for _, k := range keys {
		ts.do(throttleOp(k, 5, 1, 3600, 1))
	}
	ts.writeDirty()
	ts.commit()
	ts.clockStep()
	for _, k := range keys {
		ts.do(throttleOp(k, 5, 1, 3600, 1))
	}
	ts.startWriteOut()
	ts.copyChanged(3) // k1, k2, k3 copied; k4, k5, k6 not yet
	require.True(t, ts.wo.active)
	ts.clockStep()
	ts.do(&Op{Kind: OpDel, Key: []byte("k1")}) // copied, then deleted
	ts.do(throttleOp("k2", 5, 1, 3600, 1))     // copied, then changed again
	ts.do(&Op{Kind: OpDel, Key: []byte("k3")}) // copied, deleted,
	ts.do(throttleOp("k3", 5, 1, 3600, 2))     // and created again
	ts.do(&Op{Kind: OpDel, Key: []byte("k4")}) // deleted before its copy,
	ts.do(throttleOp("k4", 5, 1, 3600, 3))     // and created again
	ts.do(&Op{Kind: OpDel, Key: []byte("k5")}) // deleted before its copy
	ts.stepWriteOut()                          // k6, and the write-out completes
	require.False(t, ts.wo.active)
	ts.commit()
	_, ok := ts.onDisk("k1")
	assert.False(t, ok, "k1 was deleted after its copy")
	_, ok = ts.onDisk("k5")
	assert.False(t, ok, "k5 was deleted")
	for _, k := range []string{"k4", "k6"} {
		mem, _ := ts.inMemory(k)
		disk, ok := ts.onDisk(k)
		assert.True(t, ok, k)
		assert.Equal(t, mem, disk, k)
	}
	// k2 and k3 changed after their copy: the next write-out has them.
	ts.writeDirty()
	ts.commit()
	for _, k := range keys {
		mem, live := ts.inMemory(k)
		disk, ok := ts.onDisk(k)
		assert.Equal(t, live, ok, k)
		assert.Equal(t, mem, disk, k)
	}
}

// Dropping slots while a write-out is in progress: the keys it had copied
// must not come back on disk after the range delete.
func TestDropSlotsDuringWriteOut(t *testing.T) {
	ts := newTestShard(t)
	keys := []string{"{a}1", "{a}2", "{b}1"}
	for _, k := range keys {
		ts.do(throttleOp(k, 5, 1, 3600, 1))
	}
	ts.startWriteOut()
	ts.copyChanged(len(keys))
	require.True(t, ts.wo.active)
	slot := cluster.KeySlot([]byte("{a}"))
	ts.do(&Op{Kind: OpDropSlots, Ranges: [][2]int{{slot, slot}}})
	ts.finishWriteOut()
	ts.commit()
	for _, k := range keys[:2] {
		_, ok := ts.onDisk(k)
		assert.False(t, ok, k)
	}
	_, ok := ts.onDisk("{b}1")
	assert.True(t, ok)
}

// FLUSHALL while a write-out is in progress: nothing it had copied survives.
func TestFlushDuringWriteOut(t *testing.T) {
	ts := newTestShard(t)
	for _, k := range []string{"x", "y", "z"} {
		ts.do(throttleOp(k, 5, 1, 3600, 1))
	}
	ts.startWriteOut()
	ts.copyChanged(2)
	ts.do(&Op{Kind: OpFlush})
	ts.do(throttleOp("after", 5, 1, 3600, 1))
	ts.writeDirty()
	ts.commit()
	for _, k := range []string{"x", "y", "z"} {
		_, ok := ts.onDisk(k)
		assert.False(t, ok, k)
	}
	_, ok := ts.onDisk("after")
	assert.True(t, ok)
}
