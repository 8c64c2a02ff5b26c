package commands

import (
	"fmt"
	"math"
	"math/bits"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/cellserver/cellserver/cluster"
	"github.com/cellserver/cellserver/gcra"
	"github.com/cellserver/cellserver/limit"
	"github.com/cellserver/cellserver/peer"
	"github.com/cellserver/cellserver/store"
)

// Cluster modes.
const (
	ClusterNo       = "no"       // a plain server: CLUSTER is refused
	ClusterEmulated = "emulated" // one node owning all slots, for cluster clients
	ClusterYes      = "yes"      // owns what the pushed topology gives it
)

// ClusterConfig configures cluster mode.
type ClusterConfig struct {
	// Mode is ClusterNo (default), ClusterEmulated or ClusterYes.
	Mode string
	// Host and Port are the address this node announces; its node id is
	// cluster.NodeID(Host, Port), the id `cellserver cluster init` assigns.
	Host string
	Port int
	// TopologyPath is where an applied topology is saved (and loaded from at
	// start); empty keeps it in memory only.
	TopologyPath string
}

// Client-facing cluster error texts, as Redis.
const (
	ErrClusterDisabled = "ERR This instance has cluster support disabled"
	ErrCrossSlot       = "CROSSSLOT Keys in request don't hash to the same slot"
	ErrClusterDown     = "CLUSTERDOWN Hash slot not served"
	ErrInvalidSlot     = "ERR Invalid slot"
)

// initCluster sets the node's identity and initial topology.
func (s *Server) initCluster() error {
	cc := &s.cfg.Cluster
	if cc.Mode == "" {
		cc.Mode = ClusterNo
	}
	if cc.Mode != ClusterNo {
		s.myID = cluster.NodeID(cc.Host, cc.Port)
	}
	s.node = peer.New(peer.Config{ID: s.myID, Store: s.st, Log: s.log, StatePath: cc.TopologyPath, Auth: s.peerAuth()})
	switch cc.Mode {
	case ClusterNo:
	case ClusterEmulated:
		t, err := cluster.Init([]string{(cluster.Node{Host: cc.Host, Port: cc.Port}).Addr()}, 1)
		if err != nil {
			return err
		}
		s.node.Emulate(t)
	case ClusterYes:
		// Before the wire layer serves: no request runs yet.
		if err := s.node.Start(); err != nil {
			return err
		}
		s.orphanCheck = true // at the first connection: see NewClient
	default:
		return fmt.Errorf("cluster mode must be no, emulated or yes, got %q", cc.Mode)
	}
	return nil
}

func (s *Server) clusterOn() bool { return s.cfg.Cluster.Mode != ClusterNo }

// route checks that a keyed command's keys share one slot that this node
// serves, returning the error reply otherwise (CROSSSLOT, MOVED, CLUSTERDOWN).
// The rule is the service's (service.Service.Route), the one every front
// end uses; this gathers the command's keys and words the refusal.
func (s *Server) route(c *Client, cmd *Command, args [][]byte) string {
	var buf [16][]byte
	keys := buf[:0]
	if cmd.Keys != nil {
		keys = cmd.Keys(args)
	} else {
		last := cmd.LastKey
		if last < 0 {
			last += len(args)
		}
		for i := cmd.FirstKey; i <= last && i < len(args); i += cmd.Step {
			keys = append(keys, args[i])
		}
	}
	if e := s.refusal(s.svc.Route(keys)); e != "" {
		return e
	}
	// Several keys in a slot being moved: some may have moved already, and
	// the requests of most such commands run key by key (Redis's TRYAGAIN,
	// which cluster clients retry). CL.LIMIT's keys are one request: the
	// shard checks them together (store's gate).
	if len(keys) > 1 && cmd.Flags&KeysTogether == 0 && !c.sess.Holding() {
		if ns := s.nodeState(); ns.Open() {
			slot := cluster.KeySlot(keys[0])
			if ns.Migrating[slot] != "" || ns.Importing[slot] != "" {
				s.node.CountTryAgain()
				return ErrTryAgain
			}
		}
	}
	return ""
}

