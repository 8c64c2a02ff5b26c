package metrics

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cellserver/cellserver/gateway"
	"github.com/cellserver/cellserver/gateway/policy"
)

// find returns the metric of family name whose labels are exactly labels
// (nil if none).
func find(t *testing.T, g prometheus.Gatherer, name string, labels map[string]string) *dto.Metric {
	t.Helper()
	mfs, err := g.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			if len(m.GetLabel()) != len(labels) {
				continue
			}
			for _, l := range m.GetLabel() {
				if v, ok := labels[l.GetName()]; !ok || v != l.GetValue() {
					continue next
				}
			}
			return m
		}
	}
	return nil
}

// counter returns a counter's value, failing if it is not there.
func counter(t *testing.T, g prometheus.Gatherer, name string, labels map[string]string) float64 {
	t.Helper()
	m := find(t, g, name, labels)
	require.NotNil(t, m, "%s%v not gathered", name, labels)
	return m.GetCounter().GetValue()
}

func decision(frontend, domain, limit, outcome string) map[string]string {
	return map[string]string{"frontend": frontend, "domain": domain, "limit": limit, "outcome": outcome}
}

func status(name string, code gateway.Code, shadowed bool) gateway.Status {
	return gateway.Status{Code: code, Limit: &policy.RateLimit{Name: name}, Shadowed: shadowed}
}

// TestDecidedCountsPerLimitAndOutcome: every descriptor whose limit
// applied counts under its limit and outcome, allowed only when the
// request passed (a limit not charged because another refused counts
// nothing); a decision where none applied counts once under domain "" and
// limit "", whatever domain the client named.
func TestDecidedCountsPerLimitAndOutcome(t *testing.T) {
	r := New()
	r.Decided("http", "api", &gateway.Decision{Overall: gateway.OverLimit, Statuses: []gateway.Status{
		status("per_minute", gateway.OverLimit, false),
		status("per_day", gateway.OK, false),
		{Code: gateway.OK}, // no limit
	}}, time.Millisecond)
	r.Decided("http", "api", &gateway.Decision{Overall: gateway.OK, Statuses: []gateway.Status{
		status("per_minute", gateway.OK, false),
		status("shadow", gateway.OK, true),
	}}, time.Millisecond)
	r.Decided("grpc", "client-picked-domain", &gateway.Decision{Overall: gateway.OK, Statuses: []gateway.Status{{Code: gateway.OK}}}, time.Millisecond)
	r.Decided("grpc", "another-one", &gateway.Decision{Overall: gateway.OK}, time.Millisecond)

	const name = "cellserver_ratelimit_decisions_total"
	for _, c := range []struct {
		labels map[string]string
		want   float64
	}{
		{decision("http", "api", "per_minute", Limited), 1},
		{decision("http", "api", "per_minute", Allowed), 1},
		{decision("http", "api", "per_minute", ShadowLimited), 0},
		{decision("http", "api", "per_day", Allowed), 0},
		{decision("http", "api", "per_day", Limited), 0},
		{decision("http", "api", "shadow", ShadowLimited), 1},
		{decision("http", "api", "shadow", Allowed), 0},
		{decision("grpc", "", "", Allowed), 2},
	} {
		assert.Equal(t, c.want, counter(t, r.Gatherer(), name, c.labels), "%v", c.labels)
	}
	assert.Nil(t, find(t, r.Gatherer(), name, decision("grpc", "client-picked-domain", "", Allowed)),
		"a domain no limit applied to must not become a label")
	h := find(t, r.Gatherer(), "cellserver_decision_duration_seconds", map[string]string{"frontend": "http"})
	require.NotNil(t, h)
	assert.Equal(t, uint64(2), h.GetHistogram().GetSampleCount())
	assert.InDelta(t, 0.002, h.GetHistogram().GetSampleSum(), 1e-9)
}

