package httpcheck

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cellserver/cellserver/gateway"
	"github.com/cellserver/cellserver/gateway/header"
	"github.com/cellserver/cellserver/gateway/policy"
	"github.com/cellserver/cellserver/service"
	"github.com/cellserver/cellserver/store"
)

// t0 is the store's frozen instant: 30 s into a minute, so that a
// per-minute window does not roll over during a test.
var t0 = time.Date(2026, 12, 1, 12, 0, 30, 0, time.UTC)

const testPolicy = `domain: api
descriptors:
  - key: remote_address
    rate_limit:
      name: per-ip
      unit: minute
      requests_per_unit: 2
  - key: user
    rate_limit:
      name: per-user
      unit: minute
      requests_per_unit: 3
  - key: path
    value: /login
    rate_limit:
      name: login
      unit: minute
      requests_per_unit: 1
  - key: burst
    rate_limit:
      name: burst
      unit: minute
      requests_per_unit: 20
  - key: vip
    rate_limit:
      unlimited: true
`

// fixture is a Handler on a real in-memory store with a frozen clock.
type fixture struct {
	h   *Handler
	st  *store.Store
	clk *store.Clock
	log *bytes.Buffer
	now time.Time // the fallback log's clock
	mu  sync.Mutex
}

func newFixture(t *testing.T, mod ...func(*Config)) *fixture {
	t.Helper()
	f := &fixture{clk: &store.Clock{}, log: &bytes.Buffer{}, now: t0}
	f.clk.Set(t0.UnixNano())
	st, err := store.New(store.Config{Shards: 2, Clock: f.clk})
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	f.st = st
	pc, err := policy.Parse([]byte(testPolicy))
	require.NoError(t, err)
	eng := gateway.New(gateway.Config{
		Service:  service.New(service.Config{Store: st, MaxKeyBytes: 256}),
		Policies: policy.Static(pc),
	})
	cfg := Config{
		Engine:  eng,
		Headers: header.Default,
		Logger:  slog.New(slog.NewTextHandler(lockedWriter{&f.mu, f.log}, nil)),
		Now: func() time.Time {
			f.mu.Lock()
			defer f.mu.Unlock()
			return f.now
		},
	}
	for _, m := range mod {
		m(&cfg)
	}
	f.h = New(cfg)
	return f
}

type lockedWriter struct {
	mu *sync.Mutex
	b  *bytes.Buffer
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (f *fixture) logged() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.log.String()
}

func (f *fixture) advanceLogClock(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now = f.now.Add(d)
}

// do sends one check request from peer with the headers hdr (name, value
// pairs).
func (f *fixture) do(t *testing.T, target, peer string, hdr ...string) *http.Response {
	t.Helper()
	r := httptest.NewRequest(http.MethodGet, target, nil)
	r.RemoteAddr = peer
	for i := 0; i+1 < len(hdr); i += 2 {
		r.Header.Add(hdr[i], hdr[i+1])
	}
	w := httptest.NewRecorder()
	f.h.ServeHTTP(w, r)
	return w.Result()
}

func body(t *testing.T, r *http.Response) string {
	t.Helper()
	var b bytes.Buffer
	_, err := b.ReadFrom(r.Body)
	require.NoError(t, err)
	return b.String()
}

