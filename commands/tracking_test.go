package commands

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// pushLog records what the server pushes to one client.
type pushLog struct {
	mu   sync.Mutex
	msgs []string
}

func (p *pushLog) push(msg []byte) {
	p.mu.Lock()
	p.msgs = append(p.msgs, string(msg))
	p.mu.Unlock()
}

// take returns what was pushed since the last take. The store calls the
// listeners before the batch that changed a key signals, so after a
// command's reply its pushes are all here.
func (p *pushLog) take() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	m := p.msgs
	p.msgs = nil
	return m
}

func pushes(h *harness) *pushLog {
	p := &pushLog{}
	h.c.SetPusher(p.push)
	return p
}

func invalidate(key string) string { return string(appendInvalidate(nil, []byte(key), false, 3)) }

// TestTrackingErrors: every refusal of CLIENT TRACKING and CLIENT CACHING
// in Redis 7's words and order, each against the state the case leaves.
func TestTrackingErrors(t *testing.T) {
	h := newHarness(t, Config{})
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"CLIENT", "CACHING", "YES"}, "-" + ErrCachingOff + "\r\n"},
		{[]string{"CLIENT", "CACHING", "maybe"}, "-" + ErrCachingOff + "\r\n"},
		{[]string{"CLIENT", "TRACKING", "ON", "PREFIX", "a"}, "-" + ErrTrackPrefixNoBcast + "\r\n"},
		{[]string{"CLIENT", "TRACKING", "ON", "BCAST", "PREFIX", "a", "PREFIX", "ab"}, "-ERR Prefix 'a' overlaps with another provided prefix 'ab'. Prefixes for a single client must not overlap.\r\n"},
		{[]string{"CLIENT", "TRACKING", "ON", "OPTIN", "OPTOUT"}, "-" + ErrTrackOptBoth + "\r\n"},
		{[]string{"CLIENT", "TRACKING", "ON", "BCAST", "OPTIN"}, "-" + ErrTrackBcastOpt + "\r\n"},
		{[]string{"CLIENT", "TRACKING", "ON", "REDIRECT", "999"}, "-" + ErrTrackRedirMissing + "\r\n"},
		{[]string{"CLIENT", "TRACKING", "ON", "REDIRECT", "abc"}, "-" + ErrNotInteger + "\r\n"},
		{[]string{"CLIENT", "TRACKING", "ON", "REDIRECT", "1", "REDIRECT", "1"}, "-" + ErrTrackRedirTwice + "\r\n"},
		{[]string{"CLIENT", "TRACKING", "ON", "REDIRECT"}, "-" + ErrSyntax + "\r\n"},
		{[]string{"CLIENT", "TRACKING", "ON", "foo"}, "-" + ErrSyntax + "\r\n"},
		{[]string{"CLIENT", "TRACKING", "maybe"}, "-" + ErrSyntax + "\r\n"},
		{[]string{"CLIENT", "TRACKING"}, "-ERR wrong number of arguments for 'client|tracking' command\r\n"},
		{[]string{"CLIENT", "TRACKING", "OFF", "PREFIX", "p"}, "+OK\r\n"},
		{[]string{"CLIENT", "TRACKING", "ON", "OPTIN"}, "+OK\r\n"},
		{[]string{"CLIENT", "CACHING", "NO"}, "-" + ErrCachingNo + "\r\n"},
		{[]string{"CLIENT", "CACHING", "maybe"}, "-" + ErrSyntax + "\r\n"},
		{[]string{"CLIENT", "TRACKING", "ON", "OPTOUT"}, "-" + ErrTrackOptSwitch + "\r\n"},
		{[]string{"CLIENT", "TRACKING", "ON", "BCAST"}, "-" + ErrTrackBcastSwitch + "\r\n"},
		{[]string{"CLIENT", "TRACKING", "OFF"}, "+OK\r\n"},
		{[]string{"CLIENT", "TRACKING", "ON", "OPTOUT"}, "+OK\r\n"},
		{[]string{"CLIENT", "CACHING", "YES"}, "-" + ErrCachingYes + "\r\n"},
		{[]string{"CLIENT", "TRACKING", "OFF"}, "+OK\r\n"},
		{[]string{"CLIENT", "TRACKING", "ON", "BCAST", "PREFIX", "ab", "PREFIX", "cd"}, "+OK\r\n"},
		{[]string{"CLIENT", "TRACKING", "ON", "BCAST", "PREFIX", "a"}, "-ERR Prefix 'a' overlaps with an existing prefix 'ab'. Prefixes for a single client must not overlap.\r\n"},
		{[]string{"CLIENT", "TRACKING", "ON", "BCAST", "PREFIX", "ab"}, "-ERR Prefix 'ab' overlaps with an existing prefix 'ab'. Prefixes for a single client must not overlap.\r\n"},
		{[]string{"CLIENT", "TRACKING", "ON"}, "-" + ErrTrackBcastSwitch + "\r\n"},
		{[]string{"CLIENT", "CACHING", "YES"}, "-" + ErrCachingYes + "\r\n"},
		{[]string{"CLIENT", "TRACKING", "ON", "BCAST", "PREFIX", "x"}, "+OK\r\n"},
	}
	for _, tc := range cases {
		assert.Equal(t, tc.want, h.cmd(tc.args...), "%q", tc.args)
	}
	assert.Equal(t, "*6\r\n$5\r\nflags\r\n*2\r\n$2\r\non\r\n$5\r\nbcast\r\n$8\r\nredirect\r\n:0\r\n$8\r\nprefixes\r\n*3\r\n$2\r\nab\r\n$2\r\ncd\r\n$1\r\nx\r\n",
		h.cmd("CLIENT", "TRACKINGINFO"))
}

