package commands

import (
	"bufio"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cellserver/cellserver/limit"
	"github.com/cellserver/cellserver/store"
)

type harness struct {
	t     *testing.T
	srv   *Server
	c     *Client
	slept []time.Duration // the pauses after failed AUTHs, recorded instead of slept
}

func newHarness(t *testing.T, cfg Config) *harness {
	t.Helper()
	clk := &store.Clock{}
	clk.Set(1_700_000_000_000_000_000)
	st, err := store.New(store.Config{Shards: 4, Clock: clk})
	require.NoError(t, err)
	srv, err := New(cfg, st)
	require.NoError(t, err)
	t.Cleanup(func() { srv.Close(); st.Close() })
	remote := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 5555}
	h := &harness{t: t, srv: srv, c: srv.NewClient(remote, remote)}
	srv.sleep = func(d time.Duration) { h.slept = append(h.slept, d) }
	return h
}

// remote makes h talk through a new client connected from a non-loopback
// address.
func (h *harness) remote() {
	a := &net.TCPAddr{IP: net.IPv4(10, 0, 0, 1), Port: 5555}
	h.c = h.srv.NewClient(a, a)
}

// do runs one pipeline and returns the raw reply bytes.
func (h *harness) do(cmds ...[]string) string {
	var argvs [][][]byte
	for _, c := range cmds {
		var argv [][]byte
		for _, a := range c {
			argv = append(argv, []byte(a))
		}
		argvs = append(argvs, argv)
	}
	var out Out
	h.srv.Exec(h.c, argvs, &out)
	return string(out.B)
}

func (h *harness) cmd(args ...string) string { return h.do(args) }

