package resp

import (
	"bufio"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestRoundWriteOut drives the loop's round write-out (writer.go) from many
// clients at once: unpipelined calls, pipelines, pipelines whose replies
// pass deferMax and replies that reference the request (both written at
// once, after the listed ones of the same connection), and clients that
// hang up with replies still listed. Every reply must arrive whole and in
// request order, and the server must serve on.
func TestRoundWriteOut(t *testing.T) {
	srv, _ := startTestServer(t, Config{}, slog.New(slog.DiscardHandler))
	addr := srv.Addr().String()
	big := strings.Repeat("x", deferMax+1000)  // referenced (commands.bigRef)
	mid := strings.Repeat("y", deferMax/3+100) // copied: three pass deferMax

	const clients, rounds = 32, 100
	// Meanwhile clients that send and hang up before their replies are
	// written.
	var hangups sync.WaitGroup
	hangupErrs := make(chan error, clients)
	for ci := 0; ci < clients; ci++ {
		hangups.Add(1)
		go func() {
			defer hangups.Done()
			for i := 0; i < 50; i++ {
				nc, err := net.DialTimeout("tcp", addr, time.Second)
				if err != nil {
					hangupErrs <- err
					return
				}
				_, _ = io.WriteString(nc, cmdBytes("PING")+cmdBytes("ECHO", "gone"))
				_ = nc.Close()
			}
		}()
	}
	errs := eachClient(addr, clients, 20*time.Second, func(ci int, nc net.Conn, r *bufio.Reader) error {
		rng := rand.New(rand.NewPCG(uint64(ci), 3))
		for round := 0; round < rounds; round++ {
			var req strings.Builder
			var want []string
			for i := 0; i < 1+rng.IntN(4); i++ {
				switch rng.IntN(7) {
				case 0:
					req.WriteString(cmdBytes("ECHO", big))
					want = append(want, big)
				case 6:
					for j := 0; j < 3; j++ {
						req.WriteString(cmdBytes("ECHO", mid))
						want = append(want, mid)
					}
				case 1, 2:
					req.WriteString(cmdBytes("PING"))
					want = append(want, "+PONG")
				default:
					v := fmt.Sprintf("c%d-r%d-%d", ci, round, i)
					req.WriteString(cmdBytes("ECHO", v))
					want = append(want, v)
				}
			}
			if _, err := io.WriteString(nc, req.String()); err != nil {
				return err
			}
			for _, w := range want {
				toks, err := readReply(r, nil)
				if err != nil {
					return fmt.Errorf("client %d round %d: %w", ci, round, err)
				}
				if len(toks) != 1 || toks[0] != w {
					return fmt.Errorf("client %d round %d: got %.40q, want %.40q", ci, round, toks, w)
				}
			}
		}
		return nil
	})
	hangups.Wait()
	close(hangupErrs)
	for err := range hangupErrs {
		errs = append(errs, err)
	}
	require.Empty(t, errs)
	require.Equal(t, "+PONG\r\n", ping(addr))
	// The write-out's count ends just after its writes.
	require.Eventually(t, func() bool { return srv.waiting.Load() == 0 }, 5*time.Second, time.Millisecond,
		"a round's write-out still counted as waiting")
}

// TestHalfCloseFlushes: a client that shuts its side down right after its
// commands gets every reply, both those waiting for the round's write-out
// and those of a pipeline running off the loop (EXEC), then the close
// (hangup.go); many at once, so that the race detector sees the paths.
func TestHalfCloseFlushes(t *testing.T) {
	srv, _ := startTestServer(t, Config{}, slog.New(slog.DiscardHandler))
	addr := srv.Addr().String()
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for ci := 0; ci < 16; ci++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 20; i++ {
				req := cmdBytes("PING") + cmdBytes("ECHO", fmt.Sprint(ci, i))
				want := "+PONG\r\n$" + fmt.Sprint(len(fmt.Sprint(ci, i))) + "\r\n" + fmt.Sprint(ci, i) + "\r\n"
				if i%2 == 1 {
					req += cmdBytes("MULTI") + cmdBytes("PING") + cmdBytes("EXEC")
					want += "+OK\r\n+QUEUED\r\n*1\r\n+PONG\r\n"
				}
				nc, err := net.DialTimeout("tcp", addr, time.Second)
				if err != nil {
					errs <- err
					return
				}
				_, _ = io.WriteString(nc, req)
				_ = nc.(*net.TCPConn).CloseWrite()
				_ = nc.SetReadDeadline(time.Now().Add(10 * time.Second))
				got, err := io.ReadAll(nc)
				_ = nc.Close()
				if err != nil || string(got) != want {
					errs <- fmt.Errorf("client %d call %d: got %q (%v), want %q", ci, i, got, err, want)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	require.Equal(t, "+PONG\r\n", ping(addr))
}
