// Package gateway is the rate-limit decision of cellserver's HTTP-facing
// front ends (the forward-auth check of gateway/httpcheck, Envoy's
// rate-limit service in gateway/rls): a request's descriptors, matched
// against the policy file (gateway/policy), become one all-or-nothing
// CL.LIMIT step of the decision API (package service). Either every limit
// the request matches admits it and each is charged, or none is: a request
// refused by its per-minute limit never spends its per-day quota (unlike
// envoyproxy/ratelimit, issue #1060).
//
// Shadow-mode limits are decided apart, after the enforced ones: they are
// charged when the request passes and they admit it; one that would refuse
// is reported (Status.Shadowed, counted) and the request passes.
//
// The front ends map a Decision to their protocol; the header values every
// one of them shows come from Decision.Values (package gateway/header).
package gateway

import (
	"cmp"
	"errors"
	"log/slog"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cellserver/cellserver/gateway/header"
	"github.com/cellserver/cellserver/gateway/policy"
	"github.com/cellserver/cellserver/limit"
	"github.com/cellserver/cellserver/service"
)

// Code is a descriptor's or a request's outcome, as Envoy's.
type Code uint8

// Codes (the values of Envoy's RateLimitResponse.Code).
const (
	Unknown   Code = 0
	OK        Code = 1
	OverLimit Code = 2
)

func (c Code) String() string {
	switch c {
	case OK:
		return "OK"
	case OverLimit:
		return "OVER_LIMIT"
	}
	return "UNKNOWN"
}

// MaxDescriptors is the most descriptors one request may carry: CL.LIMIT
// decides at most limit.MaxLimits limits at once.
const MaxDescriptors = limit.MaxLimits

// Errors of Check. Every other error is the store's (service.ErrClosed,
// service.ErrInternal, ...): the request was not decided.
var (
	// ErrTooManyDescriptors: more than MaxDescriptors descriptors.
	ErrTooManyDescriptors = errors.New("gateway: more than 16 descriptors in one request")
	// ErrEmptyDomain: the request names no domain.
	ErrEmptyDomain = errors.New("gateway: the request names no domain")
)

// Request is one rate-limit request: Envoy's RateLimitRequest.
type Request struct {
	Domain      string
	Descriptors []policy.Descriptor
	// HitsAddend is the request's hits (0 means 1); a descriptor's own
	// HitsAddend overrides it.
	HitsAddend uint64
}

// Status is one descriptor's outcome.
type Status struct {
	Code Code
	// Limit is the matched limit; nil when none applies (Code OK).
	Limit *policy.RateLimit
	// Remaining is the limit's remaining quota (math.MaxUint32 for an
	// unlimited one).
	Remaining uint32
	// ResetAfter is the time until the limit's state has run out (Envoy's
	// duration_until_reset).
	ResetAfter time.Duration
	// RetryAfter is, for a refusing limit, the time until the same request
	// would pass (the window's length when it never can).
	RetryAfter time.Duration
	// Shadowed: a shadow-mode limit that would have refused; Code is OK.
	Shadowed bool
	// Err: a shadow-mode limit that could not be decided (the store's
	// error). The request's outcome stands: a shadow limit never refuses.
	Err error

	spec    int               // the CL.LIMIT limit this status shows, -1 for none
	inForce *policy.RateLimit // the limit that bucket was decided by (the stricter of two)
}

// Decision is a request's outcome.
type Decision struct {
	Overall  Code
	Statuses []Status // one per descriptor, in request order
	// Deciding is the index of the status the headers describe: the
	// limit that refused, or the enforced limit closest to refusing; -1
	// when no enforced limit applied.
	Deciding int
	Now      time.Time // the instant the enforced limits were decided at (the store clock's)
}

// Violated names the limits that refused the request, each once.
func (d *Decision) Violated() []string {
	var v []string
	var seen [MaxDescriptors]bool
	for _, s := range d.Statuses {
		if s.Code == OverLimit && s.Limit != nil && s.spec >= 0 && !seen[s.spec] {
			seen[s.spec] = true
			v = append(v, s.inForce.Name)
		}
	}
	return v
}

// Values are the decision's header values (gateway/header): every enforced
// limit that applied as a policy, the deciding one described.
func (d *Decision) Values() header.Values {
	v := header.Values{Deciding: -1, Limited: d.Overall == OverLimit, Now: d.Now}
	var seen [MaxDescriptors]bool // one policy per bucket, though matched twice
	for i, s := range d.Statuses {
		if s.Limit == nil || s.spec < 0 || seen[s.spec] {
			continue // no limit, unlimited, shadow, or listed already
		}
		seen[s.spec] = true
		l := s.inForce
		if i == d.Deciding {
			v.Deciding = len(v.Policies)
			v.Remaining = int64(s.Remaining)
			v.ResetAfter = s.ResetAfter
			v.RetryAfter = s.RetryAfter
			v.Reset = header.UntilMore(l.Limit, int64(s.Remaining), s.ResetAfter, d.Now)
			if v.Limited {
				v.Reset = s.RetryAfter
			}
		}
		v.Policies = append(v.Policies, header.Policy{
			Name:      uniqueName(v.Policies, l.Name),
			Quota:     quota(l),
			Window:    l.Window,
			Algorithm: l.Algorithm,
		})
	}
	return v
}

