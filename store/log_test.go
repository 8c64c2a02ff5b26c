package store

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cellserver/cellserver/cluster"
)

type keyState struct {
	tat  uint64
	live bool
	pttl int64
}

func snapshotState(st *Store, keys []string) map[string]keyState {
	out := make(map[string]keyState, len(keys))
	for _, k := range keys {
		tat, ok, pttl := state(st, k)
		out[k] = keyState{tat, ok, pttl}
	}
	return out
}

// TestSnapshotRoundsKeepStateAcrossRestart drives random changes, deletions,
// flushes and slot drops while write-outs and snapshot rounds run a few
// keys at a time between the batches (the round threshold is lowered so
// rounds run back to back) and old records are excised; the state replayed
// after a restart, with another shard count, must be exactly the state in
// memory.
func TestSnapshotRoundsKeepStateAcrossRestart(t *testing.T) {
	defer func(v int64, w, c int) { snapMinBytes, writeChunk, snapChunk = v, w, c }(snapMinBytes, writeChunk, snapChunk)
	snapMinBytes, writeChunk, snapChunk = 1, 5, 7
	for _, policy := range []Fsync{FsyncEverySec, FsyncAlways} {
		t.Run(policy.String(), func(t *testing.T) {
			dir := t.TempDir()
			clk := wallClock()
			st := openPersistent(t, dir, policy, clk, nil)
			rng := rand.New(rand.NewPCG(1, uint64(policy)))
			keys := make([]string, 3000)
			for i := range keys {
				switch i % 3 {
				case 0:
					keys[i] = fmt.Sprint("k", i)
				case 1:
					keys[i] = fmt.Sprint("a-pair-sized-key:", i) // in a pair of entries
				default:
					keys[i] = fmt.Sprint("a-key-longer-than-thirty-one-bytes:", i) // held in the arena
				}
			}
			for iter := 0; iter < 400; iter++ {
				sess := st.NewSession()
				for j := 0; j < 60; j++ {
					k := keys[rng.IntN(len(keys))]
					if rng.IntN(8) == 0 {
						sess.Add(&DelReq{Key: []byte(k)})
					} else {
						sess.Add(throttleOp(k, 100, 1, 3600, int64(rng.IntN(4))))
					}
				}
				// Background steps between the changes, as the owner takes
				// them when idle.
				for i := 0; i < st.NumShards(); i++ {
					switch rng.IntN(10) {
					case 0:
						sess.AddTo(i, &shardFunc{f: func(sh *shard, _ int64) { sh.startWriteOut() }})
					case 1, 2, 3:
						sess.AddTo(i, &shardFunc{f: func(sh *shard, _ int64) { sh.step() }})
					}
				}
				switch rng.IntN(150) {
				case 0:
					for i := 0; i < st.NumShards(); i++ {
						sess.AddTo(i, &FlushReq{})
					}
				case 1, 2:
					lo := rng.IntN(cluster.SlotCount)
					hi := min(lo+rng.IntN(3000), cluster.SlotCount-1)
					for i := 0; i < st.NumShards(); i++ {
						sess.AddTo(i, &DropSlotsReq{Ranges: [][2]int{{lo, hi}}})
					}
				}
				sess.Run()
				if iter%4 == 0 {
					st.persistAll()
				}
				clk.Advance(1e6)
			}
			require.Eventually(t, func() bool {
				st.persistAll()
				return st.PersistStats().Snapshots >= 5
			}, 20*time.Second, 5*time.Millisecond, "snapshot rounds must have run")
			want := snapshotState(st, keys)
			live := 0
			for _, s := range want {
				if s.live {
					live++
				}
			}
			require.Greater(t, live, 100)
			t.Logf("%d live keys, %d snapshot rounds", live, st.PersistStats().Snapshots)
			require.NoError(t, st.Close())

			// Another shard count: records replay by slot, not by writer.
			st2, err := New(Config{Shards: 3, Clock: clk, SweepInterval: -1, DataDir: dir, Fsync: policy})
			require.NoError(t, err)
			assert.Equal(t, int64(live), st2.PersistStats().KeysLoaded)
			assert.Equal(t, want, snapshotState(st2, keys))

			// Drops whose records are still in the log at the next restart
			// (no round runs at the normal threshold): half the slots, and
			// one shard's flush.
			snapMinBytes = 16 << 20
			sess := st2.NewSession()
			for i := 0; i < st2.NumShards(); i++ {
				sess.AddTo(i, &DropSlotsReq{Ranges: [][2]int{{0, 8191}}})
			}
			sess.AddTo(st2.NumShards()-1, &FlushReq{})
			sess.Run()
			want = snapshotState(st2, keys)
			live = 0
			for _, s := range want {
				if s.live {
					live++
				}
			}
			require.Greater(t, live, 50)
			require.NoError(t, st2.Close())
			st = openPersistent(t, dir, policy, clk, nil)
			assert.Equal(t, int64(live), st.PersistStats().KeysLoaded)
			assert.Equal(t, want, snapshotState(st, keys))
			require.NoError(t, st.Close())
			snapMinBytes = 1
		})
	}
}

