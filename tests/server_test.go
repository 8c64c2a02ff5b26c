package tests

import (
	"fmt"
	"net"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const (
	noAuth       = "NOAUTH Authentication required."
	wrongPass    = "WRONGPASS invalid username-password pair or user is disabled."
	helloNoAuth  = "NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time"
	authNoPass   = "ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?"
	debugRefused = "ERR DEBUG command not allowed. If the enable-debug-command option is set to \"local\", you can run it from a local connection, otherwise you need to set this option in the configuration file, and then restart the server."
)

func TestAuthRequirePass(t *testing.T) {
	t.Parallel()
	s := startServer(t, "--requirepass", "secret")

	t.Run("raw AUTH", func(t *testing.T) {
		c := s.Raw(t)
		for _, tc := range []struct {
			args []string
			want string
		}{
			{[]string{"PING"}, "-" + noAuth + "\r\n"},
			{[]string{"CL.THROTTLE", "k", "1", "1", "1"}, "-" + noAuth + "\r\n"},
			{[]string{"GET", "k"}, "-" + noAuth + "\r\n"},
			{[]string{"KEYS", "*"}, "-" + noAuth + "\r\n"},
			// Redis checks existence and arity before authentication.
			{[]string{"foo", "a"}, "-ERR unknown command 'foo', with args beginning with: 'a' \r\n"},
			{[]string{"GET"}, "-ERR wrong number of arguments for 'get' command\r\n"},
			{[]string{"AUTH", "wrong"}, "-" + wrongPass + "\r\n"},
			{[]string{"AUTH", "default", "wrong"}, "-" + wrongPass + "\r\n"},
			{[]string{"AUTH", "bob", "secret"}, "-" + wrongPass + "\r\n"},
			{[]string{"AUTH", "a", "b", "c"}, "-ERR syntax error\r\n"},
			{[]string{"HELLO", "4"}, "-NOPROTO unsupported protocol version\r\n"},
			{[]string{"HELLO", "3"}, "-" + helloNoAuth + "\r\n"},
			{[]string{"HELLO", "2"}, "-" + helloNoAuth + "\r\n"},
			{[]string{"HELLO", "x"}, "-ERR Protocol version is not an integer or out of range\r\n"},
			{[]string{"HELLO", "2", "AUTH", "default", "wrong"}, "-" + wrongPass + "\r\n"},
			{[]string{"PING"}, "-" + noAuth + "\r\n"},
			{[]string{"AUTH", "secret"}, "+OK\r\n"},
			{[]string{"PING"}, "+PONG\r\n"},
			{[]string{"CL.THROTTLE", "k", "1", "1", "1"}, "*5\r\n:0\r\n:2\r\n:1\r\n:-1\r\n:1\r\n"},
		} {
			assert.Equal(t, tc.want, string(c.DoArgs(tc.args...)), "%q", tc.args)
		}
		c2 := s.Raw(t)
		assert.Equal(t, "+OK\r\n", string(c2.DoArgs("AUTH", "default", "secret")))
		assert.Equal(t, "+PONG\r\n", string(c2.DoArgs("PING")))
	})

	t.Run("HELLO 2 AUTH", func(t *testing.T) {
		c := s.Raw(t)
		got := string(c.DoArgs("HELLO", "2", "AUTH", "default", "secret", "SETNAME", "hello-client"))
		require.True(t, strings.HasPrefix(got, "*14\r\n$6\r\nserver\r\n$5\r\nredis\r\n$7\r\nversion\r\n$"), "HELLO reply %q", got)
		require.Contains(t, got, "$5\r\nproto\r\n:2\r\n$2\r\nid\r\n:")
		require.True(t, strings.HasSuffix(got, "$4\r\nmode\r\n$10\r\nstandalone\r\n$4\r\nrole\r\n$6\r\nmaster\r\n$7\r\nmodules\r\n*0\r\n"), "HELLO reply %q", got)
		require.Equal(t, "+PONG\r\n", string(c.DoArgs("PING")), "HELLO AUTH authenticates")
		require.Equal(t, "$12\r\nhello-client\r\n", string(c.DoArgs("CLIENT", "GETNAME")))
		// HELLO without arguments once authenticated.
		require.True(t, strings.HasPrefix(string(c.DoArgs("HELLO")), "*14\r\n"))
	})

	t.Run("unauthenticated limits", func(t *testing.T) {
		c := s.Raw(t)
		c.Send([]byte("*11\r\n"))
		require.Equal(t, "-ERR Protocol error: unauthenticated multibulk length\r\n", string(c.ReadReply()))
		c.ExpectClosed()
		c = s.Raw(t)
		c.Send([]byte("*2\r\n$4\r\nECHO\r\n$16385\r\n"))
		require.Equal(t, "-ERR Protocol error: unauthenticated bulk length\r\n", string(c.ReadReply()))
		c.ExpectClosed()
		// The same is fine after AUTH.
		c = s.Raw(t)
		require.Equal(t, "+OK\r\n", string(c.DoArgs("AUTH", "secret")))
		args := []string{"EXISTS"}
		for i := 0; i < 10; i++ {
			args = append(args, "k"+strconv.Itoa(i))
		}
		require.Equal(t, ":0\r\n", string(c.DoArgs(args...)))
		big := strings.Repeat("z", 16385)
		require.Equal(t, string(respBulk(big)), string(c.DoArgs("ECHO", big)))
	})

	t.Run("pipelined AUTH lifts the limits for what follows", func(t *testing.T) {
		c := s.Raw(t)
		big := strings.Repeat("q", 20000)
		req := append([]byte("AUTH secret\r\n"), encodeCommand("ECHO", big)...)
		req = append(req, encodeCommand("EXISTS", "p0", "p1", "p2", "p3", "p4", "p5", "p6", "p7", "p8", "p9", "p10")...)
		c.Send(req)
		require.Equal(t, "+OK\r\n", string(c.ReadReply()))
		require.Equal(t, string(respBulk(big)), string(c.ReadReply()))
		require.Equal(t, ":0\r\n", string(c.ReadReply()))
	})

	t.Run("QUIT before AUTH", func(t *testing.T) {
		c := s.Raw(t)
		require.Equal(t, "+OK\r\n", string(c.DoArgs("QUIT")))
		c.ExpectClosed()
	})

	t.Run("go-redis", func(t *testing.T) {
		ctx := ctxT(t, 30*time.Second)
		rdb := s.Client(t, func(o *redis.Options) { o.Password = "secret" })
		require.Equal(t, "PONG", rdb.Ping(ctx).Val())
		v, err := rdb.Do(ctx, "CL.THROTTLE", "gr", 15, 30, 60).Int64Slice()
		require.NoError(t, err)
		require.Equal(t, []int64{0, 16, 15, -1, 2}, v)

		withUser := s.Client(t, func(o *redis.Options) { o.Username = "default"; o.Password = "secret" })
		require.Equal(t, "PONG", withUser.Ping(ctx).Val())

		wrong := s.Client(t, func(o *redis.Options) { o.Password = "nope"; o.MaxRetries = -1 })
		err = wrong.Ping(ctx).Err()
		require.Error(t, err)
		require.Contains(t, err.Error(), "WRONGPASS")

		none := s.Client(t, func(o *redis.Options) { o.MaxRetries = -1 })
		err = none.Ping(ctx).Err()
		require.Error(t, err)
		require.Equal(t, noAuth, err.Error())
	})
}

func TestAuthWithoutRequirePass(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	c := s.Raw(t)
	require.Equal(t, "-"+authNoPass+"\r\n", string(c.DoArgs("AUTH", "x")))
	require.Equal(t, "+OK\r\n", string(c.DoArgs("AUTH", "default", "anything")), "default user is nopass")
	require.Equal(t, "-"+wrongPass+"\r\n", string(c.DoArgs("AUTH", "bob", "x")))
	require.True(t, strings.HasPrefix(string(c.DoArgs("HELLO", "2")), "*14\r\n"))
	require.True(t, strings.HasPrefix(string(c.DoArgs("HELLO", "3")), "%7\r\n"))
	require.Equal(t, "-NOPROTO unsupported protocol version\r\n", string(c.DoArgs("HELLO", "4")))
	require.Equal(t, "+PONG\r\n", string(c.DoArgs("PING")))
	require.Equal(t, "_\r\n", string(c.DoArgs("GET", "nope")), "still RESP3 after the refused HELLO 4")
}

func TestDebugRefusedByDefault(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	c := s.Raw(t)
	for _, args := range [][]string{
		{"DEBUG", "CLOCK", "SET", "1"},
		{"DEBUG", "CLOCK", "REAL"},
		{"debug", "help"},
	} {
		require.Equal(t, "-"+debugRefused+"\r\n", string(c.DoArgs(args...)), "%q", args)
	}
	// The clock was not touched.
	tm, err := s.Client(t).Time(ctxT(t, 10*time.Second)).Result()
	require.NoError(t, err)
	require.WithinDuration(t, time.Now(), tm, 5*time.Second)
}

func TestDebugLocal(t *testing.T) {
	t.Parallel()
	s := startServerOn(t, "0.0.0.0", "--enable-debug-command", "local")
	c := s.Raw(t)
	require.Equal(t, "+OK\r\n", string(c.DoArgs("DEBUG", "CLOCK", "SET", "1")), "allowed from 127.0.0.1")
	require.Equal(t, "*2\r\n$1\r\n0\r\n$1\r\n0\r\n", string(c.DoArgs("TIME")), "TIME reads the frozen clock")
	require.Equal(t, "+OK\r\n", string(c.DoArgs("DEBUG", "CLOCK", "REAL")))

	ip := nonLoopbackIPv4()
	if ip == nil {
		t.Log("no non-loopback IPv4 address: the refusal of remote clients is not checked")
		return
	}
	nc, err := net.DialTimeout("tcp", net.JoinHostPort(ip.String(), strconv.Itoa(s.Port)), 5*time.Second)
	require.NoError(t, err)
	remote := &rawConn{t: t, nc: nc, r: newReader(nc)}
	t.Cleanup(func() { _ = nc.Close() })
	require.Equal(t, "-"+debugRefused+"\r\n", string(remote.DoArgs("DEBUG", "CLOCK", "SET", "1")), "refused from %s", ip)
	require.Equal(t, "+PONG\r\n", string(remote.DoArgs("PING")))
}

func nonLoopbackIPv4() net.IP {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && n.IP.To4() != nil {
			return n.IP.To4()
		}
	}
	return nil
}

