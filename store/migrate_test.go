package store

import (
	"fmt"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cellserver/cellserver/cluster"
	"github.com/cellserver/cellserver/cluster/clustertest"
	"github.com/cellserver/cellserver/limit"
)

func gateAll(state uint8) *[cluster.SlotCount]uint8 {
	var g [cluster.SlotCount]uint8
	for i := range g {
		g[i] = state
	}
	return &g
}

// TestGateMatrix: when a request runs, its shard decides again whether
// this node serves the key's slot, by the slot's state, the key's
// presence and ASKING: Redis Cluster's getNodeByQuery rules.
func TestGateMatrix(t *testing.T) {
	st, _ := newTestStore(t, 2)
	const slot = 100
	here := clustertest.KeyInSlot("here", slot)
	missing := clustertest.KeyInSlot("missing", slot)
	run(st, throttleOp(here, 5, 1, 60, 1)) // no gate yet: runs
	for i, tc := range []struct {
		state   uint8
		key     string
		asking  bool
		want    RedirectKind // 0: runs
		comment string
	}{
		{SlotOwned, missing, false, 0, "owned: runs"},
		{SlotNotOwned, here, false, Moved, "not owned: MOVED even if held here (an orphan)"},
		{SlotNotOwned, here, true, Moved, "ASKING does not open a slot that is not importing"},
		{SlotImporting, missing, false, Moved, "importing without ASKING: MOVED"},
		{SlotImporting, missing, true, 0, "importing after ASKING: runs"},
		{SlotMigrating, here, false, 0, "migrating, key still here: runs"},
		{SlotMigrating, missing, false, Ask, "migrating, key not here: ASK"},
	} {
		g := gateAll(SlotOwned)
		g[slot] = tc.state
		st.InitGate(g)
		s := st.NewSession()
		s.SetAsking(tc.asking)
		key := tc.key
		if key == missing {
			key = clustertest.KeyInSlot(fmt.Sprintf("missing%d-", i), slot) // a call creates its key
		}
		op := throttleOp(key, 5, 1, 60, 1)
		s.Add(op)
		s.Run()
		if tc.want == 0 {
			assert.NoError(t, op.Status(), tc.comment)
		} else {
			rd := AsRedirect(op.Status())
			if assert.NotNil(t, rd, tc.comment) {
				assert.Equal(t, Redirect{Kind: tc.want, Slot: slot}, *rd, tc.comment)
			}
		}
	}
	// A tracking interest is never redirected (it reads no state).
	g := gateAll(SlotNotOwned)
	st.InitGate(g)
	in := &InterestReq{Key: []byte(here), Listener: nopListener{}}
	run(st, in)
	assert.NoError(t, in.Status())
}

type nopListener struct{}

func (nopListener) KeyChanged([]byte, uint64) {}

// limitKeyed runs a call as the service queues a one-shard call: keyed by
// its first key, so the gate checks it.
func limitKeyed(st *Store, call limit.Call) error { return limitKeyedAsking(st, call, false) }

// limitKeyedAsking is limitKeyed with the session's ASKING flag.
func limitKeyedAsking(st *Store, call limit.Call, asking bool) error {
	r := &LimitReq{Call: call}
	s := st.NewSession()
	s.SetAsking(asking)
	s.Add(r)
	s.Run()
	if err := r.Status(); err != nil {
		return err
	}
	return r.Err
}

// gatedWithKey is a store holding key (FW 10 60, charged once) whose slot
// has the gate state, every other slot owned: the store, the slot, the gate.
func gatedWithKey(t *testing.T, key string, state uint8) (*Store, int, *[cluster.SlotCount]uint8) {
	st, _ := newTestStore(t, 1)
	slot := cluster.KeySlot([]byte(key))
	_, err := doLimit(st, parseLimitLine(t, key+" FW 10 60"))
	require.NoError(t, err)
	g := gateAll(SlotOwned)
	g[slot] = state
	st.InitGate(g)
	return st, slot, g
}

