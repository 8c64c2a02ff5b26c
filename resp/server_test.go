package resp

import (
	"bufio"
	"bytes"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cellserver/cellserver/commands"
	"github.com/cellserver/cellserver/store"
)

// startTestServer serves an in-memory store on a free loopback port.
func startTestServer(t testing.TB, cfg Config, log *slog.Logger) (*Server, chan error) {
	t.Helper()
	st, err := store.New(store.Config{Shards: 2, Logger: log})
	require.NoError(t, err)
	exec, err := commands.New(commands.Config{Logger: log}, st)
	require.NoError(t, err)
	cfg.Addr, cfg.Logger = "127.0.0.1:0", log
	srv, err := New(cfg, exec)
	require.NoError(t, err)
	require.NoError(t, srv.Listen())
	served := make(chan error, 1)
	go func() { served <- srv.Serve() }()
	t.Cleanup(func() {
		_ = srv.Shutdown(t.Context())
		exec.Close()
		_ = st.Close()
	})
	return srv, served
}

// ping sends PING on a new connection and returns the first reply line ("" if
// the connection failed or closed).
func ping(addr string) string {
	nc, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return ""
	}
	defer nc.Close()
	_ = nc.SetDeadline(time.Now().Add(3 * time.Second))
	if _, err := nc.Write([]byte("PING\r\n")); err != nil {
		return ""
	}
	line, _ := bufio.NewReader(nc).ReadString('\n')
	return line
}

// TestAcceptSurvivesDescriptorExhaustion runs a server with almost no file
// descriptors to spare (in a child process, whose limit it lowers) and
// floods it: accept fails with EMFILE, and the server must keep running,
// say so once, refuse the clients it cannot take, and serve again once
// descriptors are free. gnet's own acceptor stopped the engine here.
func TestAcceptSurvivesDescriptorExhaustion(t *testing.T) {
	if os.Getenv("RESP_EMFILE_CHILD") == "1" {
		emfileChild(t)
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestAcceptSurvivesDescriptorExhaustion$")
	cmd.Env = append(os.Environ(), "RESP_EMFILE_CHILD=1")
	var logs syncBuffer
	cmd.Stderr = &logs
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	addr, err := bufio.NewReader(stdout).ReadString('\n')
	require.NoError(t, err, "child output: %s", logs.String())
	addr = strings.TrimSpace(strings.TrimPrefix(addr, "ADDR "))

	var conns []net.Conn
	var pongs, refused int
	for i := 0; i < 300; i++ {
		nc, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			continue
		}
		conns = append(conns, nc)
		_ = nc.SetDeadline(time.Now().Add(2 * time.Second))
		_, _ = nc.Write([]byte("PING\r\n"))
		line, _ := bufio.NewReader(nc).ReadString('\n')
		switch line {
		case "+PONG\r\n":
			pongs++
		case "-ERR max number of clients reached\r\n":
			refused++
		}
	}
	t.Logf("pongs %d refused %d of %d", pongs, refused, len(conns))
	require.Greater(t, pongs, 0)
	require.Greater(t, refused, 0, "clients past the descriptor limit get Redis's max-clients error")
	for _, nc := range conns {
		_ = nc.Close()
	}
	require.Eventually(t, func() bool { return ping(addr) == "+PONG\r\n" }, 10*time.Second, 50*time.Millisecond,
		"the server must serve again once descriptors are free")
	// The child's log reaches us through a pipe: its last line may follow
	// the PONG that ended the spell.
	require.Eventually(t, func() bool {
		out := logs.String()
		return strings.Count(out, "accepting connections again") >= strings.Count(out, "accepting a connection failed")
	}, 10*time.Second, 50*time.Millisecond, "the end of the spell is logged:\n%s", logs.String())
	out := logs.String()
	require.NotContains(t, out, "Serve returned", "the server must not stop")
	// Once per failing spell, not once per refused client: a client that
	// closes mid-flood may end a spell and start another.
	failed, again := strings.Count(out, "accepting a connection failed"), strings.Count(out, "accepting connections again")
	require.GreaterOrEqual(t, failed, 1, out)
	require.Equal(t, failed, again, "each spell is logged as it starts and ends:\n%s", out)
	require.Less(t, failed, refused/4+1, "logged per spell, not per refused client:\n%s", out)
}

// syncBuffer is a bytes.Buffer safe for a writer and a reader at once.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func emfileChild(t *testing.T) {
	var rl syscall.Rlimit
	require.NoError(t, syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl))
	srv, served := startTestServer(t, Config{MaxClients: 10000}, slog.New(slog.NewTextHandler(os.Stderr, nil)))
	// Leave the server about 40 descriptors above what it uses now.
	used := 0
	if ents, err := os.ReadDir("/proc/self/fd"); err == nil {
		used = len(ents)
	}
	rl.Cur = uint64(used + 40)
	require.NoError(t, syscall.Setrlimit(syscall.RLIMIT_NOFILE, &rl))
	fmt.Printf("ADDR %s\n", srv.Addr())
	select {
	case err := <-served:
		t.Fatalf("Serve returned: %v", err)
	case <-time.After(60 * time.Second):
	}
}