// uniqueName is name, or name-2, name-3, ... if a policy listed before has
// it: two overrides of one request with the same numbers share a name, and
// RateLimit must say which item it describes.
func uniqueName(ps []header.Policy, name string) string {
	taken := func(n string) bool {
		for _, p := range ps {
			if p.Name == n {
				return true
			}
		}
		return false
	}
	if !taken(name) {
		return name
	}
	for i := 2; ; i++ {
		if n := name + "-" + strconv.Itoa(i); !taken(n) {
			return n
		}
	}
}

// quota is RateLimit-Policy's q of l: its limit (GCRA: its burst).
func quota(l *policy.RateLimit) int64 {
	if l.Limit == nil || l.Blocks() { // a block list entry allows none
		return int64(l.RequestsPerUnit)
	}
	return limit.Capacity(l.Limit)
}

// shadowFailed logs a shadow limit the store could not decide, at most once
// a second with a count of the others.
func (e *Engine) shadowFailed(domain, name string, err error) {
	e.shadowErrs.Add(1)
	now := time.Now().UnixNano()
	last := e.shadowLogged.Load()
	if now-last < int64(time.Second) || !e.shadowLogged.CompareAndSwap(last, now) {
		return
	}
	e.log.Warn("gateway: a shadow-mode limit could not be decided; the request's outcome stands",
		"domain", domain, "limit", name, "err", err, "failures", e.shadowErrs.Swap(0))
}

// Observer is told of every decision (metrics).
type Observer interface {
	// Decided is called after each decided request, with the front end's
	// name ("http", "grpc", ...) and how long the decision took.
	Decided(frontend, domain string, d *Decision, took time.Duration)
}

// Config configures an Engine.
type Config struct {
	Service  *service.Service
	Policies *policy.Source
	Observer Observer     // optional
	Logger   *slog.Logger // optional: where shadow limits' failures are logged
}

// Engine decides requests. Safe for concurrent use.
type Engine struct {
	svc *service.Service
	src *policy.Source
	obs Observer
	log *slog.Logger
	buf sync.Pool // *scratch

	shadowErrs   atomic.Int64 // failures since the last log line
	shadowLogged atomic.Int64 // when that line was written (Unix ns)
}

// scratch is one Check's reusable buffers.
type scratch struct {
	matches []policy.Match
	call    service.Limit
	specs   []limit.Spec
	keys    [][]byte            // each match's key (nil: no bucket)
	specOf  []int               // the spec of each status, -1 for none
	limitOf []*policy.RateLimit // the limit each spec is decided by
}

// New returns an Engine.
func New(cfg Config) *Engine {
	e := &Engine{svc: cfg.Service, src: cfg.Policies, obs: cfg.Observer, log: cfg.Logger}
	if e.log == nil {
		e.log = slog.New(slog.DiscardHandler)
	}
	e.buf.New = func() any { return &scratch{} }
	return e
}

// Policies returns the engine's policy source.
func (e *Engine) Policies() *policy.Source { return e.src }

