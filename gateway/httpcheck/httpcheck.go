// Package httpcheck is cellserver's HTTP front end for gateways: the
// forward-auth check that nginx (auth_request), Traefik (forwardAuth), Caddy
// (forward_auth) and HAProxy call before they pass a request on, and /json,
// envoyproxy/ratelimit's JSON form of the rate-limit service. Both decide on
// a gateway.Engine (one all-or-nothing CL.LIMIT step per request); neither
// parses RESP or knows shards.
//
// Quick start:
//
//	h := httpcheck.New(httpcheck.Config{Engine: eng, TrustedHops: 1})
//	srv := httpcheck.NewServer(h, logger)                // timeouts, header size
//	ln = httpcheck.LimitListener(srv, ln, 10000, logger) // connection count
//	go srv.Serve(ln)
//
// The check: GET /check/<domain>?d=<descriptor>&d=... builds one request
// descriptor per d parameter, each a comma-separated list of entries
// [key=]source, the source's value taken from the forwarded request:
//
//	remote_address   the client IP (see TrustedHops)
//	method           X-Forwarded-Method, or X-Original-Method (see Forwarded)
//	path             X-Forwarded-Uri, or X-Original-URI (see Forwarded): the
//	                 path without its query, percent-decoded and normalised
//	host             X-Forwarded-Host, lower-cased, without its port
//	header:<Name>    the request header Name (its values joined by ",")
//	value:<text>     the constant text (Envoy's generic_key)
//
// An entry's key is the source's name (header:<Name>: Name; value:<text>:
// generic_key) unless given: "user=header:X-User" gives the entry
// user: <X-User's value>. A descriptor one of whose sources has no value (a
// header the request lacks) is left out, as Envoy leaves out an action list
// it cannot fill. With no d parameter the request has the one descriptor
// "remote_address". hits=N charges each descriptor N (default 1; 0 checks
// without charging). docs/http-check.md has the gateways' configurations.
//
// The answer: 200 when allowed, 429 when refused (or the status asked for in
// X-Ratelimit-Deny-Status: nginx's auth_request turns anything but 2xx, 401
// and 403 into a 500), with Retry-After (refusals), RateLimit,
// RateLimit-Policy and X-RateLimit-* (both), and problem+json as the body of
// a refusal. A domain the policy does not know allows (as envoyproxy/ratelimit
// does). A request the engine cannot decide because the store cannot answer
// is answered per OnError, with X-Cellserver-Error saying why; a bad request
// (an unknown source, too many descriptors, a key too long) is a 400 with a
// one-line text body.
package httpcheck

import (
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cellserver/cellserver/gateway"
	"github.com/cellserver/cellserver/gateway/header"
)

// Frontend is the name the check and /json give the engine's Observer.
const Frontend = "http"

// DenyStatusHeader names the request header a gateway sets to be answered
// that status instead of 429 on a refusal (nginx: 403, routed by
// error_page to a location that answers 429).
const DenyStatusHeader = "X-Ratelimit-Deny-Status"

// ErrorHeader names the response header that says why a request was
// allowed or denied without a decision (the store could not answer).
const ErrorHeader = "X-Cellserver-Error"

// OnError is the check's answer when the store cannot decide.
type OnError uint8

const (
	// Deny answers as a refusal (429, or the asked-for deny status): fail
	// closed, the zero value.
	Deny OnError = iota
	// Allow answers 200: fail open.
	Allow
)

// ParseOnError parses --http-on-error's value: "allow" or "deny".
func ParseOnError(s string) (OnError, error) {
	switch s {
	case "allow":
		return Allow, nil
	case "deny":
		return Deny, nil
	}
	return Deny, fmt.Errorf("on-error must be allow or deny, got %q", s)
}

func (o OnError) String() string {
	if o == Allow {
		return "allow"
	}
	return "deny"
}

// Forwarded names the header family the method and path sources are read
// from. Only the family the gateway in front sets, overwriting what the
// client sent, may be read: a gateway passes every other client header
// through to the check, so a client that wrote the other family itself
// would pick its own bucket.
type Forwarded uint8

