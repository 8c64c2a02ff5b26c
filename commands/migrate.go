package commands

// Slot moves, Redis Cluster's protocol: a slot is MIGRATING on its owner
// and IMPORTING on the node it moves to; keys move in batches, each one
// stored durably on the target before the source drops it; the source
// serves the keys it still holds and answers -ASK for the others; the
// target serves a slot it imports only after ASKING; once the slot is
// empty on the source, ownership flips (SETSLOT NODE, or SETTOPOLOGY from
// `cellserver cluster apply`). At every instant a key is served by at most
// one node, so no call is decided twice. The shards check each request
// against their slot's state when it runs (store's gate), not only when the
// event loop routes it. docs/cluster.md states the guarantees.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cellserver/cellserver/cluster"
	"github.com/cellserver/cellserver/limit"
	"github.com/cellserver/cellserver/store"
)

// Redis's texts for slot moves.
const (
	ErrTryAgain       = "TRYAGAIN Multiple keys request during rehashing of slot"
	ErrSetSlotSyntax  = "ERR Invalid CLUSTER SETSLOT action or number of arguments. Try CLUSTER HELP"
	ErrBadSlot        = "ERR Invalid or out of range slot"
	ErrNotMaster      = "ERR Target node is not a master"
	ErrMigrateKeysArg = "ERR When using MIGRATE KEYS option, the key argument must be set to the empty string"
	errHoldsKeys      = "ERR Can't assign hashslot %d to a different node while I still hold keys for this hash slot."
)

// migrateBatch is the most keys one batch of CLUSTER MOVEKEYS carries: they
// answer TRYAGAIN for the batch's round trip, and the source's store shard
// is held twice per batch (to copy them; to drop them and sync the drop).
const migrateBatch = 100

// maxMoveWait caps the timeout of one batch's round trip, whatever MIGRATE
// or MOVEKEYS was given (redis-cli's reshard sends 60000 ms): the batch's
// keys answer TRYAGAIN until the target answers or twice the timeout has
// passed. A target that accepts the connection and never answers then
// keeps them from their clients for 10 s at most, not for two minutes or
// as long as a client asked; a target that needs longer than this for one
// sync fails the batch, which can be run again. A healthy target answers
// in milliseconds. A variable for tests.
var maxMoveWait = 5 * time.Second

// migration is the server's state of slot moves besides the NodeState.
type migration struct {
	mu       sync.Mutex   // one move from this node at a time (MIGRATE, MOVEKEYS)
	delay    atomic.Int64 // DEBUG MIGRATE-DELAY, ms between MOVEKEYS batches
	ask      atomic.Int64 // -ASK replies
	tryAgain atomic.Int64 // -TRYAGAIN replies
	sent     atomic.Int64 // keys this node moved to others
	received atomic.Int64 // keys other nodes moved here
	peersMu  sync.Mutex   // guards peers
	peers    map[string]*redis.Client
}

// nodeState is the node's cluster state (the zero state outside the
// cluster modes).
func (s *Server) nodeState() *cluster.NodeState {
	if ns := s.nstate.Load(); ns != nil {
		return ns
	}
	return &noNodeState
}

var noNodeState cluster.NodeState

// topology is the node's topology (nil: none yet, or not a cluster node).
func (s *Server) topology() *cluster.Topology { return s.nodeState().Topology }

// gateOf is what each shard must know of every slot under ns.
func (s *Server) gateOf(ns *cluster.NodeState) *[cluster.SlotCount]uint8 {
	var g [cluster.SlotCount]uint8
	for slot := range g {
		owner, _ := ns.Topology.PrimaryOf(slot)
		switch {
		case owner == s.myID && ns.Migrating[slot] != "":
			g[slot] = store.SlotMigrating
		case owner == s.myID:
			g[slot] = store.SlotOwned
		case ns.Importing[slot] != "":
			g[slot] = store.SlotImporting
		default:
			g[slot] = store.SlotNotOwned
		}
	}
	return &g
}

