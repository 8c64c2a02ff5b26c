package tests

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestHalfCloseGetsReplies: a client that sends its commands and shuts its
// side down at once (`printf 'PING\r\n' | nc -N`, health checks, scripts)
// reads every reply before the connection closes, as from Redis, whatever
// the replies wait for: the loop's round write-out, a pipeline running off
// the loop (EXEC, KEYS), the disk (--fsync always) or another loop's
// shards (--event-loops 2). Its decisions ran, so it must hear them.
func TestHalfCloseGetsReplies(t *testing.T) {
	t.Parallel()
	layouts := [][]string{
		{},
		{"--in-memory"},
		{"--fsync", "always"},
		{"--event-loops", "2", "--shards", "4"},
		{"--fsync", "always", "--event-loops", "2", "--shards", "4"},
	}
	for li, args := range layouts {
		t.Run(fmt.Sprint(args), func(t *testing.T) {
			t.Parallel()
			s := startServer(t, append([]string{"--enable-debug-command", "yes"}, args...)...)
			// One frozen clock, so that every reply is known.
			require.Equal(t, "+OK\r\n", string(s.Raw(t).DoArgs("DEBUG", "CLOCK", "SET", "1700000000000000000")))
			for i := 0; i < 20; i++ {
				// Keys of several shards: on two loops some are the other's.
				k := func(j int) string { return fmt.Sprintf("hc:%d:%d:%d", li, i, j) }
				cases := []struct {
					name string
					req  []string
					want []string
				}{
					{"ping", []string{"PING", "PING", "PING"}, []string{"+PONG", "+PONG", "+PONG"}},
					{"throttle", []string{
						"CL.THROTTLE " + k(0) + " 10 1 60", "CL.THROTTLE " + k(1) + " 10 1 60",
						"CL.THROTTLE " + k(2) + " 10 1 60", "CL.THROTTLE " + k(0) + " 10 1 60",
					}, []string{
						"*5 :0 :11 :10 :-1 :60", "*5 :0 :11 :10 :-1 :60",
						"*5 :0 :11 :10 :-1 :60", "*5 :0 :11 :9 :-1 :120",
					}},
					{"exec", []string{"MULTI", "CL.THROTTLE " + k(3) + " 10 1 60", "EXEC"},
						[]string{"+OK", "+QUEUED", "*1 *5 :0 :11 :10 :-1 :60"}},
					{"keys", []string{"CL.THROTTLE " + k(4) + " 10 1 60", "KEYS " + k(4)},
						[]string{"*5 :0 :11 :10 :-1 :60", "*1 $" + fmt.Sprint(len(k(4))) + " " + k(4)}},
				}
				for _, tc := range cases {
					got := halfClose(t, s.Addr, strings.Join(tc.req, "\r\n")+"\r\n")
					require.Equal(t, tc.want, got, "round %d, %s", i, tc.name)
				}
			}
			// The decisions the replies told of are the state.
			c := s.Raw(t)
			require.Equal(t, "*5\r\n:0\r\n:11\r\n:8\r\n:-1\r\n:180\r\n",
				string(c.DoArgs("CL.THROTTLE", fmt.Sprintf("hc:%d:0:0", li), "10", "1", "60")))
		})
	}
}

// halfClose sends req, shuts the connection's sending side down, and
// returns every reply until the server closes it, each flattened to one
// line (its RESP lines joined by spaces, CRLFs dropped).
func halfClose(t *testing.T, addr, req string) []string {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	require.NoError(t, err)
	defer nc.Close()
	_, err = io.WriteString(nc, req)
	require.NoError(t, err)
	require.NoError(t, nc.(*net.TCPConn).CloseWrite())
	require.NoError(t, nc.SetReadDeadline(time.Now().Add(10*time.Second)))
	r := bufio.NewReader(nc)
	var got []string
	for {
		if _, err := r.Peek(1); err != nil {
			require.ErrorIs(t, err, io.EOF, "the server must close the connection once it answered")
			return got
		}
		var buf bytes.Buffer
		require.NoError(t, readRESP(r, &buf))
		got = append(got, strings.Join(strings.Fields(strings.ReplaceAll(buf.String(), "\r\n", " ")), " "))
	}
}

