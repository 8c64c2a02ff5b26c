package cluster

// Cluster topology: which node owns which hash slots.
//
// cellserver does not gossip and runs no consensus. An orchestrator (a person
// with `cellserver cluster apply`, or any program) pushes one versioned
// document, the topology, to every node; each node validates it, refuses an
// epoch that is not newer than its own, applies it atomically and persists it.
// This is how Dragonfly's cluster mode works.
//
// The document is JSON:
//
//	{
//	  "epoch": 3,
//	  "shards": [
//	    {
//	      "slots": [[0, 5460]],
//	      "primary": {"id": "<40 lowercase hex>", "host": "127.0.0.1", "port": 7001},
//	      "replicas": []
//	    },
//	    ...
//	  ]
//	}
//
// Slot ranges are inclusive at both ends, as in Redis. A shard may own no
// slots (a node about to receive some). Slots no shard owns are unassigned;
// a cluster is healthy only when all 16384 are assigned (Covered() == SlotCount).
//
// Node ids: a node's id is derived from its announced address, NodeID(host,
// port) = lowercase hex SHA-1 of "host:port". A node therefore knows its own id
// without any state, and `cellserver cluster init` writes the ids the nodes
// will recognise. Validate does not insist on derived ids (any 40 lowercase hex
// characters are accepted), but a node finds itself in a topology by id.

import (
	"bytes"
	"crypto/sha1"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"strconv"
	"strings"
)

// Node is one cellserver process as clients reach it.
type Node struct {
	ID   string `json:"id"`   // 40 lowercase hex characters; see NodeID
	Host string `json:"host"` // address announced to clients (MOVED, CLUSTER SLOTS)
	Port int    `json:"port"`
}

// Addr is "host:port" (IPv6 hosts in brackets).
func (n Node) Addr() string { return net.JoinHostPort(n.Host, strconv.Itoa(n.Port)) }

// Shard is a primary, the slot ranges it owns, and its replicas.
type Shard struct {
	Slots    [][2]int `json:"slots"` // inclusive [first, last] ranges
	Primary  Node     `json:"primary"`
	Replicas []Node   `json:"replicas"`
}

// Topology is one version of the cluster layout.
//
// Parse, Init and Load return validated topologies. A Topology built by hand
// must be passed to Validate before Owner, Covered or ShardOf give answers.
// Once validated and shared between goroutines a Topology must not be
// modified: its readers take no locks.
type Topology struct {
	Epoch  uint64  `json:"epoch"`
	Shards []Shard `json:"shards"`

	// owner[slot] is the owning shard index + 1; 0 is unassigned. (Stored
	// +1 so that the zero value means "nothing assigned", never "all in
	// shard 0".) Built by Validate.
	owner    [SlotCount]int16
	assigned int
	nodes    map[string]int // node id -> shard index
}

// Limits on what a document may hold.
const (
	maxShards = SlotCount // more shards than slots cannot be useful
	nodeIDLen = 40
)

// MaxEpoch is the highest epoch a topology may carry: 2^53-1, the largest
// integer every JSON tool (JavaScript, jq) holds exactly. Without a bound a
// document at epoch 2^64-1 would lock a node against every later topology
// (none can be newer), across restarts; 2^53-1 still allows one push per
// microsecond for 285 years.
const MaxEpoch = 1<<53 - 1

// NodeID is the id of the node reachable at host:port: the lowercase hex SHA-1
// (40 characters) of its address "host:port" (net.JoinHostPort, so IPv6 hosts
// are bracketed). A node's id is derived from its announced address, so moving
// a node to another address makes it a different node.
func NodeID(host string, port int) string {
	sum := sha1.Sum([]byte(net.JoinHostPort(host, strconv.Itoa(port))))
	return hex.EncodeToString(sum[:])
}

// wire types: what the JSON decoder fills. Slot ranges are decoded as
// variable-length arrays so that [1] and [1,2,3] are errors instead of being
// silently zero-filled or truncated, as decoding into [2]int would do.
type wireTopology struct {
	Epoch  uint64      `json:"epoch"`
	Shards []wireShard `json:"shards"`
}

type wireShard struct {
	Slots    [][]int `json:"slots"`
	Primary  Node    `json:"primary"`
	Replicas []Node  `json:"replicas"`
}

