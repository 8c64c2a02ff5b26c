package tests

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cellserver/cellserver/gateway/header"
	"github.com/cellserver/cellserver/limit"
	"github.com/cellserver/cellserver/middleware"
	"github.com/cellserver/cellserver/middleware/retry"
)

// mwApp is an application behind the middleware, served by httptest.
type mwApp struct {
	mw   *middleware.Middleware
	srv  *httptest.Server
	logs *lockedBuffer
}

// newMWApp serves routes (path -> route) over a middleware talking to
// addr; each handler answers 200 "ok". Identities come from X-User.
func newMWApp(t *testing.T, addr string, routes map[string]middleware.Route) *mwApp {
	t.Helper()
	rdb := redis.NewClient(middleware.ClientOptions(addr))
	t.Cleanup(func() { _ = rdb.Close() })
	a := &mwApp{logs: &lockedBuffer{}}
	var err error
	a.mw, err = middleware.New(middleware.Config{
		Client: rdb, Timeout: 500 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(a.logs, nil)),
	})
	require.NoError(t, err)
	mux := http.NewServeMux()
	for path, r := range routes {
		r.Key = func(req *http.Request) (string, error) { return req.Header.Get("X-User"), nil }
		lim, err := a.mw.Limiter(r)
		require.NoError(t, err)
		mux.Handle(path, lim(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })))
	}
	a.srv = httptest.NewServer(mux)
	t.Cleanup(a.srv.Close)
	return a
}

type mwReply struct {
	code int
	h    http.Header
	body string
}

func (a *mwApp) get(t *testing.T, path, user string) mwReply {
	t.Helper()
	req, err := http.NewRequest("GET", a.srv.URL+path, nil)
	require.NoError(t, err)
	req.Header.Set("X-User", user)
	resp, err := a.srv.Client().Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return mwReply{resp.StatusCode, resp.Header, string(b)}
}

// awayFromMidnight waits out the last seconds of a UTC day, so that a
// per-day window does not end during the test.
func awayFromMidnight() {
	now := time.Now().UTC()
	next := now.Truncate(24 * time.Hour).Add(24 * time.Hour)
	if d := next.Sub(now); d < 20*time.Second {
		time.Sleep(d + time.Second)
	}
}

func TestMiddlewareHeadersThen429(t *testing.T) {
	srv := startServer(t, "--in-memory")
	app := newMWApp(t, srv.Addr, map[string]middleware.Route{
		"/api": {Name: "api", Limits: []middleware.Limit{{Name: "minute", Limit: limit.SWL{Limit: 3, Window: time.Minute}}}},
	})
	for i := 1; i <= 3; i++ {
		r := app.get(t, "/api", "alice")
		require.Equal(t, 200, r.code, "request %d: %s", i, r.body)
		assert.Equal(t, "ok", r.body)
		assert.Equal(t, `"minute";q=3;w=60;cellserver-alg="swl"`, r.h.Get("RateLimit-Policy"))
		assert.Equal(t, `"minute";r=`+strconv.Itoa(3-i)+`;t=60`, r.h.Get("RateLimit"))
		assert.Equal(t, strconv.Itoa(3-i), r.h.Get("X-RateLimit-Remaining"))
		assert.Equal(t, "3", r.h.Get("X-RateLimit-Limit"))
		reset, err := strconv.ParseInt(r.h.Get("X-RateLimit-Reset"), 10, 64)
		require.NoError(t, err)
		assert.InDelta(t, time.Now().Unix()+60, reset, 5, "an epoch reset, about a minute ahead")
		assert.Empty(t, r.h.Get("Retry-After"))
	}
	r := app.get(t, "/api", "alice")
	require.Equal(t, 429, r.code)
	ra, err := strconv.Atoi(r.h.Get("Retry-After"))
	require.NoError(t, err, "Retry-After %q", r.h.Get("Retry-After"))
	assert.True(t, ra >= 1 && ra <= 60, "Retry-After %d", ra)
	assert.Equal(t, header.ContentTypeProblem, r.h.Get("Content-Type"))
	assert.Equal(t, fmt.Sprintf(`"minute";r=0;t=%d`, ra), r.h.Get("RateLimit"))
	var p header.Problem
	require.NoError(t, json.Unmarshal([]byte(r.body), &p), "body %s", r.body)
	assert.Equal(t, header.ProblemType, p.Type)
	assert.Equal(t, 429, p.Status)
	assert.Equal(t, []string{"minute"}, p.ViolatedPolicies)
	assert.Equal(t, int64(ra), p.RetryAfter)
	assert.Equal(t, 200, app.get(t, "/api", "bob").code, "another identity")
	st := app.mw.Stats()["api"]
	assert.Equal(t, uint64(4), st.Allowed)
	assert.Equal(t, uint64(1), st.Limited)
	assert.Zero(t, st.FallbackTotal())
}

