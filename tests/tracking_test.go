package tests

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// invalidation is the exact RESP3 push Redis sends when key changes.
func invalidation(key string) string {
	return fmt.Sprintf(">2\r\n$10\r\ninvalidate\r\n*1\r\n$%d\r\n%s\r\n", len(key), key)
}

// nullInvalidation is the push Redis sends every tracking client on FLUSHALL.
const nullInvalidation = ">2\r\n$10\r\ninvalidate\r\n_\r\n"

// resp3 opens a raw connection that said HELLO 3.
func resp3(t *testing.T, s *server) *rawConn {
	t.Helper()
	c := s.Raw(t)
	require.Equal(t, byte('%'), c.DoArgs("HELLO", "3")[0])
	return c
}

func ok(t *testing.T, c *rawConn, args ...string) {
	t.Helper()
	require.Equal(t, "+OK\r\n", string(c.DoArgs(args...)), "%q", args)
}

// throttle runs an allowed CL.THROTTLE on key (a write: the key changes).
func throttle(t *testing.T, c *rawConn, key string) {
	t.Helper()
	r := string(c.DoArgs("CL.THROTTLE", key, "100", "100", "60", "1"))
	require.True(t, strings.HasPrefix(r, "*5\r\n:0\r\n"), "CL.THROTTLE %s: %q", key, r)
}

// clientID is the connection's CLIENT ID.
func clientID(t *testing.T, c *rawConn) string {
	t.Helper()
	r := string(c.DoArgs("CLIENT", "ID"))
	require.True(t, strings.HasPrefix(r, ":"), r)
	return strings.TrimSpace(r[1:])
}

// TestTrackingInvalidatesReadKey: a RESP3 client that read a limiter key
// with GET is told once, with Redis's exact push, when another client's
// allowed CL.THROTTLE changes it; then it is forgotten until read again.
// Its own write is told too (no NOLOOP), after the write's reply.
func TestTrackingInvalidatesReadKey(t *testing.T) {
	t.Parallel()
	s := startServer(t, "--in-memory")
	tc, other := resp3(t, s), s.Raw(t)
	throttle(t, other, "k")
	ok(t, tc, "CLIENT", "TRACKING", "ON")
	require.Equal(t, byte('$'), tc.DoArgs("GET", "k")[0])
	require.Equal(t, "_\r\n", string(tc.DoArgs("GET", "missing")))

	throttle(t, other, "k")
	assert.Equal(t, invalidation("k"), string(tc.ReadReply()))
	// Forgotten: a second write is not told; a write of the missing key
	// read before is.
	throttle(t, other, "k")
	throttle(t, other, "missing")
	assert.Equal(t, invalidation("missing"), string(tc.ReadReply()))

	// The client's own write: the reply first, then the push.
	require.Equal(t, byte('$'), tc.DoArgs("GET", "k")[0])
	r := string(tc.DoArgs("CL.THROTTLE", "k", "100", "100", "60", "1"))
	require.True(t, strings.HasPrefix(r, "*5\r\n"), r)
	assert.Equal(t, invalidation("k"), string(tc.ReadReply()))

	// DEL and CL.RESET change keys too.
	require.Equal(t, byte('$'), tc.DoArgs("GET", "k")[0])
	require.Equal(t, ":1\r\n", string(other.DoArgs("DEL", "k")))
	assert.Equal(t, invalidation("k"), string(tc.ReadReply()))
	throttle(t, other, "k")
	require.Equal(t, byte('$'), tc.DoArgs("GET", "k")[0])
	require.Equal(t, ":1\r\n", string(other.DoArgs("CL.RESET", "k")))
	assert.Equal(t, invalidation("k"), string(tc.ReadReply()))

	// Off: no more pushes; the next reply is the PING's.
	require.Equal(t, byte('_'), tc.DoArgs("GET", "k")[0])
	ok(t, tc, "CLIENT", "TRACKING", "OFF")
	throttle(t, other, "k")
	assert.Equal(t, "+PONG\r\n", string(tc.DoArgs("PING")))
}

