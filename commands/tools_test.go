package commands

import (
	"net"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestToolsRawReplies(t *testing.T) {
	h := newHarness(t, Config{})
	long := strings.Repeat("k", 40)
	pair := strings.Repeat("p", 20)
	h.cmd("CL.THROTTLE", "g", "15", "30", "60")
	h.cmd("CL.THROTTLE", pair, "15", "30", "60")
	h.cmd("CL.THROTTLE", long, "15", "30", "60")
	h.cmd("CL.LIMIT", "fw", "FW", "10", "3600")
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"STRLEN", "g"}, ":19\r\n"}, // GET's 1700000002000000000
		{[]string{"STRLEN", "nope"}, ":0\r\n"},
		{[]string{"STRLEN", "fw"}, "-" + ErrWrongType + "\r\n"},
		// Entry 32 + index slot 8; a pair-sized key takes a second entry;
		// a long key its bytes in the arena; an FW state a wide entry.
		{[]string{"MEMORY", "USAGE", "g"}, ":40\r\n"},
		{[]string{"MEMORY", "USAGE", pair}, ":72\r\n"},
		{[]string{"MEMORY", "USAGE", long}, ":80\r\n"},
		{[]string{"MEMORY", "USAGE", "fw"}, ":72\r\n"},
		{[]string{"MEMORY", "USAGE", "g", "SAMPLES", "0"}, ":40\r\n"},
		{[]string{"MEMORY", "USAGE", "nope"}, "$-1\r\n"},
		{[]string{"MEMORY", "USAGE", "g", "SAMPLES", "-1"}, "-ERR syntax error\r\n"},
		{[]string{"MEMORY", "USAGE", "g", "SAMPLES", "x"}, "-ERR value is not an integer or out of range\r\n"},
		{[]string{"MEMORY", "USAGE", "g", "FOO"}, "-ERR syntax error\r\n"},
		{[]string{"MEMORY", "USAGE"}, "-ERR wrong number of arguments for 'memory|usage' command\r\n"},
		{[]string{"OBJECT", "ENCODING", "g"}, "$3\r\nint\r\n"},
		{[]string{"OBJECT", "ENCODING", "fw"}, "$3\r\nraw\r\n"},
		{[]string{"OBJECT", "ENCODING", "nope"}, "$-1\r\n"},
		{[]string{"OBJECT", "REFCOUNT", "g"}, ":1\r\n"},
		{[]string{"OBJECT", "FREQ", "g"}, "-" + errNoLFU + "\r\n"},
		{[]string{"OBJECT", "IDLETIME", "g"}, "-" + errNoIdleTime + "\r\n"},
		{[]string{"ROLE"}, "*3\r\n$6\r\nmaster\r\n:0\r\n*0\r\n"},
		{[]string{"WAIT", "0", "0"}, ":0\r\n"},
		{[]string{"WAIT", "x", "-1"}, "-ERR value is not an integer or out of range\r\n"},
		{[]string{"WAIT", "1", "x"}, "-ERR timeout is not an integer or out of range\r\n"},
		{[]string{"WAIT", "0", "-1"}, "-ERR timeout is negative\r\n"},
		{[]string{"SLOWLOG", "GET", "-2"}, "-ERR count should be greater than or equal to -1\r\n"},
		{[]string{"SLOWLOG", "GET", "x"}, "-ERR count should be greater than or equal to -1\r\n"},
		{[]string{"SLOWLOG", "NOPE"}, "-ERR unknown subcommand 'NOPE'. Try SLOWLOG HELP.\r\n"},
		{[]string{"LATENCY", "LATEST"}, "*0\r\n"},
		{[]string{"LATENCY", "RESET"}, ":0\r\n"},
		{[]string{"LATENCY", "HISTORY", "command"}, "*0\r\n"},
		{[]string{"CLIENT", "REPLY", "maybe"}, "-ERR syntax error\r\n"},
		{[]string{"CLIENT", "NO-EVICT", "maybe"}, "-ERR syntax error\r\n"},
		{[]string{"CLIENT", "NO-TOUCH", "maybe"}, "-ERR syntax error\r\n"},
		{[]string{"CLIENT", "PAUSE", "x"}, "-ERR timeout is not an integer or out of range\r\n"},
		{[]string{"CLIENT", "PAUSE", "-1"}, "-ERR timeout is negative\r\n"},
		{[]string{"CLIENT", "PAUSE", "10", "SOME"}, "-ERR CLIENT PAUSE mode must be WRITE or ALL\r\n"},
		{[]string{"CLIENT", "PAUSE"}, "-ERR wrong number of arguments for 'client|pause' command\r\n"},
		{[]string{"CLIENT", "KILL", "1.2.3.4:5"}, "-ERR No such client\r\n"},
		{[]string{"CLIENT", "KILL", "ID", "x"}, "-ERR client-id should be greater than 0\r\n"},
		{[]string{"CLIENT", "KILL", "ID", "0"}, "-ERR client-id should be greater than 0\r\n"},
		{[]string{"CLIENT", "KILL", "ID", "99999"}, ":0\r\n"},
		{[]string{"CLIENT", "KILL", "ID", "1", "ID"}, "-ERR syntax error\r\n"},
		{[]string{"CLIENT", "KILL", "FOO", "bar"}, "-ERR syntax error\r\n"},
		{[]string{"CLIENT", "KILL", "TYPE", "foo"}, "-ERR Unknown client type 'foo'\r\n"},
		{[]string{"CLIENT", "KILL", "TYPE", "pubsub"}, ":0\r\n"},
		{[]string{"CLIENT", "KILL", "USER", "nouser"}, "-ERR No such user 'nouser'\r\n"},
		{[]string{"CLIENT", "KILL", "SKIPME", "maybe"}, "-ERR syntax error\r\n"},
		{[]string{"CLIENT", "KILL", "LADDR", "1.2.3.4:1"}, ":0\r\n"},
		{[]string{"CONFIG", "SET", "slowlog-max-len", "-1"}, "-ERR CONFIG SET failed (possibly related to argument 'slowlog-max-len') - argument must be between 0 and 9223372036854775807 inclusive\r\n"},
		{[]string{"CONFIG", "SET", "latency-monitor-threshold", "-1"}, "-ERR CONFIG SET failed (possibly related to argument 'latency-monitor-threshold') - argument must be between 0 and 9223372036854775807 inclusive\r\n"},
		{[]string{"CONFIG", "SET", "slowlog-log-slower-than", "-2"}, "-ERR CONFIG SET failed (possibly related to argument 'slowlog-log-slower-than') - argument must be between -1 and 9223372036854775807 inclusive\r\n"},
		{[]string{"CONFIG", "SET", "slowlog-log-slower-than", "abc"}, "-ERR CONFIG SET failed (possibly related to argument 'slowlog-log-slower-than') - argument couldn't be parsed into an integer\r\n"},
		{[]string{"CONFIG", "SET", "slowlog-max-len", "1", "slowlog-max-len", "2"}, "-ERR CONFIG SET failed (possibly related to argument 'slowlog-max-len') - duplicate parameter\r\n"},
		{[]string{"CONFIG", "SET", "port", "1"}, "-ERR CONFIG SET failed (possibly related to argument 'port') - can't set immutable config\r\n"},
		{[]string{"CONFIG", "GET", "slowlog-max-len"}, "*2\r\n$15\r\nslowlog-max-len\r\n$3\r\n128\r\n"},
		{[]string{"CONFIG", "GET", "slowlog-log-slower-than"}, "*2\r\n$23\r\nslowlog-log-slower-than\r\n$5\r\n10000\r\n"},
		{[]string{"CONFIG", "GET", "latency-monitor-threshold"}, "*2\r\n$25\r\nlatency-monitor-threshold\r\n$1\r\n0\r\n"},
		{[]string{"CONFIG", "SET", "latency-monitor-threshold", "5", "slowlog-max-len", "7"}, "+OK\r\n"},
		{[]string{"CONFIG", "GET", "slowlog-max-len"}, "*2\r\n$15\r\nslowlog-max-len\r\n$1\r\n7\r\n"},
		{[]string{"CONFIG", "GET", "latency-monitor-threshold"}, "*2\r\n$25\r\nlatency-monitor-threshold\r\n$1\r\n5\r\n"},
	}
	for _, c := range cases {
		assert.Equal(t, c.want, h.cmd(c.args...), "%q", c.args)
	}
}

