package rls

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/cellserver/cellserver/gateway"
	"github.com/cellserver/cellserver/gateway/header"
	"github.com/cellserver/cellserver/gateway/header/headertest"
	"github.com/cellserver/cellserver/gateway/policy"
	"github.com/cellserver/cellserver/service"
	"github.com/cellserver/cellserver/store"
)

// t0 is a UTC midnight: every fixed window (minute, day) starts there, so
// each one's reset is its whole length.
const t0 = int64(1_699_920_000) * int64(time.Second)

const testPolicy = `
domain: rls
descriptors:
  - key: user
    rate_limit:
      name: per_minute
      unit: minute
      requests_per_unit: 3
  - key: user_day
    rate_limit:
      name: per_day
      unit: day
      requests_per_unit: 100
  - key: shadow
    shadow_mode: true
    rate_limit:
      name: shadowed
      unit: minute
      requests_per_unit: 1
  - key: free
    rate_limit:
      unlimited: true
  - key: open
`

// recorder is an Observer that keeps what it is told.
type recorder struct {
	mu        sync.Mutex
	frontends []string
	shadowed  int
}

func (r *recorder) Decided(frontend, _ string, d *gateway.Decision, _ time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.frontends = append(r.frontends, frontend)
	for _, s := range d.Statuses {
		if s.Shadowed {
			r.shadowed++
		}
	}
}

func (r *recorder) counts() (calls, shadowed int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.frontends), r.shadowed
}

type harness struct {
	clk    *store.Clock
	st     *store.Store
	eng    *gateway.Engine
	svc    *Service
	srv    *Server
	conn   *grpc.ClientConn
	rls    rlspb.RateLimitServiceClient
	health healthpb.HealthClient
	obs    *recorder
	addr   string
}

type options struct {
	cfg    Config
	svcCfg service.Config
}

// newHarness runs a Server on a real in-memory store with a frozen clock,
// on a loopback port, and dials it.
func newHarness(t testing.TB, opts ...func(*options)) *harness {
	t.Helper()
	var o options
	o.cfg.Headers = header.Default
	for _, f := range opts {
		f(&o)
	}
	h := &harness{clk: &store.Clock{}, obs: &recorder{}}
	h.clk.Set(t0)
	st, err := store.New(store.Config{Shards: 4, Clock: h.clk})
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	h.st = st
	o.svcCfg.Store = st
	pc, err := policy.Parse([]byte(testPolicy))
	require.NoError(t, err)
	h.eng = gateway.New(gateway.Config{Service: service.New(o.svcCfg), Policies: policy.Static(pc), Observer: h.obs})
	o.cfg.Engine = h.eng
	h.svc = NewService(h.eng, o.cfg.Headers, nil)
	h.srv, err = New(o.cfg)
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	h.addr = ln.Addr().String()
	served := make(chan error, 1)
	go func() { served <- h.srv.Serve(ln) }()
	t.Cleanup(func() {
		h.srv.Shutdown(5 * time.Second)
		assert.NoError(t, <-served)
	})
	h.conn = dial(t, h.addr)
	h.rls = rlspb.NewRateLimitServiceClient(h.conn)
	h.health = healthpb.NewHealthClient(h.conn)
	return h
}