// TestMigrateV1DataDir: a data dir of the first format (one Pebble key per
// limiter key) is converted in place when opened, keeping every key.
func TestMigrateV1DataDir(t *testing.T) {
	dir := t.TempDir()
	db, err := pebble.Open(dir, &pebble.Options{FormatMajorVersion: pebbleFormat})
	require.NoError(t, err)
	require.NoError(t, db.Set([]byte(formatKey), []byte(formatOld), nil))
	now := time.Now()
	wantTAT := map[string]uint64{}
	for i := 0; i < 5000; i++ {
		k := fmt.Sprint("old:", i)
		exp := now.Add(time.Hour).UnixMilli()
		if i%100 == 0 {
			exp = now.Add(-time.Minute).UnixMilli() // expired while stopped
		} else {
			wantTAT[k] = uint64(now.UnixNano()) + uint64(i)
		}
		slot := cluster.KeySlot([]byte(k))
		v := binary.BigEndian.AppendUint64(nil, uint64(now.UnixNano())+uint64(i))
		v = binary.BigEndian.AppendUint64(v, uint64(exp))
		require.NoError(t, db.Set(append([]byte{prefixOld, byte(slot >> 8), byte(slot)}, k...), v, nil))
	}
	require.NoError(t, db.Close())

	clk := wallClock()
	for run := 0; run < 2; run++ {
		st := openPersistent(t, dir, FsyncEverySec, clk, nil)
		assert.Equal(t, int64(len(wantTAT)), st.PersistStats().KeysLoaded)
		if run == 0 {
			assert.Equal(t, int64(50), st.PersistStats().ExpiredAtLoad)
		} else {
			assert.Equal(t, int64(0), st.PersistStats().ExpiredAtLoad)
		}
		for k, tat := range wantTAT {
			got, ok, _ := state(st, k)
			require.True(t, ok, k)
			require.Equal(t, tat, got, k)
		}
		require.NoError(t, st.Close())
	}
	db, err = pebble.Open(dir, &pebble.Options{FormatMajorVersion: pebbleFormat})
	require.NoError(t, err)
	defer db.Close()
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: []byte{prefixOld}, UpperBound: []byte{prefixOld + 1}})
	require.NoError(t, err)
	assert.False(t, it.First(), "no key of the old format is left")
	require.NoError(t, it.Close())
	v, closer, err := db.Get([]byte(formatKey))
	require.NoError(t, err)
	assert.Equal(t, formatValue, string(v))
	require.NoError(t, closer.Close())
}

// A key deleted and created again between two write-outs, with a snapshot
// chunk written in between, must come back live: the chunk holds the new
// state, and the write-out writes the deletion and then the key again.
func TestSnapshotChunkBetweenDeleteAndWriteOut(t *testing.T) {
	dir := t.TempDir()
	clk := wallClock()
	st := openPersistent(t, dir, FsyncEverySec, clk, nil)
	run(st, throttleOp("k", 5, 1, 60, 1))
	st.persistAll() // "k" is on disk
	run(st, &DelReq{Key: []byte("k")})
	run(st, throttleOp("k", 5, 1, 60, 3))
	want, ok, _ := state(st, "k")
	require.True(t, ok)
	i := st.ShardOf([]byte("k"))
	sess := st.NewSession()
	sess.AddTo(i, &shardFunc{f: func(sh *shard, _ int64) { sh.startSnapshot(99) }})
	sess.AddTo(i, &shardFunc{f: func(sh *shard, _ int64) { sh.step() }})
	sess.Run()
	st.persistAll()
	require.NoError(t, st.Close())
	st = openPersistent(t, dir, FsyncEverySec, clk, nil)
	defer st.Close()
	got, ok, _ := state(st, "k")
	assert.True(t, ok)
	assert.Equal(t, want, got)
}