// commitState makes ns the node's state: with every shard held, it checks
// that no slot the node stops serving holds a live key (refusing with
// Redis's text for that slot otherwise), saves ns, then sets the shards'
// gates (dropping the expired keys left in those slots). So a change is on
// disk before anything serves by it, and a slot is never given up while a
// key of it is here. Callers hold topoMu.
func (s *Server) commitState(c *Client, ns *cluster.NodeState) string {
	g := s.gateOf(ns)
	sess := c.sess
	sess.Run()
	sess.Hold(nil)
	defer sess.Release()
	n := s.st.NumShards()
	reqs := make([]store.SlotStateReq, n)
	for i := range reqs {
		reqs[i] = store.SlotStateReq{States: g, RequireEmpty: true, CheckOnly: true}
		sess.AddTo(i, &reqs[i])
	}
	for i := range reqs {
		if err := reqs[i].Status(); err != nil {
			return s.storeStatusText(err)
		}
		if reqs[i].Busy >= 0 {
			return fmt.Sprintf(errHoldsKeys, reqs[i].Busy)
		}
	}
	if p := s.cfg.Cluster.TopologyPath; p != "" {
		if err := ns.Save(p); err != nil {
			return "ERR cannot save the cluster state: " + oneLine(err.Error())
		}
	}
	var dropped int64
	for i := range reqs {
		reqs[i].CheckOnly = false
		sess.AddTo(i, &reqs[i])
		dropped += reqs[i].Dropped
	}
	s.nstate.Store(ns)
	if dropped > 0 {
		s.log.Info("cluster: dropped the expired keys of slots this node gave up", "keys", dropped)
	}
	return ""
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// storeStatusText words a store status that is not a redirect.
func (s *Server) storeStatusText(err error) string {
	if errors.Is(err, store.ErrClosed) {
		return ErrShuttingDown
	}
	return ErrInternal
}

// redirect words a shard's redirect as Redis does, counting it.
func (s *Server) redirect(r *store.Redirect) string {
	ns := s.nodeState()
	switch r.Kind {
	case store.Ask:
		if id := ns.Migrating[r.Slot]; id != "" && ns.Topology != nil {
			if n, _, _, ok := ns.Topology.Node(id); ok {
				s.mig.ask.Add(1)
				return "ASK " + strconv.Itoa(r.Slot) + " " + n.Addr()
			}
		}
	case store.TryAgain:
		s.mig.tryAgain.Add(1)
		return ErrTryAgain
	}
	// Moved, or an ASK whose move ended meanwhile: to the owner.
	owner, known := ns.Topology.PrimaryOf(r.Slot)
	switch {
	case !known:
		return ErrClusterDown
	case owner == s.myID:
		// The gate and the topology disagree for an instant (a change
		// is being applied): the client retries.
		s.mig.tryAgain.Add(1)
		return ErrTryAgain
	}
	n, _, _, _ := ns.Topology.Node(owner)
	s.stats.moved.Add(1)
	return "MOVED " + strconv.Itoa(r.Slot) + " " + n.Addr()
}

// consumeAsking gives the command its client's ASKING: the flag lasts for
// one command, or inside MULTI until EXEC (Redis's resetClient).
func (c *Client) consumeAsking(cmd *Command) {
	name := ""
	if cmd != nil {
		name = cmd.Name
	}
	if name == "asking" || c.sess.Holding() {
		return // EXEC's commands run with the ASKING EXEC had
	}
	asking := c.asking
	// Redis clears it after the command unless the client is then inside
	// MULTI: MULTI and the commands it queues keep it, EXEC ends it.
	if (!c.inMulti() && name != "multi") || name == "exec" || name == "discard" {
		c.asking = false
	}
	c.sess.SetAsking(asking)
}

// ASKING
func askingCmd(c *Client, w *Out, _ [][]byte) {
	if clusterGuard(c, w) {
		c.asking = true
		w.WriteOK()
	}
}

// clusterYes writes the refusal for the cluster commands that change slot
// ownership unless the node runs --cluster yes.
func clusterYes(c *Client, w *Out, name string) bool {
	if !clusterGuard(c, w) {
		return false
	}
	if c.srv.cfg.Cluster.Mode != ClusterYes {
		w.WriteError("ERR CLUSTER " + name + " needs --cluster yes (this node is emulating a one-node cluster)")
		return false
	}
	return true
}

// parseSlotArg reads a slot argument (Redis's getSlotOrReply).
func parseSlotArg(b []byte) (int, bool) {
	n, ok := limit.ParseRedisInt(b)
	if !ok || n < 0 || n >= cluster.SlotCount {
		return 0, false
	}
	return int(n), true
}

// openSlot applies one SETSLOT IMPORTING/MIGRATING/STABLE action to ns (a
// copy), or returns Redis's refusal.
func (s *Server) openSlot(ns *cluster.NodeState, slot int, action, id string) string {
	owner, _ := ns.Topology.PrimaryOf(slot)
	switch action {
	case "stable":
		delete(ns.Migrating, slot)
		delete(ns.Importing, slot)
		return ""
	case "migrating":
		if owner != s.myID {
			return fmt.Sprintf("ERR I'm not the owner of hash slot %d", slot)
		}
	case "importing":
		if owner == s.myID {
			return fmt.Sprintf("ERR I'm already the owner of hash slot %d", slot)
		}
	}
	n, _, primary, ok := ns.Topology.Node(id)
	switch {
	case !ok:
		return "ERR I don't know about node " + trunc(id, 64)
	case !primary:
		return ErrNotMaster
	case n.ID == s.myID:
		return "ERR Target node is this node"
	}
	// An open slot is not re-targeted: keys may already sit on the first
	// peer (close the move first, which checks that).
	if action == "migrating" {
		if p := ns.Migrating[slot]; p != "" && p != id {
			return fmt.Sprintf("ERR slot %d is already migrating to %s: close that move first (SETSLOT %d STABLE)", slot, p, slot)
		}
		ns.Migrating[slot] = id
	} else {
		if p := ns.Importing[slot]; p != "" && p != id {
			return fmt.Sprintf("ERR slot %d is already importing from %s: close that move first (SETSLOT %d STABLE)", slot, p, slot)
		}
		ns.Importing[slot] = id
	}
	return ""
}

// movedAway refuses to end the migration of slots this node migrates
// (STABLE, or NODE to itself) unless each target has closed its side (it
// no longer imports the slot from this node, so no ASKed request can make
// a key there any more) and holds no key of it (those keys moved there
// from here, or were made there after an ASK: ending the move here would
// serve them afresh). It asks each target (CLUSTER GETSTATE and
// COUNTKEYSINSLOT); a target it cannot ask, or does not know, refuses
// too. "" if the slots may close. Callers hold mig.mu, so no batch of
// this node's moves is in flight meanwhile.
func (s *Server) movedAway(ns *cluster.NodeState, slots []int) string {
	byPeer := map[string][]int{}
	for _, slot := range slots {
		if id := ns.Migrating[slot]; id != "" {
			byPeer[id] = append(byPeer[id], slot)
		}
	}
	for id, list := range byPeer {
		n, _, _, ok := ns.Topology.Node(id)
		if !ok {
			return fmt.Sprintf("ERR slot %d migrates to %s, which is not in the topology: its keys cannot be checked", list[0], trunc(id, 64))
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		pipe := s.peer(n.Addr(), s.defaultPeerAuth(), 5*time.Second).Pipeline()
		state := pipe.Do(ctx, "CLUSTER", "GETSTATE")
		cmds := make([]*redis.IntCmd, len(list))
		for i, slot := range list {
			cmds[i] = pipe.ClusterCountKeysInSlot(ctx, slot)
		}
		_, err := pipe.Exec(ctx)
		cancel()
		if err != nil {
			return "ERR cannot ask " + n.Addr() + " whether it holds keys of the slot: " + oneLine(err.Error()) + "; the slot stays open"
		}
		var st struct {
			Importing [][2]any `json:"importing"`
		}
		if js, _ := state.Text(); json.Unmarshal([]byte(js), &st) != nil {
			return "ERR cannot read the state of " + n.Addr() + "; the slot stays open"
		}
		importing := map[int]bool{}
		for _, e := range st.Importing {
			if f, ok := e[0].(float64); ok && e[1] == s.myID {
				importing[int(f)] = true
			}
		}
		for i, cmd := range cmds {
			switch {
			case cmd.Val() > 0:
				return fmt.Sprintf("ERR slot %d has %d keys on %s: finish the move (SETSLOT NODE, or cellserver cluster apply) or move them back first", list[i], cmd.Val(), n.Addr())
			case importing[list[i]]:
				return fmt.Sprintf("ERR slot %d is still importing on %s: close it there first (SETSLOT %d STABLE)", list[i], n.Addr(), list[i])
			}
		}
	}
	return ""
}

// leftOnSource is the refusal of SETSLOT <slot> NODE <myself> on the node
// importing slot from src while src still holds keys of it: from the flip
// on, this node would serve those keys afresh while src still serves them
// (Redis 7.0 accepts it, and a key is then charged on two nodes until the
// move ends). A source it cannot reach is not asked (it may be gone for
// good: the flip is how its slots are taken over); that is logged.
func (s *Server) leftOnSource(ns *cluster.NodeState, slot int, src string) string {
	n, _, _, ok := ns.Topology.Node(src)
	if !ok {
		return ""
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	left, err := s.peer(n.Addr(), s.defaultPeerAuth(), 5*time.Second).ClusterCountKeysInSlot(ctx, slot).Result()
	if err != nil {
		s.log.Warn("cluster: SETSLOT NODE took a slot whose source could not be asked for keys left", "slot", slot, "source", n.Addr(), "err", err)
		return ""
	}
	if left > 0 {
		return fmt.Sprintf("ERR slot %d has %d keys on %s: move them here first (MIGRATE, or CLUSTER MOVEKEYS there)", slot, left, n.Addr())
	}
	return ""
}

// CLUSTER SETSLOT <slot> IMPORTING <id> | MIGRATING <id> | STABLE | NODE <id>
func clusterSetSlot(c *Client, w *Out, args [][]byte) {
	if !clusterYes(c, w, "SETSLOT") {
		return
	}
	s := c.srv
	slot, ok := parseSlotArg(args[2])
	if !ok {
		w.WriteError(ErrBadSlot)
		return
	}
	action := strings.ToLower(string(args[3]))
	switch {
	case action == "stable" && len(args) == 4:
		s.setSlots(c, w, slot, slot, action, "")
	case action == "stable" && len(args) == 5 && strings.EqualFold(string(args[4]), "force"):
		s.setSlots(c, w, slot, slot, "force", "")
	case (action == "importing" || action == "migrating") && len(args) == 5:
		s.setSlots(c, w, slot, slot, action, string(args[4]))
	case action == "node" && len(args) == 5:
		s.setSlotNode(c, w, slot, string(args[4]))
	default:
		w.WriteError(ErrSetSlotSyntax)
	}
}

// CLUSTER SETSLOTRANGE <first> <last> IMPORTING <id> | MIGRATING <id> | STABLE:
// SETSLOT over a range, all or nothing, one saved change (cellserver).
func clusterSetSlotRange(c *Client, w *Out, args [][]byte) {
	if !clusterYes(c, w, "SETSLOTRANGE") {
		return
	}
	lo, ok1 := parseSlotArg(args[2])
	hi, ok2 := parseSlotArg(args[3])
	if !ok1 || !ok2 || lo > hi {
		w.WriteError(ErrBadSlot)
		return
	}
	switch action := strings.ToLower(string(args[4])); {
	case action == "stable" && len(args) == 5:
		c.srv.setSlots(c, w, lo, hi, action, "")
	case action == "stable" && len(args) == 6 && strings.EqualFold(string(args[5]), "force"):
		c.srv.setSlots(c, w, lo, hi, "force", "")
	case (action == "importing" || action == "migrating") && len(args) == 6:
		c.srv.setSlots(c, w, lo, hi, action, string(args[5]))
	default:
		w.WriteError(ErrSetSlotSyntax)
	}
}

// errNoTopology refuses a slot change on a node that has no topology yet.
const errNoTopology = "ERR this node has no topology yet: apply one first (cellserver cluster apply)"

// setSlots applies SETSLOT IMPORTING/MIGRATING/STABLE to slots lo..hi,
// all or nothing, as one saved change. "force" is STABLE without asking
// the targets (cellserver's STABLE FORCE): for a target lost for good, whose
// keys of the slots then start afresh here.
func (s *Server) setSlots(c *Client, w *Out, lo, hi int, action, id string) {
	force := action == "force"
	if force {
		action = "stable"
		s.log.Warn("cluster: SETSLOT STABLE FORCE: keys of these slots on their target are abandoned", "first", lo, "last", hi)
	}
	cur, unlock := s.lockSlotChange(w, action == "stable")
	if cur == nil {
		return
	}
	defer unlock()
	ns := cur.Clone()
	slots := make([]int, 0, hi-lo+1)
	for slot := lo; slot <= hi; slot++ {
		if e := s.openSlot(ns, slot, action, id); e != "" {
			w.WriteError(e)
			return
		}
		slots = append(slots, slot)
	}
	if action == "stable" && !force {
		if e := s.movedAway(cur, slots); e != "" {
			w.WriteError(e)
			return
		}
	}
	s.commitAndReply(c, w, ns)
}

// setSlotNode is SETSLOT NODE: the slot belongs to id from now on, in this
// node's topology (its epoch bumped: redis-cli tells every node, so all
// stay equal); this node's move of it, either way, ends. Giving the slot
// away is refused while a live key of it is here (commitState).
func (s *Server) setSlotNode(c *Client, w *Out, slot int, id string) {
	cur, unlock := s.lockSlotChange(w, true)
	if cur == nil {
		return
	}
	defer unlock()
	ns := cur.Clone()
	n, e := primaryNode(ns.Topology, id)
	if e != "" {
		w.WriteError(e)
		return
	}
	if owner, _ := ns.Topology.PrimaryOf(slot); owner != n.ID {
		t, err := ns.Topology.WithOwner(slot, n.ID)
		if err != nil {
			w.WriteError("ERR " + err.Error())
			return
		}
		ns.Topology = t
	}
	if p := cur.Migrating[slot]; p != "" && n.ID != p {
		// The move ends without the slot going to its target: as STABLE.
		if e := s.movedAway(cur, []int{slot}); e != "" {
			w.WriteError(e)
			return
		}
	}
	if src := cur.Importing[slot]; src != "" && n.ID == s.myID {
		if e := s.leftOnSource(cur, slot, src); e != "" {
			w.WriteError(e)
			return
		}
	}
	delete(ns.Importing, slot)
	delete(ns.Migrating, slot)
	s.commitAndReply(c, w, ns)
}

// lockSlotChange takes the locks of a change of slot state (first mig.mu
// when the change may end a move, so that no batch is in flight between
// movedAway's check and the change) and returns the current state and
// the unlock; with no topology yet it refuses, holding nothing (nil).
func (s *Server) lockSlotChange(w *Out, endsMove bool) (*cluster.NodeState, func()) {
	if endsMove {
		s.mig.mu.Lock()
	}
	s.topoMu.Lock()
	unlock := func() {
		s.topoMu.Unlock()
		if endsMove {
			s.mig.mu.Unlock()
		}
	}
	cur := s.nodeState()
	if cur.Topology == nil {
		unlock()
		w.WriteError(errNoTopology)
		return nil, nil
	}
	return cur, unlock
}

func (s *Server) commitAndReply(c *Client, w *Out, ns *cluster.NodeState) {
	if e := s.commitState(c, ns); e != "" {
		w.WriteError(e)
		return
	}
	w.WriteOK()
}

// CLUSTER GETSTATE: the node's view as JSON, for `cellserver cluster apply`.
func clusterGetState(c *Client, w *Out, _ [][]byte) {
	if !clusterGuard(c, w) {
		return
	}
	s := c.srv
	ns := s.nodeState()
	var orphans int64
	for _, r := range everyShard(c, &c.reqs.slotKeyCount, nil) {
		orphans += r.Orphans
	}
	pairs := func(m map[int]string) [][2]any {
		out := [][2]any{}
		for _, e := range cluster.Sorted(m) {
			out = append(out, [2]any{e.Slot, e.Peer})
		}
		return out
	}
	var topo json.RawMessage = []byte("null")
	if ns.Topology != nil {
		if d, err := ns.Topology.Marshal(); err == nil {
			topo = d
		}
	}
	data, err := json.Marshal(struct {
		ID        string          `json:"id"`
		Epoch     uint64          `json:"epoch"`
		Topology  json.RawMessage `json:"topology"`
		Migrating [][2]any        `json:"migrating"`
		Importing [][2]any        `json:"importing"`
		Orphans   int64           `json:"orphans"`
		Migrated  int64           `json:"migrated"`
		Imported  int64           `json:"imported"`
	}{s.myID, ns.Epoch(), topo, pairs(ns.Migrating), pairs(ns.Importing), orphans, s.mig.sent.Load(), s.mig.received.Load()})
	if err != nil {
		w.WriteError(ErrInternal)
		return
	}
	w.WriteBulk(data)
}

// peerAuth is how a node logs in to another: the user and password MIGRATE
// names, else admin with the admin password (every node of a cluster
// shares it), else the default user (with requirepass), which the peer
// accepts for admin commands only over loopback.
type peerAuth struct{ user, pass string }

func (s *Server) defaultPeerAuth() peerAuth {
	if s.cfg.AdminPassword != "" {
		return peerAuth{UserAdmin, s.cfg.AdminPassword}
	}
	return peerAuth{"", s.cfg.RequirePass}
}

// peer returns a client for the node at addr, cached per address and
// credentials as Redis caches its MIGRATE sockets.
func (s *Server) peer(addr string, a peerAuth, timeout time.Duration) *redis.Client {
	key := addr + "\x00" + a.user + "\x00" + a.pass + "\x00" + timeout.String()
	m := &s.mig
	m.peersMu.Lock()
	defer m.peersMu.Unlock()
	if cl := m.peers[key]; cl != nil {
		return cl
	}
	if m.peers == nil {
		m.peers = map[string]*redis.Client{}
	}
	cl := redis.NewClient(&redis.Options{Addr: addr, Username: a.user, Password: a.pass, Protocol: 2,
		DisableIdentity: true, MaxRetries: -1, DialerRetries: 1, PoolSize: 2, ConnMaxIdleTime: 10 * time.Second,
		DialTimeout: timeout, ReadTimeout: timeout, WriteTimeout: timeout})
	m.peers[key] = cl
	return cl
}

// closePeers closes the cached peer clients (Close).
func (s *Server) closePeers() {
	m := &s.mig
	m.peersMu.Lock()
	defer m.peersMu.Unlock()
	for k, cl := range m.peers {
		cl.Close()
		delete(m.peers, k)
	}
}

// errTarget is a refusal by the target, as opposed to a failure to reach it.
type errTarget struct{ msg string }

func (e errTarget) Error() string { return e.msg }

// moveBatch moves one batch of keys of shard to dst. With the shard held,
// it exports the keys (names, or up to migrateBatch keys in of a table
// scan from cursor) and marks them in flight: until they land, a request
// on one of them gets TRYAGAIN, and every other key of the shard is served
// as usual (the shard is let go while the copies travel). It sends them to
// dst, which replies once they are durable there; then, with the shard
// held again, drops them here and syncs that before the shard serves
// anything else (so no ASK for a dropped key can be answered before the
// drop is on disk). On any failure nothing is dropped and the keys are
// served here again as the batch left them (no command could change them
// in flight; a FLUSHALL or their expiry may have removed them, as it would
// have after the move). It returns the keys moved and the scan's next
// position (0: the end).
func (s *Server) moveBatch(c *Client, shard int, names [][]byte, in func(int) bool, gate uint8, cursor uint32,
	dst cluster.Node, a peerAuth, timeout time.Duration) (moved int, next uint32, err error) {
	timeout = min(timeout, maxMoveWait)
	sess := c.sess
	sess.Run()
	sess.Hold([]int{shard})
	ex := store.ExportReq{Keys: names, In: in, Max: migrateBatch, Cursor: cursor, Gated: names == nil, Gate: gate, Fly: true}
	sess.AddTo(shard, &ex)
	sess.Release()
	if err := ex.Status(); err != nil {
		return 0, 0, errTarget{s.storeStatusText(err)}
	}
	if len(ex.Entries) == 0 {
		return 0, ex.Next, nil
	}
	keys := make([][]byte, len(ex.Entries))
	for i, e := range ex.Entries {
		keys[i] = e.Key
	}
	landed := false
	defer func() {
		if !landed { // the batch failed: serve the keys here again
			sess.AddTo(shard, &store.LandReq{Keys: keys})
			sess.Run()
		}
	}()
	args := make([]any, 0, 4+3*len(ex.Entries))
	// The target refuses the batch after its deadline: once this side
	// stopped waiting (2×timeout) a late copy must not replace what the
	// target has served since a later batch moved the same keys.
	deadline := time.Now().Add(timeout).UnixMilli()
	args = append(args, "CLUSTER", "MIGRATESTATE", s.myID, importVersion, strconv.FormatInt(deadline, 10))
	for _, e := range ex.Entries {
		args = append(args, e.Key, e.State, strconv.FormatInt(e.Expires, 10))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*timeout)
	defer cancel()
	if err := s.peer(dst.Addr(), a, timeout).Do(ctx, args...).Err(); err != nil {
		var re redis.Error
		if errors.As(err, &re) {
			return 0, 0, errTarget{"ERR Target instance replied with error: " + oneLine(re.Error())}
		}
		return 0, 0, err
	}
	sess.Hold([]int{shard})
	defer sess.Release()
	land := store.LandReq{Keys: keys, Drop: true}
	sess.AddTo(shard, &land)
	landed = true
	if err := land.Status(); err != nil {
		// Neither dropped nor served again: both nodes would serve them.
		// They stay in flight (TRYAGAIN) until a restart; the move stops.
		s.log.Error("cluster: migrated keys not dropped here", "keys", len(keys), "err", err)
		return 0, 0, errTarget{"ERR keys copied to the target but not dropped here: " + s.storeStatusText(err)}
	}
	if err := sess.SyncHeld(); err != nil {
		// The target has the keys; here they are dropped from memory but
		// perhaps not on disk. Stop the move: the operator sees why.
		s.log.Error("cluster: migrated keys dropped, but the drop is not on disk", "keys", len(keys), "err", err)
		return len(keys), 0, errTarget{"ERR keys moved but their removal here is not on disk: " + oneLine(err.Error())}
	}
	s.mig.sent.Add(int64(len(keys)))
	return len(keys), ex.Next, nil
}

// migrateErr words a failure to reach the target as Redis's MIGRATE does.
func migrateErr(err error) string {
	var t errTarget
	if errors.As(err, &t) {
		return t.msg
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return "IOERR error or timeout reading to target instance"
	}
	return "IOERR error or timeout connecting to the client"
}

// MIGRATE host port key|"" destination-db timeout [COPY] [REPLACE]
// [AUTH password | AUTH2 username password] [KEYS key [key ...]]
//
// Moves the keys to the node at host:port through the slot-move protocol
// (CLUSTER MIGRATESTATE: the target acknowledges once they are durable,
// then they are dropped here). Redis's replies: +OK, +NOKEY when none of
// the keys is here, IOERR when the target cannot be reached. The target
// must be a node of this cluster (limiter state lives on one node: COPY is
// refused), and the keys must share a slot this node holds keys of.
func migrateCmd(c *Client, w *Out, args [][]byte) {
	if !clusterYes(c, w, "MIGRATE") {
		return
	}
	s := c.srv
	port, ok := limit.ParseRedisInt(args[2])
	db, ok2 := limit.ParseRedisInt(args[4])
	timeoutMs, ok3 := limit.ParseRedisInt(args[5])
	if !ok || !ok2 || !ok3 {
		w.WriteError(ErrNotInteger)
		return
	}
	keys := [][]byte{args[3]}
	a := s.defaultPeerAuth()
	for i := 6; i < len(args); i++ {
		switch strings.ToLower(string(args[i])) {
		case "copy":
			w.WriteError("ERR MIGRATE COPY is not supported: a limiter key lives on one node")
			return
		case "replace":
		case "auth":
			if i+1 >= len(args) {
				w.WriteError(ErrSyntax)
				return
			}
			a = peerAuth{"", string(args[i+1])}
			i++
		case "auth2":
			if i+2 >= len(args) {
				w.WriteError(ErrSyntax)
				return
			}
			a = peerAuth{string(args[i+1]), string(args[i+2])}
			i += 2
		case "keys":
			if len(args[3]) != 0 {
				w.WriteError(ErrMigrateKeysArg)
				return
			}
			keys = args[i+1:]
			i = len(args)
		default:
			w.WriteError(ErrSyntax)
			return
		}
	}
	if db != 0 {
		w.WriteError("ERR Target instance replied with error: ERR DB index is out of range")
		return
	}
	if len(keys) == 0 {
		w.WriteString("NOKEY")
		return
	}
	slot := cluster.KeySlot(keys[0])
	for _, k := range keys[1:] {
		if cluster.KeySlot(k) != slot {
			w.WriteError(ErrCrossSlot)
			return
		}
	}
	addr := net.JoinHostPort(string(args[1]), strconv.FormatInt(port, 10))
	ns := s.nodeState()
	var dst cluster.Node
	found := false
	if ns.Topology != nil {
		for _, sh := range ns.Topology.Shards {
			if sh.Primary.Addr() == addr || (sh.Primary.Port == int(port) && sameHost(sh.Primary.Host, string(args[1]))) {
				dst, found = sh.Primary, true
			}
		}
	}
	switch {
	case !found:
		w.WriteError("ERR MIGRATE target " + trunc(addr, 128) + " is not a primary of this cluster")
		return
	case dst.ID == s.myID:
		w.WriteError("ERR MIGRATE target is this node")
		return
	}
	// Keys go only where the slot's state sends them: to the node it
	// migrates to; or, from a node that does not serve the slot (it
	// imports it, or holds orphans: redis-cli --cluster fix), to its owner.
	owner, _ := ns.Topology.PrimaryOf(slot)
	switch {
	case ns.Migrating[slot] == dst.ID:
	case owner != s.myID && owner == dst.ID:
	case ns.Migrating[slot] != "":
		w.WriteError(fmt.Sprintf("ERR slot %d migrates to %s, not to %s", slot, ns.Migrating[slot], dst.ID))
		return
	default:
		w.WriteError(fmt.Sprintf("ERR slot %d is not migrating to %s (CLUSTER SETSLOT %d MIGRATING %s first)", slot, dst.ID, slot, dst.ID))
		return
	}
	timeout := time.Duration(timeoutMs) * time.Millisecond
	if timeoutMs <= 0 {
		timeout = time.Second
	}
	s.mig.mu.Lock()
	defer s.mig.mu.Unlock()
	n, _, err := s.moveBatch(c, s.st.ShardOfSlot(slot), keys, nil, 0, 0, dst, a, timeout)
	switch {
	case err != nil:
		w.WriteError(migrateErr(err))
	case n == 0:
		w.WriteString("NOKEY")
	default:
		w.WriteOK()
	}
}

// migrateKeys is MIGRATE's keys (Redis's migrateGetKeys): the key
// argument, or with it empty those after KEYS.
func migrateKeys(args [][]byte) [][]byte {
	if len(args) < 6 {
		return nil
	}
	if len(args[3]) == 0 {
		for i := 6; i < len(args); i++ {
			if strings.EqualFold(string(args[i]), "keys") {
				return args[i+1:]
			}
		}
	}
	return args[3:4]
}

// sameHost reports whether two host names denote the same loopback or
// literal address (redis-cli sends the address CLUSTER NODES showed).
func sameHost(a, b string) bool {
	if a == b {
		return true
	}
	ia, ib := net.ParseIP(a), net.ParseIP(b)
	return ia != nil && ib != nil && ia.Equal(ib)
}

// CLUSTER MOVEKEYS <dst-id> <timeout-ms> [ORPHANS] (cellserver): moves every
// key of the slots migrating to dst (ORPHANS: the keys held here of slots
// this node does not serve whose owner is dst, which dst merges into its
// own), a batch at a time, until none is left. Replies how many moved; on
// a failure, how many moved before it and why (the rest stay here).
func clusterMoveKeys(c *Client, w *Out, args [][]byte) {
	if !clusterYes(c, w, "MOVEKEYS") {
		return
	}
	s := c.srv
	timeoutMs, ok := limit.ParseRedisInt(args[3])
	if !ok || timeoutMs < 0 {
		w.WriteError(ErrNotInteger)
		return
	}
	orphans := false
	if len(args) == 5 {
		if !strings.EqualFold(string(args[4]), "orphans") {
			w.WriteError(ErrSyntax)
			return
		}
		orphans = true
	} else if len(args) > 5 {
		w.WriteError(ErrSyntax)
		return
	}
	id := string(args[2])
	ns := s.nodeState()
	if ns.Topology == nil {
		w.WriteError(errNoTopology)
		return
	}
	dst, e := primaryNode(ns.Topology, id)
	switch {
	case e != "":
		w.WriteError(e)
		return
	case dst.ID == s.myID:
		w.WriteError("ERR Target node is this node")
		return
	}
	in := func(slot int) bool { return ns.Migrating[slot] == id }
	gate := store.SlotMigrating
	if !orphans {
		any := false
		for _, p := range ns.Migrating {
			any = any || p == id
		}
		if !any {
			// Not "0 keys left": a caller would take the move as done.
			w.WriteError("ERR no slot is migrating to " + trunc(id, 64))
			return
		}
	}
	if orphans {
		gate = store.SlotNotOwned
		in = func(slot int) bool {
			owner, _ := ns.Topology.PrimaryOf(slot)
			return owner == id && ns.Importing[slot] == ""
		}
	}
	timeout := time.Duration(max(timeoutMs, 1)) * time.Millisecond
	s.mig.mu.Lock()
	defer s.mig.mu.Unlock()
	total := 0
	for shard := range s.st.NumShards() {
		// Passes over the table until one finds nothing: a scan position
		// can miss an entry the table moved while it was let go.
		for {
			passMoved := 0
			for cursor := uint32(0); ; {
				n, next, err := s.moveBatch(c, shard, nil, in, gate, cursor, dst, s.defaultPeerAuth(), timeout)
				total += n
				passMoved += n
				if err != nil {
					w.WriteError(fmt.Sprintf("ERR moved %d keys, then %s: %s", total, dst.Addr(), oneLine(migrateErr(err))))
					return
				}
				if n > 0 {
					if d := s.mig.delay.Load(); d > 0 {
						time.Sleep(time.Duration(d) * time.Millisecond)
					}
				}
				if next == 0 {
					break
				}
				cursor = next
			}
			if passMoved == 0 {
				break
			}
		}
	}
	w.WriteInt(int64(total))
}

// CLUSTER MIGRATESTATE <src-id> 1 key state expire-ms [key state expire-ms ...]
// (node to node): the target's side of a move. Each key's slot must be
// importing here from src (its state then replaces what is here: an
// earlier copy of the same move whose acknowledgement was lost, never
// served) or owned here (merged with limit.Merge: both sides' charges
// count); else MOVED. Every state is checked first, all or nothing. +OK
// once the keys are durable here.
func clusterMigrateState(c *Client, w *Out, args [][]byte) {
	if !clusterYes(c, w, "MIGRATESTATE") {
		return
	}
	s := c.srv
	src := string(args[2])
	if string(args[3]) != importVersion {
		w.WriteError("ERR unsupported MIGRATESTATE version '" + trunc(cstr(args[3]), 32) + "'")
		return
	}
	deadline, ok := limit.ParseRedisInt(args[4])
	if !ok {
		w.WriteError(ErrNotInteger)
		return
	}
	rest := args[5:]
	if len(rest)%3 != 0 {
		w.WriteError(wrongArity("cluster|migratestate"))
		return
	}
	ns := s.nodeState()
	if ns.Topology == nil {
		w.WriteError(errNoTopology)
		return
	}
	n := s.st.NumShards()
	replace := make([]store.RestoreReq, n)
	merge := make([]store.RestoreReq, n)
	var shards []int
	for i := 0; i < len(rest); i += 3 {
		key := rest[i]
		exp, err := strconv.ParseInt(string(rest[i+2]), 10, 64)
		if err != nil {
			w.WriteError(ErrNotInteger)
			return
		}
		// A node of the cluster sends what it holds, whatever it is (a
		// redis-cell "year-2343 lock" included: a move must not leave a key
		// behind); it must decode.
		if _, err := limit.Decode(rest[i+1]); err != nil || (exp < 0 && exp != store.NoExpiry) {
			w.WriteError(ErrImportPrefix + trunc(cstr(key), 128) + "': the state does not decode")
			return
		}
		slot := cluster.KeySlot(key)
		owner, _ := ns.Topology.PrimaryOf(slot)
		var r *store.RestoreReq
		sh := s.st.ShardOfSlot(slot)
		switch {
		case ns.Importing[slot] == src:
			r = &replace[sh]
			r.Replace = true
		case owner == s.myID && ns.Migrating[slot] == "":
			r = &merge[sh]
		default:
			w.WriteError(s.redirect(&store.Redirect{Kind: store.Moved, Slot: slot}))
			return
		}
		if len(replace[sh].Entries)+len(merge[sh].Entries) == 0 {
			shards = append(shards, sh)
		}
		r.Entries = append(r.Entries, store.Entry{Key: key, State: rest[i+1], Expires: exp})
	}
	sess := c.sess
	sess.Run()
	sess.Hold(shards)
	if time.Now().UnixMilli() > deadline {
		sess.Release()
		w.WriteError("ERR the batch arrived after its deadline (the source stopped waiting for it)")
		return
	}
	var applied int64
	for _, sh := range shards {
		for _, r := range []*store.RestoreReq{&replace[sh], &merge[sh]} {
			if len(r.Entries) > 0 {
				sess.AddTo(sh, r)
				if err := r.Status(); err != nil || r.Refused >= 0 {
					// A refused request changed nothing; those before it
					// in this batch did, and stay (the source keeps its
					// copies: a retry replaces or merges them again).
					err2 := sess.SyncHeld()
					sess.Release()
					switch {
					case err != nil:
						w.WriteError(s.storeStatusText(err))
					case err2 != nil:
						w.WriteError("ERR the moved keys are not on disk: " + oneLine(err2.Error()))
					default:
						w.WriteError(s.redirect(&store.Redirect{Kind: store.Moved, Slot: r.Refused}))
					}
					return
				}
				applied += int64(len(r.Entries))
			}
		}
	}
	err := sess.SyncHeld()
	sess.Release()
	if err != nil {
		w.WriteError("ERR the moved keys are not on disk: " + oneLine(err.Error()))
		return
	}
	s.mig.received.Add(applied)
	w.WriteOK()
}

// warnOrphans logs, once the node serves, the keys it reloaded of slots it
// neither owns nor imports (an interrupted move of an older cellserver, or
// a topology applied while it was down): they are never served, and
// `cellserver cluster apply` merges them into their owner.
func (s *Server) warnOrphans() {
	sess := s.st.NewSession()
	reqs := make([]store.SlotKeyCountReq, s.st.NumShards())
	for i := range reqs {
		sess.AddTo(i, &reqs[i])
	}
	sess.Run()
	var n int64
	for i := range reqs {
		n += reqs[i].Orphans
	}
	if n > 0 {
		s.log.Warn("cluster: this node holds keys of slots it does not serve; they answer MOVED until `cellserver cluster apply` merges them into their owner", "keys", n)
	}
}

// primaryNode returns the primary id of t, or Redis's error for an id
// that names no node or a replica.
func primaryNode(t *cluster.Topology, id string) (cluster.Node, string) {
	n, _, primary, ok := t.Node(id)
	switch {
	case !ok:
		return n, "ERR Unknown node " + trunc(id, 64)
	case !primary:
		return n, ErrNotMaster
	}
	return n, ""
}