// TestSeriesBounded: past MaxSeries label sets, new ones count under
// OtherLabel; past MaxFrontends front ends, under frontend OtherLabel.
func TestSeriesBounded(t *testing.T) {
	r := New()
	for i := 0; i < MaxSeries+100; i++ {
		r.Decided("http", "d", &gateway.Decision{Overall: gateway.OK, Statuses: []gateway.Status{status("l"+strconv.Itoa(i), gateway.OK, false)}}, 0)
	}
	assert.Equal(t, float64(100), counter(t, r.Gatherer(), "cellserver_ratelimit_decisions_total", decision("http", OtherLabel, OtherLabel, Allowed)))
	assert.Equal(t, float64(1), counter(t, r.Gatherer(), "cellserver_ratelimit_decisions_total", decision("http", "d", "l0", Allowed)))
	r.mu.RLock()
	assert.Equal(t, MaxSeries+1, len(r.series))
	r.mu.RUnlock()

	for i := 0; i < MaxFrontends+5; i++ {
		r.Decided("fe"+strconv.Itoa(i), "d", &gateway.Decision{}, time.Microsecond)
	}
	h := find(t, r.Gatherer(), "cellserver_decision_duration_seconds", map[string]string{"frontend": OtherLabel})
	require.NotNil(t, h)
	// "http" took one of the MaxFrontends places.
	assert.Equal(t, uint64(6), h.GetHistogram().GetSampleCount())
}

// TestAddFrontend: a front end's own figures are read at every scrape:
// its counts as they are, its buckets made cumulative with Prometheus's
// bounds (bucket k: at most 1024<<k ns), the last one in +Inf only.
func TestAddFrontend(t *testing.T) {
	r := New()
	var allowed int64
	require.NoError(t, r.AddFrontend("resp", func() FrontendFigures {
		f := FrontendFigures{Decisions: []DecisionCount{{Limit: "cl.throttle", Allowed: allowed, Limited: 2}}, LatencySum: 3 * time.Second}
		f.Latency[0], f.Latency[1], f.Latency[LatencyBuckets-1] = 5, 1, 4
		return f
	}))
	allowed = 7
	g := r.Gatherer()
	assert.Equal(t, float64(7), counter(t, g, "cellserver_ratelimit_decisions_total", decision("resp", "", "cl.throttle", Allowed)))
	assert.Equal(t, float64(2), counter(t, g, "cellserver_ratelimit_decisions_total", decision("resp", "", "cl.throttle", Limited)))
	assert.Nil(t, find(t, g, "cellserver_ratelimit_decisions_total", decision("resp", "", "cl.throttle", ShadowLimited)))
	allowed = 8
	assert.Equal(t, float64(8), counter(t, g, "cellserver_ratelimit_decisions_total", decision("resp", "", "cl.throttle", Allowed)), "read at scrape time")

	h := find(t, g, "cellserver_decision_duration_seconds", map[string]string{"frontend": "resp"}).GetHistogram()
	assert.Equal(t, uint64(10), h.GetSampleCount())
	assert.Equal(t, 3.0, h.GetSampleSum())
	bs := h.GetBucket()
	require.Len(t, bs, LatencyBuckets-1)
	assert.Equal(t, 1024e-9, bs[0].GetUpperBound())
	assert.Equal(t, uint64(5), bs[0].GetCumulativeCount())
	assert.Equal(t, 2048e-9, bs[1].GetUpperBound())
	assert.Equal(t, uint64(6), bs[1].GetCumulativeCount())
	assert.Equal(t, uint64(6), bs[LatencyBuckets-2].GetCumulativeCount(), "the last bucket is +Inf's only")

	// A gateway may not take the name: the two would collide.
	r.Decided("resp", "d", &gateway.Decision{}, 0)
	_, err := r.Gatherer().Gather()
	require.NoError(t, err)
	assert.Equal(t, float64(1), counter(t, g, "cellserver_ratelimit_decisions_total", decision(OtherLabel, "", "", Allowed)))
	r.Decided("http", "d", &gateway.Decision{}, 0)
	require.ErrorContains(t, r.AddFrontend("http", func() FrontendFigures { return FrontendFigures{} }),
		`metrics: front end "http" is already counted by a gateway`)
}

