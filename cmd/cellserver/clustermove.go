package main

// `cellserver cluster apply`, after its flags (clustercli.go). First the
// plan, pure functions of parsed CLUSTER GETSTATE replies: who owns each
// slot now, which slots must move where, and whether the document may be
// applied at all (planApply). Then the applier, which asks every node,
// plans, and carries the plan out: join, open, move, flip, orphans, verify.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cellserver/cellserver/cluster"
)

// nodeState is one node's reply to CLUSTER GETSTATE.
type nodeState struct {
	ID        string
	Epoch     uint64
	Topology  *cluster.Topology // nil: the node has none yet
	Migrating map[int]string    // slot -> destination node id
	Importing map[int]string    // slot -> source node id
	Orphans   int64             // keys held in slots the node neither owns nor imports
	Migrated  int64
	Imported  int64
}

// parseNodeState decodes GETSTATE's JSON; the topology inside is validated
// as a document.
func parseNodeState(data []byte) (*nodeState, error) {
	var w struct {
		ID        string            `json:"id"`
		Epoch     uint64            `json:"epoch"`
		Topology  json.RawMessage   `json:"topology"`
		Migrating []json.RawMessage `json:"migrating"`
		Importing []json.RawMessage `json:"importing"`
		Orphans   int64             `json:"orphans"`
		Migrated  int64             `json:"migrated"`
		Imported  int64             `json:"imported"`
	}
	if err := json.Unmarshal(data, &w); err != nil {
		return nil, fmt.Errorf("invalid GETSTATE reply: %v", err)
	}
	if w.ID == "" {
		return nil, errors.New("invalid GETSTATE reply: no id")
	}
	st := &nodeState{ID: w.ID, Epoch: w.Epoch, Orphans: w.Orphans, Migrated: w.Migrated, Imported: w.Imported}
	if t := bytes.TrimSpace(w.Topology); len(t) > 0 && !bytes.Equal(t, []byte("null")) {
		top, err := cluster.Parse(t)
		if err != nil {
			return nil, fmt.Errorf("invalid GETSTATE reply: topology: %v", err)
		}
		st.Topology = top
	}
	var err error
	if st.Migrating, err = parseSlotPeers(w.Migrating, "migrating"); err != nil {
		return nil, err
	}
	if st.Importing, err = parseSlotPeers(w.Importing, "importing"); err != nil {
		return nil, err
	}
	return st, nil
}

// parseSlotPeers reads [[slot, "id"], ...].
func parseSlotPeers(list []json.RawMessage, what string) (map[int]string, error) {
	out := make(map[int]string, len(list))
	for _, raw := range list {
		var pair []json.RawMessage
		var slot int
		var id string
		if json.Unmarshal(raw, &pair) != nil || len(pair) != 2 ||
			json.Unmarshal(pair[0], &slot) != nil || json.Unmarshal(pair[1], &id) != nil ||
			slot < 0 || slot >= cluster.SlotCount || id == "" {
			return nil, fmt.Errorf("invalid GETSTATE reply: %s entry %s is not [slot, \"node id\"]", what, raw)
		}
		out[slot] = id
	}
	return out, nil
}

// nodeView is a node as apply reached it: where it was found and what it said.
type nodeView struct {
	Node  cluster.Node
	State *nodeState
}

// slotMove is one (source, destination) pair of a plan and the slots it
// moves, as sorted merged ranges.
type slotMove struct {
	Src, Dst cluster.Node
	Slots    cluster.Ranges
}

// claims reports, per slot, whether v's own topology gives v the slot.
func (v nodeView) claims() *[cluster.SlotCount]bool {
	var out [cluster.SlotCount]bool
	t := v.State.Topology
	if t == nil {
		return &out
	}
	for _, s := range t.Shards {
		if s.Primary.ID != v.State.ID {
			continue
		}
		for _, r := range s.Slots {
			for slot := r[0]; slot <= r[1]; slot++ {
				out[slot] = true
			}
		}
	}
	return &out
}