// TestTrackingExpiry: a key that expires (seen by a later read, or by the
// sweep) is invalidated.
func TestTrackingExpiry(t *testing.T) {
	t.Parallel()
	s := startServer(t, "--in-memory", "--enable-debug-command", "yes")
	tc, other := resp3(t, s), s.Raw(t)
	const now = int64(1700000000000000000)
	ok(t, other, "DEBUG", "CLOCK", "SET", strconv.FormatInt(now, 10))
	// 1 per minute, burst 1: the key lives about a minute.
	require.True(t, strings.HasPrefix(string(other.DoArgs("CL.THROTTLE", "exp", "0", "1", "60", "1")), "*5\r\n:0\r\n"))
	ok(t, tc, "CLIENT", "TRACKING", "ON")
	require.Equal(t, byte('$'), tc.DoArgs("GET", "exp")[0])
	ok(t, other, "DEBUG", "CLOCK", "ADVANCE", strconv.FormatInt(3600e9, 10))
	// The other client's read finds it expired (or the sweep got there
	// first): either way it changed, and the tracking client is told.
	require.Equal(t, "$-1\r\n", string(other.DoArgs("GET", "exp")))
	assert.Equal(t, invalidation("exp"), string(tc.ReadReply()))
}

// TestTrackingBcast: BCAST PREFIX tells of every change of a key under the
// prefixes, read or not, and of no other key.
func TestTrackingBcast(t *testing.T) {
	t.Parallel()
	s := startServer(t, "--in-memory")
	tc, other := resp3(t, s), s.Raw(t)
	ok(t, tc, "CLIENT", "TRACKING", "ON", "BCAST", "PREFIX", "user:", "PREFIX", "ip:")
	throttle(t, other, "other:1") // not told
	throttle(t, other, "user:1")
	assert.Equal(t, invalidation("user:1"), string(tc.ReadReply()))
	throttle(t, other, "ip:10.0.0.1")
	assert.Equal(t, invalidation("ip:10.0.0.1"), string(tc.ReadReply()))
	throttle(t, other, "user:1") // told again: nothing is forgotten in BCAST
	assert.Equal(t, invalidation("user:1"), string(tc.ReadReply()))

	// Off: the table is gone; the next reply is the PING's.
	ok(t, tc, "CLIENT", "TRACKING", "OFF")
	throttle(t, other, "user:1")
	assert.Equal(t, "+PONG\r\n", string(tc.DoArgs("PING")))
}

// TestTrackingNoloop: NOLOOP leaves out the client's own changes, in BCAST
// and in the default mode.
func TestTrackingNoloop(t *testing.T) {
	t.Parallel()
	s := startServer(t, "--in-memory")
	tc, other := resp3(t, s), s.Raw(t)
	ok(t, tc, "CLIENT", "TRACKING", "ON", "BCAST", "NOLOOP")
	throttle(t, tc, "mine")
	throttle(t, other, "theirs")
	assert.Equal(t, invalidation("theirs"), string(tc.ReadReply()))
	ok(t, tc, "CLIENT", "TRACKING", "OFF")

	ok(t, tc, "CLIENT", "TRACKING", "ON", "NOLOOP")
	require.Equal(t, byte('$'), tc.DoArgs("GET", "mine")[0])
	require.Equal(t, byte('$'), tc.DoArgs("GET", "theirs")[0])
	throttle(t, tc, "mine") // forgotten, untold
	throttle(t, other, "theirs")
	assert.Equal(t, invalidation("theirs"), string(tc.ReadReply()))
	throttle(t, other, "mine")
	assert.Equal(t, "+PONG\r\n", string(tc.DoArgs("PING")))
}

// TestTrackingRedirect: REDIRECT sends a (RESP2) tracking client's
// invalidations to a RESP3 connection; once that connection is gone, a
// RESP3 tracking client gets tracking-redir-broken instead, and CLIENT LIST
// shows the R flag.
func TestTrackingRedirect(t *testing.T) {
	t.Parallel()
	s := startServer(t, "--in-memory")
	sink, tc, other := resp3(t, s), s.Raw(t), s.Raw(t)
	id := clientID(t, sink)
	ok(t, tc, "CLIENT", "TRACKING", "ON", "REDIRECT", id)
	require.Equal(t, ":"+id+"\r\n", string(tc.DoArgs("CLIENT", "GETREDIR")))
	require.Equal(t, "$-1\r\n", string(tc.DoArgs("GET", "r")))
	throttle(t, other, "r")
	assert.Equal(t, invalidation("r"), string(sink.ReadReply()))

	tc3 := resp3(t, s)
	ok(t, tc3, "CLIENT", "TRACKING", "ON", "REDIRECT", id)
	require.Equal(t, byte('$'), tc3.DoArgs("GET", "r")[0])
	require.NoError(t, sink.nc.Close())
	// The server learns of the close asynchronously: wait for it.
	requireEventually(t, func() bool { return !strings.Contains(string(other.DoArgs("CLIENT", "LIST")), "id="+id+" ") })
	throttle(t, other, "r")
	assert.Equal(t, ">2\r\n$21\r\ntracking-redir-broken\r\n:"+id+"\r\n", string(tc3.ReadReply()))
	info := string(tc3.DoArgs("CLIENT", "INFO"))
	assert.Contains(t, info, " flags=tR ")
	assert.Contains(t, info, " redir="+id+" ")
	assert.Contains(t, string(tc3.DoArgs("CLIENT", "TRACKINGINFO")), "broken_redirect")
}

