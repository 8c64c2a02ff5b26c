package limit

import (
	"sync/atomic"
	"time"
)

// A Limit held in an interface is a heap copy of its value, one per limit
// per call parsed. The limits a server's traffic names are few (they come
// from its clients' configuration), so the parser interns them: a call
// naming a limit seen before reuses its interface value and allocates
// nothing for it. A limit not in the table costs the allocation it always
// did. Limits are immutable values, so sharing one is safe.

// internSlots is the size of the intern table.
const (
	internBits  = 8
	internSlots = 1 << internBits
)

// internKey is what a GCRA, FW, SWC or SWL limit is made of.
type internKey struct {
	kind Kind
	a, b uint32 // FW, SWC, SWL: Limit, 0; GCRA: MaxBurst, Count
	w    time.Duration
}

type internEntry struct {
	key internKey
	l   Limit
}

// internTable holds one limit per slot, the last one interned there. It is
// safe for concurrent use: a slot is replaced whole, atomically; two
// goroutines racing on one slot each keep the limit they built.
var internTable [internSlots]atomic.Pointer[internEntry]

// intern returns the limit k describes, from the table if it is there.
func intern(k internKey) Limit {
	h := (uint64(k.kind)<<56 ^ uint64(k.a)<<24 ^ uint64(k.b) ^ uint64(k.w)) * 0x9e3779b97f4a7c15
	slot := &internTable[h>>(64-internBits)]
	if e := slot.Load(); e != nil && e.key == k {
		return e.l
	}
	var l Limit
	switch k.kind {
	case KindGCRA:
		l = GCRA{MaxBurst: k.a, Count: k.b, Period: k.w}
	case KindFW:
		l = FW{Limit: k.a, Window: k.w}
	case KindSWC:
		l = SWC{Limit: k.a, Window: k.w}
	case KindSWL:
		l = SWL{Limit: k.a, Window: k.w}
	default:
		panic("limit: intern of a kind it does not know")
	}
	slot.Store(&internEntry{k, l})
	return l
}
