package middleware

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cellserver/cellserver/commands"
	"github.com/cellserver/cellserver/gateway/header"
	"github.com/cellserver/cellserver/limit"
	"github.com/cellserver/cellserver/resp"
	"github.com/cellserver/cellserver/store"
)

// t0 is the examples' instant of spec cl-limit.md §7: 2023-11-14 22:00:00
// UTC, the start of a minute, an hour and a UTC day's last two hours.
var t0 = time.Unix(1699999200, 0)

// quiet drops go-redis's own log lines (its dial failures while a test
// has cellserver down); the middleware's lines go to each test's buffer.
type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

func init() { redis.SetLogger(quiet{}) }

// cellserver is the real server in process: store, commands and the RESP
// wire on a loopback port, with a frozen clock the test moves. Stop and
// Start take the wire down and up again on the same address (the state
// stays, as a restarted persistent server's would).
type cellserver struct {
	t    *testing.T
	addr string
	clk  *store.Clock
	exec *commands.Server
	mu   sync.Mutex
	srv  *resp.Server
}

func startCellserver(t *testing.T) *cellserver {
	t.Helper()
	clk := &store.Clock{}
	clk.Set(t0.UnixNano())
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	st, err := store.New(store.Config{Shards: 2, Clock: clk, SweepInterval: -1, Logger: log})
	require.NoError(t, err)
	exec, err := commands.New(commands.Config{Logger: log}, st)
	require.NoError(t, err)
	c := &cellserver{t: t, addr: "127.0.0.1:0", clk: clk, exec: exec}
	c.Start()
	t.Cleanup(func() {
		c.Stop()
		exec.Close()
		_ = st.Close()
	})
	return c
}

func (c *cellserver) Start() {
	c.t.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	srv, err := resp.New(resp.Config{Addr: c.addr, Logger: log}, c.exec)
	require.NoError(c.t, err)
	require.NoError(c.t, srv.Listen())
	go func() { _ = srv.Serve() }()
	c.mu.Lock()
	c.srv, c.addr = srv, srv.Addr().String()
	c.mu.Unlock()
}

func (c *cellserver) Stop() {
	c.mu.Lock()
	srv := c.srv
	c.srv = nil
	c.mu.Unlock()
	if srv != nil {
		require.NoError(c.t, srv.Shutdown(context.Background()))
	}
}

func (c *cellserver) now() time.Time { return time.Unix(0, c.clk.Now()) }

// advance moves the server's clock, which is the middleware's too.
func (c *cellserver) advance(d time.Duration) { c.clk.Set(c.clk.Now() + int64(d)) }

// client is a go-redis client as the middleware wants one.
func (c *cellserver) client(t *testing.T) *redis.Client {
	rdb := redis.NewClient(ClientOptions(c.addr))
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// env is a middleware over a cellserver, with a handler that counts its
// calls behind each route.
type env struct {
	cs    *cellserver
	rdb   *redis.Client
	mw    *Middleware
	logs  *syncBuffer
	calls atomic.Int64 // requests that reached a handler
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func newEnv(t *testing.T, mod ...func(*Config)) *env {
	cs := startCellserver(t)
	e := &env{cs: cs, rdb: cs.client(t), logs: &syncBuffer{}}
	cfg := Config{
		Client: e.rdb, Now: cs.now, Timeout: time.Second,
		Logger: slog.New(slog.NewTextHandler(e.logs, nil)),
	}
	for _, f := range mod {
		f(&cfg)
	}
	mw, err := New(cfg)
	require.NoError(t, err)
	e.mw = mw
	return e
}

// handler returns the route's handler; its calls are counted.
func (e *env) handler(t *testing.T, r Route) http.Handler {
	t.Helper()
	if r.Key == nil {
		r.Key = func(req *http.Request) (string, error) { return req.Header.Get("X-User"), nil }
	}
	lim, err := e.mw.Limiter(r)
	require.NoError(t, err)
	return lim(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		e.calls.Add(1)
		_, _ = io.WriteString(w, "ok")
	}))
}

type result struct {
	code int
	h    http.Header
	body string
}