func TestDebugClock(t *testing.T) {
	t.Parallel()
	s := startServer(t, "--enable-debug-command", "yes")
	c := s.Raw(t)
	const t0 = "1700000000000000000"
	steps := []struct {
		args []string
		want string
	}{
		{[]string{"DEBUG", "CLOCK", "SET", t0}, "+OK\r\n"},
		{[]string{"TIME"}, "*2\r\n$10\r\n1700000000\r\n$1\r\n0\r\n"},
		// Spec §6 example B, stepping the clock with ADVANCE.
		{[]string{"CL.THROTTLE", "B", "0", "1", "2"}, string(respInts(0, 1, 0, -1, 2))},
		{[]string{"PTTL", "B"}, ":2000\r\n"},
		{[]string{"CL.THROTTLE", "B", "0", "1", "2"}, string(respInts(1, 1, 0, 2, 2))},
		{[]string{"DEBUG", "CLOCK", "ADVANCE", "1000000000"}, "+OK\r\n"},
		{[]string{"CL.THROTTLE", "B", "0", "1", "2"}, string(respInts(1, 1, 0, 1, 1))},
		{[]string{"PTTL", "B"}, ":1000\r\n"},
		{[]string{"DEBUG", "CLOCK", "ADVANCE", "999000000"}, "+OK\r\n"},
		{[]string{"PTTL", "B"}, ":1\r\n"},
		{[]string{"DEBUG", "CLOCK", "ADVANCE", "1000000"}, "+OK\r\n"},
		{[]string{"PTTL", "B"}, ":0\r\n"}, // at its expiry millisecond: still there
		{[]string{"DEBUG", "CLOCK", "ADVANCE", "999999"}, "+OK\r\n"},
		{[]string{"EXISTS", "B"}, ":1\r\n"},
		{[]string{"DEBUG", "CLOCK", "ADVANCE", "1"}, "+OK\r\n"},
		{[]string{"PTTL", "B"}, ":-2\r\n"}, // its millisecond has passed
		{[]string{"CL.THROTTLE", "B", "0", "1", "2"}, string(respInts(0, 1, 0, -1, 2))},
		{[]string{"DEBUG", "CLOCK", "ADVANCE", "500000000"}, "+OK\r\n"},
		{[]string{"CL.THROTTLE", "B", "0", "1", "2"}, string(respInts(1, 1, 0, 2, 2))},
		{[]string{"TIME"}, "*2\r\n$10\r\n1700000002\r\n$6\r\n501000\r\n"},
		// Moving back (spec §5): 4 1 1 at t0 then t0-3s.
		{[]string{"DEBUG", "CLOCK", "SET", t0}, "+OK\r\n"},
		{[]string{"CL.THROTTLE", "C", "4", "1", "1"}, string(respInts(0, 5, 4, -1, 1))},
		{[]string{"DEBUG", "CLOCK", "ADVANCE", "-3000000000"}, "+OK\r\n"},
		{[]string{"CL.THROTTLE", "C", "4", "1", "1"}, string(respInts(0, 5, 0, -1, 5))},
		{[]string{"CL.THROTTLE", "C", "4", "1", "1"}, string(respInts(1, 5, 0, 1, 5))},
		// Errors.
		{[]string{"DEBUG", "CLOCK", "SET", "x"}, "-ERR value is not an integer or out of range\r\n"},
		{[]string{"DEBUG", "CLOCK", "SET"}, "-ERR syntax error\r\n"},
		{[]string{"DEBUG", "CLOCK", "JUMP", "1"}, "-ERR syntax error\r\n"},
		{[]string{"DEBUG", "FOO"}, "-ERR unknown subcommand 'FOO'. Try DEBUG HELP.\r\n"},
		{[]string{"DEBUG"}, "-ERR wrong number of arguments for 'debug' command\r\n"},
		{[]string{"DEBUG", "CLOCK", "REAL"}, "+OK\r\n"},
	}
	for i, st := range steps {
		require.Equal(t, st.want, string(c.DoArgs(st.args...)), "step %d: %q", i, st.args)
	}
	tm, err := s.Client(t).Time(ctxT(t, 10*time.Second)).Result()
	require.NoError(t, err)
	require.WithinDuration(t, time.Now(), tm, 5*time.Second, "DEBUG CLOCK REAL returns to the wall clock")
}