// Locate is service.Slots: where the topology says slot is served. In the
// emulated mode this node serves every slot.
func (s *Server) Locate(slot int) (addr string, local, known bool) {
	if s.cfg.Cluster.Mode == ClusterEmulated {
		return "", true, true
	}
	ns := s.nodeState()
	if ns.Topology == nil {
		return "", false, false
	}
	if len(ns.Importing) > 0 && ns.Importing[slot] != "" {
		// Served here after ASKING: the shard decides (store's gate).
		return "", true, true
	}
	t := ns.Topology
	sh, ok := t.Owner(slot)
	if !ok {
		return "", false, false
	}
	p := t.Shards[sh].Primary
	if p.ID == s.myID {
		return "", true, true
	}
	return p.Addr(), false, true
}

func registerCluster(t Table) {
	sub := func(name string, arity int, run func(*Client, *Out, [][]byte), summary string, flags Flags, cats Cats) *Command {
		return &Command{Name: "cluster|" + name, Arity: arity, Flags: flags, Cats: cats, Run: run, Summary: summary, Since: "3.0.0"}
	}
	t.add(
		&Command{Name: "cluster", Arity: -2, Cats: CatSlow, Group: "cluster", Summary: "A container for Redis Cluster commands.", Since: "3.0.0",
			Subcommands: []*Command{
				sub("slots", 2, clusterSlots, "Returns the mapping of cluster slots to nodes.", FlagStale, CatSlow),
				sub("shards", 2, clusterShards, "Returns the mapping of cluster slots to shards.", FlagStale, CatSlow),
				sub("nodes", 2, clusterNodes, "Returns the cluster configuration for a node.", FlagStale, CatSlow),
				sub("info", 2, clusterInfo, "Returns information about the state of a node.", FlagStale, CatSlow),
				sub("myid", 2, clusterMyID, "Returns the ID of a node.", FlagStale, CatSlow),
				sub("keyslot", 3, clusterKeySlot, "Returns the hash slot for a key.", FlagStale, CatSlow),
				sub("countkeysinslot", 3, clusterCountKeys, "Returns the number of keys in a hash slot.", FlagStale, CatSlow),
				sub("getkeysinslot", 4, clusterGetKeys, "Returns the key names in a hash slot.", FlagStale, CatSlow),
				sub("settopology", 3, clusterSetTopology, "cellserver: applies a versioned topology document (JSON).", FlagAdmin|AdminOnly|OffLoop|TxForbidden, CatAdmin|CatSlow|CatDangerous),
				sub("setslot", -4, clusterSetSlot, "Binds a hash slot to a node.", FlagAdmin|FlagStale|FlagNoAsyncLoading|AdminOnly|OffLoop|TxForbidden, CatAdmin|CatSlow|CatDangerous),
				sub("setslotrange", -5, clusterSetSlotRange, "cellserver: CLUSTER SETSLOT IMPORTING|MIGRATING|STABLE over a range of slots.", FlagAdmin|AdminOnly|OffLoop|TxForbidden, CatAdmin|CatSlow|CatDangerous),
				sub("getstate", 2, clusterGetState, "cellserver: the node's topology and slot moves, as JSON.", FlagAdmin|AdminOnly|OffLoop|TxForbidden, CatAdmin|CatSlow|CatDangerous),
				sub("movekeys", -4, clusterMoveKeys, "cellserver: moves the keys of the slots migrating to a node.", FlagAdmin|AdminOnly|OffLoop|TxForbidden, CatAdmin|CatSlow|CatDangerous),
				sub("migratestate", -5, clusterMigrateState, "cellserver: stores keys a slot move brings (node to node).", FlagWrite|FlagAdmin|AdminOnly|OffLoop|TxForbidden, CatWrite|CatAdmin|CatSlow|CatDangerous),
				sub("importstate", -5, clusterImportState, "cellserver: merges limiter state of keys moved from another node.", FlagWrite|FlagAdmin|AdminOnly|TxForbidden, CatWrite|CatAdmin|CatSlow|CatDangerous),
				sub("help", 2, clusterHelp, "Returns helpful text about the different subcommands.", FlagLoading|FlagStale, CatSlow),
			}},
		&Command{Name: "readonly", Arity: 1, Flags: FlagLoading | FlagStale | FlagFast, Cats: CatFast | CatConnection, Group: "cluster",
			Summary: "Enables read-only queries for a connection to a Redis Cluster replica node.", Since: "3.0.0", Run: clusterOK},
		&Command{Name: "readwrite", Arity: 1, Flags: FlagLoading | FlagStale | FlagFast, Cats: CatFast | CatConnection, Group: "cluster",
			Summary: "Enables read-write queries for a connection to a Redis Cluster replica node.", Since: "3.0.0", Run: clusterOK},
		&Command{Name: "asking", Arity: 1, Flags: FlagFast, Cats: CatFast | CatConnection, Group: "cluster",
			Summary: "Signals that a cluster client is following an -ASK redirect.", Since: "3.0.0", Run: askingCmd},
		&Command{Name: "migrate", Arity: -6, Flags: FlagWrite | FlagMovableKeys | AdminOnly | OffLoop | SelfRouted | TxForbidden, Cats: CatKeyspace | CatWrite | CatSlow | CatDangerous, Group: "generic",
			FirstKey: 3, LastKey: 3, Step: 1, Keys: migrateKeys, Summary: "Atomically transfers a key from one Redis instance to another.", Since: "2.6.0", Run: migrateCmd},
	)
}

