package peer

import (
	"bytes"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cellserver/cellserver/cluster"
	"github.com/cellserver/cellserver/cluster/clustertest"
	"github.com/cellserver/cellserver/limit"
	"github.com/cellserver/cellserver/store"
)

// testNode is node 127.0.0.1:7001 of a three-node topology on ports
// 7001-7003 at epoch 1, saving its state in dir: 7001 owns 0-5460, 7002
// 5461-10922, and 7003 no slot (10923-16383 are unassigned). Nothing
// listens on the ports.
type testNode struct {
	*Node
	st    *store.Store
	sess  *store.Session
	path  string
	log   *bytes.Buffer
	top   *cluster.Topology
	me, b string // the ids of 7001 and 7002
	c     string // the id of 7003
	bAddr string
}

func newTestNode(t *testing.T, dir string) *testNode {
	t.Helper()
	st, err := store.New(store.Config{Shards: 4})
	require.NoError(t, err)
	t.Cleanup(func() { st.Close() })
	top := layout(t, 1, [][2]int{{5461, 10922}}, [][2]int{})
	var log bytes.Buffer
	tn := &testNode{st: st, sess: st.NewSession(), path: filepath.Join(dir, "state.json"), log: &log, top: top,
		me: top.Shards[0].Primary.ID, b: top.Shards[1].Primary.ID, c: top.Shards[2].Primary.ID, bAddr: "127.0.0.1:7002"}
	tn.Node = New(Config{ID: tn.me, Store: st, Log: slog.New(slog.NewTextHandler(&log, nil)), StatePath: tn.path})
	t.Cleanup(tn.Close)
	require.NoError(t, tn.Start())
	return tn
}

// layout is the three nodes' topology at epoch where 7001 owns 0-5460,
// 7002 and 7003 the ranges given.
func layout(t *testing.T, epoch uint64, b, c [][2]int) *cluster.Topology {
	t.Helper()
	top, err := cluster.Init([]string{"127.0.0.1:7001", "127.0.0.1:7002", "127.0.0.1:7003"}, epoch)
	require.NoError(t, err)
	top.Shards[0].Slots = [][2]int{{0, 5460}}
	top.Shards[1].Slots, top.Shards[2].Slots = b, c
	require.NoError(t, top.Validate())
	return top
}

// withTopology applies the topology.
func (tn *testNode) withTopology(t *testing.T) *testNode {
	require.NoError(t, tn.SetTopology(tn.sess, tn.top))
	return tn
}

func refusal(err error) string {
	if r, ok := err.(Refusal); ok {
		return string(r)
	}
	if err == nil {
		return ""
	}
	return "not a refusal: " + err.Error()
}

func TestSlotChanges(t *testing.T) {
	tn := newTestNode(t, t.TempDir())
	assert.Equal(t, ErrNoTopology, refusal(tn.SetSlots(tn.sess, 5, 5, Migrating, tn.b)), "no topology yet")
	tn.withTopology(t)
	assert.NoError(t, tn.SetTopology(tn.sess, tn.top), "the same document again")
	other := layout(t, 1, [][2]int{{5461, 10922}}, [][2]int{{10923, 10923}})
	assert.Equal(t, "ERR topology epoch 1 is not newer than the current epoch 1", refusal(tn.SetTopology(tn.sess, other)))

	for _, c := range []struct {
		lo, hi int
		action SlotAction
		id     string
		want   string
	}{
		{9000, 9000, Migrating, tn.b, "ERR I'm not the owner of hash slot 9000"},
		{5460, 5461, Migrating, tn.b, "ERR I'm not the owner of hash slot 5461"},
		{1, 1, Importing, tn.b, "ERR I'm already the owner of hash slot 1"},
		{1, 1, Migrating, "nope", "ERR I don't know about node nope"},
		{1, 1, Migrating, tn.me, "ERR Target node is this node"},
		{5, 6, Migrating, tn.b, ""},
		{5, 6, Migrating, tn.b, ""}, // a repeat
		{6, 6, Migrating, tn.c, "ERR slot 6 is already migrating to " + tn.b + ": close that move first (SETSLOT 6 STABLE)"},
		{9000, 9000, Importing, tn.b, ""},
		{9000, 9000, Importing, tn.c, "ERR slot 9000 is already importing from " + tn.b + ": close that move first (SETSLOT 9000 STABLE)"},
	} {
		assert.Equal(t, c.want, refusal(tn.SetSlots(tn.sess, c.lo, c.hi, c.action, c.id)), "%d-%d %d %s", c.lo, c.hi, c.action, c.id)
	}
	assert.Equal(t, map[int]string{5: tn.b, 6: tn.b}, tn.State().Migrating, "the refused range changed nothing")
	assert.Equal(t, map[int]string{9000: tn.b}, tn.State().Importing)
	saved, err := cluster.LoadNodeState(tn.path)
	require.NoError(t, err)
	assert.Equal(t, tn.State().Migrating, saved.Migrating, "saved before it serves")
	assert.Equal(t, tn.State().Importing, saved.Importing)

	assert.Equal(t, "ERR Unknown node nope", refusal(tn.SetSlotNode(tn.sess, 1, "nope")))
	// Closing a move asks its target, which cannot be reached here.
	assert.Contains(t, refusal(tn.SetSlots(tn.sess, 5, 5, Stable, "")), "ERR cannot ask 127.0.0.1:7002 whether it holds keys of the slot: ")
	assert.NoError(t, tn.SetSlots(tn.sess, 5, 6, StableForce, ""), "FORCE does not ask")
	assert.Empty(t, tn.State().Migrating)
	assert.Contains(t, tn.log.String(), "SETSLOT STABLE FORCE")

	// The document gives the importing slot to a third node: refused.
	third := layout(t, 2, [][2]int{{5461, 8999}, {9001, 10922}}, [][2]int{{9000, 9000}})
	assert.Equal(t, "ERR slot 9000 is importing from "+tn.b+": the document must give it to this node or leave both with it open; finish or close that move first",
		refusal(tn.SetTopology(tn.sess, third)))
}