func do(h http.Handler, user string) result {
	req := httptest.NewRequest("GET", "/x", nil)
	req.Header.Set("X-User", user)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return result{rec.Code, rec.Header(), rec.Body.String()}
}

func TestHeadersBeforeTheLimitAnd429After(t *testing.T) {
	e := newEnv(t)
	h := e.handler(t, Route{Name: "api", Limits: []Limit{{Name: "minute", Limit: limit.FW{Limit: 3, Window: time.Minute}}}})
	for i := 1; i <= 3; i++ {
		r := do(h, "alice")
		require.Equal(t, 200, r.code, "request %d", i)
		assert.Equal(t, "ok", r.body)
		assert.Equal(t, `"minute";q=3;w=60;cellserver-alg="fw"`, r.h.Get("RateLimit-Policy"))
		assert.Equal(t, `"minute";r=`+strconv.Itoa(3-i)+`;t=60`, r.h.Get("RateLimit"))
		assert.Equal(t, "3", r.h.Get("X-RateLimit-Limit"))
		assert.Equal(t, strconv.Itoa(3-i), r.h.Get("X-RateLimit-Remaining"))
		assert.Equal(t, strconv.Itoa(i), r.h.Get("X-RateLimit-Used"))
		assert.Equal(t, strconv.FormatInt(t0.Unix()+60, 10), r.h.Get("X-RateLimit-Reset"), "GitHub's epoch reset")
		assert.Equal(t, "minute", r.h.Get("X-RateLimit-Resource"))
		assert.Empty(t, r.h.Get("Retry-After"))
	}
	e.cs.advance(20*time.Second + 500*time.Millisecond)
	r := do(h, "alice")
	require.Equal(t, 429, r.code)
	assert.Equal(t, "40", r.h.Get("Retry-After"), "39.5 s rounded up")
	assert.Equal(t, header.ContentTypeProblem, r.h.Get("Content-Type"))
	assert.Equal(t, `"minute";r=0;t=40`, r.h.Get("RateLimit"))
	var p header.Problem
	require.NoError(t, json.Unmarshal([]byte(r.body), &p))
	assert.Equal(t, header.ProblemType, p.Type)
	assert.Equal(t, 429, p.Status)
	assert.Equal(t, []string{"minute"}, p.ViolatedPolicies)
	assert.Equal(t, int64(40), p.RetryAfter)

	assert.Equal(t, int64(3), e.calls.Load(), "a refused request never reaches the handler")
	assert.Equal(t, 200, do(h, "bob").code, "another identity has its own bucket")
	st := e.mw.Stats()["api"]
	assert.Equal(t, uint64(4), st.Allowed)
	assert.Equal(t, uint64(1), st.Limited)
	assert.Zero(t, st.FallbackTotal())
}

// A request refused by its per-minute limit charges nothing, the per-day
// limit included; the day refuses once its own quota is spent.
func TestLimitsAreAllOrNothing(t *testing.T) {
	e := newEnv(t)
	h := e.handler(t, Route{Name: "api", Limits: []Limit{
		{Name: "minute", Limit: limit.SWL{Limit: 2, Window: time.Minute}},
		{Name: "day", Limit: limit.CAL{Limit: 5, Unit: limit.Day}},
	}})
	dayKey := "rl:{api:u1}:day"
	count := func() int64 {
		v, err := e.rdb.Do(context.Background(), "CL.INSPECT", dayKey).Slice()
		require.NoError(t, err)
		for i := 0; i+1 < len(v); i += 2 {
			if v[i] == "count" {
				return v[i+1].(int64)
			}
		}
		t.Fatalf("no count in %v", v)
		return 0
	}
	for minute := 0; minute < 3; minute++ {
		for i := 0; i < 4; i++ {
			r := do(h, "u1")
			allowedSoFar := minute*2 + min(i, 2)
			switch {
			case i < 2 && allowedSoFar < 5:
				require.Equal(t, 200, r.code, "minute %d request %d", minute, i)
			case allowedSoFar >= 5:
				require.Equal(t, 429, r.code)
				assert.Contains(t, r.body, `"violated-policies":["day"]`)
			default:
				require.Equal(t, 429, r.code, "minute %d request %d", minute, i)
				assert.Contains(t, r.body, `"violated-policies":["minute"]`)
				assert.Equal(t, `"minute";r=0;t=`+r.h.Get("Retry-After"), r.h.Get("RateLimit"))
			}
		}
		assert.Equal(t, int64(min(minute*2+2, 5)), count(), "the day is charged only by admitted requests")
		e.cs.advance(61 * time.Second)
	}
	r := do(h, "u1")
	require.Equal(t, 429, r.code)
	assert.Contains(t, r.body, `"violated-policies":["day"]`)
	assert.Equal(t, `"minute";q=2;w=60;cellserver-alg="swl", "day";q=5;w=86400;cellserver-alg="cal"`, r.h.Get("RateLimit-Policy"))
	// The day ends at midnight UTC: 2 h minus the 3 min 3 s spent.
	assert.Equal(t, strconv.Itoa(7200-183), r.h.Get("Retry-After"))
}