// clusterGuard writes the disabled error when cluster mode is off.
func clusterGuard(c *Client, w *Out) bool {
	if !c.srv.clusterOn() {
		w.WriteError(ErrClusterDisabled)
		return false
	}
	return true
}

// READONLY | READWRITE: accepted; there are no replicas to read from.
func clusterOK(c *Client, w *Out, _ [][]byte) {
	if clusterGuard(c, w) {
		w.WriteOK()
	}
}

type slotRange struct {
	lo, hi, shard int
}

// slotRanges lists the topology's ranges sorted by first slot.
func slotRanges(t *cluster.Topology) []slotRange {
	var out []slotRange
	if t == nil {
		return nil
	}
	start := -1
	cur := -1
	for slot := 0; slot <= cluster.SlotCount; slot++ {
		sh, ok := -1, false
		if slot < cluster.SlotCount {
			sh, ok = t.Owner(slot)
			if !ok {
				sh = -1
			}
		}
		if sh != cur {
			if cur >= 0 {
				out = append(out, slotRange{start, slot - 1, cur})
			}
			start, cur = slot, sh
		}
	}
	return out
}

// host is the host c is told to reach node n at: the topology's, except
// for this node announcing an unspecified address (--addr 0.0.0.0:P, no
// --cluster-announce), which no client can reach from elsewhere: then the
// address c reached it at (its connection's local address), as a client
// of one address expects.
func (c *Client) host(n cluster.Node) string {
	if n.ID != c.srv.myID {
		return n.Host
	}
	if ip := net.ParseIP(n.Host); ip == nil || !ip.IsUnspecified() {
		return n.Host
	}
	if h, _, err := net.SplitHostPort(c.LAddr); err == nil && h != "" {
		return h
	}
	return n.Host
}

// CLUSTER SLOTS
func clusterSlots(c *Client, w *Out, _ [][]byte) {
	if !clusterGuard(c, w) {
		return
	}
	t := c.srv.topology()
	rs := slotRanges(t)
	w.WriteArray(len(rs))
	for _, r := range rs {
		sh := t.Shards[r.shard]
		nodes := append([]cluster.Node{sh.Primary}, sh.Replicas...)
		w.WriteArray(2 + len(nodes))
		w.WriteInt(int64(r.lo))
		w.WriteInt(int64(r.hi))
		for _, n := range nodes {
			w.WriteArray(4)
			w.WriteBulkString(c.host(n))
			w.WriteInt(int64(n.Port))
			w.WriteBulkString(n.ID)
			w.WriteMap(0) // networking metadata (Redis 7): none
		}
	}
}