// TestStartLoadsOpenSlots: a restarted node serves by the moves it saved,
// and says so.
func TestStartLoadsOpenSlots(t *testing.T) {
	dir := t.TempDir()
	tn := newTestNode(t, dir).withTopology(t)
	require.NoError(t, tn.SetSlots(tn.sess, 5, 5, Migrating, tn.b))
	again := newTestNode(t, dir)
	assert.Equal(t, map[int]string{5: tn.b}, again.State().Migrating)
	assert.Equal(t, uint64(1), again.State().Epoch())
	assert.Contains(t, again.log.String(), "slot moves were in progress")
}

func TestRedirect(t *testing.T) {
	tn := newTestNode(t, t.TempDir()).withTopology(t)
	require.NoError(t, tn.SetSlots(tn.sess, 5, 5, Migrating, tn.b))
	for _, c := range []struct {
		kind store.RedirectKind
		slot int
		want Redirection
	}{
		{store.Ask, 5, Redirection{Kind: Ask, Slot: 5, Addr: tn.bAddr}},
		{store.Ask, 7, Redirection{Kind: TryAgain, Slot: 7}}, // not migrating, owned here: the state is changing
		{store.Moved, 9000, Redirection{Kind: Moved, Slot: 9000, Addr: tn.bAddr}},
		{store.Moved, 12000, Redirection{Kind: Down, Slot: 12000}},
		{store.TryAgain, 3, Redirection{Kind: TryAgain, Slot: 3}},
	} {
		assert.Equal(t, c.want, tn.Redirect(&store.Redirect{Kind: c.kind, Slot: c.slot}), "%d %d", c.kind, c.slot)
	}
	assert.Equal(t, Counts{Ask: 1, TryAgain: 2}, tn.Counts())
}

func TestImport(t *testing.T) {
	tn := newTestNode(t, t.TempDir()).withTopology(t)
	require.NoError(t, tn.SetSlots(tn.sess, 9000, 9000, Importing, tn.b))
	state, err := limit.GCRAState{TAT: 1}.AppendBinary(nil)
	require.NoError(t, err)
	imported, owned, elsewhere := clustertest.KeyInSlot("in", 9000), clustertest.KeyInSlot("own", 1), clustertest.KeyInSlot("b", 6000)

	im, err := tn.NewImport(tn.b)
	require.NoError(t, err)
	require.NoError(t, im.Add([]byte(imported), state, store.NoExpiry))
	require.NoError(t, im.Add([]byte(owned), state, store.NoExpiry))
	assert.ErrorIs(t, im.Add([]byte(owned), []byte("junk"), store.NoExpiry), ErrUndecodable)
	assert.ErrorIs(t, im.Add([]byte(owned), state, -5), ErrUndecodable, "no state expires before 1970")
	var rd *Redirection
	require.ErrorAs(t, im.Add([]byte(elsewhere), state, store.NoExpiry), &rd)
	assert.Equal(t, Redirection{Kind: Moved, Slot: 6000, Addr: tn.bAddr}, *rd)
	assert.Equal(t, "ERR the batch arrived after its deadline (the source stopped waiting for it)",
		refusal(im.Apply(tn.sess, time.Now().Add(-time.Second).UnixMilli())))
	assert.Zero(t, tn.Counts().Imported)

	im, err = tn.NewImport(tn.c) // 9000 imports from b, not c: only the owned key is taken
	require.NoError(t, err)
	require.NoError(t, im.Add([]byte(owned), state, store.NoExpiry))
	require.ErrorAs(t, im.Add([]byte(imported), state, store.NoExpiry), &rd)
	assert.Equal(t, Moved, rd.Kind)

	im, err = tn.NewImport(tn.b)
	require.NoError(t, err)
	require.NoError(t, im.Add([]byte(imported), state, store.NoExpiry))
	require.NoError(t, im.Add([]byte(owned), state, store.NoExpiry))
	require.NoError(t, im.Apply(tn.sess, time.Now().Add(time.Minute).UnixMilli()))
	assert.Equal(t, int64(2), tn.Counts().Imported)
	assert.Equal(t, int64(2), tn.Report(tn.sess).Imported)
}

