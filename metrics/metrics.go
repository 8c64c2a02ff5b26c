// Package metrics is cellserver's Prometheus registry: one per server (never
// the global default registry), which /metrics serves and INFO ratelimit
// renders, so the two never disagree.
//
// Quick start:
//
//	reg := metrics.New()                       // Go runtime and process collectors included
//	eng := gateway.New(gateway.Config{..., Observer: reg}) // gateways' decisions and latency
//	reg.SetPolicyStats(src.Stats)              // policy reloads, if a policy file is loaded
//	http.Handle("/metrics", reg.Handler())
//
// The registry owns the decision families: cellserver_ratelimit_decisions_total
// (per front end, domain, limit and outcome) and
// cellserver_decision_duration_seconds (per front end). The gateways report
// into them through gateway.Observer (Registry implements it); a front end
// that counts its decisions itself, on a hot path that must not look labels
// up (RESP, package commands), hands the registry a read function instead
// (AddFrontend), called at scrape time. Every other family is a Collector
// its owner registers (package commands registers the server's: connections,
// commands, errors, persistence, keys), reading the very counters INFO
// reads.
//
// Cardinality: the frontend label is a name from code; the domain and limit
// labels of the gateways come from the policy file (a domain is counted
// under its own name only when one of its limits applied, which only a
// configured domain can do; every other decision counts under domain=""
// and limit=""), and MaxSeries caps the label sets across policy reloads:
// past it, new ones count under domain and limit OtherLabel.
package metrics

import (
	"errors"
	"math"
	"math/bits"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"

	"github.com/cellserver/cellserver/gateway"
	"github.com/cellserver/cellserver/gateway/policy"
)

// Outcomes: the outcome label of cellserver_ratelimit_decisions_total.
const (
	// Allowed: the request passed and the limit was charged (RESP: the
	// call was allowed).
	Allowed = "allowed"
	// Limited: the limit refused the request.
	Limited = "limited"
	// ShadowLimited: a shadow-mode limit would have refused; the request
	// passed.
	ShadowLimited = "shadow_limited"
)

// MaxSeries is the most distinct (frontend, domain, limit) label sets the
// gateways' decision counter holds. The policy file bounds them, but every
// reload may bring new limit names and a counter never forgets one; past
// MaxSeries a new label set counts under domain and limit OtherLabel.
const MaxSeries = 4096

// MaxFrontends is the most distinct front-end names the gateway families
// hold; others count under frontend OtherLabel.
const MaxFrontends = 16

// OtherLabel is the label value of decisions past MaxSeries or
// MaxFrontends.
const OtherLabel = "_other"

// LatencyBuckets is the number of buckets of the decision latency
// histograms: bucket k counts decisions of at most 1024<<k ns (about
// 2^k µs), the last one every longer decision too. It is the layout of
// commands' per-command histograms (LATENCY HISTOGRAM), so RESP's buckets
// are read as they are.
const LatencyBuckets = 21

// BucketOf returns the latency bucket of a decision that took ns.
func BucketOf(ns int64) int {
	if ns <= 1024 {
		return 0
	}
	return min(bits.Len64(uint64(ns-1)>>10), LatencyBuckets-1)
}

// bucketBound is bucket k's upper bound in seconds (k < LatencyBuckets-1;
// the last is +Inf).
func bucketBound(k int) float64 { return float64(int64(1024)<<k) / 1e9 }

// FrontendFigures are a front end's decision figures at one instant, as
// AddFrontend's read function reports them.
type FrontendFigures struct {
	Decisions []DecisionCount
	// Latency[k] is how many decisions fell in bucket k (not cumulative;
	// see LatencyBuckets); LatencySum is their total time.
	Latency    [LatencyBuckets]int64
	LatencySum time.Duration
}

// DecisionCount is one (domain, limit) label set's counts.
type DecisionCount struct {
	Domain, Limit                   string
	Allowed, Limited, ShadowLimited int64
}

// Registry is one server's Prometheus registry. Safe for concurrent use; the
// zero value is not usable (New).
type Registry struct {
	reg *prometheus.Registry

	mu        sync.RWMutex
	series    map[seriesKey]*counts // the gateways' decisions
	latency   map[string]*histogram // the gateways' latency, by front end
	frontends map[string]func() FrontendFigures

	policyStats atomic.Pointer[func() policy.SourceStats]
}