// Parse decodes a topology document strictly (unknown fields, trailing data
// and malformed slot ranges are errors) and validates it.
func Parse(data []byte) (*Topology, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var w wireTopology
	if err := dec.Decode(&w); err != nil {
		return nil, fmt.Errorf("invalid topology JSON: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("invalid topology JSON: unexpected data after the document")
	}
	t := &Topology{Epoch: w.Epoch, Shards: make([]Shard, len(w.Shards))}
	for i, ws := range w.Shards {
		s := Shard{Primary: ws.Primary, Replicas: ws.Replicas}
		if ws.Slots != nil {
			s.Slots = make([][2]int, len(ws.Slots))
		}
		for j, r := range ws.Slots {
			if len(r) != 2 {
				return nil, fmt.Errorf("shard %d: slot range %d must be [first, last], it has %d elements", i, j, len(r))
			}
			s.Slots[j] = [2]int{r[0], r[1]}
		}
		t.Shards[i] = s
	}
	if err := t.Validate(); err != nil {
		return nil, err
	}
	return t, nil
}

// Validate checks every rule a topology must satisfy and, if it does, builds
// the slot owner table. On error the table is cleared (nothing is owned).
//
// Rules: 1 <= epoch <= MaxEpoch; at least one shard (at most 16384); every range is
// 0 <= first <= last <= 16383; no slot is in two ranges; every node id is
// exactly 40 lowercase hex characters and appears once in the document (as a
// primary or as a replica); no two nodes share a host:port; hosts are
// non-empty without spaces or control characters; ports are 1..65535.
func (t *Topology) Validate() error {
	owner, assigned, nodes, err := t.check()
	if err != nil {
		t.owner, t.assigned, t.nodes = [SlotCount]int16{}, 0, nil
		return err
	}
	t.owner, t.assigned, t.nodes = *owner, assigned, nodes
	return nil
}

// check validates t without modifying it.
func (t *Topology) check() (*[SlotCount]int16, int, map[string]int, error) {
	if t.Epoch < 1 {
		return nil, 0, nil, errors.New("epoch must be at least 1, got 0")
	}
	if t.Epoch > MaxEpoch {
		return nil, 0, nil, fmt.Errorf("epoch must be at most %d (2^53-1), got %d", uint64(MaxEpoch), t.Epoch)
	}
	if len(t.Shards) == 0 {
		return nil, 0, nil, errors.New("no shards: a topology needs at least one")
	}
	if len(t.Shards) > maxShards {
		return nil, 0, nil, fmt.Errorf("%d shards: at most %d are allowed", len(t.Shards), maxShards)
	}
	owner := new([SlotCount]int16)
	assigned := 0
	ids := make(map[string]string)   // id -> where
	addrs := make(map[string]string) // host:port -> where
	nodes := make(map[string]int)
	checkNode := func(n Node, shard int, where string) error {
		if err := checkNodeID(n.ID); err != nil {
			return fmt.Errorf("%s: %v", where, err)
		}
		if n.Host == "" {
			return fmt.Errorf("%s (id %s): host is empty", where, n.ID)
		}
		if strings.IndexFunc(n.Host, func(r rune) bool { return r <= ' ' || r == 0x7f }) >= 0 {
			return fmt.Errorf("%s (id %s): host %q contains a space or control character", where, n.ID, n.Host)
		}
		if n.Port < 1 || n.Port > 65535 {
			return fmt.Errorf("%s (id %s): port %d is not in 1..65535", where, n.ID, n.Port)
		}
		if prev, ok := ids[n.ID]; ok {
			return fmt.Errorf("node id %s appears twice: %s and %s", n.ID, prev, where)
		}
		ids[n.ID] = where
		if prev, ok := addrs[n.Addr()]; ok {
			return fmt.Errorf("address %s is used by two nodes: %s and %s", n.Addr(), prev, where)
		}
		addrs[n.Addr()] = where
		nodes[n.ID] = shard
		return nil
	}
	for i, s := range t.Shards {
		if err := checkNode(s.Primary, i, fmt.Sprintf("shard %d primary", i)); err != nil {
			return nil, 0, nil, err
		}
		for j, r := range s.Replicas {
			if err := checkNode(r, i, fmt.Sprintf("shard %d replica %d", i, j)); err != nil {
				return nil, 0, nil, err
			}
		}
		for j, r := range s.Slots {
			lo, hi := r[0], r[1]
			if lo < 0 || hi < 0 || lo >= SlotCount || hi >= SlotCount {
				return nil, 0, nil, fmt.Errorf("shard %d: slot range %d [%d, %d] is outside 0..%d", i, j, lo, hi, SlotCount-1)
			}
			if lo > hi {
				return nil, 0, nil, fmt.Errorf("shard %d: slot range %d [%d, %d] starts after it ends", i, j, lo, hi)
			}
			for slot := lo; slot <= hi; slot++ {
				if o := owner[slot]; o != 0 {
					if int(o-1) == i {
						return nil, 0, nil, fmt.Errorf("slot %d is in two ranges of shard %d", slot, i)
					}
					return nil, 0, nil, fmt.Errorf("slot %d is in shard %d and shard %d", slot, o-1, i)
				}
				owner[slot] = int16(i + 1)
			}
			assigned += hi - lo + 1
		}
	}
	return owner, assigned, nodes, nil
}

func checkNodeID(id string) error {
	if len(id) != nodeIDLen {
		return fmt.Errorf("node id %q must be exactly %d lowercase hex characters, it has %d characters", id, nodeIDLen, len(id))
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return fmt.Errorf("node id %q must be exactly %d lowercase hex characters, character %d is %q", id, nodeIDLen, i, c)
		}
	}
	return nil
}