// TestTrackingInfo: CLIENT TRACKINGINFO and GETREDIR in both protocols,
// and CLIENT LIST's flags and redir.
func TestTrackingInfo(t *testing.T) {
	h := newHarness(t, Config{})
	off2 := "*6\r\n$5\r\nflags\r\n*1\r\n$3\r\noff\r\n$8\r\nredirect\r\n:-1\r\n$8\r\nprefixes\r\n*0\r\n"
	assert.Equal(t, off2, h.cmd("CLIENT", "TRACKINGINFO"))
	assert.Equal(t, ":-1\r\n", h.cmd("CLIENT", "GETREDIR"))
	assert.Contains(t, h.cmd("CLIENT", "INFO"), " flags=N ")
	assert.Contains(t, h.cmd("CLIENT", "INFO"), " redir=-1 ")
	assert.Contains(t, h.cmd("CLIENT", "HELP"), "+TRACKINGINFO\r\n+    Report tracking status for the current connection.\r\n")

	h.cmd("CLIENT", "TRACKING", "ON", "OPTIN", "NOLOOP")
	h.cmd("CLIENT", "CACHING", "YES")
	assert.Equal(t, "*6\r\n$5\r\nflags\r\n*4\r\n$2\r\non\r\n$5\r\noptin\r\n$11\r\ncaching-yes\r\n$6\r\nnoloop\r\n$8\r\nredirect\r\n:0\r\n$8\r\nprefixes\r\n*0\r\n",
		h.cmd("CLIENT", "TRACKINGINFO"))
	assert.Equal(t, ":0\r\n", h.cmd("CLIENT", "GETREDIR"))
	assert.Contains(t, h.cmd("CLIENT", "INFO"), " flags=t ")

	h.cmd("HELLO", "3")
	assert.Equal(t, "%3\r\n$5\r\nflags\r\n~3\r\n$2\r\non\r\n$5\r\noptin\r\n$6\r\nnoloop\r\n$8\r\nredirect\r\n:0\r\n$8\r\nprefixes\r\n*0\r\n",
		h.cmd("CLIENT", "TRACKINGINFO"), "the CACHING flag went with the HELLO")

	// REDIRECT to another client; BCAST shows B.
	other := h.srv.NewClient(nil, nil)
	h.cmd("CLIENT", "TRACKING", "OFF")
	require.Equal(t, "+OK\r\n", h.cmd("CLIENT", "TRACKING", "ON", "BCAST", "REDIRECT", strconv.FormatInt(other.ID, 10)))
	assert.Equal(t, ":"+strconv.FormatInt(other.ID, 10)+"\r\n", h.cmd("CLIENT", "GETREDIR"))
	info := h.cmd("CLIENT", "INFO")
	assert.Contains(t, info, " flags=tB ")
	assert.Contains(t, info, " redir="+strconv.FormatInt(other.ID, 10)+" ")
	h.cmd("CLIENT", "TRACKING", "OFF")
	assert.Contains(t, h.cmd("CLIENT", "INFO"), " flags=N ")
	assert.Nil(t, h.srv.bcast.cur.Load(), "no BCAST client left")
}

