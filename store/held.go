package store

import (
	"sort"
	"sync"
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
	batches []batch
	ids     []int
	wg      sync.WaitGroup

	// Under FsyncAlways a hold of several shards commits their changes as
	// one Pebble batch, so that a crash keeps all of a cross-shard call or
	// transaction or none of it: each shard leaves its part in parts and
	// waits on sent until the session has handed the group to the
	// committer (so that none of its later changes can reach the committer
	// before the group's), and the session waits on synced.
	group  bool
	parts  []commitReq
	sent   chan struct{}
	synced sync.WaitGroup
}

func newHold(shards int) *hold {
	return &hold{
		held:    make(chan struct{}, 1),
		release: make(chan struct{}, shards),
		batches: make([]batch, shards),
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
	now := st.cfg.Clock.Now()
	for _, op := range ss.held {
		runHeldOne(op, st, now)
	}
	ss.unpark()
	ss.resetHeld()
}

// park parks the shards of ss.hold.ids, ascending, and returns true with
// the store's read lock held; false if the store is closed.
func (ss *Session) park() bool {
	st, h := ss.st, ss.hold
	st.mu.RLock()
	if st.closed {
		st.mu.RUnlock()
		return false
	}
	h.group = len(h.ids) > 1 && st.p != nil && st.p.policy == FsyncAlways
	for _, id := range h.ids {
		b := &h.batches[id]
		*b = batch{wg: &h.wg, ctl: ctlHold, hold: h}
		h.wg.Add(1)
		st.shards[id].in <- b
		<-h.held
	}
	for _, id := range h.ids {
		st.shards[id].by = ss.ID
	}
	return true
}

// unpark lets park's shards go and returns once every change made while
// they were parked is as durable as a request batch's.
func (ss *Session) unpark() {
	h := ss.hold
	for range h.ids {
		h.release <- struct{}{}
	}
	h.wg.Wait()
	if h.group {
		ss.commitGroup()
	}
	ss.st.mu.RUnlock()
}

// commitGroup hands the parked shards' parts to the committer as one
// request, lets the shards go on, and waits until it is synced.
func (ss *Session) commitGroup() {
	h := ss.hold
	r := commitReq{}
	for _, id := range h.ids {
		r.group = append(r.group, h.parts[id])
		h.parts[id] = commitReq{}
	}
	h.synced.Add(1)
	r.wg = &h.synced
	ss.st.p.in <- r
	for range h.ids {
		h.sent <- struct{}{}
	}
	h.synced.Wait()
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

// runHold is the shard's side of a hold.
func (sh *shard) runHold(b *batch) {
	h := b.hold
	h.held <- struct{}{}
	<-h.release
	if !h.group {
		sh.endBatch(b.wg)
		return
	}
	sh.publish()
	sh.writeDirty()
	h.parts[sh.id] = sh.takeChanges()
	b.wg.Done()
	<-h.sent
}