// TestTrackingOptin: in OPTIN mode only the command after CLIENT CACHING
// YES is remembered.
func TestTrackingOptin(t *testing.T) {
	t.Parallel()
	s := startServer(t, "--in-memory")
	tc, other := resp3(t, s), s.Raw(t)
	ok(t, tc, "CLIENT", "TRACKING", "ON", "OPTIN")
	require.Equal(t, "_\r\n", string(tc.DoArgs("GET", "a")))
	ok(t, tc, "CLIENT", "CACHING", "YES")
	require.Equal(t, "_\r\n", string(tc.DoArgs("GET", "b")))
	require.Equal(t, "_\r\n", string(tc.DoArgs("GET", "c"))) // the flag is spent
	throttle(t, other, "a")
	throttle(t, other, "c")
	throttle(t, other, "b")
	assert.Equal(t, invalidation("b"), string(tc.ReadReply()))
	assert.Equal(t, "+PONG\r\n", string(tc.DoArgs("PING")))

	// OPTOUT: all but the command after CACHING NO.
	ok(t, tc, "CLIENT", "TRACKING", "OFF")
	ok(t, tc, "CLIENT", "TRACKING", "ON", "OPTOUT")
	ok(t, tc, "CLIENT", "CACHING", "NO")
	require.Equal(t, byte('$'), tc.DoArgs("GET", "a")[0])
	require.Equal(t, byte('$'), tc.DoArgs("GET", "b")[0])
	throttle(t, other, "a")
	throttle(t, other, "b")
	assert.Equal(t, invalidation("b"), string(tc.ReadReply()))
}

// TestTrackingFlushall: FLUSHALL sends every tracking client the null
// invalidation.
func TestTrackingFlushall(t *testing.T) {
	t.Parallel()
	s := startServer(t, "--in-memory")
	tc, bc, other := resp3(t, s), resp3(t, s), s.Raw(t)
	ok(t, tc, "CLIENT", "TRACKING", "ON")
	ok(t, bc, "CLIENT", "TRACKING", "ON", "BCAST")
	throttle(t, other, "x")
	assert.Equal(t, invalidation("x"), string(bc.ReadReply()))
	require.Equal(t, byte('$'), tc.DoArgs("GET", "x")[0])
	ok(t, other, "FLUSHALL")
	// One null push each, not one per key as well.
	assert.Equal(t, nullInvalidation, string(tc.ReadReply()))
	assert.Equal(t, nullInvalidation, string(bc.ReadReply()))
	assert.Equal(t, "+PONG\r\n", string(tc.DoArgs("PING")))
	assert.Equal(t, "+PONG\r\n", string(bc.DoArgs("PING")))
}

// requireEventually polls cond until it holds, failing after 10 s.
func requireEventually(t *testing.T, cond func() bool) {
	t.Helper()
	require.Eventually(t, cond, 10*time.Second, 5*time.Millisecond)
}