// throttler returns a function that charges keys with an allowed
// CL.THROTTLE from a client of its own (a writer other than the tracking
// client).
func throttler(t *testing.T, h *harness) func(keys ...string) {
	writer := h.srv.NewClient(nil, nil)
	return func(keys ...string) {
		t.Helper()
		for _, k := range keys {
			var out Out
			h.srv.Exec(writer, [][][]byte{{[]byte("CL.THROTTLE"), []byte(k), []byte("100"), []byte("100"), []byte("60")}}, &out)
			require.True(t, strings.HasPrefix(string(out.B), "*5\r\n:0\r\n"), string(out.B))
		}
	}
}

// TestTrackingRemembers: which reads are remembered in each mode, and that
// each remembered key is told once.
func TestTrackingRemembers(t *testing.T) {
	h := newHarness(t, Config{})
	p := pushes(h)
	write := throttler(t, h)
	h.cmd("HELLO", "3")
	h.cmd("CLIENT", "TRACKING", "ON")
	// Read-only commands with keys are remembered, in a pipeline too.
	h.do([]string{"GET", "a"}, []string{"EXISTS", "b", "c"}, []string{"PTTL", "d"}, []string{"TYPE", "e"}, []string{"CL.PEEK", "f", "1", "1", "1"})
	assert.EqualValues(t, 6, h.srv.trackedKeys.Load())
	write("a", "b", "c", "d", "e", "f", "a")
	assert.Equal(t, []string{invalidate("a"), invalidate("b"), invalidate("c"), invalidate("d"), invalidate("e"), invalidate("f")}, p.take())
	assert.EqualValues(t, 0, h.srv.trackedKeys.Load())

	// A write (CL.THROTTLE) remembers nothing.
	h.cmd("CL.THROTTLE", "w", "1", "1", "1")
	write("w")
	assert.Empty(t, p.take())

	// OFF withdraws the registrations.
	h.cmd("GET", "x")
	h.cmd("CLIENT", "TRACKING", "OFF")
	assert.EqualValues(t, 0, h.srv.trackedKeys.Load())
	write("x")
	assert.Empty(t, p.take())

	// A client's close withdraws them too.
	h.cmd("CLIENT", "TRACKING", "ON")
	h.cmd("GET", "y")
	assert.EqualValues(t, 1, h.srv.trackedKeys.Load())
	h.c.Close()
	assert.EqualValues(t, 0, h.srv.trackedKeys.Load())
}

// TestTrackingMaxKeys: past TrackingMaxKeys a read key is not remembered
// but invalidated at once, so nothing is cached past the bound.
func TestTrackingMaxKeys(t *testing.T) {
	h := newHarness(t, Config{TrackingMaxKeys: 2})
	p := pushes(h)
	h.cmd("HELLO", "3")
	h.cmd("CLIENT", "TRACKING", "ON")
	h.do([]string{"GET", "a"}, []string{"GET", "b"}, []string{"GET", "a"})
	assert.Empty(t, p.take())
	h.cmd("GET", "c")
	assert.Equal(t, []string{invalidate("c")}, p.take())
	assert.EqualValues(t, 2, h.srv.trackedKeys.Load())
}