type seriesKey struct{ frontend, domain, limit string }

// counts are one label set's decisions, by outcome.
type counts struct{ allowed, limited, shadow atomic.Int64 }

// histogram is one front end's decision latency.
type histogram struct {
	b     [LatencyBuckets]atomic.Int64
	sumNs atomic.Int64
}

var (
	descDecisions = prometheus.NewDesc("cellserver_ratelimit_decisions_total",
		"Rate-limit decisions per front end, policy domain, limit and outcome (allowed, limited, shadow_limited).",
		[]string{"frontend", "domain", "limit", "outcome"}, nil)
	descDuration = prometheus.NewDesc("cellserver_decision_duration_seconds",
		"Time to decide one rate-limit request, per front end.",
		[]string{"frontend"}, nil)
	descReloads = prometheus.NewDesc("cellserver_policy_reloads_total",
		"Changed policy files loaded and put in force.", nil, nil)
	descReloadFailures = prometheus.NewDesc("cellserver_policy_reload_failures_total",
		"Changed policy files refused (the previous policy stayed in force).", nil, nil)
	descLoaded = prometheus.NewDesc("cellserver_policy_loaded_timestamp_seconds",
		"When the policy in force was loaded (Unix time).", nil, nil)
)

// InfoPrefixes are the metric name prefixes INFO ratelimit renders: the
// registry's own families.
var InfoPrefixes = []string{"cellserver_ratelimit_", "cellserver_decision_", "cellserver_policy_"}

// New returns a Registry holding the decision families and Go's runtime and
// process collectors.
func New() *Registry {
	r := &Registry{
		reg:       prometheus.NewRegistry(),
		series:    map[seriesKey]*counts{},
		latency:   map[string]*histogram{},
		frontends: map[string]func() FrontendFigures{},
	}
	r.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), (*decisionCollector)(r))
	return r
}

// Register adds a collector (a component's own families) to the registry.
func (r *Registry) Register(c prometheus.Collector) error { return r.reg.Register(c) }

// Unregister removes a collector Register added.
func (r *Registry) Unregister(c prometheus.Collector) bool { return r.reg.Unregister(c) }

// Gatherer returns the registry, to gather from.
func (r *Registry) Gatherer() prometheus.Gatherer { return r.reg }

// MaxScrapesInFlight is how many /metrics requests Handler serves at once;
// more are answered 503 (each scrape gathers every collector: a flood of
// them must not take the CPU from the decisions).
const MaxScrapesInFlight = 4

// Handler serves the registry in Prometheus's exposition formats
// (/metrics). A failing collector is answered with HTTP 500, not a partial
// page: a scrape then fails visibly instead of losing series. At most
// MaxScrapesInFlight run at once.
func (r *Registry) Handler() http.Handler {
	return promhttp.HandlerFor(r.reg, promhttp.HandlerOpts{
		ErrorHandling:       promhttp.HTTPErrorOnError,
		Registry:            r.reg,
		MaxRequestsInFlight: MaxScrapesInFlight,
	})
}

// AddFrontend makes read the source of front end name's decision figures,
// called at every scrape: a front end that counts its decisions itself
// (RESP) so that its hot path looks nothing up. read must be cheap and
// safe for concurrent use; its label sets must be bounded. A second call
// for the same name replaces the first. A name a gateway already reported
// under is refused (the two would export the same series); a gateway that
// reports under an added name later counts under OtherLabel.
func (r *Registry) AddFrontend(name string, read func() FrontendFigures) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.latency[name]; ok {
		return errors.New("metrics: front end " + strconv.Quote(name) + " is already counted by a gateway")
	}
	r.frontends[name] = read
	return nil
}

// SetPolicyStats makes stats (a policy Source's Stats) the source of the
// policy reload figures; nil removes them. Without it no policy family is
// exported.
func (r *Registry) SetPolicyStats(stats func() policy.SourceStats) {
	if stats == nil {
		r.policyStats.Store(nil)
		return
	}
	r.policyStats.Store(&stats)
}

var _ gateway.Observer = (*Registry)(nil)