// TestGateMultiKeyLimit: a CL.LIMIT's keys in a migrating slot are checked
// together: all here → runs, none → ASK, some → TRYAGAIN.
func TestGateMultiKeyLimit(t *testing.T) {
	a, b := "{m}a", "{m}b"
	st, slot, g := gatedWithKey(t, a, SlotMigrating)
	err := limitKeyed(st, parseLimitLine(t, fmt.Sprintf("%s FW 10 60 AND %s FW 10 60", a, b)))
	assert.Equal(t, &Redirect{Kind: TryAgain, Slot: slot}, AsRedirect(err), "one of two here")
	err = limitKeyed(st, parseLimitLine(t, fmt.Sprintf("{m}c FW 10 60 AND %s FW 10 60", b)))
	assert.Equal(t, &Redirect{Kind: Ask, Slot: slot}, AsRedirect(err), "none here")
	st.InitGate(gateAll(SlotOwned))
	_, err = doLimit(st, parseLimitLine(t, b+" FW 10 60"))
	require.NoError(t, err)
	st.InitGate(g)
	err = limitKeyed(st, parseLimitLine(t, fmt.Sprintf("%s FW 10 60 AND %s FW 10 60", a, b)))
	assert.NoError(t, err, "both here")
}

// TestGateMultiKeyLimitImporting: under ASKING, a CL.LIMIT of several
// keys in a slot importing here runs only if all of them are here; while
// some are still on the source it gets TRYAGAIN (Redis's getNodeByQuery),
// else the key left on the source would be charged on both nodes. One key
// runs, here or not (the source sent the ASK because it is not there).
func TestGateMultiKeyLimitImporting(t *testing.T) {
	a, b := "{i}a", "{i}b"
	st, slot, _ := gatedWithKey(t, a, SlotImporting)
	asking := func(line string) error { return limitKeyedAsking(st, parseLimitLine(t, line), true) }
	err := asking(fmt.Sprintf("%s FW 10 60 AND %s FW 10 60", a, b))
	assert.Equal(t, &Redirect{Kind: TryAgain, Slot: slot}, AsRedirect(err), "one of two here")
	err = asking(fmt.Sprintf("{i}c FW 10 60 AND %s FW 10 60", b))
	assert.Equal(t, &Redirect{Kind: TryAgain, Slot: slot}, AsRedirect(err), "none here")
	assert.NoError(t, asking(b+" FW 10 60"), "one key: runs, created here")
	assert.NoError(t, asking(fmt.Sprintf("%s FW 10 60 AND %s FW 10 60", a, b)), "both here")
	err = limitKeyed(st, parseLimitLine(t, fmt.Sprintf("%s FW 10 60 AND %s FW 10 60", a, b)))
	assert.Equal(t, &Redirect{Kind: Moved, Slot: slot}, AsRedirect(err), "without ASKING")
}

// TestSlotStateReqRefusesSlotsWithKeys: giving a slot up (SlotNotOwned)
// with RequireEmpty is refused while a live key of it is here, changing
// nothing; expired keys do not count and are dropped with the change.
func TestSlotStateReqRefusesSlotsWithKeys(t *testing.T) {
	st, clk := newTestStore(t, 1)
	st.InitGate(gateAll(SlotOwned))
	live, old := clustertest.KeyInSlot("live", 7), clustertest.KeyInSlot("old", 8)
	run(st, throttleOp(live, 5, 1, 60, 1))
	run(st, throttleOp(old, 5, 1, 1, 1)) // expires in about a second
	clk.Advance(int64(10 * time.Second))
	run(st, throttleOp(live, 5, 1, 3600, 1)) // keep it live

	g := gateAll(SlotOwned)
	g[7], g[8] = SlotNotOwned, SlotNotOwned
	r := &SlotStateReq{States: g, RequireEmpty: true}
	run(st, r)
	assert.Equal(t, 7, r.Busy)
	assert.Equal(t, SlotOwned, st.shards[0].gate[8], "refused: nothing changed")

	g[7] = SlotOwned
	r = &SlotStateReq{States: g, RequireEmpty: true}
	run(st, r)
	assert.Equal(t, -1, r.Busy)
	assert.Equal(t, int64(1), r.Dropped, "the expired key of slot 8 is dropped")
	assert.Equal(t, SlotNotOwned, st.shards[0].gate[8])
}

