package rls

import (
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"log/slog"
	"net"
	"net/url"
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
	"google.golang.org/grpc"
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
	messages map[uint32]string     // grpc-message by stream
	changed  chan struct{}         // closed and replaced on each change
	goAway   bool
	closed   bool // the server closed the connection
}

func dialRaw(t testing.TB, addr string) *rawConn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	r := &rawConn{t: t, conn: c, nextID: 1, statuses: map[uint32]codes.Code{}, messages: map[uint32]string{}, changed: make(chan struct{})}
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
			var code, msg string
			for _, hf := range f.RegularFields() {
				switch hf.Name {
				case "grpc-status":
					code = hf.Value
				case "grpc-message":
					msg, _ = url.PathUnescape(hf.Value)
				}
			}
			if code != "" {
				n, _ := strconv.Atoi(code)
				r.update(func() { r.statuses[f.StreamID], r.messages[f.StreamID] = codes.Code(n), msg })
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

// message is stream id's grpc-message, once its status has come.
func (r *rawConn) message(id uint32) string {
	r.t.Helper()
	r.status(id)
	r.smu.Lock()
	defer r.smu.Unlock()
	return r.messages[id]
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

// count is the number of streams among ids whose status is c (those
// without a status yet do not count).
func (r *rawConn) count(c codes.Code, ids []uint32) int {
	r.smu.Lock()
	defer r.smu.Unlock()
	n := 0
	for _, id := range ids {
		if got, ok := r.statuses[id]; ok && got == c {
			n++
		}
	}
	return n
}

// lockedWriter serialises the writes of a log handler into a buffer.
type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// blocking is a RateLimitService whose calls wait until release is closed.
type blocking struct {
	rlspb.UnimplementedRateLimitServiceServer
	entered chan struct{}
	release chan struct{}
}

func (b *blocking) ShouldRateLimit(context.Context, *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error) {
	b.entered <- struct{}{}
	<-b.release
	return &rlspb.RateLimitResponse{OverallCode: rlspb.RateLimitResponse_OK}, nil
}

// Past MaxCalls decisions in flight, over all connections, a new call is
// refused at once; once they end, their slots are back.
func TestCallsBounded(t *testing.T) {
	const max = 3
	cfg, err := Config{Engine: gateway.New(gateway.Config{}), MaxCalls: max}.withDefaults()
	require.NoError(t, err)
	p := newPending(cfg.MaxPending, cfg.RecvTimeout, cfg.Logger)
	s := newSlots(max, errTooManyCalls("rate-limit calls", max))
	svc := &blocking{entered: make(chan struct{}, max), release: make(chan struct{})}
	gs := grpc.NewServer(serverOptions(cfg)...)
	gs.RegisterService(guard(&rlspb.RateLimitService_ServiceDesc, &guards{pending: p}, s, nil), svc)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = gs.Serve(ln) }()
	defer gs.Stop()
	ca, cb := dial(t, ln.Addr().String()), dial(t, ln.Addr().String())
	a, b := rlspb.NewRateLimitServiceClient(ca), rlspb.NewRateLimitServiceClient(cb)

	var wg sync.WaitGroup
	for i := range max {
		c := a
		if i%2 == 1 {
			c = b
		}
		wg.Go(func() {
			_, err := c.ShouldRateLimit(ctxT(t), rlsReq("held"))
			assert.NoError(t, err)
		})
		<-svc.entered
	}
	assert.Equal(t, max, s.inFlight())
	_, err = b.ShouldRateLimit(ctxT(t), rlsReq("past"))
	assert.Equal(t, codes.ResourceExhausted, status.Code(err), "%v", err)
	assert.ErrorContains(t, err, "rls: too many rate-limit calls in flight (at most 3)")
	// A call to no method is not counted.
	err = cb.Invoke(ctxT(t), "/envoy.service.ratelimit.v3.RateLimitService/Nothing", rlsReq("past"), &rlspb.RateLimitResponse{})
	assert.Equal(t, codes.Unimplemented, status.Code(err), "%v", err)

	close(svc.release)
	wg.Wait()
	assert.Zero(t, s.inFlight())
	_, err = a.ShouldRateLimit(ctxT(t), rlsReq("after"))
	require.NoError(t, err, "the slots came back")
	assert.Zero(t, s.inFlight())
	assert.Zero(t, p.waiting())
}

// Calls that send their headers and no request, or part of one, hold no
// slot: past every bound of them (MaxPending, MaxCalls, MaxHealthChecks,
// MaxWatches), over several connections, the rate-limit calls, health
// checks and health watches of other clients are served. The calls waiting
// longest are ended to make room; at most MaxPending wait.
func TestStalledCallsDoNotStarve(t *testing.T) {
	const pendingMax = 4
	h := newHarness(t, func(o *options) {
		o.cfg.MaxCalls, o.cfg.MaxHealthChecks, o.cfg.MaxWatches = 1, 1, 1
		o.cfg.MaxPending = pendingMax
		o.cfg.RecvTimeout = time.Minute
	})
	a, b := dialRaw(t, h.addr), dialRaw(t, h.addr)
	var onA, onB []uint32
	for i := range 4 {
		id := a.open(rlsMethod)
		if i%2 == 0 {
			a.partial(id, 1000)
		}
		onA = append(onA, id)
		onB = append(onB, b.open(rlsMethod))
	}
	onA = append(onA, a.open(checkMethod), a.open(checkMethod), a.open(watchMethod))
	onB = append(onB, b.open(checkMethod), b.open(watchMethod))
	stalled := len(onA) + len(onB)
	evicted := func() int { return a.count(codes.ResourceExhausted, onA) + b.count(codes.ResourceExhausted, onB) }
	require.Eventually(t, func() bool { return evicted() == stalled-pendingMax }, 5*time.Second, 5*time.Millisecond,
		"the calls waiting longest are ended")
	assert.Equal(t, pendingMax, h.srv.guards.pending.waiting())
	assert.Zero(t, h.srv.calls.inFlight()+h.srv.checks.inFlight()+h.srv.watched.inFlight(), "no slot is held")

	for i := range 3 {
		resp := h.call(t, 0, desc("user", "legit"))
		assert.Equal(t, uint32(2-i), resp.Statuses[0].LimitRemaining)
		r, err := h.health.Check(ctxT(t), &healthpb.HealthCheckRequest{})
		require.NoError(t, err)
		assert.Equal(t, healthpb.HealthCheckResponse_SERVING, r.Status)
	}
	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	w, err := h.health.Watch(ctx, &healthpb.HealthCheckRequest{})
	require.NoError(t, err)
	r, err := w.Recv()
	require.NoError(t, err)
	assert.Equal(t, healthpb.HealthCheckResponse_SERVING, r.Status)

	// The first legitimate call made its room by ending one more stalled
	// call; the others found it free.
	require.Eventually(t, func() bool { return evicted() == stalled-pendingMax+1 }, 5*time.Second, 5*time.Millisecond)
	assert.Equal(t, pendingMax-1, h.srv.guards.pending.waiting())
	assert.Zero(t, a.count(codes.OK, onA)+b.count(codes.OK, onB), "no stalled call was answered")
}

// The oldest waiting call is the one ended, with RESOURCE_EXHAUSTED, and
// the eviction is logged.
func TestPendingEvictsOldest(t *testing.T) {
	var mu sync.Mutex
	var logged bytes.Buffer
	h := newHarness(t, func(o *options) {
		o.cfg.MaxPending = 2
		o.cfg.RecvTimeout = time.Minute
		o.cfg.Logger = slog.New(slog.NewTextHandler(lockedWriter{&mu, &logged}, nil))
	})
	c := dialRaw(t, h.addr)
	var ids []uint32
	for i := range 4 {
		ids = append(ids, c.open(rlsMethod))
		want := min(i+1, 2)
		require.Eventually(t, func() bool {
			return h.srv.guards.pending.waiting() == want && c.count(codes.ResourceExhausted, ids) == i+1-want
		},
			5*time.Second, 5*time.Millisecond)
	}
	for i, id := range ids[:2] {
		assert.Equal(t, codes.ResourceExhausted, c.status(id), "call %d", i)
		assert.Contains(t, c.message(id), "rls: the request was not received before 2 newer calls waited for theirs")
	}
	assert.Zero(t, c.count(codes.ResourceExhausted, ids[2:]), "the newest wait")
	mu.Lock()
	out := logged.String()
	mu.Unlock()
	assert.Contains(t, out, "ended the call waiting longest for its request")
}

// A call whose request does not arrive within RecvTimeout ends, and so do
// health calls' (Check and Watch).
func TestStalledCallsTimeOut(t *testing.T) {
	const timeout = 200 * time.Millisecond
	h := newHarness(t, func(o *options) { o.cfg.RecvTimeout = timeout })
	c := dialRaw(t, h.addr)
	start := time.Now()
	stalled := c.open(rlsMethod)
	c.partial(stalled, 100)
	check := c.open(checkMethod)
	watch := c.open(watchMethod)
	for _, id := range []uint32{stalled, check, watch} {
		assert.Equal(t, codes.DeadlineExceeded, c.status(id), "stream %d", id)
		assert.Contains(t, c.message(id), "rls: the request was not received within 200ms")
	}
	assert.GreaterOrEqual(t, time.Since(start), timeout)
	require.Eventually(t, func() bool { return h.srv.guards.pending.waiting() == 0 }, 5*time.Second, 5*time.Millisecond)
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
	require.Eventually(t, func() bool { return h.srv.guards.pending.waiting() == 1 }, 5*time.Second, 5*time.Millisecond)
	c.await("GOAWAY", func() bool { return c.goAway })
	c.await("close", func() bool { return c.closed })
	require.Eventually(t, func() bool { return h.srv.guards.pending.waiting() == 0 }, 5*time.Second, 5*time.Millisecond)
}