// Check decides req. Its error is ErrTooManyDescriptors, ErrEmptyDomain,
// or the decision API's (service.ErrKeyTooLong, service.ErrClosed,
// service.ErrInternal, a cluster routing error): nothing was charged.
func (e *Engine) Check(frontend string, req *Request) (*Decision, error) {
	start := time.Now()
	if req.Domain == "" {
		return nil, ErrEmptyDomain
	}
	if len(req.Descriptors) > MaxDescriptors {
		return nil, ErrTooManyDescriptors
	}
	sc := e.buf.Get().(*scratch)
	defer e.buf.Put(sc)
	cfg := e.src.Current()
	sc.matches = cfg.MatchAll(req.Domain, req.Descriptors, sc.matches[:0])
	// Every bucket is checked (key size, routing) before anything is
	// charged, shadow ones too: an error means nothing was charged.
	sc.keys = sc.keys[:0]
	for _, m := range sc.matches {
		var k []byte
		if m.Limit != nil && !m.Limit.Unlimited {
			k = []byte(m.Key) // once: checked here, the spec's key below
			if err := e.svc.CheckKey(k); err != nil {
				return nil, err
			}
		}
		sc.keys = append(sc.keys, k)
	}
	d := &Decision{Overall: OK, Statuses: make([]Status, len(req.Descriptors)), Deciding: -1}

	// The enforced limits, one CL.LIMIT call. A bucket matched twice in one
	// request (the same entries, algorithm and unit) is one limit charged
	// the sum of the costs, the stricter of the two: envoyproxy/ratelimit
	// increments its one counter twice and compares it with each.
	sc.specs, sc.specOf, sc.limitOf = sc.specs[:0], sc.specOf[:0], sc.limitOf[:0]
	var shadow []int
	for i, m := range sc.matches {
		st := &d.Statuses[i]
		st.Code, st.Limit, st.spec = OK, m.Limit, -1
		sc.specOf = append(sc.specOf, -1)
		switch {
		case m.Limit == nil:
			continue
		case m.Limit.Unlimited:
			st.Remaining = math.MaxUint32
			continue
		case m.Limit.ShadowMode:
			shadow = append(shadow, i)
			continue
		}
		cost := costOf(req, i, m.Limit)
		j := indexKey(sc.specs, m.Key)
		if j >= 0 {
			sc.specs[j].Cost = satAdd32(sc.specs[j].Cost, cost)
			if limit.Capacity(m.Limit.Limit) < limit.Capacity(sc.specs[j].Limit) {
				sc.specs[j].Limit, sc.limitOf[j] = m.Limit.Limit, m.Limit
			}
		} else {
			j = len(sc.specs)
			sc.specs = append(sc.specs, limit.Spec{Key: sc.keys[i], Limit: m.Limit.Limit, Cost: cost})
			sc.limitOf = append(sc.limitOf, m.Limit)
		}
		sc.specOf[i], st.spec = j, j
	}
	if len(sc.specs) > 0 {
		c := &sc.call
		// Fields, not the whole struct: its request keeps the scratch of
		// calls of several limits from one call to the next.
		c.Call = limit.Call{Limits: sc.specs, Options: limit.Options{MS: true}}
		c.Decision, c.Err, c.Now = limit.Decision{}, nil, 0
		if err := e.svc.Do(c); err != nil {
			return nil, err
		}
		if c.Err != nil {
			return nil, c.Err
		}
		res := c.Results()
		for i, j := range sc.specOf {
			if j < 0 {
				continue
			}
			d.Statuses[i].inForce = sc.limitOf[j]
			fill(&d.Statuses[i], res[j].R5)
			if d.Deciding < 0 && c.Decision.Index == j+1 {
				d.Deciding = i
			}
		}
		if c.Decision.Limited {
			d.Overall = OverLimit
		}
		d.Now = time.Unix(0, c.Now)
	}

	// Shadow limits: each on its own, charged only if the request passes.
	for _, i := range shadow {
		m := sc.matches[i]
		c := &service.Limit{Call: limit.Call{
			Limits:  []limit.Spec{{Key: sc.keys[i], Limit: m.Limit.Limit, Cost: costOf(req, i, m.Limit)}},
			Options: limit.Options{MS: true, Peek: d.Overall == OverLimit},
		}}
		st := &d.Statuses[i]
		if err := e.svc.Do(c); err != nil || c.Err != nil {
			st.Err = cmp.Or(err, c.Err) // the enforced limits are charged already
			e.shadowFailed(req.Domain, m.Limit.Name, st.Err)
			continue
		}
		fill(st, c.Results()[0].R5)
		if st.Code == OverLimit {
			st.Code, st.Shadowed = OK, true
		}
	}
	if d.Now.IsZero() { // no enforced limit: the instant of the answer
		d.Now = time.Unix(0, e.svc.Store().Clock().Now())
	}
	if e.obs != nil {
		e.obs.Decided(frontend, req.Domain, d, time.Since(start))
	}
	return d, nil
}

// fill sets a status from its limit's R5 (in ms).
func fill(st *Status, r limit.R5) {
	st.Remaining = uint32(min(max(r.Remaining, 0), math.MaxUint32))
	if st.Limit.Blocks() {
		st.Remaining = 0 // its stand-in limit of 1 is never usable
	}
	st.ResetAfter = time.Duration(max(r.ResetAfter, 0)) * time.Millisecond
	if r.Limited {
		st.Code = OverLimit
		st.RetryAfter = time.Duration(r.RetryAfter) * time.Millisecond
		if r.RetryAfter < 0 { // the cost can never fit
			st.RetryAfter = st.Limit.Window
		}
	}
}

// costOf is descriptor i's charge: its hits (the request's unless it has
// its own) times the limit's cost, saturated to CL.LIMIT's largest.
func costOf(req *Request, i int, l *policy.RateLimit) uint32 {
	hits := req.HitsAddend
	if hits == 0 {
		hits = 1
	}
	if d := req.Descriptors[i]; d.HasHits {
		hits = d.HitsAddend
	}
	cost := uint64(l.Cost)
	if cost == 0 {
		cost = 1
	}
	if hits != 0 && cost > math.MaxUint32/hits {
		return math.MaxUint32
	}
	return uint32(min(hits*cost, math.MaxUint32))
}

func indexKey(specs []limit.Spec, key string) int {
	for j := range specs {
		if string(specs[j].Key) == key {
			return j
		}
	}
	return -1
}

func satAdd32(a, b uint32) uint32 {
	if a > math.MaxUint32-b {
		return math.MaxUint32
	}
	return a + b
}

// IsUnavailable reports whether err means the store could not answer (the
// front ends' UNAVAILABLE / on-error path), rather than a bad request.
func IsUnavailable(err error) bool {
	switch {
	case errors.Is(err, ErrTooManyDescriptors), errors.Is(err, ErrEmptyDomain),
		errors.Is(err, service.ErrKeyTooLong), errors.Is(err, service.ErrBadCall):
		return false
	}
	return err != nil
}