func TestQuit(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	c := s.Raw(t)
	require.Equal(t, "+PONG\r\n", string(c.DoArgs("PING")))
	require.Equal(t, "+OK\r\n", string(c.DoArgs("QUIT")))
	c.ExpectClosed()

	// Commands pipelined after QUIT are not run.
	c = s.Raw(t)
	c.Send([]byte("PING\r\nQUIT\r\nCL.THROTTLE afterquit 1 1 1\r\nPING\r\n"))
	require.Equal(t, "+PONG\r\n", string(c.ReadReply()))
	require.Equal(t, "+OK\r\n", string(c.ReadReply()))
	c.ExpectClosed()
	require.Equal(t, ":0\r\n", string(s.Raw(t).DoArgs("EXISTS", "afterquit")))

	// Commands queued before QUIT in the same pipeline are answered first.
	c = s.Raw(t)
	c.Send([]byte("CL.THROTTLE beforequit 1 1 60\r\nQUIT\r\n"))
	require.Equal(t, string(respInts(0, 2, 1, -1, 60)), string(c.ReadReply()))
	require.Equal(t, "+OK\r\n", string(c.ReadReply()))
	c.ExpectClosed()
	require.Equal(t, ":1\r\n", string(s.Raw(t).DoArgs("EXISTS", "beforequit")))
}