// TestExportDropRestore: the requests of a move, on every kind of state:
// export by slot with a scan cursor and by name, drop, and restore by
// replacing (an in-protocol move) or merging (charges add up).
func TestExportDropRestore(t *testing.T) {
	src, _ := newTestStore(t, 1)
	dst, _ := newTestStore(t, 1)
	const slot = 42
	var keys []string
	for i := range 5 {
		keys = append(keys, clustertest.KeyInSlot(fmt.Sprintf("k%d-", i), slot))
	}
	other := clustertest.KeyInSlot("other", 43)
	run(src, throttleOp(keys[0], 5, 1, 60, 2))
	for i, alg := range []string{"FW 10 60", "SWC 10 60", "SWL 10 60", "CAL 10 DAY"} {
		_, err := doLimit(src, parseLimitLine(t, keys[i+1]+" "+alg+" COST 3"))
		require.NoError(t, err)
	}
	run(src, throttleOp(other, 5, 1, 60, 1))

	var got []Entry
	for cursor := uint32(0); ; {
		ex := &ExportReq{In: func(s int) bool { return s == slot }, Max: 2, Cursor: cursor}
		run(src, ex)
		require.LessOrEqual(t, len(ex.Entries), 2)
		got = append(got, ex.Entries...)
		if ex.Next == 0 {
			break
		}
		cursor = ex.Next
	}
	require.Len(t, got, 5, "every key of the slot, none of another")
	byName := &ExportReq{Keys: [][]byte{[]byte(keys[0]), []byte("absent")}}
	run(src, byName)
	require.Len(t, byName.Entries, 1)

	rs := &RestoreReq{Entries: got, Replace: true}
	run(dst, rs)
	assert.Equal(t, int64(5), rs.Applied)
	run(dst, &RestoreReq{Entries: got, Replace: true}) // an ack lost: sent again
	for i, alg := range []string{"FW 10 60", "SWC 10 60", "SWL 10 60", "CAL 10 DAY"} {
		d, err := doLimit(dst, parseLimitLine(t, keys[i+1]+" "+alg+" PEEK"))
		require.NoError(t, err)
		// PEEK answers as a call of cost 1 would: 10 - 3 - 1.
		assert.Equal(t, int64(6), d.Results[0].Remaining, "%s: replaced, not added twice", alg)
	}
	th := throttleOp(keys[0], 5, 1, 60, 0)
	run(dst, th)
	assert.Equal(t, int64(4), th.Result.Remaining, "6 - 2")

	var fw []Entry
	for _, e := range got {
		if string(e.Key) == keys[1] {
			fw = append(fw, e)
		}
	}
	run(dst, &RestoreReq{Entries: fw}) // a merge adds the charges
	d, err := doLimit(dst, parseLimitLine(t, keys[1]+" FW 10 60 PEEK"))
	require.NoError(t, err)
	assert.Equal(t, int64(3), d.Results[0].Remaining, "10 - 3 - 3 - 1")

	drop := &LandReq{Keys: [][]byte{[]byte(keys[0]), []byte(keys[1]), []byte("absent")}, Drop: true}
	run(src, drop)
	assert.Equal(t, int64(2), drop.Dropped)
	ex := &ExistsReq{Key: []byte(keys[0])}
	run(src, ex)
	assert.False(t, ex.Exists)
}

