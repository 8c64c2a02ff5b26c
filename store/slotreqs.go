package store

import (
	"bytes"

	"github.com/cellserver/cellserver/cluster"
	"github.com/cellserver/cellserver/limit"
)

// The requests cluster mode sends: on the keys of hash slots (queue each
// with Session.AddTo, on Store.ShardOfSlot or on every shard), and on a key
// moved from another node.

// SlotCountReq is CLUSTER COUNTKEYSINSLOT.
type SlotCountReq struct {
	envelope
	Slot  int
	Count int64 // out: live keys in Slot
}

func (r *SlotCountReq) run(sh *shard, now int64) {
	r.Count = 0
	sh.eachLive(now, 0, func(_ *entry, _ []byte, slot int) bool {
		if slot == r.Slot {
			r.Count++
		}
		return true
	})
}

// SlotKeysReq is CLUSTER GETKEYSINSLOT.
type SlotKeysReq struct {
	envelope
	Slot int
	Max  int      // the most keys wanted
	Keys [][]byte // out: up to Max live keys in Slot (copies)
}

func (r *SlotKeysReq) run(sh *shard, now int64) {
	r.Keys = r.Keys[:0]
	if r.Max <= 0 {
		return
	}
	sh.eachLive(now, 0, func(_ *entry, key []byte, slot int) bool {
		if slot == r.Slot {
			r.Keys = append(r.Keys, bytes.Clone(key))
		}
		return len(r.Keys) < r.Max
	})
}

// eachLive calls f for each live key of the shard from entry from on, with
// its entry, key and hash slot, until f returns false; it returns the entry
// after the last one f saw (sh.t.nent once it saw all). The scan of the
// cluster requests: they find a slot's keys by reading every entry.
func (sh *shard) eachLive(now int64, from uint32, f func(e *entry, key []byte, slot int) bool) uint32 {
	nowMs := floorMs(now)
	for i := from; i < sh.t.nent; i++ {
		if e := sh.t.at(i); !e.isFree() && e.exp() >= nowMs {
			key := sh.t.keyOf(e)
			if !f(e, key, cluster.KeySlot(key)) {
				return i + 1
			}
		}
	}
	return sh.t.nent
}

// DropSlotsReq removes every key of the shard whose slot is in Ranges (a
// cluster node lost them), from memory and from disk.
type DropSlotsReq struct {
	envelope
	Ranges  [][2]int // inclusive slot ranges
	Dropped int64    // out: keys removed, live or expired
}

func (r *DropSlotsReq) run(sh *shard, _ int64) {
	r.Dropped = int64(sh.dropSlotsMem(r.Ranges))
	if sh.p == nil {
		return
	}
	sh.flushDels()
	rec, n := sh.recBuf(), 0
	for _, rg := range r.Ranges {
		lo, hi := max(rg[0], sh.slotLo), min(rg[1]+1, sh.slotHi)
		if lo < hi {
			rec, n = appendDrop(rec, lo, hi), n+1
		}
	}
	sh.writeRecord(rec, n)
}

// ImportReq merges one key's state moved from another node (CLUSTER
// IMPORTSTATE) into the local one with limit.Merge: the result charges what
// both allowed, never "the larger wins". A state of another kind than the
// local one is not merged (the local one stays); an expired one (Expires
// before now) neither. Queue it with Session.AddTo the key's shard.
type ImportReq struct {
	envelope
	Key     []byte
	State   []byte // limit.Encode's bytes
	Expires int64  // Unix ms; NoExpiry for none
	Applied bool   // out: the key changed
	Err     error  // out: the local or the moved state does not decode
}

// route makes an import a keyed request: the gate checks it as any request
// on the key (a slot being moved takes it only where the key is served).
func (r *ImportReq) route() *envelope { return r.addressed(r, r.Key) }

func (r *ImportReq) run(sh *shard, now int64) {
	r.Applied, r.Err = false, nil
	nowMs := floorMs(now)
	if r.Expires < nowMs {
		return
	}
	if _, err := limit.Decode(r.State); err != nil {
		r.Err = err
		return
	}
	h := sh.t.hash(r.Key)
	ei := sh.find(r.Key, h, nowMs)
	state, exp := r.State, r.Expires
	if ei >= 0 {
		e := sh.t.at(uint32(ei))
		local := sh.t.state(e, nil)
		if limit.KindOf(local) != limit.KindOf(r.State) {
			return // a WRONGTYPE conflict: the local state stays
		}
		merged, mexp, err := limit.MergeEncoded(nil, local, r.State, now)
		if err != nil {
			r.Err = err
			return
		}
		// The key lives as long as the merged state does, not as long as
		// the longer-lived side: a merge may keep one side's window and
		// drop the other's. Only a merge that holds no charge at all (a
		// GCRA TAT without debt on either side) keeps the keys' own
		// lifetimes, as CL.THROTTLE leaves a key it did not charge.
		exp = mexp
		if mexp <= nowMs {
			exp = max(e.exp(), r.Expires)
		}
		if bytes.Equal(merged, local) && exp == e.exp() {
			return // nothing to add
		}
		state = merged
	} else {
		ei = int64(sh.t.insertFor(r.Key, h, limit.KindOf(state))) // FW, SWC inline, as on replay
	}
	sh.setState(uint32(ei), state, exp)
	sh.markDirty(uint32(ei))
	sh.changed(r.Key, sh.by)
	r.Applied = true
}