func dial(t testing.TB, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// desc builds a descriptor of key=value pairs.
func desc(kv ...string) *rlv3.RateLimitDescriptor {
	d := &rlv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &rlv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

func withHits(d *rlv3.RateLimitDescriptor, n uint64) *rlv3.RateLimitDescriptor {
	d.HitsAddend = wrapperspb.UInt64(n)
	return d
}

func (h *harness) call(t *testing.T, hits uint32, ds ...*rlv3.RateLimitDescriptor) *rlspb.RateLimitResponse {
	t.Helper()
	resp, err := h.rls.ShouldRateLimit(ctxT(t), &rlspb.RateLimitRequest{Domain: "rls", Descriptors: ds, HitsAddend: hits})
	require.NoError(t, err)
	require.Len(t, resp.Statuses, len(ds), "one status per descriptor")
	return resp
}

// headers returns the response's headers by lower-case name; a name sent
// twice fails the test.
func headers(t *testing.T, resp *rlspb.RateLimitResponse) map[string]string {
	t.Helper()
	m := map[string]string{}
	for _, hv := range resp.ResponseHeadersToAdd {
		k := strings.ToLower(hv.Key)
		_, dup := m[k]
		require.False(t, dup, "header %s sent twice", k)
		m[k] = hv.Value
	}
	return m
}

// parseSFList parses a RateLimit or RateLimit-Policy value.
func parseSFList(t *testing.T, v string) []headertest.Item {
	t.Helper()
	items, err := headertest.ParseList(v)
	require.NoError(t, err)
	return items
}

func TestStatusesInDescriptorOrder(t *testing.T) {
	h := newHarness(t)
	resp := h.call(t, 0,
		desc("user", "alice"),
		desc("open", "x"),
		desc("free", "y"),
		desc("user_day", "alice"),
		desc("nothing", "here"),
		desc("shadow", "alice"),
	)
	assert.Equal(t, rlspb.RateLimitResponse_OK, resp.OverallCode)
	st := resp.Statuses

	assert.Equal(t, rlspb.RateLimitResponse_OK, st[0].Code)
	require.NotNil(t, st[0].CurrentLimit)
	assert.Equal(t, "per_minute", st[0].CurrentLimit.Name)
	assert.Equal(t, uint32(3), st[0].CurrentLimit.RequestsPerUnit)
	assert.Equal(t, rlspb.RateLimitResponse_RateLimit_MINUTE, st[0].CurrentLimit.Unit)
	assert.Equal(t, uint32(2), st[0].LimitRemaining)
	assert.Equal(t, time.Minute, st[0].DurationUntilReset.AsDuration())

	for _, i := range []int{1, 4} { // no rate_limit; no rule at all
		assert.Equal(t, rlspb.RateLimitResponse_OK, st[i].Code, "status %d", i)
		assert.Nil(t, st[i].CurrentLimit, "status %d", i)
		assert.Zero(t, st[i].LimitRemaining, "status %d", i)
		assert.Nil(t, st[i].DurationUntilReset, "status %d", i)
	}

	assert.Equal(t, rlspb.RateLimitResponse_OK, st[2].Code)
	assert.Nil(t, st[2].CurrentLimit, "unlimited: no current_limit, as envoyproxy/ratelimit")
	assert.Equal(t, uint32(math.MaxUint32), st[2].LimitRemaining)

	require.NotNil(t, st[3].CurrentLimit)
	assert.Equal(t, "per_day", st[3].CurrentLimit.Name)
	assert.Equal(t, rlspb.RateLimitResponse_RateLimit_DAY, st[3].CurrentLimit.Unit)
	assert.Equal(t, uint32(99), st[3].LimitRemaining)
	assert.Equal(t, 24*time.Hour, st[3].DurationUntilReset.AsDuration())

	require.NotNil(t, st[5].CurrentLimit)
	assert.Equal(t, "shadowed", st[5].CurrentLimit.Name)
	assert.Equal(t, uint32(0), st[5].LimitRemaining)

	calls, _ := h.obs.counts()
	assert.Equal(t, 1, calls)
	assert.Equal(t, []string{Frontend}, h.obs.frontends)
}

// A request whose minute refuses charges neither the minute nor the day.
func TestMinuteRefusalLeavesTheDay(t *testing.T) {
	h := newHarness(t)
	for i := 1; i <= 3; i++ {
		resp := h.call(t, 0, desc("user", "bob"), desc("user_day", "bob"))
		require.Equal(t, rlspb.RateLimitResponse_OK, resp.OverallCode, "request %d", i)
		assert.Equal(t, uint32(3-i), resp.Statuses[0].LimitRemaining)
		assert.Equal(t, uint32(100-i), resp.Statuses[1].LimitRemaining)
	}
	for range 2 {
		resp := h.call(t, 0, desc("user", "bob"), desc("user_day", "bob"))
		assert.Equal(t, rlspb.RateLimitResponse_OVER_LIMIT, resp.OverallCode)
		assert.Equal(t, rlspb.RateLimitResponse_OVER_LIMIT, resp.Statuses[0].Code)
		assert.Equal(t, rlspb.RateLimitResponse_OK, resp.Statuses[1].Code, "the day itself admits")
		assert.Equal(t, uint32(97), resp.Statuses[1].LimitRemaining, "the day was not charged")
	}
	h.clk.Advance(int64(time.Minute))
	resp := h.call(t, 0, desc("user", "bob"), desc("user_day", "bob"))
	assert.Equal(t, rlspb.RateLimitResponse_OK, resp.OverallCode)
	assert.Equal(t, uint32(96), resp.Statuses[1].LimitRemaining)
}

func TestHitsAddend(t *testing.T) {
	h := newHarness(t)
	// The request's hits_addend charges every descriptor.
	resp := h.call(t, 2, desc("user", "carol"), desc("user_day", "carol"))
	assert.Equal(t, uint32(1), resp.Statuses[0].LimitRemaining)
	assert.Equal(t, uint32(98), resp.Statuses[1].LimitRemaining)
	// 2 more do not fit: nothing is charged.
	resp = h.call(t, 2, desc("user", "carol"))
	assert.Equal(t, rlspb.RateLimitResponse_OVER_LIMIT, resp.OverallCode)
	assert.Equal(t, uint32(1), resp.Statuses[0].LimitRemaining)
	// 0 means 1.
	resp = h.call(t, 0, desc("user", "carol"))
	assert.Equal(t, rlspb.RateLimitResponse_OK, resp.OverallCode)
	assert.Equal(t, uint32(0), resp.Statuses[0].LimitRemaining)

	// A descriptor's own hits_addend overrides the request's; set to 0 it
	// checks without charging.
	resp = h.call(t, 5, withHits(desc("user", "dave"), 0), withHits(desc("user_day", "dave"), 1))
	assert.Equal(t, rlspb.RateLimitResponse_OK, resp.OverallCode)
	assert.Equal(t, uint32(3), resp.Statuses[0].LimitRemaining, "hits_addend 0 charges nothing")
	assert.Equal(t, uint32(99), resp.Statuses[1].LimitRemaining)
	resp = h.call(t, 1, withHits(desc("user", "dave"), 3), desc("user_day", "dave"))
	assert.Equal(t, rlspb.RateLimitResponse_OK, resp.OverallCode)
	assert.Equal(t, uint32(0), resp.Statuses[0].LimitRemaining)
	assert.Equal(t, uint32(98), resp.Statuses[1].LimitRemaining)
}

func TestLimitOverride(t *testing.T) {
	h := newHarness(t)
	d := desc("user", "olga")
	d.Limit = &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1, Unit: typev3.RateLimitUnit_HOUR}
	resp := h.call(t, 0, d)
	assert.Equal(t, rlspb.RateLimitResponse_OK, resp.OverallCode)
	require.NotNil(t, resp.Statuses[0].CurrentLimit)
	assert.Equal(t, "override_1_per_hour", resp.Statuses[0].CurrentLimit.Name)
	assert.Equal(t, uint32(1), resp.Statuses[0].CurrentLimit.RequestsPerUnit)
	assert.Equal(t, rlspb.RateLimitResponse_RateLimit_HOUR, resp.Statuses[0].CurrentLimit.Unit)
	assert.Equal(t, time.Hour, resp.Statuses[0].DurationUntilReset.AsDuration())
	resp = h.call(t, 0, d)
	assert.Equal(t, rlspb.RateLimitResponse_OVER_LIMIT, resp.OverallCode, "the override's 1 per hour")

	// An override with unit UNKNOWN is ignored: the file's rule applies,
	// as in envoyproxy/ratelimit.
	u := desc("user", "olga")
	u.Limit = &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1}
	resp = h.call(t, 0, u)
	assert.Equal(t, rlspb.RateLimitResponse_OK, resp.OverallCode)
	require.NotNil(t, resp.Statuses[0].CurrentLimit)
	assert.Equal(t, "per_minute", resp.Statuses[0].CurrentLimit.Name)
	assert.Equal(t, uint32(2), resp.Statuses[0].LimitRemaining)
}