func TestBucketOf(t *testing.T) {
	for _, c := range []struct {
		ns   int64
		want int
	}{{0, 0}, {1024, 0}, {1025, 1}, {2048, 1}, {2049, 2}, {1024 << 19, 19}, {1024<<19 + 1, 20}, {1 << 62, 20}} {
		assert.Equal(t, c.want, BucketOf(c.ns), "%d ns", c.ns)
		if c.want < LatencyBuckets-1 {
			assert.LessOrEqual(t, float64(c.ns)/1e9, bucketBound(c.want), "%d ns within its bucket's bound", c.ns)
		}
	}
}

// TestPolicyStats: the reload figures exist once a source is set, read at
// every scrape.
func TestPolicyStats(t *testing.T) {
	r := New()
	assert.Nil(t, find(t, r.Gatherer(), "cellserver_policy_reloads_total", nil))
	st := policy.SourceStats{Reloads: 3, Failures: 1, LoadedAt: time.Unix(1700000000, 500_000_000)}
	r.SetPolicyStats(func() policy.SourceStats { return st })
	assert.Equal(t, float64(3), counter(t, r.Gatherer(), "cellserver_policy_reloads_total", nil))
	st.Failures = 2
	assert.Equal(t, float64(2), counter(t, r.Gatherer(), "cellserver_policy_reload_failures_total", nil))
	assert.Equal(t, 1700000000.5, find(t, r.Gatherer(), "cellserver_policy_loaded_timestamp_seconds", nil).GetGauge().GetValue())
	r.SetPolicyStats(nil)
	assert.Nil(t, find(t, r.Gatherer(), "cellserver_policy_reloads_total", nil))
}

type failing struct{}

var descFailing = prometheus.NewDesc("cellserver_ratelimit_broken", "x", nil, nil)

func (failing) Describe(ch chan<- *prometheus.Desc) { ch <- descFailing }
func (failing) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.NewInvalidMetric(descFailing, errors.New("broken on purpose"))
}

// TestInfoLines: the registry's own families only, one sorted
// name{labels}:value line each, label values escaped, a histogram as its
// count and sum; a failing collector's error comes with what was gathered.
func TestInfoLines(t *testing.T) {
	r := New()
	r.Decided("http", "we\"ird\ndomain", &gateway.Decision{Overall: gateway.OverLimit, Statuses: []gateway.Status{status("b", gateway.OverLimit, false)}}, 1500*time.Microsecond)
	r.SetPolicyStats(func() policy.SourceStats { return policy.SourceStats{Reloads: 2} })
	lines, err := r.InfoLines()
	require.NoError(t, err)
	assert.Equal(t, []string{
		`cellserver_decision_duration_seconds_count{frontend="http"}:1`,
		`cellserver_decision_duration_seconds_sum{frontend="http"}:0.0015`,
		`cellserver_policy_reload_failures_total:0`,
		`cellserver_policy_reloads_total:2`,
		`cellserver_ratelimit_decisions_total{domain="we\"ird\ndomain",frontend="http",limit="b",outcome="allowed"}:0`,
		`cellserver_ratelimit_decisions_total{domain="we\"ird\ndomain",frontend="http",limit="b",outcome="limited"}:1`,
		`cellserver_ratelimit_decisions_total{domain="we\"ird\ndomain",frontend="http",limit="b",outcome="shadow_limited"}:0`,
	}, lines)

	require.NoError(t, r.Register(failing{}))
	lines, err = r.InfoLines()
	require.ErrorContains(t, err, "broken on purpose")
	assert.Contains(t, lines, `cellserver_policy_reloads_total:2`)
}