// TestSyncHeldIsDurableUnderEverySec: a move's steps are synced whatever
// the fsync policy: the target's copy before it acknowledges, the
// source's drop before it answers ASK for the key. A crash (the
// filesystem back to its synced state) right after SyncHeld keeps the
// change; without SyncHeld it is lost, which is what the test checks.
func TestSyncHeldIsDurableUnderEverySec(t *testing.T) {
	for _, sync := range []bool{true, false} {
		t.Run(fmt.Sprintf("sync=%v", sync), func(t *testing.T) {
			mem := vfs.NewCrashableMem()
			clk := wallClock()
			cfg := Config{Shards: 2, Clock: clk, SweepInterval: -1, DataDir: "db", Fsync: FsyncEverySec, FS: mem,
				MemTableSize: 4 << 20, PersistInterval: time.Hour}
			st, err := New(cfg)
			require.NoError(t, err)
			e := Entry{Key: []byte("moved"), Expires: NoExpiry}
			enc := throttleOp("x", 5, 1, 60, 1)
			run(st, enc)
			x := &ExportReq{Keys: [][]byte{[]byte("x")}}
			xs := st.NewSession()
			xs.AddTo(st.ShardOf([]byte("x")), x)
			xs.Run()
			e.State, e.Expires = x.Entries[0].State, x.Entries[0].Expires

			s := st.NewSession()
			sh := st.ShardOf(e.Key)
			s.Hold([]int{sh})
			s.AddTo(sh, &RestoreReq{Entries: []Entry{e}, Replace: true})
			if sync {
				require.NoError(t, s.SyncHeld())
			}
			s.Release()
			crashed := mem.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0})
			require.NoError(t, st.Close())

			cfg.FS = crashed
			st2, err := New(cfg)
			require.NoError(t, err)
			defer st2.Close()
			ex := &ExistsReq{Key: e.Key}
			run(st2, ex)
			assert.Equal(t, sync, ex.Exists)
		})
	}
}

// TestKeysInFlight: keys a move exported with Fly get TRYAGAIN, alone or
// in a CL.LIMIT with a key that is not flying, until they land; every
// other key of the shard is served meanwhile; a second export skips them;
// a transaction's check counts them; a failed batch's landing serves them
// again unchanged, a successful one drops them.
func TestKeysInFlight(t *testing.T) {
	st, _ := newTestStore(t, 1)
	st.InitGate(gateAll(SlotOwned))
	const slot = 42
	flying := clustertest.KeyInSlot("fly", slot)
	other := clustertest.KeyInSlot("stay", slot)
	run(st, throttleOp(flying, 5, 1, 60, 2), throttleOp(other, 5, 1, 60, 1))

	ex := &ExportReq{Keys: [][]byte{[]byte(flying)}, Fly: true}
	run(st, ex)
	require.Len(t, ex.Entries, 1)
	again := &ExportReq{In: func(s int) bool { return s == slot }, Max: 10, Fly: true}
	run(st, again)
	require.Len(t, again.Entries, 1, "the flying key is not exported twice")
	assert.Equal(t, other, string(again.Entries[0].Key))
	run(st, &LandReq{Keys: [][]byte{[]byte(other)}}) // that second batch failed

	op := throttleOp(flying, 5, 1, 60, 1)
	run(st, op)
	if rd := AsRedirect(op.Status()); assert.NotNil(t, rd) {
		assert.Equal(t, Redirect{Kind: TryAgain, Slot: slot}, *rd)
	}
	err := limitKeyed(st, parseLimitLine(t, other+" FW 10 60 AND "+flying+" FW 10 60"))
	if rd := AsRedirect(err); assert.NotNil(t, rd, "a CL.LIMIT naming a flying key") {
		assert.Equal(t, TryAgain, rd.Kind)
	}
	served := throttleOp(other, 5, 1, 60, 1)
	run(st, served)
	require.NoError(t, served.Status(), "the other keys are served")
	assert.Equal(t, int64(4), served.Result.Remaining, "6 - 1 - 1")
	pr := &PresentReq{Keys: [][]byte{[]byte(flying), []byte(other)}}
	run(st, pr)
	assert.Equal(t, 1, pr.Flying)
	assert.Equal(t, 2, pr.Present)

	run(st, &LandReq{Keys: [][]byte{[]byte(flying)}}) // the batch failed
	assert.Nil(t, st.shards[0].flying)
	op = throttleOp(flying, 5, 1, 60, 0)
	run(st, op)
	require.NoError(t, op.Status())
	assert.Equal(t, int64(4), op.Result.Remaining, "served again, unchanged: 6 - 2")

	run(st, &ExportReq{Keys: [][]byte{[]byte(flying)}, Fly: true})
	land := &LandReq{Keys: [][]byte{[]byte(flying)}, Drop: true}
	run(st, land)
	assert.Equal(t, int64(1), land.Dropped)
	exists := &ExistsReq{Key: []byte(flying)}
	run(st, exists)
	require.NoError(t, exists.Status())
	assert.False(t, exists.Exists)
}