func TestHeadersOnOK(t *testing.T) {
	h := newHarness(t)
	h.call(t, 0, desc("user", "erin"))
	resp := h.call(t, 0, desc("user", "erin"), desc("user_day", "erin"), desc("shadow", "erin"), desc("free", "erin"))
	require.Equal(t, rlspb.RateLimitResponse_OK, resp.OverallCode)
	hs := headers(t, resp)
	assert.NotContains(t, hs, "retry-after")
	assert.NotContains(t, hs, "content-type", "on OK the upstream's content-type must stay")
	assert.Empty(t, resp.RawBody)

	// Every enforced limit is a policy; shadow and unlimited ones are not.
	pol := parseSFList(t, hs["ratelimit-policy"])
	require.Len(t, pol, 2)
	assert.Equal(t, "per_minute", pol[0].Name)
	assert.Equal(t, "3", pol[0].Params["q"])
	assert.Equal(t, "60", pol[0].Params["w"])
	assert.Equal(t, "per_day", pol[1].Name)
	assert.Equal(t, "100", pol[1].Params["q"])
	assert.Equal(t, "86400", pol[1].Params["w"])
	// The minute is closest to refusing: it is described.
	rl := parseSFList(t, hs["ratelimit"])
	require.Len(t, rl, 1)
	assert.Equal(t, "per_minute", rl[0].Name)
	assert.Equal(t, "1", rl[0].Params["r"])
	assert.Equal(t, "60", rl[0].Params["t"], "quota used comes back at the window's end")

	assert.Equal(t, "3", hs["x-ratelimit-limit"])
	assert.Equal(t, "1", hs["x-ratelimit-remaining"])
	assert.Equal(t, "2", hs["x-ratelimit-used"])
	assert.Equal(t, strconv.FormatInt(t0/int64(time.Second)+60, 10), hs["x-ratelimit-reset"], "epoch seconds")
	assert.Equal(t, "per_minute", hs["x-ratelimit-resource"])
}