func TestCheckAllowsThenRefuses(t *testing.T) {
	f := newFixture(t)
	// 30 s into the minute: the window ends in 30 s.
	for i, want := range []struct {
		status    int
		rateLimit string
		remaining string
	}{
		{200, `"per-ip";r=1;t=30`, "1"},
		{200, `"per-ip";r=0;t=30`, "0"},
		{429, `"per-ip";r=0;t=30`, "0"},
	} {
		resp := f.do(t, "/check/api", "192.0.2.1:4711")
		require.Equal(t, want.status, resp.StatusCode, "request %d", i)
		assert.Equal(t, want.rateLimit, resp.Header.Get("RateLimit"), "request %d", i)
		assert.Equal(t, `"per-ip";q=2;w=60;cellserver-alg="fw"`, resp.Header.Get("RateLimit-Policy"), "request %d", i)
		assert.Equal(t, "2", resp.Header.Get("X-RateLimit-Limit"), "request %d", i)
		assert.Equal(t, want.remaining, resp.Header.Get("X-RateLimit-Remaining"), "request %d", i)
		assert.Equal(t, fmt.Sprint(t0.Unix()+30), resp.Header.Get("X-RateLimit-Reset"), "request %d", i)
		assert.Equal(t, "per-ip", resp.Header.Get("X-RateLimit-Resource"), "request %d", i)
		if want.status == 200 {
			assert.Empty(t, resp.Header.Get("Retry-After"), "request %d", i)
			assert.Empty(t, body(t, resp), "request %d", i)
			continue
		}
		assert.Equal(t, "30", resp.Header.Get("Retry-After"))
		assert.Equal(t, header.ContentTypeProblem, resp.Header.Get("Content-Type"))
		var p header.Problem
		require.NoError(t, json.Unmarshal([]byte(body(t, resp)), &p))
		assert.Equal(t, header.ProblemType, p.Type)
		assert.Equal(t, 429, p.Status)
		assert.Equal(t, []string{"per-ip"}, p.ViolatedPolicies)
		assert.Equal(t, int64(30), p.RetryAfter)
	}
	// Another client has its own bucket.
	assert.Equal(t, 200, f.do(t, "/check/api", "192.0.2.2:4711").StatusCode)
}

func TestHeaderConventionFromConfig(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.Headers = header.Convention{X: true, XResetDelta: true} })
	resp := f.do(t, "/check/api", "192.0.2.1:1")
	require.Equal(t, 200, resp.StatusCode)
	assert.Empty(t, resp.Header.Get("RateLimit"))
	assert.Empty(t, resp.Header.Get("RateLimit-Policy"))
	assert.Equal(t, "30", resp.Header.Get("X-RateLimit-Reset"), "delta seconds, not epoch")
}

func TestDenyStatus(t *testing.T) {
	f := newFixture(t)
	deny := []string{DenyStatusHeader, "403"}
	assert.Equal(t, 200, f.do(t, "/check/api?d=path", "192.0.2.1:1", append(deny, "X-Forwarded-Uri", "/login")...).StatusCode)
	resp := f.do(t, "/check/api?d=path", "192.0.2.1:1", append(deny, "X-Forwarded-Uri", "/login?x=1")...)
	assert.Equal(t, 403, resp.StatusCode, "the asked-for status replaces 429")
	assert.Equal(t, "30", resp.Header.Get("Retry-After"))
	assert.Equal(t, `"login";r=0;t=30`, resp.Header.Get("RateLimit"))

	for _, bad := range []string{"200", "500", "x", "4030"} {
		resp := f.do(t, "/check/api", "192.0.2.1:1", DenyStatusHeader, bad)
		assert.Equal(t, 400, resp.StatusCode, bad)
		assert.Contains(t, body(t, resp), DenyStatusHeader, bad)
	}
}

// A client-supplied X-Forwarded-For never picks another client's bucket:
// behind one trusted proxy only the entry that proxy appended counts.
func TestForgedForwardedForKeepsOwnBucket(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.TrustedHops = 1 })
	const proxy = "10.0.0.1:5000"
	// Client A (198.51.100.7) exhausts its bucket while claiming to be B.
	forged := []string{"X-Forwarded-For", "203.0.113.9, 198.51.100.7"}
	assert.Equal(t, 200, f.do(t, "/check/api", proxy, forged...).StatusCode)
	assert.Equal(t, 200, f.do(t, "/check/api", proxy, "X-Forwarded-For", "198.51.100.7").StatusCode)
	assert.Equal(t, 429, f.do(t, "/check/api", proxy, "X-Forwarded-For", "1.1.1.1", "X-Forwarded-For", "198.51.100.7").StatusCode,
		"A is limited whatever it prepends")
	// B (203.0.113.9) was never charged.
	resp := f.do(t, "/check/api", proxy, "X-Forwarded-For", "203.0.113.9")
	assert.Equal(t, 200, resp.StatusCode)
	assert.Equal(t, `"per-ip";r=1;t=30`, resp.Header.Get("RateLimit"))
}

