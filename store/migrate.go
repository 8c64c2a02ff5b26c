package store

import (
	"bytes"
	"errors"
	"strconv"
	"sync"

	"github.com/cellserver/cellserver/cluster"
	"github.com/cellserver/cellserver/limit"
)

// What a cluster node's shard knows of each hash slot it covers, so that it
// decides again, when a request runs, whether this node serves it: the
// event loop routed the request earlier, and a slot may have been opened,
// moved or flipped in between. (Outside --cluster yes no shard has a gate
// and nothing is checked.)
const (
	SlotOwned     uint8 = iota // served here
	SlotNotOwned               // another node serves it: MOVED
	SlotMigrating              // owned, its keys moving away: a key not here is ASKed for on the target
	SlotImporting              // its keys moving here: served only after ASKING
)

// RedirectKind says where a request refused by a shard's gate should go.
type RedirectKind uint8

// The redirects, Redis Cluster's.
const (
	Moved    RedirectKind = iota + 1 // to the slot's owner
	Ask                              // once, with ASKING, to the node the slot migrates to
	TryAgain                         // some of a multi-key request's keys moved: retry later
)

// Redirect is the status of a request a shard's gate did not run: it names
// the slot; the caller words it (MOVED/ASK need the node's address, which
// the store does not know).
type Redirect struct {
	Kind RedirectKind
	Slot int
}

func (r *Redirect) Error() string {
	return "store: slot " + strconv.Itoa(r.Slot) + " redirected (" + strconv.Itoa(int(r.Kind)) + ")"
}

// AsRedirect returns err's Redirect, or nil.
func AsRedirect(err error) *Redirect {
	if err == nil {
		return nil // every request's path: errors.As would allocate
	}
	if r, ok := err.(*Redirect); ok {
		return r
	}
	var r *Redirect
	if errors.As(err, &r) {
		return r
	}
	return nil
}

// admit is the gate: whether op may run on this shard now, else op's
// status says where it goes. Only keyed requests are checked (shard-wide
// ones, and those a migration runs, name no key), and only in cluster mode.
func (sh *shard) admit(op *envelope, now int64) bool {
	slot := cluster.KeySlot(op.key)
	if len(sh.flying) > 0 && sh.flies(op) {
		// On its way to the target: neither here to change nor there yet.
		op.status = &Redirect{Kind: TryAgain, Slot: slot}
		return false
	}
	switch sh.gate[slot-sh.slotLo] {
	case SlotOwned:
		return true
	case SlotImporting:
		if !op.asking {
			op.status = &Redirect{Kind: Moved, Slot: slot}
			return false
		}
		// Redis's rule for an importing slot under ASKING: a command of
		// several keys runs only if all of them are here (TRYAGAIN: some
		// are still on the source, which would serve them too).
		if multiKey(op) {
			if have, want := sh.present(op, now); have < want {
				op.status = &Redirect{Kind: TryAgain, Slot: slot}
				return false
			}
		}
		return true
	case SlotNotOwned:
		op.status = &Redirect{Kind: Moved, Slot: slot}
	case SlotMigrating:
		if op.inTx {
			return true
		}
		// Redis's rule for a migrating slot: all of the keys here → run;
		// none → ASK (they moved, or are new: the target creates them);
		// some → TRYAGAIN. An expired key is missing, as in Redis.
		switch have, want := sh.present(op, now); have {
		case want:
			return true
		case 0:
			op.status = &Redirect{Kind: Ask, Slot: slot}
		default:
			op.status = &Redirect{Kind: TryAgain, Slot: slot}
		}
	}
	return false
}

// flies reports whether any key of op is in flight (see shard.flying).
func (sh *shard) flies(op *envelope) bool {
	if multiKey(op) {
		for _, l := range op.req.(*LimitReq).Call.Limits {
			if _, ok := sh.flying[string(l.Key)]; ok {
				return true
			}
		}
		return false
	}
	_, ok := sh.flying[string(op.key)]
	return ok
}

// multiKey reports whether op is a CL.LIMIT of several keys (the one
// keyed request that names more than one key).
func multiKey(op *envelope) bool {
	lr, ok := op.req.(*LimitReq)
	return ok && len(lr.Call.Limits) > 1
}

