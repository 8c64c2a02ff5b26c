package cluster

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// planNodes are four nodes on 127.0.0.1:7001..7004 for the planning tables.
var planNodes = func() []Node {
	var out []Node
	for p := 7001; p <= 7004; p++ {
		out = append(out, Node{ID: NodeID("127.0.0.1", p), Host: "127.0.0.1", Port: p})
	}
	return out
}()

// planTop builds a validated topology; slots[i] are the ranges of
// planNodes[i] (a missing entry or nil owns nothing). Node i is in the
// document if i < len(slots).
func planTop(t *testing.T, epoch uint64, slots ...[][2]int) *Topology {
	t.Helper()
	top := &Topology{Epoch: epoch}
	for i, r := range slots {
		top.Shards = append(top.Shards, Shard{Slots: r, Primary: planNodes[i], Replicas: []Node{}})
	}
	require.NoError(t, top.Validate())
	return top
}

// planView is node i reporting epoch (its topology's), its topology and open
// slots: "migrating"/"importing" map slot -> peer node index.
func planView(i int, top *Topology, migrating, importing map[int]int) NodeView {
	st := &NodeReport{ID: planNodes[i].ID, Topology: top, Migrating: map[int]string{}, Importing: map[int]string{}}
	if top != nil {
		st.Epoch = top.Epoch
	}
	for s, p := range migrating {
		st.Migrating[s] = planNodes[p].ID
	}
	for s, p := range importing {
		st.Importing[s] = planNodes[p].ID
	}
	return NodeView{Node: planNodes[i], State: st}
}

func rng(lo, hi int) [2]int { return [2]int{lo, hi} }

