// Package middleware rate-limits the routes of a Go net/http application
// with cellserver: one all-or-nothing CL.LIMIT call per request (go-redis,
// over RESP), the IETF RateLimit/RateLimit-Policy and X-RateLimit-* headers
// on every response, and a 429 with Retry-After and a problem+json body
// when a limit refuses (the same bytes as cellserver's own HTTP front ends:
// package gateway/header writes them).
//
// When cellserver cannot answer in time (down, unreachable, slow: each call
// has its own timeout), each route does what it was told: fail open, with a
// local in-process limiter deciding the same limits as a ceiling, or fail
// closed (503 by default, or 429). Every fallback is counted (Stats, and a
// prometheus.Collector) and logged, at most one line a second with a count.
// Nothing is sticky: the next request after cellserver is back uses it again
// (a short circuit breaker, see Config.BreakerOpen, only skips the calls
// while failures keep coming).
//
// # Quick start
//
//	rdb := redis.NewClient(middleware.ClientOptions("127.0.0.1:6379"))
//	mw, err := middleware.New(middleware.Config{Client: rdb})
//	api, err := mw.Limiter(middleware.Route{
//		Name: "api",
//		Key:  middleware.ClientIP{TrustedHops: 1}.Key,
//		Limits: []middleware.Limit{
//			{Name: "minute", Limit: limit.FW{Limit: 60, Window: time.Minute}},
//			{Name: "day", Limit: limit.FW{Limit: 1000, Window: 24 * time.Hour}},
//		},
//	})
//	http.Handle("/api/", api(apiHandler))
//
// The client helper that retries 429s and 5xx answers is package
// middleware/retry; a runnable example app is middleware/example.
package middleware

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cellserver/cellserver/gateway/header"
	"github.com/cellserver/cellserver/limit"
)

// Limit is one limit of a route: its name (the policy name in the headers,
// and part of its key) and an algorithm of package limit with its
// parameters: limit.GCRA, limit.FW, limit.SWC, limit.SWL or limit.CAL.
// Durations are sent in milliseconds, so they must be whole milliseconds.
type Limit struct {
	Name  string      // [a-z0-9_-], 1..64 bytes, unique in its route
	Limit limit.Limit // the algorithm and its parameters
	Cost  uint32      // units charged per request; 0 means 1
}

// cost is the charge of one request.
func (l Limit) cost() uint32 {
	if l.Cost == 0 {
		return 1
	}
	return l.Cost
}

// Window is RateLimit-Policy's w: the window (GCRA: the period; a calendar
// unit: its nominal length, 30 days for a month, 365 for a year).
func (l Limit) Window() time.Duration {
	switch x := l.Limit.(type) {
	case limit.GCRA:
		return x.Period
	case limit.FW:
		return x.Window
	case limit.SWC:
		return x.Window
	case limit.SWL:
		return x.Window
	case limit.CAL:
		return calNominal[x.Unit]
	}
	return 0
}

var calNominal = [...]time.Duration{
	limit.Day: 24 * time.Hour, limit.Week: 7 * 24 * time.Hour,
	limit.Month: 30 * 24 * time.Hour, limit.Year: 365 * 24 * time.Hour,
}

// KeyFunc returns the identity a request is limited by: a user id, an API
// key, a client IP (ClientIP.Key). Requests with the same identity share
// their buckets on a route. An error refuses the request (Route.OnKeyError).
type KeyFunc func(*http.Request) (string, error)

// FailureMode is what a route does when cellserver cannot decide.
type FailureMode uint8

const (
	// FailOpen decides locally, in this process, with the route's local
	// limits (its own limits unless LocalLimits says otherwise). With n
	// instances of the application, up to n times the limit passes while
	// cellserver is away; the local limiter is a ceiling, not the limit.
	FailOpen FailureMode = iota
	// FailClosed refuses every request (Route.ClosedStatus) until
	// cellserver answers again. For login, payment, costly endpoints.
	FailClosed
)

func (f FailureMode) String() string {
	if f == FailClosed {
		return "closed"
	}
	return "open"
}