// Owner returns the index in Shards of the shard that owns slot, or false if
// the slot is unassigned or out of range. It is O(1).
func (t *Topology) Owner(slot int) (shard int, ok bool) {
	if slot < 0 || slot >= SlotCount {
		return 0, false
	}
	o := t.owner[slot]
	return int(o) - 1, o != 0
}

// Covered returns how many slots are assigned to a shard; SlotCount means the
// topology covers every slot.
func (t *Topology) Covered() (assigned int) { return t.assigned }

// ShardOf returns the index of the shard nodeID belongs to, as primary or as
// replica.
func (t *Topology) ShardOf(nodeID string) (int, bool) {
	i, ok := t.nodes[nodeID]
	return i, ok
}

// Node returns the node with id nodeID, the index of its shard, and whether
// it is that shard's primary.
func (t *Topology) Node(nodeID string) (n Node, shard int, primary bool, ok bool) {
	i, ok := t.nodes[nodeID]
	if !ok {
		return Node{}, 0, false, false
	}
	s := t.Shards[i]
	if s.Primary.ID == nodeID {
		return s.Primary, i, true, true
	}
	for _, r := range s.Replicas {
		if r.ID == nodeID {
			return r, i, false, true
		}
	}
	return Node{}, 0, false, false // unreachable for a validated topology
}

// Marshal encodes t as indented JSON with a fixed layout (one line per slot
// list and per node), so the same topology always gives the same bytes and a
// person can read and edit it. Replicas and slot lists are written as [] when
// empty. An invalid topology is refused.
func (t *Topology) Marshal() ([]byte, error) {
	if _, _, _, err := t.check(); err != nil {
		return nil, err
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "{\n  \"epoch\": %d,\n  \"shards\": [", t.Epoch)
	for i, s := range t.Shards {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString("\n    {\n      \"slots\": [")
		for j, r := range s.Slots {
			if j > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "[%d, %d]", r[0], r[1])
		}
		b.WriteString("],\n      \"primary\": ")
		writeNode(&b, s.Primary)
		b.WriteString(",\n      \"replicas\": [")
		for j, r := range s.Replicas {
			if j > 0 {
				b.WriteByte(',')
			}
			b.WriteString("\n        ")
			writeNode(&b, r)
		}
		if len(s.Replicas) > 0 {
			b.WriteString("\n      ")
		}
		b.WriteString("]\n    }")
	}
	b.WriteString("\n  ]\n}\n")
	return b.Bytes(), nil
}

func writeNode(b *bytes.Buffer, n Node) {
	id, _ := json.Marshal(n.ID) // strings always marshal
	host, _ := json.Marshal(n.Host)
	fmt.Fprintf(b, `{"id": %s, "host": %s, "port": %d}`, id, host, n.Port)
}

// Init builds the topology of a new cluster at epoch: one shard per address
// ("host:port"), in the order given, each with no replicas and the id
// NodeID(host, port). Slots are split into contiguous ranges exactly as
// `redis-cli --cluster create` splits them among masters (for 3 nodes:
// [0,5460], [5461,10922], [10923,16383]). Duplicate and malformed addresses
// are errors.
func Init(addrs []string, epoch uint64) (*Topology, error) {
	if len(addrs) == 0 {
		return nil, errors.New("no node addresses")
	}
	if len(addrs) > SlotCount {
		return nil, fmt.Errorf("%d nodes: at most %d can each own a slot", len(addrs), SlotCount)
	}
	t := &Topology{Epoch: epoch, Shards: make([]Shard, len(addrs))}
	seen := make(map[string]int)
	for i, a := range addrs {
		host, port, err := ParseAddr(a)
		if err != nil {
			return nil, err
		}
		n := Node{ID: NodeID(host, port), Host: host, Port: port}
		if j, dup := seen[n.Addr()]; dup {
			return nil, fmt.Errorf("node %s is listed twice (positions %d and %d)", n.Addr(), j+1, i+1)
		}
		seen[n.Addr()] = i
		t.Shards[i] = Shard{Primary: n, Replicas: []Node{}}
	}
	for i, r := range splitSlots(len(addrs)) {
		t.Shards[i].Slots = [][2]int{r}
	}
	if err := t.Validate(); err != nil {
		return nil, err
	}
	return t, nil
}

