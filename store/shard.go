package store

import (
	"hash/maphash"
	"sync/atomic"
	"time"

	"github.com/cellserver/cellserver/gcra"
)

// shard owns one part of the keyspace. Only its goroutine (loop) touches t.
type shard struct {
	id    int
	cfg   Config
	clock *Clock
	in    chan *batch
	quit  chan struct{}
	t     *table

	sweepPos uint32

	// Counters read by Stats from other goroutines.
	nkeys    atomic.Int64
	nexpires atomic.Int64
	expired  atomic.Int64
	bytes    atomic.Int64
	expires  int64 // owner's copy of nexpires
}

func newShard(id int, seed maphash.Seed, cfg Config) *shard {
	return &shard{
		id:    id,
		cfg:   cfg,
		clock: cfg.Clock,
		in:    make(chan *batch, 256),
		quit:  make(chan struct{}),
		t:     newTable(seed),
	}
}

func (sh *shard) loop() {
	var tick <-chan time.Time
	if sh.cfg.SweepInterval > 0 {
		tk := time.NewTicker(sh.cfg.SweepInterval)
		defer tk.Stop()
		tick = tk.C
	}
	for {
		select {
		case b := <-sh.in:
			sh.runBatch(b)
		case <-tick:
			sh.sweep(sh.clock.Now())
			sh.publish()
		case <-sh.quit:
			// Sessions hold the store's read lock while their batches are in
			// flight and Close waited for it, so nothing is left to drain.
			return
		}
	}
}

func (sh *shard) runBatch(b *batch) {
	for _, op := range b.ops {
		sh.exec(op)
	}
	sh.publish()
	b.wg.Done()
}

func (sh *shard) publish() {
	sh.nkeys.Store(int64(sh.t.len()))
	sh.nexpires.Store(sh.expires)
	sh.bytes.Store(sh.t.bytes())
}

// exec runs one op; a panic fails that op only.
func (sh *shard) exec(op *Op) {
	defer func() {
		if r := recover(); r != nil {
			op.Err = ErrPanic
		}
	}()
	now := sh.clock.Now() // read once per command (spec §9)
	nowMs := floorMs(now)
	switch op.Kind {
	case OpThrottle:
		sh.throttle(op, now, nowMs)
	case OpGet:
		ei := sh.lookup(op.Key, nowMs)
		op.Found = ei >= 0
		op.TAT = 0
		if op.Found {
			op.TAT = sh.t.at(uint32(ei)).tat
		}
	case OpDel:
		op.N = 0
		if ei := sh.lookup(op.Key, nowMs); ei >= 0 {
			sh.remove(uint32(ei))
			op.N = 1
		}
	case OpExists:
		op.N = 0
		if sh.lookup(op.Key, nowMs) >= 0 {
			op.N = 1
		}
	case OpPTTL:
		ei := sh.lookup(op.Key, nowMs)
		switch {
		case ei < 0:
			op.N = -2
		case sh.t.at(uint32(ei)).expires == noExpiry:
			op.N = -1
		default:
			op.N = sh.t.at(uint32(ei)).expires - nowMs
		}
	case OpDBSize:
		op.N = int64(sh.t.len())
	case OpFlush:
		sh.t.reset()
		sh.expires = 0
	case OpScan:
		sh.scan(op, nowMs)
	case opSweep:
		sh.sweep(now)
	case OpKeys:
		op.Keys = op.Keys[:0]
		for i := uint32(0); i < sh.t.nent; i++ {
			sh.collect(op, i, nowMs)
		}
	}
}

func (sh *shard) throttle(op *Op, now, nowMs int64) {
	ei := sh.lookup(op.Key, nowMs)
	var tat uint64
	if ei >= 0 {
		tat = sh.t.at(uint32(ei)).tat
	}
	res, err := gcra.Throttle(op.Params, tat, ei >= 0, now)
	op.Result, op.Err = res, err
	if err != nil || !res.Write {
		return
	}
	if ei < 0 {
		ei = int64(sh.t.insert(op.Key))
	}
	exp := int64(noExpiry)
	if res.Expiry == gcra.ExpireAfter {
		exp = nowMs + res.TTLMillis
	}
	sh.set(uint32(ei), res.NewTAT, exp)
}

func (sh *shard) set(ei uint32, tat uint64, exp int64) {
	e := sh.t.at(ei)
	if e.expires != noExpiry {
		sh.expires--
	}
	e.tat = tat
	e.expires = exp
	if exp != noExpiry {
		sh.expires++
	}
}

// lookup returns the entry index of a live key, removing it first if it has
// expired (lazy expiry); -1 if absent.
func (sh *shard) lookup(key []byte, nowMs int64) int64 {
	ei := sh.t.find(key)
	if ei < 0 {
		return -1
	}
	if sh.t.at(uint32(ei)).expires < nowMs {
		sh.remove(uint32(ei))
		sh.expired.Add(1)
		return -1
	}
	return ei
}

func (sh *shard) remove(ei uint32) {
	if sh.t.at(ei).expires != noExpiry {
		sh.expires--
	}
	sh.t.remove(ei)
}

// sweep is one step of the incremental active expiry: it examines the next
// slice of entries and removes the expired ones, so keys nobody touches again
// do not hold memory for longer than about a full pass.
func (sh *shard) sweep(now int64) {
	n := sh.t.nent
	if n == 0 {
		return
	}
	budget := n / uint32(sh.cfg.SweepFraction)
	if budget < 256 {
		budget = 256
	}
	nowMs := floorMs(now)
	for ; budget > 0; budget-- {
		if sh.sweepPos >= sh.t.nent {
			sh.sweepPos = 0
		}
		e := sh.t.at(sh.sweepPos)
		if e.free == 0 && e.expires < nowMs {
			sh.remove(sh.sweepPos)
			sh.expired.Add(1)
		}
		sh.sweepPos++
	}
}

func (sh *shard) scan(op *Op, nowMs int64) {
	op.Keys = op.Keys[:0]
	pos := uint32(op.Cursor)
	count := op.Count
	if count < 1 {
		count = 10
	}
	start := pos
	for ; pos < sh.t.nent && count > 0; pos++ {
		count--
		sh.collect(op, pos, nowMs)
	}
	op.N = int64(pos - start)
	if pos >= sh.t.nent {
		op.Cursor = 0
	} else {
		op.Cursor = uint64(pos)
	}
}

func (sh *shard) collect(op *Op, i uint32, nowMs int64) {
	e := sh.t.at(i)
	if e.free != 0 || e.expires < nowMs {
		return
	}
	k := sh.t.keyOf(e)
	if op.Pattern != nil && !Match(op.Pattern, k, false) {
		return
	}
	op.Keys = append(op.Keys, append([]byte(nil), k...))
}

// floorMs converts Unix ns to Unix ms, rounding toward minus infinity.
func floorMs(ns int64) int64 {
	ms := ns / 1e6
	if ns%1e6 < 0 {
		ms--
	}
	return ms
}
