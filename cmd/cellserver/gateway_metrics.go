package main

import (
	"net/http"

	"github.com/cellserver/cellserver/commands"
	"github.com/cellserver/cellserver/gateway"
)

// gatewayObserver is the Observer that counts the gateways' decisions in
// the server's metrics registry.
func gatewayObserver(exec *commands.Server) gateway.Observer { return nil }

// metricsHandler serves the server's Prometheus metrics (/metrics).
func metricsHandler(exec *commands.Server) http.Handler { return http.NotFoundHandler() }
