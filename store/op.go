package store

import (
	"encoding/binary"
	"errors"

	"github.com/cellserver/cellserver/limit"
)

// Errors a request can carry.
var (
	// ErrClosed: the store was closed before the request ran (its Status).
	ErrClosed = errors.New("store: closed")
	// ErrPanic: running the request panicked; the shard recovered and goes
	// on (its Status).
	ErrPanic = errors.New("store: internal error")
	// ErrWrongType: the key holds a state of another kind than the request's
	// (a CL.LIMIT state for GET or CL.THROTTLE, another algorithm for
	// CL.LIMIT); nothing was changed. Front ends word it (WRONGTYPE).
	ErrWrongType = errors.New("store: wrong kind of value")
)

// Request is one unit of work a shard runs on its goroutine: one of this
// package's request types (ThrottleReq, DelReq, ScanReq, LimitReq, ...),
// each with its own inputs and outputs. The caller fills the inputs, hands
// the request to a Session (Add if it names one key, else AddTo its shard)
// and reads the outputs after Session.Run returns, once Status is nil. A
// request holds no reference into the store after Run, so it can be reused.
type Request interface {
	// Status is the store's outcome, not the request's: nil once it ran,
	// ErrClosed if the store was closed first, ErrPanic if running it
	// panicked (its outputs then mean nothing).
	Status() error
	env() *envelope
	run(sh *shard, now int64)
}

// KeyedRequest is a request that names one key (CL.THROTTLE, GET, DEL,
// ...): Session.Add routes it to the key's shard, whose batch hashes the
// keys and prefetches their entries before running any.
type KeyedRequest interface {
	Request
	route() *envelope // the envelope, addressed by the request's key
}

// envelope is what every request type embeds: how a Session carries it to
// a shard, and the store-level status. Its zero value is ready.
type envelope struct {
	req    Request
	status error
	keyed  bool   // queued by Session.Add: key and hash are the request's key's
	key    []byte // the routing key, for the warm pass
	hash   uint64 // key's table hash, computed by the shard's warm pass
	cand   int64  // warm's guess at key's entry, from the index (-1: none); set and read by warm only
	asking bool   // the client sent ASKING for this request (cluster mode: see shard.admit)
	nogate bool   // not a request on the key's data (tracking interest): never redirected
	inTx   bool   // run by an EXEC whose keys were checked together (Session.SetInTx)
}

// addressed readies the envelope of req, a request on key, for
// Session.Add.
func (e *envelope) addressed(req Request, key []byte) *envelope {
	e.req, e.key, e.keyed, e.nogate = req, key, true, false
	return e
}

// keyHash returns the table hash of key, the envelope's request's key:
// the warm pass's, or computed now for a request queued otherwise.
func (e *envelope) keyHash(t *table, key []byte) uint64 {
	if !e.keyed {
		e.hash = t.hash(key)
	}
	return e.hash
}

// Forget drops the request's routing key once its outputs were read, so
// that a request kept for reuse does not pin the memory its key was in (a
// client's read buffer).
func (e *envelope) Forget() { e.key = nil }

// Status reports whether the store ran the request (see Request.Status).
func (e *envelope) Status() error { return e.status }

func (e *envelope) env() *envelope { return e }

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

// shardFunc runs f on a shard's goroutine, in order with the shard's
// requests: the store's own control steps (a resync, a snapshot round) and
// tests' hooks into the shard.
type shardFunc struct {
	envelope
	f func(sh *shard, now int64)
}

func (r *shardFunc) run(sh *shard, now int64) { r.f(sh, now) }

// newShardFunc returns f's request, in its envelope, for a batch sent to
// a shard directly (not through a Session).
func newShardFunc(f func(sh *shard, now int64)) *envelope {
	r := &shardFunc{f: f}
	r.req = r
	return &r.envelope
}
