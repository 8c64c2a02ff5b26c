package service

import (
	"bytes"
	"errors"

	"github.com/cellserver/cellserver/gcra"
	"github.com/cellserver/cellserver/limit"
	"github.com/cellserver/cellserver/store"
)

// ErrExpireRange is redis-cell's own failure (CL.THROTTLE with a period
// or burst so large that the key's TTL works out below -1 ms): the new
// state WAS stored with no TTL, as the module stores it, and the call
// answers this error instead of its decision.
var ErrExpireRange = errors.New("service: the key's expiry is out of range")

// Throttle is one CL.THROTTLE decision on a GCRA key, exactly as
// redis-cell answers it, or with Peek CL.PEEK's: the same decision at this
// instant, written nowhere. Fill Key and Params (gcra.Params; Quantity 0 is
// redis-cell's own "peek" that does write). After running, Err is nil,
// ErrWrongType, ErrExpireRange, ErrClosed or ErrInternal, and Result the
// decision when Err is nil.
type Throttle struct {
	Key    []byte
	Params gcra.Params
	Peek   bool

	Result gcra.Result
	Err    error

	throttle store.ThrottleReq
	peek     store.PeekReq
}

func (t *Throttle) err() error { return t.Err }

func (t *Throttle) check(s *Service) error {
	if gcra.Interval(t.Params.Count, t.Params.Period) == 0 {
		return ErrBadCall
	}
	return s.checkKey(t.Key)
}

func (t *Throttle) queue(s *Service, sess *store.Session) {
	// Field by field, not a struct literal: the hot path, and zeroing the
	// whole request (its outputs are set by its run) costs more than this.
	if t.Peek {
		t.peek.Key, t.peek.Params = t.Key, t.Params
		sess.Add(&t.peek)
		return
	}
	t.throttle.Key, t.throttle.Params = t.Key, t.Params
	sess.Add(&t.throttle)
}

// Done fills Result and Err from the store's answer; call it after the
// session ran (Do does).
func (t *Throttle) Done() {
	err, res := t.throttle.Status(), &t.throttle.Result
	if err == nil {
		err = t.throttle.Err
	}
	if t.Peek {
		err, res = t.peek.Status(), &t.peek.Result
		if err == nil {
			err = t.peek.Err
		}
	}
	t.Result, t.Err = *res, storeErr(err)
	if t.Err == nil && t.Result.Write && t.Result.Expiry == gcra.ExpireError {
		t.Err = ErrExpireRange
	}
}

// Limit is one CL.LIMIT call: 1 to limit.MaxLimits limits of any
// algorithm, decided and charged all or nothing and isolated from every
// other call, whether its keys live on one shard or several. Fill Call
// (limit.ParseLimit builds one from CL.LIMIT's arguments; other front ends
// fill limit.Spec values themselves). After running, Err is nil,
// ErrWrongType (nothing charged), ErrClosed or ErrInternal; Decision and
// Results are the reply when Err is nil.
type Limit struct {
	Call limit.Call

	Decision limit.Decision
	Err      error
	Now      int64 // the instant it was decided at (Unix ns): its durations count from it

	req store.LimitReq
}

// Results are the per-limit outcomes, one for each of Call.Limits, valid
// until the call is reused.
func (l *Limit) Results() []limit.Result {
	if len(l.req.Results) < len(l.Call.Limits) {
		return nil // not run (the store refused it)
	}
	return l.req.Results[:len(l.Call.Limits)]
}

func (l *Limit) err() error { return l.Err }

func (l *Limit) check(s *Service) error {
	ls := l.Call.Limits
	if len(ls) == 0 || len(ls) > limit.MaxLimits {
		return ErrBadCall
	}
	for i := 1; i < len(ls); i++ {
		for j := range i {
			if bytes.Equal(ls[i].Key, ls[j].Key) {
				return ErrBadCall // one key charged twice would be two entries
			}
		}
	}
	return s.checkEach(len(ls), func(i int) []byte { return ls[i].Key })
}

func (l *Limit) queue(s *Service, sess *store.Session) {
	l.req.SetCall(l.Call)
	if !l.req.OneShard(s.st) {
		// Several shards: run with each of them parked, in order with the
		// session's other calls.
		sess.AddHeld(&l.req)
		return
	}
	sess.Add(&l.req) // by its first key: the shard's warm pass prefetches it
}

// Done fills Decision and Err from the store's answer; call it after the
// session ran (Do does).
func (l *Limit) Done() {
	err := l.req.Status()
	if err == nil {
		err = l.req.Err
	}
	l.Err = storeErr(err)
	l.Decision, l.Now = l.req.Decision, l.req.Now
}

