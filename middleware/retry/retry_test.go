package retry

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// script is a test server answering each request with the next status of
// its list (the last one repeated), and recording the bodies it got.
type script struct {
	srv      *httptest.Server
	attempts atomic.Int32
	mu       sync.Mutex
	bodies   []string
}

type answer struct {
	status     int
	retryAfter string
}

func newScript(t *testing.T, answers ...answer) *script {
	s := &script{}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := int(s.attempts.Add(1))
		b, _ := io.ReadAll(r.Body)
		s.mu.Lock()
		s.bodies = append(s.bodies, string(b))
		s.mu.Unlock()
		a := answers[min(n, len(answers))-1]
		if a.retryAfter != "" {
			w.Header().Set("Retry-After", a.retryAfter)
		}
		w.WriteHeader(a.status)
		_, _ = io.WriteString(w, http.StatusText(a.status))
	}))
	t.Cleanup(s.srv.Close)
	return s
}

// clock records the waits asked for instead of sleeping.
type clock struct {
	now   time.Time
	waits []time.Duration
}

func (c *clock) sleep(ctx context.Context, d time.Duration) error {
	c.waits = append(c.waits, d)
	c.now = c.now.Add(d)
	return ctx.Err()
}

func newTransport(c *clock, rnd float64) *Transport {
	return &Transport{
		Sleep: c.sleep,
		Rand:  func() float64 { return rnd },
		Now:   func() time.Time { return c.now },
	}
}

func get(t *testing.T, tr *Transport, url string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	require.NoError(t, err)
	resp, err := tr.RoundTrip(req)
	require.NoError(t, err)
	t.Cleanup(func() { _ = resp.Body.Close() })
	return resp
}

func TestRetries429AfterRetryAfterSeconds(t *testing.T) {
	s := newScript(t, answer{429, "2"}, answer{200, ""})
	c := &clock{now: time.Unix(1_700_000_000, 0)}
	resp := get(t, newTransport(c, 0.5), s.srv.URL)
	assert.Equal(t, 200, resp.StatusCode)
	assert.Equal(t, int32(2), s.attempts.Load())
	assert.Equal(t, []time.Duration{2 * time.Second}, c.waits, "the wait is Retry-After, no jitter")
}

func TestRetries429AfterRetryAfterDate(t *testing.T) {
	now := time.Date(2026, 12, 1, 16, 0, 0, 0, time.UTC)
	s := newScript(t, answer{429, now.Add(7 * time.Second).Format(http.TimeFormat)}, answer{200, ""})
	c := &clock{now: now}
	resp := get(t, newTransport(c, 0.5), s.srv.URL)
	assert.Equal(t, 200, resp.StatusCode)
	assert.Equal(t, []time.Duration{7 * time.Second}, c.waits)
}

func TestRetryAfterBeyondCapReturnsThe429(t *testing.T) {
	s := newScript(t, answer{429, "120"}, answer{200, ""})
	c := &clock{}
	tr := newTransport(c, 0.5)
	tr.MaxRetryAfter = 30 * time.Second
	resp := get(t, tr, s.srv.URL)
	assert.Equal(t, 429, resp.StatusCode)
	assert.Equal(t, "120", resp.Header.Get("Retry-After"))
	assert.Equal(t, int32(1), s.attempts.Load())
	assert.Empty(t, c.waits)
}

// A 503 a few times: exponential back-off with full jitter, each wait the
// random fraction of min(MaxDelay, BaseDelay * 2^(n-1)).
func TestRetries503WithFullJitter(t *testing.T) {
	s := newScript(t, answer{503, ""}, answer{503, ""}, answer{502, ""}, answer{200, ""})
	c := &clock{}
	tr := newTransport(c, 0.75)
	tr.BaseDelay, tr.MaxDelay, tr.MaxAttempts = 100*time.Millisecond, 300*time.Millisecond, 5
	resp := get(t, tr, s.srv.URL)
	assert.Equal(t, 200, resp.StatusCode)
	assert.Equal(t, int32(4), s.attempts.Load())
	// ceilings 100, 200, then 400 capped at 300 ms; times 0.75
	assert.Equal(t, []time.Duration{75 * time.Millisecond, 150 * time.Millisecond, 225 * time.Millisecond}, c.waits)
}