func TestClientReplyOffSkip(t *testing.T) {
	h := newHarness(t, Config{})
	// OFF drops every reply, errors and keyed commands' included, until ON.
	got := h.do([]string{"CLIENT", "REPLY", "OFF"}, []string{"PING"}, []string{"nope"},
		[]string{"CL.THROTTLE", "k", "1", "1", "60"}, []string{"GET", "k"},
		[]string{"CLIENT", "REPLY", "ON"}, []string{"PING"})
	assert.Equal(t, "+OK\r\n+PONG\r\n", got)
	// SKIP drops the next command's reply only.
	got = h.do([]string{"CLIENT", "REPLY", "SKIP"}, []string{"ECHO", "a"}, []string{"ECHO", "b"})
	assert.Equal(t, "$1\r\nb\r\n", got)
	got = h.do([]string{"CLIENT", "REPLY", "SKIP"}, []string{"STRLEN", "k"}, []string{"ECHO", "c"})
	assert.Equal(t, "$1\r\nc\r\n", got)
	// Across pipelines too.
	assert.Equal(t, "", h.cmd("CLIENT", "REPLY", "SKIP"))
	assert.Equal(t, "", h.cmd("PING"))
	assert.Equal(t, "+PONG\r\n", h.cmd("PING"))
	assert.Equal(t, "", h.cmd("CLIENT", "REPLY", "OFF"))
	assert.Equal(t, "", h.cmd("PING"))
	assert.Equal(t, "+RESET\r\n", h.cmd("RESET")) // RESET turns replies back on
	assert.Equal(t, "+PONG\r\n", h.cmd("PING"))
}