// TestHandler: /metrics serves the registry in the text format, the
// runtime and process collectors included.
func TestHandler(t *testing.T) {
	r := New()
	r.Decided("http", "api", &gateway.Decision{Overall: gateway.OK, Statuses: []gateway.Status{status("per_minute", gateway.OK, false)}}, time.Millisecond)
	_ = r.Handler() // a second handler shares the first's error counter
	srv := httptest.NewServer(r.Handler())
	defer srv.Close()
	res, err := http.Get(srv.URL)
	require.NoError(t, err)
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	assert.Equal(t, http.StatusOK, res.StatusCode)
	text := string(body)
	assert.Contains(t, text, `cellserver_ratelimit_decisions_total{domain="api",frontend="http",limit="per_minute",outcome="allowed"} 1`+"\n")
	assert.Contains(t, text, `cellserver_decision_duration_seconds_bucket{frontend="http",le="+Inf"} 1`+"\n")
	assert.Contains(t, text, "\ngo_goroutines ")
	assert.Contains(t, text, "\nprocess_start_time_seconds ")
	assert.False(t, strings.Contains(text, "promhttp_metric_handler_requests_total"),
		"the handler's own counters would be the global registry's")
}

// blocking is a collector that holds every scrape until released.
type blocking struct{ entered, release chan struct{} }

var descBlocking = prometheus.NewDesc("cellserver_test_blocking", "x", nil, nil)

func (b blocking) Describe(ch chan<- *prometheus.Desc) { ch <- descBlocking }
func (b blocking) Collect(ch chan<- prometheus.Metric) {
	b.entered <- struct{}{}
	<-b.release
	ch <- prometheus.MustNewConstMetric(descBlocking, prometheus.GaugeValue, 1)
}

// TestHandlerBoundsScrapes: past MaxScrapesInFlight scrapes at once, the
// next is answered 503 rather than gathering once more.
func TestHandlerBoundsScrapes(t *testing.T) {
	r := New()
	b := blocking{entered: make(chan struct{}), release: make(chan struct{})}
	require.NoError(t, r.Register(b))
	h := r.Handler()
	done := make(chan int, MaxScrapesInFlight)
	for i := 0; i < MaxScrapesInFlight; i++ {
		go func() {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
			done <- rec.Code
		}()
	}
	for i := 0; i < MaxScrapesInFlight; i++ {
		<-b.entered
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	assert.Equal(t, http.StatusServiceUnavailable, rec.Code)
	close(b.release)
	for i := 0; i < MaxScrapesInFlight; i++ {
		assert.Equal(t, http.StatusOK, <-done)
	}
}

// Per-descriptor overrides carry the request's numbers in their names:
// they count under one label per unit, so a client cannot grow the series.
func TestOverridesCountUnderOneLabel(t *testing.T) {
	cfg, err := policy.Parse([]byte("domain: api\ndescriptors:\n- key: user\n  rate_limit: {unit: minute, requests_per_unit: 5}\n"))
	require.NoError(t, err)
	r := New()
	for rpu := uint32(1); rpu <= 50; rpu++ {
		d := policy.Descriptor{Entries: []policy.Entry{{Key: "user", Value: "u"}},
			Override: &policy.Override{RequestsPerUnit: rpu, Unit: policy.Minute}}
		m := cfg.Match("api", d)
		require.True(t, m.Limit.Override)
		r.Decided("grpc", "api", &gateway.Decision{Overall: gateway.OK, Statuses: []gateway.Status{{Code: gateway.OK, Limit: m.Limit}}}, time.Millisecond)
	}
	assert.Equal(t, float64(50), counter(t, r.Gatherer(), "cellserver_ratelimit_decisions_total", decision("grpc", "api", "override_per_minute", "allowed")))
	lines, err := r.InfoLines()
	require.NoError(t, err)
	for _, l := range lines {
		assert.NotContains(t, l, "override_1_per", "no request numbers in a label")
	}
}

// A shadow limit the store could not decide (Status.Err) counts nothing.
func TestUndecidedShadowNotCounted(t *testing.T) {
	r := New()
	st := status("soft", gateway.OK, false)
	st.Err = errors.New("store: wrong type")
	r.Decided("http", "api", &gateway.Decision{Overall: gateway.OK, Statuses: []gateway.Status{st}}, time.Millisecond)
	assert.Nil(t, find(t, r.Gatherer(), "cellserver_ratelimit_decisions_total", decision("http", "api", "soft", "allowed")))
}