func TestGCRACostAndDecidingLimit(t *testing.T) {
	e := newEnv(t)
	h := e.handler(t, Route{Name: "up", Limits: []Limit{
		{Name: "burst", Limit: limit.GCRA{MaxBurst: 4, Count: 1, Period: time.Second}, Cost: 2},
		{Name: "hour", Limit: limit.FW{Limit: 100, Window: time.Hour}, Cost: 2},
	}})
	r := do(h, "u")
	require.Equal(t, 200, r.code)
	assert.Equal(t, `"burst";r=3;t=1`, r.h.Get("RateLimit"), "the limit with the least remaining decides")
	assert.Equal(t, `"burst";q=5;w=1;cellserver-alg="gcra", "hour";q=100;w=3600;cellserver-alg="fw"`, r.h.Get("RateLimit-Policy"))
	assert.Equal(t, 200, do(h, "u").code)
	r = do(h, "u")
	require.Equal(t, 429, r.code, "5 units of burst, 2 a request: the third needs 6")
	assert.Equal(t, "1", r.h.Get("Retry-After"))
	v, err := e.rdb.Do(context.Background(), "CL.INSPECT", "rl:{up:u}:hour").Slice()
	require.NoError(t, err)
	assert.Contains(t, v, int64(4), "the hour was charged 2+2, not by the refused request")
}

func TestBuildArgs(t *testing.T) {
	berlin, err := limit.LoadZone("Europe/Berlin")
	require.NoError(t, err)
	args, keyAt := buildArgs([]Limit{
		{Name: "a", Limit: limit.GCRA{MaxBurst: 15, Count: 30, Period: time.Minute}},
		{Name: "b", Limit: limit.FW{Limit: 5, Window: 1500 * time.Millisecond}, Cost: 3},
		{Name: "c", Limit: limit.SWC{Limit: 50, Window: time.Minute}},
		{Name: "d", Limit: limit.SWL{Limit: 5, Window: 15 * time.Minute}},
		{Name: "e", Limit: limit.CAL{Limit: 1000, Unit: limit.Month, Zone: berlin}, Cost: 250},
		{Name: "f", Limit: limit.CAL{Limit: 10, Unit: limit.Week}},
	})
	var got []string
	for _, a := range args {
		got = append(got, fmtArg(a))
	}
	assert.Equal(t, strings.Fields("CL.LIMIT <nil> GCRA 15 30 60000 AND <nil> FW 5 1500 COST 3 AND <nil> SWC 50 60000 "+
		"AND <nil> SWL 5 900000 AND <nil> CAL 1000 MONTH TZ Europe/Berlin COST 250 AND <nil> CAL 10 WEEK MS"), got)
	assert.Equal(t, []int{1, 7, 14, 19, 24, 33}, keyAt)
}

func fmtArg(a any) string {
	switch x := a.(type) {
	case nil:
		return "<nil>"
	case string:
		return x
	case uint32:
		return strconv.FormatUint(uint64(x), 10)
	case int64:
		return strconv.FormatInt(x, 10)
	}
	return "?"
}