// Decided counts one gateway decision (gateway.Observer). Each descriptor
// whose limit applied counts under its limit's name: limited if it
// refused, shadow_limited if a shadow-mode limit would have, allowed if
// the request passed (the limit was charged); a limit that admitted a
// request another one refused was not charged and counts nothing (its
// series exist, at 0). A decision where no limit applied counts once,
// allowed, under domain "" and limit "" (an unknown domain is one: a
// client cannot make a label of it).
func (r *Registry) Decided(frontend, domain string, d *gateway.Decision, took time.Duration) {
	frontend, h := r.frontend(frontend)
	h.add(took)
	applied := false
	for i := range d.Statuses {
		st := &d.Statuses[i]
		if st.Limit == nil || st.Err != nil {
			continue // no limit, or a shadow limit left undecided: nothing to count
		}
		applied = true
		c := r.counts(seriesKey{frontend, domain, st.Limit.MetricName()})
		switch {
		case st.Shadowed:
			c.shadow.Add(1)
		case st.Code == gateway.OverLimit:
			c.limited.Add(1)
		case d.Overall == gateway.OK:
			c.allowed.Add(1)
		}
	}
	if !applied {
		r.counts(seriesKey{frontend: frontend}).allowed.Add(1)
	}
}

// frontend returns the label and latency histogram of front end name,
// creating them unless MaxFrontends are held (then OtherLabel's): the
// names come from code, but a Registry does not rely on that.
func (r *Registry) frontend(name string) (string, *histogram) {
	r.mu.RLock()
	h := r.latency[name]
	r.mu.RUnlock()
	if h != nil {
		return name, h
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if h = r.latency[name]; h != nil {
		return name, h
	}
	_, taken := r.frontends[name] // counted by its own read function
	if taken || len(r.latency) >= MaxFrontends {
		name = OtherLabel
		if h = r.latency[name]; h != nil {
			return name, h
		}
	}
	h = &histogram{}
	r.latency[name] = h
	return name, h
}

func (h *histogram) add(took time.Duration) {
	ns := max(took.Nanoseconds(), 0)
	h.b[BucketOf(ns)].Add(1)
	h.sumNs.Add(ns)
}

// counts returns k's counters, creating them unless MaxSeries are held
// (then the front end's OtherLabel counters).
func (r *Registry) counts(k seriesKey) *counts {
	r.mu.RLock()
	c := r.series[k]
	r.mu.RUnlock()
	if c != nil {
		return c
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if c = r.series[k]; c != nil {
		return c
	}
	if len(r.series) >= MaxSeries {
		k = seriesKey{k.frontend, OtherLabel, OtherLabel}
		if c = r.series[k]; c != nil {
			return c
		}
		// The overflow sets (one per front end, MaxFrontends at most) may
		// go past MaxSeries: they are what keeps the count bounded.
	}
	c = &counts{}
	r.series[k] = c
	return c
}

// decisionCollector is the Registry's own Collector: the decision and
// policy families, read from their counters at scrape time.
type decisionCollector Registry

func (dc *decisionCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descDecisions
	ch <- descDuration
	ch <- descReloads
	ch <- descReloadFailures
	ch <- descLoaded
}

func (dc *decisionCollector) Collect(ch chan<- prometheus.Metric) {
	r := (*Registry)(dc)
	type hfig struct {
		name string
		fig  FrontendFigures
	}
	var hs []hfig
	r.mu.RLock()
	for k, c := range r.series {
		emitDecision(ch, k.frontend, DecisionCount{Domain: k.domain, Limit: k.limit,
			Allowed: c.allowed.Load(), Limited: c.limited.Load(), ShadowLimited: c.shadow.Load()}, true)
	}
	for name, h := range r.latency {
		var f FrontendFigures
		for k := range h.b {
			f.Latency[k] = h.b[k].Load()
		}
		f.LatencySum = time.Duration(h.sumNs.Load())
		hs = append(hs, hfig{name, f})
	}
	reads := make(map[string]func() FrontendFigures, len(r.frontends))
	for name, read := range r.frontends {
		reads[name] = read
	}
	r.mu.RUnlock()
	// The read functions run outside the lock: they take their owner's.
	for name, read := range reads {
		f := read()
		for _, d := range f.Decisions {
			emitDecision(ch, name, d, false)
		}
		hs = append(hs, hfig{name, f})
	}
	for _, h := range hs {
		var total uint64
		cum := make(map[float64]uint64, LatencyBuckets-1)
		for k, n := range h.fig.Latency {
			total += uint64(max(n, 0))
			if k < LatencyBuckets-1 {
				cum[bucketBound(k)] = total
			}
		}
		ch <- prometheus.MustNewConstHistogram(descDuration, total, h.fig.LatencySum.Seconds(), cum, h.name)
	}
	if p := r.policyStats.Load(); p != nil {
		st := (*p)()
		ch <- prometheus.MustNewConstMetric(descReloads, prometheus.CounterValue, float64(st.Reloads))
		ch <- prometheus.MustNewConstMetric(descReloadFailures, prometheus.CounterValue, float64(st.Failures))
		if !st.LoadedAt.IsZero() {
			ch <- prometheus.MustNewConstMetric(descLoaded, prometheus.GaugeValue, float64(st.LoadedAt.UnixNano())/1e9)
		}
	}
}

// emitDecision sends one label set's outcomes; shadow says whether the
// front end has shadow-mode limits (RESP has none: no such series).
func emitDecision(ch chan<- prometheus.Metric, frontend string, d DecisionCount, shadow bool) {
	ch <- prometheus.MustNewConstMetric(descDecisions, prometheus.CounterValue, float64(d.Allowed), frontend, d.Domain, d.Limit, Allowed)
	ch <- prometheus.MustNewConstMetric(descDecisions, prometheus.CounterValue, float64(d.Limited), frontend, d.Domain, d.Limit, Limited)
	if shadow {
		ch <- prometheus.MustNewConstMetric(descDecisions, prometheus.CounterValue, float64(d.ShadowLimited), frontend, d.Domain, d.Limit, ShadowLimited)
	}
}

// InfoLines renders the registry's own families (InfoPrefixes) as INFO
// lines, name{labels}:value, sorted: what INFO ratelimit shows. A
// histogram gives its _count and _sum (its buckets are on /metrics). It
// gathers the registry as a scrape does, so the values are the scrape's;
// on an error (a failing collector) it renders what was gathered.
func (r *Registry) InfoLines() ([]string, error) {
	mfs, err := r.reg.Gather()
	var lines []string
	for _, mf := range mfs {
		name := mf.GetName()
		if !hasAnyPrefix(name, InfoPrefixes) {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := labelString(m.GetLabel())
			switch mf.GetType() {
			case dto.MetricType_COUNTER:
				lines = append(lines, name+labels+":"+formatValue(m.GetCounter().GetValue()))
			case dto.MetricType_GAUGE:
				lines = append(lines, name+labels+":"+formatValue(m.GetGauge().GetValue()))
			case dto.MetricType_HISTOGRAM:
				h := m.GetHistogram()
				lines = append(lines, name+"_count"+labels+":"+strconv.FormatUint(h.GetSampleCount(), 10),
					name+"_sum"+labels+":"+formatValue(h.GetSampleSum()))
			case dto.MetricType_UNTYPED:
				lines = append(lines, name+labels+":"+formatValue(m.GetUntyped().GetValue()))
			}
		}
	}
	sort.Strings(lines)
	return lines, err
}

func hasAnyPrefix(s string, prefixes []string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

// labelString is {k="v",...} as the exposition format writes it (values
// escaped), "" without labels; Gather sorts the labels by name.
func labelString(ls []*dto.LabelPair) string {
	if len(ls) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteByte('{')
	for i, l := range ls {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(l.GetName())
		b.WriteString(`="`)
		b.WriteString(escapeLabel(l.GetValue()))
		b.WriteByte('"')
	}
	b.WriteByte('}')
	return b.String()
}

// escapeLabel escapes a label value as the text exposition format does
// (backslash, double quote, line feed), so an INFO line stays one line.
func escapeLabel(v string) string {
	if !strings.ContainsAny(v, "\\\"\n\r") {
		return v
	}
	return strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`, "\r", `\r`).Replace(v)
}

// formatValue writes integers without a fraction (counts) and other values
// in the shortest form that reads back the same.
func formatValue(v float64) string {
	if v == math.Trunc(v) && math.Abs(v) < 1e15 {
		return strconv.FormatInt(int64(v), 10)
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}
