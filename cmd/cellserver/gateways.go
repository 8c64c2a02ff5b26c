package main

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/cellserver/cellserver/commands"
	"github.com/cellserver/cellserver/gateway"
	"github.com/cellserver/cellserver/gateway/policy"
)

// checkGatewayFlags validates the gateway flags together.
func checkGatewayFlags(c *Config) error {
	if (c.HTTPAddr != "" || c.GRPCAddr != "") && c.PolicyFile == "" {
		return errors.New("--http-addr and --grpc-addr need --policy-file (the limits they apply)")
	}
	switch c.HTTPOnError {
	case "allow", "deny":
	default:
		return fmt.Errorf("--http-on-error must be allow or deny, got %q", c.HTTPOnError)
	}
	switch c.HTTPForwardedHeaders {
	case "forwarded", "original":
	default:
		return fmt.Errorf("--http-forwarded-headers must be forwarded or original, got %q", c.HTTPForwardedHeaders)
	}
	if c.HTTPTrustedHops < 0 {
		return fmt.Errorf("--http-trusted-hops must not be negative, got %d", c.HTTPTrustedHops)
	}
	if c.HTTPMaxConns < 1 {
		return fmt.Errorf("--http-max-conns must be at least 1, got %d", c.HTTPMaxConns)
	}
	return nil
}

// startGateways starts the HTTP, gRPC and metrics front ends the flags ask
// for, all on exec's decision API. stop shuts them down.
func startGateways(cfg Config, exec *commands.Server, log *slog.Logger) (stop func(), err error) {
	var stops []func()
	var closeSource func()
	// The front ends stop together, each with its own grace (a few
	// seconds): one after the other, they added up past the 10 s a
	// supervisor commonly waits after SIGTERM. The policy source goes last.
	stopAll := func() {
		var wg sync.WaitGroup
		for _, stop := range stops {
			wg.Go(stop)
		}
		wg.Wait()
		if closeSource != nil {
			closeSource()
		}
	}
	defer func() {
		if err != nil {
			stopAll() // what started before the failure
		}
	}()
	var eng *gateway.Engine
	if cfg.PolicyFile != "" {
		src, err := policy.Open(cfg.PolicyFile, policy.SourceOptions{Poll: time.Second, Logger: log})
		if err != nil {
			return nil, fmt.Errorf("--policy-file: %w", err)
		}
		closeSource = src.Close
		watchPolicy(exec, src)
		eng = gateway.New(gateway.Config{Service: exec.Service(), Policies: src, Observer: gatewayObserver(exec), Logger: log})
	}
	if cfg.GRPCAddr != "" {
		s, err := startGRPC(cfg, eng, log)
		if err != nil {
			return nil, fmt.Errorf("--grpc-addr: %w", err)
		}
		stops = append(stops, s)
	}
	if cfg.HTTPAddr != "" || cfg.MetricsAddr != "" {
		s, err := startHTTP(cfg, eng, exec, log)
		if err != nil {
			return nil, err
		}
		stops = append(stops, s)
	}
	return stopAll, nil
}
