package store

import (
	"sync/atomic"
	"time"
)

// Owner is the one goroutine that runs a set of shards: their requests,
// timers and background steps (write-out, snapshots, index migration) all
// run on it, so no shard's table needs a lock.
//
// By default every shard has an owner running a goroutine of its own. With
// Config.Owners set, the store makes that many hosted owners instead, each
// running Config.Shards/Owners shards on a goroutine its caller provides
// (the wire layer's event loops, the thread-per-core design of Dragonfly
// and ScyllaDB): Adopt gives an owner its Host, which calls Serve on that
// goroutine whenever Host.Wake asks, and a Session whose home is the owner
// (SetHome) runs the requests for the owner's shards itself, inline, with
// no hand-off to another thread. Requests for another owner's shards are
// handed to that owner as batches, as with unhosted owners.
//
// A goroutine that hosts an owner never waits for another owner without
// serving its own inbox meanwhile (Session's waits do that when the session
// has a home): two event loops waiting for each other's shards would
// otherwise deadlock.
type Owner struct {
	id     int
	st     *Store
	shards []*shard
	in     chan *batch   // request and control batches for the shards
	room   chan struct{} // the committer finished some of the shards' requests
	hosted bool          // Config.Owners: run by a host, else by loop
	host   atomic.Pointer[hostRef]
	woken  atomic.Bool // a Wake is pending: Serve has not started since
	// roomWait: a hosted owner's step waits for the committer, whose
	// roomFreed then wakes the host.
	roomWait atomic.Bool
	// running: loop's goroutine was started (an unhosted owner, or a hosted
	// one detached from its host or never adopted, for Close).
	running bool
	done    chan struct{} // closed when the owner stopped (ctlStop)
	stopped atomic.Bool   // set at ctlStop
	waited  int           // commands run since a step was last due (loop)
	held    []*shard      // runHold's scratch
}

// Host runs a hosted Owner on a goroutine of its own: Wake asks it to call
// the owner's Serve soon, on that goroutine. Wake must not block, is called
// from any goroutine, and may run Serve once for several calls.
type Host interface{ Wake() }

type hostRef struct{ h Host }

func newOwner(st *Store, id int, hosted bool) *Owner {
	return &Owner{
		id:     id,
		st:     st,
		in:     make(chan *batch, 256),
		room:   make(chan struct{}, 1),
		hosted: hosted,
		done:   make(chan struct{}),
	}
}

// ID is the owner's index in Store.Owners.
func (o *Owner) ID() int { return o.id }

// Shards returns the indexes of the owner's shards.
func (o *Owner) Shards() []int {
	ids := make([]int, len(o.shards))
	for i, sh := range o.shards {
		ids[i] = sh.id
	}
	return ids
}

// Adopt makes h the host of a hosted owner: from now on only h's goroutine
// runs the owner (Serve, and the sessions whose home the owner is). Call it
// once, before any session has the owner as its home.
func (o *Owner) Adopt(h Host) {
	if !o.hosted {
		panic("store: Adopt of an owner that runs its own goroutine")
	}
	o.host.Store(&hostRef{h})
	o.woken.Store(false)
	o.wake() // what was sent before
}

// Detach ends the hosting: the owner runs a goroutine of its own again,
// until Close. Call it once the host's goroutine will not call Serve or run
// a session with this home again (its event loop has stopped).
func (o *Owner) Detach() {
	if o.host.Swap(nil) == nil || o.running || o.stopped.Load() {
		return
	}
	o.start()
}

func (o *Owner) start() {
	o.running = true
	o.st.wg.Add(1)
	go func() {
		defer o.st.wg.Done()
		o.loop()
	}()
}

// wake tells the owner's host that batches wait, once per Serve.
func (o *Owner) wake() {
	if !o.hosted {
		return
	}
	if r := o.host.Load(); r != nil && !o.woken.Swap(true) {
		r.h.Wake()
	}
}

// roomFreed is the committer's: it finished some of the owner's requests.
func (o *Owner) roomFreed() {
	select { // wake an owner waiting for room (see shard.stepWaits)
	case o.room <- struct{}{}:
	default:
	}
	if o.roomWait.Swap(false) {
		o.wake() // a hosted owner's step waits for this (see Serve)
	}
}