// Route is one rate-limited route (or group of routes sharing buckets).
type Route struct {
	// Name names the route in keys, logs and metrics: [a-z0-9_-],
	// 1..64 bytes, unique in its Middleware.
	Name string
	// Limits are charged all-or-nothing: 1..16 limits. A request
	// refused by one of them charges none (a per-minute refusal never
	// spends the per-day quota).
	Limits []Limit
	// Key gives a request's identity. Required.
	Key KeyFunc
	// OnFailure says what happens while cellserver cannot decide.
	// Default FailOpen.
	OnFailure FailureMode
	// LocalLimits, with FailOpen, are the limits the local limiter
	// decides; default Limits. Give them their own names: they have
	// their own buckets.
	LocalLimits []Limit
	// ClosedStatus, with FailClosed, is the status of a refused request:
	// 503 (the default: the limiter is unavailable, it is not the
	// client's fault; monitors count it as an outage, clients retry with
	// back-off) or 429 (clients that only slow down on a 429 do so).
	// Both carry Retry-After: ClosedRetryAfter.
	ClosedStatus int
	// ClosedRetryAfter is Retry-After of a fail-closed refusal; default
	// 1 s (rounded up to whole seconds).
	ClosedRetryAfter time.Duration
	// OnKeyError answers a request whose key function failed; default a
	// 400 problem+json naming the error. Nothing is charged.
	OnKeyError func(w http.ResponseWriter, r *http.Request, err error)
}

// Config configures a Middleware.
type Config struct {
	// Client talks to cellserver. Required. It must honour context
	// deadlines (redis.Options.ContextTimeoutEnabled: New checks it on
	// the go-redis clients that expose their options): otherwise a slow
	// cellserver holds requests for the client's ReadTimeout (3 s), not
	// Timeout. ClientOptions gives options that do.
	Client redis.UniversalClient
	// Timeout bounds each CL.LIMIT call (and the request's own deadline,
	// if sooner, bounds it too); past it the route falls back. Default
	// 50 ms.
	Timeout time.Duration
	// KeyPrefix starts every key; no '{' or '}'. Default "rl:". A key is
	// prefix + "{" + route + ":" + identity + "}:" + limit name: the hash
	// tag keeps a request's limits in one slot in cluster mode.
	KeyPrefix string
	// Headers is the header convention; nil means header.Default (IETF
	// and X-RateLimit-* with epoch reset).
	Headers *header.Convention
	// BreakerFailures consecutive failed calls open the breaker for
	// BreakerOpen: requests fall back at once instead of each waiting
	// for Timeout. After it, requests call cellserver again; the first
	// that succeeds closes it. Defaults 5 and 1 s; BreakerOpen < 0
	// disables the breaker.
	BreakerFailures int
	BreakerOpen     time.Duration
	// LocalMaxKeys and LocalMaxBytes bound the local limiter's memory:
	// past either, entries are evicted (the expired first, then those
	// expiring soonest among a sample), which resets their buckets.
	// Defaults 100000 keys and 64 MiB.
	LocalMaxKeys  int
	LocalMaxBytes int
	// Logger receives the fallback lines; default slog.Default().
	Logger *slog.Logger
	// Now is the clock of local decisions, headers and logs; default
	// time.Now. Tests inject one.
	Now func() time.Time
}

// Defaults of Config.
const (
	DefaultTimeout         = 50 * time.Millisecond
	DefaultKeyPrefix       = "rl:"
	DefaultBreakerFailures = 5
	DefaultBreakerOpen     = time.Second
	DefaultLocalMaxKeys    = 100000
	DefaultLocalMaxBytes   = 64 << 20
)

// MaxIdentity is the longest identity used as is in a key; a longer one
// is replaced by "sha256:" and its SHA-256 in hex, so that client-chosen
// values (API keys, headers) never make long keys. An identity that
// starts with "sha256:" is replaced so too, whatever its length, so that
// it cannot name a long identity's buckets.
const MaxIdentity = 128

