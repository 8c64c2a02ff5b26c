// Package tests holds cellserver's end-to-end tests: they build the real
// binary once, start it on free loopback ports and talk to it over TCP, with
// go-redis, raw RESP bytes and redis-cli.
package tests

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// binPath is the cellserver binary built by TestMain.
var binPath string

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "cellserver-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e: mkdir temp:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	binPath = filepath.Join(dir, "cellserver")
	args := []string{"build", "-o", binPath}
	env := append(os.Environ(), "CGO_ENABLED=0")
	// CELLSERVER_E2E_RACE=1 builds the server with the race detector (needs
	// cgo), so the e2e load also hunts data races inside the server.
	if os.Getenv("CELLSERVER_E2E_RACE") == "1" {
		args = append(args, "-race")
		env = append(os.Environ(), "CGO_ENABLED=1")
	}
	cmd := exec.Command("go", append(args, "./cmd/cellserver")...)
	cmd.Dir = ".."
	cmd.Env = env
	if out, err := cmd.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: BUILD OF ./cmd/cellserver FAILED: %v\n%s\n", err, out)
		return 1
	}
	return m.Run()
}

// conformanceDir returns the conformance vector folder, failing the test if
// it is missing: the vectors are the contract and are never skipped.
func conformanceDir(t testing.TB) string {
	t.Helper()
	dir := os.Getenv("CELLSERVER_CONFORMANCE_DIR")
	if dir == "" {
		dir = filepath.Join("..", "conformance")
	}
	if _, err := os.Stat(filepath.Join(dir, "README.md")); err != nil {
		t.Fatalf("conformance vectors not found in %s (set CELLSERVER_CONFORMANCE_DIR): %v", dir, err)
	}
	return dir
}

// lockedBuffer collects the server's stderr.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// server is one running cellserver process.
type server struct {
	t       testing.TB
	Addr    string
	Port    int
	cmd     *exec.Cmd
	stderr  *lockedBuffer
	exited  chan struct{} // closed when the process has exited
	waitErr error         // valid after exited is closed

	stopOnce sync.Once
	exitCode int
}

// freePort returns a loopback port that was free a moment ago.
func freePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := ln.Addr().(*net.TCPAddr).Port
	require.NoError(t, ln.Close())
	return port
}

// startServer starts cellserver on a free loopback port with extra flags and
// waits until it answers. The process is stopped with SIGTERM at cleanup.
func startServer(t testing.TB, extraArgs ...string) *server {
	t.Helper()
	return startServerOn(t, "127.0.0.1", extraArgs...)
}

// startServerOn is startServer listening on bindHost (e.g. "0.0.0.0"); Addr
// is still the loopback address.
func startServerOn(t testing.TB, bindHost string, extraArgs ...string) *server {
	t.Helper()
	// Every server gets its own data dir unless told otherwise: the default
	// ("cellserver-data" in the working directory) would be shared.
	if !hasFlag(extraArgs, "--data-dir") && !hasFlag(extraArgs, "--in-memory") {
		extraArgs = append([]string{"--data-dir", t.TempDir()}, extraArgs...)
	}
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		s, err := tryStartServer(t, bindHost, extraArgs)
		if err == nil {
			return s
		}
		lastErr = err
	}
	t.Fatalf("cellserver did not start: %v", lastErr)
	return nil
}

func hasFlag(args []string, flag string) bool {
	for _, a := range args {
		if a == flag || strings.HasPrefix(a, flag+"=") {
			return true
		}
	}
	return false
}

func tryStartServer(t testing.TB, bindHost string, extraArgs []string) (*server, error) {
	return tryStartServerVia(t, nil, bindHost, extraArgs)
}

