package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/cellserver/cellserver/commands"
	"github.com/cellserver/cellserver/gateway"
	"github.com/cellserver/cellserver/gateway/httpcheck"
)

// startHTTP serves the forward-auth check, /json, /healthz and /metrics on
// cfg.HTTPAddr, and /metrics alone on cfg.MetricsAddr when it is set. Both
// listen before it returns (a taken address fails the start); stop shuts
// them down, letting answers under way finish for a few seconds.
func startHTTP(cfg Config, eng *gateway.Engine, exec *commands.Server, log *slog.Logger) (stop func(), err error) {
	var servers []*http.Server
	shutdown := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		for _, s := range servers {
			if err := s.Shutdown(ctx); err != nil {
				_ = s.Close()
			}
		}
	}
	serve := func(flag, addr string, h http.Handler) error {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return fmt.Errorf("%s: %w", flag, err)
		}
		srv := httpcheck.NewServer(h, log)
		servers = append(servers, srv)
		go func() {
			if err := srv.Serve(httpcheck.LimitListener(srv, ln, cfg.HTTPMaxConns, log)); !errors.Is(err, http.ErrServerClosed) {
				log.Error("http server stopped", "flag", flag, "addr", addr, "err", err)
			}
		}()
		log.Info("http listening", "flag", flag, "addr", ln.Addr().String())
		return nil
	}
	defer func() {
		if err != nil { // stop is nil here: shut down what was started
			shutdown()
		}
	}()
	metrics := metricsHandler(exec)
	if cfg.HTTPAddr != "" {
		onError, err := httpcheck.ParseOnError(cfg.HTTPOnError)
		if err != nil {
			return nil, fmt.Errorf("--http-on-error: %w", err)
		}
		forwarded, err := httpcheck.ParseForwarded(cfg.HTTPForwardedHeaders)
		if err != nil {
			return nil, fmt.Errorf("--http-forwarded-headers: %w", err)
		}
		mux := http.NewServeMux()
		mux.Handle("/", httpcheck.New(httpcheck.Config{
			Engine:      eng,
			TrustedHops: cfg.HTTPTrustedHops,
			OnError:     onError,
			Forwarded:   forwarded,
			Headers:     cfg.RateLimitHeaders,
			Logger:      log,
		}))
		mux.Handle("/metrics", metrics)
		if err := serve("--http-addr", cfg.HTTPAddr, mux); err != nil {
			return nil, err
		}
	}
	if cfg.MetricsAddr != "" {
		mux := http.NewServeMux()
		mux.Handle("/metrics", metrics)
		if err := serve("--metrics-addr", cfg.MetricsAddr, mux); err != nil {
			return nil, err
		}
	}
	return shutdown, nil
}