// present counts the keys of op (a CL.LIMIT's, or its one key) that are
// live here: have of want.
func (sh *shard) present(op *envelope, now int64) (have, want int) {
	nowMs := floorMs(now)
	if multiKey(op) {
		lr := op.req.(*LimitReq)
		for _, l := range lr.Call.Limits {
			if sh.find(l.Key, sh.t.hash(l.Key), nowMs) >= 0 {
				have++
			}
		}
		return have, len(lr.Call.Limits)
	}
	if sh.find(op.key, op.keyHash(sh.t, op.key), nowMs) >= 0 {
		have = 1
	}
	return have, 1
}

// SlotStateReq sets the gate of every slot the shard covers to
// States[slot]. With RequireEmpty, it first checks that no slot whose
// state becomes SlotNotOwned holds a live key and changes nothing
// otherwise (Busy is then such a slot). Queue it on every shard (or run
// it under a Hold of every shard, so that the check and the change are one
// step on all of them); Drop also removes the keys (expired ones, with
// RequireEmpty) of slots that become SlotNotOwned, from memory and disk.
type SlotStateReq struct {
	envelope
	States       *[cluster.SlotCount]uint8
	RequireEmpty bool
	CheckOnly    bool  // with RequireEmpty: only check, change nothing
	Busy         int   // out: a slot that still holds keys, or -1
	Dropped      int64 // out: keys removed
}

func (r *SlotStateReq) run(sh *shard, now int64) {
	r.Busy, r.Dropped = -1, 0
	losing := false // a slot of this shard stops being served here: scan for its keys
	for slot := sh.slotLo; slot < sh.slotHi && !losing; slot++ {
		losing = r.States[slot] == SlotNotOwned && (sh.gate == nil || sh.gate[slot-sh.slotLo] != SlotNotOwned)
	}
	if r.RequireEmpty && losing {
		if slot := sh.liveKeyIn(now, func(slot int) bool {
			return r.States[slot] == SlotNotOwned && (sh.gate == nil || sh.gate[slot-sh.slotLo] != SlotNotOwned)
		}); slot >= 0 {
			r.Busy = slot
			return
		}
	}
	if r.CheckOnly {
		return
	}
	if sh.gate == nil {
		sh.gate = make([]uint8, sh.slotHi-sh.slotLo)
	}
	var drop [][2]int
	for slot := sh.slotLo; slot < sh.slotHi; slot++ {
		was := sh.gate[slot-sh.slotLo]
		sh.gate[slot-sh.slotLo] = r.States[slot]
		if r.RequireEmpty && r.States[slot] == SlotNotOwned && was != SlotNotOwned {
			if n := len(drop); n > 0 && drop[n-1][1] == slot-1 {
				drop[n-1][1] = slot
			} else {
				drop = append(drop, [2]int{slot, slot})
			}
		}
	}
	if len(drop) > 0 && losing {
		d := DropSlotsReq{Ranges: drop}
		d.run(sh, now)
		r.Dropped = d.Dropped
	}
}

// liveKeyIn returns the slot of a live key of the shard whose slot in
// says true, or -1.
func (sh *shard) liveKeyIn(now int64, in func(slot int) bool) int {
	found := -1
	sh.eachLive(now, 0, func(_ *entry, _ []byte, slot int) bool {
		if in(slot) {
			found = slot
		}
		return found < 0
	})
	return found
}

// SlotKeyCountReq counts the live keys of the shard by the gate of their
// slot: Orphans are those of slots it does not serve (SlotNotOwned),
// which a node holds only after an interrupted move or a rollback.
type SlotKeyCountReq struct {
	envelope
	Orphans int64 // out
}

func (r *SlotKeyCountReq) run(sh *shard, now int64) {
	r.Orphans = 0
	if sh.gate == nil {
		return
	}
	sh.eachLive(now, 0, func(_ *entry, _ []byte, slot int) bool {
		if sh.gate[slot-sh.slotLo] == SlotNotOwned {
			r.Orphans++
		}
		return true
	})
}

