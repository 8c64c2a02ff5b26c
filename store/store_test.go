package store

import (
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cellserver/cellserver/gcra"
)

const t0 = int64(1_700_000_000_000_000_000)

func newTestStore(t *testing.T, shards int) (*Store, *Clock) {
	t.Helper()
	clk := &Clock{}
	clk.Set(t0)
	st, err := New(Config{Shards: shards, Clock: clk, SweepInterval: -1})
	require.NoError(t, err)
	t.Cleanup(func() { st.Close() })
	return st, clk
}

// run runs the requests in one session: a keyed one on its key's shard,
// any other on shard 0.
func run(st *Store, reqs ...Request) {
	s := st.NewSession()
	for _, r := range reqs {
		if k, ok := r.(KeyedRequest); ok {
			s.Add(k)
		} else {
			s.AddTo(0, r)
		}
	}
	s.Run()
}

// onShard runs f on shard i's goroutine, in order with its requests.
func (s *Store) onShard(i int, f func(sh *shard)) {
	sess := s.NewSession()
	sess.AddTo(i, &shardFunc{f: func(sh *shard, _ int64) { f(sh) }})
	sess.Run()
}

func throttleOp(key string, burst, count, period, qty int64) *ThrottleReq {
	return &ThrottleReq{Key: []byte(key), Params: gcra.Params{MaxBurst: burst, Count: count, Period: period, Quantity: qty}}
}

func TestThrottleStoresTATAndExpiry(t *testing.T) {
	st, clk := newTestStore(t, 4)
	op := throttleOp("A", 15, 30, 60, 1)
	run(st, op)
	require.NoError(t, op.Err)
	assert.Equal(t, int64(15), op.Result.Remaining)

	get := &GetReq{Key: []byte("A")}
	pttl := &PTTLReq{Key: []byte("A")}
	run(st, get, pttl)
	assert.True(t, get.Found)
	assert.Equal(t, uint64(t0+2e9), get.TAT)
	assert.Equal(t, int64(2000), pttl.PTTL)

	// At the expiry millisecond the key is still there (PTTL 0); one ms later it is gone.
	clk.Set(t0 + 2e9)
	run(st, pttl)
	assert.Equal(t, int64(0), pttl.PTTL)
	clk.Set(t0 + 2e9 + 1e6)
	run(st, pttl, get)
	assert.Equal(t, int64(-2), pttl.PTTL)
	assert.False(t, get.Found)
	assert.Equal(t, int64(1), st.Stats().ExpiredKeys)
}

func TestSessionKeepsOrderPerKey(t *testing.T) {
	st, _ := newTestStore(t, 8)
	var ops []*ThrottleReq
	for i := 0; i < 20; i++ {
		for k := 0; k < 10; k++ {
			ops = append(ops, throttleOp(fmt.Sprint("k", k), 15, 30, 60, 1))
		}
	}
	s := st.NewSession()
	for _, op := range ops {
		s.Add(op)
	}
	s.Run()
	for i, op := range ops {
		want := int64(15 - i/10)
		limited := want < 0
		assert.Equal(t, limited, op.Result.Limited, "op %d", i)
		if !limited {
			assert.Equal(t, want, op.Result.Remaining, "op %d", i)
		}
	}
}

func TestDelExistsFlushDBSize(t *testing.T) {
	st, _ := newTestStore(t, 3)
	for i := 0; i < 100; i++ {
		run(st, throttleOp(fmt.Sprint("key", i), 5, 1, 60, 1))
	}
	size := func() int64 {
		var n int64
		s := st.NewSession()
		ops := make([]*DBSizeReq, st.NumShards())
		for i := range ops {
			ops[i] = &DBSizeReq{}
			s.AddTo(i, ops[i])
		}
		s.Run()
		for _, op := range ops {
			n += op.Keys
		}
		return n
	}
	assert.Equal(t, int64(100), size())
	del, ex := &DelReq{Key: []byte("key7")}, &ExistsReq{Key: []byte("key7")}
	run(st, del, ex)
	assert.True(t, del.Removed)
	assert.False(t, ex.Exists)
	assert.Equal(t, int64(99), size())
	s := st.NewSession()
	for i := 0; i < st.NumShards(); i++ {
		s.AddTo(i, &FlushReq{})
	}
	s.Run()
	assert.Equal(t, int64(0), size())
	assert.Equal(t, int64(0), st.Stats().Keys)
}