// Behind Caddy or Traefik (which overwrite X-Forwarded-* and pass every
// other client header on) a client-sent X-Original-URI never picks the
// path bucket; behind nginx (which overwrites X-Original-*) a client-sent
// X-Forwarded-Uri never does.
func TestForgedPathHeaderKeepsTheBucket(t *testing.T) {
	for _, c := range []struct {
		fwd         Forwarded
		set, forged string // the gateway's header, the client's
	}{
		{XForwarded, "X-Forwarded-Uri", "X-Original-URI"},
		{XOriginal, "X-Original-URI", "X-Forwarded-Uri"},
	} {
		t.Run(c.fwd.String(), func(t *testing.T) {
			f := newFixture(t, func(cfg *Config) { cfg.Forwarded = c.fwd })
			// A forged /login charges nothing: the request is /other.
			assert.Equal(t, 200, f.do(t, "/check/api?d=path", "192.0.2.1:1", c.set, "/other", c.forged, "/login").StatusCode)
			assert.Equal(t, 200, f.do(t, "/check/api?d=path", "192.0.2.1:1", c.set, "/login", c.forged, "/nope1").StatusCode)
			resp := f.do(t, "/check/api?d=path", "192.0.2.1:1", c.set, "/login", c.forged, "/nope2")
			assert.Equal(t, 429, resp.StatusCode, "a forged %s does not leave the /login bucket", c.forged)
			assert.Equal(t, `"login";r=0;t=30`, resp.Header.Get("RateLimit"))
		})
	}
}

func TestUnknownDomainAllows(t *testing.T) {
	f := newFixture(t)
	resp := f.do(t, "/check/nosuch", "192.0.2.1:1")
	assert.Equal(t, 200, resp.StatusCode)
	assert.Empty(t, resp.Header.Get("RateLimit"))
	assert.Empty(t, resp.Header.Get("X-RateLimit-Limit"))
}

func TestBadRequests(t *testing.T) {
	f := newFixture(t)
	many := strings.Repeat("d=remote_address&", gateway.MaxDescriptors+1)
	for _, c := range []struct {
		target string
		hdr    []string
		want   string
	}{
		{"/check/api?d=nosuch", nil, `unknown descriptor source "nosuch"`},
		{"/check/api?" + many, nil, "more than 16 descriptors"},
		{"/check/api?x=1", nil, `unknown query parameter "x"`},
		{"/check/api?hits=-1", nil, "hits must be a whole number"},
		{"/check/api?d=", nil, "empty descriptor"},
		{"/check/api?d==remote_address", nil, "has no key"},
		{"/check/api?d=header:", nil, "names no header"},
		{"/check/api?d=" + strings.Repeat("method,", MaxEntries) + "method", []string{"X-Forwarded-Method", "GET"}, "at most 16"},
		{"/check/api?d=user=header:X-User", []string{"X-User", strings.Repeat("u", 300)}, "key exceeds the maximum size"},
		{"/check/api", []string{"X-Real-IP", "not-an-ip"}, `X-Real-IP "not-an-ip" is not an IP address`},
		{"/check/", nil, "names no domain"},
	} {
		resp := f.do(t, c.target, "192.0.2.1:1", c.hdr...)
		assert.Equal(t, 400, resp.StatusCode, c.target)
		b := body(t, resp)
		assert.Contains(t, b, c.want, c.target)
		assert.Equal(t, 1, strings.Count(b, "\n"), "one line: %q", b)
	}
}

// Each descriptor draws on its own bucket; a descriptor whose header is
// missing is left out (it charges nothing and limits nothing).
func TestHeaderDescriptor(t *testing.T) {
	f := newFixture(t)
	const target = "/check/api?d=user=header:X-User&hits=1"
	for i := range 3 {
		resp := f.do(t, target, "192.0.2.1:1", "X-User", "alice")
		require.Equal(t, 200, resp.StatusCode, i)
		assert.Equal(t, fmt.Sprintf(`"per-user";r=%d;t=30`, 2-i), resp.Header.Get("RateLimit"))
	}
	assert.Equal(t, 429, f.do(t, target, "192.0.2.1:1", "X-User", "alice").StatusCode)
	assert.Equal(t, 200, f.do(t, target, "192.0.2.1:1", "X-User", "bob").StatusCode)
	resp := f.do(t, target, "192.0.2.1:1")
	assert.Equal(t, 200, resp.StatusCode, "no X-User: no descriptor")
	assert.Empty(t, resp.Header.Get("RateLimit"))
}