// EnsureDefaults fills zero fields.
func (c *Config) EnsureDefaults() {
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.KeyPrefix == "" {
		c.KeyPrefix = DefaultKeyPrefix
	}
	if c.Headers == nil {
		c.Headers = &header.Default
	}
	if c.BreakerFailures == 0 {
		c.BreakerFailures = DefaultBreakerFailures
	}
	if c.BreakerOpen == 0 {
		c.BreakerOpen = DefaultBreakerOpen
	}
	if c.LocalMaxKeys == 0 {
		c.LocalMaxKeys = DefaultLocalMaxKeys
	}
	if c.LocalMaxBytes == 0 {
		c.LocalMaxBytes = DefaultLocalMaxBytes
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
}

// Validate reports a configuration error.
func (c *Config) Validate() error {
	switch {
	case c.Client == nil:
		return errors.New("middleware: Config.Client is required")
	case c.Timeout < 0:
		return errors.New("middleware: the timeout must not be negative")
	case containsBrace(c.KeyPrefix):
		return fmt.Errorf("middleware: the key prefix %q must not contain '{' or '}'", c.KeyPrefix)
	case len(c.KeyPrefix) > 64:
		return errors.New("middleware: the key prefix is longer than 64 bytes")
	case c.BreakerFailures < 1:
		return errors.New("middleware: BreakerFailures must be at least 1")
	case c.LocalMaxKeys < 1 || c.LocalMaxBytes < 1:
		return errors.New("middleware: the local limiter's bounds must be positive")
	}
	if ignoresDeadlines(c.Client) {
		return errors.New("middleware: the go-redis client ignores context deadlines; set ContextTimeoutEnabled (see ClientOptions)")
	}
	return nil
}

// ignoresDeadlines reports whether c is a go-redis client whose options
// make it ignore context deadlines (other clients cannot be checked).
func ignoresDeadlines(c redis.UniversalClient) bool {
	switch x := c.(type) {
	case *redis.Client:
		return !x.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		return !x.Options().ContextTimeoutEnabled
	case *redis.Ring:
		return !x.Options().ContextTimeoutEnabled
	}
	return false
}

func containsBrace(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] == '{' || s[i] == '}' {
			return true
		}
	}
	return false
}

// ClientOptions are go-redis options suited to the middleware: context
// deadlines honoured (the middleware's Timeout works), no go-redis retries
// and one dial per call (a failed call falls back at once; the next request
// tries again), short dial and I/O timeouts as a second bound.
func ClientOptions(addr string) *redis.Options {
	return &redis.Options{
		Addr:                  addr,
		ContextTimeoutEnabled: true,
		MaxRetries:            -1,
		DialerRetries:         1, // not 5 dials 100 ms apart per call: the next request dials again
		DialTimeout:           time.Second,
		ReadTimeout:           time.Second,
		WriteTimeout:          time.Second,
	}
}

// Middleware rate-limits routes with one cellserver. Safe for concurrent
// use; build it once and make a Limiter per route.
type Middleware struct {
	cfg   Config
	local *localLimiter
	brk   breaker
	log   fallbackLog

	mu     sync.Mutex
	routes map[string]*routeStats // by route name
}

// New returns a Middleware, or the configuration's error.
func New(cfg Config) (*Middleware, error) {
	cfg.EnsureDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	m := &Middleware{
		cfg:    cfg,
		local:  newLocalLimiter(cfg.LocalMaxKeys, cfg.LocalMaxBytes),
		routes: map[string]*routeStats{},
	}
	m.log.logger = cfg.Logger
	m.brk.failures, m.brk.open = int64(cfg.BreakerFailures), cfg.BreakerOpen
	return m, nil
}

var nameRE = regexp.MustCompile(`^[a-z0-9_-]{1,64}$`)

// route is a validated Route with its prebuilt CL.LIMIT arguments.
type route struct {
	Route
	m     *Middleware
	args  []any // CL.LIMIT's arguments; keys at keyAt, filled per request
	keyAt []int
	local []limit.Spec // LocalLimits as specs; keys filled per request
	st    *routeStats
}

// Limiter returns the middleware of one route, or why the route is
// invalid (its names, its limits' parameters, a name already used).
func (m *Middleware) Limiter(r Route) (func(http.Handler) http.Handler, error) {
	rt, err := m.newRoute(r)
	if err != nil {
		return nil, err
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			rt.serve(w, req, next)
		})
	}, nil
}