func TestRawReplies(t *testing.T) {
	h := newHarness(t, Config{})
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"CL.THROTTLE", "user123", "15", "30", "60"}, "*5\r\n:0\r\n:16\r\n:15\r\n:-1\r\n:2\r\n"},
		{[]string{"cl.throttle", "user123", "15", "30", "60", "0"}, "*5\r\n:0\r\n:16\r\n:15\r\n:-1\r\n:2\r\n"},
		{[]string{"GET", "user123"}, "$19\r\n1700000002000000000\r\n"},
		{[]string{"PTTL", "user123"}, ":2000\r\n"},
		{[]string{"TTL", "user123"}, ":2\r\n"},
		{[]string{"TYPE", "user123"}, "+string\r\n"},
		{[]string{"TYPE", "nope"}, "+none\r\n"},
		{[]string{"EXISTS", "user123", "user123", "nope"}, ":2\r\n"},
		{[]string{"GET", "nope"}, "$-1\r\n"},
		{[]string{"PTTL", "nope"}, ":-2\r\n"},
		{[]string{"DBSIZE"}, ":1\r\n"},
		{[]string{"KEYS", "user*"}, "*1\r\n$7\r\nuser123\r\n"},
		{[]string{"SCAN", "0", "COUNT", "1000"}, "*2\r\n$1\r\n0\r\n*1\r\n$7\r\nuser123\r\n"},
		{[]string{"SCAN", "0", "TYPE", "hash"}, "*2\r\n$1\r\n0\r\n*0\r\n"},
		{[]string{"SCAN", "x"}, "-ERR invalid cursor\r\n"},
		{[]string{"SCAN", "0", "COUNT", "0"}, "-ERR syntax error\r\n"},
		{[]string{"SCAN", "0", "COUNT"}, "-ERR syntax error\r\n"},
		{[]string{"DEL", "user123", "nope"}, ":1\r\n"},
		{[]string{"UNLINK", "user123"}, ":0\r\n"},
		{[]string{"FLUSHALL"}, "+OK\r\n"},
		{[]string{"FLUSHDB", "ASYNC"}, "+OK\r\n"},
		{[]string{"FLUSHDB", "NOW"}, "-ERR syntax error\r\n"},
		{[]string{"PING"}, "+PONG\r\n"},
		{[]string{"PING", "hi"}, "$2\r\nhi\r\n"},
		{[]string{"PING", "a", "b"}, "-ERR wrong number of arguments for 'ping' command\r\n"},
		{[]string{"ECHO", "x\r\ny"}, "$4\r\nx\r\ny\r\n"},
		{[]string{"SELECT", "0"}, "+OK\r\n"},
		{[]string{"SELECT", "1"}, "-ERR DB index is out of range\r\n"},
		{[]string{"SELECT", "x"}, "-ERR value is not an integer or out of range\r\n"},
		{[]string{"GET"}, "-ERR wrong number of arguments for 'get' command\r\n"},
		{[]string{"GET", "a", "b"}, "-ERR wrong number of arguments for 'get' command\r\n"},
		{[]string{"foo", "a", "b"}, "-ERR unknown command 'foo', with args beginning with: 'a' 'b' \r\n"},
		{[]string{"foo"}, "-ERR unknown command 'foo', with args beginning with: \r\n"},
		{[]string{"CLIENT", "nope"}, "-ERR unknown subcommand 'nope'. Try CLIENT HELP.\r\n"},
		{[]string{"CLIENT"}, "-ERR wrong number of arguments for 'client' command\r\n"},
		{[]string{"CLIENT", "SETNAME"}, "-ERR wrong number of arguments for 'client|setname' command\r\n"},
		{[]string{"CLIENT", "SETNAME", "a b"}, "-ERR Client names cannot contain spaces, newlines or special characters.\r\n"},
		{[]string{"CLIENT", "GETNAME"}, "$-1\r\n"},
		{[]string{"CLIENT", "SETNAME", "app"}, "+OK\r\n"},
		{[]string{"CLIENT", "GETNAME"}, "$3\r\napp\r\n"},
		{[]string{"CLIENT", "SETINFO", "LIB-NAME", "go-redis(v9)"}, "+OK\r\n"},
		{[]string{"CLIENT", "SETINFO", "color", "x"}, "-ERR Unrecognized option 'color'\r\n"},
		{[]string{"AUTH", "x"}, "-" + ErrAuthNoPassword + "\r\n"},
		{[]string{"HELLO", "4"}, "-NOPROTO unsupported protocol version\r\n"},
		{[]string{"HELLO", "1"}, "-NOPROTO unsupported protocol version\r\n"},
		{[]string{"HELLO", "x"}, "-ERR Protocol version is not an integer or out of range\r\n"},
		{[]string{"HELLO", "2", "FOO"}, "-ERR Syntax error in HELLO option 'FOO'\r\n"},
		{[]string{"DEBUG", "CLOCK", "SET", "1"}, "-" + ErrDebugNotAllowed + "\r\n"},
		{[]string{"CONFIG", "GET", "maxmemory"}, "*2\r\n$9\r\nmaxmemory\r\n$1\r\n0\r\n"},
		{[]string{"CONFIG", "GET", "MAXMEMORY*"}, "*4\r\n$9\r\nmaxmemory\r\n$1\r\n0\r\n$16\r\nmaxmemory-policy\r\n$10\r\nnoeviction\r\n"},
		{[]string{"CONFIG", "SET", "foo", "1"}, "-ERR Unknown option or number of arguments for CONFIG SET - 'foo'\r\n"},
		{[]string{"COMMAND", "GETKEYS", "CL.THROTTLE", "k", "1", "2", "3"}, "*1\r\n$1\r\nk\r\n"},
		{[]string{"TIME"}, "*2\r\n$10\r\n1700000000\r\n$1\r\n0\r\n"},
	}
	for _, c := range cases {
		assert.Equal(t, c.want, h.cmd(c.args...), "%q", c.args)
	}
}

func TestConformanceErrors(t *testing.T) {
	dir := os.Getenv("CELLSERVER_CONFORMANCE_DIR")
	if dir == "" {
		dir = filepath.Join("..", "conformance")
	}
	f, err := os.Open(filepath.Join(dir, "errors.jsonl"))
	require.NoError(t, err, "conformance vectors are required")
	defer f.Close()
	h := newHarness(t, Config{})
	n := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var v struct {
			Args  []string `json:"args"`
			Error string   `json:"error"`
		}
		require.NoError(t, json.Unmarshal(sc.Bytes(), &v))
		assert.Equal(t, "-"+v.Error+"\r\n", h.cmd(v.Args...), "%q", v.Args)
		n++
	}
	require.Greater(t, n, 10)
}

