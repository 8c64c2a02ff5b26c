package tests

import (
	"bytes"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// h2Staller is an HTTP/2 connection that opens gRPC calls and never sends
// their request: their headers, nothing more. It answers the server's
// SETTINGS and PINGs, so that keepalive never closes it.
type h2Staller struct {
	t      testing.TB
	mu     sync.Mutex // writes
	fr     *http2.Framer
	hbuf   bytes.Buffer
	enc    *hpack.Encoder
	nextID uint32
	pongs  chan struct{} // one per PING ack
}

func dialStaller(t testing.TB, addr string) *h2Staller {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	s := &h2Staller{t: t, fr: http2.NewFramer(c, c), nextID: 1, pongs: make(chan struct{}, 1)}
	s.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	s.enc = hpack.NewEncoder(&s.hbuf)
	_, err = c.Write([]byte(http2.ClientPreface))
	require.NoError(t, err)
	require.NoError(t, s.fr.WriteSettings())
	go s.read()
	return s
}

func (s *h2Staller) read() {
	for {
		f, err := s.fr.ReadFrame()
		if err != nil {
			return
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				s.write(func() error { return s.fr.WriteSettingsAck() })
			}
		case *http2.PingFrame:
			if f.IsAck() {
				s.pongs <- struct{}{}
			} else {
				s.write(func() error { return s.fr.WritePing(true, f.Data) })
			}
		}
	}
}

func (s *h2Staller) write(f func() error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	_ = f() // fails once the test has closed the connection
}

// stall opens n calls of method.
func (s *h2Staller) stall(method string, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for range n {
		s.hbuf.Reset()
		for _, hf := range [][2]string{
			{":method", "POST"}, {":scheme", "http"}, {":path", method}, {":authority", "rls"},
			{"content-type", "application/grpc"}, {"te", "trailers"},
		} {
			require.NoError(s.t, s.enc.WriteField(hpack.HeaderField{Name: hf[0], Value: hf[1]}))
		}
		require.NoError(s.t, s.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: s.nextID, BlockFragment: s.hbuf.Bytes(), EndHeaders: true}))
		s.nextID += 2
	}
}

// sync returns once the server has read everything sent before it (its
// answer to a PING comes after).
func (s *h2Staller) sync() {
	s.t.Helper()
	s.write(func() error { return s.fr.WritePing(false, [8]byte{'s', 'y', 'n', 'c'}) })
	select {
	case <-s.pongs:
	case <-time.After(10 * time.Second):
		s.t.Fatal("no PING ack within 10 s")
	}
}

// Calls that send their headers and never their request, more than every
// bound of calls in flight (2100 rate-limit calls over three connections,
// 200 health checks over two), refuse none of a legitimate client's
// rate-limit calls and health checks: a call holds a slot only once its
// request has arrived, and past 2048 waiting the oldest is ended.
func TestGRPCStalledCallsDoNotStarve(t *testing.T) {
	t.Parallel()
	s := startRLS(t, true)
	var stallers []*h2Staller
	for range 3 {
		c := dialStaller(t, s.GRPCAddr)
		c.stall("/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit", 700)
		stallers = append(stallers, c)
	}
	for range 2 {
		c := dialStaller(t, s.GRPCAddr)
		c.stall("/grpc.health.v1.Health/Check", 100)
		stallers = append(stallers, c)
	}
	for _, c := range stallers {
		c.sync()
	}
	var failedCalls, failedChecks int
	for i := range 20 {
		resp, err := s.RLS.ShouldRateLimit(ctxT(t, 10*time.Second),
			&rlspb.RateLimitRequest{Domain: "edge", Descriptors: []*rlv3.RateLimitDescriptor{rlsDesc("user", "legit")}})
		if assert.NoError(t, err, "rate-limit call %d", i) {
			assert.Equal(t, rlspb.RateLimitResponse_OK, resp.OverallCode)
			assert.Equal(t, uint32(100-i-1), resp.Statuses[0].LimitRemaining)
		} else {
			failedCalls++
		}
		_, err = s.Health.Check(ctxT(t, 10*time.Second), &healthpb.HealthCheckRequest{})
		if !assert.NoError(t, err, "health check %d", i) {
			failedChecks++
		}
	}
	require.Zero(t, failedCalls+failedChecks, "%d rate-limit calls and %d health checks of 20 failed", failedCalls, failedChecks)
	require.Eventually(t, func() bool { return strings.Contains(s.Output(), "ended the call waiting longest for its request") },
		5*time.Second, 10*time.Millisecond, "past 2048 waiting calls the oldest are ended, and it is logged")
}

// Connections that serve no call, each carrying only a call that never
// sends its request, hold every place under --http-max-conns: a health
// prober's new connection (kubelet's gRPC probe dials one per probe) is
// served all the same, in place of the one idle longest.
func TestGRPCIdleConnectionsGiveWay(t *testing.T) {
	t.Parallel()
	s := startRLS(t, false, "--http-max-conns", "4")
	for range 4 {
		c := dialStaller(t, s.GRPCAddr)
		c.stall("/grpc.health.v1.Health/Check", 1)
		c.sync()
	}
	r, err := s.Health.Check(ctxT(t, 10*time.Second), &healthpb.HealthCheckRequest{})
	require.NoError(t, err, "served, not held in the backlog")
	assert.Equal(t, healthpb.HealthCheckResponse_SERVING, r.Status)
	resp := s.limit(t, 0, rlsDesc("user", "legit"))
	assert.Equal(t, rlspb.RateLimitResponse_OK, resp.OverallCode)
	require.Eventually(t, func() bool { return strings.Contains(s.Output(), "closed the connection idle longest") },
		5*time.Second, 10*time.Millisecond)
}