// CLUSTER SHARDS
func clusterShards(c *Client, w *Out, _ [][]byte) {
	if !clusterGuard(c, w) {
		return
	}
	t := c.srv.topology()
	if t == nil {
		w.WriteArray(0)
		return
	}
	rs := slotRanges(t)
	w.WriteArray(len(t.Shards))
	for i, sh := range t.Shards {
		var own []slotRange
		for _, r := range rs {
			if r.shard == i {
				own = append(own, r)
			}
		}
		w.WriteMap(2)
		w.WriteBulkString("slots")
		w.WriteArray(2 * len(own))
		for _, r := range own {
			w.WriteInt(int64(r.lo))
			w.WriteInt(int64(r.hi))
		}
		w.WriteBulkString("nodes")
		nodes := append([]cluster.Node{sh.Primary}, sh.Replicas...)
		w.WriteArray(len(nodes))
		for j, n := range nodes {
			role := "master"
			if j > 0 {
				role = "replica"
			}
			w.WriteMap(7)
			w.WriteBulkString("id")
			w.WriteBulkString(n.ID)
			w.WriteBulkString("port")
			w.WriteInt(int64(n.Port))
			w.WriteBulkString("ip")
			w.WriteBulkString(c.host(n))
			w.WriteBulkString("endpoint")
			w.WriteBulkString(c.host(n))
			w.WriteBulkString("role")
			w.WriteBulkString(role)
			w.WriteBulkString("replication-offset")
			w.WriteInt(0)
			w.WriteBulkString("health")
			w.WriteBulkString("online")
		}
	}
}

// CLUSTER NODES: Redis's text format, one line per node.
func clusterNodes(c *Client, w *Out, _ [][]byte) {
	if !clusterGuard(c, w) {
		return
	}
	s := c.srv
	t := s.topology()
	var b strings.Builder
	if t == nil {
		// Not configured yet: only this node, owning nothing.
		fmt.Fprintf(&b, "%s %s:%d@%d myself,master - 0 0 0 connected\n", s.myID, s.cfg.Cluster.Host, s.cfg.Cluster.Port, s.cfg.Cluster.Port+10000)
		w.WriteVerbatim(b.String())
		return
	}
	rs := slotRanges(t)
	for i, sh := range t.Shards {
		nodes := append([]cluster.Node{sh.Primary}, sh.Replicas...)
		for j, n := range nodes {
			flags := "master"
			master := "-"
			if j > 0 {
				flags, master = "slave", sh.Primary.ID
			}
			if n.ID == s.myID {
				flags = "myself," + flags
			}
			fmt.Fprintf(&b, "%s %s:%d@%d %s %s 0 0 %d connected", n.ID, c.host(n), n.Port, n.Port+10000, flags, master, t.Epoch)
			if j == 0 {
				for _, r := range rs {
					if r.shard != i {
						continue
					}
					if r.lo == r.hi {
						fmt.Fprintf(&b, " %d", r.lo)
					} else {
						fmt.Fprintf(&b, " %d-%d", r.lo, r.hi)
					}
				}
			}
			if n.ID == s.myID {
				// Open slots, on the myself line only, as Redis and
				// redis-cli --cluster write and read them.
				ns := s.nodeState()
				for _, e := range cluster.Sorted(ns.Migrating) {
					fmt.Fprintf(&b, " [%d->-%s]", e.Slot, e.Peer)
				}
				for _, e := range cluster.Sorted(ns.Importing) {
					fmt.Fprintf(&b, " [%d-<-%s]", e.Slot, e.Peer)
				}
			}
			b.WriteByte('\n')
		}
	}
	w.WriteVerbatim(b.String())
}

// CLUSTER INFO
func clusterInfo(c *Client, w *Out, _ [][]byte) {
	if !clusterGuard(c, w) {
		return
	}
	t := c.srv.topology()
	assigned, nodes, size := 0, 0, 0
	var epoch uint64
	if t != nil {
		assigned = t.Covered()
		epoch = t.Epoch
		rs := slotRanges(t)
		withSlots := map[int]bool{}
		for _, r := range rs {
			withSlots[r.shard] = true
		}
		size = len(withSlots)
		for _, sh := range t.Shards {
			nodes += 1 + len(sh.Replicas)
		}
	}
	state := "fail"
	if assigned == cluster.SlotCount {
		state = "ok"
	}
	var b strings.Builder
	line := func(k string, v any) { fmt.Fprintf(&b, "%s:%v\r\n", k, v) }
	line("cluster_state", state)
	line("cluster_slots_assigned", assigned)
	line("cluster_slots_ok", assigned)
	line("cluster_slots_pfail", 0)
	line("cluster_slots_fail", 0)
	line("cluster_known_nodes", max(nodes, 1))
	line("cluster_size", size)
	line("cluster_current_epoch", epoch)
	line("cluster_my_epoch", epoch)
	line("cluster_stats_messages_sent", 0)
	line("cluster_stats_messages_received", 0)
	line("total_cluster_links_buffer_limit_exceeded", 0)
	w.WriteVerbatim(b.String())
}