const (
	// XForwarded reads X-Forwarded-Method and X-Forwarded-Uri, which
	// Traefik's forwardAuth and Caddy's forward_auth overwrite (and the
	// HAProxy sketch sets): the zero value.
	XForwarded Forwarded = iota
	// XOriginal reads X-Original-Method and X-Original-URI, which nginx's
	// proxy_set_header overwrites (its configuration must set both).
	XOriginal
)

// ParseForwarded parses --http-forwarded-headers's value: "forwarded" or
// "original".
func ParseForwarded(s string) (Forwarded, error) {
	switch s {
	case "forwarded":
		return XForwarded, nil
	case "original":
		return XOriginal, nil
	}
	return XForwarded, fmt.Errorf("forwarded headers must be original or forwarded, got %q", s)
}

func (f Forwarded) String() string {
	if f == XOriginal {
		return "original"
	}
	return "forwarded"
}

// headers are the method and path headers of f.
func (f Forwarded) headers() (method, path string) {
	if f == XOriginal {
		return "X-Original-Method", "X-Original-Uri"
	}
	return "X-Forwarded-Method", "X-Forwarded-Uri"
}

// Config configures a Handler.
type Config struct {
	Engine *gateway.Engine
	// TrustedHops is the number of proxies in front of the check whose
	// X-Forwarded-For entries are trusted: the client IP is the
	// TrustedHops-th entry from the right (each proxy appends its peer;
	// what the client sent stays to the left). 0: X-Real-IP, which the
	// gateway must set (nginx's proxy_set_header overwrites what the
	// client sent), else the connection's peer address.
	TrustedHops int
	// OnError is the answer when the store cannot decide (Deny: fail
	// closed).
	OnError OnError
	// Forwarded is the header family of the method and path sources: the
	// one the gateway in front overwrites (XForwarded, the zero value:
	// Traefik, Caddy; XOriginal: nginx). The other family is never read.
	// host is X-Forwarded-Host under both.
	Forwarded Forwarded
	// Headers are the header sets written; the zero value writes none
	// (cmd/cellserver passes --rate-limit-headers, header.Default unless
	// told otherwise).
	Headers header.Convention
	// Logger receives the fallback and failure lines; default
	// slog.Default().
	Logger *slog.Logger
	// Now is the clock of the fallback log's rate limit (not of the
	// decisions: the store's clock decides); default time.Now.
	Now func() time.Time
}

// Handler serves /check/<domain>, /json and /healthz. Safe for concurrent
// use.
type Handler struct {
	eng     *gateway.Engine
	hops    int
	onError OnError
	method  string // the method source's header
	path    string // the path source's header
	conv    header.Convention
	log     *slog.Logger
	mux     *http.ServeMux

	fallbacks atomic.Int64 // answers given without a decision
	fbLog     *everyLog    // the check's fallbacks
	jsonLog   *everyLog    // /json's
}

// New returns a Handler on cfg.Engine.
func New(cfg Config) *Handler {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	method, path := cfg.Forwarded.headers()
	h := &Handler{
		eng:     cfg.Engine,
		method:  method,
		path:    path,
		hops:    cfg.TrustedHops,
		onError: cfg.OnError,
		conv:    cfg.Headers,
		log:     cfg.Logger,
		mux:     http.NewServeMux(),
		fbLog:   newEveryLog(cfg.Logger, time.Second, cfg.Now),
		jsonLog: newEveryLog(cfg.Logger, time.Second, cfg.Now),
	}
	h.mux.HandleFunc("/check/{domain...}", h.check)
	h.mux.HandleFunc("POST /json", h.json)
	h.mux.HandleFunc("GET /healthz", healthz)
	return h
}

// ServeHTTP routes r.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.mux.ServeHTTP(w, r) }

// Fallbacks is the number of answers given without a decision because the
// store could not answer (allowed or denied per OnError).
func (h *Handler) Fallbacks() int64 { return h.fallbacks.Load() }