func TestMoveRefusals(t *testing.T) {
	tn := newTestNode(t, t.TempDir())
	_, err := tn.MoveKeys(tn.sess, tn.b, time.Second, false)
	assert.Equal(t, ErrNoTopology, refusal(err))
	tn.withTopology(t)
	require.NoError(t, tn.SetSlots(tn.sess, 5, 5, Migrating, tn.b))
	for _, c := range []struct {
		m    Migration
		want string
	}{
		{Migration{Host: "10.9.9.9", Port: 7002, Slot: 5}, "ERR MIGRATE target 10.9.9.9:7002 is not a primary of this cluster"},
		{Migration{Host: "127.0.0.1", Port: 7001, Slot: 5}, "ERR MIGRATE target is this node"},
		{Migration{Host: "::ffff:127.0.0.1", Port: 7002, Slot: 6}, "ERR slot 6 is not migrating to " + tn.b + " (CLUSTER SETSLOT 6 MIGRATING " + tn.b + " first)"},
		{Migration{Host: "127.0.0.1", Port: 7003, Slot: 5}, "ERR slot 5 migrates to " + tn.b + ", not to " + tn.c},
	} {
		_, err := tn.Migrate(tn.sess, c.m)
		assert.Equal(t, c.want, refusal(err), "%+v", c.m)
	}
	for id, want := range map[string]string{
		tn.c:   "ERR no slot is migrating to " + tn.c,
		tn.me:  "ERR Target node is this node",
		"nope": "ERR Unknown node nope",
	} {
		_, err := tn.MoveKeys(tn.sess, id, time.Second, false)
		assert.Equal(t, want, refusal(err), id)
	}
	// ORPHANS needs no open slot; with no key held, nothing is sent.
	n, err := tn.MoveKeys(tn.sess, tn.c, time.Second, true)
	assert.NoError(t, err)
	assert.Zero(t, n)
}

// TestMoveToUnreachablePeer: a batch that cannot reach its target moves
// nothing, says how far it got, and serves its keys here again.
func TestMoveToUnreachablePeer(t *testing.T) {
	tn := newTestNode(t, t.TempDir()).withTopology(t)
	key := clustertest.KeyInSlot("k", 5)
	state, err := limit.GCRAState{TAT: uint64(time.Now().UnixNano())}.AppendBinary(nil)
	require.NoError(t, err)
	im, err := tn.NewImport(tn.b)
	require.NoError(t, err)
	require.NoError(t, im.Add([]byte(key), state, time.Now().Add(time.Hour).UnixMilli()))
	require.NoError(t, im.Apply(tn.sess, time.Now().Add(time.Minute).UnixMilli()))
	require.NoError(t, tn.SetSlots(tn.sess, 5, 5, Migrating, tn.b))

	_, err = tn.MoveKeys(tn.sess, tn.b, time.Second, false)
	var me *MoveError
	require.ErrorAs(t, err, &me)
	assert.Equal(t, 0, me.Moved)
	assert.Equal(t, tn.bAddr, me.Target)
	assert.Contains(t, me.Err.Error(), "connection refused")
	assert.Zero(t, tn.Counts().Migrated)

	// The key is back: a transaction naming it runs here.
	tn.sess.Hold([]int{tn.st.ShardOfSlot(5)})
	assert.NoError(t, tn.CheckTx(tn.sess, [][]byte{[]byte(key)}))
	tn.sess.Release()
	// One that names only a key not here is sent to the target.
	tn.sess.Hold([]int{tn.st.ShardOfSlot(5)})
	err = tn.CheckTx(tn.sess, [][]byte{[]byte(clustertest.KeyInSlot("gone", 5))})
	tn.sess.Release()
	var rd *Redirection
	require.ErrorAs(t, err, &rd)
	assert.Equal(t, Redirection{Kind: Ask, Slot: 5, Addr: tn.bAddr}, *rd)
}