func TestSlowlog(t *testing.T) {
	zero := int64(0)
	h := newHarness(t, Config{SlowlogLogSlowerThan: &zero})
	assert.Equal(t, "+OK\r\n", h.cmd("SLOWLOG", "RESET"))
	h.cmd("CLIENT", "SETNAME", "me")
	h.cmd("CL.THROTTLE", "k", "1", "1", "60")
	args := []string{"ECHO", strings.Repeat("x", 200)}
	h.cmd(args...)
	many := []string{"EXISTS"}
	for i := 0; i < 40; i++ {
		many = append(many, "k"+strconv.Itoa(i))
	}
	h.cmd(many...)
	// SLOWLOG RESET, CLIENT SETNAME, CL.THROTTLE, ECHO, EXISTS; a SLOWLOG
	// command is logged after its own reply, as in Redis.
	assert.Equal(t, ":5\r\n", h.cmd("SLOWLOG", "LEN"))
	got := h.cmd("SLOWLOG", "GET", "3") // LEN, EXISTS, ECHO: newest first
	assert.True(t, strings.HasPrefix(got, "*3\r\n*6\r\n:5\r\n:"), got)
	assert.Contains(t, got, "*6\r\n:4\r\n")
	assert.Contains(t, got, "*32\r\n$6\r\nEXISTS\r\n$2\r\nk0\r\n")
	assert.Contains(t, got, "$3\r\nk29\r\n$23\r\n... (10 more arguments)\r\n$14\r\n127.0.0.1:5555\r\n$2\r\nme\r\n")
	assert.Contains(t, got, "$"+strconv.Itoa(128+len("... (72 more bytes)"))+"\r\n"+strings.Repeat("x", 128)+"... (72 more bytes)\r\n")
	got = h.cmd("SLOWLOG", "GET", "-1")
	assert.True(t, strings.HasPrefix(got, "*7\r\n"), got)
	assert.Contains(t, got, "$11\r\nCL.THROTTLE\r\n$1\r\nk\r\n")
	assert.Equal(t, 8, strings.Count(h.cmd("SLOWLOG", "GET"), "127.0.0.1:5555"))
	// No password goes in the log.
	h.cmd("SLOWLOG", "RESET")
	h.cmd("AUTH", "secret")
	h.cmd("HELLO", "2", "AUTH", "default", "secret")
	h.cmd("CONFIG", "SET", "requirepass", "secret")
	got = h.cmd("SLOWLOG", "GET")
	assert.NotContains(t, got, "secret")
	assert.Contains(t, got, "$11\r\nrequirepass\r\n$10\r\n(redacted)\r\n")
	assert.Contains(t, got, "*2\r\n$4\r\nAUTH\r\n$10\r\n(redacted)\r\n")
	assert.Contains(t, got, "*5\r\n$5\r\nHELLO\r\n$1\r\n2\r\n$4\r\nAUTH\r\n$10\r\n(redacted)\r\n$10\r\n(redacted)\r\n")
	// A shorter max length drops the oldest at once.
	h.cmd("CONFIG", "SET", "slowlog-max-len", "2")
	assert.Equal(t, ":2\r\n", h.cmd("SLOWLOG", "LEN"))
	h.cmd("CONFIG", "SET", "slowlog-log-slower-than", "-1")
	h.cmd("SLOWLOG", "RESET")
	h.cmd("PING")
	assert.Equal(t, ":0\r\n", h.cmd("SLOWLOG", "LEN"))
	assert.Equal(t, "*0\r\n", h.cmd("SLOWLOG", "GET"))
}

