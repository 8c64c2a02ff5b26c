package store

import "github.com/cellserver/cellserver/gcra"

// PeekReq is CL.PEEK: CL.THROTTLE's decision on a GCRA key at this instant,
// written nowhere (no key created, no value or TTL changed, nothing
// recorded for persistence).
type PeekReq struct {
	envelope
	Key    []byte
	Params gcra.Params
	Result gcra.Result // out
	Err    error       // out: ErrWrongType for a key of another kind, or gcra's
}

func (r *PeekReq) route() *envelope { return r.addressed(r, r.Key) }

func (r *PeekReq) run(sh *shard, now int64) {
	ei, tat, err := sh.findTAT(r.Key, r.keyHash(sh.t, r.Key), floorMs(now))
	if r.Err = err; err != nil {
		return
	}
	r.Result, r.Err = gcra.Throttle(r.Params, tat, ei >= 0, now)
}

// InspectReq is CL.INSPECT: a copy of a key's encoded state and its PTTL.
type InspectReq struct {
	envelope
	Key   []byte
	Found bool   // out
	State []byte // out: limit.Encode's bytes (a copy)
	PTTL  int64  // out: -1 no expiry, else ms left
}

func (r *InspectReq) route() *envelope { return r.addressed(r, r.Key) }

func (r *InspectReq) run(sh *shard, now int64) {
	nowMs := floorMs(now)
	ei := sh.find(r.Key, r.keyHash(sh.t, r.Key), nowMs)
	r.Found = ei >= 0
	r.State = r.State[:0]
	if !r.Found {
		return
	}
	e := sh.t.at(uint32(ei))
	r.State = append(r.State, sh.t.state(e, nil)...)
	r.PTTL = -1
	if e.exp() != noExpiry {
		r.PTTL = e.exp() - nowMs
	}
}
