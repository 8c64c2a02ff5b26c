package commands

import (
	"unsafe"

	"github.com/cellserver/cellserver/service"
	"github.com/cellserver/cellserver/store"
)

// freeList hands out *T for one pipeline's requests from slabs it keeps;
// reset makes every one reusable once the pipeline's replies are written.
// A client then allocates no request per command once warm. get does not
// clear what it returns: each handler fills every input, each request sets
// its outputs when it runs, and buffers (a LimitReq's, a ScanReq's Keys)
// are reused rather than allocated again.
type freeList[T any] struct {
	items []*T
	n     int
}

func (f *freeList[T]) get() *T {
	if f.n == len(f.items) {
		// Requests come in slabs: a command with many keys needs many.
		slab := make([]T, min(max(len(f.items), 1), 256))
		for i := range slab {
			f.items = append(f.items, &slab[i])
		}
	}
	r := f.items[f.n]
	f.n++
	return r
}

// keptBytes bounds what one free list keeps between pipelines, with
// maxKeptOps: a client that once sent thousands of calls must not hold
// megabytes for as long as it lives.
const keptBytes = 1 << 20

// keptScratches is how many kept CL.LIMIT calls keep the scratch of a call
// of several limits (store.LimitScratchBytes each, beyond the call's own
// size that reset counts), so that those too stay within keptBytes.
const keptScratches = keptBytes / (int(unsafe.Sizeof(service.Limit{})) + store.LimitScratchBytes)

// reset makes every request reusable, dropping what is past maxKeptOps
// requests or keptBytes.
func (f *freeList[T]) reset() {
	if f.n == 0 { // untouched since the last reset
		return
	}
	f.n = 0
	var zero T
	keep := max(16, min(maxKeptOps, keptBytes/int(unsafe.Sizeof(zero))))
	if len(f.items) > keep {
		clear(f.items[keep:])
		f.items = f.items[:keep:keep]
	}
}

// requests are a client's free lists, one per kind of store request its
// Queue commands queue (the Call commands' are in callPools).
type requests struct {
	get    freeList[store.GetReq]
	del    freeList[store.DelReq]
	exists freeList[store.ExistsReq]
	pttl   freeList[store.PTTLReq]
	typ    freeList[store.TypeReq]

	dbsize    freeList[store.DBSizeReq]
	flush     freeList[store.FlushReq]
	scan      freeList[store.ScanReq]
	keys      freeList[store.KeysReq]
	slotCount freeList[store.SlotCountReq]
	slotKeys  freeList[store.SlotKeysReq]
}

func (r *requests) reset() {
	r.get.reset()
	r.del.reset()
	r.exists.reset()
	r.pttl.reset()
	r.typ.reset()
	r.dbsize.reset()
	r.flush.reset()
	r.scan.reset()
	r.keys.reset()
	r.slotCount.reset()
	r.slotKeys.reset()
}

// callPools are a client's calls of the decision API, by kind.
type callPools struct {
	throttles freeList[service.Throttle]
	limits    freeList[service.Limit]
	resets    freeList[service.Reset]
	inspects  freeList[service.Inspect]
}

func (cp *callPools) recycle() {
	// No call keeps a key into the read buffer past the pipeline: the
	// wire layer shrinks a huge buffer afterwards, which a kept key pins.
	for _, t := range cp.throttles.items[:cp.throttles.n] {
		t.Release()
	}
	for i, l := range cp.limits.items[:cp.limits.n] {
		l.Release()
		if i >= keptScratches {
			l.DropScratch()
		}
	}
	for _, r := range cp.resets.items[:cp.resets.n] {
		r.Release(maxKeptOps)
	}
	for _, in := range cp.inspects.items[:cp.inspects.n] {
		in.Release()
	}
	cp.throttles.reset()
	cp.limits.reset()
	cp.resets.reset()
	cp.inspects.reset()
}

// loopPools are the call pools of the pipelines one event loop runs. A
// loop runs one client's pipeline at a time, so while no pipeline waits on
// another loop one pool serves them all and stays in cache; each client's
// own pools, taken in turn by the loop's clients, mostly are not. A
// pipeline that waits on another loop keeps its pool until its replies are
// written; the next takes another. Only the loop's goroutine uses them.
type loopPools struct{ free []*callPools }

// keptLoopPools is how many pools a loop keeps: as many as its pipelines
// that wait on other loops at once, up to this.
const keptLoopPools = 64

func (lp *loopPools) get() *callPools {
	if n := len(lp.free); n > 0 {
		cp := lp.free[n-1]
		lp.free[n-1] = nil
		lp.free = lp.free[:n-1]
		return cp
	}
	return new(callPools)
}

func (lp *loopPools) put(cp *callPools) {
	if len(lp.free) < keptLoopPools {
		lp.free = append(lp.free, cp)
	}
}

// pools returns the pools the pipeline's calls come from, taking them for
// the pipeline (recycle gives them back): on its event loop, the loop's;
// off the loops (or with no loop), the client's own.
func (c *Client) pools() *callPools {
	if c.calls == nil {
		c.calls = &c.own
		if c.home != nil && !c.offLoop {
			c.from = &c.srv.loopPools[c.home.ID()]
			c.calls = c.from.get()
		}
	}
	return c.calls
}
