package cluster

// The plan of `cellserver cluster apply`: pure functions of the nodes'
// GETSTATE reports and the document to apply. Who owns each slot now,
// which slots must move where, whether the document may be applied at all
// (PlanApply), and the order of the steps that carry the plan out (the
// flip's groups, the checks before it). The steps themselves, which talk
// to the nodes, are package peer's.

import (
	"bytes"
	"fmt"
	"sort"
)

// NodeView is a node as apply reached it: where it was found and what it
// reported.
type NodeView struct {
	Node  Node
	State *NodeReport
}

// SlotMove is one (source, destination) pair of a plan and the slots it
// moves, as sorted merged ranges.
type SlotMove struct {
	Src, Dst Node
	Slots    Ranges
}

// Plan is what apply will do: add nodes (Join, if not nil), move slots,
// flip to the document.
type Plan struct {
	// Join is sent first when a move's source or destination does not know
	// its peer as a primary (a node being added, or one with no topology
	// yet): the current ownership, unchanged, with every node of the
	// document and every current owner, at the document's epoch - 1. Nodes
	// refuse to open a slot to a node they do not know.
	Join  *Topology
	Moves []SlotMove
}

// PlanApply runs the checks apply makes before changing anything: epochs,
// current owners, moves (a move left open by an earlier run resumes), and
// whether the nodes must be told about each other first. views must hold
// every node doc names.
func PlanApply(doc *Topology, views []NodeView) (Plan, error) {
	if err := checkEpochs(doc, views); err != nil {
		return Plan{}, err
	}
	owners, err := currentOwners(views)
	if err != nil {
		return Plan{}, err
	}
	moves, err := planMoves(doc, views, owners)
	if err != nil {
		return Plan{}, err
	}
	plan := Plan{Moves: moves}
	if !needJoin(views, moves) {
		return plan, nil
	}
	// Join's epoch must be above every node's too.
	for _, v := range views {
		if v.State.Epoch >= doc.Epoch-1 {
			return Plan{}, fmt.Errorf("node %s is at epoch %d: write the document with an epoch above %d (new nodes join at the epoch below the document's)",
				v.Node.Addr(), v.State.Epoch, v.State.Epoch+1)
		}
	}
	if plan.Join, err = joinTopology(doc, views, owners); err != nil {
		return Plan{}, err
	}
	return plan, nil
}

// claims reports, per slot, whether v's own topology gives v the slot.
func (v NodeView) claims() *[SlotCount]bool {
	owned := v.State.Topology.ownedBy(v.State.ID)
	return &owned
}

// currentOwners returns, per slot, the index in views of the node that owns
// it now (-1: nobody claims it). The owner is the node whose own topology
// gives it the slot at the highest epoch; if that node says the slot is
// migrating to X and X's own topology claims it, X owns it (a move finished
// up to the flip of some nodes). Two nodes claiming a slot at the same epoch
// with neither explanation is an error: apply cannot tell which holds it.
func currentOwners(views []NodeView) ([SlotCount]int, error) {
	var owner [SlotCount]int
	claims := make([]*[SlotCount]bool, len(views))
	index := make(map[string]int, len(views))
	for i, v := range views {
		claims[i] = v.claims()
		index[v.State.ID] = i
	}
	for slot := range SlotCount {
		best, tie := -1, -1
		for i := range views {
			if !claims[i][slot] {
				continue
			}
			switch {
			case best < 0 || views[i].State.Epoch > views[best].State.Epoch:
				best, tie = i, -1
			case views[i].State.Epoch == views[best].State.Epoch:
				tie = i
			}
		}
		if best >= 0 {
			if x, ok := views[best].State.Migrating[slot]; ok {
				if j, ok := index[x]; ok && claims[j][slot] {
					if tie == j {
						tie = -1
					}
					best = j
				}
			}
			if tie >= 0 {
				if x, ok := views[tie].State.Migrating[slot]; ok && x == views[best].State.ID {
					tie = -1
				}
			}
		}
		if tie >= 0 {
			return owner, fmt.Errorf("slot %d is claimed by both %s and %s at epoch %d: fix one of them first",
				slot, views[best].Node.Addr(), views[tie].Node.Addr(), views[best].State.Epoch)
		}
		owner[slot] = best
	}
	return owner, nil
}