func TestPlanApply(t *testing.T) {
	three := func(epoch uint64) *Topology {
		return planTop(t, epoch, [][2]int{rng(0, 5460)}, [][2]int{rng(5461, 10922)}, [][2]int{rng(10923, 16383)})
	}
	// moved: 0-99 from node 0 to node 1, 10923-11000 from node 2 to node 0.
	moved := func(epoch uint64) *Topology {
		return planTop(t, epoch,
			[][2]int{rng(100, 5460), rng(10923, 11000)},
			[][2]int{rng(0, 99), rng(5461, 10922)},
			[][2]int{rng(11001, 16383)})
	}
	open := func(lo, hi, peer int) map[int]int {
		m := map[int]int{}
		for s := lo; s <= hi; s++ {
			m[s] = peer
		}
		return m
	}
	n := planNodes
	cases := []struct {
		name  string
		doc   *Topology
		views []NodeView
		moves []SlotMove
		join  *Topology // nil: no join step
		err   string
	}{
		{
			name:  "new cluster: nothing to move",
			doc:   three(1),
			views: []NodeView{planView(0, nil, nil, nil), planView(1, nil, nil, nil), planView(2, nil, nil, nil)},
		},
		{
			name:  "same layout, higher epoch: nothing to move",
			doc:   three(2),
			views: []NodeView{planView(0, three(1), nil, nil), planView(1, three(1), nil, nil), planView(2, three(1), nil, nil)},
		},
		{
			name:  "rebalance: one move per pair, sorted by source",
			doc:   moved(2),
			views: []NodeView{planView(2, three(1), nil, nil), planView(0, three(1), nil, nil), planView(1, three(1), nil, nil)},
			moves: []SlotMove{
				{Src: n[0], Dst: n[1], Slots: Ranges{rng(0, 99)}},
				{Src: n[2], Dst: n[0], Slots: Ranges{rng(10923, 11000)}},
			},
		},
		{
			name: "a move left open by an earlier run resumes",
			doc:  moved(2),
			views: []NodeView{
				planView(0, three(1), open(0, 99, 1), nil),
				planView(1, three(1), nil, open(0, 99, 0)),
				planView(2, three(1), nil, nil),
			},
			moves: []SlotMove{
				{Src: n[0], Dst: n[1], Slots: Ranges{rng(0, 99)}},
				{Src: n[2], Dst: n[0], Slots: Ranges{rng(10923, 11000)}},
			},
		},
		{
			name: "flip done on the destinations only: nothing left to move",
			doc:  moved(2),
			views: []NodeView{
				planView(0, moved(2), nil, nil), // a destination: flipped, its importing cleared
				planView(1, moved(2), nil, nil),
				planView(2, three(1), open(10923, 11000, 0), nil),
			},
		},
		{
			name: "redis-cli stopped between SETSLOT NODE calls: the claimed target owns the slot",
			doc:  planTop(t, 3, [][2]int{rng(100, 5460)}, [][2]int{rng(0, 99), rng(5461, 10922)}, [][2]int{rng(10923, 16383)}),
			views: []NodeView{
				planView(0, three(2), open(0, 99, 1), nil),
				planView(1, planTop(t, 2, [][2]int{rng(100, 5460)}, [][2]int{rng(0, 99), rng(5461, 10922)}, [][2]int{rng(10923, 16383)}), nil, nil),
				planView(2, three(2), nil, nil),
			},
		},
		{
			name: "the highest epoch's claim wins",
			doc:  three(5),
			views: []NodeView{
				planView(0, three(1), nil, nil),
				planView(1, planTop(t, 4, [][2]int{rng(0, 5460)}, [][2]int{rng(5461, 16383)}, nil), nil, nil), // took node 2's slots
				planView(2, three(1), nil, nil), // still claims them, at an older epoch
			},
			moves: []SlotMove{{Src: n[1], Dst: n[2], Slots: Ranges{rng(10923, 16383)}}},
		},
		{
			name: "a node without a topology joins first, at the epoch below, and receives slots",
			doc:  planTop(t, 3, [][2]int{rng(0, 4000)}, [][2]int{rng(5461, 10922)}, [][2]int{rng(10923, 16383)}, [][2]int{rng(4001, 5460)}),
			views: []NodeView{
				planView(0, three(1), nil, nil), planView(1, three(1), nil, nil), planView(2, three(1), nil, nil),
				planView(3, nil, nil, nil),
			},
			moves: []SlotMove{{Src: n[0], Dst: n[3], Slots: Ranges{rng(4001, 5460)}}},
			join:  planTop(t, 2, [][2]int{rng(0, 5460)}, [][2]int{rng(5461, 10922)}, [][2]int{rng(10923, 16383)}, [][2]int{}),
		},
		{
			name: "a joining node leaves no epoch between the nodes' and the document's",
			doc:  planTop(t, 2, [][2]int{rng(0, 4000)}, [][2]int{rng(5461, 10922)}, [][2]int{rng(10923, 16383)}, [][2]int{rng(4001, 5460)}),
			views: []NodeView{
				planView(0, three(1), nil, nil), planView(1, three(1), nil, nil), planView(2, three(1), nil, nil),
				planView(3, nil, nil, nil),
			},
			err: "node 127.0.0.1:7001 is at epoch 1: write the document with an epoch above 2 (new nodes join at the epoch below the document's)",
		},
		{
			name: "a node the document leaves out hands its slots over",
			doc:  planTop(t, 3, [][2]int{rng(0, 10922)}, [][2]int{rng(10923, 16383)}),
			views: []NodeView{
				planView(0, planTop(t, 1, [][2]int{rng(0, 5460)}, nil, [][2]int{rng(10923, 16383)}), nil, nil),
				planView(1, planTop(t, 1, [][2]int{rng(0, 5460)}, nil, [][2]int{rng(10923, 16383)}), nil, nil),
				planView(2, planTop(t, 1, [][2]int{rng(0, 5460)}, nil, [][2]int{rng(5461, 10922), rng(10923, 16383)}), nil, nil),
			},
			// node 2 claims 5461-16383 at epoch 1 in its own view; node 1 is
			// in every view, with no slots, so nobody needs to join.
			moves: []SlotMove{
				{Src: n[2], Dst: n[0], Slots: Ranges{rng(5461, 10922)}},
				{Src: n[2], Dst: n[1], Slots: Ranges{rng(10923, 16383)}},
			},
		},
		{
			name:  "a node at the document's epoch with another layout",
			doc:   moved(2),
			views: []NodeView{planView(0, three(1), nil, nil), planView(1, three(2), nil, nil), planView(2, three(1), nil, nil)},
			err:   "node 127.0.0.1:7002 is at epoch 2: write the document with an epoch above 2",
		},
		{
			name: "the node with the highest epoch is named",
			doc:  moved(4),
			views: []NodeView{
				planView(0, three(5), nil, nil), planView(1, three(7), nil, nil), planView(2, three(3), nil, nil),
			},
			err: "node 127.0.0.1:7002 is at epoch 7: write the document with an epoch above 7",
		},
		{
			name: "a slot migrating to a node the document does not give it to",
			doc:  moved(2),
			views: []NodeView{
				planView(0, three(1), map[int]int{5: 2}, nil),
				planView(1, three(1), nil, nil),
				planView(2, three(1), nil, map[int]int{5: 0}),
			},
			err: "slot 5 is migrating on 127.0.0.1:7001 to node " + n[2].ID + ", but the document gives it to node " + n[1].ID,
		},
		{
			name: "a slot importing that the document leaves where it is",
			doc:  moved(2),
			views: []NodeView{
				planView(0, three(1), nil, nil),
				planView(1, three(1), nil, nil),
				planView(2, three(1), nil, map[int]int{6000: 1}),
			},
			err: "slot 6000 is importing on 127.0.0.1:7003 from node " + n[1].ID + ", but the document gives it to node " + n[1].ID,
		},
		{
			name: "a move the document abandons is refused, not rolled back",
			doc:  three(2),
			views: []NodeView{
				planView(0, three(1), open(0, 0, 1), nil),
				planView(1, three(1), nil, open(0, 0, 0)),
				planView(2, three(1), nil, nil),
			},
			err: "slot 0 is migrating on 127.0.0.1:7001 to node " + n[1].ID + ", but the document gives it to node " + n[0].ID,
		},
		{
			name: "two nodes claim a slot at the same epoch",
			doc:  three(2),
			views: []NodeView{
				planView(0, three(1), nil, nil),
				planView(1, planTop(t, 1, [][2]int{rng(1, 5460)}, [][2]int{rng(0, 0), rng(5461, 10922)}, [][2]int{rng(10923, 16383)}), nil, nil),
				planView(2, three(1), nil, nil),
			},
			err: "slot 0 is claimed by both 127.0.0.1:7001 and 127.0.0.1:7002 at epoch 1",
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			plan, err := PlanApply(c.doc, c.views)
			moves := plan.Moves
			if c.err != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), c.err)
				return
			}
			require.NoError(t, err)
			if c.join == nil {
				assert.Nil(t, plan.Join)
			} else if assert.NotNil(t, plan.Join) {
				want, _ := c.join.Marshal()
				got, _ := plan.Join.Marshal()
				assert.Equal(t, string(want), string(got))
			}
			if len(c.moves) == 0 {
				assert.Empty(t, moves)
				return
			}
			assert.Equal(t, c.moves, moves)
		})
	}
}