// CLUSTER MYID
func clusterMyID(c *Client, w *Out, _ [][]byte) {
	if clusterGuard(c, w) {
		w.WriteBulkString(c.srv.myID)
	}
}

// CLUSTER KEYSLOT key
func clusterKeySlot(c *Client, w *Out, args [][]byte) {
	if clusterGuard(c, w) {
		w.WriteInt(int64(cluster.KeySlot(args[2])))
	}
}

// ErrInvalidSlotOrCount is GETKEYSINSLOT's error for a slot out of range
// or a negative count.
const ErrInvalidSlotOrCount = "ERR Invalid slot or number of keys"

// runOnSlot runs r on the shard that owns slot.
func runOnSlot(c *Client, slot int, r store.Request) {
	c.QueueTo(c.srv.st.ShardOfSlot(slot), r)
	c.runNow()
}

// CLUSTER COUNTKEYSINSLOT slot
func clusterCountKeys(c *Client, w *Out, args [][]byte) {
	if !clusterGuard(c, w) {
		return
	}
	// As Redis 7.2's clusterCommand: an integer first, then a slot.
	slot, ok := limit.ParseRedisInt(args[2])
	if !ok {
		w.WriteError(ErrNotInteger)
		return
	}
	if slot < 0 || slot >= cluster.SlotCount {
		w.WriteError(ErrInvalidSlot)
		return
	}
	r := c.reqs.slotCount.get()
	r.Slot = int(slot)
	runOnSlot(c, r.Slot, r)
	w.WriteInt(r.Count)
}

// CLUSTER GETKEYSINSLOT slot count
func clusterGetKeys(c *Client, w *Out, args [][]byte) {
	if !clusterGuard(c, w) {
		return
	}
	// As Redis 7.2's clusterCommand: two integers, then one check of both.
	slot, ok1 := limit.ParseRedisInt(args[2])
	n, ok2 := limit.ParseRedisInt(args[3])
	if !ok1 || !ok2 {
		w.WriteError(ErrNotInteger)
		return
	}
	if slot < 0 || slot >= cluster.SlotCount || n < 0 {
		w.WriteError(ErrInvalidSlotOrCount)
		return
	}
	r := c.reqs.slotKeys.get()
	r.Slot, r.Max = int(slot), int(min(n, 1<<30))
	runOnSlot(c, r.Slot, r)
	w.WriteArray(len(r.Keys))
	for _, k := range r.Keys {
		w.WriteBulk(k)
	}
	r.Keys = nil
}

// CLUSTER SETTOPOLOGY <json>: validates the document and makes it the
// node's topology if its epoch is newer (or equal, with the same layout: a
// re-run of `cellserver cluster apply` succeeds). It moves no keys: a slot
// this node loses must hold none (their move, CLUSTER MOVEKEYS, comes
// first), else it refuses with Redis's SETSLOT NODE text and changes
// nothing. Slot moves the document settles end (the importer now owns the
// slot); the others stay open while they still make sense. The new state is
// saved before anything serves by it.
func clusterSetTopology(c *Client, w *Out, args [][]byte) {
	if !clusterYes(c, w, "SETTOPOLOGY") {
		return
	}
	s := c.srv
	t, err := cluster.Parse(args[2])
	if err != nil {
		w.WriteError("ERR invalid topology: " + err.Error())
		return
	}
	s.replyPeer(w, s.node.SetTopology(c.sess, t))
}

// redirect words a shard's redirect as Redis does, counting it.
func (s *Server) redirect(r *store.Redirect) string { return s.redirection(s.node.Redirect(r)) }