// TestScanSeesEveryKey: keys present for a whole scan are returned, even
// while other keys are added and removed between calls.
func TestScanSeesEveryKey(t *testing.T) {
	st, _ := newTestStore(t, 1)
	for i := 0; i < 1000; i++ {
		run(st, throttleOp(fmt.Sprint("stay", i), 5, 1, 60, 1))
	}
	seen := map[string]bool{}
	cursor := uint64(0)
	churn := 0
	for {
		op := &ScanReq{Cursor: cursor, Count: 37, Pattern: []byte("stay*")}
		s := st.NewSession()
		s.AddTo(0, op)
		s.Run()
		for _, k := range op.Keys {
			seen[string(k)] = true
		}
		// churn: add and delete other keys
		for j := 0; j < 20; j++ {
			run(st, throttleOp(fmt.Sprint("tmp", churn), 5, 1, 60, 1))
			if churn%2 == 0 {
				run(st, &DelReq{Key: []byte(fmt.Sprint("tmp", churn-1))})
			}
			churn++
		}
		if op.Next == 0 {
			break
		}
		cursor = op.Next
	}
	assert.Len(t, seen, 1000)
}

func TestSweepRemovesUntouchedKeys(t *testing.T) {
	st, clk := newTestStore(t, 2)
	for i := 0; i < 5000; i++ {
		run(st, throttleOp(fmt.Sprint("short", i), 0, 1, 1, 1)) // 1 s TTL
	}
	run(st, throttleOp("long", 0, 1, 3600, 1))
	require.Equal(t, int64(5001), st.Stats().Keys)
	clk.Set(t0 + 2e9)
	// Drive sweep steps on the owners (the ticker is off in this test): a
	// full pass takes SweepFraction steps.
	for i := 0; i < 60; i++ {
		st.sweepAll()
	}
	assert.Equal(t, int64(1), st.Stats().Keys)
	assert.Equal(t, int64(5000), st.Stats().ExpiredKeys)
}

// persistAll has every shard write its changes out now (as its persist
// tick does) and waits until the committer has taken them.
func (s *Store) persistAll() {
	s.onEveryShard(func(sh *shard, _ int64) {
		sh.writeDirty()
		sh.sendChanges(nil)
	})
	for s.p != nil && s.p.pending.Load() > 0 {
		time.Sleep(time.Millisecond)
	}
}

// sweepAll runs one sweep step on every shard, on the shard's goroutine.
func (s *Store) sweepAll() { s.onEveryShard(func(sh *shard, now int64) { sh.sweep(now) }) }

// TestIdleShardFinishesIndexMigration checks that a shard moves the rest of
// a growing key index when it is idle, so the old index's memory does not
// wait for more inserts.
func TestIdleShardFinishesIndexMigration(t *testing.T) {
	st, _ := newTestStore(t, 1)
	oldIndex := func() (n int) {
		st.onShard(0, func(sh *shard) { n = len(sh.t.old) - sh.t.oldPos })
		return n
	}
	n := 0
	for oldIndex() < 1<<15 { // 100 inserts per batch move at most 12800 slots
		require.Less(t, n, 1_000_000, "the index never grew")
		ops := make([]Request, 100)
		for i := range ops {
			ops[i] = throttleOp(fmt.Sprint("grow:", n), 10, 1, 60, 1)
			n++
		}
		run(st, ops...)
	}
	require.Eventually(t, func() bool { return oldIndex() == 0 }, 5*time.Second, 10*time.Millisecond)
	for i := 0; i < n; i++ {
		op := &ExistsReq{Key: []byte(fmt.Sprint("grow:", i))}
		run(st, op)
		require.True(t, op.Exists)
	}
}

