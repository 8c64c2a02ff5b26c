package store

import (
	"errors"
	"sort"
	"sync"

	"github.com/cellserver/cellserver/gcra"
	"github.com/cellserver/cellserver/limit"
)

// LimitReq is one CL.LIMIT call (spec cl-limit.md §5): every limit is
// decided against its key's current state with limit.Decide and, if all
// admit, every one with a cost above 0 is charged, in one step no other
// request can see into. Fill Call; read Decision, Results and Err after it
// ran. A LimitReq whose keys all live on one shard is an ordinary typed
// request (an OpReq op on that shard, see Shards); one whose keys live on
// several shards runs with Store.RunHeld. It holds no reference into the
// store afterwards and can be reused.
type LimitReq struct {
	Call limit.Call // parsed by limit.ParseLimit

	Decision limit.Decision
	Results  [limit.MaxLimits]limit.Result // Results[i] for Call.Limits[i]; State aliases the request
	// Err is ErrWrongType (a key holds another kind: nothing was charged),
	// or a state that does not decode (limit.ErrCorrupt).
	Err error

	buf  []byte
	gcra [limit.MaxLimits][gcraStateLen]byte // GCRA TATs encoded for Decide
	eis  [limit.MaxLimits]int64
}

// Shards returns the shards of the call's keys, ascending, without
// repeats, appended to dst.
func (r *LimitReq) Shards(st *Store, dst []int) []int {
	for _, s := range r.Call.Limits {
		i := st.ShardOf(s.Key)
		j := sort.SearchInts(dst, i)
		if j == len(dst) || dst[j] != i {
			dst = append(dst, 0)
			copy(dst[j+1:], dst[j:])
			dst[j] = i
		}
	}
	return dst
}

func (r *LimitReq) run(sh *shard, now int64) {
	r.decide(func([]byte) *shard { return sh }, now)
}

// decide runs the call at now; shardOf gives each key's shard, whose
// goroutine is this one or is held (RunHeld).
func (r *LimitReq) decide(shardOf func(key []byte) *shard, now int64) {
	r.Err = nil
	specs := r.Call.Limits
	nowMs := floorMs(now)
	var states [limit.MaxLimits][]byte
	var hashes [limit.MaxLimits]uint64
	for i, s := range specs {
		sh := shardOf(s.Key)
		hashes[i] = sh.t.hash(s.Key)
		r.eis[i] = sh.find(s.Key, hashes[i], nowMs)
		states[i] = nil
		if r.eis[i] >= 0 {
			states[i] = sh.t.state(sh.t.at(uint32(r.eis[i])), r.gcra[i][:0])
		}
	}
	d, buf, err := limit.Decide(specs, states[:len(specs)], now, r.Call.Options, r.Results[:len(specs)], r.buf[:0])
	r.buf = buf
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
			ei = int64(sh.t.insertHash(s.Key, hashes[i]))
		}
		sh.setState(uint32(ei), res.State, res.ExpireAt)
		sh.markDirty(uint32(ei))
	}
}

// hold is a control batch that parks a shard's goroutine: the shard
// signals held, waits for release, then hands the changes made meanwhile
// to persistence and calls wg.Done (under FsyncAlways once they are
// synced), like the end of a request batch.
type hold struct {
	held    chan struct{}
	release chan struct{}
}

// RunHeld runs r, whose keys may live on several shards, atomically: it
// parks every involved shard's goroutine, in ascending shard order (two
// calls never wait on each other in a cycle, so they cannot deadlock),
// reads the clock once all are held, decides and charges on this
// goroutine, then lets them go, and returns once every change is as
// durable as a request batch's. Requests on one shard never pay for this:
// they go through a Session as an OpReq.
func (s *Store) RunHeld(r *LimitReq) {
	var buf [limit.MaxLimits]int
	ids := r.Shards(s, buf[:0])
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		r.Err = ErrClosed
		return
	}
	var wg sync.WaitGroup
	h := &hold{held: make(chan struct{}, 1), release: make(chan struct{})}
	bs := make([]batch, len(ids))
	for i, id := range ids {
		bs[i] = batch{wg: &wg, ctl: ctlHold, hold: h}
		wg.Add(1)
		s.shards[id].in <- &bs[i]
		<-h.held
	}
	func() {
		defer func() {
			if p := recover(); p != nil {
				r.Err = ErrPanic
			}
		}()
		r.decide(func(key []byte) *shard { return s.shards[s.ShardOf(key)] }, s.cfg.Clock.Now())
	}()
	close(h.release)
	wg.Wait()
}

// runHold is the shard's side of RunHeld.
func (sh *shard) runHold(b *batch) {
	b.hold.held <- struct{}{}
	<-b.hold.release
	sh.publish()
	if sh.writeThrough() {
		sh.writeDirty()
		sh.sendChanges(b.wg)
		return
	}
	b.wg.Done()
}

// PeekReq is CL.PEEK: CL.THROTTLE's decision on a GCRA key at this instant,
// written nowhere (no key created, no value or TTL changed, nothing
// recorded for persistence).
type PeekReq struct {
	Key    []byte
	Params gcra.Params
	Result gcra.Result // out
	Err    error       // out: ErrWrongType for a key of another kind, or gcra's
}

func (r *PeekReq) run(sh *shard, now int64) {
	r.Err = nil
	h := sh.t.hash(r.Key)
	ei := sh.find(r.Key, h, floorMs(now))
	var tat uint64
	if ei >= 0 {
		e := sh.t.at(uint32(ei))
		if e.outKind() != 0 {
			r.Err = ErrWrongType
			return
		}
		tat = e.tat
	}
	r.Result, r.Err = gcra.Throttle(r.Params, tat, ei >= 0, now)
}

// InspectReq is CL.INSPECT: a copy of a key's encoded state and its PTTL.
type InspectReq struct {
	Key   []byte
	Found bool   // out
	State []byte // out: limit.Encode's bytes (a copy)
	PTTL  int64  // out: -1 no expiry, else ms left
}

func (r *InspectReq) run(sh *shard, now int64) {
	nowMs := floorMs(now)
	h := sh.t.hash(r.Key)
	ei := sh.find(r.Key, h, nowMs)
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