// Per-minute AND per-day in one CL.LIMIT: whichever refuses, the other is
// not charged.
func TestMiddlewareMinuteAndDayAllOrNothing(t *testing.T) {
	awayFromMidnight()
	srv := startServer(t, "--in-memory")
	rdb := srv.Client(t)
	app := newMWApp(t, srv.Addr, map[string]middleware.Route{
		"/a": {Name: "a", Limits: []middleware.Limit{
			{Name: "minute", Limit: limit.SWL{Limit: 2, Window: time.Minute}},
			{Name: "day", Limit: limit.FW{Limit: 1000, Window: 24 * time.Hour}},
		}},
		// The day tighter than the minute: the day refuses.
		"/b": {Name: "b", Limits: []middleware.Limit{
			{Name: "minute", Limit: limit.SWL{Limit: 10, Window: time.Minute}},
			{Name: "day", Limit: limit.FW{Limit: 2, Window: 24 * time.Hour}},
		}},
	})
	inspect := func(key string) []any {
		v, err := rdb.Do(context.Background(), "CL.INSPECT", key).Slice()
		require.NoError(t, err, key)
		return v
	}
	field := func(v []any, name string) any {
		for i := 0; i+1 < len(v); i += 2 {
			if v[i] == name {
				return v[i+1]
			}
		}
		t.Fatalf("no %s in %v", name, v)
		return nil
	}

	codes := []int{}
	for i := 0; i < 6; i++ {
		r := app.get(t, "/a", "u")
		codes = append(codes, r.code)
		if r.code == 429 {
			assert.Contains(t, r.body, `"violated-policies":["minute"]`)
			assert.True(t, strings.HasPrefix(r.h.Get("RateLimit"), `"minute";r=0;`), r.h.Get("RateLimit"))
		}
	}
	assert.Equal(t, []int{200, 200, 429, 429, 429, 429}, codes)
	assert.Equal(t, int64(2), field(inspect("rl:{a:u}:day"), "count"), "the refused requests charged no day")

	codes = codes[:0]
	for i := 0; i < 5; i++ {
		r := app.get(t, "/b", "u")
		codes = append(codes, r.code)
		if r.code == 429 {
			assert.Contains(t, r.body, `"violated-policies":["day"]`)
		}
	}
	assert.Equal(t, []int{200, 200, 429, 429, 429}, codes)
	var used int64 // entries are [ts_ms, cost]; one ms holds one entry
	for _, e := range field(inspect("rl:{b:u}:minute"), "entries").([]any) {
		used += e.([]any)[1].(int64)
	}
	assert.Equal(t, int64(2), used, "the refused requests charged no minute")
}