func TestMaxClients(t *testing.T) {
	t.Parallel()
	s := startServer(t, "--maxclients", "2")
	// The readiness probe's connection may not be reaped yet: retry.
	served := func() *rawConn {
		deadline := time.Now().Add(10 * time.Second)
		for {
			c := s.Raw(t)
			got := string(c.DoArgs("PING"))
			if got == "+PONG\r\n" {
				return c
			}
			require.True(t, time.Now().Before(deadline), "never served: %q", got)
			time.Sleep(20 * time.Millisecond)
		}
	}
	a := served()
	served()
	c := s.Raw(t)
	require.Equal(t, "-ERR max number of clients reached\r\n", string(c.ReadReply()))
	c.ExpectClosed()
	_ = a.nc.Close()
	// Once a slot frees up, new connections are served again.
	served()
	require.Contains(t, string(s.Raw(t).ReadReply()), "max number of clients reached")
}

func TestErrorStats(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	c := s.Raw(t)
	c.DoArgs("CL.THROTTLE", "k", "1", "0", "1")
	c.DoArgs("CL.THROTTLE", "k")
	c.DoArgs("nosuchcommand")
	info := string(c.DoArgs("INFO", "errorstats"))
	require.Contains(t, info, "errorstat_Cell:count=2\r\n", "spec §1: the first word, Cell, is the error code")
	require.Contains(t, info, "errorstat_ERR:count=1\r\n")
}

