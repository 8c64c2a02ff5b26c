package rls

import (
	"context"
	"testing"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// awaitConns waits until the server holds held connections, idle of them
// idle.
func awaitConns(t *testing.T, h *harness, held, idle int) {
	t.Helper()
	require.Eventually(t, func() bool {
		gotHeld, gotIdle := h.srv.guards.conns.counts()
		return gotHeld == held && gotIdle == idle
	}, 5*time.Second, 5*time.Millisecond, "want %d connections, %d idle", held, idle)
}

// Connections past MaxConns that serve no call, idle or carrying only
// calls that never send their request, do not lock a new client out: a
// health prober's new connection is served in place of the one idle
// longest.
func TestIdleConnectionsGiveWay(t *testing.T) {
	h := newHarness(t, func(o *options) {
		o.cfg.MaxConns = 2
		o.cfg.RecvTimeout = time.Minute
	})
	waiting := func(n int) func() bool { return func() bool { return h.srv.guards.pending.waiting() == n } }
	a := dialRaw(t, h.addr)
	a.partial(a.open(rlsMethod), 100)
	require.Eventually(t, waiting(1), 5*time.Second, 5*time.Millisecond)
	b := dialRaw(t, h.addr)
	b.open(checkMethod)
	require.Eventually(t, waiting(2), 5*time.Second, 5*time.Millisecond)

	probe := healthpb.NewHealthClient(dial(t, h.addr)) // a connection of its own
	r, err := probe.Check(ctxT(t), &healthpb.HealthCheckRequest{})
	require.NoError(t, err, "served, not held in the backlog")
	assert.Equal(t, healthpb.HealthCheckResponse_SERVING, r.Status)
	a.await("close", func() bool { return a.closed })
	assert.False(t, b.closed, "only the one idle longest gave way")
	awaitConns(t, h, 2, 2)
	h.call(t, 0, desc("user", "after")) // the harness's own connection, in b's place
}

// A connection serving a call (an open health watch) keeps its place:
// while every one does, a new connection waits until one turns idle.
func TestBusyConnectionsKeepTheirPlace(t *testing.T) {
	h := newHarness(t, func(o *options) { o.cfg.MaxConns = 1 })
	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	w, err := h.health.Watch(ctx, &healthpb.HealthCheckRequest{})
	require.NoError(t, err)
	_, err = w.Recv()
	require.NoError(t, err)
	awaitConns(t, h, 1, 0)

	other := rlspb.NewRateLimitServiceClient(dial(t, h.addr))
	short, cancelShort := context.WithTimeout(ctxT(t), 300*time.Millisecond)
	defer cancelShort()
	_, err = other.ShouldRateLimit(short, rlsReq("lou"))
	assert.Equal(t, codes.DeadlineExceeded, status.Code(err), "the second connection is not served: %v", err)

	cancel() // the watch ends: its connection is idle, and gives way
	resp, err := other.ShouldRateLimit(ctxT(t), rlsReq("lou"), grpc.WaitForReady(true))
	require.NoError(t, err, "served once the first turned idle")
	assert.Equal(t, uint32(2), resp.Statuses[0].LimitRemaining, "the call held back charged nothing")
	awaitConns(t, h, 1, 1)
}