// TestTrackingRESP2: a RESP2 client with no redirect is tracked but gets
// no pushes (RESP2 has none), as in Redis.
func TestTrackingRESP2(t *testing.T) {
	h := newHarness(t, Config{})
	p := pushes(h)
	h.cmd("CLIENT", "TRACKING", "ON")
	h.cmd("GET", "a")
	h.cmd("CL.THROTTLE", "a", "1", "1", "1")
	assert.Empty(t, p.take())
	h.cmd("FLUSHALL")
	assert.Empty(t, p.take())
}

// TestTrackingOptinTransaction: CLIENT CACHING YES covers a whole
// MULTI/EXEC (rueidis's DoCache sends CACHING YES, MULTI, PTTL, GET, EXEC)
// and is spent by the command after EXEC; DISCARD spends it too.
func TestTrackingOptinTransaction(t *testing.T) {
	h := newHarness(t, Config{})
	p := pushes(h)
	write := throttler(t, h)
	h.cmd("HELLO", "3")
	h.cmd("CLIENT", "TRACKING", "ON", "OPTIN")
	r := h.do([]string{"CLIENT", "CACHING", "YES"}, []string{"MULTI"}, []string{"PTTL", "a"}, []string{"GET", "b"}, []string{"EXEC"}, []string{"GET", "c"})
	require.Equal(t, "+OK\r\n+OK\r\n+QUEUED\r\n+QUEUED\r\n*2\r\n:-2\r\n_\r\n_\r\n", r)
	write("c", "a", "b")
	assert.Equal(t, []string{invalidate("a"), invalidate("b")}, p.take())

	h.do([]string{"CLIENT", "CACHING", "YES"}, []string{"MULTI"}, []string{"GET", "d"}, []string{"DISCARD"}, []string{"GET", "e"})
	write("d", "e")
	assert.Empty(t, p.take())
}

// TestTrackingFlush: FLUSHALL tells a tracking client once, with the null
// invalidation, not once per key it read; those keys are forgotten.
func TestTrackingFlush(t *testing.T) {
	h := newHarness(t, Config{})
	p := pushes(h)
	h.cmd("HELLO", "3")
	h.cmd("CL.THROTTLE", "a", "1", "1", "1")
	h.cmd("CL.THROTTLE", "b", "1", "1", "1")
	h.cmd("CLIENT", "TRACKING", "ON")
	h.do([]string{"GET", "a"}, []string{"GET", "b"}, []string{"GET", "missing"})
	writer := h.srv.NewClient(nil, nil)
	var out Out
	h.srv.Exec(writer, [][][]byte{{[]byte("FLUSHALL")}}, &out)
	require.Equal(t, "+OK\r\n", string(out.B))
	assert.Equal(t, []string{">2\r\n$10\r\ninvalidate\r\n_\r\n"}, p.take())
	assert.EqualValues(t, 1, h.srv.trackedKeys.Load(), "only the missing key is still registered")
	h.cmd("CL.THROTTLE", "a", "1", "1", "1")
	assert.Empty(t, p.take())
	r := h.cmd("CL.THROTTLE", "missing", "1", "1", "1")
	assert.Equal(t, "*5\r\n:0\r\n:2\r\n:1\r\n:-1\r\n:1\r\n"+invalidate("missing"), r, "its own change: told after the reply")
	assert.Empty(t, p.take())
}