func TestParseI64(t *testing.T) {
	ok := map[string]int64{"0": 0, "-0": 0, "+0": 0, "007": 7, "-9223372036854775808": -1 << 63,
		"9223372036854775807": 1<<63 - 1, "+15": 15, "-1": -1}
	for s, want := range ok {
		got, good := limit.ParseCellInt([]byte(s))
		assert.True(t, good, s)
		assert.Equal(t, want, got, s)
	}
	for _, s := range []string{"", "+", "-", "1.5", "1.0", "1e3", "0x10", " 1", "1 ", "--1", "+-1",
		"9223372036854775808", "-9223372036854775809", "99999999999999999999", "\xff"} {
		_, good := limit.ParseCellInt([]byte(s))
		assert.False(t, good, "%q", s)
	}
}

func TestCellErrorsNeverCrash(t *testing.T) {
	h := newHarness(t, Config{})
	// Non-UTF-8 key and CR/LF in an argument: redis-cell aborts, we answer.
	assert.Equal(t, "*5\r\n:0\r\n:2\r\n:1\r\n:-1\r\n:1\r\n", h.cmd("CL.THROTTLE", "\xff\xfe", "1", "1", "1"))
	assert.Equal(t, "-Cell error: Store error: Couldn't parse as integer: 1  2\r\n", h.cmd("CL.THROTTLE", "k", "1\r\n2", "1", "1"))
	assert.Equal(t, "-Cell error: Store error: Couldn't parse as integer: \xff\r\n", h.cmd("CL.THROTTLE", "k", "\xff", "1", "1"))
}

func TestPipelineOrderAcrossShardsAndBarriers(t *testing.T) {
	h := newHarness(t, Config{EnableDebug: "yes"})
	got := h.do(
		[]string{"CL.THROTTLE", "a", "0", "1", "10"},
		[]string{"PING"},
		[]string{"CL.THROTTLE", "a", "0", "1", "10"},
		[]string{"DEBUG", "CLOCK", "ADVANCE", "10000000000"},
		[]string{"CL.THROTTLE", "a", "0", "1", "10"},
		[]string{"nope"},
		[]string{"DBSIZE"},
		[]string{"DEL", "a", "b", "c"},
		[]string{"EXISTS", "a"},
	)
	want := "*5\r\n:0\r\n:1\r\n:0\r\n:-1\r\n:10\r\n" +
		"+PONG\r\n" +
		"*5\r\n:1\r\n:1\r\n:0\r\n:10\r\n:10\r\n" +
		"+OK\r\n" +
		"*5\r\n:0\r\n:1\r\n:0\r\n:-1\r\n:10\r\n" +
		"-ERR unknown command 'nope', with args beginning with: \r\n" +
		":1\r\n:1\r\n:0\r\n"
	assert.Equal(t, want, got)
}

func TestAuthFlow(t *testing.T) {
	h := newHarness(t, Config{RequirePass: "secret"})
	assert.Equal(t, "-NOAUTH Authentication required.\r\n", h.cmd("CL.THROTTLE", "k", "1", "1", "1"))
	assert.Equal(t, "-NOAUTH Authentication required.\r\n", h.cmd("PING"))
	assert.Equal(t, "-"+ErrHelloNoAuth+"\r\n", h.cmd("HELLO", "2"))
	assert.Equal(t, "-"+ErrWrongPass+"\r\n", h.cmd("AUTH", "nope"))
	assert.Equal(t, "-"+ErrWrongPass+"\r\n", h.cmd("AUTH", "bob", "secret"))
	assert.Equal(t, "-ERR syntax error\r\n", h.cmd("AUTH", "a", "b", "c"))
	assert.Equal(t, "+OK\r\n", h.cmd("AUTH", "secret"))
	assert.Equal(t, "+PONG\r\n", h.cmd("PING"))

	h2 := newHarness(t, Config{RequirePass: "secret"})
	reply := h2.cmd("HELLO", "2", "AUTH", "default", "secret", "SETNAME", "me")
	assert.True(t, strings.HasPrefix(reply, "*14\r\n$6\r\nserver\r\n$5\r\nredis\r\n$7\r\nversion\r\n"), reply)
	assert.Contains(t, reply, "$5\r\nproto\r\n:2\r\n")
	assert.Equal(t, "$2\r\nme\r\n", h2.cmd("CLIENT", "GETNAME"))
}