func (m *Middleware) newRoute(r Route) (*route, error) {
	if !nameRE.MatchString(r.Name) {
		return nil, fmt.Errorf("middleware: route name %q: want 1..64 of [a-z0-9_-]", r.Name)
	}
	if r.Key == nil {
		return nil, fmt.Errorf("middleware: route %s has no key function", r.Name)
	}
	if err := validLimits(r.Name, r.Limits); err != nil {
		return nil, err
	}
	if r.LocalLimits == nil {
		r.LocalLimits = r.Limits
	} else if err := validLimits(r.Name, r.LocalLimits); err != nil {
		return nil, fmt.Errorf("%w (local limits)", err)
	}
	switch r.ClosedStatus {
	case 0:
		r.ClosedStatus = http.StatusServiceUnavailable
	case http.StatusServiceUnavailable, http.StatusTooManyRequests:
	default:
		return nil, fmt.Errorf("middleware: route %s: ClosedStatus %d: want 503 or 429", r.Name, r.ClosedStatus)
	}
	if r.OnFailure > FailClosed {
		return nil, fmt.Errorf("middleware: route %s: unknown failure mode %d", r.Name, r.OnFailure)
	}
	if r.ClosedRetryAfter <= 0 {
		r.ClosedRetryAfter = time.Second
	}
	if r.OnKeyError == nil {
		r.OnKeyError = badKey
	}
	rt := &route{Route: r, m: m}
	rt.args, rt.keyAt = buildArgs(r.Limits)
	for _, l := range r.LocalLimits {
		rt.local = append(rt.local, limit.Spec{Limit: l.Limit, Cost: l.cost()})
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, dup := m.routes[r.Name]; dup {
		return nil, fmt.Errorf("middleware: route name %s used twice", r.Name)
	}
	rt.st = &routeStats{}
	m.routes[r.Name] = rt.st
	return rt, nil
}

func validLimits(route string, ls []Limit) error {
	if len(ls) == 0 || len(ls) > limit.MaxLimits {
		return fmt.Errorf("middleware: route %s has %d limits: want 1..%d", route, len(ls), limit.MaxLimits)
	}
	seen := map[string]bool{}
	for _, l := range ls {
		if !nameRE.MatchString(l.Name) {
			return fmt.Errorf("middleware: route %s: limit name %q: want 1..64 of [a-z0-9_-]", route, l.Name)
		}
		if seen[l.Name] {
			return fmt.Errorf("middleware: route %s: limit name %s used twice", route, l.Name)
		}
		seen[l.Name] = true
		if l.Limit == nil {
			return fmt.Errorf("middleware: route %s: limit %s has no algorithm", route, l.Name)
		}
		if err := l.Limit.Validate(); err != nil {
			// The texts are CL.LIMIT's ("ERR limit must be between ..."),
			// with durations in ms.
			return fmt.Errorf("middleware: route %s: limit %s: %v (durations in ms)", route, l.Name, err)
		}
	}
	return nil
}

// serve is one request through the route.
func (rt *route) serve(w http.ResponseWriter, r *http.Request, next http.Handler) {
	id, err := rt.Key(r)
	if err != nil {
		rt.st.keyErrors.Add(1)
		rt.OnKeyError(w, r, err)
		return
	}
	keys := rt.keys(id)
	m := rt.m
	reason, cause := ReasonBreaker, error(nil) // unless a call is made
	if m.brk.allow(m.cfg.Now()) {
		v, err := rt.remote(r.Context(), keys)
		if err == nil {
			if n := m.brk.succeeded(); n > 0 {
				m.log.recovered(rt.Name, n)
			}
			rt.st.count(sourceCellserver, v.Limited)
			rt.answer(w, r, next, v)
			return
		}
		if errors.Is(r.Context().Err(), context.Canceled) {
			// The client went away or the server is shutting down: not
			// cellserver's failure, and nobody to answer.
			return
		}
		reason, cause = classify(err)
		if errors.Is(r.Context().Err(), context.DeadlineExceeded) {
			// The request's own deadline, sooner than Timeout, ended
			// the call: a timeout, and the client still waits for an
			// answer; but it says nothing of cellserver's health, so the
			// breaker shared by every request does not count it.
			reason = ReasonTimeout
		} else {
			m.brk.failed(m.cfg.Now())
		}
	}
	rt.st.fallbacks[reason].Add(1)
	m.log.fallback(m.cfg.Now(), rt.Name, rt.OnFailure, reason, cause)
	if rt.OnFailure == FailClosed {
		rt.st.refused.Add(1)
		rt.refuse(w)
		return
	}
	v, err := rt.decideLocally(keys)
	if err != nil {
		// A broken invariant of the local limiter (a state it wrote does
		// not decode): fail open without a ceiling rather than refuse
		// every request of the key.
		m.cfg.Logger.Error("middleware: local limiter failed", "route", rt.Name, "err", err)
		next.ServeHTTP(w, r)
		return
	}
	rt.st.count(sourceLocal, v.Limited)
	rt.answer(w, r, next, v)
}

// keys returns the keys of the route's limits for identity id, in order,
// then those of its local limits (the same keys by default).
func (rt *route) keys(id string) []string {
	if len(id) > MaxIdentity || strings.HasPrefix(id, hashPrefix) {
		// A raw identity that looks like a hashed one is hashed too: a
		// client that knows the hash of another's long API key never
		// shares its buckets by sending it.
		id = hashID(id)
	}
	base := rt.m.cfg.KeyPrefix + "{" + rt.Name + ":" + id + "}:"
	keys := make([]string, len(rt.Limits), len(rt.Limits)+len(rt.LocalLimits))
	for i, l := range rt.Limits {
		keys[i] = base + l.Name
	}
	for _, l := range rt.LocalLimits {
		keys = append(keys, base+l.Name)
	}
	return keys
}

// decision is one request's outcome, from cellserver or the local limiter.
type decision struct {
	header.Values
	Violated []string
}

// remote decides the request with one CL.LIMIT call.
func (rt *route) remote(ctx context.Context, keys []string) (*decision, error) {
	ctx, cancel := context.WithTimeout(ctx, rt.m.cfg.Timeout)
	defer cancel()
	args := make([]any, len(rt.args))
	copy(args, rt.args)
	for i, at := range rt.keyAt {
		args[at] = keys[i]
	}
	reply, err := rt.m.cfg.Client.Do(ctx, args...).Result()
	if err != nil {
		return nil, err
	}
	idx, r5s, err := parseReply(reply, len(rt.Limits))
	if err != nil {
		return nil, err
	}
	return values(rt.Limits, r5s, idx, rt.m.cfg.Now()), nil
}

// decideLocally decides the route's local limits in process.
func (rt *route) decideLocally(keys []string) (*decision, error) {
	specs := make([]limit.Spec, len(rt.local))
	copy(specs, rt.local)
	for i := range specs {
		specs[i].Key = []byte(keys[len(rt.Limits)+i])
	}
	now := rt.m.cfg.Now()
	idx, r5s, err := rt.m.local.decide(specs, now.UnixNano())
	if err != nil {
		return nil, err
	}
	return values(rt.LocalLimits, r5s, idx, now), nil
}

// answer writes the decision's headers, then refuses with a 429 or calls
// next.
func (rt *route) answer(w http.ResponseWriter, r *http.Request, next http.Handler, d *decision) {
	h := w.Header()
	// Append writes Retry-After on a refusal whatever the convention.
	for _, f := range rt.m.cfg.Headers.Append(nil, &d.Values) {
		h.Add(f.Name, f.Value)
	}
	if !d.Limited {
		next.ServeHTTP(w, r)
		return
	}
	h.Set("Content-Type", header.ContentTypeProblem)
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusTooManyRequests)
	_, _ = w.Write(header.ProblemJSON(&d.Values, d.Violated))
}

