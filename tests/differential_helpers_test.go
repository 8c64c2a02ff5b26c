package tests

// The machinery of the differential suite (differential_test.go): a real
// redis-server to compare against, a RESP2/RESP3 reader that keeps each
// reply's exact bytes, and the exchange that sends the same bytes to both
// servers on fresh connections.

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// refServer is a redis-server process started for one test.
type refServer struct {
	Addr    string
	Version string // from `redis-server --version`, e.g. "7.0.15"
	cmd     *exec.Cmd
	out     *lockedBuffer
	exited  chan struct{}
}

// startRedis starts redis-server on a free loopback port with nothing
// persisted, configured like cellserver's defaults where Redis's differ
// (one database), plus extra arguments ("--requirepass", "x"). It skips the
// test, loudly, when redis-server is not installed; it is killed at cleanup.
func startRedis(t testing.TB, extra ...string) *refServer {
	t.Helper()
	path, err := exec.LookPath("redis-server")
	if err != nil {
		t.Skip("SKIPPED: redis-server is not on PATH, so cellserver's replies are NOT compared with Redis. " +
			"bash test.sh installs it (apt-get install redis-server)")
	}
	ver := ""
	if out, err := exec.Command(path, "--version").Output(); err == nil {
		if _, v, ok := strings.Cut(string(out), " v="); ok {
			ver, _, _ = strings.Cut(v, " ")
		}
	}
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		port := freePort(t)
		r := &refServer{
			Addr:    net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
			Version: ver,
			out:     &lockedBuffer{},
			exited:  make(chan struct{}),
		}
		args := append([]string{
			"--port", strconv.Itoa(port), "--bind", "127.0.0.1",
			"--save", "", "--appendonly", "no", "--daemonize", "no",
			"--dir", t.TempDir(), "--databases", "1",
		}, extra...)
		r.cmd = exec.Command(path, args...)
		r.cmd.Stdout, r.cmd.Stderr = r.out, r.out
		if err := r.cmd.Start(); err != nil {
			t.Fatalf("starting redis-server: %v", err)
		}
		go func() { _ = r.cmd.Wait(); close(r.exited) }()
		if lastErr = r.waitReady(); lastErr == nil {
			t.Cleanup(r.stop)
			return r
		}
		r.stop()
	}
	t.Fatalf("redis-server did not start: %v", lastErr)
	return nil
}