// post hands b to the owner. A sender with a home serves its own inbox
// while o's is full.
func (o *Owner) post(b *batch, home *Owner) {
	if home == nil {
		o.in <- b
	} else {
	send:
		for {
			select {
			case o.in <- b:
				break send
			case x := <-home.in:
				home.handle(x)
			}
		}
	}
	o.wake()
}

// maxServe is how many batches one Serve runs before it returns to its
// host (and asks to be called again): an event loop serves its own
// connections in between.
const maxServe = 64

// Serve runs what waits for a hosted owner: queued batches, then one
// background step if one is due. It must be called on the host's goroutine
// and returns quickly; it asks for another call (Host.Wake) when work is
// left.
func (o *Owner) Serve() {
	o.woken.Store(false)
	if o.stopped.Load() {
		return // Close stopped it (a late wake): its tables are released
	}
	for range maxServe {
		var b *batch
		select {
		case b = <-o.in:
		default:
		}
		if b == nil {
			break
		}
		if o.handle(b) {
			return // stopped
		}
	}
	if o.canStep() {
		o.step()
	}
	switch {
	case len(o.in) > 0 || o.canStep():
		o.wake()
	case o.stepBlocked():
		// A step waits for the committer: its roomFreed wakes the host.
		// (Checked again after the flag is set, in case the room came
		// between.)
		o.roomWait.Store(true)
		if o.canStep() {
			o.wake()
		}
	}
}

// Poll runs the batches waiting for a hosted owner now, without a step:
// its host calls it between connections, so that another loop waiting for
// one of the owner's shards waits for one connection's work, not for a
// whole round of the host's ready connections. On the host's goroutine.
func (o *Owner) Poll() {
	for len(o.in) > 0 && !o.stopped.Load() {
		select {
		case b := <-o.in:
			if o.handle(b) {
				return
			}
		default:
			return
		}
	}
}

// loop runs an owner on its own goroutine until ctlStop.
func (o *Owner) loop() {
	for {
		var b *batch
		switch {
		case o.canStep():
			// Batches go first: a step runs when none is queued, or once
			// writeChunk/2 commands ran since it was due. A command changes
			// at most one key, so even a shard that is never idle writes
			// out twice as fast as it changes keys, and its write-out ends
			// within its second. (A client's pipeline would otherwise wait
			// behind a step, and an event loop serving many clients one
			// after another adds those waits up.)
			if o.waited >= writeChunk/2 {
				o.waited = 0
				o.step()
				continue
			}
			select {
			case b = <-o.in:
			default:
				o.waited = 0
				o.step()
				continue
			}
		case o.stepBlocked():
			// The committer is behind (a disk slower than the shards'
			// changes, or Pebble holding writes back while it flushes a
			// snapshot round's burst): serve batches, and step again once
			// it has caught up. Sending more would fill its queue and then
			// block this goroutine, and every client with it.
			select {
			case b = <-o.in:
			case <-o.room:
				continue
			}
		default:
			o.waited = 0 // counting starts when a step falls due
			b = <-o.in
		}
		if o.handle(b) {
			return
		}
	}
}

// handle runs one batch on the owner's goroutine; true after ctlStop.
func (o *Owner) handle(b *batch) bool {
	switch b.ctl {
	case 0:
		if !o.hosted && o.canStep() {
			o.waited += len(b.ops) // before the batch is done and reused
		}
		b.sh.runBatch(b)
	case ctlSweepTick:
		for _, sh := range o.shards {
			// A frozen clock (DEBUG CLOCK) belongs to a test that drives
			// time itself: sweeping at one frozen instant would delete
			// keys that exist again when the test moves the clock back.
			if !sh.clock.Frozen() {
				sh.sweep(sh.clock.Now())
			}
			sh.publish()
			if sh.writeThrough() {
				sh.writeDirty() // the sweep's deletions
				sh.sendChanges(nil)
			}
		}
	case ctlPersistTick:
		for _, sh := range o.shards {
			sh.startWriteOut()
			sh.step()
		}
	case ctlHold:
		o.runHold(b)
	case ctlStop:
		for _, sh := range o.shards {
			// Sessions ended before Close sent this, so no batch is left;
			// hand the last changes to the committer, which Close drains
			// next.
			sh.writeDirty()
			sh.sendChanges(nil)
			// The batch holds copies of the keys; nothing reads the table
			// once the owner is gone.
			sh.t.release()
		}
		o.stopped.Store(true)
		close(o.done)
		return true
	}
	return false
}