// TestCrossProtocolScriptingLikeRedis: what a browser sends when a web page
// posts to the port ("POST / HTTP/1.1", headers, a body of commands), sent
// to cellserver and to a real redis-server: both close the connection
// without a word at the POST line, the body's FLUSHALL never runs, and the
// attempt is logged. Also a half-closed client's pipeline against Redis:
// the same replies from both.
func TestCrossProtocolScriptingLikeRedis(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	ref := startRedis(t)
	body := "FLUSHALL\r\n"
	post := "POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: text/plain\r\nContent-Length: " +
		fmt.Sprint(len(body)) + "\r\n\r\n" + body
	for _, addr := range []string{s.Addr, ref.Addr} {
		setup := "SET victim 1\r\n" // a key to lose: Redis's own kind
		if addr == s.Addr {
			setup = "CL.THROTTLE victim 10 1 60\r\n"
		}
		nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
		require.NoError(t, err)
		_, err = io.WriteString(nc, setup)
		require.NoError(t, err)
		require.NoError(t, nc.SetReadDeadline(time.Now().Add(10*time.Second)))
		var buf bytes.Buffer
		require.NoError(t, readRESP(bufio.NewReader(nc), &buf))
		require.NotEqual(t, byte('-'), buf.Bytes()[0], "%s: %q", addr, buf.String())
		nc.Close()

		got := halfClose(t, addr, post)
		require.Empty(t, got, "%s: no reply to an HTTP request", addr)
		nc, err = net.DialTimeout("tcp", addr, 5*time.Second)
		require.NoError(t, err)
		_, err = io.WriteString(nc, "EXISTS victim\r\n")
		require.NoError(t, err)
		require.NoError(t, nc.SetReadDeadline(time.Now().Add(10*time.Second)))
		line, err := bufio.NewReader(nc).ReadString('\n')
		require.NoError(t, err)
		require.Equal(t, ":1\r\n", line, "%s: the body's FLUSHALL must not run", addr)
		nc.Close()
	}
	require.Contains(t, s.Output(), "Possible SECURITY ATTACK detected")

	req := "PING\r\nECHO hello\r\nPING\r\n"
	require.Equal(t, halfClose(t, ref.Addr, req), halfClose(t, s.Addr, req), "a half-closed client's replies")
}

// TestClientListBuffers: CLIENT LIST shows a connection's buffered
// unfinished request (qbuf) and unsent replies (omem, tot-mem), as Redis's
// does, so that an operator finds the client holding memory; INFO's
// client_recent_max_*_buffer are the largest; omem falls back to 0 within
// about a second once the client has read its replies.
func TestClientListBuffers(t *testing.T) {
	t.Parallel()
	s := startServer(t, "--in-memory")
	// A client that asks for 32 MiB of replies and does not read them.
	slow, err := net.DialTimeout("tcp", s.Addr, 5*time.Second)
	require.NoError(t, err)
	defer slow.Close()
	big := strings.Repeat("x", 1<<20)
	var req strings.Builder
	for range 32 {
		req.WriteString("*2\r\n$4\r\nECHO\r\n$1048576\r\n" + big + "\r\n")
	}
	go func() { _, _ = io.WriteString(slow, req.String()) }()
	// A client half way through a 16 MiB argument.
	part, err := net.DialTimeout("tcp", s.Addr, 5*time.Second)
	require.NoError(t, err)
	defer part.Close()
	_, err = io.WriteString(part, "*2\r\n$4\r\nECHO\r\n$16777216\r\n"+strings.Repeat("y", 8<<20))
	require.NoError(t, err)

	admin := s.Raw(t)
	field := func(line, name string) int64 {
		for _, f := range strings.Fields(line) {
			if v, ok := strings.CutPrefix(f, name+"="); ok {
				var n int64
				_, err := fmt.Sscan(v, &n)
				require.NoError(t, err, f)
				return n
			}
		}
		t.Fatalf("no %s in %q", name, line)
		return 0
	}
	var maxQ, maxO int64
	require.Eventually(t, func() bool {
		reply := string(admin.DoArgs("CLIENT", "LIST"))
		maxQ, maxO = 0, 0
		for _, line := range strings.Split(reply, "\n") {
			if !strings.Contains(line, "id=") {
				continue
			}
			q, o := field(line, "qbuf"), field(line, "omem")
			require.Equal(t, q+o, field(line, "tot-mem"), line)
			maxQ, maxO = max(maxQ, q), max(maxO, o)
		}
		return maxQ >= 8<<20 && maxO >= 4<<20
	}, 10*time.Second, 50*time.Millisecond, "qbuf %d, omem %d", maxQ, maxO)
	info := string(admin.DoArgs("INFO", "clients"))
	require.Contains(t, info, "client_recent_max_input_buffer:")
	require.Regexp(t, `client_recent_max_output_buffer:[1-9]\d{6,}`, info)

	// Read every reply: omem goes back to 0 without the client sending more.
	require.NoError(t, slow.SetReadDeadline(time.Now().Add(30*time.Second)))
	r := bufio.NewReaderSize(slow, 1<<20)
	for range 32 {
		var b bytes.Buffer
		require.NoError(t, readRESP(r, &b))
		require.Equal(t, 1<<20+len("$1048576\r\n\r\n"), b.Len())
	}
	require.Eventually(t, func() bool {
		reply := string(admin.DoArgs("CLIENT", "LIST"))
		for _, line := range strings.Split(reply, "\n") {
			if strings.Contains(line, "id=") && field(line, "omem") != 0 {
				return false
			}
		}
		return true
	}, 5*time.Second, 100*time.Millisecond, "omem must fall to 0 once the replies are read")
}