func TestHistogramBuckets(t *testing.T) {
	cases := []struct {
		ns     int64
		bucket int
	}{{0, 0}, {1024, 0}, {1025, 1}, {2048, 1}, {2049, 2}, {16384, 4}, {1 << 40, histBuckets - 1}}
	for _, c := range cases {
		var h cmdHist
		h.add(c.ns)
		assert.Equal(t, int64(1), h.b[c.bucket].Load(), "%d ns", c.ns)
	}
}

func TestLatencyHistogram(t *testing.T) {
	h := newHarness(t, Config{})
	h.do([]string{"PING"}, []string{"PING"}, []string{"PING"})
	h.cmd("CL.THROTTLE", "k", "1", "1", "60")
	h.cmd("CLIENT", "ID")
	got := h.cmd("LATENCY", "HISTOGRAM", "ping", "client", "nope")
	assert.True(t, strings.HasPrefix(got, "*4\r\n$4\r\nping\r\n*4\r\n$5\r\ncalls\r\n:3\r\n$14\r\nhistogram_usec\r\n*"), got)
	assert.Contains(t, got, ":3\r\n$9\r\nclient|id\r\n*4\r\n$5\r\ncalls\r\n:1\r\n")
	all := h.cmd("LATENCY", "HISTOGRAM")
	assert.Contains(t, all, "$11\r\ncl.throttle\r\n*4\r\n$5\r\ncalls\r\n:1\r\n")
	h.cmd("CONFIG", "RESETSTAT")
	assert.Equal(t, "*0\r\n", h.cmd("LATENCY", "HISTOGRAM", "ping"))
	// RESP3: maps.
	h.cmd("HELLO", "3")
	h.cmd("PING")
	got = h.cmd("LATENCY", "HISTOGRAM", "ping")
	assert.True(t, strings.HasPrefix(got, "%1\r\n$4\r\nping\r\n%2\r\n$5\r\ncalls\r\n:1\r\n$14\r\nhistogram_usec\r\n%1\r\n:"), got)
}