func TestGracefulShutdown(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	ctx := ctxT(t, 30*time.Second)
	rdb := s.Client(t)
	require.Equal(t, "PONG", rdb.Ping(ctx).Val())
	idle := s.Raw(t)
	require.Equal(t, "+PONG\r\n", string(idle.DoArgs("PING")))
	partial := s.Raw(t)
	partial.Send([]byte("*2\r\n$4\r\nECHO\r\n")) // a command cut in the middle

	start := time.Now()
	code := s.Stop()
	took := time.Since(start)
	require.Equal(t, 0, code, "exit status after SIGTERM; output:\n%s", s.Output())
	require.Less(t, took, 5*time.Second, "shutdown with connected clients took %v", took)

	out := s.Output()
	require.Contains(t, out, "listening", "the log must say it listened")
	require.Contains(t, out, s.Addr)
	require.Contains(t, out, "shutting down", "the log must say it shut down")
	idle.ExpectClosed()
	partial.ExpectClosed()
	_, err := net.DialTimeout("tcp", s.Addr, time.Second)
	require.Error(t, err, "nothing may listen after exit")
}

// TestThreadsFlag: --threads 1 runs every event loop and shard owner on
// one CPU; with four shards beside it, pipelines from concurrent clients
// that span every shard are still each answered in order, and each key's
// decisions stay exact. Every key has its own burst, so a reply that went
// to the wrong command or client would not match.
func TestThreadsFlag(t *testing.T) {
	t.Parallel()
	s := startServer(t, "--threads", "1", "--shards", "4")
	require.Eventually(t, func() bool { return strings.Contains(s.Output(), "threads=1 shards=4") },
		5*time.Second, 10*time.Millisecond, "startup line: %s", s.Output())
	const clients, perClient = 8, 20
	errs := make(chan error, clients)
	for i := 0; i < clients; i++ {
		go func(i int) {
			errs <- func() error {
				rdb := s.Client(t)
				ctx := ctxT(t, 30*time.Second)
				for n := 0; n < perClient; n++ {
					pipe := rdb.Pipeline()
					cmds := make([]*redis.Cmd, 16)
					for j := range cmds {
						cmds[j] = pipe.Do(ctx, "CL.THROTTLE", "thr:"+strconv.Itoa(i)+":"+strconv.Itoa(j), 100+16*i+j, 1, 3600)
					}
					if _, err := pipe.Exec(ctx); err != nil {
						return err
					}
					for j, c := range cmds {
						// Each key gets one call per round: the n-th is
						// allowed with burst-n calls left, and the limit
						// resets (n+1) emission intervals of an hour from now.
						burst := int64(100 + 16*i + j)
						want := []interface{}{int64(0), burst + 1, burst - int64(n), int64(-1)}
						got, err := c.Slice()
						if err != nil || len(got) != 5 || !assert.ObjectsAreEqual(want, got[:4]) {
							return fmt.Errorf("client %d round %d key %d: got %v (%v), want %v and a reset", i, n, j, got, err, want)
						}
						reset, ok := got[4].(int64)
						if want := int64(3600 * (n + 1)); !ok || reset > want || reset < want-60 {
							return fmt.Errorf("client %d round %d key %d: reset %v, want about %d", i, n, j, got[4], want)
						}
					}
				}
				return nil
			}()
		}(i)
	}
	var failed []error
	for i := 0; i < clients; i++ {
		if err := <-errs; err != nil {
			failed = append(failed, err)
		}
	}
	require.Empty(t, failed)
}

// TestClientFDAndRunID: CLIENT LIST shows the socket's real descriptor (an
// open fd of the server process) and INFO has a run_id of 40 hex characters
// that changes with every start, as tools expect of Redis.
func TestClientFDAndRunID(t *testing.T) {
	t.Parallel()
	s := startServer(t, "--in-memory")
	c := s.Raw(t)
	list := string(c.DoArgs("CLIENT", "INFO"))
	m := regexp.MustCompile(` fd=(\d+) `).FindStringSubmatch(list)
	require.NotNil(t, m, list)
	_, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", s.cmd.Process.Pid, m[1]))
	require.NoError(t, err, "fd=%s must be one of the server's descriptors", m[1])
	runID := func(s *server) string {
		info := string(s.Raw(t).DoArgs("INFO", "server"))
		m := regexp.MustCompile(`(?m)^run_id:([0-9a-f]{40})\r$`).FindStringSubmatch(info)
		require.NotNil(t, m, info)
		return m[1]
	}
	require.NotEqual(t, runID(s), runID(startServer(t, "--in-memory")))
}
