package gateway

import (
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cellserver/cellserver/gateway/header"
	"github.com/cellserver/cellserver/gateway/policy"
	"github.com/cellserver/cellserver/gcra"
	"github.com/cellserver/cellserver/service"
	"github.com/cellserver/cellserver/store"
)

// t0 is the start of a UTC day (and so of its minutes), in ns: every
// window of the tests starts fresh at t0.
const t0 = int64(19676 * 86400 * time.Second)

const testPolicy = `
domain: api
descriptors:
  - key: user
    rate_limit: {name: per_minute, unit: minute, requests_per_unit: 2}
  - key: user_day
    rate_limit: {name: per_day, unit: day, requests_per_unit: 5}
  - key: shadow
    shadow_mode: true
    rate_limit: {name: soft, unit: minute, requests_per_unit: 1}
  - key: free
    rate_limit: {unlimited: true}
  - key: smooth
    rate_limit: {name: smooth, unit: second, requests_per_unit: 10, algorithm: gcra, burst: 5}
  - key: pricey
    rate_limit: {name: pricey, unit: minute, requests_per_unit: 10, cost: 4}
  - key: nolimit
  - key: banned
    rate_limit: {unit: second, requests_per_unit: 0}
`

// newEngine is an Engine on testPolicy and a real in-memory store with a
// frozen clock at t0.
func newEngine(t *testing.T) (*Engine, *store.Clock) {
	t.Helper()
	st, clk := newStore(t, t0)
	return newEngineOn(t, service.Config{Store: st}, testPolicy), clk
}

// newStore is a 4-shard in-memory store whose clock is frozen at ns.
func newStore(t *testing.T, ns int64) (*store.Store, *store.Clock) {
	t.Helper()
	clk := &store.Clock{}
	clk.Set(ns)
	st, err := store.New(store.Config{Shards: 4, Clock: clk})
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	return st, clk
}

// newEngineOn is an Engine on the service sc configures and the policy text.
func newEngineOn(t *testing.T, sc service.Config, text string) *Engine {
	t.Helper()
	cfg, err := policy.Parse([]byte(text))
	require.NoError(t, err)
	return New(Config{Service: service.New(sc), Policies: policy.Static(cfg)})
}

// desc reads "k=v,k2=v2".
func desc(s string) policy.Descriptor {
	var d policy.Descriptor
	for _, kv := range strings.Split(s, ",") {
		k, v, _ := strings.Cut(kv, "=")
		d.Entries = append(d.Entries, policy.Entry{Key: k, Value: v})
	}
	return d
}

func check(t *testing.T, e *Engine, ds ...string) *Decision {
	t.Helper()
	req := &Request{Domain: "api"}
	for _, s := range ds {
		req.Descriptors = append(req.Descriptors, desc(s))
	}
	d, err := e.Check("test", req)
	require.NoError(t, err)
	require.Len(t, d.Statuses, len(ds))
	return d
}

// remaining reads one descriptor's remaining quota without charging it
// (hits_addend 0 on the descriptor).
func remaining(t *testing.T, e *Engine, s string) uint32 {
	t.Helper()
	d := desc(s)
	d.HasHits = true
	dec, err := e.Check("test", &Request{Domain: "api", Descriptors: []policy.Descriptor{d}})
	require.NoError(t, err)
	require.Equal(t, OK, dec.Overall, "a check-only request passes")
	return dec.Statuses[0].Remaining
}

// The done-when: a request matching a per-minute and a per-day
// descriptor never charges the day when the minute rejects.
func TestMinuteRejectionNeverChargesTheDay(t *testing.T) {
	e, clk := newEngine(t)
	for i, want := range []uint32{4, 3} {
		d := check(t, e, "user=u1", "user_day=u1")
		require.Equal(t, OK, d.Overall, "request %d", i)
		assert.Equal(t, want, d.Statuses[1].Remaining)
	}
	require.Equal(t, uint32(3), remaining(t, e, "user_day=u1"))
	for range 5 {
		d := check(t, e, "user=u1", "user_day=u1")
		require.Equal(t, OverLimit, d.Overall)
		assert.Equal(t, OverLimit, d.Statuses[0].Code)
		assert.Equal(t, OK, d.Statuses[1].Code)
		assert.Equal(t, uint32(3), d.Statuses[1].Remaining, "the day as it is, not as if charged")
		assert.Equal(t, 0, d.Deciding)
		assert.Equal(t, []string{"per_minute"}, d.Violated())
		assert.Equal(t, time.Minute, d.Statuses[0].RetryAfter)
	}
	assert.Equal(t, uint32(3), remaining(t, e, "user_day=u1"), "the refused requests spent nothing of the day")
	assert.Equal(t, uint32(0), remaining(t, e, "user=u1"))

	// The next minute: the day is charged again, by one.
	clk.Advance(int64(time.Minute))
	d := check(t, e, "user=u1", "user_day=u1")
	require.Equal(t, OK, d.Overall)
	assert.Equal(t, uint32(2), d.Statuses[1].Remaining)
	assert.Equal(t, uint32(2), remaining(t, e, "user_day=u1"))
}