// refuse answers a request that fails closed.
func (rt *route) refuse(w http.ResponseWriter) {
	h := w.Header()
	retry := max(1, header.Seconds(rt.ClosedRetryAfter))
	h.Set("Retry-After", strconv.FormatInt(retry, 10))
	h.Set("Content-Type", header.ContentTypeProblem)
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(rt.ClosedStatus)
	_, _ = w.Write(problem(rt.ClosedStatus, "the rate limiter is unavailable; retry after "+strconv.FormatInt(retry, 10)+" s", retry))
}

// badKey is the default OnKeyError.
func badKey(w http.ResponseWriter, _ *http.Request, err error) {
	w.Header().Set("Content-Type", header.ContentTypeProblem)
	w.WriteHeader(http.StatusBadRequest)
	_, _ = w.Write(problem(http.StatusBadRequest, "no rate-limit identity: "+err.Error(), 0))
}

// classify names why a call failed, for counts and logs.
func classify(err error) (Reason, error) {
	var ne net.Error
	var re redis.Error
	switch {
	case errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout():
		return ReasonTimeout, err
	case errors.As(err, &re) && !errors.Is(err, redis.ErrClosed):
		// cellserver answered with an error (WRONGTYPE on a key another
		// program wrote, a cluster redirect): the request is undecided.
		return ReasonError, err
	case errors.Is(err, errBadReply):
		return ReasonError, err
	}
	return ReasonUnreachable, err
}

// breaker skips calls for a short while after consecutive failures.
type breaker struct {
	failures  int64         // consecutive failures that open it
	open      time.Duration // how long it stays open; < 0: never opens
	fails     atomic.Int64  // consecutive failures so far
	openUntil atomic.Int64  // Unix ns; 0 when closed
}

func (b *breaker) allow(now time.Time) bool {
	u := b.openUntil.Load()
	return u == 0 || now.UnixNano() >= u
}

func (b *breaker) failed(now time.Time) {
	if n := b.fails.Add(1); n >= b.failures && b.open > 0 {
		b.openUntil.Store(now.Add(b.open).UnixNano())
	}
}

// succeeded closes the breaker and returns how many failures it had seen.
func (b *breaker) succeeded() int64 {
	if b.fails.Load() == 0 { // the common case: no write
		return 0
	}
	b.openUntil.Store(0)
	return b.fails.Swap(0)
}
