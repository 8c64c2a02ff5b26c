package httpcheck

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// serve starts NewServer on a LimitListener of max connections.
func serve(t *testing.T, max int, h http.Handler) (addr string, logged func() string) {
	t.Helper()
	addr, _, logged = serveLimited(t, max, h)
	return addr, logged
}

// serveLimited is serve, with the listener.
func serveLimited(t *testing.T, max int, h http.Handler) (addr string, l *limitListener, logged func() string) {
	t.Helper()
	var mu sync.Mutex
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(lockedWriter{&mu, &buf}, nil))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := NewServer(h, log)
	l = LimitListener(srv, ln, max, log).(*limitListener)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(l)
	}()
	t.Cleanup(func() {
		_ = srv.Close()
		<-done
	})
	return ln.Addr().String(), l, func() string {
		mu.Lock()
		defer mu.Unlock()
		return buf.String()
	}
}

// conn is a raw keep-alive HTTP/1.1 connection.
type conn struct {
	t  *testing.T
	nc net.Conn
	r  *bufio.Reader
}

func dial(t *testing.T, addr string) *conn {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	require.NoError(t, err)
	t.Cleanup(func() { _ = nc.Close() })
	return &conn{t: t, nc: nc, r: bufio.NewReader(nc)}
}

// get sends GET path with extra header lines and reads the answer.
func (c *conn) get(path string, extra ...string) (*http.Response, string) {
	c.t.Helper()
	c.send(path, extra...)
	return c.read()
}

// send sends GET path with extra header lines.
func (c *conn) send(path string, extra ...string) {
	c.t.Helper()
	require.NoError(c.t, c.nc.SetDeadline(time.Now().Add(10*time.Second)))
	req := "GET " + path + " HTTP/1.1\r\nHost: check\r\n" + strings.Join(extra, "") + "\r\n"
	_, err := io.WriteString(c.nc, req)
	require.NoError(c.t, err)
}

// read reads an answer.
func (c *conn) read() (*http.Response, string) {
	c.t.Helper()
	resp, err := http.ReadResponse(c.r, nil)
	require.NoError(c.t, err)
	b, err := io.ReadAll(resp.Body)
	require.NoError(c.t, err)
	return resp, string(b)
}

// closedByServer reports whether the server has closed c: a read ends
// with EOF (or a reset) instead of waiting.
func (c *conn) closedByServer() bool {
	c.t.Helper()
	require.NoError(c.t, c.nc.SetReadDeadline(time.Now().Add(10*time.Second)))
	_, err := c.r.ReadByte()
	var ne net.Error
	return err != nil && !(errors.As(err, &ne) && ne.Timeout())
}

func testMux() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/ok", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })
	mux.HandleFunc("/panic", func(http.ResponseWriter, *http.Request) { panic("boom") })
	return mux
}

// headerBlock is a GET of path whose header block, request line and final
// empty line included, is n bytes.
func headerBlock(path string, n int) string {
	head := "GET " + path + " HTTP/1.1\r\nHost: check\r\nX-Pad: "
	const tail = "\r\n\r\n"
	return head + strings.Repeat("a", n-len(head)-len(tail)) + tail
}

func TestOversizedHeaderIs431(t *testing.T) {
	addr, _ := serve(t, 10, testMux())
	resp, _ := dial(t, addr).get("/ok", "X-Big: "+strings.Repeat("a", 2*MaxHeaderBytes)+"\r\n")
	assert.Equal(t, http.StatusRequestHeaderFieldsTooLarge, resp.StatusCode)
	resp, _ = dial(t, addr).get("/ok", "X-Small: "+strings.Repeat("a", MaxHeaderBytes/2)+"\r\n")
	assert.Equal(t, http.StatusOK, resp.StatusCode)
}

// The bound is MaxHeaderBytes exactly, not net/http's MaxHeaderBytes+4096.
func TestHeaderBoundAtItsEdge(t *testing.T) {
	addr, _ := serve(t, 10, testMux())
	for n, want := range map[int]int{
		MaxHeaderBytes:     http.StatusOK,
		MaxHeaderBytes + 1: http.StatusRequestHeaderFieldsTooLarge,
	} {
		req := headerBlock("/ok", n)
		require.Len(t, req, n)
		c := dial(t, addr)
		require.NoError(t, c.nc.SetDeadline(time.Now().Add(10*time.Second)))
		_, err := io.WriteString(c.nc, req)
		require.NoError(t, err)
		resp, err := http.ReadResponse(c.r, nil)
		require.NoError(t, err)
		resp.Body.Close()
		assert.Equal(t, want, resp.StatusCode, "a header block of %d bytes", n)
	}
}

