package httpcheck

import (
	"bufio"
	"bytes"
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
	var mu sync.Mutex
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(lockedWriter{&mu, &buf}, nil))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := NewServer(h, log)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(LimitListener(ln, max, log))
	}()
	t.Cleanup(func() {
		_ = srv.Close()
		<-done
	})
	return ln.Addr().String(), func() string {
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
	require.NoError(c.t, c.nc.SetDeadline(time.Now().Add(10*time.Second)))
	req := "GET " + path + " HTTP/1.1\r\nHost: check\r\n" + strings.Join(extra, "") + "\r\n"
	_, err := io.WriteString(c.nc, req)
	require.NoError(c.t, err)
	resp, err := http.ReadResponse(c.r, nil)
	require.NoError(c.t, err)
	b, err := io.ReadAll(resp.Body)
	require.NoError(c.t, err)
	return resp, string(b)
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

func TestConnectionLimitRefuses(t *testing.T) {
	addr, logged := serve(t, 2, testMux())
	a, b := dial(t, addr), dial(t, addr)
	for _, c := range []*conn{a, b} { // served: both hold a slot now
		resp, _ := c.get("/ok")
		require.Equal(t, http.StatusOK, resp.StatusCode)
	}
	resp, body := dial(t, addr).get("/ok")
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	assert.Equal(t, "1", resp.Header.Get("Retry-After"))
	assert.Equal(t, "too many connections\n", body)
	assert.Contains(t, logged(), "--http-max-conns reached")

	// Closing one frees its slot (once the server has seen the close).
	require.NoError(t, a.nc.Close())
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, _ := dial(t, addr).get("/ok")
		if resp.StatusCode == http.StatusOK {
			break
		}
		require.True(t, time.Now().Before(deadline), "the slot of a closed connection never came back")
		time.Sleep(10 * time.Millisecond)
	}
}