func TestDebugClock(t *testing.T) {
	h := newHarness(t, Config{EnableDebug: "local"})
	assert.Equal(t, "+OK\r\n", h.cmd("DEBUG", "CLOCK", "SET", "5000000000"))
	assert.Equal(t, "*2\r\n$1\r\n5\r\n$1\r\n0\r\n", h.cmd("TIME"))
	assert.Equal(t, "+OK\r\n", h.cmd("DEBUG", "CLOCK", "ADVANCE", "-1500000"))
	assert.Equal(t, "*2\r\n$1\r\n4\r\n$6\r\n998500\r\n", h.cmd("TIME"))
	assert.Equal(t, "-ERR value is not an integer or out of range\r\n", h.cmd("DEBUG", "CLOCK", "SET", "x"))
	assert.Equal(t, "-ERR syntax error\r\n", h.cmd("DEBUG", "CLOCK", "FREEZE"))
	assert.Equal(t, "+OK\r\n", h.cmd("DEBUG", "CLOCK", "REAL"))
	assert.False(t, h.srv.clock.Frozen())

	h.remote()
	assert.Equal(t, "-"+ErrDebugNotAllowed+"\r\n", h.cmd("DEBUG", "CLOCK", "REAL"))
}

func TestQuit(t *testing.T) {
	h := newHarness(t, Config{})
	assert.Equal(t, "+OK\r\n", h.do([]string{"QUIT"}, []string{"PING"}))
	assert.True(t, h.c.Closing())
}

// TestCrossProtocolScripting: a web page made to post to the port sends
// "POST / HTTP/1.1" and "Host: ..." lines first; as Redis does, the first
// such line ends the connection without a reply, and nothing after it
// runs (here a FLUSHALL in the request's body), in or out of MULTI.
func TestCrossProtocolScripting(t *testing.T) {
	for _, name := range []string{"POST", "post", "Host:", "HOST:"} {
		h := newHarness(t, Config{})
		local := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 5556}
		h.cmd("CL.THROTTLE", "victim", "10", "1", "60")
		assert.Equal(t, "+PONG\r\n", h.do([]string{"PING"}, []string{name, "/", "HTTP/1.1"}, []string{"FLUSHALL"}), name)
		assert.True(t, h.c.Closing(), name)
		h.c = h.srv.NewClient(local, local)
		assert.Equal(t, ":1\r\n", h.cmd("EXISTS", "victim"), name)

		assert.Equal(t, "+OK\r\n+QUEUED\r\n", h.do([]string{"MULTI"}, []string{"FLUSHALL"}, []string{name}, []string{"EXEC"}), name)
		assert.True(t, h.c.Closing(), name)
		h.c = h.srv.NewClient(local, local)
		assert.Equal(t, ":1\r\n", h.cmd("EXISTS", "victim"), name)
	}
	// Only the command's name counts: as an argument it is data.
	h := newHarness(t, Config{})
	assert.Equal(t, "$4\r\nPOST\r\n", h.cmd("ECHO", "POST"))
	assert.False(t, h.c.Closing())
}

func TestPanicInCommandIsContained(t *testing.T) {
	h := newHarness(t, Config{})
	h.srv.table.add(&Command{Name: "boom", Arity: 1, Run: func(_ *Client, w *Out, _ [][]byte) {
		w.WriteArray(3)
		panic("broken invariant")
	}})
	assert.Equal(t, "-ERR internal error\r\n+PONG\r\n", h.do([]string{"BOOM"}, []string{"PING"}))

	// A keyed command whose parsing panics.
	h.srv.table.add(&Command{Name: "kboom", Arity: 2, FirstKey: 1, LastKey: 1,
		Queue: func(*Client, [][]byte) string { panic("bad parse") },
		Reply: func(*Client, *Out, [][]byte, []store.Request) {}})
	assert.Equal(t, "-ERR internal error\r\n:0\r\n", h.do([]string{"KBOOM", "k"}, []string{"EXISTS", "k"}))
}