func TestLatencyMonitor(t *testing.T) {
	h := newHarness(t, Config{})
	assert.Contains(t, h.cmd("LATENCY", "DOCTOR"), "Latency monitoring is disabled")
	m := &h.srv.latency
	m.record(false, 50e6) // off: nothing kept
	assert.Equal(t, "*0\r\n", h.cmd("LATENCY", "LATEST"))
	h.cmd("CONFIG", "SET", "latency-monitor-threshold", "10")
	assert.Contains(t, h.cmd("LATENCY", "DOCTOR"), "no latency spike was observed")
	m.record(false, 9e6) // under the threshold
	m.record(false, 50e6)
	m.record(false, 20e6) // the same second: the largest stays
	m.record(true, 11e6)
	got := h.cmd("LATENCY", "LATEST")
	assert.Regexp(t, `^\*2\r\n\*4\r\n\$7\r\ncommand\r\n:\d+\r\n:50\r\n:50\r\n\*4\r\n\$12\r\nfast-command\r\n:\d+\r\n:11\r\n:11\r\n$`, got)
	assert.Regexp(t, `^\*1\r\n\*2\r\n:\d+\r\n:50\r\n$`, h.cmd("LATENCY", "HISTORY", "command"))
	doc := h.cmd("LATENCY", "DOCTOR")
	assert.Contains(t, doc, "1. command: 1 latency spikes (average 50ms, mean deviation 0ms, period ")
	assert.Contains(t, doc, "2. fast-command: 1 latency spikes (average 11ms")
	assert.Equal(t, ":1\r\n", h.cmd("LATENCY", "RESET", "command", "nope"))
	assert.Equal(t, ":1\r\n", h.cmd("LATENCY", "RESET"))
	assert.Equal(t, "*0\r\n", h.cmd("LATENCY", "LATEST"))
}

func TestClientKill(t *testing.T) {
	h := newHarness(t, Config{})
	a := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 6000}
	other := h.srv.NewClient(a, a)
	killed := 0
	other.SetKill(func() { killed++ })
	id := strconv.FormatInt(other.ID, 10)
	assert.Equal(t, ":1\r\n", h.cmd("CLIENT", "KILL", "ID", id, "ADDR", "127.0.0.1:6000"))
	assert.Equal(t, 1, killed)
	assert.Equal(t, ":0\r\n", h.cmd("CLIENT", "KILL", "ID", id, "ADDR", "127.0.0.1:6001"))
	assert.Equal(t, "+OK\r\n", h.cmd("CLIENT", "KILL", "127.0.0.1:6000"))
	assert.Equal(t, 2, killed)
	// SKIPME yes (the default) spares the caller; USER default matches both.
	assert.Equal(t, ":1\r\n", h.cmd("CLIENT", "KILL", "USER", "default"))
	assert.False(t, h.c.Closing())
	assert.Equal(t, ":2\r\n", h.cmd("CLIENT", "KILL", "USER", "default", "SKIPME", "no"))
	assert.True(t, h.c.Closing(), "the caller closes after its reply")
	assert.Equal(t, 4, killed)
}

