package store

import (
	"github.com/cellserver/cellserver/gcra"
	"github.com/cellserver/cellserver/limit"
)

// The requests on one key. Each is a KeyedRequest: queue it with
// Session.Add.

// ThrottleReq is CL.THROTTLE: a GCRA decision on Key with Params, charged
// if it admits (the key is created if missing).
type ThrottleReq struct {
	envelope
	Key    []byte
	Params gcra.Params
	Result gcra.Result // out
	Err    error       // out: ErrWrongType for a key of another kind, or gcra's
}

// findTAT finds a live key's GCRA TAT: its entry (-1: no live key, tat
// 0) or ErrWrongType if it holds another kind.
func (sh *shard) findTAT(key []byte, h uint64, nowMs int64) (ei int64, tat uint64, err error) {
	ei = sh.find(key, h, nowMs)
	if ei < 0 {
		return -1, 0, nil
	}
	e := sh.t.at(uint32(ei))
	if e.outKind() != 0 {
		return ei, 0, ErrWrongType
	}
	return ei, e.tat, nil
}

func (r *ThrottleReq) route() *envelope { return r.addressed(r, r.Key) }

func (r *ThrottleReq) run(sh *shard, now int64) {
	nowMs := floorMs(now)
	h := r.keyHash(sh.t, r.Key)
	ei, stale := sh.findOrStale(r.Key, h, nowMs, limit.KindGCRA)
	var tat uint64
	if ei >= 0 && !stale {
		e := sh.t.at(uint32(ei))
		if e.outKind() != 0 {
			r.Err = ErrWrongType
			return
		}
		tat = e.tat
	}
	res, err := gcra.Throttle(r.Params, tat, ei >= 0 && !stale, now)
	r.Result, r.Err = res, err
	if err != nil || !res.Write {
		if stale {
			sh.removeHash(uint32(ei), h)
		}
		return
	}
	exp := int64(noExpiry)
	if res.Expiry == gcra.ExpireAfter {
		exp = nowMs + res.TTLMillis
	}
	if ei < 0 {
		ei = int64(sh.t.insertHash(r.Key, h))
	} else if e := sh.t.at(uint32(ei)); !stale && e.tat == res.NewTAT && e.exp() == exp {
		return // a peek that rewrites the same state: nothing to write to disk
	}
	sh.set(uint32(ei), res.NewTAT, exp)
	sh.markDirty(uint32(ei))
	sh.changed(r.Key, sh.by)
}

// GetReq is GET: a GCRA key's TAT.
type GetReq struct {
	envelope
	Key   []byte
	Found bool   // out: the key is live
	TAT   uint64 // out: its TAT in Unix ns, if Found and Err is nil
	Err   error  // out: ErrWrongType for a key of another kind
}

func (r *GetReq) route() *envelope { return r.addressed(r, r.Key) }

func (r *GetReq) run(sh *shard, now int64) {
	ei := sh.find(r.Key, r.keyHash(sh.t, r.Key), floorMs(now))
	r.Found, r.TAT, r.Err = ei >= 0, 0, nil
	if r.Found {
		if e := sh.t.at(uint32(ei)); e.outKind() != 0 {
			r.Err = ErrWrongType
		} else {
			r.TAT = e.tat
		}
	}
}

// DelReq is DEL, UNLINK and CL.RESET of one key: it removes the key from
// memory and from disk.
type DelReq struct {
	envelope
	Key     []byte
	Removed bool // out: a live key was removed
}

func (r *DelReq) route() *envelope { return r.addressed(r, r.Key) }

func (r *DelReq) run(sh *shard, now int64) {
	r.Removed = false
	if ei := sh.find(r.Key, r.keyHash(sh.t, r.Key), floorMs(now)); ei >= 0 {
		sh.changed(r.Key, sh.by)
		sh.removeHash(uint32(ei), r.hash)
		r.Removed = true
	}
}

// ExistsReq is EXISTS of one key.
type ExistsReq struct {
	envelope
	Key    []byte
	Exists bool // out: the key is live
}

func (r *ExistsReq) route() *envelope { return r.addressed(r, r.Key) }

func (r *ExistsReq) run(sh *shard, now int64) {
	r.Exists = sh.find(r.Key, r.keyHash(sh.t, r.Key), floorMs(now)) >= 0
}

// PTTLReq is PTTL and TTL: a key's time to live.
type PTTLReq struct {
	envelope
	Key  []byte
	PTTL int64 // out: ms left; -1 no expiry; -2 no such key
}

func (r *PTTLReq) route() *envelope { return r.addressed(r, r.Key) }

func (r *PTTLReq) run(sh *shard, now int64) {
	nowMs := floorMs(now)
	ei := sh.find(r.Key, r.keyHash(sh.t, r.Key), nowMs)
	switch {
	case ei < 0:
		r.PTTL = -2
	case sh.t.at(uint32(ei)).exp() == noExpiry:
		r.PTTL = -1
	default:
		r.PTTL = sh.t.at(uint32(ei)).exp() - nowMs
	}
}

// TypeReq is TYPE: the kind of state a key holds.
type TypeReq struct {
	envelope
	Key  []byte
	Kind limit.Kind // out: limit.KindGCRA for a TAT; 0 if there is no such key
}

func (r *TypeReq) route() *envelope { return r.addressed(r, r.Key) }

func (r *TypeReq) run(sh *shard, now int64) {
	r.Kind = 0
	if ei := sh.find(r.Key, r.keyHash(sh.t, r.Key), floorMs(now)); ei >= 0 {
		r.Kind = sh.t.at(uint32(ei)).kind()
	}
}
