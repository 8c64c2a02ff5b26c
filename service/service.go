// Package service is cellserver's decision API: typed limits in, typed
// decisions out, typed errors, for every front end. RESP (package commands)
// is one; an HTTP check endpoint and Envoy's rate-limit service are meant
// to be the next, and none of them parses another's protocol or knows how
// the keyspace is split into shards.
//
// A front end builds a call (Throttle, Limit, Reset, Inspect), hands it to
// Service.Do, or to Service.Queue with a store.Session it runs itself (RESP
// does, to keep one flush per pipeline and request order with the other
// commands), then reads the call's outcome. Refusals come as the errors
// below; each front end words them itself (RESP: "CROSSSLOT ...", "MOVED
// slot addr", "WRONGTYPE ..."; HTTP: a status code).
//
// Quick start:
//
//	svc := service.New(service.Config{Store: st})
//	call := &service.Limit{Call: limit.Call{Limits: []limit.Spec{...}}}
//	if err := svc.Do(call); err != nil { ... }   // refused: nothing charged
//	if call.Err != nil { ... }                   // failed in the store
//	use(call.Decision, call.Results())
package service

import (
	"errors"
	"strconv"
	"sync"

	"github.com/cellserver/cellserver/cluster"
	"github.com/cellserver/cellserver/store"
)

// Errors of a call. A call refused by Queue or Do (routing, validation)
// has charged nothing; one whose Err is set after running has charged
// nothing either (wrong type, closed) unless the error says otherwise.
var (
	// ErrWrongType: a key holds another kind of state than the call's
	// (redis-cell's GCRA TAT for CL.LIMIT, a CL.LIMIT state of another
	// algorithm, ...).
	ErrWrongType = errors.New("service: a key holds another kind of limiter state")
	// ErrCrossSlot: in a cluster mode, the call's keys hash to different
	// slots (use a {hash tag}).
	ErrCrossSlot = errors.New("service: keys in different hash slots")
	// ErrClusterDown: in cluster mode, no node serves the keys' slot.
	ErrClusterDown = errors.New("service: hash slot not served")
	// ErrKeyTooLong: a key is longer than Config.MaxKeyBytes.
	ErrKeyTooLong = errors.New("service: key exceeds the maximum size")
	// ErrBadCall: the call itself is invalid: a Limit without limits,
	// with more than limit.MaxLimits or naming a key twice, a Throttle
	// whose rate is zero. (RESP's parsers refuse these with their own
	// texts first; the check is for front ends that build calls.)
	ErrBadCall = errors.New("service: invalid call")
	// ErrClosed: the store is shutting down; the call did not run.
	ErrClosed = errors.New("service: shutting down")
	// ErrInternal: the call panicked or met a state that does not decode;
	// the server went on.
	ErrInternal = errors.New("service: internal error")
)

// NotOwnerError: in cluster mode, another node serves the keys' slot.
type NotOwnerError struct {
	Slot int
	Addr string // host:port of the node that does
}

func (e *NotOwnerError) Error() string {
	return "service: slot " + strconv.Itoa(e.Slot) + " is served by " + e.Addr
}

// Slots tells where hash slots are served, in the cluster modes.
type Slots interface {
	// Locate reports whether this node serves slot (local), else the
	// address of the node that does; known is false when no node does.
	Locate(slot int) (addr string, local, known bool)
}

// Config configures a Service.
type Config struct {
	Store *store.Store
	// Slots, in a cluster mode, says which slots this node serves; nil
	// outside cluster modes, where a call's keys need not share a slot.
	Slots Slots
	// MaxKeyBytes refuses calls naming a longer key; 0: no limit.
	MaxKeyBytes int
}

// Service answers rate-limit calls. It is safe for concurrent use.
type Service struct {
	st     *store.Store
	slots  Slots
	maxKey int
	sess   sync.Pool // *store.Session, for Do
}

// New returns a Service on cfg.Store.
func New(cfg Config) *Service {
	s := &Service{st: cfg.Store, slots: cfg.Slots, maxKey: cfg.MaxKeyBytes}
	s.sess.New = func() any { return s.st.NewSession() }
	return s
}

// Store returns the service's store.
func (s *Service) Store() *store.Store { return s.st }