func TestParseNodeReport(t *testing.T) {
	doc, err := planTop(t, 3, [][2]int{rng(0, 16383)}, nil).Marshal()
	require.NoError(t, err)
	st, err := ParseNodeReport([]byte(`{"id":"` + planNodes[0].ID + `","epoch":3,"topology":` + string(doc) +
		`,"migrating":[[5,"` + planNodes[1].ID + `"]],"importing":[[7,"` + planNodes[1].ID + `"]],"orphans":2,"migrated":10,"imported":4}`))
	require.NoError(t, err)
	assert.Equal(t, planNodes[0].ID, st.ID)
	assert.Equal(t, uint64(3), st.Epoch)
	require.NotNil(t, st.Topology)
	assert.Equal(t, [][2]int{rng(0, 16383)}, st.Topology.SlotsOf(planNodes[0].ID))
	assert.Equal(t, map[int]string{5: planNodes[1].ID}, st.Migrating)
	assert.Equal(t, map[int]string{7: planNodes[1].ID}, st.Importing)
	assert.Equal(t, int64(2), st.Orphans)
	assert.Equal(t, "[5->-"+planNodes[1].ID+"] [7-<-"+planNodes[1].ID+"]", st.OpenSlotsText())

	st, err = ParseNodeReport([]byte(`{"id":"` + planNodes[0].ID + `","epoch":0,"topology":null,"migrating":[],"importing":[],"orphans":0,"migrated":0,"imported":0}`))
	require.NoError(t, err)
	assert.Nil(t, st.Topology)
	assert.Empty(t, st.OpenSlotsText())

	for _, bad := range []string{
		`not json`,
		`{"epoch":1}`,
		`{"id":"x","migrating":[[5]]}`,
		`{"id":"x","migrating":[[16384,"y"]]}`,
		`{"id":"x","importing":[["5","y"]]}`,
		`{"id":"x","topology":{"epoch":0,"shards":[]}}`,
	} {
		_, err := ParseNodeReport([]byte(bad))
		assert.Error(t, err, bad)
	}
}

