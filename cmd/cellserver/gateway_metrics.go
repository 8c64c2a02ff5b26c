package main

import (
	"net/http"

	"github.com/cellserver/cellserver/commands"
	"github.com/cellserver/cellserver/gateway"
	"github.com/cellserver/cellserver/gateway/policy"
)

// gatewayObserver is the Observer that counts the gateways' decisions in
// the server's metrics registry (cellserver_ratelimit_decisions_total,
// cellserver_decision_duration_seconds), the one /metrics serves and INFO
// ratelimit renders.
func gatewayObserver(exec *commands.Server) gateway.Observer { return exec.Metrics() }

// metricsHandler serves the server's Prometheus metrics (/metrics).
func metricsHandler(exec *commands.Server) http.Handler { return exec.Metrics().Handler() }

// watchPolicy exports src's reload counts (cellserver_policy_*) in the
// server's metrics. startGateways calls it once the policy file is open.
func watchPolicy(exec *commands.Server, src *policy.Source) { exec.Metrics().SetPolicyStats(src.Stats) }