// The arguments built are CL.LIMIT's grammar: cellserver accepts each
// algorithm's, and replies what the values say.
func TestEveryAlgorithmAccepted(t *testing.T) {
	e := newEnv(t)
	for _, l := range []limit.Limit{
		limit.GCRA{MaxBurst: 2, Count: 3, Period: time.Second},
		limit.FW{Limit: 3, Window: time.Second},
		limit.SWC{Limit: 3, Window: time.Second},
		limit.SWL{Limit: 3, Window: time.Second},
		limit.CAL{Limit: 3, Unit: limit.Year},
	} {
		h := e.handler(t, Route{Name: "r-" + l.Kind().String(), Limits: []Limit{{Name: "l", Limit: l}}})
		for i := 0; i < 3; i++ {
			require.Equal(t, 200, do(h, "u").code, "%s request %d", l.Kind(), i)
		}
		require.Equal(t, 429, do(h, "u").code, "%s", l.Kind())
	}
}

func TestFailOpenUsesTheLocalCeilingAndRecovers(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.Timeout = 200 * time.Millisecond })
	h := e.handler(t, Route{Name: "api", OnFailure: FailOpen, Limits: []Limit{
		{Name: "minute", Limit: limit.FW{Limit: 4, Window: time.Minute}},
	}})
	require.Equal(t, 200, do(h, "u").code)
	e.cs.Stop()

	// Locally, with a fresh bucket: exactly the 4 of the limit pass.
	allowed := 0
	for i := 0; i < 10; i++ {
		r := do(h, "u")
		if r.code == 200 {
			allowed++
			assert.Equal(t, "4", r.h.Get("X-RateLimit-Limit"), "local decisions carry the headers too")
		} else {
			require.Equal(t, 429, r.code)
			assert.Equal(t, "60", r.h.Get("Retry-After"))
		}
	}
	assert.Equal(t, 4, allowed)
	st := e.mw.Stats()["api"]
	assert.Equal(t, uint64(4), st.LocalAllowed)
	assert.Equal(t, uint64(6), st.LocalLimited)
	assert.Equal(t, uint64(10), st.FallbackTotal())
	assert.Equal(t, uint64(DefaultBreakerFailures), st.Fallbacks[ReasonUnreachable], "then the breaker opened")
	assert.Equal(t, uint64(10-DefaultBreakerFailures), st.Fallbacks[ReasonBreaker])
	assert.Equal(t, uint64(10), e.mw.Fallbacks())

	// Back: once the breaker's second is over, cellserver decides again
	// (its own bucket: 1 used before the outage).
	e.cs.Start()
	assert.Equal(t, 429, do(h, "u").code, "the breaker is still open: local")
	e.cs.advance(DefaultBreakerOpen)
	r := do(h, "u")
	require.Equal(t, 200, r.code)
	assert.Equal(t, "2", r.h.Get("X-RateLimit-Remaining"), "cellserver's count: 2 used")
	assert.Equal(t, uint64(2), e.mw.Stats()["api"].Allowed)
	assert.Contains(t, e.logs.String(), "cellserver answers again")
}

func TestFailClosed(t *testing.T) {
	for _, status := range []int{0, 429} {
		t.Run(strconv.Itoa(status), func(t *testing.T) {
			e := newEnv(t)
			h := e.handler(t, Route{Name: "login", OnFailure: FailClosed, ClosedStatus: status, ClosedRetryAfter: 2 * time.Second,
				Limits: []Limit{{Name: "minute", Limit: limit.FW{Limit: 100, Window: time.Minute}}}})
			require.Equal(t, 200, do(h, "u").code)
			e.cs.Stop()
			want := status
			if want == 0 {
				want = 503
			}
			for i := 0; i < 3; i++ {
				r := do(h, "u")
				require.Equal(t, want, r.code)
				assert.Equal(t, "2", r.h.Get("Retry-After"))
				assert.Equal(t, header.ContentTypeProblem, r.h.Get("Content-Type"))
				assert.Contains(t, r.body, `"status":`+strconv.Itoa(want))
				assert.Contains(t, r.body, "unavailable")
			}
			st := e.mw.Stats()["login"]
			assert.Equal(t, uint64(3), st.Refused)
			assert.Equal(t, uint64(3), st.FallbackTotal())
			assert.Zero(t, st.LocalAllowed+st.LocalLimited)
			e.cs.Start()
			assert.Equal(t, 200, do(h, "u").code, "three failures do not open the breaker: back at once")
		})
	}
}