// CLUSTER IMPORTSTATE key tat expire_ms [key tat expire_ms ...]
// CLUSTER IMPORTSTATE STATES 1 key state expire_ms [key state expire_ms ...]
//
// Merges limiter state moved from another node. The first form is the
// original one, GCRA TATs only (still accepted from older nodes); the
// second carries every kind: state is limit.Encode's bytes (kind, format
// version, fields), and 1 is the version of this argument layout. The two
// cannot be confused: the first has 3n arguments, the second 3n+2.
// Every state is checked first (checkImport for a TAT, a decodable state
// with a plausible expiry for the others): one that this server could not
// have written refuses the whole command with an ERR and nothing is merged.
// Each key is merged with limit.Merge (the result charges what both
// allowed: GCRA debts add up, counts add up, logs unite); a state of
// another kind than the local key's, or one already expired, merges
// nothing. Replies the number of keys changed.
func clusterImportState(c *Client, w *Out, args [][]byte) {
	if !clusterGuard(c, w) {
		return
	}
	rest := args[2:]
	encoded := len(rest)%3 == 2 && strings.EqualFold(string(rest[0]), importStates)
	if encoded {
		if string(rest[1]) != peer.StateVersion {
			w.WriteError("ERR unsupported IMPORTSTATE version '" + trunc(cstr(rest[1]), 32) + "'")
			return
		}
		rest = rest[2:]
	} else if len(rest)%3 != 0 {
		w.WriteError(wrongArity("cluster|importstate"))
		return
	}
	states := make([][]byte, 0, len(rest)/3)
	exps := make([]int64, 0, len(rest)/3)
	now := c.srv.clock.Now()
	for i := 0; i < len(rest); i += 3 {
		exp, err2 := strconv.ParseInt(string(rest[i+2]), 10, 64)
		var state []byte
		if encoded {
			state = rest[i+1]
		} else {
			tat, err1 := strconv.ParseUint(string(rest[i+1]), 10, 64)
			if err1 != nil {
				err2 = err1
			}
			state, _ = limit.GCRAState{TAT: tat}.AppendBinary(nil)
		}
		if err2 != nil {
			w.WriteError(ErrNotInteger)
			return
		}
		if e := checkImportState(state, exp, now); e != "" {
			w.WriteError(ErrImportPrefix + trunc(cstr(rest[i]), 128) + "': " + e)
			return
		}
		states, exps = append(states, state), append(exps, exp)
	}
	reqs := make([]store.ImportReq, len(states))
	for i := range states {
		r := &reqs[i]
		r.Key, r.State, r.Expires = rest[3*i], states[i], exps[i]
		queue(c, r)
	}
	reqs0 := c.queued
	c.runNow()
	if e := c.srv.statusError(reqs0); e != "" {
		w.WriteError(e) // a slot this node does not serve (MOVED, ASK)
		return
	}
	var n int64
	for i := range reqs {
		if reqs[i].Applied {
			n++
		}
	}
	w.WriteInt(n)
}

// importStates is the keyword of CLUSTER IMPORTSTATE's second form; its
// layout version is peer.StateVersion, MIGRATESTATE's.
const importStates = "STATES"

// checkImportState is checkImport for a state of any kind: a GCRA state's
// TAT goes through checkImport; any other must decode, and expire, no later
// than two of the longest windows from now (SWC's reach) plus the skew.
func checkImportState(state []byte, exp, now int64) string {
	s, err := limit.Decode(state)
	if err != nil {
		return "the state does not decode"
	}
	if g, ok := s.(limit.GCRAState); ok {
		return checkImport(g.TAT, exp, now)
	}
	if exp < 0 || exp == store.NoExpiry {
		return fmt.Sprintf("expiry %d ms is not a window's", exp)
	}
	if lim := now/int64(time.Millisecond) + 2*int64(limit.MaxWindow/time.Millisecond) + importClockSkew/int64(time.Millisecond); exp > lim {
		return fmt.Sprintf("expiry %d ms is later than %d, now plus two of the longest windows and a minute of clock skew", exp, lim)
	}
	return ""
}

// ErrImportPrefix starts IMPORTSTATE's refusal of a state: the key, "': "
// and the rule it breaks follow.
const ErrImportPrefix = "ERR invalid limiter state for key '"

// importClockSkew (ns) is how far the sending node's clock may run ahead of
// this one's without its states looking as if they came from the future.
const importClockSkew = int64(time.Minute)