// Reset is CL.RESET: it removes the limiter state of every key named, of
// whatever kind. After running, Removed counts the live keys removed
// (a key named twice counts once) and Err is nil, ErrClosed or ErrInternal.
type Reset struct {
	Keys [][]byte

	Removed int64
	Err     error

	dels []store.DelReq
}

func (r *Reset) err() error { return r.Err }

func (r *Reset) check(s *Service) error {
	return s.checkEach(len(r.Keys), func(i int) []byte { return r.Keys[i] })
}

func (r *Reset) queue(s *Service, sess *store.Session) {
	if cap(r.dels) < len(r.Keys) {
		r.dels = make([]store.DelReq, len(r.Keys))
	}
	r.dels = r.dels[:len(r.Keys)]
	for i, k := range r.Keys {
		r.dels[i] = store.DelReq{Key: k}
		sess.Add(&r.dels[i])
	}
}

// Done fills Removed and Err; call it after the session ran (Do does).
func (r *Reset) Done() {
	r.Removed, r.Err = 0, nil
	for i := range r.dels {
		if err := storeErr(r.dels[i].Status()); err != nil {
			r.Err = err
			continue
		}
		if r.dels[i].Removed {
			r.Removed++
		}
	}
}

// Inspect is CL.INSPECT: a key's limiter state, decoded into named fields
// (limit.Inspect), and its TTL. After running, Found says whether the key
// is live; Fields and PTTL (-1: no expiry, else ms left) are set when it
// is; Err is nil, ErrClosed or ErrInternal.
type Inspect struct {
	Key []byte

	Found  bool
	Fields []limit.Field
	PTTL   int64
	Err    error

	req store.InspectReq
}

func (in *Inspect) err() error { return in.Err }

func (in *Inspect) check(s *Service) error { return s.checkKey(in.Key) }

func (in *Inspect) queue(s *Service, sess *store.Session) {
	in.req = store.InspectReq{Key: in.Key, State: in.req.State}
	sess.Add(&in.req)
}

// Done fills the outcome; call it after the session ran (Do does).
func (in *Inspect) Done() {
	in.Found, in.Fields, in.PTTL = false, nil, 0
	if in.Err = storeErr(in.req.Status()); in.Err != nil || !in.req.Found {
		return
	}
	fs, err := limit.Inspect(in.req.State)
	if err != nil {
		in.Err = ErrInternal
		return
	}
	in.Found, in.Fields, in.PTTL = true, fs, in.req.PTTL
}

// Release drops what the call references of its inputs (keys, which
// alias a front end's buffers) once its outcome was read, keeping its
// buffers for the next use; the call must be filled again before then.
func (t *Throttle) Release() {
	t.Key, t.throttle.Key, t.peek.Key = nil, nil, nil
	t.throttle.Forget()
	t.peek.Forget()
}

// Release is Throttle.Release for a Limit; Call.Limits keeps its array
// (limit.ParseLimitInto fills it again), cleared.
func (l *Limit) Release() {
	full := l.Call.Limits[:cap(l.Call.Limits)] // a failed parse may have filled past len
	clear(full)
	l.Call.Limits = full[:0]
	l.req.Call = limit.Call{}
	l.req.Forget()
}

// DropScratch lets go of the room the call kept for calls of several
// limits (a pool keeps it on a bounded number of calls).
func (l *Limit) DropScratch() { l.req.DropScratch() }

// HasScratch reports whether the call keeps that room.
func (l *Limit) HasScratch() bool { return l.req.HasScratch() }

// Release is Throttle.Release for a Reset; it also drops its per-key
// buffers if they grew past maxKept keys, so that a reused Reset does not
// keep one huge call's memory.
func (r *Reset) Release(maxKept int) {
	r.Keys = nil
	if cap(r.dels) > maxKept {
		r.dels = nil
		return
	}
	clear(r.dels[:cap(r.dels)])
	r.dels = r.dels[:0]
}

// maxKeptState bounds the state buffer an Inspect keeps for its next use:
// every kind's state is a few dozen bytes but an SWL log's, up to 120 KB,
// which a front end's pooled calls must not each hold for as long as the
// pool lives.
const maxKeptState = 4 << 10

// Release is Throttle.Release for an Inspect; it drops the fields and a
// state buffer past maxKeptState.
func (in *Inspect) Release() {
	in.Key, in.req.Key = nil, nil
	in.Fields = nil
	if cap(in.req.State) > maxKeptState {
		in.req.State = nil
	}
	in.req.Forget()
}