func TestClientPauseWrite(t *testing.T) {
	h := newHarness(t, Config{})
	assert.Equal(t, "+OK\r\n", h.cmd("CLIENT", "PAUSE", "100000", "WRITE"))
	throttle := [][]byte{[]byte("CL.THROTTLE"), []byte("k"), []byte("1"), []byte("1"), []byte("60")}
	assert.True(t, h.srv.Slow([][][]byte{{[]byte("PING")}, throttle}), "a paused write goes off the loop")
	assert.False(t, h.srv.Slow([][][]byte{{[]byte("PING")}, {[]byte("GET"), []byte("k")}}))
	a := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 6000}
	done := h.execOffLoop(h.srv.NewClient(a, a), throttle)
	assert.Equal(t, "+PONG\r\n", h.cmd("PING"))
	assert.Equal(t, "$-1\r\n", h.cmd("GET", "k")) // the write has not run
	select {
	case r := <-done:
		t.Fatalf("ran during the pause: %q", r)
	default:
	}
	assert.Equal(t, "+OK\r\n", h.cmd("CLIENT", "UNPAUSE"))
	assert.Equal(t, "*5\r\n:0\r\n:2\r\n:1\r\n:-1\r\n:60\r\n", <-done)
	assert.False(t, h.srv.Slow([][][]byte{throttle}))
	// On an event loop a paused command is not held (it was on its way).
	h.cmd("CLIENT", "PAUSE", "100000", "ALL")
	assert.True(t, h.srv.Slow([][][]byte{{[]byte("PING")}}))
	assert.Equal(t, "+PONG\r\n", h.cmd("PING"))
	h.cmd("CLIENT", "UNPAUSE")
}

func TestResetAndFlags(t *testing.T) {
	h := newHarness(t, Config{RequirePass: "pw"})
	h.cmd("AUTH", "pw")
	h.cmd("CLIENT", "SETNAME", "me")
	h.cmd("CLIENT", "NO-EVICT", "on")
	h.cmd("CLIENT", "NO-TOUCH", "on")
	assert.Contains(t, h.cmd("CLIENT", "INFO"), " flags=eT ")
	h.cmd("HELLO", "3")
	assert.Equal(t, "+RESET\r\n", h.cmd("RESET"))
	assert.Equal(t, 2, h.c.Proto())
	assert.Equal(t, "-"+ErrNoAuth+"\r\n", h.cmd("CLIENT", "INFO"), "requirepass: RESET logs out")
	h.cmd("AUTH", "pw")
	info := h.cmd("CLIENT", "INFO")
	assert.Contains(t, info, " name= ")
	assert.Contains(t, info, " flags=N ")
}

func TestLastsaveInMemory(t *testing.T) {
	h := newHarness(t, Config{})
	assert.Equal(t, ":"+strconv.FormatInt(h.srv.started.Unix(), 10)+"\r\n", h.cmd("LASTSAVE"))
}

func TestToolsCommandInfo(t *testing.T) {
	h := newHarness(t, Config{})
	got := h.cmd("COMMAND", "INFO", "strlen", "memory|usage", "client|kill")
	require.True(t, strings.HasPrefix(got, "*3\r\n*10\r\n$6\r\nstrlen\r\n:2\r\n*2\r\n+readonly\r\n+fast\r\n:1\r\n:1\r\n:1\r\n"), got)
	assert.Contains(t, got, "$12\r\nmemory|usage\r\n:-3\r\n*1\r\n+readonly\r\n:2\r\n:2\r\n:1\r\n")
	assert.Contains(t, got, "$11\r\nclient|kill\r\n:-3\r\n*4\r\n+admin\r\n+noscript\r\n+loading\r\n+stale\r\n:0\r\n:0\r\n:0\r\n")
	docs := h.cmd("COMMAND", "DOCS", "slowlog", "latency", "reset", "role", "wait", "lastsave", "object")
	assert.True(t, strings.HasPrefix(docs, "*14\r\n$7\r\nslowlog\r\n"), docs)
}