// sameTopology reports whether a and b are the same document (epoch and
// layout, node addresses included).
func sameTopology(a, b *Topology) bool {
	if a == nil || b == nil {
		return a == b
	}
	ma, err1 := a.Marshal()
	mb, err2 := b.Marshal()
	return err1 == nil && err2 == nil && bytes.Equal(ma, mb)
}

// epochError is the refusal of a document that is not newer than a node.
type epochError struct {
	Node  Node
	Epoch uint64
}

func (e *epochError) Error() string {
	return fmt.Sprintf("node %s is at epoch %d: write the document with an epoch above %d", e.Node.Addr(), e.Epoch, e.Epoch)
}

// checkEpochs accepts doc if its epoch is above every node's, except nodes
// that already hold doc itself (a re-run after a partial flip). Otherwise it
// names the node with the highest epoch, so one edit of the document is
// enough.
func checkEpochs(doc *Topology, views []NodeView) error {
	var worst *epochError
	for _, v := range views {
		if v.State.Epoch < doc.Epoch || sameTopology(v.State.Topology, doc) {
			continue
		}
		if worst == nil || v.State.Epoch > worst.Epoch {
			worst = &epochError{Node: v.Node, Epoch: v.State.Epoch}
		}
	}
	if worst != nil {
		return worst
	}
	return nil
}

// docOwners returns, per slot, the id of the primary doc gives it to ("" if
// unassigned).
func docOwners(doc *Topology) *[SlotCount]string {
	var out [SlotCount]string
	for _, s := range doc.Shards {
		for _, r := range s.Slots {
			for slot := r[0]; slot <= r[1]; slot++ {
				out[slot] = s.Primary.ID
			}
		}
	}
	return &out
}

// planMoves returns the moves that take every slot from its current owner
// (owners, from currentOwners) to its owner in doc, sorted by source then
// destination address. Slots nobody owns now, or that doc leaves
// unassigned, move nothing. Slots already open are checked against the
// plan: MIGRATING to, or IMPORTING from, the peer the plan names is a move
// to resume; a move that has finished (its destination owns the slot now and
// doc agrees) waits only for the flip; anything else is refused, naming the
// slot, because carrying out the plan would strand or split its keys.
func planMoves(doc *Topology, views []NodeView, owners [SlotCount]int) ([]SlotMove, error) {
	want := docOwners(doc)
	byID := make(map[string]int, len(views))
	for i, v := range views {
		byID[v.State.ID] = i
	}
	// Nodes the document names but apply could not ask are unknown here;
	// the caller reaches every node of doc first.
	type pair struct{ src, dst int }
	sets := make(map[pair]*[SlotCount]bool)
	var order []pair
	planned := func(slot int) (src, dst string, ok bool) {
		o := owners[slot]
		if o < 0 || want[slot] == "" || views[o].State.ID == want[slot] {
			return "", "", false
		}
		return views[o].State.ID, want[slot], true
	}
	for slot := range SlotCount {
		src, dst, ok := planned(slot)
		if !ok {
			continue
		}
		d, known := byID[dst]
		if !known {
			return nil, fmt.Errorf("slot %d must move to node %s, which apply did not reach", slot, dst)
		}
		p := pair{byID[src], d}
		if sets[p] == nil {
			sets[p] = new([SlotCount]bool)
			order = append(order, p)
		}
		sets[p][slot] = true
	}
	// Open slots must agree with the plan.
	for _, v := range views {
		for _, e := range Sorted(v.State.Migrating) {
			slot, peer := e.Slot, e.Peer
			src, dst, ok := planned(slot)
			switch {
			case ok && src == v.State.ID && dst == peer: // resume
			case !ok && owners[slot] >= 0 && views[owners[slot]].State.ID == peer && want[slot] == peer: // moved, flip pending
			default:
				return nil, fmt.Errorf("slot %d is migrating on %s to node %s, but the document gives it to %s: finish or close that move first",
					slot, v.Node.Addr(), peer, describeOwner(want[slot]))
			}
		}
		for _, e := range Sorted(v.State.Importing) {
			slot, peer := e.Slot, e.Peer
			src, dst, ok := planned(slot)
			if ok && dst == v.State.ID && src == peer { // resume
				continue
			}
			return nil, fmt.Errorf("slot %d is importing on %s from node %s, but the document gives it to %s: finish or close that move first",
				slot, v.Node.Addr(), peer, describeOwner(want[slot]))
		}
	}
	moves := make([]SlotMove, 0, len(order))
	for _, p := range order {
		moves = append(moves, SlotMove{Src: views[p.src].Node, Dst: views[p.dst].Node, Slots: Ranges(rangesOf(sets[p]))})
	}
	sort.SliceStable(moves, func(i, j int) bool {
		if a, b := moves[i].Src.Addr(), moves[j].Src.Addr(); a != b {
			return a < b
		}
		return moves[i].Dst.Addr() < moves[j].Dst.Addr()
	})
	return moves, nil
}