func TestPanicIs500AndTheServerGoesOn(t *testing.T) {
	addr, logged := serve(t, 10, testMux())
	c := dial(t, addr)
	resp, body := c.get("/panic")
	assert.Equal(t, http.StatusInternalServerError, resp.StatusCode)
	assert.Equal(t, "internal error\n", body)
	resp, body = c.get("/ok")
	assert.Equal(t, http.StatusOK, resp.StatusCode, "same connection still served")
	assert.Equal(t, "ok", body)
	out := logged()
	assert.Equal(t, 1, strings.Count(out, "\n"), out)
	assert.Contains(t, out, `a handler panicked; answered 500`)
	assert.Contains(t, out, `panic=boom`)
}

// At --http-max-conns, a new connection is served in place of the one that
// has waited longest for a request: kept alive after an answer, or never
// having sent one. A gateway's fresh connection is never refused because
// idle or silent ones hold every place.
func TestWaitingConnectionsGiveWay(t *testing.T) {
	addr, l, logged := serveLimited(t, 2, testMux())
	var a, b *conn
	for i, c := range []**conn{&a, &b} {
		*c = dial(t, addr)
		resp, _ := (*c).get("/ok")
		require.Equal(t, http.StatusOK, resp.StatusCode)
		// The answer is written before net/http marks the connection
		// idle: wait for it, so that a is the one waiting longest.
		require.Eventually(t, func() bool { held, waiting := l.counts(); return held == i+1 && waiting == i+1 },
			5*time.Second, 5*time.Millisecond)
	}

	c := dial(t, addr)
	resp, body := c.get("/ok")
	assert.Equal(t, http.StatusOK, resp.StatusCode, "served, not refused")
	assert.Equal(t, "ok", body)
	assert.True(t, a.closedByServer(), "the connection idle longest gave way")
	resp, _ = b.get("/ok")
	assert.Equal(t, http.StatusOK, resp.StatusCode, "the other is kept")
	assert.Contains(t, logged(), "closed the connection waiting longest for a request, to admit a new one: --http-max-conns reached")
	assert.NotContains(t, logged(), "refused a connection")

	// Connections that never send a request give way the same.
	s1 := dial(t, addr)
	dial(t, addr)
	d := dial(t, addr)
	resp, _ = d.get("/ok")
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.True(t, s1.closedByServer(), "the silent connection waiting longest gave way")
	held, _ := l.counts()
	assert.Equal(t, 2, held, "the bound holds")
}

// Only when every connection is busy with a request is a new one refused:
// 503, Retry-After, the one-line body, logged.
func TestConnectionLimitRefuses(t *testing.T) {
	release := make(chan struct{})
	entered := make(chan struct{}, 2)
	mux := http.NewServeMux()
	mux.Handle("/", testMux())
	mux.HandleFunc("/block", func(w http.ResponseWriter, _ *http.Request) {
		entered <- struct{}{}
		<-release
		_, _ = io.WriteString(w, "done")
	})
	addr, l, logged := serveLimited(t, 2, mux)
	a, b := dial(t, addr), dial(t, addr)
	for _, c := range []*conn{a, b} {
		c.send("/block")
		<-entered
	}
	resp, body := dial(t, addr).get("/ok")
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	assert.Equal(t, "1", resp.Header.Get("Retry-After"))
	assert.Equal(t, "too many connections\n", body)
	assert.Contains(t, logged(), "refused a connection: --http-max-conns reached")

	close(release)
	for _, c := range []*conn{a, b} {
		resp, body := c.read()
		assert.Equal(t, http.StatusOK, resp.StatusCode)
		assert.Equal(t, "done", body)
	}
	// Closing one gives its place back.
	require.NoError(t, a.nc.Close())
	require.Eventually(t, func() bool { held, _ := l.counts(); return held == 1 }, 5*time.Second, 5*time.Millisecond)
	resp, _ = dial(t, addr).get("/ok")
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	held, _ := l.counts()
	assert.Equal(t, 2, held)
}

// A ConnState hook set before LimitListener still runs.
func TestLimitListenerKeepsConnStateHook(t *testing.T) {
	var mu sync.Mutex
	var states []http.ConnState
	srv := NewServer(testMux(), nil)
	srv.ConnState = func(_ net.Conn, st http.ConnState) {
		mu.Lock()
		defer mu.Unlock()
		states = append(states, st)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	l := LimitListener(srv, ln, 1, nil).(*limitListener)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(l)
	}()
	defer func() {
		_ = srv.Close()
		<-done
	}()
	resp, _ := dial(t, ln.Addr().String()).get("/ok")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(states) >= 3
	}, 5*time.Second, 5*time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, []http.ConnState{http.StateNew, http.StateActive, http.StateIdle}, states[:3])
}