func TestOverLimitBodyAndHeaders(t *testing.T) {
	h := newHarness(t)
	for range 3 {
		h.call(t, 0, desc("user", "finn"))
	}
	resp := h.call(t, 0, desc("user", "finn"), desc("user_day", "finn"))
	require.Equal(t, rlspb.RateLimitResponse_OVER_LIMIT, resp.OverallCode)
	hs := headers(t, resp)
	assert.Equal(t, header.ContentTypeProblem, hs["content-type"])
	assert.Equal(t, "60", hs["retry-after"])
	rl := parseSFList(t, hs["ratelimit"])
	require.Len(t, rl, 1)
	assert.Equal(t, "per_minute", rl[0].Name)
	assert.Equal(t, "0", rl[0].Params["r"])
	assert.Equal(t, "60", rl[0].Params["t"])
	assert.Equal(t, "0", hs["x-ratelimit-remaining"])

	var p header.Problem
	require.NoError(t, json.Unmarshal(resp.RawBody, &p), "%s", resp.RawBody)
	assert.Equal(t, header.ProblemType, p.Type)
	assert.Equal(t, 429, p.Status)
	assert.Equal(t, []string{"per_minute"}, p.ViolatedPolicies)
	assert.Equal(t, int64(60), p.RetryAfter)
}

func TestShadowMode(t *testing.T) {
	h := newHarness(t)
	for i := range 3 {
		resp := h.call(t, 0, desc("shadow", "gus"))
		assert.Equal(t, rlspb.RateLimitResponse_OK, resp.OverallCode, "call %d", i)
		assert.Equal(t, rlspb.RateLimitResponse_OK, resp.Statuses[0].Code, "call %d", i)
		assert.Empty(t, resp.ResponseHeadersToAdd, "a shadow limit shows no headers (call %d)", i)
		assert.Empty(t, resp.RawBody)
	}
	_, shadowed := h.obs.counts()
	assert.Equal(t, 2, shadowed, "the two calls past the shadow limit are counted")
}

func TestUnlimited(t *testing.T) {
	h := newHarness(t)
	for range 5 {
		resp := h.call(t, 1000, desc("free", "hal"))
		assert.Equal(t, rlspb.RateLimitResponse_OK, resp.OverallCode)
		assert.Equal(t, uint32(math.MaxUint32), resp.Statuses[0].LimitRemaining)
		assert.Nil(t, resp.Statuses[0].CurrentLimit)
		assert.Empty(t, resp.ResponseHeadersToAdd, "no enforced limit applied")
	}
	resp, err := h.rls.ShouldRateLimit(ctxT(t), &rlspb.RateLimitRequest{Domain: "nowhere", Descriptors: []*rlv3.RateLimitDescriptor{desc("user", "x")}})
	require.NoError(t, err)
	assert.Equal(t, rlspb.RateLimitResponse_OK, resp.OverallCode, "an unknown domain limits nothing")
	assert.Empty(t, resp.ResponseHeadersToAdd)
}

