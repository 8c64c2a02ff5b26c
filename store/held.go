package store

import (
	"sort"
	"sync"
	"sync/atomic"
)

// HeldRequest is a request whose keys may live on several shards and that
// must still be atomic and isolated: a CL.LIMIT naming keys of different
// shards (MULTI/EXEC parks shards the same way: Session.Hold). A Session runs it with every shard it names
// parked (see Session.AddHeld), so its implementations read and write the
// shards' tables from the session's goroutine as if they were their owner.
type HeldRequest interface {
	Request
	// Shards appends the shards of the request's keys to dst, ascending,
	// without repeats.
	Shards(st *Store, dst []int) []int
	// runHeld runs the request at now on st's shards, each of which it
	// names is parked for the call.
	runHeld(st *Store, now int64)
}

// heldWarmer is a held request with a warm pass (LimitReq.warmKeys): run
// over a hold's requests before any of them, once its shards are held.
type heldWarmer interface {
	warmKeys(st *Store, one *shard)
	warmEntries()
}

// addShard inserts shard i into the ascending, repeat-free list dst.
func addShard(dst []int, i int) []int {
	j := sort.SearchInts(dst, i)
	if j == len(dst) || dst[j] != i {
		dst = append(dst, 0)
		copy(dst[j+1:], dst[j:])
		dst[j] = i
	}
	return dst
}

// hold is what a ctlHold batch carries: the shard signals held, waits for
// release, then hands the changes made meanwhile to persistence and calls
// wg.Done (under FsyncAlways once they are synced), like the end of a
// request batch. A Session keeps one and reuses it: release gets one value
// per parked shard rather than being closed.
type hold struct {
	held    chan struct{}
	release chan struct{}
	batches []batch // by owner
	ids     []int   // the shards, ascending
	mask    []bool  // by shard: in ids
	owners  []int   // the owners of ids, ascending
	parked  int     // owners parked (the home's is not)
	dur     doner   // the session's syncWait when it defers syncs, else nil
	remote  int     // shards of parked owners
	wg      waitGroup

	// Under FsyncAlways a hold of several shards commits their changes as
	// one Pebble batch, so that a crash keeps all of a cross-shard call or
	// transaction or none of it: each shard leaves its part in parts and
	// waits on sent until the session has handed the group to the
	// committer (so that none of its later changes can reach the committer
	// before the group's), and the session waits on synced.
	group  bool
	parts  []commitReq
	sent   chan struct{}
	synced waitGroup
}

// waitGroup is a sync.WaitGroup that is also a failer.
type waitGroup struct {
	sync.WaitGroup
	lost atomic.Bool
}

func (w *waitGroup) fail() { w.lost.Store(true) }

// lost reports, once, whether the hold's changes were given up at Close
// instead of synced (see failer).
func (h *hold) lost() bool {
	if !h.wg.lost.Load() && !h.synced.lost.Load() {
		return false // every call but one at a Close while writes fail: loads only
	}
	a, b := h.wg.lost.Swap(false), h.synced.lost.Swap(false)
	return a || b
}

func newHold(shards int) *hold {
	return &hold{
		held:    make(chan struct{}, 1),
		release: make(chan struct{}, shards),
		batches: make([]batch, shards),
		mask:    make([]bool, shards),
		parts:   make([]commitReq, shards),
		sent:    make(chan struct{}, shards),
	}
}

// AddHeld queues a request whose keys may live on several shards. The
// session keeps the order of everything it is given: ops added before it
// run before it, ops added after it run after it. So when it follows
// ordinary ops, those are run first, at once; consecutive held requests
// then run together at the next boundary or Run, under one hold of every
// shard any of them names. That is what makes a pipeline of cross-shard
// calls cost one hold, not one each; pipelines of single-shard ops never
// reach this code.
func (ss *Session) AddHeld(r HeldRequest) {
	op := r.env()
	op.req, op.key, op.keyed, op.status = r, nil, false, nil
	if ss.inline != nil {
		ss.runHeldInline(op)
		return
	}
	if len(ss.touched) > 0 {
		ss.runBatches()
	}
	ss.held = append(ss.held, op)
}

// runHeld runs the queued held requests: it parks every shard they name,
// in ascending shard order (two sessions never wait on each other in a
// cycle, so they cannot deadlock), reads the clock once all are held, runs
// the requests in order on this goroutine, lets the shards go and returns
// once every change is as durable as a request batch's.
func (ss *Session) runHeld() {
	st := ss.st
	if ss.hold == nil {
		ss.hold = newHold(len(st.shards))
	}
	h := ss.hold
	h.ids = h.ids[:0]
	for _, op := range ss.held {
		h.ids = op.req.(HeldRequest).Shards(st, h.ids)
	}
	if !ss.park() {
		for _, op := range ss.held {
			op.status = ErrClosed
		}
		ss.resetHeld()
		return
	}
	for _, op := range ss.held {
		if w, ok := op.req.(heldWarmer); ok {
			w.warmKeys(st, nil)
		}
	}
	for _, op := range ss.held {
		if w, ok := op.req.(heldWarmer); ok {
			w.warmEntries()
		}
	}
	now := st.cfg.Clock.Now()
	for _, op := range ss.held {
		runHeldOne(op, st, now)
	}
	ss.unpark()
	if ss.hold.lost() {
		for _, op := range ss.held {
			op.status = ErrClosed // not on disk: no acknowledgement
		}
	}
	ss.resetHeld()
}

