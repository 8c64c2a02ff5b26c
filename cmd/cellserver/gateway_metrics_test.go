package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cellserver/cellserver/commands"
	"github.com/cellserver/cellserver/gateway"
	"github.com/cellserver/cellserver/gateway/policy"
	"github.com/cellserver/cellserver/store"
)

// TestGatewayObserverFeedsMetricsHandler: what the gateways report to
// gatewayObserver is what metricsHandler serves, next to RESP's and the
// server's figures: one registry.
func TestGatewayObserverFeedsMetricsHandler(t *testing.T) {
	st, err := store.New(store.Config{Shards: 1})
	require.NoError(t, err)
	defer st.Close()
	exec, err := commands.New(commands.Config{}, st)
	require.NoError(t, err)
	defer exec.Close()

	obs := gatewayObserver(exec)
	require.NotNil(t, obs)
	obs.Decided("http", "api", &gateway.Decision{Overall: gateway.OverLimit, Statuses: []gateway.Status{
		{Code: gateway.OverLimit, Limit: &policy.RateLimit{Name: "per_minute"}},
	}}, time.Millisecond)

	srv := httptest.NewServer(metricsHandler(exec))
	defer srv.Close()
	res, err := http.Get(srv.URL + "/metrics")
	require.NoError(t, err)
	body, err := io.ReadAll(res.Body)
	res.Body.Close()
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, res.StatusCode)
	for _, line := range []string{
		`cellserver_ratelimit_decisions_total{domain="api",frontend="http",limit="per_minute",outcome="limited"} 1`,
		`cellserver_decision_duration_seconds_count{frontend="http"} 1`,
		`cellserver_ratelimit_decisions_total{domain="",frontend="resp",limit="cl.throttle",outcome="allowed"} 0`,
		`cellserver_connections 0`,
	} {
		assert.Contains(t, string(body), line+"\n")
	}
}
