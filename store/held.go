package store

import (
	"sync"

	"github.com/cellserver/cellserver/limit"
)

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
// they go through a Session (AddTo).
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
