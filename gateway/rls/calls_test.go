package rls

import (
	"bytes"
	"context"
	"encoding/binary"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/cellserver/cellserver/gateway"
	"github.com/cellserver/cellserver/service"
	"github.com/cellserver/cellserver/store"
)

const (
	rlsMethod   = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"
	checkMethod = "/grpc.health.v1.Health/Check"
)

// rawConn is an HTTP/2 client that writes gRPC frames by hand, so that a
// call can stop anywhere: after its headers, inside its message.
type rawConn struct {
	t    testing.TB
	conn net.Conn

	mu     sync.Mutex // writes
	fr     *http2.Framer
	hbuf   bytes.Buffer
	enc    *hpack.Encoder
	nextID uint32

	smu      sync.Mutex
	statuses map[uint32]codes.Code // grpc-status by stream
	changed  chan struct{}         // closed and replaced on each change
	goAway   bool
	closed   bool // the server closed the connection
}

func dialRaw(t testing.TB, addr string) *rawConn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	r := &rawConn{t: t, conn: c, nextID: 1, statuses: map[uint32]codes.Code{}, changed: make(chan struct{})}
	r.fr = http2.NewFramer(c, c)
	r.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	r.enc = hpack.NewEncoder(&r.hbuf)
	_, err = c.Write([]byte(http2.ClientPreface))
	require.NoError(t, err)
	require.NoError(t, r.fr.WriteSettings())
	go r.read()
	return r
}

// read answers the server's SETTINGS and PINGs (as the adversary did, so
// that keepalive never closes the connection) and records the statuses.
func (r *rawConn) read() {
	for {
		f, err := r.fr.ReadFrame()
		if err != nil {
			r.update(func() { r.closed = true })
			return
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				r.write(func() error { return r.fr.WriteSettingsAck() })
			}
		case *http2.PingFrame:
			if !f.IsAck() {
				r.write(func() error { return r.fr.WritePing(true, f.Data) })
			}
		case *http2.GoAwayFrame:
			r.update(func() { r.goAway = true })
		case *http2.MetaHeadersFrame:
			if v := f.PseudoValue("status"); v != "" && v != "200" {
				r.t.Errorf("stream %d: HTTP status %s", f.StreamID, v)
			}
			if v := f.RegularFields(); len(v) > 0 {
				for _, hf := range v {
					if hf.Name == "grpc-status" {
						n, _ := strconv.Atoi(hf.Value)
						r.update(func() { r.statuses[f.StreamID] = codes.Code(n) })
					}
				}
			}
		}
	}
}

func (r *rawConn) update(f func()) {
	r.smu.Lock()
	f()
	close(r.changed)
	r.changed = make(chan struct{})
	r.smu.Unlock()
}

// await waits until cond holds (under the state lock) or 5 s pass.
func (r *rawConn) await(what string, cond func() bool) {
	r.t.Helper()
	deadline := time.After(5 * time.Second)
	for {
		r.smu.Lock()
		ok, ch := cond(), r.changed
		r.smu.Unlock()
		if ok {
			return
		}
		select {
		case <-ch:
		case <-deadline:
			r.t.Fatalf("raw connection: no %s within 5 s", what)
		}
	}
}

// status waits for stream id's grpc-status.
func (r *rawConn) status(id uint32) codes.Code {
	r.t.Helper()
	var c codes.Code
	r.await("status for stream "+strconv.Itoa(int(id)), func() bool {
		var ok bool
		c, ok = r.statuses[id]
		return ok
	})
	return c
}

func (r *rawConn) write(f func() error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	_ = f() // a write after the server closed fails; the test sees it otherwise
}

// open starts a call of method: its headers, nothing more.
func (r *rawConn) open(method string) uint32 {
	r.mu.Lock()
	defer r.mu.Unlock()
	id := r.nextID
	r.nextID += 2
	r.hbuf.Reset()
	for _, hf := range [][2]string{
		{":method", "POST"}, {":scheme", "http"}, {":path", method}, {":authority", "rls"},
		{"content-type", "application/grpc"}, {"te", "trailers"},
	} {
		require.NoError(r.t, r.enc.WriteField(hpack.HeaderField{Name: hf[0], Value: hf[1]}))
	}
	require.NoError(r.t, r.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: r.hbuf.Bytes(), EndHeaders: true}))
	return id
}

// partial sends a message prefix announcing n bytes, and n-1 of them.
func (r *rawConn) partial(id uint32, n int) {
	b := make([]byte, 5+n-1)
	binary.BigEndian.PutUint32(b[1:5], uint32(n))
	r.write(func() error { return r.fr.WriteData(id, false, b) })
}

func (r *rawConn) reset(id uint32) {
	r.write(func() error { return r.fr.WriteRSTStream(id, http2.ErrCodeCancel) })
}

func rlsReq(user string) *rlspb.RateLimitRequest {
	return &rlspb.RateLimitRequest{Domain: "rls", Descriptors: []*rlv3.RateLimitDescriptor{desc("user", user)}}
}

