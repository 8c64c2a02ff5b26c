package tests

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"net"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSIGHUPKeepsServing: SIGHUP (a closed terminal, logrotate, systemctl
// reload) does not end the server, as in Redis; it logs that it ignored it.
func TestSIGHUPKeepsServing(t *testing.T) {
	srv := startServer(t)
	raw := srv.Raw(t)
	for i := 1; i <= 3; i++ {
		require.NoError(t, srv.cmd.Process.Signal(syscall.SIGHUP))
		require.Eventually(t, func() bool { return strings.Count(srv.Output(), "SIGHUP received") == i }, 10*time.Second, 10*time.Millisecond)
		assert.Equal(t, "+PONG\r\n", string(raw.DoArgs("PING")))
	}
	assert.Equal(t, 0, srv.Stop())
	assert.Contains(t, srv.Output(), "bye")
}

// TestSignalsAtRandomMoments: SIGHUP, then SIGTERM, each at a random moment
// from the first log line on (while the data dir loads, before and after
// the port opens, under load), with a client charging keys under --fsync
// always the whole time. Every stop is a clean one (exit status 0, "bye"),
// and every call the client saw acknowledged is there after a restart.
func TestSignalsAtRandomMoments(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	// Some state, so that each start spends a moment loading it.
	seed := startServer(t, "--data-dir", dir)
	keys := make([]string, 20000)
	for i := range keys {
		keys[i] = fmt.Sprintf("seed:%d", i)
	}
	require.Equal(t, len(keys), throttleKeys(t, seed.Client(t), keys, 1, 9))
	require.Equal(t, 0, seed.Stop())

	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	var acked []string
	const rounds = 12
	for round := 0; round < rounds; round++ {
		port := freePort(t)
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		out := &lockedBuffer{}
		cmd := exec.Command(binPath, "--addr", addr, "--data-dir", dir, "--fsync", "always")
		cmd.Stdout, cmd.Stderr = out, out
		require.NoError(t, cmd.Start())
		exited := make(chan struct{})
		go func() { _ = cmd.Wait(); close(exited) }()
		require.Eventually(t, func() bool { return strings.Contains(out.String(), "cellserver starting") }, 10*time.Second, time.Millisecond,
			"round %d: no first log line; output:\n%s", round, out.String())

		// The client dials until the server answers, then charges a new
		// key per call; a call counts once its reply was read.
		var mu sync.Mutex
		var got []string
		stop := make(chan struct{})
		done := make(chan struct{})
		go func() {
			defer close(done)
			for i := 0; ; {
				select {
				case <-stop:
					return
				default:
				}
				nc, err := net.DialTimeout("tcp", addr, time.Second)
				if err != nil {
					time.Sleep(time.Millisecond)
					continue
				}
				r := bufio.NewReader(nc)
				for ; ; i++ {
					key := fmt.Sprintf("sig:%d:%d", round, i)
					_ = nc.SetDeadline(time.Now().Add(15 * time.Second))
					if _, err := nc.Write(encodeCommand("CL.THROTTLE", key, "9", "1", "3600")); err != nil {
						break
					}
					line, err := r.ReadString('\n')
					if err != nil || line != "*5\r\n" {
						break
					}
					ok := true
					for j := 0; j < 5; j++ {
						if _, err := r.ReadString('\n'); err != nil {
							ok = false
						}
					}
					if !ok {
						break
					}
					mu.Lock()
					got = append(got, key)
					mu.Unlock()
				}
				_ = nc.Close()
			}
		}()

		hupAt := time.Duration(rng.IntN(300)) * time.Millisecond
		termAt := hupAt + time.Duration(rng.IntN(300))*time.Millisecond
		time.Sleep(hupAt)
		require.NoError(t, cmd.Process.Signal(syscall.SIGHUP))
		time.Sleep(termAt - hupAt)
		require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
			t.Fatalf("round %d: no exit 30 s after SIGTERM; output:\n%s", round, out.String())
		}
		close(stop)
		<-done
		code := cmd.ProcessState.ExitCode()
		require.Equal(t, 0, code, "round %d (SIGHUP at %v, SIGTERM at %v): exit status; output:\n%s", round, hupAt, termAt, out.String())
		require.Contains(t, out.String(), "bye", "round %d: a clean stop", round)
		acked = append(acked, got...)
		t.Logf("round %d: SIGHUP at %v, SIGTERM at %v: %d calls acknowledged", round, hupAt, termAt, len(got))
	}

	srv := startServer(t, "--data-dir", dir)
	rdb := srv.Client(t)
	ctx := ctxT(t, 60*time.Second)
	for lo := 0; lo < len(acked); lo += 1000 {
		pipe := rdb.Pipeline()
		batch := acked[lo:min(lo+1000, len(acked))]
		for _, k := range batch {
			pipe.Exists(ctx, k)
		}
		cmds, err := pipe.Exec(ctx)
		require.NoError(t, err)
		for i, c := range cmds {
			n, err := c.(interface{ Result() (int64, error) }).Result()
			require.NoError(t, err)
			require.Equal(t, int64(1), n, "acknowledged key %s lost", batch[i])
		}
	}
	t.Logf("%d rounds: every one of %d acknowledged calls survived", rounds, len(acked))
}

// TestShutdownDuringClientPause: a SIGTERM while CLIENT PAUSE holds a
// write ends the pause: the held call runs and is answered, the server
// exits at once with status 0, and the call's change is on disk.
func TestShutdownDuringClientPause(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	srv := startServer(t, "--data-dir", dir)
	admin := srv.Raw(t)
	require.Equal(t, "+OK\r\n", string(admin.DoArgs("CLIENT", "PAUSE", "600000", "WRITE")))
	held := srv.Raw(t)
	held.Send(encodeCommand("CL.THROTTLE", "paused", "9", "1", "3600"))
	require.Eventually(t, func() bool { return strings.Contains(string(admin.DoArgs("CLIENT", "LIST")), "cmd=cl.throttle") },
		10*time.Second, 10*time.Millisecond, "the write waits on the pause")
	require.NoError(t, srv.cmd.Process.Signal(syscall.SIGTERM))
	assert.Equal(t, respInts(0, 10, 9, -1, 3600), held.ReadReply(), "the held call is answered")
	require.Equal(t, 0, srv.Stop())

	srv = startServer(t, "--data-dir", dir)
	assert.Equal(t, ":1\r\n", string(srv.Raw(t).DoArgs("EXISTS", "paused")))
}