func TestInfoLatencystats(t *testing.T) {
	h := newHarness(t, Config{})
	h.cmd("PING")
	h.cmd("CLIENT", "ID")
	for _, sec := range []string{"latencystats", "all", "everything"} {
		got := h.cmd("INFO", sec)
		assert.Contains(t, got, "# Latencystats\r\n", sec)
		assert.Regexp(t, `latency_percentiles_usec_ping:p50=\d+\.\d{3},p99=\d+\.\d{3},p99\.9=\d+\.\d{3}\r\n`, got, sec)
		assert.Contains(t, got, "latency_percentiles_usec_client|id:p50=", sec)
	}
	assert.NotContains(t, h.cmd("INFO"), "Latencystats")
	hist := &h.srv.hists[h.srv.table["ping"].id]
	for k := range hist.b {
		hist.b[k].Store(0)
	}
	for i := 0; i < 98; i++ {
		hist.add(500)
	}
	hist.add(3000)
	hist.add(1 << 40)
	assert.Contains(t, h.cmd("INFO", "latencystats"), "latency_percentiles_usec_ping:p50=1.024,p99=4.096,p99.9=1073741.824\r\n")
}

func TestMemoryStats(t *testing.T) {
	h := newHarness(t, Config{})
	h.cmd("CL.THROTTLE", "a", "15", "30", "60")
	h.cmd("CL.THROTTLE", "b", "15", "30", "60")
	got := h.cmd("MEMORY", "STATS")
	assert.True(t, strings.HasPrefix(got, "*28\r\n$14\r\npeak.allocated\r\n:"), got)
	assert.Contains(t, got, "$10\r\nkeys.count\r\n:2\r\n")
	assert.Contains(t, got, "$4\r\ndb.0\r\n*4\r\n$23\r\noverhead.hashtable.main\r\n:")
	h.cmd("HELLO", "3")
	got = h.cmd("MEMORY", "STATS")
	assert.True(t, strings.HasPrefix(got, "%14\r\n"), got)
	assert.Regexp(t, `\$18\r\ndataset\.percentage\r\n,[0-9.e+-]+\r\n`, got)
	assert.Contains(t, h.cmd("MEMORY", "DOCTOR"), "Hi Sam")
	assert.Equal(t, "+OK\r\n", h.cmd("MEMORY", "PURGE"))
	assert.Equal(t, "$45\r\nStats not supported for the current allocator\r\n", h.cmd("MEMORY", "MALLOC-STATS"))
}

// TestLatencyGraph: the samples of Redis 7.0's LATENCY GRAPH command,
// as it drew them.
func TestLatencyGraph(t *testing.T) {
	ev := &latencyEvent{max: 108, samples: []latencySample{{1000, 12}, {1001, 108}, {1002, 42}, {1003, 22}}}
	assert.Equal(t, "command - high 108 ms, low 12 ms (all time high 108 ms)\n"+strings.Repeat("-", 80)+"\n"+
		" #  \n |  \n |_ \n_||o\n    \n3210\nssss\n", renderLatencyGraph("command", ev, 1003))
	same := &latencyEvent{max: 1, samples: []latencySample{{0, 1}, {1, 1}}}
	assert.Equal(t, "command - high 1 ms, low 1 ms (all time high 1 ms)\n"+strings.Repeat("-", 80)+"\n"+
		"  \n  \n  \n__\n  \n33\n77\nmm\n", renderLatencyGraph("command", same, 37*60+30))
	h := newHarness(t, Config{})
	assert.Equal(t, "-ERR No samples available for event 'nope'\r\n", h.cmd("LATENCY", "GRAPH", "nope"))
	h.cmd("CONFIG", "SET", "latency-monitor-threshold", "1")
	h.srv.latency.record(false, 5e6)
	assert.Contains(t, h.cmd("LATENCY", "GRAPH", "command"), "command - high 5 ms, low 5 ms (all time high 5 ms)\n")
}

// execOffLoop runs one command for client c off the event loops, as the
// wire layer runs a paused write, and sends its reply on the channel.
func (h *harness) execOffLoop(c *Client, cmd [][]byte) <-chan string {
	c.SetOffLoop(true)
	done := make(chan string, 1)
	go func() {
		var out Out
		h.srv.Exec(c, [][][]byte{cmd}, &out)
		done <- string(out.B)
	}()
	return done
}
