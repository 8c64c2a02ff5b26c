package main

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cellserver/cellserver/commands"
	"github.com/cellserver/cellserver/gateway"
	"github.com/cellserver/cellserver/gateway/policy"
	"github.com/cellserver/cellserver/store"
)

func newExec(t *testing.T) *commands.Server {
	t.Helper()
	st, err := store.New(store.Config{Shards: 1})
	require.NoError(t, err)
	t.Cleanup(func() { st.Close() })
	exec, err := commands.New(commands.Config{}, st)
	require.NoError(t, err)
	t.Cleanup(exec.Close)
	return exec
}

func scrape(t *testing.T, h http.Handler) string {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	require.Equal(t, http.StatusOK, rec.Code)
	return rec.Body.String()
}

// TestWatchPolicyExportsReloads: once watchPolicy is given the policy
// Source, its reloads and refusals are on /metrics as they happen.
func TestWatchPolicyExportsReloads(t *testing.T) {
	exec := newExec(t)
	h := metricsHandler(exec)
	assert.NotContains(t, scrape(t, h), "cellserver_policy_reloads_total")

	path := filepath.Join(t.TempDir(), "policy.yaml")
	doc := "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: %s}\n"
	require.NoError(t, os.WriteFile(path, []byte(strings.Replace(doc, "%s", "1", 1)), 0o644))
	src, err := policy.Open(path, policy.SourceOptions{Poll: 10 * time.Millisecond})
	require.NoError(t, err)
	defer src.Close()
	watchPolicy(exec, src)
	assert.Contains(t, scrape(t, h), "cellserver_policy_reloads_total 0\n")

	require.NoError(t, os.WriteFile(path, []byte(strings.Replace(doc, "%s", "22", 1)), 0o644))
	require.Eventually(t, func() bool { return strings.Contains(scrape(t, h), "cellserver_policy_reloads_total 1\n") },
		10*time.Second, 10*time.Millisecond, "the reload is not on /metrics")
	require.NoError(t, os.WriteFile(path, []byte("domain: [not yaml a policy"), 0o644))
	require.Eventually(t, func() bool { return strings.Contains(scrape(t, h), "cellserver_policy_reload_failures_total 1\n") },
		10*time.Second, 10*time.Millisecond, "the refusal is not on /metrics")
	assert.Contains(t, scrape(t, h), "cellserver_policy_loaded_timestamp_seconds ")
}

// TestGatewayObserverFeedsMetricsHandler: what the gateways report to
// gatewayObserver is what metricsHandler serves, next to RESP's and the
// server's figures: one registry.
func TestGatewayObserverFeedsMetricsHandler(t *testing.T) {
	exec := newExec(t)
	obs := gatewayObserver(exec)
	require.NotNil(t, obs)
	obs.Decided("http", "api", &gateway.Decision{Overall: gateway.OverLimit, Statuses: []gateway.Status{
		{Code: gateway.OverLimit, Limit: &policy.RateLimit{Name: "per_minute"}},
	}}, time.Millisecond)

	body := scrape(t, metricsHandler(exec))
	for _, line := range []string{
		`cellserver_ratelimit_decisions_total{domain="api",frontend="http",limit="per_minute",outcome="limited"} 1`,
		`cellserver_decision_duration_seconds_count{frontend="http"} 1`,
		`cellserver_ratelimit_decisions_total{domain="",frontend="resp",limit="cl.throttle",outcome="allowed"} 0`,
		`cellserver_connections 0`,
	} {
		assert.Contains(t, body, line+"\n")
	}
}
