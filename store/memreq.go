package store

import (
	"unsafe"

	"github.com/cellserver/cellserver/limit"
)

// MemReq is MEMORY USAGE, STRLEN and OBJECT: what a key holds and the
// memory it takes in the table.
type MemReq struct {
	envelope
	Key   []byte
	Found bool       // out: the key is live
	Kind  limit.Kind // out: the kind of its state
	TAT   uint64     // out: a GCRA key's TAT (what GET returns)
	// Bytes is the key's footprint, as the table lays it out: its entry
	// (two for a pair-sized key or a wide entry), its index slot, and what
	// it keeps in the arena (a long key, a state that is not inline).
	// Pages the table holds but no key uses are nobody's.
	Bytes int64
}

func (r *MemReq) route() *envelope { return r.addressed(r, r.Key) }

func (r *MemReq) run(sh *shard, now int64) {
	r.Found, r.Kind, r.TAT, r.Bytes = false, 0, 0, 0
	ei := sh.find(r.Key, r.keyHash(sh.t, r.Key), floorMs(now))
	if ei < 0 {
		return
	}
	e := sh.t.at(uint32(ei))
	r.Found, r.Kind = true, e.kind()
	if e.outKind() == 0 {
		r.TAT = e.tat
	}
	r.Bytes = entryFootprint(sh.t, e)
}

// entryFootprint is the memory e's key and state take, see MemReq.Bytes.
func entryFootprint(t *table, e *entry) int64 {
	n := int64(unsafe.Sizeof(entry{})) + 8 // the entry and its index slot
	if e.isPair() || e.isWide() {
		n += int64(unsafe.Sizeof(entry{}))
	}
	if e.inArena() {
		n += int64(e.keyLen())
	}
	if e.outKind() != 0 && !e.inlineState() {
		n += int64(len(t.arena.getState(e.tat))) + stateLenSize
	}
	return n
}