func TestHitsCharge(t *testing.T) {
	f := newFixture(t)
	resp := f.do(t, "/check/api?hits=0", "192.0.2.1:1")
	assert.Equal(t, 200, resp.StatusCode)
	assert.Equal(t, `"per-ip";r=2;t=0`, resp.Header.Get("RateLimit"), "hits=0 checks without charging")
	assert.Equal(t, 429, f.do(t, "/check/api?hits=3", "192.0.2.1:1").StatusCode, "3 hits over a limit of 2")
	assert.Equal(t, 200, f.do(t, "/check/api?hits=2", "192.0.2.1:1").StatusCode, "the refusal charged nothing")
}

// All-or-nothing across descriptors: the IP gate refusing does not spend
// the user's quota.
func TestAllOrNothing(t *testing.T) {
	f := newFixture(t)
	const target = "/check/api?d=remote_address&d=user=header:X-User"
	assert.Equal(t, 200, f.do(t, target, "192.0.2.1:1", "X-User", "carol").StatusCode)
	assert.Equal(t, 200, f.do(t, target, "192.0.2.1:1", "X-User", "carol").StatusCode)
	resp := f.do(t, target, "192.0.2.1:1", "X-User", "carol")
	require.Equal(t, 429, resp.StatusCode)
	assert.Equal(t, `"per-ip";r=0;t=30`, resp.Header.Get("RateLimit"))
	resp = f.do(t, "/check/api?d=user=header:X-User", "192.0.2.1:1", "X-User", "carol")
	assert.Equal(t, `"per-user";r=0;t=30`, resp.Header.Get("RateLimit"), "carol had used 2 of 3: the refused request charged her nothing")
	assert.Equal(t, 200, resp.StatusCode)
}

// A burst of 10x the limit, concurrently, gives exactly the limit's 200s.
func TestBurstGivesExactlyTheLimit(t *testing.T) {
	f := newFixture(t)
	var wg sync.WaitGroup
	var mu sync.Mutex
	codes := map[int]int{}
	for range 200 {
		wg.Go(func() {
			r := httptest.NewRequest(http.MethodGet, "/check/api?d=burst=value:all", nil)
			w := httptest.NewRecorder()
			f.h.ServeHTTP(w, r)
			mu.Lock()
			codes[w.Code]++
			mu.Unlock()
		})
	}
	wg.Wait()
	assert.Equal(t, map[int]int{200: 20, 429: 180}, codes)
}

func TestOnErrorWhenTheStoreIsClosed(t *testing.T) {
	for _, c := range []struct {
		onError OnError
		deny    string
		want    int
	}{
		{Allow, "", 200},
		{Deny, "", 429},
		{Deny, "403", 403},
	} {
		t.Run(c.onError.String()+c.deny, func(t *testing.T) {
			f := newFixture(t, func(cfg *Config) { cfg.OnError = c.onError })
			require.NoError(t, f.st.Close())
			var hdr []string
			if c.deny != "" {
				hdr = []string{DenyStatusHeader, c.deny}
			}
			resp := f.do(t, "/check/api", "192.0.2.1:1", hdr...)
			assert.Equal(t, c.want, resp.StatusCode)
			assert.Equal(t, "store could not decide: "+service.ErrClosed.Error(), resp.Header.Get(ErrorHeader))
			if c.want != 200 {
				assert.Equal(t, "1", resp.Header.Get("Retry-After"))
				assert.Equal(t, header.ContentTypeProblem, resp.Header.Get("Content-Type"))
			}
			// Three more fallbacks within the second: one line for all four.
			for range 3 {
				f.do(t, "/check/api", "192.0.2.1:1", hdr...)
			}
			assert.Equal(t, int64(4), f.h.Fallbacks())
			assert.Equal(t, 1, strings.Count(f.logged(), "the store could not decide"), f.logged())
			f.advanceLogClock(time.Second)
			f.do(t, "/check/api", "192.0.2.1:1", hdr...)
			assert.Equal(t, 2, strings.Count(f.logged(), "the store could not decide"), f.logged())
			assert.Contains(t, f.logged(), "similar_since_last_line=3")
			assert.Contains(t, f.logged(), "on_error="+c.onError.String())
		})
	}
}

func TestHealthz(t *testing.T) {
	f := newFixture(t)
	resp := f.do(t, "/healthz", "192.0.2.1:1")
	assert.Equal(t, 200, resp.StatusCode)
	assert.Equal(t, "ok\n", body(t, resp))
}