// splitSlots divides the slots into n contiguous ranges with redis-cli's
// arithmetic (clusterManagerCommandCreate in redis-cli.c), single-precision
// floats included, so the ranges match it exactly.
func splitSlots(n int) [][2]int {
	out := make([][2]int, n)
	perNode := float32(SlotCount) / float32(n)
	var cursor float32
	first := 0
	for i := range n {
		last := int(math.Round(float64(cursor + perNode - 1))) // lround
		if last > SlotCount || i == n-1 {
			last = SlotCount - 1
		}
		if last < first {
			last = first
		}
		out[i] = [2]int{first, last}
		first = last + 1
		cursor += perNode
	}
	return out
}

// ParseAddr splits "host:port" ("[v6]:port" for IPv6) and checks that the host
// is non-empty and the port is a number in 1..65535.
func ParseAddr(addr string) (host string, port int, err error) {
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, fmt.Errorf("address %q: want host:port", addr)
	}
	if host == "" {
		return "", 0, fmt.Errorf("address %q: host is empty", addr)
	}
	port, err = strconv.Atoi(p)
	if err != nil || port < 1 || port > 65535 {
		return "", 0, fmt.Errorf("address %q: port must be a number in 1..65535", addr)
	}
	return host, port, nil
}

// Moves compares the slots nodeID owns (as a shard's primary) in t with those
// it owns in newer: lost are owned in t but not in newer, gained the reverse.
// Both are sorted, merged inclusive ranges, nil when empty. A nil t or newer
// owns nothing, so t == nil gives everything nodeID owns in newer as gained.
// Ranges are read from Shards, so Moves does not depend on Validate.
func (t *Topology) Moves(newer *Topology, nodeID string) (lost [][2]int, gained [][2]int) {
	before, after := t.ownedBy(nodeID), newer.ownedBy(nodeID)
	var l, g [SlotCount]bool
	for s := range SlotCount {
		l[s] = before[s] && !after[s]
		g[s] = after[s] && !before[s]
	}
	return rangesOf(&l), rangesOf(&g)
}

// SlotsOf returns the sorted, merged slot ranges nodeID owns as a primary, nil
// if none.
func (t *Topology) SlotsOf(nodeID string) [][2]int {
	owned := t.ownedBy(nodeID)
	return rangesOf(&owned)
}

func (t *Topology) ownedBy(nodeID string) (owned [SlotCount]bool) {
	if t == nil {
		return owned
	}
	for _, s := range t.Shards {
		if s.Primary.ID != nodeID {
			continue
		}
		for _, r := range s.Slots {
			for slot := max(r[0], 0); slot <= min(r[1], SlotCount-1); slot++ {
				owned[slot] = true
			}
		}
	}
	return owned
}

func rangesOf(set *[SlotCount]bool) [][2]int {
	var out [][2]int
	for s := 0; s < SlotCount; s++ {
		if !set[s] {
			continue
		}
		e := s
		for e+1 < SlotCount && set[e+1] {
			e++
		}
		out = append(out, [2]int{s, e})
		s = e
	}
	return out
}

// Ranges is a list of inclusive slot ranges, as in Shard.Slots and Moves.
type Ranges [][2]int

// Count is the number of slots in r (overlaps counted twice).
func (r Ranges) Count() int {
	n := 0
	for _, x := range r {
		n += x[1] - x[0] + 1
	}
	return n
}

// Contains reports whether slot is in one of the ranges.
func (r Ranges) Contains(slot int) bool {
	for _, x := range r {
		if x[0] <= slot && slot <= x[1] {
			return true
		}
	}
	return false
}

// String formats r as Redis does in CLUSTER NODES: "0-5460 5461" (a single
// slot without a dash), space separated.
func (r Ranges) String() string {
	var b strings.Builder
	for i, x := range r {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(strconv.Itoa(x[0]))
		if x[1] != x[0] {
			b.WriteByte('-')
			b.WriteString(strconv.Itoa(x[1]))
		}
	}
	return b.String()
}

// Load reads and validates the topology saved at path. A missing file is not
// an error: it returns (nil, nil), meaning no topology yet.
// It reads what a node saves (LoadNodeState), a bare document included.
func Load(path string) (*Topology, error) {
	s, err := LoadNodeState(path)
	if s == nil || err != nil {
		return nil, err
	}
	return s.Topology, nil
}

// Save writes t (as Marshal encodes it) to path atomically: a temporary file
// in the same directory is written and fsynced, renamed over path, and the
// directory is fsynced, so after a crash path holds either the old or the new
// topology, never a mix. An invalid topology is refused.
func (t *Topology) Save(path string) error {
	data, err := t.Marshal()
	if err != nil {
		return err
	}
	return writeFileAtomic(path, data)
}