// tryStartServerVia is tryStartServer run through a wrapper command that
// execs the server (e.g. prlimit), so that the process is still the server.
func tryStartServerVia(t testing.TB, wrap []string, bindHost string, extraArgs []string) (*server, error) {
	port := freePort(t)
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	s := &server{t: t, Addr: addr, Port: port, stderr: &lockedBuffer{}, exited: make(chan struct{})}
	args := append([]string{"--addr", net.JoinHostPort(bindHost, strconv.Itoa(port))}, extraArgs...)
	argv := append(append(append([]string(nil), wrap...), binPath), args...)
	s.cmd = exec.Command(argv[0], argv[1:]...)
	s.cmd.Stderr = s.stderr
	s.cmd.Stdout = s.stderr
	if err := s.cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		s.waitErr = s.cmd.Wait()
		close(s.exited)
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		select {
		case <-s.exited:
			return nil, fmt.Errorf("process exited early (%v); output:\n%s", s.waitErr, s.stderr.String())
		default:
		}
		if pingRaw(addr) {
			break
		}
		if time.Now().After(deadline) {
			_ = s.cmd.Process.Kill()
			<-s.exited
			return nil, fmt.Errorf("no reply to PING on %s within 10s; output:\n%s", addr, s.stderr.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Cleanup(func() {
		code := s.Stop()
		if code != 0 {
			// A crash, or a race report from a CELLSERVER_E2E_RACE build.
			t.Errorf("cellserver %s exited with status %d after SIGTERM, want 0", addr, code)
		}
		if out := s.Output(); strings.Contains(out, "WARNING: DATA RACE") || strings.Contains(out, "panic") {
			t.Errorf("cellserver %s logged a data race or a (recovered) panic; see its output", addr)
		}
		if t.Failed() {
			t.Logf("cellserver %s (exit %d) output:\n%s", addr, code, s.stderr.String())
		}
	})
	return s, nil
}

// pingRaw reports whether addr answers an inline PING with any RESP reply
// (+PONG, or -NOAUTH under requirepass).
func pingRaw(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, 500*time.Millisecond)
	if err != nil {
		return false
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return false
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	return err == nil && (line == "+PONG\r\n" || strings.HasPrefix(line, "-NOAUTH"))
}

// Stop sends SIGTERM, waits up to 10 s (then kills) and returns the exit code
// (-1 if killed by a signal). Safe to call more than once.
func (s *server) Stop() int {
	s.stopOnce.Do(func() {
		select {
		case <-s.exited:
		default:
			_ = s.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-s.exited:
			case <-time.After(10 * time.Second):
				s.t.Errorf("cellserver %s did not exit within 10s of SIGTERM; killing it", s.Addr)
				_ = s.cmd.Process.Kill()
				<-s.exited
			}
		}
		s.exitCode = s.cmd.ProcessState.ExitCode()
	})
	return s.exitCode
}

// Output is what the server wrote to stderr/stdout so far.
func (s *server) Output() string { return s.stderr.String() }

// Client returns a go-redis client with default settings (HELLO 3: RESP3),
// closed at cleanup.
func (s *server) Client(t testing.TB, mod ...func(*redis.Options)) *redis.Client {
	t.Helper()
	opt := &redis.Options{Addr: s.Addr}
	for _, f := range mod {
		f(opt)
	}
	rdb := redis.NewClient(opt)
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// rawConn is a plain TCP connection for byte-exact RESP exchanges.
type rawConn struct {
	t  testing.TB
	nc net.Conn
	r  *bufio.Reader
}

// Raw opens a raw TCP connection, closed at cleanup.
func (s *server) Raw(t testing.TB) *rawConn {
	t.Helper()
	nc, err := net.DialTimeout("tcp", s.Addr, 5*time.Second)
	require.NoError(t, err)
	t.Cleanup(func() { _ = nc.Close() })
	return &rawConn{t: t, nc: nc, r: newReader(nc)}
}

// Send writes b as is.
func (c *rawConn) Send(b []byte) {
	c.t.Helper()
	require.NoError(c.t, c.nc.SetWriteDeadline(time.Now().Add(30*time.Second)))
	_, err := c.nc.Write(b)
	require.NoError(c.t, err)
}

// ReadReply reads one whole RESP2 or RESP3 reply and returns its exact bytes.
func (c *rawConn) ReadReply() []byte {
	c.t.Helper()
	require.NoError(c.t, c.nc.SetReadDeadline(time.Now().Add(10*time.Second)))
	var buf bytes.Buffer
	require.NoError(c.t, readRESP(c.r, &buf), "reading reply (got so far %q)", clip(buf.Bytes()))
	return buf.Bytes()
}

// Do sends b and returns the next reply's bytes.
func (c *rawConn) Do(b []byte) []byte {
	c.t.Helper()
	c.Send(b)
	return c.ReadReply()
}

// DoArgs sends args as a RESP array of bulk strings and returns the reply.
func (c *rawConn) DoArgs(args ...string) []byte {
	c.t.Helper()
	return c.Do(encodeCommand(args...))
}

// ExpectClosed asserts that the server closes the connection (EOF or reset)
// without sending anything more.
func (c *rawConn) ExpectClosed() {
	c.t.Helper()
	require.NoError(c.t, c.nc.SetReadDeadline(time.Now().Add(5*time.Second)))
	b, err := io.ReadAll(c.r)
	require.Empty(c.t, b, "expected the connection to close, got more bytes")
	if err != nil {
		var ne net.Error
		require.False(c.t, errors.As(err, &ne) && ne.Timeout(), "connection still open after 5s")
	}
}

// readRESP copies one RESP2 or RESP3 reply (no attributes) from r to w.
func readRESP(r *bufio.Reader, w *bytes.Buffer) error {
	line, err := r.ReadBytes('\n')
	w.Write(line)
	if err != nil {
		return err
	}
	if len(line) < 3 || line[len(line)-2] != '\r' {
		return fmt.Errorf("malformed reply line %q", line)
	}
	body := string(line[1 : len(line)-2])
	switch line[0] {
	case '+', '-', ':', '_', ',', '#', '(':
		return nil
	case '$', '=', '!':
		n, err := strconv.Atoi(body)
		if err != nil {
			return fmt.Errorf("bad bulk length %q", line)
		}
		if n < 0 {
			return nil
		}
		_, err = io.CopyN(w, r, int64(n)+2)
		return err
	case '*', '~', '>', '%':
		n, err := strconv.Atoi(body)
		if err != nil {
			return fmt.Errorf("bad array length %q", line)
		}
		if line[0] == '%' {
			n *= 2 // a map: keys and values
		}
		for i := 0; i < n; i++ {
			if err := readRESP(r, w); err != nil {
				return err
			}
		}
		return nil
	}
	return fmt.Errorf("unknown reply type %q", line)
}

// encodeCommand encodes args as a RESP array of bulk strings.
func encodeCommand(args ...string) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	return b.Bytes()
}

// clip shortens long byte strings for messages.
func clip(b []byte) []byte {
	if len(b) > 200 {
		return append(append([]byte{}, b[:200]...), "..."...)
	}
	return b
}

// respErr is the RESP encoding of an error reply.
func respErr(msg string) []byte { return []byte("-" + msg + "\r\n") }

// respInts is the RESP encoding of an array of integers.
func respInts(v ...int64) []byte {
	b := fmt.Appendf(nil, "*%d\r\n", len(v))
	for _, n := range v {
		b = fmt.Appendf(b, ":%d\r\n", n)
	}
	return b
}

// respBulk is the RESP encoding of a bulk string.
func respBulk(s string) []byte { return fmt.Appendf(nil, "$%d\r\n%s\r\n", len(s), s) }

// ctxT returns a context ending with the test (or after d).
func ctxT(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// Harness self-check: the raw reader and the encoder agree with a live server.
func TestHarnessStartsServer(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	c := s.Raw(t)
	require.Equal(t, "+PONG\r\n", string(c.DoArgs("PING")))
	require.Equal(t, string(respBulk("hi")), string(c.DoArgs("ECHO", "hi")))
	rdb := s.Client(t)
	require.Equal(t, "PONG", rdb.Ping(ctxT(t, 10*time.Second)).Val())
}

func newReader(nc net.Conn) *bufio.Reader { return bufio.NewReaderSize(nc, 64*1024) }