func describeOwner(id string) string {
	if id == "" {
		return "no node"
	}
	return "node " + id
}

// needJoin reports whether a move's source or destination lacks its peer as
// a primary in its own topology.
func needJoin(views []NodeView, moves []SlotMove) bool {
	top := make(map[string]*Topology, len(views))
	for _, v := range views {
		top[v.State.ID] = v.State.Topology
	}
	knows := func(who, peer string) bool {
		t := top[who]
		return t != nil && t.IsPrimary(peer)
	}
	for _, m := range moves {
		if !knows(m.Src.ID, m.Dst.ID) || !knows(m.Dst.ID, m.Src.ID) {
			return true
		}
	}
	return false
}

// joinTopology is the current ownership as a document naming every node
// the document names plus every current owner, at doc.Epoch-1: doc's shards
// with the slots their primaries own now, then a shard per current owner
// doc does not have as a primary (doc's replicas that are such an owner are
// left out of their shard).
func joinTopology(doc *Topology, views []NodeView, owners [SlotCount]int) (*Topology, error) {
	owned := make(map[string]*[SlotCount]bool)
	var extra []Node
	for slot, o := range owners {
		if o < 0 {
			continue
		}
		id := views[o].State.ID
		if owned[id] == nil {
			owned[id] = new([SlotCount]bool)
			if !doc.IsPrimary(id) {
				extra = append(extra, views[o].Node)
			}
		}
		owned[id][slot] = true
	}
	slotsOf := func(id string) [][2]int {
		if owned[id] == nil {
			return [][2]int{}
		}
		return rangesOf(owned[id])
	}
	j := &Topology{Epoch: doc.Epoch - 1}
	for _, s := range doc.Shards {
		sh := Shard{Slots: slotsOf(s.Primary.ID), Primary: s.Primary, Replicas: []Node{}}
		for _, r := range s.Replicas {
			if owned[r.ID] == nil {
				sh.Replicas = append(sh.Replicas, r)
			}
		}
		j.Shards = append(j.Shards, sh)
	}
	for _, n := range extra {
		j.Shards = append(j.Shards, Shard{Slots: slotsOf(n.ID), Primary: n, Replicas: []Node{}})
	}
	if err := j.Validate(); err != nil {
		return nil, fmt.Errorf("cannot build the topology that adds the new nodes: %v", err)
	}
	return j, nil
}

// FlipGroups is the order in which apply sends the document to the nodes
// of views (indexes into views, each group in view order): every
// destination of a move, then every source, then every other node
// (redis-cli's order for SETSLOT NODE). A group is sent only once the one
// before it accepted, so a slot is never left with no node claiming it.
func FlipGroups(views []NodeView, moves []SlotMove) [3][]int {
	stage := make(map[string]int, len(views)) // node id -> 0 dst, 1 src, 2 other
	for _, v := range views {
		stage[v.Node.ID] = 2
	}
	for _, m := range moves {
		stage[m.Src.ID] = min(stage[m.Src.ID], 1)
	}
	for _, m := range moves {
		stage[m.Dst.ID] = 0
	}
	var groups [3][]int
	for i, v := range views {
		g := stage[v.Node.ID]
		groups[g] = append(groups[g], i)
	}
	return groups
}

// FirstClosed checks, just before the flip, that every slot of m still
// migrates from its source (src, the source's report) to its destination,
// and that the destination (dst) still imports it from that source:
// someone may have closed or re-targeted a slot since it was opened
// (another apply, redis-cli, SETSLOT by hand), and flipping it then could
// have two nodes serve its keys. It returns the first slot that does not,
// and whether the destination is the node that let it go; ok is false if
// every slot is still open.
func (m SlotMove) FirstClosed(src, dst *NodeReport) (slot int, atDst, ok bool) {
	for _, r := range m.Slots {
		for slot := r[0]; slot <= r[1]; slot++ {
			switch {
			case src.Migrating[slot] != m.Dst.ID:
				return slot, false, true
			case dst.Importing[slot] != m.Src.ID:
				return slot, true, true
			}
		}
	}
	return 0, false, false
}
