package peer

// A node's slot states: the topology it serves and the slots it moves
// (Redis Cluster's open slots), how each change is made durable before
// anything serves by it, and how a request a shard's gate refused is
// redirected. Moving the keys is move.go's.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cellserver/cellserver/cluster"
	"github.com/cellserver/cellserver/store"
)

// Refusal texts of slot changes (Redis's where Redis has one).
const (
	ErrNotMaster  = "ERR Target node is not a master"
	ErrHoldsKeys  = "ERR Can't assign hashslot %d to a different node while I still hold keys for this hash slot."
	ErrNoTopology = "ERR this node has no topology yet: apply one first (cellserver cluster apply)"
	ErrTargetSelf = "ERR Target node is this node"
)

// Refusal is an operation refused or failed, worded as the node replies
// it.
type Refusal string

func (r Refusal) Error() string { return string(r) }

func refusef(format string, args ...any) Refusal { return Refusal(fmt.Sprintf(format, args...)) }

// StoreError is a store request of an operation that did not run: the
// store is shutting down (Closed), or the request failed inside it. The
// caller words it after Prefix, which says what was done before ("" if
// nothing).
type StoreError struct {
	Prefix string
	Err    error
}

func (e *StoreError) Error() string { return e.Prefix + e.Err.Error() }

// Closed reports whether the store is shutting down.
func (e *StoreError) Closed() bool { return errors.Is(e.Err, store.ErrClosed) }

func storeErr(err error) *StoreError { return &StoreError{Err: err} }

// Auth is how a node logs in to another.
type Auth struct{ User, Password string }

// Config configures a Node.
type Config struct {
	ID    string // this node's id ("" outside the cluster modes)
	Store *store.Store
	Log   *slog.Logger
	// StatePath is where each committed state is saved (and loaded from at
	// Start); "" keeps it in memory only.
	StatePath string
	// Auth is how this node logs in to its peers unless MIGRATE names a
	// login: every node of a cluster shares the admin password, and
	// without one a peer accepts the default user for admin commands only
	// over loopback.
	Auth Auth
}

// Node is this node's side of the traffic between nodes: its slot states
// and their changes, the keys it moves and takes in, its connections to
// its peers.
type Node struct {
	cfg Config

	topoMu sync.Mutex // serializes changes of state
	// state is the node's cluster state (the cluster modes): its topology
	// and, under --cluster yes, the slot moves in progress.
	state atomic.Pointer[cluster.NodeState]

	moveMu   sync.Mutex   // one move from this node at a time (MIGRATE, MOVEKEYS)
	delay    atomic.Int64 // ns between MOVEKEYS batches (DEBUG MIGRATE-DELAY)
	maxWait  atomic.Int64 // ns: maxMoveWait, unless a test set another
	ask      atomic.Int64 // -ASK replies
	tryAgain atomic.Int64 // -TRYAGAIN replies
	sent     atomic.Int64 // keys this node moved to others
	received atomic.Int64 // keys other nodes moved here

	peersMu sync.Mutex // guards peers
	peers   map[string]*redis.Client
}

// New returns a node with no topology.
func New(cfg Config) *Node {
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	n := &Node{cfg: cfg}
	n.maxWait.Store(int64(maxMoveWait))
	return n
}

// Close closes the connections to the peers.
func (n *Node) Close() {
	n.peersMu.Lock()
	defer n.peersMu.Unlock()
	for k, cl := range n.peers {
		cl.Close()
		delete(n.peers, k)
	}
}

// State is the node's cluster state (the zero state outside the cluster
// modes). It is never modified: a change stores a new one.
func (n *Node) State() *cluster.NodeState {
	if ns := n.state.Load(); ns != nil {
		return ns
	}
	return &noState
}

var noState cluster.NodeState

// Emulate makes t the node's topology, with no slot state in the shards
// (the emulated one-node cluster, which serves every slot).
func (n *Node) Emulate(t *cluster.Topology) { n.state.Store(&cluster.NodeState{Topology: t}) }