func TestBackoffStaysWithinBounds(t *testing.T) {
	r := []float64{0, 0.999999, 0.3, 0.999999, 0.5, 0.999999, 0.999999}
	i := 0
	tr := &Transport{BaseDelay: 10 * time.Millisecond, MaxDelay: time.Second, Rand: func() float64 { i++; return r[i-1] }}
	for attempt := 1; attempt <= len(r); attempt++ {
		ceil := min(time.Second, 10*time.Millisecond<<(attempt-1))
		d := tr.backoff(attempt)
		assert.GreaterOrEqual(t, d, time.Duration(0), "attempt %d", attempt)
		assert.Less(t, d, ceil, "attempt %d", attempt)
	}
	// A huge attempt number neither overflows nor passes the cap.
	i = 1
	assert.Less(t, tr.backoff(200), time.Second)
}

func TestGivesUpAfterMaxAttempts(t *testing.T) {
	s := newScript(t, answer{503, ""})
	c := &clock{}
	tr := newTransport(c, 0.5)
	tr.MaxAttempts = 3
	resp := get(t, tr, s.srv.URL)
	assert.Equal(t, 503, resp.StatusCode, "the last answer is returned")
	assert.Equal(t, int32(3), s.attempts.Load())
	assert.Len(t, c.waits, 2)
}

func TestMaxTotalWaitStopsRetries(t *testing.T) {
	s := newScript(t, answer{429, "4"})
	c := &clock{}
	tr := newTransport(c, 0.5)
	tr.MaxAttempts, tr.MaxTotalWait = 10, 10*time.Second
	resp := get(t, tr, s.srv.URL)
	assert.Equal(t, 429, resp.StatusCode)
	assert.Equal(t, []time.Duration{4 * time.Second, 4 * time.Second}, c.waits, "a third wait would pass 10 s")
	assert.Equal(t, int32(3), s.attempts.Load())
}

func TestNotRetried(t *testing.T) {
	for _, tc := range []struct {
		name string
		req  func(url string) *http.Request
		ans  answer
	}{
		{"500 is not transient", func(u string) *http.Request { r, _ := http.NewRequest("GET", u, nil); return r }, answer{500, ""}},
		{"404", func(u string) *http.Request { r, _ := http.NewRequest("GET", u, nil); return r }, answer{404, ""}},
		{"POST without an idempotency key", func(u string) *http.Request {
			r, _ := http.NewRequest("POST", u, strings.NewReader("x"))
			return r
		}, answer{503, ""}},
		{"PUT whose body cannot be replayed", func(u string) *http.Request {
			r, _ := http.NewRequest("PUT", u, io.NopCloser(strings.NewReader("x")))
			return r
		}, answer{503, ""}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newScript(t, tc.ans, answer{200, ""})
			c := &clock{}
			resp, err := newTransport(c, 0.5).RoundTrip(tc.req(s.srv.URL))
			require.NoError(t, err)
			_ = resp.Body.Close()
			assert.Equal(t, tc.ans.status, resp.StatusCode)
			assert.Equal(t, int32(1), s.attempts.Load())
			assert.Empty(t, c.waits)
		})
	}
}

func TestReplaysTheBody(t *testing.T) {
	s := newScript(t, answer{503, ""}, answer{200, ""})
	c := &clock{}
	req, err := http.NewRequest("POST", s.srv.URL, strings.NewReader("payload"))
	require.NoError(t, err)
	req.Header.Set("Idempotency-Key", "k1")
	resp, err := newTransport(c, 0.5).RoundTrip(req)
	require.NoError(t, err)
	_ = resp.Body.Close()
	assert.Equal(t, 200, resp.StatusCode)
	assert.Equal(t, []string{"payload", "payload"}, s.bodies)

	s = newScript(t, answer{503, ""}, answer{200, ""})
	req, _ = http.NewRequest("PATCH", s.srv.URL, strings.NewReader("p"))
	tr := newTransport(c, 0.5)
	tr.RetryNonIdempotent = true
	resp, err = tr.RoundTrip(req)
	require.NoError(t, err)
	_ = resp.Body.Close()
	assert.Equal(t, 200, resp.StatusCode)
	assert.Equal(t, []string{"p", "p"}, s.bodies)
}

