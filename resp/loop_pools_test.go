package resp

import (
	"bufio"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cellserver/cellserver/commands"
	"github.com/cellserver/cellserver/store"
)

// readReply reads one RESP2 reply, flattened to its scalar tokens.
func readReply(r *bufio.Reader, dst []string) ([]string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return dst, err
	}
	line = strings.TrimSuffix(line, "\r\n")
	switch line[0] {
	case '*':
		n, _ := strconv.Atoi(line[1:])
		for i := 0; i < n; i++ {
			if dst, err = readReply(r, dst); err != nil {
				return dst, err
			}
		}
		return dst, nil
	case '$':
		n, _ := strconv.Atoi(line[1:])
		if n < 0 {
			return append(dst, "nil"), nil
		}
		b := make([]byte, n+2)
		if _, err := io.ReadFull(r, b); err != nil {
			return dst, err
		}
		return append(dst, string(b[:n])), nil
	default:
		return append(dst, line), nil
	}
}

func cmdBytes(args ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	return b.String()
}

// eachClient runs fn on n connections to addr at once, each with its own
// reader and deadline, and returns the errors they met.
func eachClient(addr string, n int, deadline time.Duration, fn func(ci int, nc net.Conn, r *bufio.Reader) error) []error {
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for ci := 0; ci < n; ci++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			nc, err := net.DialTimeout("tcp", addr, time.Second)
			if err != nil {
				errs <- err
				return
			}
			defer nc.Close()
			_ = nc.SetDeadline(time.Now().Add(deadline))
			if err := fn(ci, nc, bufio.NewReader(nc)); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	var all []error
	for err := range errs {
		all = append(all, err)
	}
	return all
}

// Many clients of two loops send pipelines whose calls need
// the other loop's shards (pending, keeping their pool) mixed with inline
// ones, Run commands, MULTI/EXEC; every reply must be the client's own.
func TestLoopPoolsManyClients(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	st, err := store.New(store.Config{Shards: 4, Owners: 2, Logger: log})
	require.NoError(t, err)
	exec, err := commands.New(commands.Config{Logger: log}, st)
	require.NoError(t, err)
	srv, err := New(Config{Addr: "127.0.0.1:0", Logger: log, Owners: st.Owners()}, exec)
	require.NoError(t, err)
	require.NoError(t, srv.Listen())
	go func() { _ = srv.Serve() }()
	defer func() {
		_ = srv.Shutdown(t.Context())
		exec.Close()
		_ = st.Close()
	}()
	addr := srv.Addr().String()

	keyOn := func(prefix string, shard int) string {
		for i := 0; ; i++ {
			if k := fmt.Sprint(prefix, ":", i); st.ShardOf([]byte(k)) == shard {
				return k
			}
		}
	}
	const clients, rounds = 24, 150
	for _, err := range eachClient(addr, clients, 60*time.Second, func(ci int, nc net.Conn, r *bufio.Reader) error {
		rng := rand.New(rand.NewPCG(uint64(ci), 7))
		var keys [4]string
		for s := range keys {
			keys[s] = keyOn(fmt.Sprintf("c%d", ci), s)
		}
		used := map[string]int{}
		type exp struct {
			check func(toks []string) error
		}
		for round := 0; round < rounds; round++ {
			var sb strings.Builder
			var want []exp
			n := 1 + rng.IntN(12)
			for i := 0; i < n; i++ {
				switch rng.IntN(8) {
				case 0, 1: // CL.LIMIT of two keys, maybe across loops
					a, b := keys[rng.IntN(4)], keys[rng.IntN(4)]
					if a == b {
						b = keys[(strings.Index("0123", "0")+1+rng.IntN(3))%4]
						if a == b {
							continue
						}
					}
					ka, kb := "L"+a, "L"+b
					// Keys of different names but the same shard as a, b:
					// the hash tag keeps the shard.
					ka, kb = "{"+a+"}x", "{"+b+"}y"
					used[ka]++
					used[kb]++
					wa, wb := 1000000-used[ka], 2000000-used[kb]
					sb.WriteString(cmdBytes("CL.LIMIT", ka, "FW", "1000000", "3600", "AND", kb, "FW", "2000000", "3600"))
					want = append(want, exp{func(toks []string) error {
						// 7 tokens-ish: 5 + index + 2 rows of 5
						if len(toks) != 16 {
							return fmt.Errorf("CL.LIMIT reply %q", toks)
						}
						if toks[8] != ":"+strconv.Itoa(wa) || toks[13] != ":"+strconv.Itoa(wb) {
							return fmt.Errorf("CL.LIMIT %s %s: want %d %d, got %q", ka, kb, wa, wb, toks)
						}
						return nil
					}})
				case 2, 3: // CL.THROTTLE on a random shard
					k := "{" + keys[rng.IntN(4)] + "}t"
					used[k]++
					w := 1000000 - used[k]
					sb.WriteString(cmdBytes("CL.THROTTLE", k, "999999", "1", "3600"))
					want = append(want, exp{func(toks []string) error {
						if len(toks) != 5 || toks[2] != ":"+strconv.Itoa(w) {
							return fmt.Errorf("CL.THROTTLE %s: want remaining %d, got %q", k, w, toks)
						}
						return nil
					}})
				case 4: // a Run command between calls
					sb.WriteString(cmdBytes("PING", "p"+strconv.Itoa(i)))
					p := "p" + strconv.Itoa(i)
					want = append(want, exp{func(toks []string) error {
						if len(toks) != 1 || toks[0] != p {
							return fmt.Errorf("PING: %q", toks)
						}
						return nil
					}})
				case 5: // MULTI / EXEC of calls
					k := "{" + keys[rng.IntN(4)] + "}m"
					used[k]++
					w := 1000000 - used[k]
					sb.WriteString(cmdBytes("MULTI"))
					sb.WriteString(cmdBytes("CL.THROTTLE", k, "999999", "1", "3600"))
					sb.WriteString(cmdBytes("EXEC"))
					want = append(want, exp{func(toks []string) error {
						if toks[0] != "+OK" {
							return fmt.Errorf("MULTI: %q", toks)
						}
						return nil
					}}, exp{func(toks []string) error {
						if toks[0] != "+QUEUED" {
							return fmt.Errorf("queued: %q", toks)
						}
						return nil
					}}, exp{func(toks []string) error {
						if len(toks) != 5 || toks[2] != ":"+strconv.Itoa(w) {
							return fmt.Errorf("EXEC CL.THROTTLE %s: want %d, got %q", k, w, toks)
						}
						return nil
					}})
				case 7: // a Slow command: the pipeline runs off the loop
					sb.WriteString(cmdBytes("AUTH", "x"))
					want = append(want, exp{func(toks []string) error {
						if len(toks) != 1 || !strings.HasPrefix(toks[0], "-") {
							return fmt.Errorf("AUTH: %q", toks)
						}
						return nil
					}})
				case 6: // a Queue command
					k := "{" + keys[rng.IntN(4)] + "}t"
					sb.WriteString(cmdBytes("EXISTS", k))
					want = append(want, exp{func(toks []string) error {
						if len(toks) != 1 || !strings.HasPrefix(toks[0], ":") {
							return fmt.Errorf("EXISTS: %q", toks)
						}
						return nil
					}})
				}
			}
			if _, err := nc.Write([]byte(sb.String())); err != nil {
				return err
			}
			for _, w := range want {
				toks, err := readReply(r, nil)
				if err != nil {
					return err
				}
				if err := w.check(toks); err != nil {
					return fmt.Errorf("client %d round %d: %w", ci, round, err)
				}
			}
		}
		return nil
	}) {
		t.Error(err)
	}
}