// Start loads the state saved at StatePath (none: no topology yet) and
// sets the shards' gates by it. Call it before anything is served.
func (n *Node) Start() error {
	ns := &cluster.NodeState{Migrating: map[int]string{}, Importing: map[int]string{}}
	if p := n.cfg.StatePath; p != "" {
		loaded, err := cluster.LoadNodeState(p)
		if err != nil {
			return fmt.Errorf("cluster: loading the cluster state %s: %w", p, err)
		}
		if loaded != nil {
			ns = loaded
		}
	}
	if t := ns.Topology; t != nil {
		if _, _, _, ok := t.Node(n.cfg.ID); !ok {
			n.cfg.Log.Warn("this node is not in the saved topology: it owns no slots", "id", n.cfg.ID)
		}
	}
	if ns.Open() {
		n.cfg.Log.Warn("cluster: slot moves were in progress: this node serves by them (run `cellserver cluster apply` again, or redis-cli --cluster fix, to finish)",
			"migrating", len(ns.Migrating), "importing", len(ns.Importing))
	}
	n.state.Store(ns)
	// Before the wire layer serves: no request runs yet.
	n.cfg.Store.InitGate(n.gateOf(ns))
	return nil
}

// WarnOrphans logs the keys the node reloaded of slots it neither owns
// nor imports (an interrupted move of an older cellserver, or a topology
// applied while it was down): they are never served, and `cellserver
// cluster apply` merges them into their owner. Call it once the shards
// serve.
func (n *Node) WarnOrphans() {
	sess := n.cfg.Store.NewSession()
	reqs := make([]store.SlotKeyCountReq, n.cfg.Store.NumShards())
	for i := range reqs {
		sess.AddTo(i, &reqs[i])
	}
	sess.Run()
	var orphans int64
	for i := range reqs {
		orphans += reqs[i].Orphans
	}
	if orphans > 0 {
		n.cfg.Log.Warn("cluster: this node holds keys of slots it does not serve; they answer MOVED until `cellserver cluster apply` merges them into their owner", "keys", orphans)
	}
}

// Counts are the node's counters of slot moves, for INFO.
type Counts struct {
	Ask      int64 // -ASK replies
	TryAgain int64 // -TRYAGAIN replies
	Migrated int64 // keys this node moved to others
	Imported int64 // keys other nodes moved here
}

// Counts reads the counters.
func (n *Node) Counts() Counts {
	return Counts{Ask: n.ask.Load(), TryAgain: n.tryAgain.Load(), Migrated: n.sent.Load(), Imported: n.received.Load()}
}

// CountTryAgain counts a TRYAGAIN reply its caller decided on.
func (n *Node) CountTryAgain() { n.tryAgain.Add(1) }

// SetBatchDelay makes MOVEKEYS wait d between batches (DEBUG
// MIGRATE-DELAY, so that a crash can be made to land inside a move).
func (n *Node) SetBatchDelay(d time.Duration) { n.delay.Store(int64(d)) }

// SetMaxMoveWait replaces maxMoveWait for this node (tests).
func (n *Node) SetMaxMoveWait(d time.Duration) { n.maxWait.Store(int64(d)) }

// gateOf is what each shard must know of every slot under ns.
func (n *Node) gateOf(ns *cluster.NodeState) *[cluster.SlotCount]uint8 {
	var g [cluster.SlotCount]uint8
	for slot := range g {
		owner, _ := ns.Topology.PrimaryOf(slot)
		switch {
		case owner == n.cfg.ID && ns.Migrating[slot] != "":
			g[slot] = store.SlotMigrating
		case owner == n.cfg.ID:
			g[slot] = store.SlotOwned
		case ns.Importing[slot] != "":
			g[slot] = store.SlotImporting
		default:
			g[slot] = store.SlotNotOwned
		}
	}
	return &g
}