// threeNodes is planNodes 0-2 splitting the slots evenly at epoch.
func threeNodes(t *testing.T, epoch uint64) *Topology {
	return planTop(t, epoch, [][2]int{rng(0, 5460)}, [][2]int{rng(5461, 10922)}, [][2]int{rng(10923, 16383)})
}

// open maps slots lo..hi to the peer node index, for planView.
func open(lo, hi, peer int) map[int]int {
	m := map[int]int{}
	for s := lo; s <= hi; s++ {
		m[s] = peer
	}
	return m
}

// TestPlanResumesHalfDoneMoves: an apply that stopped part way, at each
// step of a move, is planned again as the same move (or as nothing left
// to move once the keys and the flip are done), never as a refusal.
func TestPlanResumesHalfDoneMoves(t *testing.T) {
	// The document moves 0-99 from node 0 to node 1.
	doc := func(epoch uint64) *Topology {
		return planTop(t, epoch, [][2]int{rng(100, 5460)}, [][2]int{rng(0, 99), rng(5461, 10922)}, [][2]int{rng(10923, 16383)})
	}
	n := planNodes
	whole := []SlotMove{{Src: n[0], Dst: n[1], Slots: Ranges{rng(0, 99)}}}
	cases := []struct {
		name  string
		views []NodeView
		moves []SlotMove
	}{
		{
			name:  "stopped after opening the destination only",
			views: []NodeView{planView(0, threeNodes(t, 1), nil, nil), planView(1, threeNodes(t, 1), nil, open(0, 99, 0)), planView(2, threeNodes(t, 1), nil, nil)},
			moves: whole,
		},
		{
			name:  "stopped after opening part of the range on both",
			views: []NodeView{planView(0, threeNodes(t, 1), open(0, 49, 1), nil), planView(1, threeNodes(t, 1), nil, open(0, 49, 0)), planView(2, threeNodes(t, 1), nil, nil)},
			moves: whole,
		},
		{
			name:  "stopped while the keys moved: both open on the whole range",
			views: []NodeView{planView(0, threeNodes(t, 1), open(0, 99, 1), nil), planView(1, threeNodes(t, 1), nil, open(0, 99, 0)), planView(2, threeNodes(t, 1), nil, nil)},
			moves: whole,
		},
		{
			name:  "stopped after the destination flipped: only the flip of the others is left",
			views: []NodeView{planView(0, threeNodes(t, 1), open(0, 99, 1), nil), planView(1, doc(2), nil, nil), planView(2, threeNodes(t, 1), nil, nil)},
		},
		{
			name:  "stopped after every node flipped: nothing is left",
			views: []NodeView{planView(0, doc(2), nil, nil), planView(1, doc(2), nil, nil), planView(2, doc(2), nil, nil)},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			plan, err := PlanApply(doc(2), c.views)
			require.NoError(t, err)
			assert.Nil(t, plan.Join)
			if len(c.moves) == 0 {
				assert.Empty(t, plan.Moves)
			} else {
				assert.Equal(t, c.moves, plan.Moves)
			}
		})
	}
}