// ExportReq copies the live keys a migration sends: Keys if set (MIGRATE
// names them; missing ones are skipped), else up to Max keys whose slot In
// says true, scanning the table from entry Cursor (Next is where to go on;
// 0 once the scan reached the end). It changes no state; with Fly it marks
// the keys in flight, and the caller sends the copies and, once the target
// has them, drops them with LandReq (see package peer's moveBatch).
type ExportReq struct {
	envelope
	Keys [][]byte
	In   func(slot int) bool
	// Gated: scan only slots whose gate is Gate, as the shard sees it now
	// (a slot closed while a move runs is not exported any more).
	Gated  bool
	Gate   uint8
	Max    int
	Cursor uint32
	// Fly marks each exported key in flight until a LandReq names it, so
	// that the shard need not be held while the copies travel; keys
	// already in flight (another move's) are not exported.
	Fly     bool
	Entries []Entry // out
	Next    uint32  // out
}

func (r *ExportReq) run(sh *shard, now int64) {
	r.collect(sh, now)
	// Marked once every copy is made: an export that fails half way (a
	// panic: its status says so, and the caller sends nothing) leaves no
	// key in flight that no LandReq would ever name.
	if !r.Fly || len(r.Entries) == 0 {
		return
	}
	if sh.flying == nil {
		sh.flying = map[string]struct{}{}
	}
	for _, e := range r.Entries {
		sh.flying[string(e.Key)] = struct{}{}
	}
}

// collect makes the copies (keys in flight are not exported again).
func (r *ExportReq) collect(sh *shard, now int64) {
	nowMs := floorMs(now)
	r.Entries, r.Next = r.Entries[:0], 0
	add := func(e *entry) {
		k := sh.t.keyOf(e)
		if _, ok := sh.flying[string(k)]; ok {
			return
		}
		r.Entries = append(r.Entries, Entry{Key: bytes.Clone(k), State: bytes.Clone(sh.t.state(e, nil)), Expires: e.exp()})
	}
	if r.Keys != nil {
		for _, k := range r.Keys {
			if ei := sh.find(k, sh.t.hash(k), nowMs); ei >= 0 {
				add(sh.t.at(uint32(ei)))
			}
		}
		return
	}
	if r.Max <= 0 {
		return
	}
	next := sh.eachLive(now, r.Cursor, func(e *entry, _ []byte, slot int) bool {
		if r.In(slot) && (!r.Gated || sh.gate == nil || sh.gate[slot-sh.slotLo] == r.Gate) {
			add(e)
		}
		return len(r.Entries) < r.Max
	})
	if next < sh.t.nent {
		r.Next = next
	}
}

// LandReq ends the flight of keys an ExportReq with Fly sent: with Drop
// (the target acknowledged them) they are removed from memory and disk,
// else (the batch failed) they are served here again as the batch left
// them (no keyed request could change them in flight; a FLUSHALL or their
// expiry may have removed them, as either would after the move).
type LandReq struct {
	envelope
	Keys    [][]byte
	Drop    bool
	Dropped int64 // out
}

func (r *LandReq) run(sh *shard, now int64) {
	for _, k := range r.Keys {
		delete(sh.flying, string(k))
	}
	if len(sh.flying) == 0 {
		sh.flying = nil // a move's batches come and go: keep no empty map
	}
	r.Dropped = 0
	if r.Drop {
		r.Dropped = sh.dropKeys(r.Keys, now)
	}
}

// dropKeys removes the live keys of keys and returns how many there were.
func (sh *shard) dropKeys(keys [][]byte, now int64) (dropped int64) {
	nowMs := floorMs(now)
	for _, k := range keys {
		h := sh.t.hash(k)
		if ei := sh.find(k, h, nowMs); ei >= 0 {
			sh.changed(k, sh.by)
			sh.removeHash(uint32(ei), h)
			dropped++
		}
	}
	return dropped
}

