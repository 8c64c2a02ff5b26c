package cluster

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
)

// NodeState is what one node persists of the cluster: the topology it
// serves and the slot moves it is part of, which Redis Cluster calls open
// slots. A slot is MIGRATING on its owner while its keys move to another
// node, and IMPORTING on that node; both end when the topology gives the
// slot to the importer (CLUSTER SETSLOT NODE or SETTOPOLOGY). Saved as one
// file, so that a flip of ownership and the end of the move are one write.
//
// A NodeState shared between goroutines is not modified: changes make a
// copy (Clone).
type NodeState struct {
	Topology  *Topology      // nil: not configured yet
	Migrating map[int]string // slot -> id of the node its keys move to
	Importing map[int]string // slot -> id of the node its keys come from
}

// Clone returns a copy whose maps may be changed (the topology is shared:
// it is never modified).
func (s *NodeState) Clone() *NodeState {
	c := &NodeState{Migrating: map[int]string{}, Importing: map[int]string{}}
	if s == nil {
		return c
	}
	c.Topology = s.Topology
	for k, v := range s.Migrating {
		c.Migrating[k] = v
	}
	for k, v := range s.Importing {
		c.Importing[k] = v
	}
	return c
}

// Open reports whether any slot is migrating or importing.
func (s *NodeState) Open() bool {
	return s != nil && len(s.Migrating)+len(s.Importing) > 0
}

// Epoch is the topology's epoch, 0 without one.
func (s *NodeState) Epoch() uint64 {
	if s == nil || s.Topology == nil {
		return 0
	}
	return s.Topology.Epoch
}

// OpenSlot is one entry of Sorted.
type OpenSlot struct {
	Slot int
	Peer string
}

// Sorted lists m's entries by slot.
func Sorted(m map[int]string) []OpenSlot {
	out := make([]OpenSlot, 0, len(m))
	for k, v := range m {
		out = append(out, OpenSlot{k, v})
	}
	slices.SortFunc(out, func(a, b OpenSlot) int { return a.Slot - b.Slot })
	return out
}

// wireState is the file's JSON.
type wireState struct {
	Topology  json.RawMessage `json:"topology"`
	Migrating [][2]any        `json:"migrating"`
	Importing [][2]any        `json:"importing"`
}

// Marshal encodes s as the state file's JSON.
func (s *NodeState) Marshal() ([]byte, error) {
	var b bytes.Buffer
	b.WriteString("{\"topology\": ")
	if s.Topology == nil {
		b.WriteString("null")
	} else {
		d, err := s.Topology.Marshal()
		if err != nil {
			return nil, err
		}
		b.Write(bytes.TrimSpace(d))
	}
	for _, part := range []struct {
		name string
		m    map[int]string
	}{{"migrating", s.Migrating}, {"importing", s.Importing}} {
		fmt.Fprintf(&b, ",\n\"%s\": [", part.name)
		for i, e := range Sorted(part.m) {
			if i > 0 {
				b.WriteString(", ")
			}
			id, _ := json.Marshal(e.Peer)
			fmt.Fprintf(&b, "[%d, %s]", e.Slot, id)
		}
		b.WriteByte(']')
	}
	b.WriteString("}\n")
	return b.Bytes(), nil
}