// TestTrackingDifferential: CLIENT TRACKING's, CACHING's, GETREDIR's and
// TRACKINGINFO's replies, errors included, are redis-server's byte for
// byte, in RESP2 and then RESP3, each case against the state the ones
// before it left.
func TestTrackingDifferential(t *testing.T) {
	t.Parallel()
	ref := startR3Ref(t)
	cell := startServer(t, "--in-memory")
	seq := [][]string{
		{"CLIENT", "TRACKINGINFO"}, {"CLIENT", "GETREDIR"},
		{"CLIENT", "CACHING", "YES"}, {"CLIENT", "CACHING", "maybe"},
		{"CLIENT", "TRACKING", "ON", "PREFIX", "a"},
		{"CLIENT", "TRACKING", "ON", "BCAST", "PREFIX", "a", "PREFIX", "ab"},
		{"CLIENT", "TRACKING", "ON", "BCAST", "PREFIX", "xy", "PREFIX", "x"},
		{"CLIENT", "TRACKING", "ON", "OPTIN", "OPTOUT"},
		{"CLIENT", "TRACKING", "ON", "BCAST", "OPTOUT"},
		{"CLIENT", "TRACKING", "ON", "REDIRECT", "999999"},
		{"CLIENT", "TRACKING", "ON", "REDIRECT", "abc"},
		{"CLIENT", "TRACKING", "ON", "REDIRECT"},
		{"CLIENT", "TRACKING", "ON", "nope"},
		{"CLIENT", "TRACKING", "sideways"},
		{"CLIENT", "TRACKING"},
		{"CLIENT", "CACHING"},
		{"CLIENT", "GETREDIR", "x"},
		{"CLIENT", "TRACKINGINFO", "x"},
		{"CLIENT", "TRACKING", "OFF", "PREFIX", "p"},
		{"CLIENT", "TRACKING", "on", "optin", "noloop"},
		{"CLIENT", "TRACKINGINFO"}, {"CLIENT", "GETREDIR"},
		{"CLIENT", "CACHING", "no"}, {"CLIENT", "CACHING", "yes"},
		{"CLIENT", "TRACKINGINFO"},
		{"CLIENT", "TRACKINGINFO"}, // the flag outlives CLIENT commands
		{"PING"},
		{"CLIENT", "TRACKINGINFO"}, // but not another command
		{"CLIENT", "TRACKING", "ON", "OPTOUT"},
		{"CLIENT", "TRACKING", "ON", "BCAST"},
		{"CLIENT", "TRACKING", "ON"},
		{"CLIENT", "TRACKINGINFO"},
		{"CLIENT", "TRACKING", "OFF"},
		{"CLIENT", "TRACKINGINFO"}, {"CLIENT", "GETREDIR"},
		{"CLIENT", "TRACKING", "ON", "OPTOUT"},
		{"CLIENT", "CACHING", "YES"}, {"CLIENT", "CACHING", "NO"},
		{"CLIENT", "TRACKINGINFO"},
		{"CLIENT", "TRACKING", "OFF"},
		{"CLIENT", "TRACKING", "ON", "BCAST", "PREFIX", "ab", "PREFIX", "cd"},
		{"CLIENT", "TRACKING", "ON", "BCAST", "PREFIX", "a"},
		{"CLIENT", "TRACKING", "ON", "BCAST", "PREFIX", "cd"},
		{"CLIENT", "TRACKING", "ON", "BCAST", "PREFIX", "cde"},
		{"CLIENT", "TRACKING", "ON", "BCAST", "PREFIX", "b"},
		{"CLIENT", "CACHING", "YES"},
		{"CLIENT", "TRACKINGINFO"},
		{"CLIENT", "TRACKING", "OFF"},
		{"CLIENT", "TRACKING", "ON", "BCAST"},
		{"CLIENT", "TRACKINGINFO"},
		{"CLIENT", "TRACKING", "ON", "BCAST", "PREFIX", "z"},
		{"CLIENT", "TRACKING", "OFF"},
	}
	for _, proto := range []string{"2", "3"} {
		rc, cc := ref.Raw(t), cell.Raw(t)
		if proto == "3" {
			runR3Cases(t, rc, cc, []r3Case{{r3Args("HELLO", "3"), r3Hello}})
		}
		runR3Cases(t, rc, cc, r3Exacts(seq...))
	}
}

