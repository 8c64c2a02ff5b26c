package peer

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
	"errors"
	"net"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cellserver/cellserver/cluster"
	"github.com/cellserver/cellserver/limit"
	"github.com/cellserver/cellserver/store"
)

// StateVersion is the version of CLUSTER MIGRATESTATE's argument layout
// (and of IMPORTSTATE's STATES form, which carries the same states).
const StateVersion = "1"

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
// in milliseconds.
const maxMoveWait = 5 * time.Second

// peer returns a client for the node at addr, cached per address and
// credentials as Redis caches its MIGRATE sockets.
func (n *Node) peer(addr string, a Auth, timeout time.Duration) *redis.Client {
	key := addr + "\x00" + a.User + "\x00" + a.Password + "\x00" + timeout.String()
	n.peersMu.Lock()
	defer n.peersMu.Unlock()
	if cl := n.peers[key]; cl != nil {
		return cl
	}
	if n.peers == nil {
		n.peers = map[string]*redis.Client{}
	}
	cl := redis.NewClient(&redis.Options{Addr: addr, Username: a.User, Password: a.Password, Protocol: 2,
		DisableIdentity: true, MaxRetries: -1, DialerRetries: 1, PoolSize: 2, ConnMaxIdleTime: 10 * time.Second,
		DialTimeout: timeout, ReadTimeout: timeout, WriteTimeout: timeout})
	n.peers[key] = cl
	return cl
}

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
// position (0: the end). An error is a Refusal (the target's, or this
// node's), a *StoreError, or the failure to reach the target.
func (n *Node) moveBatch(sess *store.Session, shard int, names [][]byte, in func(int) bool, gate uint8, cursor uint32,
	dst cluster.Node, a Auth, timeout time.Duration) (moved int, next uint32, err error) {
	timeout = min(timeout, time.Duration(n.maxWait.Load()))
	sess.Run()
	sess.Hold([]int{shard})
	ex := store.ExportReq{Keys: names, In: in, Max: migrateBatch, Cursor: cursor, Gated: names == nil, Gate: gate, Fly: true}
	sess.AddTo(shard, &ex)
	sess.Release()
	if err := ex.Status(); err != nil {
		return 0, 0, storeErr(err)
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
	args = append(args, "CLUSTER", "MIGRATESTATE", n.cfg.ID, StateVersion, strconv.FormatInt(deadline, 10))
	for _, e := range ex.Entries {
		args = append(args, e.Key, e.State, strconv.FormatInt(e.Expires, 10))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*timeout)
	defer cancel()
	if err := n.peer(dst.Addr(), a, timeout).Do(ctx, args...).Err(); err != nil {
		var re redis.Error
		if errors.As(err, &re) {
			return 0, 0, Refusal("ERR Target instance replied with error: " + oneLine(re.Error()))
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
		n.cfg.Log.Error("cluster: migrated keys not dropped here", "keys", len(keys), "err", err)
		return 0, 0, &StoreError{Prefix: "ERR keys copied to the target but not dropped here: ", Err: err}
	}
	if err := sess.SyncHeld(); err != nil {
		// The target has the keys; here they are dropped from memory but
		// perhaps not on disk. Stop the move: the operator sees why.
		n.cfg.Log.Error("cluster: migrated keys dropped, but the drop is not on disk", "keys", len(keys), "err", err)
		return len(keys), 0, Refusal("ERR keys moved but their removal here is not on disk: " + oneLine(err.Error()))
	}
	n.sent.Add(int64(len(keys)))
	return len(keys), ex.Next, nil
}

// Migration is MIGRATE's request, its arguments parsed.
type Migration struct {
	Host    string
	Port    int
	Slot    int      // the keys' slot (they share it)
	Keys    [][]byte // at least one
	Auth    *Auth    // the login MIGRATE names; nil: the node's own
	Timeout time.Duration
}

// Migrate moves m's keys to the node at m.Host:m.Port through the
// slot-move protocol (CLUSTER MIGRATESTATE: the target acknowledges once
// they are durable, then they are dropped here), and returns how many
// moved (0: none of them is here). The target must be a primary of this
// cluster, and the keys' slot must send them there: it migrates to the
// target, or (on a node that does not serve it: it imports the slot, or
// holds orphans, redis-cli --cluster fix) the target owns it.
func (n *Node) Migrate(sess *store.Session, m Migration) (int, error) {
	addr := net.JoinHostPort(m.Host, strconv.Itoa(m.Port))
	ns := n.State()
	var dst cluster.Node
	found := false
	if ns.Topology != nil {
		for _, sh := range ns.Topology.Shards {
			if sh.Primary.Addr() == addr || (sh.Primary.Port == m.Port && sameHost(sh.Primary.Host, m.Host)) {
				dst, found = sh.Primary, true
			}
		}
	}
	switch {
	case !found:
		return 0, Refusal("ERR MIGRATE target " + trunc(addr, 128) + " is not a primary of this cluster")
	case dst.ID == n.cfg.ID:
		return 0, Refusal("ERR MIGRATE target is this node")
	}
	slot := m.Slot
	owner, _ := ns.Topology.PrimaryOf(slot)
	switch {
	case ns.Migrating[slot] == dst.ID:
	case owner != n.cfg.ID && owner == dst.ID:
	case ns.Migrating[slot] != "":
		return 0, refusef("ERR slot %d migrates to %s, not to %s", slot, ns.Migrating[slot], dst.ID)
	default:
		return 0, refusef("ERR slot %d is not migrating to %s (CLUSTER SETSLOT %d MIGRATING %s first)", slot, dst.ID, slot, dst.ID)
	}
	a := n.cfg.Auth
	if m.Auth != nil {
		a = *m.Auth
	}
	n.moveMu.Lock()
	defer n.moveMu.Unlock()
	moved, _, err := n.moveBatch(sess, n.cfg.Store.ShardOfSlot(slot), m.Keys, nil, 0, 0, dst, a, m.Timeout)
	return moved, err
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

// MoveError is a MoveKeys that stopped: Moved keys went to Target before
// Err.
type MoveError struct {
	Moved  int
	Target string // host:port
	Err    error
}

func (e *MoveError) Error() string { return e.Err.Error() }

func (e *MoveError) Unwrap() error { return e.Err }

// MoveKeys moves every key of the slots migrating to the node dstID
// (orphans: the keys held here of slots this node does not serve whose
// owner is dstID, which it merges into its own), a batch at a time, until
// none is left, and returns how many moved. A failure part way is a
// *MoveError (the rest stay here).
func (n *Node) MoveKeys(sess *store.Session, dstID string, timeout time.Duration, orphans bool) (int, error) {
	ns := n.State()
	if ns.Topology == nil {
		return 0, Refusal(ErrNoTopology)
	}
	dst, err := primaryNode(ns.Topology, dstID)
	switch {
	case err != nil:
		return 0, err
	case dst.ID == n.cfg.ID:
		return 0, Refusal(ErrTargetSelf)
	}
	in := func(slot int) bool { return ns.Migrating[slot] == dstID }
	gate := store.SlotMigrating
	if !orphans {
		any := false
		for _, p := range ns.Migrating {
			any = any || p == dstID
		}
		if !any {
			// Not "0 keys left": a caller would take the move as done.
			return 0, Refusal("ERR no slot is migrating to " + trunc(dstID, 64))
		}
	}
	if orphans {
		gate = store.SlotNotOwned
		in = func(slot int) bool {
			owner, _ := ns.Topology.PrimaryOf(slot)
			return owner == dstID && ns.Importing[slot] == ""
		}
	}
	n.moveMu.Lock()
	defer n.moveMu.Unlock()
	total := 0
	for shard := range n.cfg.Store.NumShards() {
		// Passes over the table until one finds nothing: a scan position
		// can miss an entry the table moved while it was let go.
		for {
			passMoved := 0
			for cursor := uint32(0); ; {
				moved, next, err := n.moveBatch(sess, shard, nil, in, gate, cursor, dst, n.cfg.Auth, timeout)
				total += moved
				passMoved += moved
				if err != nil {
					return total, &MoveError{Moved: total, Target: dst.Addr(), Err: err}
				}
				if moved > 0 {
					if d := n.delay.Load(); d > 0 {
						time.Sleep(time.Duration(d))
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
	return total, nil
}

// Import is the target's side of one CLUSTER MIGRATESTATE batch from the
// node src: Add each key, then Apply.
type Import struct {
	n       *Node
	ns      *cluster.NodeState // the state the batch is checked against
	src     string
	replace []store.RestoreReq // by shard: keys of slots importing from src
	merge   []store.RestoreReq // by shard: keys of slots owned here
	shards  []int              // the shards named, in first-named order
}

// ErrUndecodable is a moved state that does not decode, or whose expiry
// no state has.
var ErrUndecodable = errors.New("peer: the state does not decode")

// NewImport starts a batch from the node src.
func (n *Node) NewImport(src string) (*Import, error) {
	ns := n.State()
	if ns.Topology == nil {
		return nil, Refusal(ErrNoTopology)
	}
	k := n.cfg.Store.NumShards()
	return &Import{n: n, ns: ns, src: src, replace: make([]store.RestoreReq, k), merge: make([]store.RestoreReq, k)}, nil
}

// Add checks one key and its state (limit.Encode's bytes) and expiry (Unix
// ms, or -1 for none). Its slot must be importing here from src (the state
// then replaces what is here: an earlier copy of the same move whose
// acknowledgement was lost, never served) or owned here (merged with
// limit.Merge: both sides' charges count); else a *Redirection to the
// slot's owner. A state that does not decode is ErrUndecodable.
func (im *Import) Add(key, state []byte, expires int64) error {
	// A node of the cluster sends what it holds, whatever it is (a
	// redis-cell "year-2343 lock" included: a move must not leave a key
	// behind); it must decode.
	if _, err := limit.Decode(state); err != nil || (expires < 0 && expires != store.NoExpiry) {
		return ErrUndecodable
	}
	n, ns := im.n, im.ns
	slot := cluster.KeySlot(key)
	owner, _ := ns.Topology.PrimaryOf(slot)
	var r *store.RestoreReq
	sh := n.cfg.Store.ShardOfSlot(slot)
	switch {
	case ns.Importing[slot] == im.src:
		r = &im.replace[sh]
		r.Replace = true
	case owner == n.cfg.ID && ns.Migrating[slot] == "":
		r = &im.merge[sh]
	default:
		return n.movedTo(slot)
	}
	if len(im.replace[sh].Entries)+len(im.merge[sh].Entries) == 0 {
		im.shards = append(im.shards, sh)
	}
	r.Entries = append(r.Entries, store.Entry{Key: key, State: state, Expires: expires})
	return nil
}

// Apply stores the batch's keys, all shards held, and syncs them: nil once
// they are durable here. A batch arriving after deadline (Unix ms: the
// source stopped waiting for it) is refused whole. A slot closed since Add
// refuses its keys with a *Redirection; those of other shards before it
// stay (the source keeps its copies: a retry replaces or merges them
// again).
func (im *Import) Apply(sess *store.Session, deadline int64) error {
	n := im.n
	sess.Run()
	sess.Hold(im.shards)
	if time.Now().UnixMilli() > deadline {
		sess.Release()
		return Refusal("ERR the batch arrived after its deadline (the source stopped waiting for it)")
	}
	var applied int64
	for _, sh := range im.shards {
		for _, r := range []*store.RestoreReq{&im.replace[sh], &im.merge[sh]} {
			if len(r.Entries) > 0 {
				sess.AddTo(sh, r)
				if err := r.Status(); err != nil || r.Refused >= 0 {
					// A refused request changed nothing; those before it
					// in this batch did, and stay.
					err2 := sess.SyncHeld()
					sess.Release()
					switch {
					case err != nil:
						return storeErr(err)
					case err2 != nil:
						return Refusal("ERR the moved keys are not on disk: " + oneLine(err2.Error()))
					default:
						return n.movedTo(r.Refused)
					}
				}
				applied += int64(len(r.Entries))
			}
		}
	}
	err := sess.SyncHeld()
	sess.Release()
	if err != nil {
		return Refusal("ERR the moved keys are not on disk: " + oneLine(err.Error()))
	}
	n.received.Add(applied)
	return nil
}

// CheckTx is Redis's check of a transaction's keys in a slot being moved,
// made under EXEC's hold (sess holds the shards) so that no key moves
// meanwhile: on the slot's old owner, all of them here → run; none → ASK
// (the client runs the transaction on the new owner); some → TRYAGAIN;
// and any of them in flight (see store.LandReq) → TRYAGAIN, whatever the
// slot. nil to run; else a *Redirection or a *StoreError.
func (n *Node) CheckTx(sess *store.Session, keys [][]byte) error {
	ns := n.State()
	if !ns.Open() || len(keys) == 0 {
		return nil
	}
	// Asked when the slot is open here: keys in flight may be of a slot
	// migrating away, or of one importing here that MIGRATE sends back to
	// its owner; each of the transaction's commands would otherwise get
	// TRYAGAIN alone, after those before it ran. (Orphans, the other keys a
	// move sends, are in slots this node does not serve: the transaction
	// was refused with MOVED.)
	slot := cluster.KeySlot(keys[0])
	if ns.Migrating[slot] == "" && ns.Importing[slot] == "" {
		return nil
	}
	r := &store.PresentReq{Keys: keys}
	sess.AddTo(n.cfg.Store.ShardOfSlot(slot), r)
	switch {
	case r.Status() != nil:
		return storeErr(r.Status())
	case r.Flying > 0: // on their way to the target: neither here nor there yet
	case ns.Migrating[slot] == "":
		return nil
	case r.Present == r.Distinct:
		return nil
	case r.Present == 0:
		rd := n.Redirect(&store.Redirect{Kind: store.Ask, Slot: slot})
		return &rd
	}
	n.tryAgain.Add(1)
	return &Redirection{Kind: TryAgain, Slot: slot}
}