// commit makes ns the node's state: with every shard held, it checks that
// no slot the node stops serving holds a live key (refusing with Redis's
// text for that slot otherwise), saves ns, then sets the shards' gates
// (dropping the expired keys left in those slots). So a change is on disk
// before anything serves by it, and a slot is never given up while a key
// of it is here. Callers hold topoMu.
func (n *Node) commit(sess *store.Session, ns *cluster.NodeState) error {
	g := n.gateOf(ns)
	sess.Run()
	sess.Hold(nil)
	defer sess.Release()
	reqs := make([]store.SlotStateReq, n.cfg.Store.NumShards())
	for i := range reqs {
		reqs[i] = store.SlotStateReq{States: g, RequireEmpty: true, CheckOnly: true}
		sess.AddTo(i, &reqs[i])
	}
	for i := range reqs {
		if err := reqs[i].Status(); err != nil {
			return storeErr(err)
		}
		if reqs[i].Busy >= 0 {
			return refusef(ErrHoldsKeys, reqs[i].Busy)
		}
	}
	if p := n.cfg.StatePath; p != "" {
		if err := ns.Save(p); err != nil {
			return Refusal("ERR cannot save the cluster state: " + oneLine(err.Error()))
		}
	}
	var dropped int64
	for i := range reqs {
		reqs[i].CheckOnly = false
		sess.AddTo(i, &reqs[i])
		dropped += reqs[i].Dropped
	}
	n.state.Store(ns)
	if dropped > 0 {
		n.cfg.Log.Info("cluster: dropped the expired keys of slots this node gave up", "keys", dropped)
	}
	return nil
}

// RedirectKind is where a request goes that this node does not run.
type RedirectKind uint8

// The redirects.
const (
	Moved    RedirectKind = iota + 1 // to the slot's owner, at Addr
	Ask                              // once, with ASKING, to the node the slot migrates to, at Addr
	TryAgain                         // some keys moved, or the state is changing: retry later
	Down                             // no node serves the slot
)

// Redirection is a request's redirect, resolved against the node's state.
type Redirection struct {
	Kind RedirectKind
	Slot int
	Addr string // Moved, Ask: the node's address
}

func (r *Redirection) Error() string {
	s := "peer: slot " + strconv.Itoa(r.Slot) + " redirected (" + strconv.Itoa(int(r.Kind)) + ")"
	if r.Addr != "" {
		s += " to " + r.Addr
	}
	return s
}

// Redirect resolves a shard's redirect against the node's state, counting
// ASK and TRYAGAIN (the caller counts MOVED, which it words).
func (n *Node) Redirect(r *store.Redirect) Redirection {
	ns := n.State()
	switch r.Kind {
	case store.Ask:
		if id := ns.Migrating[r.Slot]; id != "" && ns.Topology != nil {
			if p, _, _, ok := ns.Topology.Node(id); ok {
				n.ask.Add(1)
				return Redirection{Kind: Ask, Slot: r.Slot, Addr: p.Addr()}
			}
		}
	case store.TryAgain:
		n.tryAgain.Add(1)
		return Redirection{Kind: TryAgain, Slot: r.Slot}
	}
	// Moved, or an ASK whose move ended meanwhile: to the owner.
	owner, known := ns.Topology.PrimaryOf(r.Slot)
	switch {
	case !known:
		return Redirection{Kind: Down, Slot: r.Slot}
	case owner == n.cfg.ID:
		// The gate and the topology disagree for an instant (a change
		// is being applied): the client retries.
		n.tryAgain.Add(1)
		return Redirection{Kind: TryAgain, Slot: r.Slot}
	}
	p, _, _, _ := ns.Topology.Node(owner)
	return Redirection{Kind: Moved, Slot: r.Slot, Addr: p.Addr()}
}

// movedTo is the redirect of a key of slot this node does not take.
func (n *Node) movedTo(slot int) error {
	rd := n.Redirect(&store.Redirect{Kind: store.Moved, Slot: slot})
	return &rd
}

// SlotAction is a CLUSTER SETSLOT action that opens or closes a move.
type SlotAction uint8

// The actions.
const (
	Importing   SlotAction = iota + 1 // the slot's keys come here from a node
	Migrating                         // the slot's keys go from here to a node
	Stable                            // the move ends, once its target holds none of the slot's keys
	StableForce                       // the move ends without asking the target (a target lost for good)
)