// TestTrackingSlowReaderDisconnected: a tracking client that does not read
// its pushes is disconnected at the hard output limit, as Redis does,
// instead of the server buffering them without bound; the writers and the
// store go on.
func TestTrackingSlowReaderDisconnected(t *testing.T) {
	t.Parallel()
	s := startServer(t, "--in-memory", "--client-output-buffer-limit", "1mb 0 0")
	tc, writer := resp3(t, s), s.Raw(t)
	ok(t, tc, "CLIENT", "TRACKING", "ON", "BCAST")
	// tc reads nothing from now on. Each write of a 4 KiB key pushes 4 KiB.
	key := strings.Repeat("k", 4096)
	var pipe []byte
	for i := 0; i < 100; i++ {
		pipe = append(pipe, encodeCommand("CL.THROTTLE", key+strconv.Itoa(i), "100", "100", "60", "1")...)
	}
	disconnected := func() bool {
		info := string(writer.DoArgs("INFO", "stats"))
		return !strings.Contains(info, "client_output_buffer_limit_disconnections:0\r\n")
	}
	deadline := time.Now().Add(30 * time.Second)
	for !disconnected() {
		require.True(t, time.Now().Before(deadline), "the non-reading tracking client was never disconnected")
		writer.Send(pipe)
		for i := 0; i < 100; i++ {
			require.Equal(t, byte('*'), writer.ReadReply()[0])
		}
	}
	assert.NotContains(t, string(writer.DoArgs("CLIENT", "LIST")), "cmd=client|tracking", "the tracking client is gone")
	throttle(t, writer, "after")
}

// TestTrackingPushesDifferential: the same tracking scenario against
// redis-server and cellserver gives the same pushes, byte for byte. Only
// the way a key is written differs (SET there, CL.THROTTLE here).
func TestTrackingPushesDifferential(t *testing.T) {
	t.Parallel()
	ref := startR3Ref(t)
	cell := startServer(t, "--in-memory")
	type conns struct {
		open  func() *rawConn
		write func(c *rawConn, key string)
	}
	servers := map[string]conns{
		"redis": {func() *rawConn { return ref.Raw(t) }, func(c *rawConn, key string) {
			require.Equal(t, "+OK\r\n", string(c.DoArgs("SET", key, "v")))
		}},
		"cellserver": {func() *rawConn { return cell.Raw(t) }, func(c *rawConn, key string) { throttle(t, c, key) }},
	}
	got := map[string][]string{}
	for name, srv := range servers {
		var log []string
		open3 := func() *rawConn {
			c := srv.open()
			require.Equal(t, byte('%'), c.DoArgs("HELLO", "3")[0])
			return c
		}
		tc, other := open3(), srv.open()
		srv.write(other, "k")
		log = append(log, string(tc.DoArgs("CLIENT", "TRACKING", "ON", "NOLOOP")))
		log = append(log, string(tc.DoArgs("GET", "k"))[:1])
		log = append(log, string(tc.DoArgs("GET", "k2")))
		srv.write(other, "k")
		log = append(log, string(tc.ReadReply()))
		log = append(log, string(other.DoArgs("DEL", "k")))
		srv.write(tc, "k2") // its own write, under NOLOOP: not told
		srv.write(other, "k2")
		log = append(log, string(tc.DoArgs("PING")))
		log = append(log, string(tc.DoArgs("CLIENT", "TRACKING", "OFF")))

		// BCAST, several prefixes; FLUSHALL.
		log = append(log, string(tc.DoArgs("CLIENT", "TRACKING", "ON", "BCAST", "PREFIX", "user:", "PREFIX", "ip:")))
		srv.write(other, "other")
		srv.write(other, "ip:1")
		log = append(log, string(tc.ReadReply()))
		log = append(log, string(other.DoArgs("FLUSHALL")))
		log = append(log, string(tc.ReadReply()))
		log = append(log, string(tc.DoArgs("CLIENT", "TRACKINGINFO")))
		log = append(log, string(tc.DoArgs("CLIENT", "TRACKING", "OFF")))

		// A redirect that goes away.
		sink := srv.open()
		id := clientID(t, sink)
		log = append(log, string(tc.DoArgs("CLIENT", "TRACKING", "ON", "REDIRECT", id)))
		log = append(log, string(tc.DoArgs("GET", "r"))[:1])
		require.NoError(t, sink.nc.Close())
		requireEventually(t, func() bool { return !strings.Contains(string(other.DoArgs("CLIENT", "LIST")), "id="+id+" ") })
		srv.write(other, "r")
		log = append(log, strings.ReplaceAll(string(tc.ReadReply()), id, "<id>"))
		log = append(log, strings.ReplaceAll(string(tc.DoArgs("CLIENT", "TRACKINGINFO")), id, "<id>"))

		// A RESP2 client redirecting to a RESP3 one: the flush's null is
		// written as RESP2's.
		sink3, tc2 := open3(), srv.open()
		log = append(log, string(tc2.DoArgs("CLIENT", "TRACKING", "ON", "REDIRECT", clientID(t, sink3))))
		log = append(log, string(other.DoArgs("FLUSHALL")))
		log = append(log, string(sink3.ReadReply()))
		got[name] = log
	}
	assert.Equal(t, got["redis"], got["cellserver"])
}