func healthz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = w.Write([]byte("ok\n"))
}

// check is the forward-auth endpoint:
//
//	ANY /check/<domain>[?d=<descriptor>&...][&hits=N]
func (h *Handler) check(w http.ResponseWriter, r *http.Request) {
	denyStatus, err := parseDenyStatus(r.Header.Get(DenyStatusHeader))
	if err != nil {
		badRequest(w, err)
		return
	}
	req, err := h.buildRequest(r)
	if err != nil {
		badRequest(w, err)
		return
	}
	d, err := h.eng.Check(Frontend, req)
	if err != nil {
		if !gateway.IsUnavailable(err) {
			badRequest(w, err)
			return
		}
		h.fallback(w, r, denyStatus, err)
		return
	}
	v := d.Values()
	writeFields(w.Header(), h.conv.Append(nil, &v))
	if d.Overall != gateway.OverLimit {
		w.WriteHeader(http.StatusOK)
		return
	}
	writeProblem(w, denyStatus, header.ProblemJSON(&v, d.Violated()))
}

// fallback answers a request the store could not decide, per OnError, and
// logs it (at most one line a second, with the count of the others).
func (h *Handler) fallback(w http.ResponseWriter, r *http.Request, denyStatus int, err error) {
	h.fallbacks.Add(1)
	why := oneLine("store could not decide: " + err.Error())
	h.fbLog.Warn("http check: the store could not decide; answered per --http-on-error",
		"on_error", h.onError.String(), "path", r.URL.Path, "err", err.Error())
	w.Header().Set(ErrorHeader, why)
	if h.onError == Allow {
		w.WriteHeader(http.StatusOK)
		return
	}
	v := header.Values{Limited: true, RetryAfter: time.Second, Deciding: -1}
	writeFields(w.Header(), h.conv.Append(nil, &v))
	writeProblem(w, denyStatus, header.ProblemJSON(&v, nil))
}

// parseDenyStatus reads X-Ratelimit-Deny-Status: empty is 429; otherwise
// a 4xx status.
func parseDenyStatus(s string) (int, error) {
	if s == "" {
		return http.StatusTooManyRequests, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 400 || n > 499 {
		return 0, fmt.Errorf("%s must be a 4xx status, got %q", DenyStatusHeader, s)
	}
	return n, nil
}

func writeFields(h http.Header, fields []header.Field) {
	for _, f := range fields {
		h.Add(f.Name, f.Value)
	}
}

func writeProblem(w http.ResponseWriter, status int, body []byte) {
	w.Header().Set("Content-Type", header.ContentTypeProblem)
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// badRequest answers 400 with err's text on one line.
func badRequest(w http.ResponseWriter, err error) {
	http.Error(w, oneLine(err.Error()), http.StatusBadRequest)
}

// oneLine keeps the first line of s: error texts that quote a client's
// value must not split the body.
func oneLine(s string) string {
	for i := 0; i < len(s); i++ {
		if s[i] == '\n' || s[i] == '\r' {
			return s[:i]
		}
	}
	return s
}

// everyLog logs at most one line per period; the lines it drops are
// counted into the next one it writes.
type everyLog struct {
	log    *slog.Logger
	period time.Duration
	now    func() time.Time

	mu      sync.Mutex
	last    time.Time
	dropped int64
}

func newEveryLog(log *slog.Logger, period time.Duration, now func() time.Time) *everyLog {
	return &everyLog{log: log, period: period, now: now}
}

// Warn logs msg unless a line was logged less than a period ago.
func (l *everyLog) Warn(msg string, args ...any) {
	l.mu.Lock()
	t := l.now()
	if !l.last.IsZero() && t.Sub(l.last) < l.period {
		l.dropped++
		l.mu.Unlock()
		return
	}
	n := l.dropped
	l.last, l.dropped = t, 0
	l.mu.Unlock()
	l.log.Warn(msg, append(args, "similar_since_last_line", n)...)
}
