package store

import "errors"

// ErrNotHeld: the request was given to a Session between Hold and Release
// but touches a shard the hold does not include; it did not run (its
// Status). Callers hold every shard their requests may touch, so this is a
// bug of the caller, reported rather than run unisolated.
var ErrNotHeld = errors.New("store: shard not held")

// inline is a Session's state between Hold and Release.
type inline struct {
	held   []bool // by shard
	closed bool   // the store was closed at Hold: every request fails
	now    int64  // the clock reading every request runs at
	ids    []int  // scratch for a held request's shards
}

// Hold runs what the session has queued, then parks the given shards
// (nil: every shard), in ascending order as
// AddHeld does, and reads the clock once. Until Release, Add, AddTo and
// AddHeld run each request at once, on the caller's goroutine, at that
// clock reading, if every shard it touches is held (else it fails with
// ErrNotHeld); Run then has nothing to do. No other session's request runs
// on the held shards meanwhile: this is MULTI/EXEC's isolation, across
// shards. Release lets the shards go, and returns once their changes are
// as durable as a request batch's (under FsyncAlways: synced).
//
// A Session between Hold and Release must not be held again, and its
// caller must not wait on another session's requests: they may need the
// held shards.
func (ss *Session) Hold(shards []int) {
	ss.Run()
	st := ss.st
	if ss.hold == nil {
		ss.hold = newHold(len(st.shards))
	}
	if ss.inline != nil {
		panic("store: Session.Hold while holding")
	}
	in := ss.keptInline
	if in == nil {
		in = &inline{held: make([]bool, len(st.shards))}
	}
	h := ss.hold
	h.ids = h.ids[:0]
	if shards == nil {
		for i := range st.shards {
			h.ids = append(h.ids, i)
		}
	} else {
		for _, i := range shards {
			if i >= 0 && i < len(st.shards) {
				h.ids = addShard(h.ids, i)
			}
		}
	}
	ss.inline = in
	if in.closed = !ss.park(); in.closed {
		return
	}
	for _, id := range h.ids {
		in.held[id] = true
	}
	in.now = st.cfg.Clock.Now()
}

// Holding reports whether the session is between Hold and Release.
func (ss *Session) Holding() bool { return ss.inline != nil }

// Release ends Hold. It does nothing if the session holds nothing.
func (ss *Session) Release() {
	in := ss.inline
	if in == nil {
		return
	}
	ss.inline = nil
	ss.keptInline = in
	if in.closed {
		return
	}
	clear(in.held)
	ss.unpark()
}

func (ss *Session) runInline(shard int, op *envelope) {
	in := ss.inline
	switch {
	case in.closed:
		op.status = ErrClosed
	case shard < 0 || shard >= len(in.held) || !in.held[shard]:
		op.status = ErrNotHeld
	default:
		sh := ss.st.shards[shard]
		if op.keyed {
			op.hash = sh.t.hash(op.key)
		}
		sh.exec(op, in.now)
	}
}

func (ss *Session) runHeldInline(op *envelope) {
	in := ss.inline
	if in.closed {
		op.status = ErrClosed
		return
	}
	in.ids = op.req.(HeldRequest).Shards(ss.st, in.ids[:0])
	for _, id := range in.ids {
		if !in.held[id] {
			op.status = ErrNotHeld
			return
		}
	}
	runHeldOne(op, ss.st, in.now)
}