// RestoreReq stores keys a migration brought here. Replace sets each one's
// state and expiry as sent, whatever was here (an earlier copy of the same
// migration, whose acknowledgement was lost: never served, see the
// migration protocol in docs/cluster.md); otherwise each is merged with
// the local state as ImportReq does (limit.Merge adds what both sides
// allowed).
type RestoreReq struct {
	envelope
	Entries []Entry
	Replace bool
	Applied int64 // out: keys changed
	// Refused (out) is a slot whose gate does not allow the restore, or
	// -1: a replace needs SlotImporting, a merge SlotOwned (a key of a
	// migrating slot may be on its target already; decided here, when it runs, so that a slot closed
	// meanwhile takes nothing). A refused request changes nothing.
	Refused int
}

func (r *RestoreReq) run(sh *shard, now int64) {
	r.Applied, r.Refused = 0, -1
	if sh.gate != nil {
		for _, en := range r.Entries {
			slot := cluster.KeySlot(en.Key)
			g := sh.gate[slot-sh.slotLo]
			if (r.Replace && g != SlotImporting) || (!r.Replace && g != SlotOwned) {
				r.Refused = slot
				return
			}
		}
	}
	nowMs := floorMs(now)
	for _, en := range r.Entries {
		if !r.Replace {
			im := ImportReq{Key: en.Key, State: en.State, Expires: en.Expires}
			im.run(sh, now)
			if im.Applied {
				r.Applied++
			}
			continue
		}
		if en.Expires < nowMs {
			continue
		}
		h := sh.t.hash(en.Key)
		if ei := sh.find(en.Key, h, nowMs); ei >= 0 {
			sh.removeHash(uint32(ei), h)
		}
		ei := sh.t.insertFor(en.Key, h, limit.KindOf(en.State))
		sh.setState(ei, en.State, en.Expires)
		sh.markDirty(ei)
		sh.changed(en.Key, sh.by)
		r.Applied++
	}
}

// SyncHeld writes the held shards' changes and waits until they are on
// disk (under FsyncNo: handed to the OS), whatever the fsync policy, before
// the shards run anything else. A migration needs this twice: the target
// acknowledges keys only once they are durable, and the source lets a
// shard answer ASK for keys it dropped only once the drop is. It returns
// the store's persistence error, if any, so a failing disk refuses the
// step instead of acknowledging it.
func (ss *Session) SyncHeld() error {
	in, st := ss.inline, ss.st
	if in == nil || in.closed {
		return ErrClosed
	}
	if st.p == nil {
		return nil
	}
	var wg sync.WaitGroup
	for id, held := range in.held {
		if !held {
			continue
		}
		sh := st.shards[id]
		sh.publish()
		sh.writeDirty()
		r := sh.takeChanges()
		wg.Add(1)
		r.wg, r.noPark = &wg, true
		st.p.in <- r
	}
	wg.Wait()
	return st.PersistErr()
}

// InitGate sets every shard's gate to states before any request runs (a
// cluster node's start, before the wire layer serves): later changes go
// through SlotStateReq.
func (s *Store) InitGate(states *[cluster.SlotCount]uint8) {
	for _, sh := range s.shards {
		sh.gate = make([]uint8, sh.slotHi-sh.slotLo)
		copy(sh.gate, states[sh.slotLo:sh.slotHi])
	}
}

// PresentReq counts which of Keys (of one shard) are here and live, for a
// transaction's check in a slot being moved (its requests are not gated:
// the caller decides from the count). Repeated keys count once.
type PresentReq struct {
	envelope
	Keys     [][]byte
	Present  int // out
	Distinct int // out
	Flying   int // out: keys on their way to the target (see LandReq)
}

func (r *PresentReq) run(sh *shard, now int64) {
	r.Present, r.Distinct, r.Flying = 0, 0, 0
	nowMs := floorMs(now)
	// A transaction may name tens of thousands of keys: a set, not pairs.
	seen := make(map[string]struct{}, len(r.Keys))
	for _, k := range r.Keys {
		if _, dup := seen[string(k)]; dup {
			continue
		}
		seen[string(k)] = struct{}{}
		r.Distinct++
		if _, ok := sh.flying[string(k)]; ok {
			r.Flying++
		}
		if sh.find(k, sh.t.hash(k), nowMs) >= 0 {
			r.Present++
		}
	}
}
