package store

import (
	"errors"

	"github.com/cellserver/cellserver/limit"
)

// LimitReq is one CL.LIMIT call (spec cl-limit.md §5): every limit is
// decided against its key's current state with limit.Decide and, if all
// admit, every one with a cost above 0 is charged, in one step no other
// request can see into. Fill Call; read Decision, Results and Err after it
// ran. A LimitReq whose keys all live on one shard is an ordinary keyed
// request (Session.Add, addressed by its first key, so that the shard's
// warm pass hashes it and prefetches its entry; see Shards); one whose
// keys live on several shards is a HeldRequest (Session.AddHeld). It holds
// no reference into the store afterwards and can be reused.
type LimitReq struct {
	envelope
	Call limit.Call // parsed by limit.ParseLimit

	Decision limit.Decision
	Results  [limit.MaxLimits]limit.Result // Results[i] for Call.Limits[i]; State aliases the request
	// Err is ErrWrongType (a key holds another kind: nothing was charged),
	// or a state that does not decode (limit.ErrCorrupt).
	Err error
	// Now is the instant the call was decided at (Unix ns, the store
	// clock's): the durations of Results count from it.
	Now int64

	buf   []byte
	local [limit.MaxLimits][limit.SWCStateLen]byte // states kept in their entries, encoded for Decide
	eis   [limit.MaxLimits]int64
	// Per-call scratch, kept here so a call does not zero it on the stack.
	states [limit.MaxLimits][]byte
	hashes [limit.MaxLimits]uint64
}

// Shards returns the shards of the call's keys, ascending, without
// repeats, appended to dst.
func (r *LimitReq) Shards(st *Store, dst []int) []int {
	for _, s := range r.Call.Limits {
		dst = addShard(dst, st.ShardOf(s.Key))
	}
	return dst
}

// route addresses the request by its first key: Session.Add puts it on
// that key's shard, which must own all of its keys (Shards has one).
func (r *LimitReq) route() *envelope { return r.addressed(r, r.Call.Limits[0].Key) }

func (r *LimitReq) runHeld(st *Store, now int64) {
	r.decide(st, nil, now)
}

func (r *LimitReq) run(sh *shard, now int64) {
	r.decide(nil, sh, now)
}

// decide runs the call at now, on shard one whose goroutine this is, or
// (one nil) on st's shards, parked (Session.AddHeld). Not a function
// giving each key's shard: passed through an interface it would escape,
// an allocation per call.
func (r *LimitReq) decide(st *Store, one *shard, now int64) {
	r.Now = now
	shardOf := func(key []byte) *shard {
		if one != nil {
			return one
		}
		return st.shards[st.ShardOf(key)]
	}
	r.Err = nil
	specs := r.Call.Limits
	nowMs := floorMs(now)
	states, hashes := &r.states, &r.hashes
	for i, s := range specs {
		sh := shardOf(s.Key)
		if i == 0 {
			hashes[0] = r.keyHash(sh.t, s.Key) // warm's, when queued by Add
		} else {
			hashes[i] = sh.t.hash(s.Key)
		}
		r.eis[i] = sh.find(s.Key, hashes[i], nowMs)
	}
	// States are read only once every key was looked up: a lookup that
	// removes an expired key may compact the arena, and a state read
	// before it would then point into memory given back to the system.
	for i, s := range specs {
		states[i] = nil
		if r.eis[i] >= 0 {
			t := shardOf(s.Key).t
			states[i] = t.state(t.at(uint32(r.eis[i])), r.local[i][:0])
		}
	}
	d, buf, err := limit.Decide(specs, states[:len(specs)], now, r.Call.Options, r.Results[:len(specs)], r.buf[:0])
	r.buf = buf
	for i := range specs {
		states[i] = nil // no reference into the tables past the call
	}
	if err != nil {
		if errors.Is(err, limit.ErrWrongType) {
			err = ErrWrongType
		}
		r.Err = err
		return
	}
	r.Decision = d
	// The states Decide read may alias the tables; the new ones are in
	// r.buf, so writing them (which may compact an arena) is safe.
	for i, s := range specs {
		res := &r.Results[i]
		if !res.Write {
			continue
		}
		sh := shardOf(s.Key)
		ei := r.eis[i]
		if ei < 0 {
			ei = int64(sh.t.insertFor(s.Key, hashes[i], limit.KindOf(res.State)))
		}
		sh.setState(uint32(ei), res.State, res.ExpireAt)
		sh.markDirty(uint32(ei))
		sh.changed(s.Key, sh.by)
	}
}