// checkImport returns why (tat ns, exp ms) is not a state CL.THROTTLE could
// have written on a node whose clock reads about now (ns), or "" if it could.
//
// IMPORTSTATE carries no limit parameters, so the bound is what any
// parameters can produce (package gcra). An allowed CL.THROTTLE call writes
// either
//   - an expiry exp = floor(now/1ms) + TTLMillis with TAT = now + ttl and
//     0 <= ttl <= τ <= MaxInt64 ns: so exp <= now + gcra.MaxTTLMillis (about
//     292 years), and TAT < (exp+2)·1ms, since each of the two truncations
//     to whole ms drops less than 1 ms; or
//   - no expiry (its TTL in ms worked out negative): then TAT < now, unless
//     the 128-bit TAT was negative and wrapped to 2^63 or more, which locks
//     the key for centuries (redis-cell's "year-2343 lock"). Such wrapped
//     states are refused: they would let IMPORTSTATE plant a lock of any
//     length, and the sender leaves them behind (the key starts fresh).
//
// So no import can block a key for longer than a CL.THROTTLE call with an
// expiry could. The sender's clock may run ahead by importClockSkew. An
// expiry before 1970 is refused; a state that has already expired is
// accepted and merges nothing.
func checkImport(tat uint64, exp, now int64) string {
	const msNs = int64(time.Millisecond)
	if exp == store.NoExpiry {
		lim := now + importClockSkew
		if lim < now { // a clock set within a minute of 2262 (DEBUG CLOCK)
			lim = math.MaxInt64
		}
		if int64(tat) < 0 || int64(tat) > lim { // tat >= 2^63 is a wrapped lock
			return fmt.Sprintf("TAT %d of a key without expiry is in the future (now %d)", tat, now)
		}
		return ""
	}
	if exp < 0 {
		return fmt.Sprintf("expiry %d ms is before 1970", exp)
	}
	nowMs := now / msNs
	if limit := nowMs + gcra.MaxTTLMillis + importClockSkew/msNs; exp > limit {
		return fmt.Sprintf("expiry %d ms is later than %d, now plus the longest TTL CL.THROTTLE sets (%d ms) and a minute of clock skew",
			exp, limit, int64(gcra.MaxTTLMillis))
	}
	// TAT < (exp+2)·1ms, in 128 bits: exp·1ms may pass 2^64 for an exp
	// near the limit under a clock set far ahead (DEBUG CLOCK).
	hi, lo := bits.Mul64(uint64(exp+2), uint64(msNs))
	if hi == 0 && tat >= lo {
		return fmt.Sprintf("TAT %d is not below its expiry %d ms plus 2 ms", tat, exp)
	}
	return ""
}

// CLUSTER HELP: like every CLUSTER subcommand, refused when cluster mode
// is off (Redis's clusterCommand checks before HELP).
func clusterHelp(c *Client, w *Out, _ [][]byte) {
	if !clusterGuard(c, w) {
		return
	}
	lines := []string{
		"CLUSTER <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
		"COUNTKEYSINSLOT <slot>", "    Return the number of keys in <slot>.",
		"GETKEYSINSLOT <slot> <count>", "    Return key names stored by current node in a slot.",
		"INFO", "    Return information about the cluster.",
		"KEYSLOT <key>", "    Return the hash slot for <key>.",
		"MYID", "    Return the node id.",
		"NODES", "    Return cluster configuration seen by node.",
		"SETTOPOLOGY <json>", "    Apply a topology document whose epoch is newer than the current one (it moves no keys).",
		"SETSLOT <slot> (IMPORTING <node-id>|MIGRATING <node-id>|STABLE [FORCE]|NODE <node-id>)", "    Set slot state (STABLE FORCE: close a move whose target is lost).",
		"SETSLOTRANGE <first> <last> (IMPORTING <node-id>|MIGRATING <node-id>|STABLE [FORCE])", "    SETSLOT over a range of slots, all or nothing.",
		"MOVEKEYS <node-id> <timeout-ms> [ORPHANS]", "    Move the keys of the slots migrating to <node-id> (ORPHANS: the keys of slots it owns).",
		"GETSTATE", "    Return the node's topology and open slots as JSON.",
		"IMPORTSTATE [STATES 1] <key> <tat|state> <expire-ms> [...]", "    Merge limiter state moved from another node (limit.Merge: both sides' charges count).",
		"SHARDS", "    Return information about slot range mappings and the nodes associated with them.",
		"SLOTS", "    Return information about slots range mappings.",
		"HELP", "    Print this help.",
	}
	writeHelp(w, lines)
}