// SetSlots applies action to slots lo..hi, all or nothing, as one saved
// change; id is the peer of Importing and Migrating.
func (n *Node) SetSlots(sess *store.Session, lo, hi int, action SlotAction, id string) error {
	force := action == StableForce
	if force {
		action = Stable
		n.cfg.Log.Warn("cluster: SETSLOT STABLE FORCE: keys of these slots on their target are abandoned", "first", lo, "last", hi)
	}
	cur, unlock, err := n.lockSlotChange(action == Stable)
	if err != nil {
		return err
	}
	defer unlock()
	ns := cur.Clone()
	slots := make([]int, 0, hi-lo+1)
	for slot := lo; slot <= hi; slot++ {
		if err := n.openSlot(ns, slot, action, id); err != nil {
			return err
		}
		slots = append(slots, slot)
	}
	if action == Stable && !force {
		if err := n.movedAway(cur, slots); err != nil {
			return err
		}
	}
	return n.commit(sess, ns)
}

// SetSlotNode is SETSLOT NODE: the slot belongs to id from now on, in this
// node's topology (its epoch bumped: redis-cli tells every node, so all
// stay equal); this node's move of it, either way, ends. Giving the slot
// away is refused while a live key of it is here (commit).
func (n *Node) SetSlotNode(sess *store.Session, slot int, id string) error {
	cur, unlock, err := n.lockSlotChange(true)
	if err != nil {
		return err
	}
	defer unlock()
	ns := cur.Clone()
	p, err := primaryNode(ns.Topology, id)
	if err != nil {
		return err
	}
	if owner, _ := ns.Topology.PrimaryOf(slot); owner != p.ID {
		t, err := ns.Topology.WithOwner(slot, p.ID)
		if err != nil {
			return Refusal("ERR " + err.Error())
		}
		ns.Topology = t
	}
	if m := cur.Migrating[slot]; m != "" && p.ID != m {
		// The move ends without the slot going to its target: as STABLE.
		if err := n.movedAway(cur, []int{slot}); err != nil {
			return err
		}
	}
	if src := cur.Importing[slot]; src != "" && p.ID == n.cfg.ID {
		if err := n.leftOnSource(cur, slot, src); err != nil {
			return err
		}
	}
	delete(ns.Importing, slot)
	delete(ns.Migrating, slot)
	return n.commit(sess, ns)
}

// SetTopology makes t the node's topology if its epoch is newer (or equal,
// with the same layout: a re-run of `cellserver cluster apply` succeeds).
// It moves no keys: a slot this node loses must hold none (their move,
// MoveKeys, comes first), else it refuses with Redis's SETSLOT NODE text
// and changes nothing. Slot moves the document settles end (the importer
// now owns the slot); the others stay open while they still make sense.
// The new state is saved before anything serves by it.
func (n *Node) SetTopology(sess *store.Session, t *cluster.Topology) error {
	n.topoMu.Lock()
	defer n.topoMu.Unlock()
	cur := n.State()
	old := cur.Topology
	if old != nil && t.Epoch == old.Epoch && t.SameLayout(old) {
		return nil
	}
	if old != nil && t.Epoch <= old.Epoch {
		return refusef("ERR topology epoch %d is not newer than the current epoch %d", t.Epoch, old.Epoch)
	}
	ns := cur.Clone()
	ns.Topology = t
	// An open slot is settled by a document that gives it to the importer
	// (the move's end); one that keeps it with its owner and both peers
	// leaves it open. Any other outcome would strand keys already moved:
	// refused, nothing changed.
	for _, e := range cluster.Sorted(cur.Migrating) {
		switch owner, _ := t.PrimaryOf(e.Slot); {
		case owner == e.Peer:
			delete(ns.Migrating, e.Slot)
		case owner != n.cfg.ID || !t.IsPrimary(e.Peer):
			return refusef("ERR slot %d is migrating to %s: the document must give it to that node or leave both with it open; finish or close that move first", e.Slot, e.Peer)
		}
	}
	for _, e := range cluster.Sorted(cur.Importing) {
		switch owner, _ := t.PrimaryOf(e.Slot); {
		case owner == n.cfg.ID:
			delete(ns.Importing, e.Slot)
		case owner != e.Peer || !t.IsPrimary(e.Peer):
			return refusef("ERR slot %d is importing from %s: the document must give it to this node or leave both with it open; finish or close that move first", e.Slot, e.Peer)
		}
	}
	if err := n.commit(sess, ns); err != nil {
		return err
	}
	lost, gained := old.Moves(t, n.cfg.ID)
	n.cfg.Log.Info("cluster topology applied", "epoch", t.Epoch, "owned_slots", cluster.Ranges(t.SlotsOf(n.cfg.ID)).String(),
		"lost", cluster.Ranges(lost).String(), "gained", cluster.Ranges(gained).String())
	return nil
}

