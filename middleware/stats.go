package middleware

import (
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Reason is why a request was not decided by cellserver.
type Reason uint8

// The reasons of a fallback.
const (
	// ReasonTimeout: the call took longer than Config.Timeout.
	ReasonTimeout Reason = iota
	// ReasonUnreachable: no connection (refused, reset, closed).
	ReasonUnreachable
	// ReasonError: cellserver answered with an error, or with a reply
	// that is not CL.LIMIT's.
	ReasonError
	// ReasonBreaker: the breaker was open; cellserver was not called.
	ReasonBreaker
	numReasons
)

func (r Reason) String() string {
	switch r {
	case ReasonTimeout:
		return "timeout"
	case ReasonUnreachable:
		return "unreachable"
	case ReasonError:
		return "error"
	case ReasonBreaker:
		return "breaker_open"
	}
	return "unknown"
}

type source uint8

const (
	sourceCellserver source = iota
	sourceLocal
)

// routeStats are one route's counters.
type routeStats struct {
	allowed, limited           atomic.Uint64 // decided by cellserver
	localAllowed, localLimited atomic.Uint64 // decided by the local limiter
	refused                    atomic.Uint64 // failed closed
	keyErrors                  atomic.Uint64
	fallbacks                  [numReasons]atomic.Uint64
}

func (s *routeStats) count(src source, limited bool) {
	switch {
	case src == sourceCellserver && limited:
		s.limited.Add(1)
	case src == sourceCellserver:
		s.allowed.Add(1)
	case limited:
		s.localLimited.Add(1)
	default:
		s.localAllowed.Add(1)
	}
}

// RouteStats are one route's counts since the Middleware was made.
type RouteStats struct {
	Allowed, Limited           uint64 // decided by cellserver
	LocalAllowed, LocalLimited uint64 // decided by the local limiter (fail open)
	Refused                    uint64 // refused while failing closed
	KeyErrors                  uint64 // refused by OnKeyError
	// Fallbacks counts the requests cellserver did not decide, by reason
	// (indexed by Reason).
	Fallbacks [numReasons]uint64
}

// FallbackTotal is the sum of Fallbacks.
func (s RouteStats) FallbackTotal() uint64 {
	var n uint64
	for _, v := range s.Fallbacks {
		n += v
	}
	return n
}

// Stats returns every route's counts, by route name.
func (m *Middleware) Stats() map[string]RouteStats {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[string]RouteStats, len(m.routes))
	for name, s := range m.routes {
		r := RouteStats{
			Allowed: s.allowed.Load(), Limited: s.limited.Load(),
			LocalAllowed: s.localAllowed.Load(), LocalLimited: s.localLimited.Load(),
			Refused: s.refused.Load(), KeyErrors: s.keyErrors.Load(),
		}
		for i := range s.fallbacks {
			r.Fallbacks[i] = s.fallbacks[i].Load()
		}
		out[name] = r
	}
	return out
}

// Fallbacks is the number of requests, on every route, that cellserver did
// not decide.
func (m *Middleware) Fallbacks() uint64 {
	var n uint64
	for _, s := range m.Stats() {
		n += s.FallbackTotal()
	}
	return n
}

// Metric names of Collector.
const (
	MetricDecisions = "cellserver_middleware_requests_total"
	MetricFallbacks = "cellserver_middleware_fallbacks_total"
)

var (
	descDecisions = prometheus.NewDesc(MetricDecisions,
		"Requests through the rate-limit middleware, by route, by who decided (cellserver, local, closed, key_error) and outcome (allowed, limited, refused).",
		[]string{"route", "decided_by", "outcome"}, nil)
	descFallbacks = prometheus.NewDesc(MetricFallbacks,
		"Requests cellserver did not decide, by route and reason (timeout, unreachable, error, breaker_open).",
		[]string{"route", "reason"}, nil)
)

// Collector returns a prometheus.Collector of the middleware's counts, for
// the application to register (prometheus.MustRegister(mw.Collector())).
func (m *Middleware) Collector() prometheus.Collector { return collector{m} }

type collector struct{ m *Middleware }

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descDecisions
	ch <- descFallbacks
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	for name, s := range c.m.Stats() {
		for _, x := range []struct {
			by, outcome string
			v           uint64
		}{
			{"cellserver", "allowed", s.Allowed}, {"cellserver", "limited", s.Limited},
			{"local", "allowed", s.LocalAllowed}, {"local", "limited", s.LocalLimited},
			{"closed", "refused", s.Refused}, {"key_error", "refused", s.KeyErrors},
		} {
			ch <- prometheus.MustNewConstMetric(descDecisions, prometheus.CounterValue, float64(x.v), name, x.by, x.outcome)
		}
		for r, v := range s.Fallbacks {
			ch <- prometheus.MustNewConstMetric(descFallbacks, prometheus.CounterValue, float64(v), name, Reason(r).String())
		}
	}
}

// fallbackLog logs fallbacks at most once a second: the first of a second
// at once, the rest counted into the next line (or the recovery line).
type fallbackLog struct {
	logger *slog.Logger

	mu         sync.Mutex
	last       time.Time
	suppressed uint64
}

// logEvery is the least time between two fallback lines.
const logEvery = time.Second

func (f *fallbackLog) fallback(now time.Time, route string, mode FailureMode, reason Reason, err error) {
	f.mu.Lock()
	if !f.last.IsZero() && now.Sub(f.last) < logEvery {
		f.suppressed++
		f.mu.Unlock()
		return
	}
	n := f.suppressed + 1
	f.last, f.suppressed = now, 0
	f.mu.Unlock()
	attrs := []any{"route", route, "fail", mode.String(), "reason", reason.String(), "fallbacks", n}
	if err != nil {
		attrs = append(attrs, "err", err.Error())
	}
	f.logger.Warn("middleware: cellserver did not decide; falling back", attrs...)
}

// recovered logs that cellserver answers again after failed calls, with
// the fallbacks not yet logged.
func (f *fallbackLog) recovered(route string, failedCalls int64) {
	f.mu.Lock()
	n := f.suppressed
	f.suppressed, f.last = 0, time.Time{}
	f.mu.Unlock()
	f.logger.Info("middleware: cellserver answers again", "route", route, "failed_calls", failedCalls, "unlogged_fallbacks", n)
}
