package store

import (
	"fmt"
	"testing"

	"github.com/cellserver/cellserver/cluster"
	"github.com/cellserver/cellserver/limit"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// runReq runs typed requests, each on the shard of its key.
func runReq(st *Store, keys []string, reqs ...Request) {
	s := st.NewSession()
	for i, r := range reqs {
		s.AddTo(st.ShardOf([]byte(keys[i])), r)
	}
	s.Run()
}

func enc(t testing.TB, s limit.State) []byte {
	t.Helper()
	b, err := limit.Encode(s)
	require.NoError(t, err)
	return b
}

// kindStates is one state of every kind but GCRA, valid at nowMs, with
// the expiry its algorithm would give it.
func kindStates(t testing.TB, nowMs int64) map[string]struct {
	state []byte
	exp   int64
} {
	// A 30-day window: its end, the FW key's expiry, is not a few seconds
	// away (a minute's end was, once in a while, and the key expired
	// between planting it and reading it back).
	w := int64(30 * 86_400_000)
	start := nowMs / w * w
	day := nowMs / 86_400_000 * 86_400_000
	var log []limit.SWLEntry
	for i := int64(0); i < 500; i++ { // a log of 6 KB: a state longer than any key
		log = append(log, limit.SWLEntry{TS: nowMs - 500 + i, Cost: uint32(i%7 + 1)})
	}
	return map[string]struct {
		state []byte
		exp   int64
	}{
		"fw":  {enc(t, limit.FWState{WindowMS: w, StartMS: start, Count: 7}), start + w},
		"swc": {enc(t, limit.SWCState{WindowMS: w, StartMS: start, Prev: 3, Cur: 4}), start + 2*w},
		"swl": {enc(t, limit.SWLState{WindowMS: w, Entries: log}), nowMs - 1 + w},
		"cal": {enc(t, limit.CALState{Unit: limit.Day, Zone: "Europe/Berlin", StartMS: day, EndMS: day + 86_400_000, Count: 9}), day + 86_400_000},
	}
}

// TestEveryKindStoredPersistedAndTyped plants a state of every kind (through
// ImportReq, which a slot move uses), checks TYPE, GET, CL.THROTTLE's
// WRONGTYPE, PTTL and DumpSlots, then restarts under each fsync policy
// and finds every state byte for byte, and its expiry.
func TestEveryKindStoredPersistedAndTyped(t *testing.T) {
	for _, policy := range []Fsync{FsyncAlways, FsyncEverySec} {
		t.Run(policy.String(), func(t *testing.T) {
			dir := t.TempDir()
			clk := wallClock()
			nowMs := floorMs(clk.Now())
			st := openPersistent(t, dir, policy, clk, nil)
			states := kindStates(t, nowMs)
			for name, s := range states {
				for i := range 50 { // keys of every length class: inline, pair, arena
					key := fmt.Sprintf("%s:%0*d", name, i%3*12, i)
					r := &ImportReq{Key: []byte(key), State: s.state, Expires: s.exp}
					runReq(st, []string{key}, r)
					require.NoError(t, r.Err)
					require.True(t, r.Applied, key)
				}
			}
			run(st, throttleOp("gcra", 10, 1, 60, 1))
			check := func(st *Store) {
				for name, s := range states {
					for i := range 50 {
						key := fmt.Sprintf("%s:%0*d", name, i%3*12, i)
						typ, get, pttl := &TypeReq{Key: []byte(key)}, &GetReq{Key: []byte(key)}, &PTTLReq{Key: []byte(key)}
						thr := throttleOp(key, 10, 1, 60, 1)
						run(st, typ, get, pttl, thr)
						assert.Equal(t, limit.KindOf(s.state), typ.Kind, key)
						assert.Equal(t, "cl-limit", typ.Kind.TypeName())
						assert.Equal(t, ErrWrongType, get.Err, key)
						assert.Equal(t, ErrWrongType, thr.Err, key)
						assert.Equal(t, s.exp-nowMs, pttl.PTTL, key)
					}
				}
				typ := &TypeReq{Key: []byte("gcra")}
				run(st, typ)
				assert.Equal(t, "string", typ.Kind.TypeName())
				got := map[string][]byte{}
				for i := range st.NumShards() {
					op := dumpReq([][2]int{{0, cluster.SlotCount - 1}})
					s := st.NewSession()
					s.AddTo(i, op)
					s.Run()
					for _, e := range op.Entries {
						got[string(e.Key)] = e.State
					}
				}
				require.Len(t, got, 4*50+1)
				for name, s := range states {
					assert.Equal(t, s.state, got[name+":0"], name)
				}
				_, ok := (&Entry{State: got["gcra"]}).TAT()
				assert.True(t, ok)
			}
			check(st)
			require.NoError(t, st.Close())
			st = openPersistent(t, dir, policy, clk, nil)
			defer st.Close()
			check(st)
		})
	}
}

// TestImportMergesByKind: a moved state is merged with limit.Merge (counts
// add up), a state of another kind leaves the local one alone, and DEL
// removes any kind.
func TestImportMergesByKind(t *testing.T) {
	st, clk := newTestStore(t, 4)
	nowMs := floorMs(clk.Now())
	// A 30-day window: its end, the FW key's expiry, is not a few seconds
	// away (a minute's end was, once in a while, and the key expired
	// between planting it and reading it back).
	w := int64(30 * 86_400_000)
	start := nowMs / w * w
	fw := func(n uint64) []byte { return enc(t, limit.FWState{WindowMS: w, StartMS: start, Count: n}) }
	for _, n := range []uint64{3, 4} {
		r := &ImportReq{Key: []byte("k"), State: fw(n), Expires: start + w}
		runReq(st, []string{"k"}, r)
		require.True(t, r.Applied)
	}
	dump := &ImportReq{Key: []byte("k"), State: enc(t, limit.SWCState{WindowMS: w, StartMS: start, Cur: 1}), Expires: start + w}
	runReq(st, []string{"k"}, dump)
	assert.False(t, dump.Applied, "another kind merges nothing")
	op := dumpReq([][2]int{{0, cluster.SlotCount - 1}})
	s := st.NewSession()
	s.AddTo(st.ShardOf([]byte("k")), op)
	s.Run()
	require.Len(t, op.Entries, 1)
	assert.Equal(t, fw(7), op.Entries[0].State, "counts of one window add up")
	del := &DelReq{Key: []byte("k")}
	run(st, del)
	assert.True(t, del.Removed)
}

// TestStateChurnCompactsArena: replacing states over and over leaves
// garbage in the arena; compaction must keep every live state intact.
func TestStateChurnCompactsArena(t *testing.T) {
	st, clk := newTestStore(t, 1)
	nowMs := floorMs(clk.Now())
	want := map[string][]byte{}
	for round := range 300 {
		for i := range 100 {
			key := fmt.Sprintf("churn-key-%040d", i) // arena keys move too
			var log []limit.SWLEntry
			for j := range 100 + round%50 {
				log = append(log, limit.SWLEntry{TS: nowMs - 1000 + int64(j), Cost: 1})
			}
			b := enc(t, limit.SWLState{WindowMS: 60_000, Entries: log})
			r := &ImportReq{Key: []byte(key), State: b, Expires: nowMs + 60_000}
			// Delete first so the import replaces rather than unites.
			run(st, &DelReq{Key: []byte(key)})
			runReq(st, []string{key}, r)
			require.True(t, r.Applied)
			want[key] = b
		}
	}
	op := dumpReq([][2]int{{0, cluster.SlotCount - 1}})
	s := st.NewSession()
	s.AddTo(0, op)
	s.Run()
	require.Len(t, op.Entries, len(want))
	for _, e := range op.Entries {
		assert.Equal(t, want[string(e.Key)], e.State)
	}
	assert.Less(t, st.Stats().TableBytes, int64(16<<20), "the arena was compacted")
}

// TestEmptyKeyPersists: Redis allows the empty key, so every record kind
// (a TAT, a limit state, a delete) must be written and read back with it:
// a record the loader refused would leave a data dir that cannot start.
func TestEmptyKeyPersists(t *testing.T) {
	for _, policy := range []Fsync{FsyncAlways, FsyncEverySec} {
		t.Run(policy.String(), func(t *testing.T) {
			clk := wallClock()
			nowMs := floorMs(clk.Now())
			fw := kindStates(t, nowMs)["fw"]

			gcraDir, stateDir := t.TempDir(), t.TempDir()
			st := openPersistent(t, gcraDir, policy, clk, nil)
			run(st, throttleOp("", 10, 1, 3600, 1))
			run(st, &DelReq{Key: []byte("")})
			run(st, throttleOp("", 10, 1, 3600, 3))
			tat, ok, pttl := state(st, "")
			require.True(t, ok)
			require.NoError(t, st.Close())

			st = openPersistent(t, stateDir, policy, clk, nil)
			imp := &ImportReq{Key: []byte(""), State: fw.state, Expires: fw.exp}
			runReq(st, []string{""}, imp)
			require.NoError(t, imp.Err)
			require.NoError(t, st.Close())

			for range 2 { // and again after the first reload's rewrite
				st = openPersistent(t, gcraDir, policy, clk, nil)
				tat2, ok2, pttl2 := state(st, "")
				assert.Equal(t, [3]int64{int64(tat), 1, pttl}, [3]int64{int64(tat2), b2i(ok2), pttl2})
				require.NoError(t, st.Close())

				st = openPersistent(t, stateDir, policy, clk, nil)
				typ, get := &TypeReq{Key: []byte("")}, &GetReq{Key: []byte("")}
				run(st, typ, get)
				assert.Equal(t, limit.KindOf(fw.state), typ.Kind)
				require.NoError(t, st.Close())
			}
		})
	}
}