// Report is the node's answer to CLUSTER GETSTATE.
func (n *Node) Report(sess *store.Session) *cluster.NodeReport {
	ns := n.State()
	reqs := make([]store.SlotKeyCountReq, n.cfg.Store.NumShards())
	for i := range reqs {
		sess.AddTo(i, &reqs[i])
	}
	sess.Run()
	var orphans int64
	for i := range reqs {
		orphans += reqs[i].Orphans
	}
	return &cluster.NodeReport{ID: n.cfg.ID, Epoch: ns.Epoch(), Topology: ns.Topology, Migrating: ns.Migrating, Importing: ns.Importing,
		Orphans: orphans, Migrated: n.sent.Load(), Imported: n.received.Load()}
}

// lockSlotChange takes the locks of a change of slot state (first moveMu
// when the change may end a move, so that no batch is in flight between
// movedAway's check and the change) and returns the current state and
// the unlock; with no topology yet it refuses, holding nothing.
func (n *Node) lockSlotChange(endsMove bool) (*cluster.NodeState, func(), error) {
	if endsMove {
		n.moveMu.Lock()
	}
	n.topoMu.Lock()
	unlock := func() {
		n.topoMu.Unlock()
		if endsMove {
			n.moveMu.Unlock()
		}
	}
	cur := n.State()
	if cur.Topology == nil {
		unlock()
		return nil, nil, Refusal(ErrNoTopology)
	}
	return cur, unlock, nil
}

// openSlot applies one IMPORTING/MIGRATING/STABLE action to ns (a copy),
// or returns Redis's refusal.
func (n *Node) openSlot(ns *cluster.NodeState, slot int, action SlotAction, id string) error {
	owner, _ := ns.Topology.PrimaryOf(slot)
	switch action {
	case Stable:
		delete(ns.Migrating, slot)
		delete(ns.Importing, slot)
		return nil
	case Migrating:
		if owner != n.cfg.ID {
			return refusef("ERR I'm not the owner of hash slot %d", slot)
		}
	case Importing:
		if owner == n.cfg.ID {
			return refusef("ERR I'm already the owner of hash slot %d", slot)
		}
	}
	p, _, primary, ok := ns.Topology.Node(id)
	switch {
	case !ok:
		return Refusal("ERR I don't know about node " + trunc(id, 64))
	case !primary:
		return Refusal(ErrNotMaster)
	case p.ID == n.cfg.ID:
		return Refusal(ErrTargetSelf)
	}
	// An open slot is not re-targeted: keys may already sit on the first
	// peer (close the move first, which checks that).
	if action == Migrating {
		if m := ns.Migrating[slot]; m != "" && m != id {
			return refusef("ERR slot %d is already migrating to %s: close that move first (SETSLOT %d STABLE)", slot, m, slot)
		}
		ns.Migrating[slot] = id
	} else {
		if m := ns.Importing[slot]; m != "" && m != id {
			return refusef("ERR slot %d is already importing from %s: close that move first (SETSLOT %d STABLE)", slot, m, slot)
		}
		ns.Importing[slot] = id
	}
	return nil
}