func TestSweepTicker(t *testing.T) {
	clk := &Clock{} // the wall clock: the ticker sweeps only an unfrozen clock
	st, err := New(Config{Shards: 2, Clock: clk, SweepInterval: time.Millisecond})
	require.NoError(t, err)
	defer st.Close()
	for i := 0; i < 1000; i++ {
		run(st, throttleOp(fmt.Sprint("k", i), 0, 1, 1, 1)) // 1 s TTL
	}
	require.Eventually(t, func() bool { return st.Stats().Keys == 0 }, 5*time.Second, 5*time.Millisecond)
	assert.Equal(t, int64(1000), st.Stats().ExpiredKeys)
}

func TestSweepTickerIdleWhileClockFrozen(t *testing.T) {
	clk := &Clock{}
	clk.Set(t0)
	st, err := New(Config{Shards: 2, Clock: clk, SweepInterval: time.Millisecond})
	require.NoError(t, err)
	defer st.Close()
	run(st, throttleOp("k", 0, 1, 1, 1))
	clk.Set(t0 + 5e9)
	time.Sleep(50 * time.Millisecond) // many ticks
	clk.Set(t0)
	_, ok, _ := state(st, "k")
	assert.True(t, ok, "a key must not be swept at a frozen instant the test later leaves")
}

func TestConcurrentSessionsOneKey(t *testing.T) {
	st, _ := newTestStore(t, 4)
	var wg sync.WaitGroup
	var mu sync.Mutex
	allowed := 0
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := st.NewSession()
			for i := 0; i < 200; i++ {
				op := throttleOp("hot", 99, 1, 3600, 1)
				s.Add(op)
				s.Run()
				if !op.Result.Limited {
					mu.Lock()
					allowed++
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	assert.Equal(t, 100, allowed) // frozen clock: exactly max_burst+1
}

func TestClosedStoreFailsOps(t *testing.T) {
	st, _ := newTestStore(t, 2)
	require.NoError(t, st.Close())
	require.NoError(t, st.Close())
	op := throttleOp("k", 1, 1, 1, 1)
	run(st, op)
	assert.ErrorIs(t, op.Status(), ErrClosed)
}

func TestKeysAndMatch(t *testing.T) {
	st, _ := newTestStore(t, 4)
	for _, k := range []string{"user:1", "user:2", "admin:1", ""} {
		run(st, throttleOp(k, 5, 1, 60, 1))
	}
	var got []string
	s := st.NewSession()
	var ops []*KeysReq
	for i := 0; i < st.NumShards(); i++ {
		op := &KeysReq{Pattern: []byte("user:*")}
		ops = append(ops, op)
		s.AddTo(i, op)
	}
	s.Run()
	for _, op := range ops {
		for _, k := range op.Keys {
			got = append(got, string(k))
		}
	}
	sort.Strings(got)
	assert.Equal(t, []string{"user:1", "user:2"}, got)
}

func TestShardOfFollowsHashTags(t *testing.T) {
	st, _ := newTestStore(t, 16)
	assert.Equal(t, st.ShardOf([]byte("{user1}:a")), st.ShardOf([]byte("{user1}:b")))
}

func BenchmarkSessionThrottle(b *testing.B) {
	clk := &Clock{}
	st, _ := New(Config{Shards: 4, Clock: clk, SweepInterval: -1})
	defer st.Close()
	keys := make([][]byte, 16)
	for i := range keys {
		keys[i] = []byte(fmt.Sprint("bench", i))
	}
	s := st.NewSession()
	ops := make([]*ThrottleReq, 16)
	for i := range ops {
		ops[i] = &ThrottleReq{Params: gcra.Params{MaxBurst: 1 << 40, Count: 1, Period: 1, Quantity: 1}}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i += 16 { // 16-deep pipelines
		for j, op := range ops {
			op.Key = keys[j]
			s.Add(op)
		}
		s.Run()
	}
}