// canStep reports whether one of the shards has a background step due
// that it can take now.
func (o *Owner) canStep() bool {
	for _, sh := range o.shards {
		if sh.stepDue() && !sh.stepWaits() {
			return true
		}
	}
	return false
}

// stepBlocked reports whether a shard has a step due that waits for the
// committer (and none can step).
func (o *Owner) stepBlocked() bool {
	for _, sh := range o.shards {
		if sh.stepDue() {
			return true
		}
	}
	return false
}

// step takes one background step on every shard that can take one.
func (o *Owner) step() {
	for _, sh := range o.shards {
		if sh.stepDue() && !sh.stepWaits() {
			sh.step()
		}
	}
}

// ticks sends the sweep and write-out ticks to the owner as control
// batches until stop is closed. A tick that finds the owner busy waits for
// it; the ticker drops the ones that fall due meanwhile.
func (o *Owner) ticks(stop <-chan struct{}) {
	defer o.st.wg.Done()
	cfg := o.st.cfg
	var tick, persistTick <-chan time.Time
	if cfg.SweepInterval > 0 {
		tk := time.NewTicker(cfg.SweepInterval)
		defer tk.Stop()
		tick = tk.C
	}
	if o.st.p != nil && o.st.p.policy != FsyncAlways {
		tk := time.NewTicker(cfg.PersistInterval)
		defer tk.Stop()
		persistTick = tk.C
	}
	for {
		var b *batch
		select {
		case <-tick:
			b = ctlSweep
		case <-persistTick:
			b = ctlPersist
		case <-stop:
			return
		}
		select {
		case o.in <- b:
			o.wake()
		case <-stop:
			return
		}
	}
}

// runHold parks the owner for a Session's hold (see Session.park): it says
// it is parked, waits for the release, then ends the hold on each of its
// shards the hold covers, as a batch would.
func (o *Owner) runHold(b *batch) {
	h := b.hold
	// What the hold covers is read before it is released: the holder may
	// reuse it for its next hold as soon as the last shard is done.
	group, dur, mine := h.group, h.dur, o.held[:0]
	for _, sh := range o.shards {
		if h.mask[sh.id] {
			mine = append(mine, sh)
		}
	}
	o.held = mine
	h.held <- struct{}{}
	<-h.release
	for _, sh := range mine {
		if !group {
			sh.endBatch(b.wg, dur)
			continue
		}
		sh.publish()
		sh.writeDirty()
		h.parts[sh.id] = sh.takeChanges()
		b.wg.Done()
	}
	if group {
		for range mine {
			<-h.sent // the holder sent the grouped commit
		}
	}
}

// count returns how many of the shards ids (a hold's mask) are the owner's.
func (o *Owner) count(mask []bool) int {
	n := 0
	for _, sh := range o.shards {
		if mask[sh.id] {
			n++
		}
	}
	return n
}

// doner is what a finished batch or commit request calls: a
// sync.WaitGroup, or a Session's signal.
type doner interface{ Done() }

// failer is a doner that can be told, before its Done, that the changes it
// waited for did not reach the disk (a Close while writes fail under
// FsyncAlways): its session then fails its requests instead of
// acknowledging them.
type failer interface{ fail() }

// signal counts a session's outstanding batches as a WaitGroup does, but
// its waiter can serve its own owner's inbox while it waits.
type signal struct {
	n atomic.Int32
	c chan struct{} // one send when n reaches 0, unless cb is set
	// cb, set by RunAsync before it sends its batches, is called instead
	// by whoever counts the last batch.
	cb   func()
	lost atomic.Bool // see failer
}

func (s *signal) add(n int) { s.n.Add(int32(n)) }

func (s *signal) fail() { s.lost.Store(true) }

// Done counts one batch finished.
func (s *signal) Done() {
	if s.n.Add(-1) == 0 {
		if cb := s.cb; cb != nil {
			s.cb = nil
			cb()
			return
		}
		s.c <- struct{}{}
	}
}

// wait returns once the count is 0, serving home's batches meanwhile.
func (s *signal) wait(home *Owner) {
	select {
	case <-s.c: // every batch ran already: no select of two
		return
	default:
	}
	if home == nil {
		<-s.c
		return
	}
	for {
		select {
		case <-s.c:
			return
		case b := <-home.in:
			home.handle(b)
		}
	}
}