func TestHeaderConventions(t *testing.T) {
	for _, c := range []struct {
		conv       string
		okHas      []string
		okHasNot   []string
		overHas    []string
		overHasNot []string
	}{
		{"ietf", []string{"ratelimit", "ratelimit-policy"}, []string{"x-ratelimit-limit"}, []string{"retry-after", "ratelimit"}, []string{"x-ratelimit-reset"}},
		{"x", []string{"x-ratelimit-limit", "x-ratelimit-reset"}, []string{"ratelimit"}, []string{"retry-after", "x-ratelimit-reset"}, []string{"ratelimit-policy"}},
		{"none", nil, []string{"ratelimit", "x-ratelimit-limit", "retry-after"}, []string{"retry-after", "content-type"}, []string{"ratelimit", "x-ratelimit-limit"}},
	} {
		t.Run(c.conv, func(t *testing.T) {
			conv, err := header.ParseConvention(c.conv)
			require.NoError(t, err)
			h := newHarness(t, func(o *options) { o.cfg.Headers = conv })
			hs := headers(t, h.call(t, 3, desc("user", "ida")))
			for _, k := range c.okHas {
				assert.Contains(t, hs, k)
			}
			for _, k := range c.okHasNot {
				assert.NotContains(t, hs, k)
			}
			resp := h.call(t, 0, desc("user", "ida"))
			require.Equal(t, rlspb.RateLimitResponse_OVER_LIMIT, resp.OverallCode)
			hs = headers(t, resp)
			for _, k := range c.overHas {
				assert.Contains(t, hs, k)
			}
			for _, k := range c.overHasNot {
				assert.NotContains(t, hs, k)
			}
			assert.NotEmpty(t, resp.RawBody, "the body does not depend on the header sets")
		})
	}
	t.Run("x-delta", func(t *testing.T) {
		conv, err := header.ParseConvention("x-delta")
		require.NoError(t, err)
		h := newHarness(t, func(o *options) { o.cfg.Headers = conv })
		hs := headers(t, h.call(t, 0, desc("user", "ida")))
		assert.Equal(t, "60", hs["x-ratelimit-reset"], "seconds from now")
	})
}

func TestBadRequests(t *testing.T) {
	h := newHarness(t, func(o *options) { o.svcCfg.MaxKeyBytes = 64 })
	many := make([]*rlv3.RateLimitDescriptor, gateway.MaxDescriptors+1)
	for i := range many {
		many[i] = desc("user", "x"+strconv.Itoa(i))
	}
	long := &rlv3.RateLimitDescriptor{}
	for range MaxEntries + 1 {
		long.Entries = append(long.Entries, &rlv3.RateLimitDescriptor_Entry{Key: "k", Value: "v"})
	}
	neg := desc("user", "x")
	neg.IsNegativeHits = true
	badUnit := desc("user", "x")
	badUnit.Limit = &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1, Unit: typev3.RateLimitUnit(99)}
	mult := desc("user", "x")
	mult.Limit = &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1, Unit: typev3.RateLimitUnit_SECOND, UnitMultiplier: wrapperspb.UInt32(30)}
	for name, req := range map[string]*rlspb.RateLimitRequest{
		"no domain":        {Descriptors: []*rlv3.RateLimitDescriptor{desc("user", "x")}},
		"no descriptors":   {Domain: "rls"},
		"17 descriptors":   {Domain: "rls", Descriptors: many},
		"65 entries":       {Domain: "rls", Descriptors: []*rlv3.RateLimitDescriptor{long}},
		"negative hits":    {Domain: "rls", Descriptors: []*rlv3.RateLimitDescriptor{neg}},
		"override unit 99": {Domain: "rls", Descriptors: []*rlv3.RateLimitDescriptor{badUnit}},
		"unit multiplier":  {Domain: "rls", Descriptors: []*rlv3.RateLimitDescriptor{mult}},
		"key too long":     {Domain: "rls", Descriptors: []*rlv3.RateLimitDescriptor{desc("user", strings.Repeat("v", 100))}},
	} {
		_, err := h.rls.ShouldRateLimit(ctxT(t), req)
		assert.Equal(t, codes.InvalidArgument, status.Code(err), "%s: %v", name, err)
		assert.NotContains(t, status.Convert(err).Message(), "\n", name)
	}
	calls, _ := h.obs.counts()
	assert.Zero(t, calls, "no bad request was decided")
	// The same user, well formed, was never charged.
	resp := h.call(t, 0, desc("user", "x"))
	assert.Equal(t, uint32(2), resp.Statuses[0].LimitRemaining)
}

