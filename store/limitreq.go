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
	// scratch's for several limits). Its State is nil once the run is
	// done: the store has written the new state, and nothing reads it.
	Results []limit.Result
	one     [1]limit.Result
	x       *limitScratch // made by the first call that needs it, then kept
}

// limitScratch is a LimitReq's room for calls of several limits, or of
// a state not kept in its entry: what must outlive one step of the call
// (each key's shard and hash, from the warm pass to the lookup; the results,
// until the reply is written). What a call needs only while it is decided
// is its shard's (limitWork): a client's pooled requests are mostly out of
// cache, a shard's room is not. A call of n limits touches the first line
// and n results.
type limitScratch struct {
	// warmed: warmKeys set keys' shards and hashes for the next lookup.
	// sharded: keys' shard indexes are set (keyShards): a key's slot (CRC16,
	// its hash tag) is computed once per call, not by each step that needs it.
	warmed, sharded bool
	keys            [limit.MaxLimits]keyRef
	results         [limit.MaxLimits]limit.Result
}

// keyRef is where one key of a call lives.
type keyRef struct {
	hash  uint64
	sh    *shard
	shard int32
}

// limitWork is the room a call of several limits (or of a state not kept
// in its entry) uses while it is decided, one per shard: a call runs on a
// shard it owns the keys of (its first key's), which no other call uses
// meanwhile.
type limitWork struct {
	eis    [limit.MaxLimits]int64
	states [limit.MaxLimits][]byte
	local  [limit.MaxLimits][limit.SWCStateLen]byte // states kept in their entries, encoded for Decide
	fields [limit.MaxLimits]limit.Fields            // decideFields' states
	next   [limit.MaxLimits]limit.Fields            // and the new ones
	// buf holds the new states decideEach encodes until it has stored
	// them. It is the shard's, not the request's: an SWL log is up to
	// 120 KB, and a buffer per request would be allocated afresh by each
	// call of a pipeline, whose requests are all in flight at once.
	buf []byte
}

// maxWorkBuf bounds the state buffer a shard keeps between calls: a call
// of 16 SWL limits of 10,000 entries each needs about 2 MB once.
const maxWorkBuf = 256 << 10

// work returns the shard's limitWork, made on first use.
func (sh *shard) work() *limitWork {
	if sh.lw == nil {
		sh.lw = new(limitWork)
	}
	return sh.lw
}

// LimitScratchBytes is the size of the scratch a LimitReq makes for its
// first call of several limits and keeps (DropScratch lets it go).
const LimitScratchBytes = int(unsafe.Sizeof(limitScratch{}))

// Forget drops the request's references into the keyspace; call it once
// the results were read.
func (r *LimitReq) Forget() { r.envelope.Forget() }

// DropScratch lets go of the request's scratch.
func (r *LimitReq) DropScratch() { r.x = nil }

// HasScratch reports whether the request keeps a scratch.
func (r *LimitReq) HasScratch() bool { return r.x != nil }

// keyShards returns the keys of the call with their shard indexes set
// (see sharded).
func (r *LimitReq) keyShards(st *Store) *[limit.MaxLimits]keyRef {
	x := r.scratch()
	if !x.sharded {
		for i, s := range r.Call.Limits {
			x.keys[i].shard = int32(st.ShardOf(s.Key))
		}
		x.sharded = true
	}
	return &x.keys
}

// OneShard reports whether every key of the call lives on one shard, so
// that Session.Add can run it (else it is a HeldRequest, for AddHeld).
func (r *LimitReq) OneShard(st *Store) bool {
	if len(r.Call.Limits) == 1 {
		return true
	}
	sh := r.keyShards(st)
	for i := 1; i < len(r.Call.Limits); i++ {
		if sh[i].shard != sh[0].shard {
			return false
		}
	}
	return true
}

// warmKeys and warmEntries are the warm pass of a call of several limits:
// run for every call of a batch or hold before any runs, they find each
// key's shard and hash (kept for the lookup) and prefetch its index slot,
// then the entry the slot most likely names, so that the calls' cache
// misses overlap instead of each lookup waiting for its own. one is the
// shard that holds every key (a call queued by Add: that shard's warm
// pass, which hashed and prefetched the first key already), or nil for a
// held call, whose shards st must have held.
func (r *LimitReq) warmKeys(st *Store, one *shard) {
	x := r.scratch()
	r.locate(x, st, one)
	for i := range r.Call.Limits {
		if i > 0 || one == nil {
			x.keys[i].sh.t.prefetchHome(x.keys[i].hash)
		}
	}
	x.warmed = true
}

func (r *LimitReq) warmEntries() {
	x := r.x
	for i := range r.Call.Limits {
		x.keys[i].sh.t.prefetchCandidate(x.keys[i].hash)
	}
}

// SetCall readies the request to run call: a request reused from a free
// list forgets its last run (its results, its warm pass's findings).
func (r *LimitReq) SetCall(call limit.Call) {
	r.Call, r.Results = call, nil
	if x := r.x; x != nil {
		x.warmed, x.sharded = false, false
		if n := len(call.Limits); n > 1 {
			// The call writes its results when it runs, after the rest of
			// the pipeline was queued: fetched now, they are there by then.
			p := uintptr(unsafe.Pointer(&x.results[0]))
			for off := uintptr(0); off < uintptr(n)*unsafe.Sizeof(x.results[0]); off += 64 {
				prefetch(p + off)
			}
		}
	}
}