// The middleware's cellserver is killed: the fail-open route decides
// locally with exactly its ceiling, the fail-closed one answers 503; once
// cellserver is started again on the same address, both use it again.
func TestMiddlewareFailsOpenOrClosedAndRecovers(t *testing.T) {
	port := freePort(t)
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	srv := clStartOnPort(t, port, "--in-memory")
	app := newMWApp(t, addr, map[string]middleware.Route{
		"/api": {Name: "api", OnFailure: middleware.FailOpen,
			Limits:      []middleware.Limit{{Name: "minute", Limit: limit.SWL{Limit: 100, Window: time.Minute}}},
			LocalLimits: []middleware.Limit{{Name: "local", Limit: limit.SWL{Limit: 5, Window: time.Hour}}}},
		"/login": {Name: "login", OnFailure: middleware.FailClosed,
			Limits: []middleware.Limit{{Name: "minute", Limit: limit.SWL{Limit: 100, Window: time.Minute}}}},
	})
	require.Equal(t, 200, app.get(t, "/api", "u").code)
	require.Equal(t, 200, app.get(t, "/login", "u").code)

	srv.Kill9()

	// Concurrent requests, as an application sees them: exactly the
	// local ceiling passes.
	var (
		mu    sync.Mutex
		codes = map[int]int{}
		wg    sync.WaitGroup
	)
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 5; i++ {
				r := app.get(t, "/api", "u")
				mu.Lock()
				codes[r.code]++
				mu.Unlock()
				if r.code == 429 {
					assert.Contains(t, r.body, `"violated-policies":["local"]`)
					assert.NotEmpty(t, r.h.Get("Retry-After"))
				}
			}
		}()
	}
	wg.Wait()
	assert.Equal(t, map[int]int{200: 5, 429: 15}, codes, "the local ceiling: 5 an hour")
	for i := 0; i < 3; i++ {
		r := app.get(t, "/login", "u")
		require.Equal(t, 503, r.code, "fail closed")
		assert.Equal(t, "1", r.h.Get("Retry-After"))
		assert.Equal(t, header.ContentTypeProblem, r.h.Get("Content-Type"))
	}
	st := app.mw.Stats()
	assert.Equal(t, uint64(20), st["api"].FallbackTotal())
	assert.Equal(t, uint64(5), st["api"].LocalAllowed)
	assert.Equal(t, uint64(15), st["api"].LocalLimited)
	assert.Equal(t, uint64(3), st["login"].Refused)
	assert.Contains(t, app.logs.String(), "falling back")

	clStartOnPort(t, port, "--in-memory") // where the middleware still points
	// Recovery takes the breaker's second and go-redis's redial (at most
	// a second once its pool has seen as many dial errors as its size):
	// poll for it.
	deadline := time.Now().Add(15 * time.Second)
	for app.get(t, "/login", "u").code != 200 {
		require.True(t, time.Now().Before(deadline), "the fail-closed route never recovered")
		time.Sleep(50 * time.Millisecond)
	}
	before := app.mw.Stats()["api"]
	r := app.get(t, "/api", "u")
	require.Equal(t, 200, r.code)
	assert.Equal(t, `"minute";r=99;t=60`, r.h.Get("RateLimit"), "cellserver decides again (a fresh in-memory server)")
	after := app.mw.Stats()["api"]
	assert.Equal(t, before.Allowed+1, after.Allowed)
	assert.Equal(t, before.FallbackTotal(), after.FallbackTotal())
	assert.Contains(t, app.logs.String(), "cellserver answers again")
}

// countingTransport counts the attempts the retrying client makes.
type countingTransport struct {
	mu    sync.Mutex
	codes []int
}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := http.DefaultTransport.RoundTrip(r)
	if err == nil {
		c.mu.Lock()
		c.codes = append(c.codes, resp.StatusCode)
		c.mu.Unlock()
	}
	return resp, err
}