// TestPlanRefusals: documents apply must not carry out, each refused with
// the reason an operator acts on, before anything is changed.
func TestPlanRefusals(t *testing.T) {
	n := planNodes
	cases := []struct {
		name  string
		doc   *Topology
		views []NodeView
		err   string
	}{
		{
			name:  "a destination apply did not reach",
			doc:   planTop(t, 2, [][2]int{rng(100, 5460)}, [][2]int{rng(5461, 10922)}, [][2]int{rng(10923, 16383)}, [][2]int{rng(0, 99)}),
			views: []NodeView{planView(0, threeNodes(t, 1), nil, nil), planView(1, threeNodes(t, 1), nil, nil), planView(2, threeNodes(t, 1), nil, nil)},
			err:   "slot 0 must move to node " + n[3].ID + ", which apply did not reach",
		},
		{
			name: "a slot importing from another node than its owner",
			doc:  planTop(t, 2, [][2]int{rng(100, 5460)}, [][2]int{rng(0, 99), rng(5461, 10922)}, [][2]int{rng(10923, 16383)}),
			views: []NodeView{
				planView(0, threeNodes(t, 1), nil, nil),
				planView(1, threeNodes(t, 1), nil, open(0, 0, 2)),
				planView(2, threeNodes(t, 1), nil, nil),
			},
			err: "slot 0 is importing on 127.0.0.1:7002 from node " + n[2].ID + ", but the document gives it to node " + n[1].ID,
		},
		{
			name: "a slot migrating that the document leaves unassigned",
			doc:  planTop(t, 2, [][2]int{rng(1, 5460)}, [][2]int{rng(5461, 10922)}, [][2]int{rng(10923, 16383)}),
			views: []NodeView{
				planView(0, threeNodes(t, 1), open(0, 0, 1), nil),
				planView(1, threeNodes(t, 1), nil, nil),
				planView(2, threeNodes(t, 1), nil, nil),
			},
			err: "slot 0 is migrating on 127.0.0.1:7001 to node " + n[1].ID + ", but the document gives it to no node",
		},
		{
			name:  "the document's own epoch with another layout",
			doc:   planTop(t, 1, [][2]int{rng(0, 99)}, [][2]int{rng(100, 10922)}, [][2]int{rng(10923, 16383)}),
			views: []NodeView{planView(0, threeNodes(t, 1), nil, nil), planView(1, threeNodes(t, 1), nil, nil), planView(2, threeNodes(t, 1), nil, nil)},
			err:   "node 127.0.0.1:7001 is at epoch 1: write the document with an epoch above 1",
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := PlanApply(c.doc, c.views)
			require.Error(t, err)
			assert.Contains(t, err.Error(), c.err)
		})
	}
}

func TestCurrentOwners(t *testing.T) {
	// Node 0 gave slot 0 to node 1 at epoch 2; node 2 has no topology.
	gave := planTop(t, 2, [][2]int{rng(1, 5460)}, [][2]int{rng(0, 0), rng(5461, 10922)}, [][2]int{rng(10923, 16383)})
	t.Run("the highest epoch's claim, and unclaimed slots", func(t *testing.T) {
		views := []NodeView{planView(0, threeNodes(t, 1), nil, nil), planView(1, gave, nil, nil), planView(2, nil, nil, nil)}
		owners, err := currentOwners(views)
		require.NoError(t, err)
		assert.Equal(t, 1, owners[0], "node 1's claim is the newer")
		assert.Equal(t, 0, owners[1])
		assert.Equal(t, 1, owners[5461])
		assert.Equal(t, -1, owners[10923], "node 2 claims nothing, and nobody else claims its slots")
	})
	t.Run("a move finished up to the flip: its destination owns the slot", func(t *testing.T) {
		dst := planTop(t, 1, [][2]int{rng(1, 5460)}, [][2]int{rng(0, 0), rng(5461, 10922)}, [][2]int{rng(10923, 16383)})
		views := []NodeView{planView(0, threeNodes(t, 1), open(0, 0, 1), nil), planView(1, dst, nil, nil), planView(2, threeNodes(t, 1), nil, nil)}
		owners, err := currentOwners(views)
		require.NoError(t, err)
		assert.Equal(t, 1, owners[0], "same epoch, but node 0 says the slot migrates to node 1, which claims it")
	})
	t.Run("the same claim at the same epoch with no explanation", func(t *testing.T) {
		dst := planTop(t, 1, [][2]int{rng(1, 5460)}, [][2]int{rng(0, 0), rng(5461, 10922)}, [][2]int{rng(10923, 16383)})
		views := []NodeView{planView(0, threeNodes(t, 1), nil, nil), planView(1, dst, nil, nil), planView(2, threeNodes(t, 1), nil, nil)}
		_, err := currentOwners(views)
		require.Error(t, err)
		assert.Equal(t, "slot 0 is claimed by both 127.0.0.1:7001 and 127.0.0.1:7002 at epoch 1: fix one of them first", err.Error())
	})
}

