package store

import (
	"errors"
	"unsafe"

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

	// A call of one limit touches only the fields up to one: the request
	// stays a few cache lines, which matters as a server's clients keep
	// hundreds of them in their free lists, mostly out of cache.
	Decision limit.Decision
	// Err is ErrWrongType (a key holds another kind: nothing was charged),
	// or a state that does not decode (limit.ErrCorrupt).
	Err error
	// Now is the instant the call was decided at (Unix ns, the store
	// clock's): the durations of Results count from it.
	Now int64
	// Results[i] is Call.Limits[i]'s, set by the run (one's, or the
	// scratch's for several limits). Its State, when set, aliases the
	// request; a call decided on its entry's fields (decideInline) does
	// not set it: the store has written the state, and nothing reads it.
	Results []limit.Result
	one     [1]limit.Result
	x       *limitScratch // made by the first call that needs it, then kept
}

// limitScratch is a LimitReq's room for calls of several limits, or of
// a state not kept in its entry.
type limitScratch struct {
	results [limit.MaxLimits]limit.Result
	buf     []byte
	local   [limit.MaxLimits][limit.SWCStateLen]byte // states kept in their entries, encoded for Decide
	eis     [limit.MaxLimits]int64
	// Per-call scratch, kept here so a call does not zero it on the stack.
	states [limit.MaxLimits][]byte
	hashes [limit.MaxLimits]uint64
	shs    [limit.MaxLimits]*shard
	fields [limit.MaxLimits]limit.Fields // decideFields' states
	next   [limit.MaxLimits]limit.Fields // and the new ones
	// warmed: warmKeys set shs and hashes for the next lookup.
	warmed bool
	// shardOf[i] is limit i's key's shard once sharded is set (keyShards):
	// a key's slot (CRC16, its hash tag) is computed once per call, not by
	// each step that needs it.
	shardOf [limit.MaxLimits]int32
	sharded bool
}

// LimitScratchBytes is the size of the scratch a LimitReq makes for its
// first call of several limits and keeps (DropScratch lets it go).
const LimitScratchBytes = int(unsafe.Sizeof(limitScratch{}))

// DropScratch lets go of the request's scratch.
func (r *LimitReq) DropScratch() { r.x = nil }

// HasScratch reports whether the request keeps a scratch.
func (r *LimitReq) HasScratch() bool { return r.x != nil }

// keyShards returns the shard of each limit's key (see shardOf).
func (r *LimitReq) keyShards(st *Store) *[limit.MaxLimits]int32 {
	x := r.scratch()
	if !x.sharded {
		for i, s := range r.Call.Limits {
			x.shardOf[i] = int32(st.ShardOf(s.Key))
		}
		x.sharded = true
	}
	return &x.shardOf
}

// OneShard reports whether every key of the call lives on one shard, so
// that Session.Add can run it (else it is a HeldRequest, for AddHeld).
func (r *LimitReq) OneShard(st *Store) bool {
	if len(r.Call.Limits) == 1 {
		return true
	}
	sh := r.keyShards(st)
	for i := 1; i < len(r.Call.Limits); i++ {
		if sh[i] != sh[0] {
			return false
		}
	}
	return true
}

// warmKeys and warmEntries are the shard's warm pass for a held call:
// run for every call of a hold before any runs, they find each key's
// shard and hash (kept for lookup) and prefetch its index slot, then the
// entry the slot most likely names, so that the calls' cache misses
// overlap instead of each lookup waiting for its own. The shards must be
// held.
func (r *LimitReq) warmKeys(st *Store) {
	x, ids := r.scratch(), r.keyShards(st)
	for i, s := range r.Call.Limits {
		sh := st.shards[ids[i]]
		x.shs[i], x.hashes[i] = sh, sh.t.hash(s.Key)
		sh.t.prefetchHome(x.hashes[i])
	}
	x.warmed = true
}

// warmKeysOn is warmKeys for a call of several limits whose keys all
// live on sh (queued by Add: sh's warm pass), h being the first key's
// hash.
func (r *LimitReq) warmKeysOn(sh *shard, h uint64) {
	x := r.scratch()
	for i, s := range r.Call.Limits {
		if i > 0 {
			h = sh.t.hash(s.Key)
			sh.t.prefetchHome(h)
		}
		x.shs[i], x.hashes[i] = sh, h
	}
	x.warmed = true
}

func (r *LimitReq) warmEntries() {
	x := r.x
	for i := range r.Call.Limits {
		x.shs[i].t.prefetchCandidate(x.hashes[i])
	}
}