// The retrying client against the middleware: a 429 is retried after its
// Retry-After, and the retry passes.
func TestMiddlewareRetryClientWaitsOutThe429(t *testing.T) {
	srv := startServer(t, "--in-memory")
	app := newMWApp(t, srv.Addr, map[string]middleware.Route{
		"/s": {Name: "s", Limits: []middleware.Limit{{Name: "second", Limit: limit.GCRA{MaxBurst: 0, Count: 1, Period: time.Second}}}},
	})
	ct := &countingTransport{}
	var waits []time.Duration
	client := &http.Client{Transport: &retry.Transport{
		Base: ct,
		Sleep: func(ctx context.Context, d time.Duration) error {
			waits = append(waits, d)
			select { // a real wait: cellserver's clock is real
			case <-time.After(d):
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		},
	}}
	for i := 0; i < 2; i++ {
		req, err := http.NewRequest("GET", app.srv.URL+"/s", nil)
		require.NoError(t, err)
		req.Header.Set("X-User", "u")
		resp, err := client.Do(req)
		require.NoError(t, err)
		_ = resp.Body.Close()
		require.Equal(t, 200, resp.StatusCode, "request %d", i)
	}
	assert.Equal(t, []int{200, 429, 200}, ct.codes)
	assert.Equal(t, []time.Duration{time.Second}, waits, "Retry-After: 1")
}

// In cluster mode (go-redis's ClusterClient), a route's limits share a hash
// tag, so its CL.LIMIT goes to one node whatever the limits.
func TestMiddlewareClusterClient(t *testing.T) {
	srv := startServer(t, "--in-memory", "--cluster", "emulated")
	opt := middleware.ClientOptions(srv.Addr)
	rdb := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs: []string{srv.Addr}, ContextTimeoutEnabled: true, MaxRetries: -1,
		DialTimeout: opt.DialTimeout, ReadTimeout: opt.ReadTimeout, WriteTimeout: opt.WriteTimeout,
	})
	t.Cleanup(func() { _ = rdb.Close() })
	mw, err := middleware.New(middleware.Config{Client: rdb, Timeout: time.Second})
	require.NoError(t, err)
	lim, err := mw.Limiter(middleware.Route{
		Name: "c",
		Key:  func(*http.Request) (string, error) { return "u", nil },
		Limits: []middleware.Limit{
			{Name: "minute", Limit: limit.SWL{Limit: 2, Window: time.Minute}},
			{Name: "hour", Limit: limit.SWL{Limit: 100, Window: time.Hour}},
		},
		OnFailure: middleware.FailClosed,
	})
	require.NoError(t, err)
	h := lim(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	var codes []int
	for i := 0; i < 3; i++ {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
		codes = append(codes, rec.Code)
	}
	assert.Equal(t, []int{200, 200, 429}, codes)
	assert.Zero(t, mw.Fallbacks())
}

// A cellserver that hangs (SIGSTOP) is slow, not gone: calls end at the
// timeout, the fail-open route decides locally, and once the process
// runs again (SIGCONT) cellserver decides again.
func TestMiddlewareSlowCellserverTimesOut(t *testing.T) {
	srv := startServer(t, "--in-memory")
	rdb := redis.NewClient(middleware.ClientOptions(srv.Addr))
	t.Cleanup(func() { _ = rdb.Close() })
	mw, err := middleware.New(middleware.Config{Client: rdb, Timeout: 100 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, err)
	lim, err := mw.Limiter(middleware.Route{
		Name: "api", Key: func(*http.Request) (string, error) { return "u", nil },
		Limits: []middleware.Limit{{Name: "hour", Limit: limit.SWL{Limit: 3, Window: time.Hour}}},
	})
	require.NoError(t, err)
	h := lim(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	code := func() int {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
		return rec.Code
	}
	require.Equal(t, 200, code())

	require.NoError(t, srv.cmd.Process.Signal(syscall.SIGSTOP))
	stopped := true
	waitStopped(t, srv.cmd.Process.Pid)
	t.Cleanup(func() {
		if stopped {
			_ = srv.cmd.Process.Signal(syscall.SIGCONT)
		}
	})
	var codes []int
	for i := 0; i < 4; i++ {
		codes = append(codes, code())
	}
	assert.Equal(t, []int{200, 200, 200, 429}, codes, "the local ceiling of 3 an hour")
	st := mw.Stats()["api"]
	assert.Equal(t, uint64(4), st.Fallbacks[middleware.ReasonTimeout])

	require.NoError(t, srv.cmd.Process.Signal(syscall.SIGCONT))
	stopped = false
	deadline := time.Now().Add(10 * time.Second)
	for mw.Stats()["api"].Allowed < 2 {
		require.True(t, time.Now().Before(deadline), "cellserver never decided again")
		code()
		time.Sleep(20 * time.Millisecond)
	}
}

// waitStopped waits until the process is stopped by a signal (state T in
// /proc): SIGSTOP is delivered asynchronously.
func waitStopped(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		require.NoError(t, err)
		// pid (comm) state ...: the state follows the last ')'.
		if f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:])); len(f) > 0 && f[0] == "T" {
			return
		}
		require.True(t, time.Now().Before(deadline), "process %d not stopped after SIGSTOP", pid)
		time.Sleep(5 * time.Millisecond)
	}
}
