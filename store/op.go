package store

import (
	"encoding/binary"
	"errors"

	"github.com/cellserver/cellserver/gcra"
	"github.com/cellserver/cellserver/limit"
)

// Kind says what an Op does.
type Kind uint8

// Op kinds. Single-key kinds are routed to the key's shard (Session.Add);
// shard-wide kinds (DBSize, Flush, Scan, Keys, ...) go to the shard named in
// Session.AddTo.
const (
	OpThrottle  Kind = iota // CL.THROTTLE: Params in, Result/Err out
	OpGet                   // TAT, Found
	OpDel                   // N = 1 if a live key was removed
	OpExists                // N = 1 if the key is live
	OpPTTL                  // N = -2 missing, -1 no expiry, else ms left
	OpDBSize                // N = live keys in the shard
	OpFlush                 // remove every key of the shard
	OpScan                  // from Cursor, look at Count entries; Keys, N examined, Cursor (0 = shard done)
	OpKeys                  // every live key matching Pattern
	OpSlotCount             // N = live keys in Slot (route with AddTo(ShardOfSlot))
	OpSlotKeys              // up to Count live keys in Slot
	OpDropSlots             // remove every key whose slot is in Ranges, from memory and disk
	OpDumpSlots             // Entries = every live key whose slot is in Ranges
	OpType                  // N = the key's limit.Kind (KindGCRA for a TAT), 0 if missing
	OpReq                   // run Req, a typed request (LimitReq, ImportReq); nothing else of the Op is used

	opSweep     // one step of the expiry sweep, run on the owner (tests)
	opSnapshot  // rewrite the shard's keys to disk (after a reopen)
	opSnapRound // start the shard's snapshot of round Cursor
	opWriteOut  // start a write-out, as the persist tick does (tests)
	opStep      // take the next write-out or snapshot step now (tests)
	opPersist   // write changed keys out now, as the persist tick does (tests)
	opOldIndex  // N = slots of the key index still being migrated (tests)
)

// Errors an Op can carry.
var (
	// ErrClosed: the store was closed before the op ran.
	ErrClosed = errors.New("store: closed")
	// ErrPanic: executing the op panicked; the shard recovered and goes on.
	ErrPanic = errors.New("store: internal error")
	// ErrWrongType: the key holds a state of another kind than the request's
	// (a CL.LIMIT state for GET or CL.THROTTLE, another algorithm for
	// CL.LIMIT); nothing was changed. Front ends word it (WRONGTYPE).
	ErrWrongType = errors.New("store: wrong kind of value")
)

// Op is one unit of work for a shard owner. The caller fills the inputs, hands
// it to a Session and reads the outputs after Session.Run returns. An Op
// holds no reference into the store after Run, so it can be reused.
type Op struct {
	Kind   Kind
	Key    []byte      // single-key kinds
	Params gcra.Params // OpThrottle

	// Scan/Keys inputs.
	Pattern []byte   // glob; nil matches all
	Count   int      // Scan: entries to look at; SlotKeys: keys wanted
	Slot    int      // SlotCount, SlotKeys
	Ranges  [][2]int // DropSlots: inclusive slot ranges

	// Req is the typed request of an OpReq op. New kinds of request are
	// typed requests, not more fields here: the union is on its way out.
	Req Request

	// Outputs.
	Err     error
	Result  gcra.Result // OpThrottle
	TAT     uint64      // OpGet
	Found   bool        // OpGet
	N       int64
	Cursor  uint64   // OpScan: in and out
	Keys    [][]byte // OpScan, OpKeys: copies, safe to keep
	Entries []Entry  // OpDumpSlots

	hash uint64 // Key's table hash, computed by the shard's warm pass
	cand int64  // warm's guess at Key's entry, from the index (-1: none); set and read by warm only
}

// Entry is one key's limiter state, as moved between cluster nodes.
type Entry struct {
	Key     []byte
	State   []byte // limit.Encode's bytes, whatever the kind (a copy)
	Expires int64  // Unix ms; NoExpiry for none
}

// TAT returns the GCRA TAT of a GCRA entry, false for any other kind.
func (e *Entry) TAT() (uint64, bool) {
	if limit.KindOf(e.State) != limit.KindGCRA || len(e.State) != gcraStateLen {
		return 0, false
	}
	return binary.BigEndian.Uint64(e.State[2:]), true
}

// NoExpiry is Entry.Expires for a key without a TTL.
const NoExpiry = noExpiry

// keyed reports whether the op names one key.
func (op *Op) keyed() bool { return op.Kind <= OpPTTL || op.Kind == OpType }

// Request is a typed request a shard runs on its goroutine, carried by an
// OpReq op (Session.AddTo the shard of its keys). Its implementations are
// this package's (LimitReq, ImportReq).
type Request interface {
	run(sh *shard, now int64)
}

// ImportReq merges one key's state moved from another node (CLUSTER
// IMPORTSTATE) into the local one with limit.Merge: the result charges what
// both allowed, never "the larger wins". A state of another kind than the
// local one is not merged (the local one stays); an expired one (Expires
// before now) neither.
type ImportReq struct {
	Key     []byte
	State   []byte // limit.Encode's bytes
	Expires int64  // Unix ms; NoExpiry for none
	Applied bool   // out: the key changed
	Err     error  // out: the local or the moved state does not decode
}