// Shards returns the shards of the call's keys, ascending, without
// repeats, appended to dst.
func (r *LimitReq) Shards(st *Store, dst []int) []int {
	sh := r.keyShards(st)
	for i := range r.Call.Limits {
		dst = addShard(dst, int(sh[i].shard))
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
	r.locate(x, st, one)
	// The call's keys are all on shards this goroutine runs (or holds):
	// the first key's room is the call's alone while it is decided.
	w := x.keys[0].sh.work()
	r.lookup(x, w, now)
	defer r.clearShards(x) // no reference into the store past the call
	if !r.decideFields(x, w, now) {
		r.decideEach(x, w, now)
	}
}

// clearShards clears the call's references into the store.
func (r *LimitReq) clearShards(x *limitScratch) {
	for i := range r.Call.Limits {
		x.keys[i].sh = nil
	}
}

// scratch returns the request's scratch, made on first use.
func (r *LimitReq) scratch() *limitScratch {
	if r.x == nil {
		r.x = new(limitScratch)
	}
	return r.x
}

// locate sets each key's shard and hash (x.keys), unless the warm pass
// did: on shard one, or (one nil) on st's shards.
func (r *LimitReq) locate(x *limitScratch, st *Store, one *shard) {
	if x.warmed {
		x.warmed = false
		return
	}
	specs := r.Call.Limits
	ks := &x.keys
	if one == nil {
		ks = r.keyShards(st) // a key's slot is found once per call
	}
	for i, s := range specs {
		k := &ks[i]
		if k.sh = one; one == nil {
			k.sh = st.shards[k.shard]
		}
		if i == 0 {
			k.hash = r.keyHash(k.sh.t, s.Key) // warm's, when queued by Add
		} else {
			k.hash = k.sh.t.hash(s.Key)
		}
	}
}

// lookup finds each located key's entry (w.eis, -1 for a missing key).
func (r *LimitReq) lookup(x *limitScratch, w *limitWork, now int64) {
	nowMs := floorMs(now)
	for i, s := range r.Call.Limits {
		k := &x.keys[i]
		w.eis[i] = k.sh.find(s.Key, k.hash, nowMs)
	}
}

// decideEach is decide for any call, once its keys were looked up: each
// key's state encoded for limit.Decide, the new ones stored from its
// encodings.
func (r *LimitReq) decideEach(x *limitScratch, w *limitWork, now int64) {
	specs := r.Call.Limits
	states := &w.states
	// States are read only once every key was looked up: a lookup that
	// removes an expired key may compact the arena, and a state read
	// before it would then point into memory given back to the system.
	for i := range specs {
		states[i] = nil
		if w.eis[i] >= 0 {
			t := x.keys[i].sh.t
			states[i] = t.state(t.at(uint32(w.eis[i])), w.local[i][:0])
		}
	}
	d, buf, err := limit.Decide(specs, states[:len(specs)], now, r.Call.Options, r.Results[:len(specs)], w.buf[:0])
	w.buf = buf
	defer func() {
		for i := range specs {
			r.Results[i].State = nil // the shard's buffer, reused by its next call
		}
		if cap(w.buf) > maxWorkBuf {
			w.buf = nil
		}
	}()
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
	// the shard's buf, so writing them (which may compact an arena) is safe.
	for i, s := range specs {
		res := &r.Results[i]
		if !res.Write {
			continue
		}
		sh := x.keys[i].sh
		ei := w.eis[i]
		if ei < 0 {
			ei = int64(sh.t.insertFor(s.Key, x.keys[i].hash, limit.KindOf(res.State)))
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
	ei, stale := sh.findOrStale(s.Key, h, floorMs(now), s.Limit.Kind())
	var e *entry // the live key's entry; nil for a missing or stale one
	if ei >= 0 && !stale {
		e = t.at(uint32(ei))
	}
	// entry returns the key's entry for the new state: the stale one, or
	// a new one (wide for an inline kind) if it is missing.
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
				w := sh.work()
				w.buf, _ = next.AppendBinary(w.buf[:0])
				t.setState(e, w.buf)
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
		r.Err = err // with an error res does not write: a stale entry is removed below
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
	} else if stale {
		sh.removeHash(uint32(ei), h)
	}
	return true
}

// decideFields is decideEach's common case, once every key was looked up
// (w.eis, x.keys): every limit a GCRA, FW or SWC whose key is
// missing or holds its state in the entry. It decides on the entries'
// fields (limit.DecideFields) and stores the new ones, as decideInline
// does for one limit. It reports false, having changed nothing, for any
// other call.
func (r *LimitReq) decideFields(x *limitScratch, w *limitWork, now int64) bool {
	specs := r.Call.Limits
	fs := &w.fields
	for i, s := range specs {
		f := limit.Fields{}
		if ei := w.eis[i]; ei >= 0 {
			e := x.keys[i].sh.t.at(uint32(ei))
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
	d, err := limit.DecideFields(specs, fs[:n], now, r.Call.Options, r.Results[:n], w.next[:n])
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
		sh, f := x.keys[i].sh, &w.next[i]
		t := sh.t
		ei := w.eis[i]
		if ei < 0 {
			ei = int64(t.insertFor(s.Key, x.keys[i].hash, f.Kind))
		}
		e := t.at(uint32(ei))
		switch f.Kind {
		case limit.KindGCRA:
			t.setTAT(e, f.GCRA.TAT)
		case limit.KindFW:
			t.putFW(e, f.FW)
		case limit.KindSWC:
			if !t.putSWC(e, f.SWC) {
				w.buf, _ = f.SWC.AppendBinary(w.buf[:0]) // see decideInline
				t.setState(e, w.buf)
			}
		}
		sh.setExp(e, res.ExpireAt)
		sh.markDirty(uint32(ei))
		sh.changed(s.Key, sh.by)
	}
	return true
}
