// Package retry is the client side of the 429 contract: an
// http.RoundTripper that retries a 429 after its Retry-After, and transport
// errors and 502/503/504 answers with exponential back-off and full jitter
// (AWS's "Exponential Backoff And Jitter": sleep = random(0, min(MaxDelay,
// BaseDelay * 2^retry))), within a number of attempts, a total wait and the
// request's context. Only requests that can be sent again are retried:
// those without a body or with GetBody, and by default only idempotent
// methods (RFC 9110 §9.2.2) or requests carrying an Idempotency-Key.
//
//	client := &http.Client{Transport: &retry.Transport{}}
//	resp, err := client.Get("https://api.example/v1/things")
package retry

import (
	"context"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Transport retries requests through Base. The zero value is usable:
// http.DefaultTransport and the defaults below. Safe for concurrent use
// if Base, Sleep and Rand are.
type Transport struct {
	// Base sends each attempt; nil means http.DefaultTransport.
	Base http.RoundTripper
	// MaxAttempts is the most attempts, the first included; default 4.
	// 1 disables retries.
	MaxAttempts int
	// BaseDelay and MaxDelay shape the back-off: attempt n (n = 1 after
	// the first failure) waits a random time in [0, min(MaxDelay,
	// BaseDelay*2^(n-1))). Defaults 100 ms and 10 s.
	BaseDelay, MaxDelay time.Duration
	// MaxRetryAfter is the longest Retry-After obeyed; a longer one (or
	// one past the total wait left) returns the answer as it is: retrying
	// sooner than told only earns another refusal. Default 30 s.
	MaxRetryAfter time.Duration
	// MaxTotalWait bounds the sum of the waits of one request; a wait
	// that would pass it returns the last answer or error instead.
	// Default 60 s.
	MaxTotalWait time.Duration
	// RetryNonIdempotent retries POST, PATCH and others without an
	// Idempotency-Key too (when their body can be replayed).
	RetryNonIdempotent bool
	// Sleep waits d or until ctx is done (its error); default a timer.
	// Tests inject one.
	Sleep func(ctx context.Context, d time.Duration) error
	// Rand returns a uniform random number in [0, 1); default
	// math/rand/v2's. Tests inject one.
	Rand func() float64
	// Now is the clock Retry-After dates are read against; default
	// time.Now.
	Now func() time.Time
}

// Defaults of Transport.
const (
	DefaultMaxAttempts   = 4
	DefaultBaseDelay     = 100 * time.Millisecond
	DefaultMaxDelay      = 10 * time.Second
	DefaultMaxRetryAfter = 30 * time.Second
	DefaultMaxTotalWait  = 60 * time.Second
)

// maxDrain is the most of a retried answer's body read so that its
// connection can be reused; a longer body closes the connection instead.
const maxDrain = 64 << 10

// RoundTrip sends req, retrying as the Transport says. It returns the last
// answer (a 429 or 5xx included, the caller reads it) or the last error;
// when the context ends during a wait, the context's error.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	base := t.Base
	if base == nil {
		base = http.DefaultTransport
	}
	maxAttempts := or(t.MaxAttempts, DefaultMaxAttempts)
	replayable := replayable(req) && (t.RetryNonIdempotent || idempotent(req))
	ctx := req.Context()
	var waited time.Duration
	for attempt := 1; ; attempt++ {
		try := req
		if attempt > 1 {
			try = req.Clone(ctx)
			if req.GetBody != nil {
				body, err := req.GetBody()
				if err != nil {
					return nil, err
				}
				try.Body = body
			}
		}
		resp, err := base.RoundTrip(try)
		if !replayable || attempt >= maxAttempts {
			return resp, err
		}
		wait, retry := t.wait(resp, err, attempt, waited)
		if !retry || ctx.Err() != nil {
			return resp, err
		}
		if dl, ok := ctx.Deadline(); ok && t.now().Add(wait).After(dl) {
			return resp, err // the retry could not finish in time: give what we have
		}
		if resp != nil {
			discard(resp)
		}
		if err := t.sleep(ctx, wait); err != nil {
			return nil, err
		}
		waited += wait
	}
}

