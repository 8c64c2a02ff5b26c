package rls

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"runtime/debug"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"

	"github.com/cellserver/cellserver/gateway"
	"github.com/cellserver/cellserver/gateway/header"
)

// Defaults of Config's bounds.
const (
	DefaultMaxConns             = 10000
	DefaultMaxRecvBytes         = 64 << 10
	DefaultMaxConcurrentStreams = 1024
	DefaultMaxHeaderListBytes   = 64 << 10
	DefaultConnectionTimeout    = 10 * time.Second
	DefaultMaxWatches           = 256
	DefaultMaxCalls             = 2048
	DefaultMaxHealthChecks      = 64
	DefaultMaxPending           = 2048
	DefaultRecvTimeout          = 5 * time.Second
	DefaultMaxConnectionAge     = 5 * time.Minute
	DefaultMaxConnectionGrace   = 30 * time.Second
)

// Config configures a Server. The zero value of each bound is its default.
type Config struct {
	Engine  *gateway.Engine   // required
	Headers header.Convention // the header sets written into response_headers_to_add
	Logger  *slog.Logger      // nil: no logging

	// MaxConns bounds simultaneous connections (Envoy keeps a few
	// long-lived HTTP/2 connections per worker, so this is a guard against
	// a flood, not a working limit). Past it, a new connection closes the
	// one idle longest (serving no call whose request has arrived) and
	// takes its place; only when every connection is serving one does it
	// wait in the listen backlog until one closes or turns idle. Default
	// DefaultMaxConns.
	MaxConns int
	// MaxRecvBytes bounds one request message, past it refused with
	// RESOURCE_EXHAUSTED. A request is a domain and at most 16 descriptors
	// whose values come from request headers, which Envoy caps at 60 KiB
	// in all by default; 64 KiB is also the bound of the server's keys and
	// of the HTTP check's /json body. It is what a stalled call can hold
	// (see MaxPending). Default 64 KiB.
	MaxRecvBytes int
	// MaxConcurrentStreams bounds the calls in flight on one connection:
	// Envoy multiplexes every rate-limit call of a worker on one, so it
	// must be far above one. Default 1024.
	MaxConcurrentStreams uint32
	// MaxHeaderListBytes bounds a call's metadata. Default 64 KiB.
	MaxHeaderListBytes uint32
	// ConnectionTimeout bounds a new connection's HTTP/2 handshake.
	// Default 10 s.
	ConnectionTimeout time.Duration
	// MaxPending bounds the calls whose request has not arrived yet (the
	// message and, for a unary call, the end of stream), over all
	// connections and methods. grpc-go buffers a call's request as it
	// arrives, so without it a client could hold MaxRecvBytes in each of
	// MaxConcurrentStreams calls on each of MaxConns connections (1000
	// stalled 1 MiB calls held 1 GB). Past it, the call that has waited
	// longest is ended with RESOURCE_EXHAUSTED to admit the new one, not
	// the new one refused: Envoy's request arrives with its headers, so
	// its call is the newest waiting and a client stalling calls only
	// evicts its own. 2048 holds at most 128 MiB of requests at the
	// default MaxRecvBytes. Default DefaultMaxPending.
	MaxPending int
	// RecvTimeout bounds the time from a call's headers to its whole
	// request: past it the call ends with DEADLINE_EXCEEDED and frees its
	// place and buffers. Envoy sends a request at once and gives up on it
	// after its own timeout (20 ms by default); a client announcing a
	// message and never completing it, or sending headers only, is
	// otherwise held until the connection closes. Default 5 s.
	RecvTimeout time.Duration
	// MaxCalls bounds the ShouldRateLimit calls being decided at once
	// (their request arrived) over all connections: past it a new one is
	// refused at once with RESOURCE_EXHAUSTED (Envoy applies its
	// failure_mode_deny). A call is decided in well under a millisecond,
	// so Envoy's calls in flight are its request rate times that: 2048 is
	// far above it. A call waiting for its request holds none (see
	// MaxPending). Default DefaultMaxCalls.
	MaxCalls int
	// MaxHealthChecks bounds the health Check (and List) calls being
	// answered at once, apart from MaxCalls, so that a flood of either
	// does not refuse the other. Default DefaultMaxHealthChecks.
	MaxHealthChecks int
	// MaxWatches bounds the grpc.health.v1.Health/Watch streams open at
	// once (their request arrived), over all connections: a watch never
	// ends on its own and holds ~10 KiB, so past it a new one is refused
	// with RESOURCE_EXHAUSTED. Default DefaultMaxWatches.
	MaxWatches int
	// MaxConnectionAge is when a connection is told to go away (GOAWAY;
	// grpc-go adds up to 10% jitter; Envoy reconnects for its next calls)
	// and MaxConnectionGrace how long its calls in flight then have before
	// it is closed. A backstop for whatever a connection can hold that the
	// other bounds do not cover: closing it frees all of it. The grace is
	// longer than RecvTimeout, so no call in flight is cut short. Defaults
	// 5 min and 30 s.
	MaxConnectionAge   time.Duration
	MaxConnectionGrace time.Duration
}