// ParseNodeState decodes a state file: the NodeState shape, or a bare
// topology document (what nodes saved before slot moves were persisted).
func ParseNodeState(data []byte) (*NodeState, error) {
	var probe map[string]json.RawMessage
	if err := json.Unmarshal(data, &probe); err != nil {
		return nil, fmt.Errorf("invalid cluster state JSON: %w", err)
	}
	if _, ok := probe["topology"]; !ok {
		t, err := Parse(data)
		if err != nil {
			return nil, err
		}
		return &NodeState{Topology: t, Migrating: map[int]string{}, Importing: map[int]string{}}, nil
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var w wireState
	if err := dec.Decode(&w); err != nil {
		return nil, fmt.Errorf("invalid cluster state JSON: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("invalid cluster state JSON: unexpected data after the document")
	}
	s := &NodeState{Migrating: map[int]string{}, Importing: map[int]string{}}
	if len(w.Topology) > 0 && string(w.Topology) != "null" {
		t, err := Parse(w.Topology)
		if err != nil {
			return nil, err
		}
		s.Topology = t
	}
	for _, part := range []struct {
		name string
		in   [][2]any
		m    map[int]string
	}{{"migrating", w.Migrating, s.Migrating}, {"importing", w.Importing, s.Importing}} {
		for _, e := range part.in {
			f, ok1 := e[0].(float64)
			id, ok2 := e[1].(string)
			if !ok1 || !ok2 || f != float64(int(f)) || f < 0 || f >= SlotCount || checkNodeID(id) != nil {
				return nil, fmt.Errorf("invalid cluster state: %s entry %v", part.name, e)
			}
			part.m[int(f)] = id
		}
	}
	return s, nil
}

// LoadNodeState reads the state saved at path; nil (no error) if there is
// no file.
func LoadNodeState(path string) (*NodeState, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	s, err := ParseNodeState(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return s, nil
}

// Save writes s to path atomically and durably (a temporary file, fsync,
// rename, fsync of the directory).
func (s *NodeState) Save(path string) error {
	data, err := s.Marshal()
	if err != nil {
		return err
	}
	return writeFileAtomic(path, data)
}

// WithOwner returns a copy of t in which slot belongs to the shard whose
// primary is nodeID, at epoch t.Epoch+1 (CLUSTER SETSLOT NODE).
func (t *Topology) WithOwner(slot int, nodeID string) (*Topology, error) {
	dst, ok := t.nodes[nodeID]
	if !ok || t.Shards[dst].Primary.ID != nodeID {
		return nil, fmt.Errorf("node %s is not a primary of the topology", nodeID)
	}
	if t.Epoch >= MaxEpoch {
		return nil, fmt.Errorf("epoch %d is the highest a topology may carry", t.Epoch)
	}
	n := &Topology{Epoch: t.Epoch + 1, Shards: make([]Shard, len(t.Shards))}
	sets := make([][SlotCount]bool, len(t.Shards))
	for s := range SlotCount {
		if o := int(t.owner[s]) - 1; o >= 0 {
			sets[o][s] = true
		}
	}
	for i := range sets {
		sets[i][slot] = i == dst
	}
	for i, sh := range t.Shards {
		n.Shards[i] = Shard{Slots: rangesOf(&sets[i]), Primary: sh.Primary, Replicas: sh.Replicas}
		if n.Shards[i].Slots == nil {
			n.Shards[i].Slots = [][2]int{}
		}
	}
	if err := n.Validate(); err != nil {
		return nil, err
	}
	return n, nil
}

// SameLayout reports whether t and u give every slot to the same nodes and
// list the same nodes (epochs aside).
func (t *Topology) SameLayout(u *Topology) bool {
	if t == nil || u == nil {
		return t == u
	}
	a, err1 := (&Topology{Epoch: 1, Shards: t.Shards}).Marshal()
	b, err2 := (&Topology{Epoch: 1, Shards: u.Shards}).Marshal()
	return err1 == nil && err2 == nil && bytes.Equal(a, b)
}

// PrimaryOf returns the id of the primary that owns slot, false if none.
func (t *Topology) PrimaryOf(slot int) (string, bool) {
	if t == nil {
		return "", false
	}
	sh, ok := t.Owner(slot)
	if !ok {
		return "", false
	}
	return t.Shards[sh].Primary.ID, true
}

func writeFileAtomic(path string, data []byte) (err error) {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(tmp)
		}
	}()
	if _, err = f.Write(data); err != nil {
		return err
	}
	if err = f.Sync(); err != nil {
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	if err = os.Rename(tmp, path); err != nil {
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// IsPrimary reports whether nodeID is a primary of t.
func (t *Topology) IsPrimary(nodeID string) bool {
	_, _, primary, ok := t.Node(nodeID)
	return ok && primary
}