// TestTrackingOwnChangeAfterItsReply: a RESP3 client's invalidation of a
// key it changed itself comes right after the reply of the command that
// changed it, before the replies of the rest of the pipeline, as Redis
// writes it (its tracking_pending_keys); another client's change, a
// redirect's target and RESP2 keep the push between pipelines.
func TestTrackingOwnChangeAfterItsReply(t *testing.T) {
	h := newHarness(t, Config{})
	p := pushes(h)
	h.cmd("HELLO", "3")
	h.cmd("CL.THROTTLE", "b", "1", "1", "1")
	h.cmd("CLIENT", "TRACKING", "ON")
	h.do([]string{"GET", "a"}, []string{"GET", "b"}, []string{"GET", "c"})
	const allowed = "*5\r\n:0\r\n:2\r\n:1\r\n:-1\r\n:1\r\n"
	r := h.do([]string{"CL.THROTTLE", "a", "1", "1", "1"}, []string{"PING"}, []string{"DEL", "b", "zz"}, []string{"CL.LIMIT", "c", "FW", "5", "60"}, []string{"PING"})
	assert.Equal(t, allowed+invalidate("a")+"+PONG\r\n:1\r\n"+invalidate("b")+
		"*7\r\n:0\r\n:5\r\n:4\r\n:-1\r\n:40\r\n:1\r\n*1\r\n*5\r\n:0\r\n:5\r\n:4\r\n:-1\r\n:40\r\n"+invalidate("c")+"+PONG\r\n", r)
	assert.Empty(t, p.take(), "nothing left for between pipelines")

	// A transaction's: after EXEC's reply.
	h.cmd("GET", "d")
	r = h.do([]string{"MULTI"}, []string{"CL.THROTTLE", "d", "1", "1", "1"}, []string{"EXEC"}, []string{"PING"})
	assert.Equal(t, "+OK\r\n+QUEUED\r\n*1\r\n"+allowed+invalidate("d")+"+PONG\r\n", r)

	// Another client's change: a push, between pipelines.
	h.cmd("GET", "e")
	throttler(t, h)("e")
	assert.Equal(t, []string{invalidate("e")}, p.take())

	// Its own flush: the null invalidation after FLUSHALL's reply.
	r = h.do([]string{"FLUSHALL"}, []string{"PING"})
	assert.Equal(t, "+OK\r\n>2\r\n$10\r\ninvalidate\r\n_\r\n+PONG\r\n", r)
	assert.Empty(t, p.take())
}

// TestTrackingConcurrent: tracking clients reading, switching modes and
// closing while writers change the same keys: no data race (under -race),
// no deadlock, a read key changed after its read is always told, and once
// every tracking client is gone nothing is left registered or counted.
func TestTrackingConcurrent(t *testing.T) {
	h := newHarness(t, Config{})
	s := h.srv
	run := func(c *Client, args ...string) string {
		argv := make([][]byte, len(args))
		for i, a := range args {
			argv[i] = []byte(a)
		}
		var out Out
		s.Exec(c, [][][]byte{argv}, &out)
		return string(out.B)
	}
	keys := []string{"k0", "k1", "k2", "k3", "k4", "k5", "k6", "k7"}
	stop := make(chan struct{})
	var writers sync.WaitGroup
	for w := 0; w < 3; w++ {
		writers.Add(1)
		go func() {
			defer writers.Done()
			c := s.NewClient(nil, nil)
			defer c.Close()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				run(c, "CL.THROTTLE", keys[i%len(keys)], "1000", "1000", "1")
				if i%50 == 0 {
					run(c, "DEL", keys[(i/50)%len(keys)])
				}
			}
		}()
	}
	var readers sync.WaitGroup
	for r := 0; r < 4; r++ {
		readers.Add(1)
		go func() {
			defer readers.Done()
			for round := 0; round < 20; round++ {
				c := s.NewClient(nil, nil)
				p := &pushLog{}
				c.SetPusher(p.push)
				run(c, "HELLO", "3")
				if round%3 == 0 {
					run(c, "CLIENT", "TRACKING", "ON", "BCAST", "PREFIX", "k1", "PREFIX", "k2")
				} else {
					run(c, "CLIENT", "TRACKING", "ON", "NOLOOP")
				}
				for i, k := range keys {
					run(c, "GET", k)
					if i == 4 && round%2 == 0 {
						run(c, "CLIENT", "TRACKING", "OFF")
						run(c, "CLIENT", "TRACKING", "ON")
					}
				}
				if round%3 != 0 {
					// A key this client read, changed after the read, is told.
					run(c, "GET", "k7")
					before := len(p.take())
					run(c, "CL.THROTTLE", "k7", "1000", "1000", "1") // NOLOOP: the client's own write is not told
					w := s.NewClient(nil, nil)
					run(c, "GET", "k7")
					// A change whether k7 exists (DEL) or not (a fresh key's
					// CL.THROTTLE is allowed).
					run(w, "DEL", "k7")
					run(w, "CL.THROTTLE", "k7", "1000", "1000", "1")
					w.Close()
					found := false
					for _, m := range p.take() {
						found = found || m == invalidate("k7")
					}
					assert.True(t, found, "round %d: no invalidation of k7 (%d pushes before)", round, before)
				}
				c.Close()
			}
		}()
	}
	readers.Wait()
	close(stop)
	writers.Wait()
	assert.EqualValues(t, 0, s.trackedKeys.Load(), "every tracking client closed: nothing counted")
	assert.Nil(t, s.bcast.cur.Load())
}