// TestPubsubDifferential: SUBSCRIBE, UNSUBSCRIBE, the RESP2 Pub/Sub
// context's refusals and PING, and a RESP2 redirect target's invalidation
// messages on __redis__:invalidate, byte for byte as redis-server's.
func TestPubsubDifferential(t *testing.T) {
	t.Parallel()
	ref := startR3Ref(t)
	cell := startServer(t, "--in-memory")
	type step struct {
		args    []string
		replies int
	}
	seq := []step{
		{[]string{"UNSUBSCRIBE"}, 1}, {[]string{"SUBSCRIBE"}, 1},
		{[]string{"SUBSCRIBE", "a", "b", "a"}, 3}, {[]string{"GET", "x"}, 1}, {[]string{"CLIENT", "GETNAME"}, 1},
		{[]string{"PING"}, 1}, {[]string{"PING", "hi"}, 1},
		{[]string{"UNSUBSCRIBE", "b", "c"}, 2}, {[]string{"UNSUBSCRIBE"}, 1}, {[]string{"UNSUBSCRIBE"}, 1},
		{[]string{"PING"}, 1}, {[]string{"GET", "x"}, 1},
	}
	for _, proto := range []string{"2", "3"} {
		var got [2][]string
		for i, c := range []*rawConn{ref.Raw(t), cell.Raw(t)} {
			if proto == "3" {
				require.Equal(t, byte('%'), c.DoArgs("HELLO", "3")[0])
			}
			for _, st := range seq {
				c.Send(encodeCommand(st.args...))
				for range st.replies {
					got[i] = append(got[i], string(c.ReadReply()))
				}
			}
		}
		assert.Equal(t, got[0], got[1], "RESP%s", proto)
	}

	// A RESP2 redirect target subscribed to __redis__:invalidate.
	writes := []func(c *rawConn, key string){
		func(c *rawConn, key string) { require.Equal(t, "+OK\r\n", string(c.DoArgs("SET", key, "v"))) },
		func(c *rawConn, key string) { throttle(t, c, key) },
	}
	var got [2][]string
	for i, open := range []func(*testing.T) *rawConn{ref.Raw, func(t *testing.T) *rawConn { return cell.Raw(t) }} {
		sink, tc, other := open(t), open(t), open(t)
		id := clientID(t, sink)
		got[i] = append(got[i], string(sink.DoArgs("SUBSCRIBE", "__redis__:invalidate")))
		got[i] = append(got[i], string(tc.DoArgs("CLIENT", "TRACKING", "ON", "REDIRECT", id)))
		got[i] = append(got[i], string(tc.DoArgs("GET", "k")))
		writes[i](other, "k")
		got[i] = append(got[i], string(sink.ReadReply()))
		got[i] = append(got[i], string(other.DoArgs("FLUSHALL")))
		got[i] = append(got[i], string(sink.ReadReply()))
		info := string(other.DoArgs("CLIENT", "LIST", "TYPE", "pubsub"))
		got[i] = append(got[i], strconv.Itoa(strings.Count(info, "\n")), strconv.FormatBool(strings.Contains(info, "id="+id+" ")),
			strconv.FormatBool(strings.Contains(info, " flags=P ")), strconv.FormatBool(strings.Contains(info, " sub=1 ")))
		normal := string(other.DoArgs("CLIENT", "LIST", "TYPE", "normal"))
		got[i] = append(got[i], strconv.FormatBool(strings.Contains(normal, "id="+id+" ")))
	}
	assert.Equal(t, got[0], got[1])
}

