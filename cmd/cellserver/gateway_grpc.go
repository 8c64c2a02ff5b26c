package main

import (
	"log/slog"
	"net"
	"time"

	"github.com/cellserver/cellserver/gateway"
	"github.com/cellserver/cellserver/gateway/rls"
)

// grpcShutdownGrace is how long the calls in flight get at shutdown before
// the gRPC connections are closed under them (well inside the 10 s a
// supervisor commonly waits after SIGTERM).
const grpcShutdownGrace = 5 * time.Second

// startGRPC serves Envoy's RLS v3 and gRPC health on cfg.GRPCAddr. The
// address is bound before it returns, so a taken one fails the start.
// Connections are bounded by --http-max-conns (gRPC is HTTP/2; each
// listener has its own count; see rls.Config.MaxConns).
func startGRPC(cfg Config, eng *gateway.Engine, log *slog.Logger) (stop func(), err error) {
	srv, err := rls.New(rls.Config{
		Engine:   eng,
		Headers:  cfg.RateLimitHeaders,
		Logger:   log,
		MaxConns: cfg.HTTPMaxConns,
	})
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", cfg.GRPCAddr)
	if err != nil {
		return nil, err
	}
	log.Info("envoy rate-limit service (gRPC) listening", "addr", ln.Addr().String(), "headers", cfg.RateLimitHeaders.String())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil {
			log.Error("the gRPC rate-limit service stopped", "err", err)
		}
	}()
	return func() {
		srv.Shutdown(grpcShutdownGrace)
		<-done
	}, nil
}