// TestTrackingRedirectRESP2: a RESP2 redirect target is sent Pub/Sub
// messages only while subscribed to __redis__:invalidate.
func TestTrackingRedirectRESP2(t *testing.T) {
	h := newHarness(t, Config{})
	sink := h.srv.NewClient(nil, nil)
	p := &pushLog{}
	sink.SetPusher(p.push)
	run := func(c *Client, args ...string) string {
		argv := make([][]byte, len(args))
		for i, a := range args {
			argv[i] = []byte(a)
		}
		var out Out
		h.srv.Exec(c, [][][]byte{argv}, &out)
		return string(out.B)
	}
	h.cmd("CLIENT", "TRACKING", "ON", "REDIRECT", strconv.FormatInt(sink.ID, 10))
	h.cmd("GET", "a")
	h.cmd("CL.THROTTLE", "a", "1", "1", "1")
	assert.Empty(t, p.take(), "not subscribed: nothing")

	require.Equal(t, "*3\r\n$9\r\nsubscribe\r\n$20\r\n__redis__:invalidate\r\n:1\r\n", run(sink, "SUBSCRIBE", "__redis__:invalidate"))
	assert.Contains(t, run(h.c, "CLIENT", "LIST", "TYPE", "pubsub"), " flags=P ")
	h.cmd("GET", "a")
	h.cmd("CL.THROTTLE", "a", "1", "1", "1")
	h.cmd("FLUSHALL")
	assert.Equal(t, []string{"*3\r\n$7\r\nmessage\r\n$20\r\n__redis__:invalidate\r\n*1\r\n$1\r\na\r\n", "*3\r\n$7\r\nmessage\r\n$20\r\n__redis__:invalidate\r\n$-1\r\n"}, p.take())

	assert.Equal(t, "-ERR Can't execute 'get': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context\r\n", run(sink, "GET", "a"))
	run(sink, "UNSUBSCRIBE")
	h.cmd("GET", "a")
	h.cmd("CL.THROTTLE", "a", "1", "1", "1")
	assert.Empty(t, p.take())
	assert.Equal(t, "$-1\r\n", run(sink, "GET", "nope"))
}

// TestTrackingPrefixCountFirst: too many prefixes are refused before the
// overlap check, which compares every pair (200k prefixes held the server
// for a minute when it ran first).
func TestTrackingPrefixCountFirst(t *testing.T) {
	h := newHarness(t, Config{})
	args := []string{"CLIENT", "TRACKING", "ON", "BCAST", "PREFIX", "a", "PREFIX", "ab"}
	for i := range 200000 {
		args = append(args, "PREFIX", fmt.Sprintf("p%07d", i))
	}
	assert.Equal(t, "-ERR too many tracking prefixes for one client (at most 1024)\r\n", h.cmd(args...))
	args = []string{"CLIENT", "TRACKING", "ON", "BCAST"}
	for i := range 1024 {
		args = append(args, "PREFIX", fmt.Sprintf("p%07d", i))
	}
	assert.Equal(t, "+OK\r\n", h.cmd(args...))
	assert.Equal(t, "-ERR too many tracking prefixes for one client (at most 1024)\r\n", h.cmd("CLIENT", "TRACKING", "ON", "BCAST", "PREFIX", "q"))
}
