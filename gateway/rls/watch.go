package rls

import (
	"context"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// watchMethod is the health service's streaming call: it never ends on its
// own, so it is bounded and ended on shutdown.
const watchMethod = "/grpc.health.v1.Health/Watch"

// watches ends the health Watch streams on shutdown (their number is
// bounded by a slots, see guard).
type watches struct {
	stopCtx  context.Context
	stopFunc context.CancelFunc
}

func newWatches() *watches {
	ctx, cancel := context.WithCancel(context.Background())
	return &watches{stopCtx: ctx, stopFunc: cancel}
}

// errTooManyWatches is what a watch past max gets.
func errTooManyWatches(max int) error {
	return status.Errorf(codes.ResourceExhausted, "rls: too many health watches open (at most %d): use Check, or fewer watchers", max)
}

// errStopping is what a watch ended by shutdown sees, after NOT_SERVING.
var errStopping = status.Error(codes.Unavailable, "rls: shutting down")

// stop ends each watch once it has sent a status other than SERVING (at
// once if it has); call it after health.Server.Shutdown.
func (w *watches) stop() { w.stopFunc() }

// intercept makes a Watch stream end once the server is stopping and its
// client has been told so.
func (w *watches) intercept(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if info.FullMethod != watchMethod {
		return handler(srv, ss)
	}
	ctx, cancel := context.WithCancel(ss.Context())
	defer cancel()
	ws := &watchStream{ServerStream: ss, ctx: ctx, cancel: cancel}
	unhook := context.AfterFunc(w.stopCtx, ws.stopping)
	defer unhook()
	err := handler(srv, ws)
	ws.mu.Lock()
	ended := ws.ended
	ws.mu.Unlock()
	if ended && ss.Context().Err() == nil {
		return errStopping
	}
	return err
}

// watchStream is a Watch stream whose context ends once the server is
// stopping and the client has been sent a status other than SERVING.
type watchStream struct {
	grpc.ServerStream
	ctx    context.Context
	cancel context.CancelFunc

	mu      sync.Mutex
	sent    bool // a status has been sent
	serving bool // the last status sent is SERVING
	stopped bool // the server is stopping
	ended   bool // cancel was called for the stop
}

func (ws *watchStream) Context() context.Context { return ws.ctx }

func (ws *watchStream) SendMsg(m any) error {
	err := ws.ServerStream.SendMsg(m)
	if r, ok := m.(*healthpb.HealthCheckResponse); ok && err == nil {
		ws.mu.Lock()
		ws.sent, ws.serving = true, r.GetStatus() == healthpb.HealthCheckResponse_SERVING
		ws.endIfToldLocked()
		ws.mu.Unlock()
	}
	return err
}

// stopping runs when the server starts stopping.
func (ws *watchStream) stopping() {
	ws.mu.Lock()
	ws.stopped = true
	ws.endIfToldLocked()
	ws.mu.Unlock()
}

func (ws *watchStream) endIfToldLocked() {
	if ws.stopped && ws.sent && !ws.serving && !ws.ended {
		ws.ended = true
		ws.cancel()
	}
}