// A cellserver that accepts but never answers: each call ends at the
// timeout and falls back with reason timeout.
func TestSlowCellserverTimesOut(t *testing.T) {
	rdb := redis.NewClient(ClientOptions(blackhole(t)))
	t.Cleanup(func() { _ = rdb.Close() })
	mw, err := New(Config{Client: rdb, Timeout: 30 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, err)
	lim, err := mw.Limiter(Route{Name: "r", Key: func(*http.Request) (string, error) { return "k", nil },
		Limits: []Limit{{Name: "l", Limit: limit.FW{Limit: 1, Window: time.Hour}}}})
	require.NoError(t, err)
	h := lim(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	assert.Equal(t, 200, do(h, "").code)
	assert.Equal(t, 429, do(h, "").code, "the local ceiling: 1 an hour")
	assert.Equal(t, uint64(2), mw.Stats()["r"].Fallbacks[ReasonTimeout])
}

// A request whose own deadline is sooner than Timeout, with cellserver not
// answering, ends at that deadline and falls back as a timeout: a
// fail-closed route refuses it, counted and logged (not an empty 200); the
// breaker shared by every request does not count it: it was the request's
// own deadline, not cellserver, so other requests go on asking cellserver.
func TestRequestDeadlineFallsBack(t *testing.T) {
	// Blackholed: the dial hangs until the call's context ends (a SYN
	// dropped on the way).
	opts := ClientOptions("192.0.2.1:6379")
	opts.Dialer = func(ctx context.Context, _, _ string) (net.Conn, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	rdb := redis.NewClient(opts)
	t.Cleanup(func() { _ = rdb.Close() })
	logs := &syncBuffer{}
	mw, err := New(Config{Client: rdb, Timeout: 50 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	require.NoError(t, err)
	lim, err := mw.Limiter(Route{Name: "r", OnFailure: FailClosed, Key: func(*http.Request) (string, error) { return "k", nil },
		Limits: []Limit{{Name: "l", Limit: limit.FW{Limit: 1, Window: time.Hour}}}})
	require.NoError(t, err)
	var calls atomic.Int64
	h := lim(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { calls.Add(1) }))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/x", nil).WithContext(ctx))
	assert.Equal(t, http.StatusServiceUnavailable, rec.Code)
	assert.Contains(t, rec.Body.String(), "rate limiter is unavailable")
	assert.Equal(t, "1", rec.Header().Get("Retry-After"))
	assert.Zero(t, calls.Load())
	st := mw.Stats()["r"]
	assert.Equal(t, uint64(1), st.Fallbacks[ReasonTimeout])
	assert.Equal(t, uint64(1), mw.Fallbacks())
	assert.Zero(t, mw.brk.fails.Load(), "a request's own deadline does not trip the breaker")
	assert.Contains(t, logs.String(), "reason=timeout")
	assert.Equal(t, uint64(1), st.Refused)
}

// blackhole is the address of a server that accepts connections and never
// answers.
func blackhole(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var conns []net.Conn
	var mu sync.Mutex
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	return ln.Addr().String()
}

// cellserver answering an error (the key holds another kind of value) is a
// fallback too: the request is not decided.
func TestErrorReplyFallsBack(t *testing.T) {
	e := newEnv(t)
	h := e.handler(t, Route{Name: "api", OnFailure: FailClosed, Limits: []Limit{{Name: "m", Limit: limit.FW{Limit: 5, Window: time.Minute}}}})
	require.NoError(t, e.rdb.Do(context.Background(), "CL.THROTTLE", "rl:{api:x}:m", 1, 1, 60).Err())
	assert.Equal(t, 503, do(h, "x").code)
	assert.Equal(t, uint64(1), e.mw.Stats()["api"].Fallbacks[ReasonError])
	assert.Contains(t, e.logs.String(), "WRONGTYPE")
	assert.Equal(t, 200, do(h, "y").code)
}

func TestKeyErrorAndLongIdentity(t *testing.T) {
	e := newEnv(t)
	lim, err := e.mw.Limiter(Route{Name: "k",
		Key: func(r *http.Request) (string, error) {
			if k := r.Header.Get("X-User"); k != "" {
				return k, nil
			}
			return "", io.ErrUnexpectedEOF
		},
		Limits: []Limit{{Name: "m", Limit: limit.FW{Limit: 1, Window: time.Minute}}}})
	require.NoError(t, err)
	h := lim(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	r := do(h, "")
	assert.Equal(t, 400, r.code)
	assert.Contains(t, r.body, "unexpected EOF")
	assert.Equal(t, uint64(1), e.mw.Stats()["k"].KeyErrors)

	long := strings.Repeat("k", 10000)
	assert.Equal(t, 200, do(h, long).code)
	assert.Equal(t, 429, do(h, long).code, "the same long identity, the same bucket")
	assert.Equal(t, 200, do(h, long+"x").code, "another one, another bucket")
	keys, err := e.rdb.Keys(context.Background(), "rl:{k:sha256:*").Result()
	require.NoError(t, err)
	require.Len(t, keys, 2)
	for _, k := range keys {
		assert.Less(t, len(k), 100)
	}

	// Sending the hashed form of another's long identity names other
	// buckets: the long identity's is still spent, this one is not.
	forged := hashID(long)
	assert.Len(t, forged, 71)
	assert.Equal(t, 200, do(h, forged).code, "not the long identity's bucket")
	assert.Equal(t, 429, do(h, forged).code, "its own bucket")
	assert.Equal(t, 429, do(h, long).code, "the long identity's bucket is untouched")
	assert.Equal(t, 200, do(h, "sha256:x").code, "a short one is hashed too")
	for k, want := range map[string]int64{"rl:{k:sha256:x}:m": 0, "rl:{k:" + hashID("sha256:x") + "}:m": 1} {
		n, err := e.rdb.Exists(context.Background(), k).Result()
		require.NoError(t, err)
		assert.Equal(t, want, n, k)
	}
}

func TestConfigErrors(t *testing.T) {
	ok := redis.NewClient(ClientOptions("127.0.0.1:1"))
	defer ok.Close()
	plain := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer plain.Close()
	_, err := New(Config{})
	assert.ErrorContains(t, err, "Client is required")
	_, err = New(Config{Client: plain})
	assert.ErrorContains(t, err, "ContextTimeoutEnabled")
	_, err = New(Config{Client: ok, KeyPrefix: "a{b"})
	assert.ErrorContains(t, err, "must not contain")

	mw, err := New(Config{Client: ok})
	require.NoError(t, err)
	key := func(*http.Request) (string, error) { return "", nil }
	fw := limit.FW{Limit: 1, Window: time.Second}
	for _, tc := range []struct {
		r    Route
		want string
	}{
		{Route{Name: "Bad", Key: key, Limits: []Limit{{Name: "a", Limit: fw}}}, "route name"},
		{Route{Name: "r", Limits: []Limit{{Name: "a", Limit: fw}}}, "no key function"},
		{Route{Name: "r", Key: key}, "0 limits"},
		{Route{Name: "r", Key: key, Limits: make([]Limit, 17)}, "17 limits"},
		{Route{Name: "r", Key: key, Limits: []Limit{{Name: "a", Limit: fw}, {Name: "a", Limit: fw}}}, "used twice"},
		{Route{Name: "r", Key: key, Limits: []Limit{{Name: "a b", Limit: fw}}}, "limit name"},
		{Route{Name: "r", Key: key, Limits: []Limit{{Name: "a"}}}, "no algorithm"},
		{Route{Name: "r", Key: key, Limits: []Limit{{Name: "a", Limit: limit.FW{Limit: 0, Window: time.Second}}}}, "limit must be between"},
		{Route{Name: "r", Key: key, Limits: []Limit{{Name: "a", Limit: limit.SWL{Limit: 20000, Window: time.Second}}}}, "SWL limit above 10000"},
		{Route{Name: "r", Key: key, ClosedStatus: 500, Limits: []Limit{{Name: "a", Limit: fw}}}, "want 503 or 429"},
		{Route{Name: "r", Key: key, LocalLimits: []Limit{{Name: "a"}}, Limits: []Limit{{Name: "a", Limit: fw}}}, "local limits"},
	} {
		_, err := mw.Limiter(tc.r)
		assert.ErrorContains(t, err, tc.want)
	}
	_, err = mw.Limiter(Route{Name: "r", Key: key, Limits: []Limit{{Name: "a", Limit: fw}}})
	require.NoError(t, err)
	_, err = mw.Limiter(Route{Name: "r", Key: key, Limits: []Limit{{Name: "a", Limit: fw}}})
	assert.ErrorContains(t, err, "used twice")
}

func TestLocalLimiterIsBounded(t *testing.T) {
	l := newLocalLimiter(10, 1<<20)
	spec := []limit.Spec{{Limit: limit.FW{Limit: 1, Window: time.Minute}, Cost: 1}}
	now := t0.UnixNano()
	for i := 0; i < 1000; i++ {
		spec[0].Key = []byte("k" + strconv.Itoa(i))
		_, r5, err := l.decide(spec, now)
		require.NoError(t, err)
		require.False(t, r5[0].Limited)
	}
	assert.Equal(t, 10, l.len())

	// Bytes: SWL states grow with their entries.
	l = newLocalLimiter(1000, 4096)
	spec = []limit.Spec{{Limit: limit.SWL{Limit: 10000, Window: time.Hour}, Cost: 1}}
	for i := 0; i < 2000; i++ {
		spec[0].Key = []byte("k" + strconv.Itoa(i%50))
		_, _, err := l.decide(spec, now+int64(i)*1e6)
		require.NoError(t, err)
		require.LessOrEqual(t, l.bytes, 4096)
	}
	assert.Positive(t, l.len())

	// Expired entries are dropped when read.
	l = newLocalLimiter(10, 1<<20)
	spec = []limit.Spec{{Key: []byte("x"), Limit: limit.FW{Limit: 1, Window: time.Second}, Cost: 1}}
	_, r5, _ := l.decide(spec, now)
	assert.False(t, r5[0].Limited)
	_, r5, _ = l.decide(spec, now)
	assert.True(t, r5[0].Limited)
	_, r5, _ = l.decide(spec, now+int64(time.Second))
	assert.False(t, r5[0].Limited, "a new window")
}

// The local limits are the route's unless LocalLimits says otherwise.
func TestLocalLimitsOverride(t *testing.T) {
	e := newEnv(t)
	h := e.handler(t, Route{Name: "api",
		Limits:      []Limit{{Name: "minute", Limit: limit.FW{Limit: 100, Window: time.Minute}}},
		LocalLimits: []Limit{{Name: "local", Limit: limit.SWL{Limit: 2, Window: time.Hour}}},
	})
	e.cs.Stop()
	assert.Equal(t, 200, do(h, "u").code)
	r := do(h, "u")
	assert.Equal(t, 200, r.code)
	assert.Equal(t, `"local";r=0;t=3600`, r.h.Get("RateLimit"))
	assert.Equal(t, 429, do(h, "u").code)
}

func TestFallbackLogIsRateLimited(t *testing.T) {
	var buf syncBuffer
	f := fallbackLog{logger: slog.New(slog.NewTextHandler(&buf, nil))}
	for i := 0; i < 10; i++ {
		f.fallback(t0, "r", FailOpen, ReasonTimeout, nil)
	}
	assert.Equal(t, 1, strings.Count(buf.String(), "falling back"))
	assert.Contains(t, buf.String(), "fallbacks=1")
	f.fallback(t0.Add(999*time.Millisecond), "r", FailOpen, ReasonTimeout, nil)
	assert.Equal(t, 1, strings.Count(buf.String(), "falling back"))
	f.fallback(t0.Add(time.Second), "r", FailClosed, ReasonUnreachable, io.EOF)
	assert.Equal(t, 2, strings.Count(buf.String(), "falling back"))
	assert.Contains(t, buf.String(), "fallbacks=11", "the 10 not logged and this one")
	assert.Contains(t, buf.String(), "err=EOF")
	f.fallback(t0.Add(1500*time.Millisecond), "r", FailOpen, ReasonTimeout, nil)
	f.recovered("r", 3)
	assert.Contains(t, buf.String(), "unlogged_fallbacks=1")
}

func TestCollector(t *testing.T) {
	e := newEnv(t)
	h := e.handler(t, Route{Name: "api", Limits: []Limit{{Name: "m", Limit: limit.FW{Limit: 1, Window: time.Minute}}}})
	do(h, "u")
	do(h, "u")
	e.cs.Stop()
	do(h, "v")
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(e.mw.Collector()))
	mfs, err := reg.Gather()
	require.NoError(t, err)
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			k := mf.GetName()
			for _, lp := range m.GetLabel() {
				k += "," + lp.GetName() + "=" + lp.GetValue()
			}
			got[k] = m.GetCounter().GetValue()
		}
	}
	assert.Equal(t, 1.0, got[MetricDecisions+",decided_by=cellserver,outcome=allowed,route=api"])
	assert.Equal(t, 1.0, got[MetricDecisions+",decided_by=cellserver,outcome=limited,route=api"])
	assert.Equal(t, 1.0, got[MetricDecisions+",decided_by=local,outcome=allowed,route=api"])
	assert.Equal(t, 1.0, got[MetricFallbacks+",reason=unreachable,route=api"])
	assert.Equal(t, 0.0, got[MetricFallbacks+",reason=timeout,route=api"])
}

// Concurrent requests through one route, half of them while cellserver is
// away: no race, and the counts add up.
func TestConcurrentRequests(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.BreakerOpen = -1 })
	h := e.handler(t, Route{Name: "api", Limits: []Limit{{Name: "m", Limit: limit.FW{Limit: 50, Window: time.Minute}}}})
	run := func() {
		var wg sync.WaitGroup
		for g := 0; g < 8; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < 20; i++ {
					do(h, "u")
				}
			}()
		}
		wg.Wait()
	}
	run()
	e.cs.Stop()
	run()
	st := e.mw.Stats()["api"]
	assert.Equal(t, uint64(50), st.Allowed)
	assert.Equal(t, uint64(110), st.Limited)
	assert.Equal(t, uint64(50), st.LocalAllowed)
	assert.Equal(t, uint64(110), st.LocalLimited)
	assert.Equal(t, uint64(160), st.Fallbacks[ReasonUnreachable])
}