// Past MaxCalls, over all connections, a new call is refused at once;
// however the calls holding the slots end, their slots come back.
func TestCallsBounded(t *testing.T) {
	const max = 3
	h := newHarness(t, func(o *options) { o.cfg.MaxCalls = max; o.cfg.RecvTimeout = time.Minute })
	a, b := dialRaw(t, h.addr), dialRaw(t, h.addr)
	s1 := a.open(rlsMethod)
	a.partial(s1, 1000) // a message that never completes
	a.open(rlsMethod)   // headers only
	s3 := b.open(rlsMethod)
	b.partial(s3, 1000)
	require.Eventually(t, func() bool { return h.srv.calls.inFlight() == max }, 5*time.Second, 5*time.Millisecond)

	_, err := h.rls.ShouldRateLimit(ctxT(t), rlsReq("max"))
	assert.Equal(t, codes.ResourceExhausted, status.Code(err), "%v", err)
	assert.ErrorContains(t, err, "too many rate-limit calls")
	s4 := b.open(rlsMethod)
	assert.Equal(t, codes.ResourceExhausted, b.status(s4), "refused at once, with nothing sent")
	// Health checks have their own bound.
	r, err := h.health.Check(ctxT(t), &healthpb.HealthCheckRequest{})
	require.NoError(t, err)
	assert.Equal(t, healthpb.HealthCheckResponse_SERVING, r.Status)
	// A call to no method holds no slot.
	err = h.conn.Invoke(ctxT(t), "/envoy.service.ratelimit.v3.RateLimitService/Nothing", rlsReq("max"), &rlspb.RateLimitResponse{})
	assert.Equal(t, codes.Unimplemented, status.Code(err), "%v", err)

	a.reset(s1) // RST_STREAM
	require.Eventually(t, func() bool { return h.srv.calls.inFlight() == max-1 }, 5*time.Second, 5*time.Millisecond)
	require.NoError(t, a.conn.Close()) // s2 goes with its connection
	require.Eventually(t, func() bool { return h.srv.calls.inFlight() == max-2 }, 5*time.Second, 5*time.Millisecond)
	b.reset(s3)
	require.Eventually(t, func() bool { return h.srv.calls.inFlight() == 0 }, 5*time.Second, 5*time.Millisecond)

	// max calls at once, then more, all served: no slot leaked.
	var wg sync.WaitGroup
	for i := range max {
		wg.Go(func() {
			_, err := h.rls.ShouldRateLimit(ctxT(t), rlsReq("after"+strconv.Itoa(i)))
			assert.NoError(t, err)
		})
	}
	wg.Wait()
	resp := h.call(t, 0, desc("user", "max"))
	assert.Equal(t, uint32(2), resp.Statuses[0].LimitRemaining, "the refused call charged nothing")
	assert.Zero(t, h.srv.calls.inFlight())
}

// A call whose request does not arrive within RecvTimeout ends, freeing
// its slot; so do health calls (Check counted apart, Watch by MaxWatches).
func TestStalledCallsTimeOut(t *testing.T) {
	const timeout = 200 * time.Millisecond
	h := newHarness(t, func(o *options) {
		o.cfg.MaxCalls, o.cfg.MaxHealthChecks, o.cfg.MaxWatches = 1, 1, 1
		o.cfg.RecvTimeout = timeout
	})
	c := dialRaw(t, h.addr)
	start := time.Now()
	stalled := c.open(rlsMethod)
	c.partial(stalled, 100)
	check := c.open(checkMethod)
	watch := c.open(watchMethod)
	require.Eventually(t, func() bool { return h.srv.calls.inFlight() == 1 && h.srv.checks.inFlight() == 1 },
		5*time.Second, 5*time.Millisecond)
	refused := c.open(rlsMethod)
	assert.Equal(t, codes.ResourceExhausted, c.status(refused))
	for _, id := range []uint32{stalled, check, watch} {
		assert.Equal(t, codes.DeadlineExceeded, c.status(id), "stream %d", id)
	}
	assert.GreaterOrEqual(t, time.Since(start), timeout)
	require.Eventually(t, func() bool { return h.srv.calls.inFlight() == 0 && h.srv.checks.inFlight() == 0 },
		5*time.Second, 5*time.Millisecond)
	h.call(t, 0, desc("user", "slow"))
	_, err := h.health.Check(ctxT(t), &healthpb.HealthCheckRequest{})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	w, err := h.health.Watch(ctx, &healthpb.HealthCheckRequest{})
	require.NoError(t, err)
	_, err = w.Recv()
	require.NoError(t, err, "the watch slot came back")
}

// A handler's panic gives its slot back.
func TestPanicFreesSlot(t *testing.T) {
	st, err := store.New(store.Config{Shards: 1, Clock: &store.Clock{}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	// No policies: the engine panics.
	srv, err := New(Config{Engine: gateway.New(gateway.Config{Service: service.New(service.Config{Store: st})}), MaxCalls: 1})
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = srv.Serve(ln) }()
	defer srv.Shutdown(time.Second)
	c := rlspb.NewRateLimitServiceClient(dial(t, ln.Addr().String()))
	for i := range 3 {
		_, err := c.ShouldRateLimit(ctxT(t), rlsReq("x"))
		assert.Equal(t, codes.Internal, status.Code(err), "call %d: %v", i, err)
	}
	assert.Zero(t, srv.calls.inFlight())
}

// A connection past MaxConnectionAge is sent GOAWAY, and closed after the
// grace with its stalled calls.
func TestConnectionAged(t *testing.T) {
	h := newHarness(t, func(o *options) {
		o.cfg.MaxConnectionAge, o.cfg.MaxConnectionGrace = 200*time.Millisecond, 200*time.Millisecond
		o.cfg.RecvTimeout = time.Minute
	})
	c := dialRaw(t, h.addr)
	c.partial(c.open(rlsMethod), 100)
	require.Eventually(t, func() bool { return h.srv.calls.inFlight() == 1 }, 5*time.Second, 5*time.Millisecond)
	c.await("GOAWAY", func() bool { return c.goAway })
	c.await("close", func() bool { return c.closed })
	require.Eventually(t, func() bool { return h.srv.calls.inFlight() == 0 }, 5*time.Second, 5*time.Millisecond)
}
