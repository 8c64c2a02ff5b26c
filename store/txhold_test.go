package store

import (
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// keysOnShards returns a key of each of shards a and b.
func keysOnShards(t *testing.T, st *Store, a, b int) (string, string) {
	t.Helper()
	var ka, kb string
	for i := 0; ka == "" || kb == ""; i++ {
		require.Less(t, i, 100000)
		k := fmt.Sprintf("k%d", i)
		switch st.ShardOf([]byte(k)) {
		case a:
			ka = k
		case b:
			kb = k
		}
	}
	return ka, kb
}

func TestHoldRunsRequestsInlineOnHeldShards(t *testing.T) {
	st, _ := newTestStore(t, 4)
	a, b := keysOnShards(t, st, 1, 3)
	_, c := keysOnShards(t, st, 1, 2)
	s := st.NewSession()
	s.Hold([]int{3, 1, 3}) // any order, repeats: held once, ascending
	require.True(t, s.Holding())
	ta, tb, tc := throttleOp(a, 5, 1, 60, 1), throttleOp(b, 5, 1, 60, 1), throttleOp(c, 5, 1, 60, 1)
	s.Add(ta)
	require.NoError(t, ta.Status(), "ran at once")
	assert.Equal(t, int64(5), ta.Result.Remaining)
	s.Add(tb)
	s.Add(tc)
	assert.NoError(t, tb.Status())
	assert.Equal(t, ErrNotHeld, tc.Status(), "shard 2 is not held")
	s.Run() // nothing left to run
	s.Release()
	assert.False(t, s.Holding())

	ex := &ExistsReq{Key: []byte(c)}
	run(st, ex)
	assert.False(t, ex.Exists, "the refused request did not run")
	_, found, _ := state(st, b)
	assert.True(t, found)

	// The session works as before once released.
	t2 := throttleOp(a, 5, 1, 60, 1)
	s.Add(t2)
	require.Nil(t, t2.Status())
	s.Run()
	assert.Equal(t, int64(4), t2.Result.Remaining)
}

func TestHoldOfEveryShardAndHeldRequests(t *testing.T) {
	st, _ := newTestStore(t, 4)
	a, b := keysOnShards(t, st, 0, 2)
	s := st.NewSession()
	s.Hold(nil)
	r := &LimitReq{Call: parseLimitLine(t, a+" FW 5 60 AND "+b+" FW 5 60")}
	require.Len(t, r.Shards(st, nil), 2)
	s.AddHeld(r)
	require.NoError(t, r.Status())
	require.NoError(t, r.Err)
	assert.False(t, r.Decision.Limited)
	for i := range st.NumShards() {
		s.AddTo(i, &FlushReq{})
	}
	s.Release()
	_, found, _ := state(st, a)
	assert.False(t, found, "flushed under the hold")
}

// A held CL.LIMIT whose shards the hold does not include fails, not run.
func TestHeldRequestOutsideTheHoldFails(t *testing.T) {
	st, _ := newTestStore(t, 4)
	a, b := keysOnShards(t, st, 0, 2)
	s := st.NewSession()
	s.Hold([]int{0})
	r := &LimitReq{Call: parseLimitLine(t, a+" FW 5 60 AND "+b+" FW 5 60")}
	s.AddHeld(r)
	s.Release()
	assert.Equal(t, ErrNotHeld, r.Status())
	_, found, _ := state(st, a)
	assert.False(t, found)
}

// Other sessions never see into a hold: a writer charges two keys of
// different shards under one hold, readers read both under holds of their
// own, and no reader sees one charged and not the other. (Readers reading
// both in one plain batch would: the two shards run it independently.)
func TestHoldIsIsolated(t *testing.T) {
	st, _ := newTestStore(t, 4)
	a, b := keysOnShards(t, st, 1, 2)
	const writes = 300
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		s := st.NewSession()
		for range writes {
			s.Hold([]int{st.ShardOf([]byte(a)), st.ShardOf([]byte(b))})
			s.Add(throttleOp(a, 1000, 1, 1, 1))
			s.Add(throttleOp(b, 1000, 1, 1, 1))
			s.Release()
		}
	}()
	stop := make(chan struct{})
	var rg sync.WaitGroup
	for range 2 {
		rg.Add(1)
		go func() {
			defer rg.Done()
			s := st.NewSession()
			ga, gb := &GetReq{Key: []byte(a)}, &GetReq{Key: []byte(b)}
			for {
				select {
				case <-stop:
					return
				default:
				}
				s.Hold([]int{st.ShardOf([]byte(a)), st.ShardOf([]byte(b))})
				s.Add(ga)
				s.Add(gb)
				s.Release()
				if !assert.Equal(t, ga.TAT, gb.TAT, "a reader saw one key charged and not the other") {
					return
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	rg.Wait()
	ta, _, _ := state(st, a)
	assert.Equal(t, uint64(t0+writes*1e9), ta)
}

func TestHoldSetsTheChangingSession(t *testing.T) {
	st, _ := newTestStore(t, 2)
	l := &recorder{}
	watch(st, l, "A")
	s := st.NewSession()
	s.ID = 42
	s.Hold(nil)
	s.Add(throttleOp("A", 5, 1, 60, 1))
	s.Release()
	fired, by := l.got()
	assert.Equal(t, []string{"A"}, fired)
	assert.Equal(t, []uint64{42}, by)
}

func TestHoldOnAClosedStore(t *testing.T) {
	st, _ := newTestStore(t, 2)
	require.NoError(t, st.Close())
	s := st.NewSession()
	s.Hold(nil)
	r := throttleOp("A", 5, 1, 60, 1)
	s.Add(r)
	s.Release()
	assert.Equal(t, ErrClosed, r.Status())
}

// Under --fsync always, Release returns once the hold's changes are
// synced: a restart finds them.
func TestHoldChangesAreDurable(t *testing.T) {
	dir := t.TempDir()
	clk := wallClock()
	st := openPersistent(t, dir, FsyncAlways, clk, nil)
	a, b := keysOnShards(t, st, 0, 3)
	before := st.PersistStats().Changes
	s := st.NewSession()
	s.Hold([]int{0, 3})
	s.Add(throttleOp(a, 5, 1, 60, 1))
	s.Add(throttleOp(b, 5, 1, 60, 1))
	s.Release()
	assert.Equal(t, before+2, st.PersistStats().Changes, "committed before Release returned")
	require.NoError(t, st.Close())
	st = openPersistent(t, dir, FsyncAlways, clk, nil)
	defer st.Close()
	for _, k := range []string{a, b} {
		_, found, _ := state(st, k)
		assert.True(t, found, k)
	}
}

// TestHoldCommitsAsOne: under FsyncAlways the changes a hold of several
// shards made reach the log as one batch, so that a crash keeps a
// cross-shard transaction or CL.LIMIT whole or not at all; a hold of one
// shard commits as a request batch does.
func TestHoldCommitsAsOne(t *testing.T) {
	dir := t.TempDir()
	clk := wallClock()
	st := openPersistent(t, dir, FsyncAlways, clk, nil)
	defer st.Close()
	a, b := keysOnShards(t, st, 0, 3)
	s := st.NewSession()
	for i := 0; i < 3; i++ {
		before := st.PersistStats()
		s.Hold([]int{0, 3})
		s.Add(throttleOp(a, 5, 1, 60, 1))
		s.Add(throttleOp(b, 5, 1, 60, 1))
		s.Release()
		after := st.PersistStats()
		assert.Equal(t, before.Changes+2, after.Changes, "both changes synced before Release returned")
		assert.Equal(t, before.Commits+1, after.Commits, "in one batch")
	}
	before := st.PersistStats()
	s.Hold([]int{3})
	s.Add(throttleOp(b, 5, 1, 60, 1))
	s.Release()
	assert.Equal(t, before.Changes+1, st.PersistStats().Changes)
}