func TestUnavailableWhenStoreClosed(t *testing.T) {
	h := newHarness(t)
	h.call(t, 0, desc("user", "jo"))
	require.NoError(t, h.st.Close())
	_, err := h.rls.ShouldRateLimit(ctxT(t), &rlspb.RateLimitRequest{Domain: "rls", Descriptors: []*rlv3.RateLimitDescriptor{desc("user", "jo")}})
	assert.Equal(t, codes.Unavailable, status.Code(err), "%v", err)
	assert.NotContains(t, status.Convert(err).Message(), "\n")
}

// A call Envoy has already given up on is not decided (nor charged).
func TestCanceledCallChargesNothing(t *testing.T) {
	h := newHarness(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := h.svc.ShouldRateLimit(ctx, &rlspb.RateLimitRequest{Domain: "rls", Descriptors: []*rlv3.RateLimitDescriptor{desc("user", "kim")}})
	assert.Equal(t, codes.Canceled, status.Code(err))
	resp := h.call(t, 0, desc("user", "kim"))
	assert.Equal(t, uint32(2), resp.Statuses[0].LimitRemaining)
}

func TestHealth(t *testing.T) {
	h := newHarness(t)
	for _, svc := range []string{"", "envoy.service.ratelimit.v3.RateLimitService"} {
		r, err := h.health.Check(ctxT(t), &healthpb.HealthCheckRequest{Service: svc})
		require.NoError(t, err, svc)
		assert.Equal(t, healthpb.HealthCheckResponse_SERVING, r.Status, svc)
	}
	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	w, err := h.health.Watch(ctx, &healthpb.HealthCheckRequest{})
	require.NoError(t, err)
	r, err := w.Recv()
	require.NoError(t, err)
	assert.Equal(t, healthpb.HealthCheckResponse_SERVING, r.Status)

	stopped := make(chan struct{})
	go func() {
		h.srv.Shutdown(10 * time.Second)
		close(stopped)
	}()
	r, err = w.Recv()
	require.NoError(t, err)
	assert.Equal(t, healthpb.HealthCheckResponse_NOT_SERVING, r.Status, "shutting down")
	// The server ends the watch once it has said NOT_SERVING: the graceful
	// stop finishes without waiting out its 10 s.
	_, err = w.Recv()
	assert.Equal(t, codes.Unavailable, status.Code(err), "%v", err)
	select {
	case <-stopped:
	case <-time.After(3 * time.Second):
		t.Fatal("Shutdown waited for the watch")
	}
}

// Past MaxWatches a new health watch is refused; ending one frees its slot.
func TestWatchesBounded(t *testing.T) {
	const max = 3
	h := newHarness(t, func(o *options) { o.cfg.MaxWatches = max })
	watch := func(ctx context.Context, c healthpb.HealthClient) error {
		w, err := c.Watch(ctx, &healthpb.HealthCheckRequest{})
		if err != nil {
			return err
		}
		r, err := w.Recv()
		if err == nil && r.Status != healthpb.HealthCheckResponse_SERVING {
			return fmt.Errorf("status %v", r.Status)
		}
		return err
	}
	// Over two connections: the bound is the server's, not a connection's.
	other := healthpb.NewHealthClient(dial(t, h.addr))
	cancels := make([]context.CancelFunc, max)
	for i := range max {
		ctx, cancel := context.WithCancel(ctxT(t))
		defer cancel()
		cancels[i] = cancel
		c := h.health
		if i%2 == 1 {
			c = other
		}
		require.NoError(t, watch(ctx, c), "watch %d", i)
	}
	err := watch(ctxT(t), other)
	assert.Equal(t, codes.ResourceExhausted, status.Code(err), "%v", err)
	assert.ErrorContains(t, err, "too many health watches")
	// Check is not counted against the watches.
	r, err := h.health.Check(ctxT(t), &healthpb.HealthCheckRequest{})
	require.NoError(t, err)
	assert.Equal(t, healthpb.HealthCheckResponse_SERVING, r.Status)

	cancels[0]()
	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	require.Eventually(t, func() bool {
		return watch(ctx, h.health) == nil
	}, 5*time.Second, 10*time.Millisecond, "a slot is freed when a watch ends")
	err = watch(ctxT(t), other)
	assert.Equal(t, codes.ResourceExhausted, status.Code(err), "full again: %v", err)
}

// A handler's panic is an Internal error; the server goes on.
func TestPanicRecovered(t *testing.T) {
	cfg, err := Config{Engine: gateway.New(gateway.Config{})}.withDefaults()
	require.NoError(t, err)
	gs := grpc.NewServer(serverOptions(cfg)...)
	rlspb.RegisterRateLimitServiceServer(gs, panicky{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = gs.Serve(ln) }()
	defer gs.Stop()
	c := rlspb.NewRateLimitServiceClient(dial(t, ln.Addr().String()))
	for range 2 {
		_, err := c.ShouldRateLimit(ctxT(t), &rlspb.RateLimitRequest{Domain: "rls"})
		assert.Equal(t, codes.Internal, status.Code(err), "%v", err)
	}
	// The real service over an engine whose policies are missing panics
	// inside the engine: the same guard answers.
	h := newHarness(t)
	bad := NewService(gateway.New(gateway.Config{Service: service.New(service.Config{Store: h.st})}), header.Default, nil)
	gs2 := grpc.NewServer(serverOptions(cfg)...)
	rlspb.RegisterRateLimitServiceServer(gs2, bad)
	ln2, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = gs2.Serve(ln2) }()
	defer gs2.Stop()
	c2 := rlspb.NewRateLimitServiceClient(dial(t, ln2.Addr().String()))
	_, err = c2.ShouldRateLimit(ctxT(t), &rlspb.RateLimitRequest{Domain: "rls", Descriptors: []*rlv3.RateLimitDescriptor{desc("user", "x")}})
	assert.Equal(t, codes.Internal, status.Code(err), "%v", err)
	_, err = c2.ShouldRateLimit(ctxT(t), &rlspb.RateLimitRequest{Domain: "rls", Descriptors: []*rlv3.RateLimitDescriptor{desc("user", "x")}})
	assert.Equal(t, codes.Internal, status.Code(err), "still serving: %v", err)
}

type panicky struct {
	rlspb.UnimplementedRateLimitServiceServer
}

func (panicky) ShouldRateLimit(context.Context, *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error) {
	panic("boom")
}

func TestMessageSizeBounded(t *testing.T) {
	h := newHarness(t)
	big := desc("user", strings.Repeat("v", DefaultMaxRecvBytes+1))
	_, err := h.rls.ShouldRateLimit(ctxT(t), &rlspb.RateLimitRequest{Domain: "rls", Descriptors: []*rlv3.RateLimitDescriptor{big}})
	assert.Equal(t, codes.ResourceExhausted, status.Code(err), "%v", err)
	h.call(t, 0, desc("user", "x")) // the connection still serves
	// The largest request Envoy builds by default (its request headers
	// are at most 60 KiB in all) fits.
	ds := make([]*rlv3.RateLimitDescriptor, gateway.MaxDescriptors)
	for i := range ds {
		ds[i] = desc("user", strings.Repeat("v", 60<<10/gateway.MaxDescriptors))
	}
	h.call(t, 0, ds...)
}

func TestConfigRefused(t *testing.T) {
	_, err := New(Config{})
	assert.ErrorContains(t, err, "no engine")
	_, err = New(Config{Engine: gateway.New(gateway.Config{}), MaxConns: -1})
	assert.ErrorContains(t, err, "MaxConns")
	_, err = New(Config{Engine: gateway.New(gateway.Config{}), MaxWatches: -1})
	assert.ErrorContains(t, err, "MaxWatches")
	_, err = New(Config{Engine: gateway.New(gateway.Config{}), MaxPending: -1})
	assert.ErrorContains(t, err, "MaxPending")
}

// BenchmarkShouldRateLimit is the gRPC round trip of one decision (two
// descriptors, one CL.LIMIT step), from parallel callers on one connection
// as Envoy's worker multiplexes them.
func BenchmarkShouldRateLimit(b *testing.B) {
	h := newHarness(b)
	var n atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		for pb.Next() {
			k := "u" + strconv.FormatInt(n.Add(1)%4096, 10)
			_, err := h.rls.ShouldRateLimit(ctx, &rlspb.RateLimitRequest{Domain: "rls",
				Descriptors: []*rlv3.RateLimitDescriptor{desc("user_day", k), desc("free", k)}})
			if err != nil {
				b.Fatal(err)
			}
		}
	})
}
