package commands

import "github.com/cellserver/cellserver/service"

// pool is a client's free list of one kind of call: a pipeline takes what
// it needs, and all of it is reusable once the pipeline's replies are
// written, so a warm connection allocates no calls.
type pool[T any] struct {
	items []*T
	n     int
}

func (p *pool[T]) get() *T {
	if p.n == len(p.items) {
		p.items = append(p.items, new(T))
	}
	x := p.items[p.n]
	p.n++
	return x
}

// recycle makes every item reusable, keeping at most maxKeptOps of them:
// one huge pipeline's calls must not stay allocated for the connection's
// life.
func (p *pool[T]) recycle() {
	if len(p.items) > maxKeptOps {
		clear(p.items[maxKeptOps:])
		p.items = p.items[:maxKeptOps:maxKeptOps]
	}
	p.n = 0
}

// callPools are a client's calls of the decision API, by kind.
type callPools struct {
	throttles pool[service.Throttle]
	limits    pool[service.Limit]
	resets    pool[service.Reset]
	inspects  pool[service.Inspect]
}

func (cp *callPools) recycle() {
	for _, r := range cp.resets.items[:cp.resets.n] {
		r.Keys = nil
		r.Trim(maxKeptOps)
	}
	cp.throttles.recycle()
	cp.limits.recycle()
	cp.resets.recycle()
	cp.inspects.recycle()
}