// Concurrent requests: exactly the minute's quota passes, and the day is
// charged exactly that many times.
func TestConcurrentAllOrNothing(t *testing.T) {
	e, _ := newEngine(t)
	var passed atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 20 {
				d, err := e.Check("test", &Request{Domain: "api", Descriptors: []policy.Descriptor{desc("user=c"), desc("user_day=c")}})
				if !assert.NoError(t, err) {
					return
				}
				if d.Overall == OK {
					passed.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	assert.Equal(t, int64(2), passed.Load())
	assert.Equal(t, uint32(3), remaining(t, e, "user_day=c"))
}

// All or nothing the other way: a day that refuses leaves the minute alone.
func TestDayRejectionNeverChargesTheMinute(t *testing.T) {
	e, clk := newEngine(t)
	for range 5 { // spend the day, one a minute
		require.Equal(t, OK, check(t, e, "user=u2", "user_day=u2").Overall)
		clk.Advance(int64(time.Minute))
	}
	assert.Equal(t, uint32(2), remaining(t, e, "user=u2"))
	d := check(t, e, "user=u2", "user_day=u2")
	require.Equal(t, OverLimit, d.Overall)
	assert.Equal(t, OK, d.Statuses[0].Code)
	assert.Equal(t, OverLimit, d.Statuses[1].Code)
	assert.Equal(t, 1, d.Deciding)
	assert.Equal(t, []string{"per_day"}, d.Violated())
	assert.Equal(t, uint32(2), remaining(t, e, "user=u2"), "the minute was not charged")
	// The day's Retry-After is the day's end (5 minutes into it).
	assert.Equal(t, 24*time.Hour-5*time.Minute, d.Statuses[1].RetryAfter)
}

func TestShadowMode(t *testing.T) {
	e, clk := newEngine(t)
	// Passing, within the shadow limit: charged.
	d := check(t, e, "user=s1", "shadow=s1")
	require.Equal(t, OK, d.Overall)
	assert.False(t, d.Statuses[1].Shadowed)
	assert.Equal(t, uint32(0), d.Statuses[1].Remaining)
	// Over the shadow limit: still passes, reported.
	d = check(t, e, "user=s1", "shadow=s1")
	require.Equal(t, OK, d.Overall)
	assert.Equal(t, OK, d.Statuses[1].Code)
	assert.True(t, d.Statuses[1].Shadowed)
	assert.Empty(t, d.Violated())
	// Shadow limits are not in the headers.
	v := d.Values()
	require.Len(t, v.Policies, 1)
	assert.Equal(t, "per_minute", v.Policies[0].Name)

	// A refused request does not charge its shadow limit.
	clk.Advance(int64(time.Minute))
	for range 2 {
		require.Equal(t, OK, check(t, e, "user=s2").Overall)
	}
	d = check(t, e, "user=s2", "shadow=s2")
	require.Equal(t, OverLimit, d.Overall)
	assert.Equal(t, OK, d.Statuses[1].Code)
	assert.Equal(t, uint32(1), remaining(t, e, "shadow=s2"), "not charged by the refused request")
	// A shadow limit alone never refuses.
	for range 3 {
		d = check(t, e, "shadow=s3")
		assert.Equal(t, OK, d.Overall)
		assert.Equal(t, -1, d.Deciding, "no enforced limit applied")
	}
	assert.True(t, d.Statuses[0].Shadowed)
}

func TestUnlimited(t *testing.T) {
	e, _ := newEngine(t)
	for range 3 {
		d := check(t, e, "free=x")
		require.Equal(t, OK, d.Overall)
		assert.Equal(t, uint32(math.MaxUint32), d.Statuses[0].Remaining)
		assert.True(t, d.Statuses[0].Limit.Unlimited)
		assert.Equal(t, -1, d.Deciding)
		assert.Empty(t, d.Values().Policies)
	}
	// Beside an enforced limit it changes nothing.
	d := check(t, e, "free=x", "user=f1")
	require.Equal(t, OK, d.Overall)
	assert.Equal(t, 1, d.Deciding)
	v := d.Values()
	require.Len(t, v.Policies, 1)
	assert.Equal(t, 0, v.Deciding)
	// A descriptor matching nothing is no limit either.
	d = check(t, e, "nolimit=x", "unknown=y")
	assert.Equal(t, OK, d.Overall)
	assert.Nil(t, d.Statuses[0].Limit)
	assert.Nil(t, d.Statuses[1].Limit)
}

func TestHitsAddend(t *testing.T) {
	e, _ := newEngine(t)
	dec := func(req *Request) *Decision {
		t.Helper()
		req.Domain = "api"
		d, err := e.Check("test", req)
		require.NoError(t, err)
		return d
	}
	// The request's hits.
	d := dec(&Request{Descriptors: []policy.Descriptor{desc("user_day=h")}, HitsAddend: 2})
	require.Equal(t, OK, d.Overall)
	assert.Equal(t, uint32(3), d.Statuses[0].Remaining)
	// A descriptor's own hits win over the request's.
	own := desc("user_day=h")
	own.HasHits, own.HitsAddend = true, 1
	d = dec(&Request{Descriptors: []policy.Descriptor{own}, HitsAddend: 2})
	assert.Equal(t, uint32(2), d.Statuses[0].Remaining)
	// 0 on the descriptor checks without charging.
	assert.Equal(t, uint32(2), remaining(t, e, "user_day=h"))
	assert.Equal(t, uint32(2), remaining(t, e, "user_day=h"))
	// More hits than remain: refused, nothing charged.
	d = dec(&Request{Descriptors: []policy.Descriptor{desc("user_day=h")}, HitsAddend: 3})
	assert.Equal(t, OverLimit, d.Overall)
	assert.Equal(t, uint32(2), remaining(t, e, "user_day=h"))
	// A cost multiplies the hits: 2 hits of cost 4 out of 10.
	d = dec(&Request{Descriptors: []policy.Descriptor{desc("pricey=p")}, HitsAddend: 2})
	assert.Equal(t, uint32(2), d.Statuses[0].Remaining)
	// Huge hits saturate and are refused, not wrapped around.
	d = dec(&Request{Descriptors: []policy.Descriptor{desc("pricey=p2")}, HitsAddend: math.MaxUint64})
	assert.Equal(t, OverLimit, d.Overall)
	assert.Equal(t, uint32(10), remaining(t, e, "pricey=p2"))
}

// Two descriptors of one request on the same bucket are one limit charged
// twice.
func TestSameBucketTwice(t *testing.T) {
	e, _ := newEngine(t)
	d := check(t, e, "user=twice", "user=twice")
	require.Equal(t, OK, d.Overall)
	assert.Equal(t, uint32(0), remaining(t, e, "user=twice"))
	d = check(t, e, "user=twice2", "user=twice2", "user=twice2")
	assert.Equal(t, OverLimit, d.Overall)
	assert.Equal(t, uint32(2), remaining(t, e, "user=twice2"))
}

// Values: what the headers show.
func TestValues(t *testing.T) {
	e, clk := newEngine(t)
	clk.Advance(int64(15 * time.Second))
	d := check(t, e, "user=v", "user_day=v", "smooth=v")
	require.Equal(t, OK, d.Overall)
	v := d.Values()
	assert.Equal(t, []header.Policy{
		{Name: "per_minute", Quota: 2, Window: time.Minute, Algorithm: "fw"},
		{Name: "per_day", Quota: 5, Window: 24 * time.Hour, Algorithm: "fw"},
		{Name: "smooth", Quota: 5, Window: time.Second, Algorithm: "gcra"},
	}, v.Policies)
	assert.Equal(t, 0, v.Deciding, "the least remaining: the minute's 1")
	assert.False(t, v.Limited)
	assert.Equal(t, int64(1), v.Remaining)
	assert.Equal(t, 45*time.Second, v.Reset, "the minute's used unit comes back at its end")
	assert.Equal(t, time.Unix(0, t0).Add(15*time.Second), v.Now)

	check(t, e, "user=v")
	d = check(t, e, "user=v", "user_day=v", "smooth=v")
	require.Equal(t, OverLimit, d.Overall)
	v = d.Values()
	assert.True(t, v.Limited)
	assert.Equal(t, 0, v.Deciding)
	assert.Equal(t, 45*time.Second, v.RetryAfter)
	fields := header.Convention{IETF: true}.Append(nil, &v)
	assert.Equal(t, []header.Field{
		{Name: "Retry-After", Value: "45"},
		{Name: "RateLimit-Policy", Value: `"per_minute";q=2;w=60;cellserver-alg="fw", "per_day";q=5;w=86400;cellserver-alg="fw", "smooth";q=5;w=1;cellserver-alg="gcra"`},
		{Name: "RateLimit", Value: `"per_minute";r=0;t=45`},
	}, fields)
}

// requests_per_unit 0 (envoyproxy/ratelimit's block list) refuses every
// hit, and a check-only request still passes.
func TestBlocked(t *testing.T) {
	e, _ := newEngine(t)
	for range 3 {
		d := check(t, e, "banned=1.2.3.4", "user=b")
		require.Equal(t, OverLimit, d.Overall)
		assert.Equal(t, []string{"api-banned"}, d.Violated())
		assert.Equal(t, time.Second, d.Statuses[0].RetryAfter, "never fits: a window's length")
		assert.Equal(t, 0, d.Deciding)
		assert.Zero(t, d.Statuses[0].Remaining, "a block list entry has nothing left, ever")
		v := d.Values()
		assert.Zero(t, v.Remaining)
		assert.Zero(t, v.Policies[0].Quota, "q=0: the quota is none")
	}
	assert.Equal(t, uint32(2), remaining(t, e, "user=b"), "the request's other limit was not charged")
	remaining(t, e, "banned=1.2.3.4")
}

// A reload that changes a rule's algorithm starts a new bucket: no
// WRONGTYPE from the old algorithm's state. One that changes only the
// limit keeps the bucket and its count.
func TestReloadChangesAlgorithm(t *testing.T) {
	st, _ := newStore(t, t0)
	path := filepath.Join(t.TempDir(), "policy.yaml")
	write := func(rl string) {
		require.NoError(t, os.WriteFile(path+".tmp", []byte("domain: api\ndescriptors:\n- key: user\n  rate_limit: {"+rl+"}\n"), 0o644))
		require.NoError(t, os.Rename(path+".tmp", path))
	}
	write("unit: minute, requests_per_unit: 3")
	reloads := make(chan error, 4)
	src, err := policy.Open(path, policy.SourceOptions{
		Poll: 5 * time.Millisecond, Logger: slog.New(slog.DiscardHandler),
		OnReload: func(err error) { reloads <- err },
	})
	require.NoError(t, err)
	t.Cleanup(src.Close)
	e := New(Config{Service: service.New(service.Config{Store: st}), Policies: src})
	reload := func(rl string) {
		t.Helper()
		write(rl)
		select {
		case err := <-reloads:
			require.NoError(t, err)
		case <-time.After(10 * time.Second):
			t.Fatal("no reload")
		}
	}

	d := check(t, e, "user=r")
	require.Equal(t, OK, d.Overall)
	assert.Equal(t, uint32(2), d.Statuses[0].Remaining)

	reload("unit: minute, requests_per_unit: 5")
	d = check(t, e, "user=r")
	assert.Equal(t, uint32(3), d.Statuses[0].Remaining, "the same bucket, a new limit")

	reload("unit: minute, requests_per_unit: 5, algorithm: gcra")
	d = check(t, e, "user=r")
	require.Equal(t, OK, d.Overall)
	assert.Equal(t, "gcra", d.Statuses[0].Limit.Algorithm)
	assert.Equal(t, uint32(4), d.Statuses[0].Remaining, "a fresh GCRA bucket")
}

func TestRequestErrors(t *testing.T) {
	e, _ := newEngine(t)
	_, err := e.Check("test", &Request{Descriptors: []policy.Descriptor{desc("user=x")}})
	assert.ErrorIs(t, err, ErrEmptyDomain)
	assert.False(t, IsUnavailable(err))
	req := &Request{Domain: "api"}
	for range MaxDescriptors + 1 {
		req.Descriptors = append(req.Descriptors, desc("user=x"))
	}
	_, err = e.Check("test", req)
	assert.ErrorIs(t, err, ErrTooManyDescriptors)
	assert.False(t, IsUnavailable(err))
	// An unknown domain limits nothing.
	d, err := e.Check("test", &Request{Domain: "nope", Descriptors: []policy.Descriptor{desc("user=x")}})
	require.NoError(t, err)
	assert.Equal(t, OK, d.Overall)
	assert.Nil(t, d.Statuses[0].Limit)
}

// A request refused before the enforced call (a shadow bucket's key is too
// long) charges nothing: every key is checked first.
func TestErrorChargesNothing(t *testing.T) {
	st, _ := newStore(t, t0)
	e := newEngineOn(t, service.Config{Store: st, MaxKeyBytes: 64}, testPolicy)
	long := "shadow=" + strings.Repeat("v", 80)
	for range 3 {
		_, err := e.Check("test", &Request{Domain: "api", Descriptors: []policy.Descriptor{desc("user=u"), desc(long)}})
		require.ErrorIs(t, err, service.ErrKeyTooLong)
	}
	assert.Equal(t, uint32(2), remaining(t, e, "user=u"), "the refused requests charged nothing")
}

// A shadow limit the store cannot decide does not fail a request whose
// enforced limits were charged: Status.Err says so.
func TestShadowErrorKeepsTheOutcome(t *testing.T) {
	e, _ := newEngine(t)
	// Plant another kind of state on the shadow bucket: WRONGTYPE there.
	m := e.src.Current().Match("api", desc("shadow=s"))
	c := &service.Throttle{Key: []byte(m.Key)}
	c.Params = gcra.Params{MaxBurst: 1, Count: 1, Period: 60, Quantity: 1}
	require.NoError(t, e.svc.Do(c))
	require.NoError(t, c.Err)
	d := check(t, e, "user=w", "shadow=s")
	assert.Equal(t, OK, d.Overall)
	assert.ErrorIs(t, d.Statuses[1].Err, service.ErrWrongType)
	assert.Equal(t, uint32(1), remaining(t, e, "user=w"), "the enforced limit was charged once")
}

// One bucket matched by two limits (an override of the file's unit beside
// the file's rule) is one CL.LIMIT limit: the stricter, charged both costs,
// listed once in the headers.
func TestSameBucketTwoLimits(t *testing.T) {
	e, _ := newEngine(t)
	loose := desc("user=z")
	loose.Override = &policy.Override{RequestsPerUnit: 1000, Unit: policy.Minute}
	req := &Request{Domain: "api", Descriptors: []policy.Descriptor{loose, desc("user=z")}}
	d, err := e.Check("test", req)
	require.NoError(t, err)
	assert.Equal(t, OK, d.Overall, "2 of per_minute's 2")
	d, err = e.Check("test", req)
	require.NoError(t, err)
	assert.Equal(t, OverLimit, d.Overall, "the file's 2 a minute holds beside the override's 1000")
	v := d.Values()
	require.Len(t, v.Policies, 1, "one bucket, one policy")
	assert.Equal(t, header.Policy{Name: "per_minute", Quota: 2, Window: time.Minute, Algorithm: "fw"}, v.Policies[0],
		"the headers describe the limit the bucket was decided by")
	assert.Equal(t, []string{"per_minute"}, d.Violated())
}

// RateLimit's t for an admitted SWC call is the end of the current window,
// not the end of its state two windows on.
func TestSWCUntilMore(t *testing.T) {
	st, _ := newStore(t, t0+int64(45*time.Second))
	e := newEngineOn(t, service.Config{Store: st},
		"domain: api\ndescriptors:\n- key: sw\n  rate_limit: {name: sw, unit: minute, requests_per_unit: 3, algorithm: swc}\n")
	d := check(t, e, "sw=a")
	require.Equal(t, OK, d.Overall)
	assert.Equal(t, 75*time.Second, d.Statuses[0].ResetAfter, "the state lasts into the next window")
	assert.Equal(t, 15*time.Second, d.Values().Reset, "quota starts coming back when this window ends")
}

// Two overrides with the same numbers on different buckets share a name:
// the headers tell them apart.
func TestOverrideNamesUniqueInHeaders(t *testing.T) {
	e, _ := newEngine(t)
	a, b := desc("user=n1"), desc("user_day=n1")
	a.Override = &policy.Override{RequestsPerUnit: 2, Unit: policy.Minute}
	b.Override = &policy.Override{RequestsPerUnit: 2, Unit: policy.Minute}
	d, err := e.Check("test", &Request{Domain: "api", Descriptors: []policy.Descriptor{a, b}})
	require.NoError(t, err)
	v := d.Values()
	require.Len(t, v.Policies, 2)
	assert.Equal(t, "override_2_per_minute", v.Policies[0].Name)
	assert.Equal(t, "override_2_per_minute-2", v.Policies[1].Name)
}
