// Command example is a small application rate-limited by cellserver through
// package middleware (docs/middleware.md):
//
//   - /api/ fails open: 10 requests a second with bursts of 20 (GCRA) and
//     1000 a day (UTC), keyed by the X-API-Key header or else the client
//     IP; while cellserver is away, a local limiter of the same limits
//     decides in this process.
//   - /login fails closed: 5 attempts per 15 minutes per client IP
//     (sliding log); while cellserver is away it answers 503.
//   - /metrics: the middleware's counters for Prometheus.
//
// Run cellserver, then this:
//
//	cellserver --addr 127.0.0.1:6379 &
//	go run ./middleware/example -cellserver 127.0.0.1:6379 -addr 127.0.0.1:8080
//	curl -i -H 'X-API-Key: k1' http://127.0.0.1:8080/api/things
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"

	"github.com/cellserver/cellserver/limit"
	"github.com/cellserver/cellserver/middleware"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8080", "HTTP `host:port` to serve on")
	cell := flag.String("cellserver", "127.0.0.1:6379", "cellserver's RESP `host:port`")
	hops := flag.Int("trusted-hops", 0, "reverse proxies in front of this app that append to X-Forwarded-For")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if err := run(*addr, *cell, *hops, log); err != nil {
		log.Error("example: " + err.Error())
		os.Exit(1)
	}
}

func run(addr, cell string, hops int, log *slog.Logger) error {
	rdb := redis.NewClient(middleware.ClientOptions(cell))
	defer rdb.Close()
	mux, err := newMux(rdb, hops, log)
	if err != nil {
		return err
	}
	srv := &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		shut, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shut)
	}()
	log.Info("example listening", "addr", addr, "cellserver", cell)
	if err := srv.ListenAndServe(); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// newMux builds the application: its two limited routes and /metrics.
func newMux(rdb redis.UniversalClient, hops int, log *slog.Logger) (*http.ServeMux, error) {
	mw, err := middleware.New(middleware.Config{Client: rdb, Logger: log})
	if err != nil {
		return nil, err
	}
	ip := middleware.ClientIP{TrustedHops: hops, IPv6Prefix: 64}

	api, err := mw.Limiter(middleware.Route{
		Name: "api",
		Key: func(r *http.Request) (string, error) {
			if k := r.Header.Get("X-API-Key"); k != "" {
				return "key:" + k, nil // a real app checks the key first
			}
			a, err := ip.Key(r)
			return "ip:" + a, err
		},
		Limits: []middleware.Limit{
			{Name: "second", Limit: limit.GCRA{MaxBurst: 19, Count: 10, Period: time.Second}},
			{Name: "day", Limit: limit.CAL{Limit: 1000, Unit: limit.Day}},
		},
		OnFailure: middleware.FailOpen,
	})
	if err != nil {
		return nil, err
	}
	login, err := mw.Limiter(middleware.Route{
		Name:      "login",
		Key:       ip.Key,
		Limits:    []middleware.Limit{{Name: "attempts", Limit: limit.SWL{Limit: 5, Window: 15 * time.Minute}}},
		OnFailure: middleware.FailClosed, // no guessing passwords while the limiter is away
	})
	if err != nil {
		return nil, err
	}

	reg := prometheus.NewRegistry()
	if err := reg.Register(mw.Collector()); err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("/api/", api(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "api: %s\n", r.URL.Path)
	})))
	mux.Handle("POST /login", login(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "login: checked\n")
	})))
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	return mux, nil
}