// TestTrackingTableMaxKeys: --tracking-table-max-keys bounds the keys
// remembered; CONFIG GET shows it and INFO counts the tracking clients and
// the remembered keys; a key read past the bound is invalidated at once.
func TestTrackingTableMaxKeys(t *testing.T) {
	t.Parallel()
	s := startServer(t, "--in-memory", "--tracking-table-max-keys", "2")
	tc := resp3(t, s)
	assert.Equal(t, "%1\r\n$23\r\ntracking-table-max-keys\r\n$1\r\n2\r\n", string(tc.DoArgs("CONFIG", "GET", "tracking-table-max-keys")))
	ok(t, tc, "CLIENT", "TRACKING", "ON")
	for _, k := range []string{"a", "b"} {
		throttle(t, tc, k)
		require.Equal(t, byte('$'), tc.DoArgs("GET", k)[0])
	}
	info := string(tc.DoArgs("INFO", "clients"))
	assert.Contains(t, info, "tracking_clients:1\r\n")
	assert.Contains(t, string(tc.DoArgs("INFO", "stats")), "tracking_total_items:2\r\n")
	throttle(t, tc, "c")
	reply := string(tc.DoArgs("GET", "c"))
	if reply[0] == '>' { // the push may come before or after the reply
		assert.Equal(t, invalidation("c"), reply)
		require.Equal(t, byte('$'), tc.ReadReply()[0])
	} else {
		require.Equal(t, byte('$'), reply[0])
		assert.Equal(t, invalidation("c"), string(tc.ReadReply()), "past the bound a read key is invalidated at once")
	}
	assert.Contains(t, string(tc.DoArgs("INFO", "stats")), "tracking_total_items:2\r\n")
}

// TestTrackingReReadExpiredKey: reading again a tracked key that expired
// meanwhile keeps it counted once and withdrawable: after TRACKING OFF
// and ON no invalidation of it arrives (a registration the client forgot
// would bring one, and would keep the client alive in the shard).
func TestTrackingReReadExpiredKey(t *testing.T) {
	t.Parallel()
	s := startServer(t, "--in-memory", "--shards", "4", "--enable-debug-command", "yes")
	tc, other := resp3(t, s), s.Raw(t)
	ok(t, tc, "CLIENT", "TRACKING", "ON")
	ok(t, other, "DEBUG", "CLOCK", "SET", "1700000000000000000")
	require.Equal(t, byte('*'), other.DoArgs("CL.THROTTLE", "lk", "0", "1", "1")[0])
	require.Equal(t, byte('$'), tc.DoArgs("GET", "lk")[0])
	assert.Contains(t, string(tc.DoArgs("INFO", "stats")), "tracking_total_items:1\r\n")
	ok(t, other, "DEBUG", "CLOCK", "ADVANCE", "2000000000")
	// The read expires the key: its invalidation and the null reply, in
	// either order, then the key is remembered again.
	got := []string{string(tc.DoArgs("GET", "lk")), string(tc.ReadReply())}
	assert.ElementsMatch(t, []string{invalidation("lk"), "_\r\n"}, got)
	assert.Contains(t, string(tc.DoArgs("INFO", "stats")), "tracking_total_items:1\r\n")
	ok(t, tc, "CLIENT", "TRACKING", "OFF")
	assert.Contains(t, string(tc.DoArgs("INFO", "stats")), "tracking_total_items:0\r\n")
	ok(t, tc, "CLIENT", "TRACKING", "ON")
	require.Equal(t, byte('*'), other.DoArgs("CL.THROTTLE", "lk", "0", "1", "1")[0])
	assert.Equal(t, "+PONG\r\n", string(tc.DoArgs("PING")), "no invalidation of a key read before TRACKING OFF")
}

// TestTrackingBcastPrefixLengths: the distinct BCAST prefix lengths of all
// clients together are bounded (each is a lookup on every write).
func TestTrackingBcastPrefixLengths(t *testing.T) {
	t.Parallel()
	s := startServer(t, "--in-memory")
	a, b := resp3(t, s), resp3(t, s)
	args := []string{"CLIENT", "TRACKING", "ON", "BCAST"}
	for n := 1; n <= 20; n++ {
		args = append(args, "PREFIX", "a"+strings.Repeat("x", n-1)+"!")
	}
	ok(t, a, args...)
	args = []string{"CLIENT", "TRACKING", "ON", "BCAST"}
	for n := 20; n <= 40; n++ {
		args = append(args, "PREFIX", "b"+strings.Repeat("y", n-1)+"!")
	}
	assert.Equal(t, "-ERR too many distinct tracking prefix lengths on the server (at most 32)\r\n", string(b.DoArgs(args...)))
	ok(t, b, "CLIENT", "TRACKING", "ON", "BCAST", "PREFIX", "c!")
}