// Call is a request a Service runs: *Throttle, *Limit, *Reset, *Inspect.
type Call interface {
	// check refuses the call before it runs (key sizes, routing).
	check(s *Service) error
	// queue adds the call's store requests to sess.
	queue(s *Service, sess *store.Session)
	// Done reads the call's outcome out of its store requests, once the
	// session they were queued on has run. Do calls it; a front end that
	// queues calls on its own session calls it after Run.
	Done()
	// err is the outcome's error (the call's Err field).
	err() error
}

// ErrOf returns c's outcome error, once Done: nil, or one of this
// package's errors.
func ErrOf(c Call) error { return c.err() }

// Queue checks c (key sizes, and in cluster modes that its keys share a
// slot this node serves) and adds it to sess. It returns the refusal, with
// nothing queued, or nil: c's outcome is then readable once sess.Run has
// returned. Calls queued on one session run in the order queued.
func (s *Service) Queue(sess *store.Session, c Call) error {
	if err := c.check(s); err != nil {
		return err
	}
	c.queue(s, sess)
	return nil
}

// Do runs c on its own: Queue, run, Done. It returns Queue's refusal; c's
// own outcome (its Err and results) is set when it returns nil.
func (s *Service) Do(c Call) error {
	sess := s.sess.Get().(*store.Session)
	defer s.sess.Put(sess)
	if err := s.Queue(sess, c); err != nil {
		return err
	}
	sess.Run()
	c.Done()
	return nil
}

// checkEach refuses the n keys key(0..n-1) if one is too long or, in a
// cluster mode, they are not routed here (Route's rule). It takes the
// keys through a function so that no call builds a slice of them.
func (s *Service) checkEach(n int, key func(i int) []byte) error {
	if s.maxKey > 0 {
		for i := range n {
			if len(key(i)) > s.maxKey {
				return ErrKeyTooLong
			}
		}
	}
	return s.route(n, key)
}

// route is Route on the n keys key(0..n-1).
func (s *Service) route(n int, key func(i int) []byte) error {
	if s.slots == nil || n == 0 {
		return nil
	}
	slot := cluster.KeySlot(key(0))
	if _, _, known := s.slots.Locate(slot); !known {
		return ErrClusterDown
	}
	for i := 1; i < n; i++ {
		if cluster.KeySlot(key(i)) != slot {
			return ErrCrossSlot
		}
	}
	return s.routeSlot(slot)
}

// CheckKey refuses k as a call naming it would be refused (too long; in a
// cluster mode, a slot not served here), without running anything: a front
// end that makes several calls for one request checks every key first.
func (s *Service) CheckKey(k []byte) error { return s.checkKey(k) }

// checkKey is check for one key, without building a slice: the hot path.
func (s *Service) checkKey(k []byte) error {
	if s.maxKey > 0 && len(k) > s.maxKey {
		return ErrKeyTooLong
	}
	if s.slots == nil {
		return nil
	}
	return s.routeSlot(cluster.KeySlot(k))
}

// routeSlot is Route's answer for keys that all hash to slot.
func (s *Service) routeSlot(slot int) error {
	addr, local, known := s.slots.Locate(slot)
	switch {
	case !known:
		return ErrClusterDown
	case !local:
		return &NotOwnerError{Slot: slot, Addr: addr}
	}
	return nil
}

// Route checks, in a cluster mode, that keys hash to one slot and that
// this node serves it, as Redis Cluster does: the first key's slot decides
// (no owner: ErrClusterDown, whatever the other keys), a key of another
// slot is ErrCrossSlot, a slot served elsewhere a *NotOwnerError. Outside
// cluster modes it allows anything. Front ends route their other keyed
// commands with it too, so there is one rule.
func (s *Service) Route(keys [][]byte) error {
	return s.route(len(keys), func(i int) []byte { return keys[i] })
}

// storeErr maps a store-level failure to the service's errors.
func storeErr(err error) error {
	switch {
	case err == nil:
		return nil
	case store.AsRedirect(err) != nil:
		return err // the front end words it (MOVED, ASK, TRYAGAIN)
	case errors.Is(err, store.ErrWrongType):
		return ErrWrongType
	case errors.Is(err, store.ErrClosed):
		return ErrClosed
	default:
		return ErrInternal
	}
}