// currentOwners returns, per slot, the index in views of the node that owns
// it now (-1: nobody claims it). The owner is the node whose own topology
// gives it the slot at the highest epoch; if that node says the slot is
// migrating to X and X's own topology claims it, X owns it (a move finished
// up to the flip of some nodes). Two nodes claiming a slot at the same epoch
// with neither explanation is an error: apply cannot tell which holds it.
func currentOwners(views []nodeView) ([cluster.SlotCount]int, error) {
	var owner [cluster.SlotCount]int
	claims := make([]*[cluster.SlotCount]bool, len(views))
	index := make(map[string]int, len(views))
	for i, v := range views {
		claims[i] = v.claims()
		index[v.State.ID] = i
	}
	for slot := range cluster.SlotCount {
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
func sameTopology(a, b *cluster.Topology) bool {
	if a == nil || b == nil {
		return a == b
	}
	ma, err1 := a.Marshal()
	mb, err2 := b.Marshal()
	return err1 == nil && err2 == nil && bytes.Equal(ma, mb)
}

// epochError is the refusal of a document that is not newer than a node.
type epochError struct {
	Node  cluster.Node
	Epoch uint64
}

func (e *epochError) Error() string {
	return fmt.Sprintf("node %s is at epoch %d: write the document with an epoch above %d", e.Node.Addr(), e.Epoch, e.Epoch)
}

// checkEpochs accepts doc if its epoch is above every node's, except nodes
// that already hold doc itself (a re-run after a partial flip). Otherwise it
// names the node with the highest epoch, so one edit of the document is
// enough.
func checkEpochs(doc *cluster.Topology, views []nodeView) error {
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
func docOwners(doc *cluster.Topology) *[cluster.SlotCount]string {
	var out [cluster.SlotCount]string
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
func planMoves(doc *cluster.Topology, views []nodeView, owners [cluster.SlotCount]int) ([]slotMove, error) {
	want := docOwners(doc)
	byID := make(map[string]int, len(views))
	for i, v := range views {
		byID[v.State.ID] = i
	}
	// Nodes the document names but apply could not ask are unknown here;
	// the caller reaches every node of doc first.
	type pair struct{ src, dst int }
	sets := make(map[pair]*[cluster.SlotCount]bool)
	var order []pair
	planned := func(slot int) (src, dst string, ok bool) {
		o := owners[slot]
		if o < 0 || want[slot] == "" || views[o].State.ID == want[slot] {
			return "", "", false
		}
		return views[o].State.ID, want[slot], true
	}
	for slot := range cluster.SlotCount {
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
			sets[p] = new([cluster.SlotCount]bool)
			order = append(order, p)
		}
		sets[p][slot] = true
	}
	// Open slots must agree with the plan.
	for _, v := range views {
		for _, slot := range sortedSlots(v.State.Migrating) {
			peer := v.State.Migrating[slot]
			src, dst, ok := planned(slot)
			switch {
			case ok && src == v.State.ID && dst == peer: // resume
			case !ok && owners[slot] >= 0 && views[owners[slot]].State.ID == peer && want[slot] == peer: // moved, flip pending
			default:
				return nil, fmt.Errorf("slot %d is migrating on %s to node %s, but the document gives it to %s: finish or close that move first",
					slot, v.Node.Addr(), peer, describeOwner(want[slot]))
			}
		}
		for _, slot := range sortedSlots(v.State.Importing) {
			peer := v.State.Importing[slot]
			src, dst, ok := planned(slot)
			if ok && dst == v.State.ID && src == peer { // resume
				continue
			}
			return nil, fmt.Errorf("slot %d is importing on %s from node %s, but the document gives it to %s: finish or close that move first",
				slot, v.Node.Addr(), peer, describeOwner(want[slot]))
		}
	}
	moves := make([]slotMove, 0, len(order))
	for _, p := range order {
		moves = append(moves, slotMove{Src: views[p.src].Node, Dst: views[p.dst].Node, Slots: rangesOfSet(sets[p])})
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

// applyPlan is what apply will do: add nodes (Join, if not nil), move
// slots, flip to the document.
type applyPlan struct {
	// Join is sent first when a move's source or destination does not know
	// its peer as a primary (a node being added, or one with no topology
	// yet): the current ownership, unchanged, with every node of the
	// document and every current owner, at the document's epoch - 1. Nodes
	// refuse to open a slot to a node they do not know.
	Join  *cluster.Topology
	Moves []slotMove
}

// planApply runs the checks apply makes before changing anything: epochs,
// current owners, moves, and whether the nodes must be told about each
// other first.
func planApply(doc *cluster.Topology, views []nodeView) (applyPlan, error) {
	if err := checkEpochs(doc, views); err != nil {
		return applyPlan{}, err
	}
	owners, err := currentOwners(views)
	if err != nil {
		return applyPlan{}, err
	}
	moves, err := planMoves(doc, views, owners)
	if err != nil {
		return applyPlan{}, err
	}
	plan := applyPlan{Moves: moves}
	if !needJoin(views, moves) {
		return plan, nil
	}
	// Join's epoch must be above every node's too.
	for _, v := range views {
		if v.State.Epoch >= doc.Epoch-1 {
			return applyPlan{}, fmt.Errorf("node %s is at epoch %d: write the document with an epoch above %d (new nodes join at the epoch below the document's)",
				v.Node.Addr(), v.State.Epoch, v.State.Epoch+1)
		}
	}
	if plan.Join, err = joinTopology(doc, views, owners); err != nil {
		return applyPlan{}, err
	}
	return plan, nil
}

// needJoin reports whether a move's source or destination lacks its peer as
// a primary in its own topology.
func needJoin(views []nodeView, moves []slotMove) bool {
	top := make(map[string]*cluster.Topology, len(views))
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
func joinTopology(doc *cluster.Topology, views []nodeView, owners [cluster.SlotCount]int) (*cluster.Topology, error) {
	owned := make(map[string]*[cluster.SlotCount]bool)
	var extra []cluster.Node
	for slot, o := range owners {
		if o < 0 {
			continue
		}
		id := views[o].State.ID
		if owned[id] == nil {
			owned[id] = new([cluster.SlotCount]bool)
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
		return rangesOfSet(owned[id])
	}
	j := &cluster.Topology{Epoch: doc.Epoch - 1}
	for _, s := range doc.Shards {
		sh := cluster.Shard{Slots: slotsOf(s.Primary.ID), Primary: s.Primary, Replicas: []cluster.Node{}}
		for _, r := range s.Replicas {
			if owned[r.ID] == nil {
				sh.Replicas = append(sh.Replicas, r)
			}
		}
		j.Shards = append(j.Shards, sh)
	}
	for _, n := range extra {
		j.Shards = append(j.Shards, cluster.Shard{Slots: slotsOf(n.ID), Primary: n, Replicas: []cluster.Node{}})
	}
	if err := j.Validate(); err != nil {
		return nil, fmt.Errorf("cannot build the topology that adds the new nodes: %v", err)
	}
	return j, nil
}

func sortedSlots(m map[int]string) []int {
	out := make([]int, 0, len(m))
	for s := range m {
		out = append(out, s)
	}
	sort.Ints(out)
	return out
}

func rangesOfSet(set *[cluster.SlotCount]bool) cluster.Ranges {
	var out cluster.Ranges
	for s := 0; s < cluster.SlotCount; s++ {
		if !set[s] {
			continue
		}
		e := s
		for e+1 < cluster.SlotCount && set[e+1] {
			e++
		}
		out = append(out, [2]int{s, e})
		s = e
	}
	return out
}

// openSlotsText describes v's open slots for a report line ("" if none).
func openSlotsText(st *nodeState) string {
	var b bytes.Buffer
	for _, s := range sortedSlots(st.Migrating) {
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "[%d->-%s]", s, st.Migrating[s])
	}
	for _, s := range sortedSlots(st.Importing) {
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "[%d-<-%s]", s, st.Importing[s])
	}
	return b.String()
}

// clusterAuth is how apply and dump reach a node: the login and the
// per-command timeout.
type clusterAuth struct {
	user, password string
	timeout        time.Duration
}

// newClusterAuth logs in as admin if adminPassword is set (admin may also do
// what the default user may), else as the default user with password.
func newClusterAuth(adminPassword, password string, timeout time.Duration) clusterAuth {
	if adminPassword != "" {
		return clusterAuth{user: "admin", password: adminPassword, timeout: timeout}
	}
	return clusterAuth{password: password, timeout: timeout}
}

// moveTimeout is the reply timeout of MOVEKEYS, which runs until every key
// of the slots has moved: minutes for millions of keys.
func (a clusterAuth) moveTimeout() time.Duration { return max(10*a.timeout, 5*time.Minute) }

// do sends one command on a fresh connection and waits at most readTimeout
// for the reply (a.timeout if 0).
func (a clusterAuth) do(addr string, readTimeout time.Duration, args ...any) (any, error) {
	if readTimeout == 0 {
		readTimeout = a.timeout
	}
	c := redis.NewClient(&redis.Options{
		Addr:            addr,
		Username:        a.user,
		Password:        a.password,
		Protocol:        2,
		DialTimeout:     a.timeout,
		ReadTimeout:     readTimeout,
		WriteTimeout:    a.timeout,
		MaxRetries:      -1, // go-redis: 0 means the default (3 retries); -1 means none
		DialerRetries:   1,  // one dial attempt (0 would mean the default, 5)
		PoolSize:        1,
		DisableIdentity: true, // no CLIENT SETINFO
	})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*a.timeout+readTimeout)
	defer cancel()
	return c.Do(ctx, args...).Result()
}

// ok sends a command that must reply +OK.
func (a clusterAuth) ok(addr string, args ...any) error {
	reply, err := a.do(addr, 0, args...)
	if err != nil {
		return err
	}
	if s, ok := reply.(string); !ok || s != "OK" {
		return fmt.Errorf("unexpected reply %v", reply)
	}
	return nil
}

func (a clusterAuth) getState(addr string) (*nodeState, error) {
	reply, err := a.do(addr, 0, "CLUSTER", "GETSTATE")
	if err != nil {
		return nil, err
	}
	s, ok := reply.(string)
	if !ok {
		return nil, fmt.Errorf("unexpected reply %v to CLUSTER GETSTATE", reply)
	}
	return parseNodeState([]byte(s))
}

// moveKeys sends CLUSTER MOVEKEYS dst ms [ORPHANS] and returns the keys moved.
func (a clusterAuth) moveKeys(addr, dstID string, orphans bool) (int64, error) {
	args := []any{"CLUSTER", "MOVEKEYS", dstID, strconv.FormatInt(a.timeout.Milliseconds(), 10)}
	if orphans {
		args = append(args, "ORPHANS")
	}
	reply, err := a.do(addr, a.moveTimeout(), args...)
	if err != nil {
		return 0, err
	}
	n, ok := reply.(int64)
	if !ok || n < 0 {
		return 0, fmt.Errorf("unexpected reply %v to CLUSTER MOVEKEYS", reply)
	}
	return n, nil
}

// clusterReason is an error as a report line states it: a node's refusal
// as the node said it, anything else (dial, timeout) as unreachable.
func clusterReason(err error) string {
	var rerr redis.Error
	if errors.As(err, &rerr) {
		return clusterOneLine(err.Error())
	}
	if strings.HasPrefix(err.Error(), "invalid GETSTATE reply") || strings.HasPrefix(err.Error(), "unexpected reply") {
		return clusterOneLine(err.Error())
	}
	return "unreachable: " + clusterOneLine(err.Error())
}

// maxMoveRounds bounds the MOVEKEYS calls per move: each call moves every
// key it finds, so a second one normally replies 0.
const maxMoveRounds = 100

// applier carries out `cellserver cluster apply` for one document.
type applier struct {
	auth    clusterAuth
	doc     *cluster.Topology
	payload string // doc as compact JSON, for SETTOPOLOGY
	stdout  io.Writer
	stderr  io.Writer
}

func (a *applier) fail(format string, args ...any) int {
	fmt.Fprintf(a.stderr, "cellserver cluster apply: "+format+"\n", args...)
	return 1
}

// nodeLine prints "<addr> <id> ok", or "<addr> <id> error: [what: ]reason".
func (a *applier) nodeLine(n cluster.Node, what string, err error) {
	switch {
	case err == nil:
		fmt.Fprintf(a.stdout, "%s %s ok\n", n.Addr(), n.ID)
	case what != "":
		a.nodeError(n, what+": "+clusterReason(err))
	default:
		a.nodeError(n, clusterReason(err))
	}
}

func (a *applier) nodeError(n cluster.Node, text string) {
	fmt.Fprintf(a.stdout, "%s %s error: %s\n", n.Addr(), n.ID, clusterOneLine(text))
}

// states asks every node for GETSTATE at once (a down node costs one
// timeout, not one per node). A node answering with another id is an error.
func (a *applier) states(nodes []cluster.Node) ([]*nodeState, []error) {
	states := make([]*nodeState, len(nodes))
	errs := make([]error, len(nodes))
	var wg sync.WaitGroup
	for i, n := range nodes {
		wg.Go(func() {
			st, err := a.auth.getState(n.Addr())
			if err == nil && st.ID != n.ID {
				err = fmt.Errorf("invalid GETSTATE reply: the node's id is %s, not %s", st.ID, n.ID)
			}
			states[i], errs[i] = st, err
		})
	}
	wg.Wait()
	return states, errs
}

// preflight reaches every node of the document and of every topology a
// reached node holds, until no new node turns up. ok is false if any node
// failed; its line is printed and nothing has been changed anywhere.
func (a *applier) preflight() (views []nodeView, ok bool) {
	seen := make(map[string]bool)
	var pending []cluster.Node
	add := func(t *cluster.Topology) {
		for _, s := range t.Shards {
			for _, n := range append([]cluster.Node{s.Primary}, s.Replicas...) {
				if !seen[n.ID] {
					seen[n.ID] = true
					pending = append(pending, n)
				}
			}
		}
	}
	add(a.doc)
	failed, total := 0, 0
	for len(pending) > 0 {
		round := pending
		pending = nil
		states, errs := a.states(round)
		for i, n := range round {
			total++
			if errs[i] != nil {
				failed++
				a.nodeLine(n, "", errs[i])
				continue
			}
			views = append(views, nodeView{Node: n, State: states[i]})
			if states[i].Topology != nil {
				add(states[i].Topology)
			}
		}
	}
	if failed > 0 {
		a.fail("nothing was changed: %d of %d nodes did not answer CLUSTER GETSTATE", failed, total)
		return nil, false
	}
	return views, true
}

func (a *applier) run() int {
	views, ok := a.preflight()
	if !ok {
		return 1
	}
	plan, err := planApply(a.doc, views)
	if err != nil {
		return a.fail("%v; nothing was changed", err)
	}
	if plan.Join != nil {
		if code := a.join(views, plan.Join); code != 0 {
			return code
		}
	}
	moves := plan.Moves
	if code := a.open(moves); code != 0 {
		return code
	}
	moved := make([]int64, len(moves))
	for i, m := range moves {
		n, err := a.move(m.Src, m.Dst, false)
		moved[i] = n
		if err != nil {
			a.nodeLine(m.Src, fmt.Sprintf("CLUSTER MOVEKEYS to %s", m.Dst.Addr()), err)
			return a.fail("moving slots %s from %s to %s stopped after %d keys: the slots stay open and served; run apply again to resume",
				m.Slots, m.Src.Addr(), m.Dst.Addr(), n)
		}
	}
	if code := a.stillOpen(moves); code != 0 {
		return code
	}
	if code := a.flip(views, moves); code != 0 {
		return code
	}
	orphanLines, code := a.drainOrphans(views)
	if code != 0 {
		return code
	}
	if code := a.verify(views); code != 0 {
		return code
	}
	for i, m := range moves {
		fmt.Fprintf(a.stdout, "moved %d keys of %d slots from %s to %s\n", moved[i], m.Slots.Count(), m.Src.Addr(), m.Dst.Addr())
	}
	for _, l := range orphanLines {
		fmt.Fprintln(a.stdout, l)
	}
	return 0
}

// join sends j (the current ownership, naming every node) to every node
// below its epoch, so that sources and destinations know each other.
func (a *applier) join(views []nodeView, j *cluster.Topology) int {
	payload, err := j.Marshal()
	if err == nil {
		var b bytes.Buffer
		if err = json.Compact(&b, payload); err == nil {
			payload = b.Bytes()
		}
	}
	if err != nil { // cannot happen: planApply validated it
		return a.fail("%v", err)
	}
	results := make([]error, len(views))
	var wg sync.WaitGroup
	for i, v := range views {
		if v.State.Epoch >= j.Epoch {
			continue
		}
		wg.Go(func() { results[i] = a.auth.ok(v.Node.Addr(), "CLUSTER", "SETTOPOLOGY", string(payload)) })
	}
	wg.Wait()
	failed := 0
	for i, err := range results {
		if err != nil {
			failed++
			a.nodeLine(views[i].Node, fmt.Sprintf("CLUSTER SETTOPOLOGY (epoch %d, adding the new nodes)", j.Epoch), err)
		}
	}
	if failed > 0 {
		return a.fail("%d of %d nodes did not accept epoch %d, which adds the new nodes with no slots; no keys were moved", failed, len(views), j.Epoch)
	}
	return 0
}

// open marks every planned range IMPORTING on its destination, then
// MIGRATING on its source. The same state already there is accepted by the
// node, so a re-run passes through ranges a previous run opened.
func (a *applier) open(moves []slotMove) int {
	for _, m := range moves {
		for _, r := range m.Slots {
			lo, hi := strconv.Itoa(r[0]), strconv.Itoa(r[1])
			if err := a.auth.ok(m.Dst.Addr(), "CLUSTER", "SETSLOTRANGE", lo, hi, "IMPORTING", m.Src.ID); err != nil {
				a.nodeLine(m.Dst, fmt.Sprintf("CLUSTER SETSLOTRANGE %s %s IMPORTING", lo, hi), err)
				return a.fail("could not open slots %s-%s from %s to %s; no keys were moved", lo, hi, m.Src.Addr(), m.Dst.Addr())
			}
			if err := a.auth.ok(m.Src.Addr(), "CLUSTER", "SETSLOTRANGE", lo, hi, "MIGRATING", m.Dst.ID); err != nil {
				a.nodeLine(m.Src, fmt.Sprintf("CLUSTER SETSLOTRANGE %s %s MIGRATING", lo, hi), err)
				if uerr := a.auth.ok(m.Dst.Addr(), "CLUSTER", "SETSLOTRANGE", lo, hi, "STABLE"); uerr != nil {
					a.nodeLine(m.Dst, fmt.Sprintf("CLUSTER SETSLOTRANGE %s %s STABLE (undo)", lo, hi), uerr)
					return a.fail("could not open slots %s-%s from %s to %s, and %s still imports them; no keys were moved",
						lo, hi, m.Src.Addr(), m.Dst.Addr(), m.Dst.Addr())
				}
				return a.fail("could not open slots %s-%s from %s to %s; no keys were moved", lo, hi, m.Src.Addr(), m.Dst.Addr())
			}
		}
	}
	return 0
}

// move repeats MOVEKEYS on src until it replies 0 and returns the keys moved.
func (a *applier) move(src, dst cluster.Node, orphans bool) (int64, error) {
	var total int64
	for range maxMoveRounds {
		n, err := a.auth.moveKeys(src.Addr(), dst.ID, orphans)
		if err != nil {
			// The node says how many it moved before it stopped.
			var done int64
			if _, scanErr := fmt.Sscanf(err.Error(), "ERR moved %d keys, then", &done); scanErr == nil {
				total += done
			}
			return total, err
		}
		if n == 0 {
			return total, nil
		}
		total += n
	}
	return total, fmt.Errorf("keys still left after %d rounds of CLUSTER MOVEKEYS", maxMoveRounds)
}

// flip sends the document to every destination, then every source, then
// every other node (redis-cli's order for SETSLOT NODE), each group at once;
// a group with a refusal stops the ones after it, so a slot is never left
// with no node claiming it. One line per node, in view order.
func (a *applier) flip(views []nodeView, moves []slotMove) int {
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
	results := make([]error, len(views))
	sent := make([]bool, len(views))
	stopped := false
	for g := 0; g <= 2 && !stopped; g++ {
		var wg sync.WaitGroup
		for i, v := range views {
			if stage[v.Node.ID] != g {
				continue
			}
			sent[i] = true
			wg.Go(func() { results[i] = a.auth.ok(v.Node.Addr(), "CLUSTER", "SETTOPOLOGY", a.payload) })
		}
		wg.Wait()
		for i := range views {
			if sent[i] && results[i] != nil {
				stopped = true
			}
		}
	}
	failed := 0
	for i, v := range views {
		switch {
		case !sent[i]:
			failed++
			a.nodeError(v.Node, "not sent: a node of an earlier group refused")
		case results[i] != nil:
			failed++
		}
		if sent[i] {
			a.nodeLine(v.Node, "", results[i])
		}
	}
	if failed > 0 {
		return a.fail("%d of %d nodes did not accept epoch %d", failed, len(views), a.doc.Epoch)
	}
	return 0
}

// drainOrphans re-reads every node and moves the keys each holds of slots
// it neither owns nor imports to their owner in the document.
func (a *applier) drainOrphans(views []nodeView) (lines []string, code int) {
	fresh, ok := a.reread(views)
	if !ok {
		return nil, 1
	}
	for i, st := range fresh {
		if st.Orphans == 0 {
			continue
		}
		src := views[i].Node
		for _, s := range a.doc.Shards {
			if s.Primary.ID == src.ID || len(s.Slots) == 0 {
				continue
			}
			n, err := a.move(src, s.Primary, true)
			if err != nil {
				a.nodeLine(src, fmt.Sprintf("CLUSTER MOVEKEYS %s ORPHANS to %s", s.Primary.ID, s.Primary.Addr()), err)
				return nil, a.fail("epoch %d is applied, but moving orphan keys from %s to %s stopped after %d keys; run apply again to resume",
					a.doc.Epoch, src.Addr(), s.Primary.Addr(), n)
			}
			if n > 0 {
				lines = append(lines, fmt.Sprintf("moved %d orphan keys from %s to %s", n, src.Addr(), s.Primary.Addr()))
			}
		}
	}
	return lines, 0
}

// reread asks every node for GETSTATE again; a failing node's line is
// printed.
func (a *applier) reread(views []nodeView) ([]*nodeState, bool) {
	nodes := make([]cluster.Node, len(views))
	for i, v := range views {
		nodes[i] = v.Node
	}
	states, errs := a.states(nodes)
	failed := 0
	for i, err := range errs {
		if err != nil {
			failed++
			a.nodeLine(nodes[i], "", err)
		}
	}
	if failed > 0 {
		a.fail("epoch %d is applied, but %d of %d nodes did not answer CLUSTER GETSTATE afterwards; run apply again to finish", a.doc.Epoch, failed, len(nodes))
		return nil, false
	}
	return states, true
}

// verify checks that no node is left with orphan keys or an open slot.
func (a *applier) verify(views []nodeView) int {
	states, ok := a.reread(views)
	if !ok {
		return 1
	}
	bad := 0
	for i, st := range states {
		var problems []string
		if st.Orphans > 0 {
			problems = append(problems, fmt.Sprintf("%d orphan keys left", st.Orphans))
		}
		if open := openSlotsText(st); open != "" {
			problems = append(problems, "slots still open: "+open)
		}
		if len(problems) > 0 {
			bad++
			a.nodeError(views[i].Node, strings.Join(problems, "; "))
		}
	}
	if bad > 0 {
		return a.fail("epoch %d is applied, but %d of %d nodes are not settled", a.doc.Epoch, bad, len(views))
	}
	return 0
}

// stillOpen checks, just before the flip, that every moved slot still
// migrates from its source to its destination, and that the destination
// still imports it from that source: someone may have closed or
// re-targeted a slot since it was opened (another apply, redis-cli, SETSLOT
// by hand), and flipping it then could have two nodes serve its keys. (The
// source itself refuses the flip while it holds keys of a slot.)
func (a *applier) stillOpen(moves []slotMove) int {
	for _, m := range moves {
		src, err := a.auth.getState(m.Src.Addr())
		if err != nil {
			a.nodeLine(m.Src, "CLUSTER GETSTATE", err)
			return a.fail("cannot check the moved slots on %s before the flip; nothing flipped: run apply again", m.Src.Addr())
		}
		dst, err := a.auth.getState(m.Dst.Addr())
		if err != nil {
			a.nodeLine(m.Dst, "CLUSTER GETSTATE", err)
			return a.fail("cannot check the moved slots on %s before the flip; nothing flipped: run apply again", m.Dst.Addr())
		}
		for _, r := range m.Slots {
			for slot := r[0]; slot <= r[1]; slot++ {
				switch {
				case src.Migrating[slot] != m.Dst.ID:
					a.nodeError(m.Src, fmt.Sprintf("slot %d no longer migrates to %s", slot, m.Dst.Addr()))
					return a.fail("slot %d was closed or re-targeted on %s during the move; nothing flipped: check it, then run apply again", slot, m.Src.Addr())
				case dst.Importing[slot] != m.Src.ID:
					a.nodeError(m.Dst, fmt.Sprintf("slot %d is no longer importing from %s", slot, m.Src.Addr()))
					return a.fail("slot %d was closed or re-targeted on %s during the move; nothing flipped: check it, then run apply again", slot, m.Dst.Addr())
				}
			}
		}
	}
	return 0
}