// withDefaults fills the zero bounds and validates c.
func (c Config) withDefaults() (Config, error) {
	if c.Engine == nil {
		return c, errors.New("rls: no engine (a policy file is needed)")
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.MaxConns == 0 {
		c.MaxConns = DefaultMaxConns
	}
	if c.MaxRecvBytes == 0 {
		c.MaxRecvBytes = DefaultMaxRecvBytes
	}
	if c.MaxConcurrentStreams == 0 {
		c.MaxConcurrentStreams = DefaultMaxConcurrentStreams
	}
	if c.MaxHeaderListBytes == 0 {
		c.MaxHeaderListBytes = DefaultMaxHeaderListBytes
	}
	if c.ConnectionTimeout == 0 {
		c.ConnectionTimeout = DefaultConnectionTimeout
	}
	if c.MaxWatches == 0 {
		c.MaxWatches = DefaultMaxWatches
	}
	if c.MaxCalls == 0 {
		c.MaxCalls = DefaultMaxCalls
	}
	if c.MaxHealthChecks == 0 {
		c.MaxHealthChecks = DefaultMaxHealthChecks
	}
	if c.MaxPending == 0 {
		c.MaxPending = DefaultMaxPending
	}
	if c.RecvTimeout == 0 {
		c.RecvTimeout = DefaultRecvTimeout
	}
	if c.MaxConnectionAge == 0 {
		c.MaxConnectionAge = DefaultMaxConnectionAge
	}
	if c.MaxConnectionGrace == 0 {
		c.MaxConnectionGrace = DefaultMaxConnectionGrace
	}
	switch {
	case c.MaxConns < 0:
		return c, fmt.Errorf("rls: MaxConns must be positive, got %d", c.MaxConns)
	case c.MaxRecvBytes < 0:
		return c, fmt.Errorf("rls: MaxRecvBytes must be positive, got %d", c.MaxRecvBytes)
	case c.ConnectionTimeout < 0:
		return c, fmt.Errorf("rls: ConnectionTimeout must be positive, got %s", c.ConnectionTimeout)
	case c.MaxWatches < 0:
		return c, fmt.Errorf("rls: MaxWatches must be positive, got %d", c.MaxWatches)
	case c.MaxCalls < 0:
		return c, fmt.Errorf("rls: MaxCalls must be positive, got %d", c.MaxCalls)
	case c.MaxHealthChecks < 0:
		return c, fmt.Errorf("rls: MaxHealthChecks must be positive, got %d", c.MaxHealthChecks)
	case c.MaxPending < 0:
		return c, fmt.Errorf("rls: MaxPending must be positive, got %d", c.MaxPending)
	case c.RecvTimeout < 0:
		return c, fmt.Errorf("rls: RecvTimeout must be positive, got %s", c.RecvTimeout)
	case c.MaxConnectionAge < 0:
		return c, fmt.Errorf("rls: MaxConnectionAge must be positive, got %s", c.MaxConnectionAge)
	case c.MaxConnectionGrace < 0:
		return c, fmt.Errorf("rls: MaxConnectionGrace must be positive, got %s", c.MaxConnectionGrace)
	}
	return c, nil
}

// Server serves the RLS and gRPC health (grpc.health.v1) on one listener.
type Server struct {
	cfg     Config
	grpc    *grpc.Server
	health  *health.Server
	watches *watches
	guards  *guards // calls waiting for their request, connections
	calls   *slots  // ShouldRateLimit decisions
	checks  *slots  // health Check and List
	watched *slots  // open health Watch streams
}

// New returns a Server; Serve starts it.
func New(cfg Config) (*Server, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	w := newWatches()
	opts := append(serverOptions(cfg), grpc.ChainStreamInterceptor(w.intercept))
	s := &Server{
		cfg: cfg, grpc: grpc.NewServer(opts...), health: health.NewServer(), watches: w,
		guards: &guards{
			pending: newPending(cfg.MaxPending, cfg.RecvTimeout, cfg.Logger),
			conns:   newConns(cfg.MaxConns, cfg.Logger),
		},
		calls:   newSlots(cfg.MaxCalls, errTooManyCalls("rate-limit calls", cfg.MaxCalls)),
		checks:  newSlots(cfg.MaxHealthChecks, errTooManyCalls("health checks", cfg.MaxHealthChecks)),
		watched: newSlots(cfg.MaxWatches, errTooManyWatches(cfg.MaxWatches)),
	}
	s.grpc.RegisterService(guard(&rlspb.RateLimitService_ServiceDesc, s.guards, s.calls, nil), NewService(cfg.Engine, cfg.Headers, cfg.Logger))
	s.grpc.RegisterService(guard(&healthpb.Health_ServiceDesc, s.guards, s.checks, s.watched), s.health)
	// "" is the server as a whole (what a probe asks by default).
	s.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	s.health.SetServingStatus(rlspb.RateLimitService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	return s, nil
}

// serverOptions are the bounds of cfg, the codec and the panic guards.
func serverOptions(cfg Config) []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ForceServerCodecV2(newCodec()),
		grpc.MaxRecvMsgSize(cfg.MaxRecvBytes),
		grpc.MaxConcurrentStreams(cfg.MaxConcurrentStreams),
		grpc.MaxHeaderListSize(cfg.MaxHeaderListBytes),
		grpc.ConnectionTimeout(cfg.ConnectionTimeout),
		// Envoy's HTTP/2 keepalive pings (connection_keepalive on the
		// cluster) are commonly every 10-60 s even on an idle connection;
		// grpc-go's default (5 min, none without a call) would answer them
		// with GOAWAY too_many_pings and drop the connection.
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true}),
		// Ping idle connections so that a vanished peer's is closed and
		// frees its place under MaxConns; age them out (see
		// Config.MaxConnectionAge).
		grpc.KeepaliveParams(keepalive.ServerParameters{
			Time: time.Minute, Timeout: 20 * time.Second,
			MaxConnectionAge: cfg.MaxConnectionAge, MaxConnectionAgeGrace: cfg.MaxConnectionGrace,
		}),
		grpc.ChainUnaryInterceptor(recoverUnary(cfg.Logger)),
		grpc.ChainStreamInterceptor(recoverStream(cfg.Logger)),
	}
}

