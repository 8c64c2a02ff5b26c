package tests

import (
	"context"
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// toolsCases are the diagnostics and connection commands both servers
// have, on an empty keyspace, in the protocol the connection speaks.
func toolsCases(resp3 bool) []r3Case {
	cases := r3Exacts(
		r3Args("ROLE"), r3Args("WAIT", "0", "0"), r3Args("WAIT", "x", "0"), r3Args("WAIT", "0", "x"), r3Args("WAIT", "0", "-1"),
		r3Args("SLOWLOG", "RESET"), r3Args("SLOWLOG", "LEN"), r3Args("SLOWLOG", "GET"), r3Args("SLOWLOG", "GET", "-2"),
		r3Args("SLOWLOG", "HELP"),
		r3Args("LATENCY", "LATEST"), r3Args("LATENCY", "RESET"), r3Args("LATENCY", "HISTORY", "command"),
		r3Args("LATENCY", "DOCTOR"), r3Args("LATENCY", "HISTOGRAM", "nosuch"), r3Args("LATENCY", "HELP"),
		r3Args("LATENCY", "GRAPH", "command"),
		r3Args("MEMORY", "USAGE", "nope"), r3Args("MEMORY", "USAGE", "nope", "SAMPLES", "-1"), r3Args("MEMORY", "HELP"),
		r3Args("STRLEN", "nope"),
		r3Args("OBJECT", "HELP"), r3Args("OBJECT", "ENCODING", "nope"), r3Args("OBJECT", "FREQ", "nope"),
		r3Args("OBJECT", "REFCOUNT", "nope"), r3Args("OBJECT", "IDLETIME", "nope"),
		r3Args("CLIENT", "REPLY", "maybe"), r3Args("CLIENT", "REPLY", "ON"),
		r3Args("CLIENT", "KILL", "1.2.3.4:5"), r3Args("CLIENT", "KILL", "ID", "x"), r3Args("CLIENT", "KILL", "ID", "999999"),
		r3Args("CLIENT", "KILL", "TYPE", "foo"), r3Args("CLIENT", "KILL", "USER", "nouser"), r3Args("CLIENT", "KILL", "a", "b"),
		r3Args("CLIENT", "KILL", "SKIPME", "maybe"), r3Args("CLIENT", "KILL", "LADDR", "1.2.3.4:1"),
		r3Args("CLIENT", "PAUSE", "x"), r3Args("CLIENT", "PAUSE", "-1"), r3Args("CLIENT", "PAUSE", "10", "SOME"),
		r3Args("CLIENT", "UNPAUSE"), r3Args("CLIENT", "NO-EVICT", "maybe"), r3Args("CLIENT", "NO-EVICT", "on"),
		r3Args("CLIENT", "NO-EVICT", "off"),
		r3Args("CONFIG", "GET", "slowlog-max-len"), r3Args("CONFIG", "GET", "slowlog-log-slower-than"),
		r3Args("CONFIG", "GET", "latency-monitor-threshold"),
		r3Args("CONFIG", "SET", "slowlog-max-len", "-1"), r3Args("CONFIG", "SET", "slowlog-log-slower-than", "x"),
		r3Args("CONFIG", "SET", "latency-monitor-threshold", "-1"),
		r3Args("CONFIG", "SET", "slowlog-max-len", "64"), r3Args("CONFIG", "GET", "slowlog-max-len"),
		r3Args("CONFIG", "SET", "slowlog-max-len", "128"),
	)
	// Containers are left out of COMMAND INFO: Redis lists subcommands in
	// its hash table's order, which changes from one start to the next.
	cases = append(cases,
		r3Case{r3Args("LASTSAVE"), r3Shape},
		r3Case{r3Args("COMMAND", "INFO", "strlen", "memory|usage", "object|encoding", "role", "wait", "lastsave"), r3Shape},
		r3Case{r3Args("COMMAND", "INFO", "slowlog|get", "slowlog|len", "slowlog|reset", "latency|latest", "latency|histogram",
			"latency|doctor", "latency|reset", "client|kill", "client|reply", "client|pause", "client|unpause", "client|no-evict",
			"memory|stats", "object|freq", "object|help", "reset"), r3Shape},
	)
	if resp3 {
		cases = append(cases, r3Case{r3Args("COMMAND", "DOCS", "strlen", "role", "wait", "lastsave", "reset"), r3MapSubset})
	}
	return cases
}

// TestToolsDifferential: cellserver answers the tools' commands as
// redis-server does, byte for byte, in RESP2 and then RESP3.
func TestToolsDifferential(t *testing.T) {
	t.Parallel()
	ref := startR3Ref(t)
	cell := startServer(t, "--in-memory")
	rc, cc := ref.Raw(t), cell.Raw(t)
	runR3Cases(t, rc, cc, toolsCases(false))
	runR3Cases(t, rc, cc, []r3Case{{r3Args("HELLO", "3"), r3Hello}})
	runR3Cases(t, rc, cc, toolsCases(true))

	// CLIENT REPLY OFF and SKIP in one pipeline: only ON's reply and the
	// last ECHO's come back.
	var pipe []byte
	for _, a := range [][]string{{"CLIENT", "REPLY", "OFF"}, {"PING"}, {"nosuch"}, {"CLIENT", "REPLY", "SKIP"}, {"GET", "x"},
		{"CLIENT", "REPLY", "ON"}, {"CLIENT", "REPLY", "SKIP"}, {"ECHO", "skipped"}, {"ECHO", "last"}} {
		pipe = append(pipe, encodeCommand(a...)...)
	}
	rc.Send(pipe)
	cc.Send(pipe)
	for i := 0; i < 2; i++ {
		if err := r3Exact(rc.ReadReply(), cc.ReadReply()); err != nil {
			t.Errorf("CLIENT REPLY pipeline reply %d: %v", i, err)
		}
	}
	// Every command logged with slowlog-log-slower-than 0, a SLOWLOG
	// command after its own reply.
	runR3Cases(t, rc, cc, []r3Case{
		{r3Args("CONFIG", "SET", "slowlog-log-slower-than", "0"), r3Exact},
		{r3Args("SLOWLOG", "RESET"), r3Exact},
		{r3Args("PING"), r3Exact},
		{r3Args("SLOWLOG", "LEN"), r3Exact},
		{r3Args("SLOWLOG", "GET", "2"), r3Shape},
		{r3Args("SLOWLOG", "LEN"), r3Exact},
		{r3Args("CONFIG", "SET", "slowlog-log-slower-than", "10000"), r3Exact},
	})
	// RESET goes back to RESP2.
	runR3Cases(t, rc, cc, []r3Case{
		{r3Args("CLIENT", "SETNAME", "x"), r3Exact},
		{r3Args("RESET"), r3Exact},
		{r3Args("CLIENT", "GETNAME"), r3Exact},
		{r3Args("MEMORY", "USAGE", "nope"), r3Exact},
	})
}

// TestToolsRejectedCalls: in cluster mode a command refused with MOVED or
// CROSSSLOT counts in its rejected_calls and in errorstats, as in Redis 7.2.
func TestToolsRejectedCalls(t *testing.T) {
	t.Parallel()
	ref := startR3Ref(t, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf")
	cell := startServer(t, "--cluster", "emulated", "--in-memory")
	rc, cc := ref.Raw(t), cell.Raw(t)
	require.Equal(t, "+OK\r\n", string(rc.DoArgs("CLUSTER", "ADDSLOTSRANGE", "0", "16383")))
	runR3Cases(t, rc, cc, []r3Case{
		{r3Args("CONFIG", "RESETSTAT"), r3Exact},
		{r3Args("EXISTS", "user123", "foo"), r3Exact},
		{r3Args("DEL", "user123", "foo"), r3Exact},
		{r3Args("DEL", "user123", "foo"), r3Exact},
	})
	for _, c := range []*rawConn{rc, cc} {
		stats := string(c.DoArgs("INFO", "commandstats"))
		assert.Regexp(t, `cmdstat_exists:calls=0,usec=0,usec_per_call=0\.00,rejected_calls=1,failed_calls=0\r\n`, stats)
		assert.Regexp(t, `cmdstat_del:calls=0,usec=0,usec_per_call=0\.00,rejected_calls=2,failed_calls=0\r\n`, stats)
		assert.Contains(t, string(c.DoArgs("INFO", "errorstats")), "errorstat_CROSSSLOT:count=3\r\n")
	}

	// MOVED: a three-node cluster; every call on a node that does not own
	// the key is a rejected call there.
	nodes, _ := clCluster(t)
	ctx := ctxT(t, 30*time.Second)
	moved := 0
	for _, n := range nodes {
		rdb := n.Client(t)
		_, err := rdb.Do(ctx, "CL.THROTTLE", "user123", 15, 30, 60).Result()
		if err != nil && strings.HasPrefix(err.Error(), "MOVED ") {
			moved++
			stats := rdb.Info(ctx, "commandstats").Val()
			assert.Regexp(t, `cmdstat_cl\.throttle:calls=0,usec=0,usec_per_call=0\.00,rejected_calls=1,failed_calls=0\r\n`, stats, n.Addr)
		} else {
			require.NoError(t, err)
		}
	}
	assert.Equal(t, 2, moved, "two of the three nodes answer MOVED")
}

// TestToolsBigkeysMemkeys: redis-cli --bigkeys and --memkeys walk a
// keyspace of GCRA keys (CL.THROTTLE) and CL.LIMIT keys with no warning,
// counting every key by type.
func TestToolsBigkeysMemkeys(t *testing.T) {
	t.Parallel()
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		t.Skip("!!! redis-cli not installed: " + t.Name() + " NOT RUN !!!")
	}
	s := startServer(t, "--in-memory")
	rdb := s.Client(t)
	ctx := ctxT(t, 60*time.Second)
	for i := 0; i < 30; i++ {
		require.NoError(t, rdb.Do(ctx, "CL.THROTTLE", fmt.Sprintf("gcra:%d", i), 9999, 1, 3600).Err())
	}
	require.NoError(t, rdb.Do(ctx, "CL.THROTTLE", "gcra:"+strings.Repeat("long", 20), 9999, 1, 3600).Err())
	for i := 0; i < 12; i++ {
		kind := []string{"FW", "SWC", "SWL"}[i%3]
		require.NoError(t, rdb.Do(ctx, "CL.LIMIT", fmt.Sprintf("lim:%d", i), kind, 1000, 31622400).Err())
	}
	for _, mode := range []string{"--bigkeys", "--memkeys"} {
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		out, err := exec.CommandContext(cctx, cli, "-h", "127.0.0.1", "-p", strconv.Itoa(s.Port), mode).CombinedOutput()
		cancel()
		text := string(out)
		require.NoError(t, err, "%s:\n%s", mode, text)
		assert.NotContains(t, text, "Warning", mode)
		assert.NotContains(t, strings.ToLower(text), "error", mode)
		assert.Contains(t, text, "Sampled 43 keys in the keyspace!", mode)
		if mode == "--bigkeys" {
			assert.Contains(t, text, "31 strings with 589 bytes", text) // 31 TATs of 19 digits
			assert.Contains(t, text, "12 cl-limits with 0 ?", text)
		} else {
			assert.Regexp(t, regexp.MustCompile(`31 strings with \d+ bytes`), text)
			assert.Regexp(t, regexp.MustCompile(`12 cl-limits with [1-9]\d* bytes`), text)
			assert.Contains(t, text, `Biggest string found '"gcra:longlong`, text)
		}
	}
}

// TestToolsClientKill: CLIENT KILL closes another live connection, by ID
// and by the old addr form.
func TestToolsClientKill(t *testing.T) {
	t.Parallel()
	s := startServer(t, "--in-memory")
	a, b, c := s.Raw(t), s.Raw(t), s.Raw(t)
	id := clientID(t, b)
	assert.Equal(t, ":1\r\n", string(a.DoArgs("CLIENT", "KILL", "ID", id)))
	b.ExpectClosed()
	// A connection the server has answered is registered: until then
	// CLIENT KILL may not find it.
	require.Equal(t, "+PONG\r\n", string(c.DoArgs("PING")))
	assert.Equal(t, "+OK\r\n", string(a.DoArgs("CLIENT", "KILL", c.nc.LocalAddr().String())))
	c.ExpectClosed()
	assert.Equal(t, "-ERR No such client\r\n", string(a.DoArgs("CLIENT", "KILL", c.nc.LocalAddr().String())))
	assert.Equal(t, "+PONG\r\n", string(a.DoArgs("PING")))
	// SKIPME no: the caller too, after its reply.
	assert.Equal(t, ":1\r\n", string(a.DoArgs("CLIENT", "KILL", "ADDR", a.nc.LocalAddr().String(), "SKIPME", "no")))
	a.ExpectClosed()
}

// TestToolsClientKillRunsNothingAfter: a command a killed client sends
// once CLIENT KILL was answered never runs, as Redis frees the client at
// once: no reply, no key. Fifty kills, because the close itself happens
// later on the client's own event loop (the race the flag closes).
func TestToolsClientKillRunsNothingAfter(t *testing.T) {
	t.Parallel()
	s := startServer(t, "--in-memory")
	a := s.Raw(t)
	for i := range 50 {
		b := s.Raw(t)
		id := clientID(t, b)
		require.Equal(t, ":1\r\n", string(a.DoArgs("CLIENT", "KILL", "ID", id)))
		key := fmt.Sprintf("afterkill:%d", i)
		_, _ = b.nc.Write(encodeCommand("CL.THROTTLE", key, "100", "100", "60"))
		b.ExpectClosed()
		require.Equal(t, ":0\r\n", string(a.DoArgs("EXISTS", key)), "kill %d: the command sent after it ran", i)
	}
}

// TestToolsClientPauseWrite: CLIENT PAUSE WRITE holds a CL.THROTTLE until
// CLIENT UNPAUSE while reads and PING are answered.
func TestToolsClientPauseWrite(t *testing.T) {
	t.Parallel()
	s := startServer(t, "--in-memory")
	admin, writer, reader := s.Raw(t), s.Raw(t), s.Raw(t)
	assert.Equal(t, "+OK\r\n", string(admin.DoArgs("CLIENT", "PAUSE", "60000", "WRITE")))
	writer.Send(encodeCommand("CL.THROTTLE", "paused", "1", "1", "60"))
	assert.Equal(t, "+PONG\r\n", string(reader.DoArgs("PING")))
	assert.Equal(t, "$-1\r\n", string(reader.DoArgs("GET", "paused")), "the write has not run")
	assert.Equal(t, ":0\r\n", string(reader.DoArgs("EXISTS", "paused")))
	assert.Equal(t, "+OK\r\n", string(admin.DoArgs("CLIENT", "UNPAUSE")))
	assert.Equal(t, "*5\r\n:0\r\n:2\r\n:1\r\n:-1\r\n:60\r\n", string(writer.ReadReply()))
	assert.Equal(t, ":1\r\n", string(reader.DoArgs("EXISTS", "paused")))
	assert.Equal(t, "*5\r\n:0\r\n:2\r\n:0\r\n:-1\r\n:120\r\n", string(writer.DoArgs("CL.THROTTLE", "paused", "1", "1", "60")))
}

// TestToolsClientPauseKilled: the write of a client killed while it waits
// on CLIENT PAUSE never runs, and the client leaves CLIENT LIST at once,
// as Redis drops a closed client's blocked command.
func TestToolsClientPauseKilled(t *testing.T) {
	t.Parallel()
	s := startServer(t, "--in-memory")
	admin, writer := s.Raw(t), s.Raw(t)
	id := clientID(t, writer)
	assert.Equal(t, "+OK\r\n", string(admin.DoArgs("CLIENT", "PAUSE", "60000", "WRITE")))
	writer.Send(encodeCommand("CL.THROTTLE", "killed", "1", "1", "60"))
	require.Eventually(t, func() bool { return strings.Contains(string(admin.DoArgs("CLIENT", "LIST")), "cmd=cl.throttle") },
		10*time.Second, 20*time.Millisecond, "the write waits on the pause")
	assert.Equal(t, ":1\r\n", string(admin.DoArgs("CLIENT", "KILL", "ID", id)))
	writer.ExpectClosed()
	require.Eventually(t, func() bool { return !strings.Contains(string(admin.DoArgs("CLIENT", "LIST")), "id="+id+" ") },
		10*time.Second, 20*time.Millisecond, "the killed client is gone before the pause ends")
	assert.Equal(t, "+OK\r\n", string(admin.DoArgs("CLIENT", "UNPAUSE")))
	assert.Equal(t, ":0\r\n", string(admin.DoArgs("EXISTS", "killed")), "its write never ran")
}

// TestToolsClientPauseKilledThenUnpaused: CLIENT KILL and CLIENT UNPAUSE
// in one pipeline, while the victim's write waits on the pause: the write
// never runs, whether the pause ends before its loop closes it or after
// (Redis frees the killed client at once). The same for an EXEC.
func TestToolsClientPauseKilledThenUnpaused(t *testing.T) {
	t.Parallel()
	s := startServer(t, "--in-memory")
	admin := s.Raw(t)
	for i := range 10 {
		victim := s.Raw(t)
		id := clientID(t, victim)
		key := fmt.Sprintf("pausekill:%d", i)
		exec := i%2 == 1
		if exec {
			require.Equal(t, "+OK\r\n", string(victim.DoArgs("MULTI")))
			require.Equal(t, "+QUEUED\r\n", string(victim.DoArgs("CL.THROTTLE", key, "1", "1", "60")))
		}
		require.Equal(t, "+OK\r\n", string(admin.DoArgs("CLIENT", "PAUSE", "60000", "WRITE")))
		want := "cmd=cl.throttle"
		if exec {
			victim.Send(encodeCommand("EXEC"))
			want = "cmd=exec"
		} else {
			victim.Send(encodeCommand("CL.THROTTLE", key, "1", "1", "60"))
		}
		require.Eventually(t, func() bool {
			for _, l := range strings.Split(string(admin.DoArgs("CLIENT", "LIST")), "\n") {
				if strings.Contains(l, "id="+id+" ") && strings.Contains(l, want) {
					return true
				}
			}
			return false
		}, 10*time.Second, 5*time.Millisecond, "round %d: the write waits on the pause", i)
		admin.Send(append(encodeCommand("CLIENT", "KILL", "ID", id), encodeCommand("CLIENT", "UNPAUSE")...))
		require.Equal(t, ":1\r\n", string(admin.ReadReply()))
		require.Equal(t, "+OK\r\n", string(admin.ReadReply()))
		victim.ExpectClosed()
		require.Equal(t, ":0\r\n", string(admin.DoArgs("EXISTS", key)), "round %d (exec %v): the killed client's write ran", i, exec)
	}
}

// TestToolsClientPauseWriteExec: an EXEC whose transaction holds a write
// waits for CLIENT UNPAUSE before it holds any shard, as Redis's EXEC
// counts as a write then: readers of its key are answered meanwhile.
func TestToolsClientPauseWriteExec(t *testing.T) {
	t.Parallel()
	s := startServer(t, "--in-memory")
	admin, writer, reader := s.Raw(t), s.Raw(t), s.Raw(t)
	assert.Equal(t, "+OK\r\n", string(writer.DoArgs("MULTI")))
	assert.Equal(t, "+QUEUED\r\n", string(writer.DoArgs("CL.THROTTLE", "ptx", "1", "1", "60")))
	assert.Equal(t, "+OK\r\n", string(admin.DoArgs("CLIENT", "PAUSE", "60000", "WRITE")))
	writer.Send(encodeCommand("EXEC"))
	assert.Equal(t, "$-1\r\n", string(reader.DoArgs("GET", "ptx")), "EXEC has not run, and holds no shard")
	assert.Equal(t, "+OK\r\n", string(admin.DoArgs("CLIENT", "UNPAUSE")))
	assert.Equal(t, "*1\r\n*5\r\n:0\r\n:2\r\n:1\r\n:-1\r\n:60\r\n", string(writer.ReadReply()))
	assert.Equal(t, ":1\r\n", string(reader.DoArgs("EXISTS", "ptx")))
}

// TestToolsSlowlog: with --slowlog-log-slower-than 0 every command is
// logged, with its arguments, address and name, as redis_exporter reads
// them (SLOWLOG LEN, SLOWLOG GET 1 and 10).
func TestToolsSlowlog(t *testing.T) {
	t.Parallel()
	s := startServer(t, "--in-memory", "--slowlog-log-slower-than", "0", "--slowlog-max-len", "3")
	rdb := s.Client(t, func(o *redis.Options) { o.Protocol = 2; o.ClientName = "tool" })
	ctx := ctxT(t, 30*time.Second)
	assert.Equal(t, []any{"slowlog-log-slower-than", "0"}, rdb.Do(ctx, "CONFIG", "GET", "slowlog-log-slower-than").Val())
	require.NoError(t, rdb.Do(ctx, "SLOWLOG", "RESET").Err())
	require.NoError(t, rdb.Do(ctx, "CL.THROTTLE", "slow", 1, 1, 60).Err())
	assert.Equal(t, int64(2), rdb.Do(ctx, "SLOWLOG", "LEN").Val(), "SLOWLOG RESET and CL.THROTTLE")
	entries := rdb.Do(ctx, "SLOWLOG", "GET", 10).Val().([]any)
	require.Len(t, entries, 3, "slowlog-max-len 3")
	e := entries[1].([]any)
	require.Len(t, e, 6)
	assert.Equal(t, []any{"CL.THROTTLE", "slow", "1", "1", "60"}, e[3])
	assert.Equal(t, "tool", e[5])
	assert.IsType(t, int64(0), e[0])
	assert.IsType(t, int64(0), e[2])
	// LATENCY HISTOGRAM as redis_exporter reads it: name, then
	// [calls n histogram_usec [bucket count ...]].
	hist := rdb.Do(ctx, "LATENCY", "HISTOGRAM", "cl.throttle").Val().([]any)
	require.Len(t, hist, 2)
	assert.Equal(t, "cl.throttle", hist[0])
	d := hist[1].([]any)
	assert.Equal(t, []any{"calls", int64(1), "histogram_usec"}, d[:3])
	assert.Len(t, d[3], 2)
}

// TestToolsExporterScrape sends what redis_exporter sends on a scrape
// (RESP2, redigo) and checks each reply parses as it parses it.
func TestToolsExporterScrape(t *testing.T) {
	t.Parallel()
	// The slow log's replies are checked empty: under a loaded CI run an
	// INFO ALL once took 11 ms, past the default 10 ms threshold.
	s := startServer(t, "--in-memory", "--slowlog-log-slower-than", "10000000")
	rdb := s.Client(t, func(o *redis.Options) { o.Protocol = 2 })
	ctx := ctxT(t, 30*time.Second)
	require.NoError(t, rdb.Do(ctx, "CL.THROTTLE", "k", 9999, 1, 3600).Err())
	cfg := rdb.Do(ctx, "CONFIG", "GET", "*").Val().([]any)
	require.Zero(t, len(cfg)%2)
	m := map[string]any{}
	for i := 0; i < len(cfg); i += 2 {
		m[cfg[i].(string)] = cfg[i+1]
	}
	assert.Equal(t, "1", m["databases"])
	assert.Contains(t, m, "slowlog-max-len")
	info := rdb.Do(ctx, "INFO", "ALL").Val().(string)
	assert.Regexp(t, `(?m)^cmdstat_cl\.throttle:calls=1,usec=\d+,`, info)
	assert.Regexp(t, `(?m)^latency_percentiles_usec_cl\.throttle:p50=`, info)
	assert.Regexp(t, `(?m)^run_id:[0-9a-f]{40}\r$`, info)
	assert.Equal(t, []any{}, rdb.Do(ctx, "LATENCY", "LATEST").Val())
	hist := rdb.Do(ctx, "LATENCY", "HISTOGRAM").Val().([]any)
	require.Zero(t, len(hist)%2)
	for i := 0; i < len(hist); i += 2 {
		d := hist[i+1].([]any)
		require.Len(t, d, 4, "%v", hist[i])
		assert.Equal(t, "calls", d[0])
		assert.Equal(t, "histogram_usec", d[2])
		buckets := d[3].([]any)
		require.Zero(t, len(buckets)%2)
		assert.Equal(t, d[1], buckets[len(buckets)-1], "the last bucket counts every call")
	}
	assert.Equal(t, int64(0), rdb.Do(ctx, "SLOWLOG", "LEN").Val())
	assert.Equal(t, []any{}, rdb.Do(ctx, "SLOWLOG", "GET", "1").Val())
	// check-keys: TYPE, then STRLEN for a string, MEMORY USAGE.
	assert.Equal(t, "string", rdb.Type(ctx, "k").Val())
	assert.Equal(t, int64(19), rdb.StrLen(ctx, "k").Val())
	assert.Equal(t, int64(40), rdb.MemoryUsage(ctx, "k").Val())
	assert.Contains(t, rdb.ClientList(ctx).Val(), " fd=")
}