// wait says whether attempt's outcome is retried, and after how long.
func (t *Transport) wait(resp *http.Response, err error, attempt int, waited time.Duration) (time.Duration, bool) {
	left := or(t.MaxTotalWait, DefaultMaxTotalWait) - waited
	var d time.Duration
	switch {
	case err != nil:
		d = t.backoff(attempt)
	case resp.StatusCode == http.StatusTooManyRequests:
		ra, ok := RetryAfter(resp.Header.Get("Retry-After"), t.now())
		if !ok { // a 429 without a usable Retry-After: back off
			ra = t.backoff(attempt)
		} else if ra > or(t.MaxRetryAfter, DefaultMaxRetryAfter) {
			return 0, false
		}
		d = ra
	case resp.StatusCode == http.StatusBadGateway, resp.StatusCode == http.StatusServiceUnavailable,
		resp.StatusCode == http.StatusGatewayTimeout:
		d = t.backoff(attempt)
		// A 503 may say when to come back (RFC 9110 §10.2.3): no sooner.
		if ra, ok := RetryAfter(resp.Header.Get("Retry-After"), t.now()); ok {
			if ra > or(t.MaxRetryAfter, DefaultMaxRetryAfter) {
				return 0, false
			}
			d = max(d, ra)
		}
	default:
		return 0, false
	}
	if d > left {
		return 0, false
	}
	return d, true
}

// backoff is the full-jitter wait after the attempt-th failure (1-based):
// random in [0, min(MaxDelay, BaseDelay * 2^(attempt-1))).
func (t *Transport) backoff(attempt int) time.Duration {
	capD := or(t.MaxDelay, DefaultMaxDelay)
	ceil := or(t.BaseDelay, DefaultBaseDelay)
	for i := 1; i < attempt && ceil < capD; i++ {
		ceil *= 2
	}
	ceil = min(ceil, capD)
	r := rand.Float64
	if t.Rand != nil {
		r = t.Rand
	}
	return time.Duration(r() * float64(ceil))
}

// RetryAfter parses a Retry-After value (RFC 9110 §10.2.3): delay seconds
// or an HTTP date, read against now (a date in the past is 0).
func RetryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if n, err := strconv.ParseUint(v, 10, 63); err == nil {
		if n > uint64(maxSeconds) {
			n = uint64(maxSeconds)
		}
		return time.Duration(n) * time.Second, true
	}
	at, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	return max(0, at.Sub(now)), true
}

// maxSeconds keeps a huge delay-seconds from overflowing a Duration.
const maxSeconds = int64(1<<62) / int64(time.Second)

// replayable: the request has no body, or one GetBody can give again.
func replayable(req *http.Request) bool {
	return req.Body == nil || req.Body == http.NoBody || req.GetBody != nil
}

// idempotent: RFC 9110's idempotent methods, or a request carrying an
// Idempotency-Key (the IETF httpapi draft; Stripe's header).
func idempotent(req *http.Request) bool {
	switch req.Method {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace, http.MethodPut, http.MethodDelete:
		return true
	}
	return req.Header.Get("Idempotency-Key") != "" || req.Header.Get("X-Idempotency-Key") != ""
}

// discard drains a little of an answer not returned, so its connection can
// carry the retry, and closes it.
func discard(resp *http.Response) {
	_, _ = io.CopyN(io.Discard, resp.Body, maxDrain)
	_ = resp.Body.Close()
}

func (t *Transport) sleep(ctx context.Context, d time.Duration) error {
	if t.Sleep != nil {
		return t.Sleep(ctx, d)
	}
	if d <= 0 {
		return ctx.Err()
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (t *Transport) now() time.Time {
	if t.Now != nil {
		return t.Now()
	}
	return time.Now()
}

func or[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}