// SetCall readies the request to run call: a request reused from a free
// list forgets its last run (its results, its warm pass's findings).
func (r *LimitReq) SetCall(call limit.Call) {
	r.Call, r.Results = call, nil
	if r.x != nil {
		r.x.warmed, r.x.sharded = false, false
	}
}

// Shards returns the shards of the call's keys, ascending, without
// repeats, appended to dst.
func (r *LimitReq) Shards(st *Store, dst []int) []int {
	sh := r.keyShards(st)
	for i := range r.Call.Limits {
		dst = addShard(dst, int(sh[i]))
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
	r.Now, r.Err = now, nil
	specs := r.Call.Limits
	if len(specs) == 1 {
		r.Results = r.one[:]
		sh := one
		if sh == nil {
			sh = st.shards[st.ShardOf(specs[0].Key)]
		}
		if r.decideInline(sh, now) {
			return
		}
	}
	x := r.scratch()
	if len(specs) > 1 {
		r.Results = x.results[:len(specs)]
	}
	r.lookup(x, st, one, now)
	defer clear(x.shs[:len(specs)]) // no reference into the store past the call
	if !r.decideFields(x, now) {
		r.decideEach(x, now)
	}
}

// scratch returns the request's scratch, made on first use.
func (r *LimitReq) scratch() *limitScratch {
	if r.x == nil {
		r.x = new(limitScratch)
	}
	return r.x
}

// lookup finds each key of the call: its shard (x.shs), hash and entry
// (x.eis, -1 for a missing key).
func (r *LimitReq) lookup(x *limitScratch, st *Store, one *shard, now int64) {
	specs := r.Call.Limits
	nowMs := floorMs(now)
	hashes, shs := &x.hashes, &x.shs
	if x.warmed {
		x.warmed = false
		for i, s := range specs {
			x.eis[i] = shs[i].find(s.Key, hashes[i], nowMs)
		}
		return
	}
	x.warmed = false
	// Each key's shard, found once: a key's slot (its hash tag, CRC16)
	// costs more than the lookup in its table.
	for i, s := range specs {
		if shs[i] = one; one == nil {
			shs[i] = st.shards[st.ShardOf(s.Key)]
		}
	}
	for i, s := range specs {
		sh := shs[i]
		if i == 0 {
			hashes[0] = r.keyHash(sh.t, s.Key) // warm's, when queued by Add
		} else {
			hashes[i] = sh.t.hash(s.Key)
		}
		x.eis[i] = sh.find(s.Key, hashes[i], nowMs)
	}
}

// decideEach is decide for any call, once its keys were looked up: each
// key's state encoded for limit.Decide, the new ones stored from its
// encodings.
func (r *LimitReq) decideEach(x *limitScratch, now int64) {
	specs := r.Call.Limits
	states, hashes, shs := &x.states, &x.hashes, &x.shs
	// States are read only once every key was looked up: a lookup that
	// removes an expired key may compact the arena, and a state read
	// before it would then point into memory given back to the system.
	for i := range specs {
		states[i] = nil
		if x.eis[i] >= 0 {
			t := shs[i].t
			states[i] = t.state(t.at(uint32(x.eis[i])), x.local[i][:0])
		}
	}
	d, buf, err := limit.Decide(specs, states[:len(specs)], now, r.Call.Options, r.Results[:len(specs)], x.buf[:0])
	x.buf = buf
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
	// the scratch's buf, so writing them (which may compact an arena) is safe.
	for i, s := range specs {
		res := &r.Results[i]
		if !res.Write {
			continue
		}
		sh := shs[i]
		ei := x.eis[i]
		if ei < 0 {
			ei = int64(sh.t.insertFor(s.Key, hashes[i], limit.KindOf(res.State)))
		}
		sh.setState(uint32(ei), res.State, res.ExpireAt)
		sh.markDirty(uint32(ei))
		sh.changed(s.Key, sh.by)
	}
}

// decideInline is decide for the common call: one GCRA, FW or SWC limit
// whose key is missing or holds a state of that kind in its entry (a GCRA
// TAT, an FW or SWC state inline). It decides on the entry's fields with
// the typed decisions (limit.DecideFW, DecideSWC, DecideGCRA: Decide's
// arithmetic, without encoding the state for it and decoding its answer
// back into the entry) and stores the new fields. It reports false,
// having changed nothing, for any other call or key: decide then runs it
// as it runs every call (a key of another kind is ErrWrongType there).
func (r *LimitReq) decideInline(sh *shard, now int64) bool {
	s := &r.Call.Limits[0]
	t := sh.t
	h := r.keyHash(t, s.Key) // warm's, when queued by Add
	ei := sh.find(s.Key, h, floorMs(now))
	var e *entry
	if ei >= 0 {
		e = t.at(uint32(ei))
	}
	// entry returns the key's entry for the new state, inserting it (wide
	// for an inline kind) if it is missing.
	entry := func(k limit.Kind) *entry {
		if ei < 0 {
			ei = int64(t.insertFor(s.Key, h, k))
		}
		return t.at(uint32(ei))
	}
	res := &r.Results[0]
	switch l := s.Limit.(type) {
	case limit.FW:
		var cur limit.FWState
		if e != nil {
			if e.outKind() != limit.KindFW || !e.inlineState() {
				return false
			}
			cur = inlineFW(e)
		}
		next := limit.DecideFW(l, cur, e != nil, now, s.Cost, r.Call.Options, &r.Decision, res)
		if res.Write {
			e = entry(limit.KindFW)
			t.putFW(e, next) // wide: it held an inline state, or insertFor made it so
		}
	case limit.SWC:
		var cur limit.SWCState
		if e != nil {
			if e.outKind() != limit.KindSWC || !e.inlineState() {
				return false
			}
			cur = inlineSWC(e)
		}
		next := limit.DecideSWC(l, cur, e != nil, now, s.Cost, r.Call.Options, &r.Decision, res)
		if res.Write {
			if e = entry(limit.KindSWC); !t.putSWC(e, next) {
				// Counts past the room's 32 bits (a merged state's):
				// stored as setState stores any state that does not fit.
				x := r.scratch()
				x.buf, _ = next.AppendBinary(x.buf[:0])
				t.setState(e, x.buf)
			}
		}
	case limit.GCRA:
		var cur limit.GCRAState
		if e != nil {
			if e.outKind() != 0 {
				return false
			}
			cur.TAT = e.tat
		}
		next, err := limit.DecideGCRA(l, cur, e != nil, now, s.Cost, r.Call.Options, &r.Decision, res)
		if err != nil {
			r.Err = err
			return true
		}
		if res.Write {
			e = entry(limit.KindGCRA)
			t.setTAT(e, next.TAT)
		}
	default:
		return false
	}
	if res.Write {
		sh.setExp(e, res.ExpireAt)
		sh.markDirty(uint32(ei))
		sh.changed(s.Key, sh.by)
	}
	return true
}

// decideFields is decideEach's common case, once every key was looked up
// (x.eis, x.shs, x.hashes): every limit a GCRA, FW or SWC whose key is
// missing or holds its state in the entry. It decides on the entries'
// fields (limit.DecideFields) and stores the new ones, as decideInline
// does for one limit. It reports false, having changed nothing, for any
// other call.
func (r *LimitReq) decideFields(x *limitScratch, now int64) bool {
	specs := r.Call.Limits
	fs := &x.fields
	for i, s := range specs {
		f := limit.Fields{}
		if ei := x.eis[i]; ei >= 0 {
			e := x.shs[i].t.at(uint32(ei))
			switch k := s.Limit.Kind(); {
			case k == limit.KindGCRA && e.outKind() == 0:
				f.Kind, f.GCRA.TAT = k, e.tat
			case k == limit.KindFW && e.outKind() == k && e.inlineState():
				f.Kind, f.FW = k, inlineFW(e)
			case k == limit.KindSWC && e.outKind() == k && e.inlineState():
				f.Kind, f.SWC = k, inlineSWC(e)
			default:
				return false
			}
		} else if k := s.Limit.Kind(); k != limit.KindGCRA && k != limit.KindFW && k != limit.KindSWC {
			return false
		}
		fs[i] = f
	}
	n := len(specs)
	d, err := limit.DecideFields(specs, fs[:n], now, r.Call.Options, r.Results[:n], x.next[:n])
	if err != nil {
		r.Err = err // none: the kinds were checked
		return true
	}
	r.Decision = d
	for i, s := range specs {
		res := &r.Results[i]
		if !res.Write {
			continue
		}
		sh, t, f := x.shs[i], x.shs[i].t, &x.next[i]
		ei := x.eis[i]
		if ei < 0 {
			ei = int64(t.insertFor(s.Key, x.hashes[i], f.Kind))
		}
		e := t.at(uint32(ei))
		switch f.Kind {
		case limit.KindGCRA:
			t.setTAT(e, f.GCRA.TAT)
		case limit.KindFW:
			t.putFW(e, f.FW)
		case limit.KindSWC:
			if !t.putSWC(e, f.SWC) {
				x.buf, _ = f.SWC.AppendBinary(x.buf[:0]) // see decideInline
				t.setState(e, x.buf)
			}
		}
		sh.setExp(e, res.ExpireAt)
		sh.markDirty(uint32(ei))
		sh.changed(s.Key, sh.by)
	}
	return true
}