func TestHeaderConvention(t *testing.T) {
	route := Route{Name: "api", Limits: []Limit{{Name: "m", Limit: limit.FW{Limit: 1, Window: time.Minute}}}}
	e := newEnv(t, func(c *Config) { c.Headers = &header.Convention{X: true, XResetDelta: true} })
	h := e.handler(t, route)
	r := do(h, "u")
	assert.Empty(t, r.h.Get("RateLimit"))
	assert.Empty(t, r.h.Get("RateLimit-Policy"))
	assert.Equal(t, "60", r.h.Get("X-RateLimit-Reset"), "Envoy's delta seconds")

	e = newEnv(t, func(c *Config) { c.Headers = &header.Convention{} })
	h = e.handler(t, route)
	r = do(h, "u")
	require.Equal(t, 200, r.code)
	assert.Empty(t, r.h.Values("X-RateLimit-Limit"))
	assert.Empty(t, r.h.Values("RateLimit"))
	r = do(h, "u")
	require.Equal(t, 429, r.code)
	assert.Equal(t, "60", r.h.Get("Retry-After"), "a refusal says when, whatever the convention")
}

// A request whose client has gone is not cellserver's failure: nothing is
// counted as a fallback, nothing is answered, the handler is not called.
func TestCanceledRequestIsNoFallback(t *testing.T) {
	e := newEnv(t)
	h := e.handler(t, Route{Name: "api", Limits: []Limit{{Name: "m", Limit: limit.FW{Limit: 5, Window: time.Minute}}}})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	req := httptest.NewRequest("GET", "/x", nil).WithContext(ctx)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	assert.False(t, rec.Flushed)
	assert.Empty(t, rec.Body.String())
	assert.Empty(t, rec.Header())
	assert.Zero(t, e.calls.Load())
	assert.Zero(t, e.mw.Fallbacks())
}