func TestJoinLeavesOutReplicasThatOwnSlots(t *testing.T) {
	// Node 3 owns 0-99 now, and the document makes it a replica of node 1
	// after moving its slots there; node 2 is new.
	n := planNodes
	now := planTop(t, 1, [][2]int{rng(100, 5460)}, [][2]int{rng(5461, 16383)}, nil, [][2]int{rng(0, 99)})
	doc := &Topology{Epoch: 3, Shards: []Shard{
		{Slots: [][2]int{rng(0, 5460)}, Primary: n[0], Replicas: []Node{}},
		{Slots: [][2]int{rng(5461, 10922)}, Primary: n[1], Replicas: []Node{n[3]}},
		{Slots: [][2]int{rng(10923, 16383)}, Primary: n[2], Replicas: []Node{}},
	}}
	require.NoError(t, doc.Validate())
	views := []NodeView{planView(0, now, nil, nil), planView(1, now, nil, nil), planView(2, nil, nil, nil), planView(3, now, nil, nil)}
	plan, err := PlanApply(doc, views)
	require.NoError(t, err)
	assert.Equal(t, []SlotMove{
		{Src: n[1], Dst: n[2], Slots: Ranges{rng(10923, 16383)}},
		{Src: n[3], Dst: n[0], Slots: Ranges{rng(0, 99)}},
	}, plan.Moves)
	require.NotNil(t, plan.Join)
	assert.Equal(t, uint64(2), plan.Join.Epoch)
	require.Len(t, plan.Join.Shards, 4)
	assert.Empty(t, plan.Join.Shards[1].Replicas, "node 3 owns slots now: a primary of its own shard, not node 1's replica")
	assert.Equal(t, n[3], plan.Join.Shards[3].Primary)
	assert.Equal(t, [][2]int{rng(0, 99)}, plan.Join.Shards[3].Slots)
	assert.Equal(t, [][2]int{}, plan.Join.Shards[2].Slots, "the new node joins with no slots")
}

func TestFlipGroups(t *testing.T) {
	n := planNodes
	views := []NodeView{planView(3, nil, nil, nil), planView(2, nil, nil, nil), planView(1, nil, nil, nil), planView(0, nil, nil, nil)}
	moves := []SlotMove{
		{Src: n[0], Dst: n[1], Slots: Ranges{rng(0, 9)}},
		{Src: n[1], Dst: n[2], Slots: Ranges{rng(10, 19)}},
	}
	// Node 1 is a source and a destination: a destination, flipped first.
	assert.Equal(t, [3][]int{{1, 2}, {3}, {0}}, FlipGroups(views, moves))
	assert.Equal(t, [3][]int{nil, nil, {0, 1, 2, 3}}, FlipGroups(views, nil), "no move: every node at once")
}

func TestFirstClosed(t *testing.T) {
	n := planNodes
	m := SlotMove{Src: n[0], Dst: n[1], Slots: Ranges{rng(5, 6), rng(9, 9)}}
	report := func(migrating, importing map[int]int) *NodeReport {
		return planView(0, nil, migrating, importing).State
	}
	src := report(map[int]int{5: 1, 6: 1, 9: 1}, nil)
	_, _, closed := m.FirstClosed(src, report(nil, map[int]int{5: 0, 6: 0, 9: 0}))
	assert.False(t, closed, "every slot open on both")

	slot, atDst, closed := m.FirstClosed(src, report(nil, map[int]int{5: 0, 6: 0}))
	assert.True(t, closed)
	assert.Equal(t, 9, slot)
	assert.True(t, atDst, "the destination closed slot 9")

	slot, atDst, closed = m.FirstClosed(report(map[int]int{5: 1, 6: 2, 9: 1}, nil), report(nil, map[int]int{5: 0, 6: 0, 9: 0}))
	assert.True(t, closed)
	assert.Equal(t, 6, slot)
	assert.False(t, atDst, "the source re-targeted slot 6")
}