func (r *refServer) waitReady() error {
	deadline := time.Now().Add(10 * time.Second)
	for !pingRaw(r.Addr) {
		select {
		case <-r.exited:
			return fmt.Errorf("redis-server exited early; output:\n%s", r.out.String())
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no reply to PING on %s within 10s; output:\n%s", r.Addr, r.out.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	return nil
}

func (r *refServer) stop() {
	select {
	case <-r.exited:
		return
	default:
	}
	_ = r.cmd.Process.Signal(syscall.SIGKILL)
	<-r.exited
}

// respValue is one parsed reply. Maps keep their keys and values in order
// in elems (k1, v1, k2, v2, ...).
type respValue struct {
	kind  byte   // '+', '-', ':', '$', '*' and RESP3's '%', '~', '_', ',', '#', '(', '=', '>', '|'
	str   string // the text of a simple string, error, number or bulk string
	null  bool   // $-1, *-1 or _
	elems []respValue
}

// String is the value in a short readable form, for messages.
func (v respValue) String() string {
	switch {
	case v.null:
		return string(v.kind) + "null"
	case v.elems != nil || v.kind == '*' || v.kind == '%' || v.kind == '~':
		parts := make([]string, len(v.elems))
		for i, e := range v.elems {
			parts[i] = e.String()
		}
		return string(v.kind) + "[" + strings.Join(parts, " ") + "]"
	}
	return string(v.kind) + strconv.Quote(v.str)
}

// readRESPValue reads one RESP2 or RESP3 reply from r, copying its exact
// bytes to raw.
func readRESPValue(r *bufio.Reader, raw *bytes.Buffer) (respValue, error) {
	line, err := r.ReadBytes('\n')
	raw.Write(line)
	if err != nil {
		return respValue{}, err
	}
	if len(line) < 3 || line[len(line)-2] != '\r' {
		return respValue{}, fmt.Errorf("malformed reply line %q", line)
	}
	v := respValue{kind: line[0], str: string(line[1 : len(line)-2])}
	switch v.kind {
	case '+', '-', ':', ',', '#', '(':
		return v, nil
	case '_':
		v.null, v.str = true, ""
		return v, nil
	case '$', '=':
		n, err := strconv.Atoi(v.str)
		if err != nil {
			return v, fmt.Errorf("bad bulk length %q", line)
		}
		v.str = ""
		if n < 0 {
			v.null = true
			return v, nil
		}
		body := make([]byte, n+2)
		if _, err := io.ReadFull(r, body); err != nil {
			return v, err
		}
		raw.Write(body)
		v.str = string(body[:n])
		return v, nil
	case '*', '~', '>', '%', '|':
		n, err := strconv.Atoi(v.str)
		if err != nil {
			return v, fmt.Errorf("bad aggregate length %q", line)
		}
		v.str = ""
		if n < 0 {
			v.null = true
			return v, nil
		}
		if v.kind == '%' || v.kind == '|' {
			n *= 2
		}
		v.elems = make([]respValue, 0, n)
		for i := 0; i < n; i++ {
			e, err := readRESPValue(r, raw)
			if err != nil {
				return v, err
			}
			v.elems = append(v.elems, e)
		}
		if v.kind == '|' { // an attribute precedes the reply it describes
			return readRESPValue(r, raw)
		}
		return v, nil
	}
	return v, fmt.Errorf("unknown reply type %q", line)
}

// reply is one reply as sent: its bytes and its parsed value.
type reply struct {
	raw []byte
	val respValue
}

// diffConn is one connection to one of the two servers.
type diffConn struct {
	nc net.Conn
	r  *bufio.Reader
}

func dialDiff(t testing.TB, addr string) *diffConn {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	t.Cleanup(func() { _ = nc.Close() })
	return &diffConn{nc: nc, r: bufio.NewReaderSize(nc, 64<<10)}
}

func (c *diffConn) send(b []byte) error {
	_ = c.nc.SetWriteDeadline(time.Now().Add(10 * time.Second))
	_, err := c.nc.Write(b)
	return err
}

func (c *diffConn) read() (reply, error) {
	_ = c.nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	var raw bytes.Buffer
	v, err := readRESPValue(c.r, &raw)
	return reply{raw: raw.Bytes(), val: v}, err
}

// probe tells what the connection does next: it sends a PING and reports
// "closed" (EOF or reset: the server closed it), the reply's bytes, or
// "no reply" (the server is still waiting for the rest of a request).
func (c *diffConn) probe() string {
	if err := c.send([]byte("PING\r\n")); err != nil {
		return "closed"
	}
	_ = c.nc.SetReadDeadline(time.Now().Add(2 * time.Second))
	var raw bytes.Buffer
	_, err := readRESPValue(c.r, &raw)
	var ne net.Error
	switch {
	case err == nil:
		return strconv.Quote(raw.String())
	case errors.As(err, &ne) && ne.Timeout():
		return "no reply"
	case raw.Len() > 0:
		return fmt.Sprintf("%q then closed", raw.String())
	}
	return "closed"
}

// infoSections parses an INFO reply: section name (lower case) -> its
// fields in order.
type infoField struct{ key, val string }

func infoSections(s string) (order []string, sections map[string][]infoField) {
	sections = map[string][]infoField{}
	cur := ""
	for _, line := range strings.Split(s, "\r\n") {
		switch {
		case line == "":
		case strings.HasPrefix(line, "# "):
			cur = strings.ToLower(line[2:])
			order = append(order, cur)
			sections[cur] = []infoField{}
		default:
			k, v, _ := strings.Cut(line, ":")
			sections[cur] = append(sections[cur], infoField{k, v})
		}
	}
	return order, sections
}

// valueClass is what a field's value looks like: an integer, a decimal
// number, or anything else.
func valueClass(v string) string {
	if _, err := strconv.ParseInt(v, 10, 64); err == nil {
		return "integer"
	}
	if _, err := strconv.ParseFloat(v, 64); err == nil {
		return "number"
	}
	return "text"
}

// subsequence reports whether every element of sub appears in full in the
// same relative order, returning the first one that does not.
func subsequence(sub, full []string) (string, bool) {
	i := 0
	for _, s := range sub {
		for i < len(full) && full[i] != s {
			i++
		}
		if i == len(full) {
			return s, false
		}
		i++
	}
	return "", true
}

// kvPairs reads a flat array of bulk strings k1 v1 k2 v2 ... into a map.
func kvPairs(v respValue) (map[string]string, []string, error) {
	if v.kind != '*' || len(v.elems)%2 != 0 {
		return nil, nil, fmt.Errorf("not an array of pairs: %v", v)
	}
	m := map[string]string{}
	var keys []string
	for i := 0; i < len(v.elems); i += 2 {
		k, val := v.elems[i], v.elems[i+1]
		if k.kind != '$' {
			return nil, nil, fmt.Errorf("key %v is not a bulk string", k)
		}
		m[k.str] = val.str
		keys = append(keys, k.str)
	}
	return m, keys, nil
}

// sameShape checks that b has a's RESP type, nullness and, recursively,
// element count; strings and numbers are not compared.
func sameShape(a, b respValue) error {
	if a.kind != b.kind || a.null != b.null {
		return fmt.Errorf("type %c (null %v) vs %c (null %v): %v vs %v", a.kind, a.null, b.kind, b.null, a, b)
	}
	if len(a.elems) != len(b.elems) {
		return fmt.Errorf("%d elements vs %d: %v vs %v", len(a.elems), len(b.elems), a, b)
	}
	for i := range a.elems {
		if err := sameShape(a.elems[i], b.elems[i]); err != nil {
			return fmt.Errorf("element %d: %w", i, err)
		}
	}
	return nil
}

// clientFields parses one CLIENT LIST / CLIENT INFO line.
func clientFields(line string) (keys []string, m map[string]string) {
	m = map[string]string{}
	for _, f := range strings.Fields(line) {
		k, v, _ := strings.Cut(f, "=")
		keys = append(keys, k)
		m[k] = v
	}
	return keys, m
}
