package cluster

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
)

// NodeReport is one node's reply to CLUSTER GETSTATE: its id, its state
// (topology and open slots), and its keys that concern an orchestrator.
// The wire form is JSON:
//
//	{"id":"<40 hex>","epoch":3,"topology":{...} or null,
//	 "migrating":[[slot,"<peer id>"],...],"importing":[[slot,"<peer id>"],...],
//	 "orphans":0,"migrated":0,"imported":0}
type NodeReport struct {
	ID        string
	Epoch     uint64
	Topology  *Topology      // nil: the node has none yet
	Migrating map[int]string // slot -> destination node id
	Importing map[int]string // slot -> source node id
	Orphans   int64          // keys held in slots the node neither owns nor imports
	Migrated  int64          // keys the node moved to others
	Imported  int64          // keys other nodes moved to it
}

// Marshal encodes r as the node sends it (one line of compact JSON; open
// slots sorted by slot).
func (r *NodeReport) Marshal() ([]byte, error) {
	pairs := func(m map[int]string) [][2]any {
		out := [][2]any{}
		for _, e := range Sorted(m) {
			out = append(out, [2]any{e.Slot, e.Peer})
		}
		return out
	}
	var topo json.RawMessage = []byte("null")
	if r.Topology != nil {
		if d, err := r.Topology.Marshal(); err == nil {
			topo = d
		}
	}
	return json.Marshal(struct {
		ID        string          `json:"id"`
		Epoch     uint64          `json:"epoch"`
		Topology  json.RawMessage `json:"topology"`
		Migrating [][2]any        `json:"migrating"`
		Importing [][2]any        `json:"importing"`
		Orphans   int64           `json:"orphans"`
		Migrated  int64           `json:"migrated"`
		Imported  int64           `json:"imported"`
	}{r.ID, r.Epoch, topo, pairs(r.Migrating), pairs(r.Importing), r.Orphans, r.Migrated, r.Imported})
}

// ParseNodeReport decodes GETSTATE's JSON; the topology inside is
// validated as a document. Its errors start "invalid GETSTATE reply".
func ParseNodeReport(data []byte) (*NodeReport, error) {
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
	st := &NodeReport{ID: w.ID, Epoch: w.Epoch, Orphans: w.Orphans, Migrated: w.Migrated, Imported: w.Imported}
	if t := bytes.TrimSpace(w.Topology); len(t) > 0 && !bytes.Equal(t, []byte("null")) {
		top, err := Parse(t)
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
			slot < 0 || slot >= SlotCount || id == "" {
			return nil, fmt.Errorf("invalid GETSTATE reply: %s entry %s is not [slot, \"node id\"]", what, raw)
		}
		out[slot] = id
	}
	return out, nil
}

// OpenSlotsText describes r's open slots as CLUSTER NODES shows them
// ("[5->-<id>] [7-<-<id>]"; "" if none).
func (r *NodeReport) OpenSlotsText() string {
	var b bytes.Buffer
	for _, e := range Sorted(r.Migrating) {
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "[%d->-%s]", e.Slot, e.Peer)
	}
	for _, e := range Sorted(r.Importing) {
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "[%d-<-%s]", e.Slot, e.Peer)
	}
	return b.String()
}

// Unsettled lists what keeps r's node from being settled after an apply:
// orphan keys left, slots still open. Empty if none.
func (r *NodeReport) Unsettled() []string {
	var problems []string
	if r.Orphans > 0 {
		problems = append(problems, fmt.Sprintf("%d orphan keys left", r.Orphans))
	}
	if open := r.OpenSlotsText(); open != "" {
		problems = append(problems, "slots still open: "+open)
	}
	return problems
}