// park parks the shards of ss.hold.ids and returns true once all are
// held, counted in the store's active sessions; false if the store is
// closed. It parks their owners one at a time in ascending order, each
// owner parking all of its shards the hold names, so two holds never wait
// for each other in a cycle.
//
// A session with a home runs on its home owner's goroutine: the home is
// held whenever the session runs, so it takes the home's place in that
// order whether or not the hold names its shards. While it waits for
// owners ordered before its home it serves its home's inbox, holds
// included (the home is not held yet: another hold may park it, which
// parks the session too, until that hold lets go); once past its home it
// waits without serving (holding its home, it must not park it).
func (ss *Session) park() bool {
	st, h := ss.st, ss.hold
	if !st.enter() {
		return false
	}
	h.group = len(h.ids) > 1 && st.p != nil && st.p.policy == FsyncAlways
	// A session that defers its syncs (an event loop's) counts the hold's
	// in dur instead of waiting for the disk here.
	h.dur = nil
	if ss.deferSync && st.SyncsWrites() {
		h.dur = &ss.dur
		if !h.group {
			ss.dur.add(len(h.ids))
		}
	}
	clear(h.mask)
	for _, id := range h.ids {
		h.mask[id] = true
	}
	h.owners = h.owners[:0]
	for _, id := range h.ids {
		h.owners = addShard(h.owners, st.shards[id].o.id)
	}
	home := ss.home
	h.remote, h.parked = 0, 0
	for _, oid := range h.owners {
		o := st.owners[oid]
		if o == home {
			continue
		}
		n := o.count(h.mask)
		b := &h.batches[oid]
		*b = batch{wg: &h.wg, ctl: ctlHold, hold: h}
		h.wg.Add(n)
		h.remote += n
		h.parked++
		if home == nil || oid > home.id {
			o.in <- b
			o.wake()
			<-h.held
			continue
		}
		o.post(b, home)
	wait:
		for {
			select {
			case <-h.held:
				break wait
			case x := <-home.in:
				home.handle(x)
			}
		}
	}
	for _, id := range h.ids {
		st.shards[id].by = ss.ID
	}
	return true
}

// unpark lets park's shards go and returns once every change made while
// they were parked is as durable as a request batch's (for a session that
// defers its syncs: once they are handed to the committer, counted in its
// syncWait). The home's shards
// the hold names are ended here, on their owner's goroutine.
func (ss *Session) unpark() {
	h, home := ss.hold, ss.home
	for range h.parked {
		h.release <- struct{}{}
	}
	if home != nil {
		for _, sh := range home.shards {
			if !h.mask[sh.id] {
				continue
			}
			if !h.group {
				h.wg.Add(1)
				sh.endBatch(&h.wg, h.dur)
				continue
			}
			sh.publish()
			sh.writeDirty()
			h.parts[sh.id] = sh.takeChanges()
		}
	}
	h.wg.Wait()
	if h.group {
		ss.commitGroup()
	}
	ss.st.leave()
}

// commitGroup hands the held shards' parts to the committer as one
// request, lets the parked shards go on, and waits until it is synced (a
// session that defers its syncs counts it in its syncWait instead).
func (ss *Session) commitGroup() {
	h := ss.hold
	r := commitReq{}
	for _, id := range h.ids {
		r.group = append(r.group, h.parts[id])
		h.parts[id] = commitReq{}
	}
	if h.dur != nil {
		ss.dur.add(1)
		r.wg = &ss.dur
	} else {
		h.synced.Add(1)
		r.wg = &h.synced
	}
	ss.st.p.in <- r
	for range h.remote {
		h.sent <- struct{}{}
	}
	if h.dur == nil {
		h.synced.Wait()
	}
}

// runHeldOne runs one held request; a panic fails it alone, as a panic in
// a shard's op fails that op alone.
func runHeldOne(op *envelope, st *Store, now int64) {
	defer func() {
		if p := recover(); p != nil {
			op.status = ErrPanic
		}
	}()
	op.req.(HeldRequest).runHeld(st, now)
}

func (ss *Session) resetHeld() {
	clear(ss.held)
	if cap(ss.held) > maxKeptPending {
		ss.held = nil
	}
	ss.held = ss.held[:0]
}