func TestInfoAndCommand(t *testing.T) {
	h := newHarness(t, Config{})
	h.cmd("CL.THROTTLE", "k", "1", "1", "60")
	info := h.cmd("INFO")
	for _, s := range []string{"# Server\r\n", "redis_version:", "# Clients\r\nconnected_clients:1", "# Memory", "# Persistence\r\nloading:0", "# Stats", "# Keyspace\r\ndb0:keys=1,expires=1"} {
		assert.Contains(t, info, s)
	}
	assert.NotContains(t, info, "# Commandstats")
	all := h.cmd("INFO", "all")
	assert.Contains(t, all, "cmdstat_cl.throttle:calls=1,")
	assert.Contains(t, h.cmd("INFO", "commandstats"), "cmdstat_info:calls=")
	assert.Equal(t, ":"+itoa(len(h.srv.table))+"\r\n", h.cmd("COMMAND", "COUNT"))
	ci := h.cmd("COMMAND", "INFO", "cl.throttle", "nosuch")
	assert.True(t, strings.HasPrefix(ci, "*2\r\n*10\r\n$11\r\ncl.throttle\r\n:-1\r\n*1\r\n+write\r\n:1\r\n:1\r\n:1\r\n"), ci)
	assert.True(t, strings.HasSuffix(ci, "*0\r\n$-1\r\n"), ci) // Redis 7's addReplyNull
	assert.Contains(t, h.cmd("COMMAND", "INFO", "time"), "*1\r\n$23\r\nnondeterministic_output\r\n", "tips are bulk strings")
	assert.Contains(t, h.cmd("COMMAND", "DOCS", "get"), "$7\r\nsummary\r\n")
	assert.Contains(t, h.cmd("CLIENT", "LIST"), "id=1 addr=127.0.0.1:5555 laddr=127.0.0.1:5555 fd=-1 name= age=")
}

func itoa(n int) string { return strconv.Itoa(n) }

func fmtInt(n int) string { return strconv.Itoa(n) }

func BenchmarkExecThrottlePipeline(b *testing.B) {
	benchPipeline(b, func(i int) []string { return []string{"CL.THROTTLE", "key" + fmtInt(i), "1000000", "1", "1"} })
}

// TestKeyspaceHitsAndMisses: like Redis's lookupKeyRead, GET, EXISTS (per
// key), TTL, PTTL and TYPE count a hit or a miss; DEL and SCAN do not.
func TestKeyspaceHitsAndMisses(t *testing.T) {
	h := newHarness(t, Config{})
	h.cmd("CL.THROTTLE", "k", "1", "1", "60")
	for _, args := range [][]string{{"GET", "k"}, {"TTL", "k"}, {"PTTL", "nope"}, {"TYPE", "k"}, {"TYPE", "nope"},
		{"EXISTS", "k", "nope", "k"}, {"DEL", "nope"}, {"SCAN", "0"}} {
		h.cmd(args...)
	}
	assert.Equal(t, "5", h.infoField("keyspace_hits"))
	assert.Equal(t, "3", h.infoField("keyspace_misses"))
}

// TestCommandstatsRejected: a command refused before it runs (arity, and
// a container without its subcommand) counts in rejected_calls, not calls,
// and is listed although it never ran, as in Redis.
func TestCommandstatsRejected(t *testing.T) {
	h := newHarness(t, Config{})
	h.cmd("GET")
	h.cmd("GET", "a")
	h.cmd("CLIENT")
	stats := h.cmd("INFO", "commandstats")
	assert.Regexp(t, `cmdstat_get:calls=1,usec=\d+,usec_per_call=\d+\.\d\d,rejected_calls=1,failed_calls=0\r\n`, stats)
	assert.Contains(t, stats, "cmdstat_client:calls=0,usec=0,usec_per_call=0.00,rejected_calls=1,failed_calls=0\r\n")
}

// TestCommandstatsFailed: a command that runs and answers an error is a
// failed call and counts in errorstats; a call counts once it has run, so
// INFO does not count itself and CONFIG RESETSTAT does, as in Redis.
func TestCommandstatsFailed(t *testing.T) {
	h := newHarness(t, Config{})
	h.cmd("CONFIG", "RESETSTAT")
	h.cmd("SELECT", "x")
	h.cmd("SELECT", "0")
	h.cmd("AUTH", "nobody", "x")
	stats := h.cmd("INFO", "commandstats")
	assert.Regexp(t, `cmdstat_select:calls=2,usec=\d+,usec_per_call=\d+\.\d\d,rejected_calls=0,failed_calls=1\r\n`, stats)
	assert.Regexp(t, `cmdstat_auth:calls=1,.*,rejected_calls=0,failed_calls=1\r\n`, stats)
	assert.Regexp(t, `cmdstat_config\|resetstat:calls=1,`, stats)
	assert.NotContains(t, stats, "cmdstat_info:")
	assert.Equal(t, "$66\r\n# Errorstats\r\nerrorstat_ERR:count=1\r\nerrorstat_WRONGPASS:count=1\r\n\r\n",
		h.cmd("INFO", "errorstats"))
}