// movedAway refuses to end the migration of slots this node migrates
// (STABLE, or NODE to itself) unless each target has closed its side (it
// no longer imports the slot from this node, so no ASKed request can make
// a key there any more) and holds no key of it (those keys moved there
// from here, or were made there after an ASK: ending the move here would
// serve them afresh). It asks each target (CLUSTER GETSTATE and
// COUNTKEYSINSLOT); a target it cannot ask, or does not know, refuses
// too. nil if the slots may close. Callers hold moveMu, so no batch of
// this node's moves is in flight meanwhile.
func (n *Node) movedAway(ns *cluster.NodeState, slots []int) error {
	byPeer := map[string][]int{}
	for _, slot := range slots {
		if id := ns.Migrating[slot]; id != "" {
			byPeer[id] = append(byPeer[id], slot)
		}
	}
	for id, list := range byPeer {
		p, _, _, ok := ns.Topology.Node(id)
		if !ok {
			return refusef("ERR slot %d migrates to %s, which is not in the topology: its keys cannot be checked", list[0], trunc(id, 64))
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		pipe := n.peer(p.Addr(), n.cfg.Auth, 5*time.Second).Pipeline()
		state := pipe.Do(ctx, "CLUSTER", "GETSTATE")
		cmds := make([]*redis.IntCmd, len(list))
		for i, slot := range list {
			cmds[i] = pipe.ClusterCountKeysInSlot(ctx, slot)
		}
		_, err := pipe.Exec(ctx)
		cancel()
		if err != nil {
			return Refusal("ERR cannot ask " + p.Addr() + " whether it holds keys of the slot: " + oneLine(err.Error()) + "; the slot stays open")
		}
		var st struct {
			Importing [][2]any `json:"importing"`
		}
		if js, _ := state.Text(); json.Unmarshal([]byte(js), &st) != nil {
			return Refusal("ERR cannot read the state of " + p.Addr() + "; the slot stays open")
		}
		importing := map[int]bool{}
		for _, e := range st.Importing {
			if f, ok := e[0].(float64); ok && e[1] == n.cfg.ID {
				importing[int(f)] = true
			}
		}
		for i, cmd := range cmds {
			switch {
			case cmd.Val() > 0:
				return refusef("ERR slot %d has %d keys on %s: finish the move (SETSLOT NODE, or cellserver cluster apply) or move them back first", list[i], cmd.Val(), p.Addr())
			case importing[list[i]]:
				return refusef("ERR slot %d is still importing on %s: close it there first (SETSLOT %d STABLE)", list[i], p.Addr(), list[i])
			}
		}
	}
	return nil
}

// leftOnSource is the refusal of SETSLOT <slot> NODE <myself> on the node
// importing slot from src while src still holds keys of it: from the flip
// on, this node would serve those keys afresh while src still serves them
// (Redis 7.0 accepts it, and a key is then charged on two nodes until the
// move ends). A source it cannot reach is not asked (it may be gone for
// good: the flip is how its slots are taken over); that is logged.
func (n *Node) leftOnSource(ns *cluster.NodeState, slot int, src string) error {
	p, _, _, ok := ns.Topology.Node(src)
	if !ok {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	left, err := n.peer(p.Addr(), n.cfg.Auth, 5*time.Second).ClusterCountKeysInSlot(ctx, slot).Result()
	if err != nil {
		n.cfg.Log.Warn("cluster: SETSLOT NODE took a slot whose source could not be asked for keys left", "slot", slot, "source", p.Addr(), "err", err)
		return nil
	}
	if left > 0 {
		return refusef("ERR slot %d has %d keys on %s: move them here first (MIGRATE, or CLUSTER MOVEKEYS there)", slot, left, p.Addr())
	}
	return nil
}

// primaryNode returns the primary id of t, or Redis's refusal for an id
// that names no node or a replica.
func primaryNode(t *cluster.Topology, id string) (cluster.Node, error) {
	p, _, primary, ok := t.Node(id)
	switch {
	case !ok:
		return p, Refusal("ERR Unknown node " + trunc(id, 64))
	case !primary:
		return p, Refusal(ErrNotMaster)
	}
	return p, nil
}

// trunc cuts s to at most n bytes, like C's %.*s.
func trunc(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}