// Serve accepts connections on ln, at most MaxConns at once (over every
// listener), until Shutdown; it returns nil then, else the listener's
// error.
func (s *Server) Serve(ln net.Listener) error {
	err := s.grpc.Serve(s.guards.conns.listen(ln))
	if errors.Is(err, grpc.ErrServerStopped) {
		return nil
	}
	return err
}

// Shutdown reports NOT_SERVING on the health service (so that health
// watchers and probes turn away), ends each health watch once it has told
// its client so, stops accepting, lets the calls in flight finish for up
// to timeout, then closes every connection.
func (s *Server) Shutdown(timeout time.Duration) {
	s.health.Shutdown()
	// After health.Shutdown every watch's last or next status is not
	// SERVING: a watch ends as soon as it has sent that.
	s.watches.stop()
	done := make(chan struct{})
	go func() {
		s.grpc.GracefulStop()
		close(done)
	}()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		// A watch whose client does not read its NOT_SERVING, or a
		// call still running: past the grace period the connections are
		// closed under it.
		s.grpc.Stop()
		<-done
	}
}

// errPanicked is what a caller sees of a handler's panic.
var errPanicked = status.Error(codes.Internal, "rls: internal error")

// recoverUnary turns a handler's panic into an Internal error (logged with
// its stack), so that one bad call never takes the server down: grpc-go
// runs handlers on their own goroutines and does not recover them.
func recoverUnary(log *slog.Logger) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
		defer func() {
			if p := recover(); p != nil {
				log.Error("rls: a call panicked", "method", info.FullMethod, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
				resp, err = nil, errPanicked
			}
		}()
		return handler(ctx, req)
	}
}

// recoverStream is recoverUnary for streaming calls (health Watch).
func recoverStream(log *slog.Logger) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) (err error) {
		defer func() {
			if p := recover(); p != nil {
				log.Error("rls: a stream panicked", "method", info.FullMethod, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
				err = errPanicked
			}
		}()
		return handler(srv, ss)
	}
}