// flaky fails its first n round trips with a transport error.
type flaky struct {
	n, calls int
	next     http.RoundTripper
}

var errReset = errors.New("connection reset by peer")

func (f *flaky) RoundTrip(r *http.Request) (*http.Response, error) {
	f.calls++
	if f.calls <= f.n {
		return nil, errReset
	}
	return f.next.RoundTrip(r)
}

func TestRetriesTransportErrors(t *testing.T) {
	s := newScript(t, answer{200, ""})
	c := &clock{}
	tr := newTransport(c, 0.5)
	f := &flaky{n: 2, next: http.DefaultTransport}
	tr.Base = f
	resp := get(t, tr, s.srv.URL)
	assert.Equal(t, 200, resp.StatusCode)
	assert.Equal(t, 3, f.calls)
	assert.Equal(t, []time.Duration{50 * time.Millisecond, 100 * time.Millisecond}, c.waits)

	f = &flaky{n: 10, next: http.DefaultTransport}
	tr.Base, tr.MaxAttempts = f, 2
	req, _ := http.NewRequest("GET", s.srv.URL, nil)
	_, err := tr.RoundTrip(req)
	assert.ErrorIs(t, err, errReset, "the last error once attempts are spent")
	assert.Equal(t, 2, f.calls)
}

func TestHonoursTheContext(t *testing.T) {
	s := newScript(t, answer{503, ""})
	ctx, cancel := context.WithCancel(context.Background())
	tr := &Transport{
		Sleep: func(ctx context.Context, d time.Duration) error { cancel(); return ctx.Err() },
		Rand:  func() float64 { return 0.5 },
	}
	req, _ := http.NewRequestWithContext(ctx, "GET", s.srv.URL, nil)
	_, err := tr.RoundTrip(req)
	assert.ErrorIs(t, err, context.Canceled)
	assert.Equal(t, int32(1), s.attempts.Load())

	// A wait that would end past the deadline is not started: the answer
	// is returned at once.
	s = newScript(t, answer{429, "5"}, answer{200, ""})
	c := &clock{now: time.Now()}
	tr = newTransport(c, 0.5)
	ctx, cancel2 := context.WithDeadline(context.Background(), c.now.Add(2*time.Second))
	defer cancel2()
	req, _ = http.NewRequestWithContext(ctx, "GET", s.srv.URL, nil)
	resp, err := tr.RoundTrip(req)
	require.NoError(t, err)
	_ = resp.Body.Close()
	assert.Equal(t, 429, resp.StatusCode)
	assert.Empty(t, c.waits)
}

func TestDefaultSleepHonoursTheContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	assert.ErrorIs(t, (&Transport{}).sleep(ctx, time.Hour), context.Canceled)
}

func TestRetryAfterParse(t *testing.T) {
	now := time.Date(2026, 12, 1, 16, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"0", 0, true},
		{"30", 30 * time.Second, true},
		{" 5 ", 5 * time.Second, true},
		{"-1", 0, false},
		{"1.5", 0, false},
		{"", 0, false},
		{"soon", 0, false},
		{"Tue, 01 Dec 2026 16:00:10 GMT", 10 * time.Second, true},
		{"Tuesday, 01-Dec-26 16:01:00 GMT", time.Minute, true}, // RFC 850, obsolete but valid
		{"Tue, 01 Dec 2026 15:00:00 GMT", 0, true},             // in the past
		{"99999999999999999999", 0, false},
		{"9999999999999", time.Duration(maxSeconds) * time.Second, true},
	} {
		d, ok := RetryAfter(tc.in, now)
		assert.Equal(t, tc.ok, ok, "%q", tc.in)
		assert.Equal(t, tc.want, d, "%q", tc.in)
	}
}
