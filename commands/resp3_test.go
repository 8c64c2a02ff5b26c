package commands

import (
	"net"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cellserver/cellserver/store"
)

// Test encoders for expected replies, independent of Out.
func bulk(s string) string        { return "$" + itoa(len(s)) + "\r\n" + s + "\r\n" }
func simple(s string) string      { return "+" + s + "\r\n" }
func integer(n int) string        { return ":" + itoa(n) + "\r\n" }
func head(t string, n int) string { return t + itoa(n) + "\r\n" }
func verbatim(s string) string    { return "=" + itoa(len(s)+4) + "\r\ntxt:" + s + "\r\n" }

// helloMap is HELLO's reply for proto in RESP3 (a map) or RESP2 (its array).
func helloMap(proto, id int, mode string) string {
	h := head("*", 14)
	if proto == 3 {
		h = head("%", 7)
	}
	return h + bulk("server") + bulk("redis") + bulk("version") + bulk(RedisVersion) +
		bulk("proto") + integer(proto) + bulk("id") + integer(id) + bulk("mode") + bulk(mode) +
		bulk("role") + bulk("master") + bulk("modules") + "*0\r\n"
}

// keySpec is COMMAND INFO's one key spec of a one-key command (flag RO or
// RW), in RESP3 (set and maps) or RESP2 (arrays).
func keySpec(proto int, flag string) string {
	m, s := "*", "*"
	k := 2
	if proto == 3 {
		m, s, k = "%", "~", 1
	}
	return head(s, 1) + head(m, 3*k) + bulk("flags") + head(s, 1) + simple(flag) +
		bulk("begin_search") + head(m, 2*k) + bulk("type") + bulk("index") + bulk("spec") + head(m, 1*k) + bulk("index") + integer(1) +
		bulk("find_keys") + head(m, 2*k) + bulk("type") + bulk("range") + bulk("spec") + head(m, 3*k) +
		bulk("lastkey") + integer(0) + bulk("keystep") + integer(1) + bulk("limit") + integer(0)
}

// TestRESP3Replies: every command's raw reply on a RESP2 connection and on
// one that sent HELLO 3, shapes as Redis 7 sends them (tests/resp3_test.go
// compares the ones Redis has with a live redis-server).
func TestRESP3Replies(t *testing.T) {
	h := newHarness(t, Config{EnableDebug: "yes"})
	c2 := h.c
	local := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 5556}
	c3 := h.srv.NewClient(local, local)
	h.c = c3
	require.Equal(t, helloMap(3, int(c3.ID), "standalone"), h.cmd("HELLO", "3"))
	require.Equal(t, 3, c3.Proto())
	require.Equal(t, 2, c2.Proto())
	setS := func(p int, n int) string {
		if p == 3 {
			return head("~", n)
		}
		return head("*", n)
	}
	mapS := func(p int, n int) string {
		if p == 3 {
			return head("%", n)
		}
		return head("*", 2*n)
	}
	null := map[int]string{2: "$-1\r\n", 3: "_\r\n"}
	getInfo := func(p int) string {
		return "*1\r\n*10\r\n" + bulk("get") + integer(2) + setS(p, 2) + simple("readonly") + simple("fast") +
			integer(1) + integer(1) + integer(1) + setS(p, 3) + simple("@read") + simple("@string") + simple("@fast") +
			setS(p, 0) + keySpec(p, "RO") + setS(p, 0)
	}
	timeInfo := func(p int) string {
		return "*1\r\n*10\r\n" + bulk("time") + integer(1) + setS(p, 3) + simple("loading") + simple("stale") + simple("fast") +
			integer(0) + integer(0) + integer(0) + setS(p, 1) + simple("@fast") +
			setS(p, 1) + bulk("nondeterministic_output") + setS(p, 0) + setS(p, 0)
	}
	configInfoHead := func(p int) string {
		return "*1\r\n*10\r\n" + bulk("config") + integer(-2) + setS(p, 0) + integer(0) + integer(0) + integer(0) +
			setS(p, 1) + simple("@slow") + setS(p, 0) + setS(p, 0) + "*4\r\n*10\r\n" + bulk("config|get")
	}
	getDocs := func(p int) string {
		return mapS(p, 1) + bulk("get") + mapS(p, 3) + bulk("summary") + bulk("Returns the limiter state (TAT in Unix ns) of a key.") +
			bulk("since") + bulk("1.0.0") + bulk("group") + bulk("string")
	}
	configDocsHead := func(p int) string {
		return mapS(p, 1) + bulk("config") + mapS(p, 4) + bulk("summary") + bulk("A container for server configuration commands.") +
			bulk("since") + bulk("2.0.0") + bulk("group") + bulk("server") + bulk("subcommands") + mapS(p, 4) +
			bulk("config|get") + mapS(p, 3)
	}
	cases := []struct {
		args []string
		want func(proto int) string
		// prefix: want is the reply's start (the rest varies).
		prefix bool
	}{
		{[]string{"GET", "k"}, func(int) string { return bulk("1700000004000000000") }, false},
		{[]string{"GET", "nope"}, func(p int) string { return null[p] }, false},
		{[]string{"PTTL", "k"}, func(int) string { return ":4000\r\n" }, false},
		{[]string{"TTL", "nope"}, func(int) string { return ":-2\r\n" }, false},
		{[]string{"TYPE", "k"}, func(int) string { return "+string\r\n" }, false},
		{[]string{"TYPE", "nope"}, func(int) string { return "+none\r\n" }, false},
		{[]string{"EXISTS", "k", "nope"}, func(int) string { return ":1\r\n" }, false},
		{[]string{"KEYS", "*"}, func(int) string { return "*1\r\n" + bulk("k") }, false},
		{[]string{"SCAN", "0"}, func(int) string { return "*2\r\n" + bulk("0") + "*1\r\n" + bulk("k") }, false},
		{[]string{"DBSIZE"}, func(int) string { return ":1\r\n" }, false},
		{[]string{"PING"}, func(int) string { return "+PONG\r\n" }, false},
		{[]string{"PING", "hi"}, func(int) string { return bulk("hi") }, false},
		{[]string{"ECHO", "hi"}, func(int) string { return bulk("hi") }, false},
		{[]string{"TIME"}, func(int) string { return "*2\r\n" + bulk("1700000000") + bulk("0") }, false},
		{[]string{"CONFIG", "GET", "timeout"}, func(p int) string { return mapS(p, 1) + bulk("timeout") + bulk("0") }, false},
		{[]string{"CONFIG", "GET", "maxmemory*"}, func(p int) string {
			return mapS(p, 2) + bulk("maxmemory") + bulk("0") + bulk("maxmemory-policy") + bulk("noeviction")
		}, false},
		{[]string{"CONFIG", "GET", "nosuch"}, func(p int) string { return mapS(p, 0) }, false},
		{[]string{"CLIENT", "GETNAME"}, func(p int) string { return null[p] }, false},
		{[]string{"CLIENT", "INFO"}, func(p int) string {
			if p == 3 {
				return "=" // the length varies with the id
			}
			return "$"
		}, true},
		{[]string{"COMMAND", "INFO", "get"}, getInfo, false},
		{[]string{"COMMAND", "INFO", "time"}, timeInfo, false},
		{[]string{"COMMAND", "INFO", "config"}, configInfoHead, true},
		{[]string{"COMMAND", "INFO", "nosuch"}, func(p int) string { return "*1\r\n" + null[p] }, false},
		{[]string{"COMMAND", "DOCS", "get"}, getDocs, false},
		{[]string{"COMMAND", "DOCS", "config"}, configDocsHead, true},
		{[]string{"COMMAND", "DOCS", "nosuch"}, func(p int) string { return mapS(p, 0) }, false},
		{[]string{"COMMAND", "GETKEYS", "GET", "k"}, func(int) string { return "*1\r\n" + bulk("k") }, false},
		{[]string{"COMMAND", "COUNT"}, func(int) string { return integer(len(h.srv.table)) }, false},
		{[]string{"COMMAND", "LIST"}, func(int) string { return head("*", h.srv.table.size()) }, true},
		{[]string{"COMMAND"}, func(int) string { return head("*", len(h.srv.table)) + "*10\r\n" + bulk("asking") }, true},
		{[]string{"INFO", "persistence"}, func(p int) string {
			s := "# Persistence\r\nloading:0\r\npersistence:none\r\n"
			if p == 3 {
				return verbatim(s)
			}
			return bulk(s)
		}, false},
		{[]string{"DEBUG", "CLOCK", "SET", "1700000000000000000"}, func(int) string { return "+OK\r\n" }, false},
		{[]string{"SELECT", "0"}, func(int) string { return "+OK\r\n" }, false},
		{[]string{"CLUSTER", "INFO"}, func(int) string { return "-" + ErrClusterDisabled + "\r\n" }, false},
		{[]string{"GET"}, func(int) string { return "-ERR wrong number of arguments for 'get' command\r\n" }, false},
		{[]string{"CL.THROTTLE", "k", "1", "0", "1"}, func(int) string { return "-" + ErrCellZeroRate + "\r\n" }, false},
		{[]string{"DEL", "k", "nope"}, func(int) string { return ":1\r\n" }, false},
	}
	for _, p := range []int{2, 3} {
		h.c = map[int]*Client{2: c2, 3: c3}[p]
		// Each connection sees k with the same state, and nope absent.
		require.Equal(t, "+OK\r\n", h.cmd("FLUSHALL"))
		require.Equal(t, "*5\r\n:0\r\n:16\r\n:15\r\n:-1\r\n:2\r\n", h.cmd("CL.THROTTLE", "k", "15", "30", "60"))
		require.Equal(t, "*5\r\n:0\r\n:16\r\n:14\r\n:-1\r\n:4\r\n", h.cmd("CL.THROTTLE", "k", "15", "30", "60"))
		for _, tc := range cases {
			got, want := h.cmd(tc.args...), tc.want(p)
			if tc.prefix {
				assert.True(t, strings.HasPrefix(got, want), "RESP%d %q:\n got %q\nwant prefix %q", p, tc.args, got, want)
			} else {
				assert.Equal(t, want, got, "RESP%d %q", p, tc.args)
			}
		}
	}
	// HELP replies are arrays of simple strings in both protocols.
	for _, name := range []string{"CLIENT", "COMMAND", "CONFIG", "CLUSTER", "DEBUG"} {
		h.c = c2
		r2 := h.cmd(name, "HELP")
		h.c = c3
		assert.Equal(t, r2, h.cmd(name, "HELP"), "%s HELP", name)
	}
}

// TestHelloSwitchesProtocol: HELLO 3 and HELLO 2 switch the connection from
// their own reply on, in request order within a pipeline; a refused HELLO
// leaves the protocol as it was.
func TestHelloSwitchesProtocol(t *testing.T) {
	h := newHarness(t, Config{RequirePass: "pw"})
	id := int(h.c.ID)
	// Before AUTH: refused, still RESP2.
	assert.Equal(t, "-"+ErrHelloNoAuth+"\r\n", h.cmd("HELLO", "3"))
	assert.Equal(t, "-"+ErrWrongPass+"\r\n", h.cmd("HELLO", "3", "AUTH", "default", "nope"))
	assert.Equal(t, 2, h.c.Proto())
	assert.Equal(t, helloMap(3, id, "standalone"), h.cmd("HELLO", "3", "AUTH", "default", "pw", "SETNAME", "r3"))
	assert.Equal(t, 3, h.c.Proto())
	assert.Equal(t, bulk("r3"), h.cmd("CLIENT", "GETNAME"))
	assert.Equal(t, "_\r\n", h.cmd("GET", "nope"))
	// Without a version HELLO keeps the protocol.
	assert.Equal(t, helloMap(3, id, "standalone"), h.cmd("HELLO"))
	for _, v := range []string{"4", "1", "0", "-3"} {
		assert.Equal(t, "-"+ErrNoProto+"\r\n", h.cmd("HELLO", v), "HELLO %s", v)
	}
	assert.Equal(t, "-"+ErrProtoNotInt+"\r\n", h.cmd("HELLO", "3.0"))
	assert.Equal(t, "-ERR Syntax error in HELLO option 'x'\r\n", h.cmd("HELLO", "2", "x"))
	assert.Equal(t, 3, h.c.Proto())
	assert.Contains(t, h.cmd("CLIENT", "INFO"), " resp=3 ")
	assert.Contains(t, h.cmd("CLIENT", "LIST"), " resp=3 ")

	// One pipeline: replies before HELLO in the old protocol, after it in
	// the new one; CL.THROTTLE is an array of five integers in both.
	throttle := []string{"CL.THROTTLE", "k", "0", "1", "60"}
	got := h.do([]string{"GET", "nope"}, throttle, []string{"HELLO", "2"}, []string{"GET", "nope"}, throttle, []string{"HELLO", "3"}, []string{"GET", "nope"})
	assert.Equal(t, "_\r\n"+"*5\r\n:0\r\n:1\r\n:0\r\n:-1\r\n:60\r\n"+
		helloMap(2, id, "standalone")+"$-1\r\n"+"*5\r\n:1\r\n:1\r\n:0\r\n:60\r\n:60\r\n"+
		helloMap(3, id, "standalone")+"_\r\n", got)

	// Another connection's CLIENT LIST line shows each one's protocol.
	h2 := h.c
	h.remote()
	assert.Equal(t, "+OK\r\n", h.cmd("AUTH", "pw"))
	list := h.cmd("CLIENT", "LIST")
	assert.True(t, strings.HasPrefix(list, "$"), list)
	assert.Contains(t, list, "id="+itoa(int(h2.ID))+" ")
	assert.Contains(t, list, " resp=3 ")
	assert.Contains(t, list, " resp=2 ")
}

// TestRESP3Cluster: CLUSTER's replies in RESP3, shaped as Redis 7's (checked
// against a cluster-enabled redis-server 7.0 owning every slot).
func TestRESP3Cluster(t *testing.T) {
	h := newHarness(t, Config{Cluster: ClusterConfig{Mode: ClusterEmulated, Host: "127.0.0.1", Port: 7001}})
	id := h.srv.myID
	require.Len(t, id, 40)
	r2 := map[string]string{
		"SLOTS": "*1\r\n*3\r\n:0\r\n:16383\r\n*4\r\n" + bulk("127.0.0.1") + ":7001\r\n" + bulk(id) + "*0\r\n",
		"SHARDS": "*1\r\n*4\r\n" + bulk("slots") + "*2\r\n:0\r\n:16383\r\n" + bulk("nodes") + "*1\r\n*14\r\n" +
			bulk("id") + bulk(id) + bulk("port") + ":7001\r\n" + bulk("ip") + bulk("127.0.0.1") + bulk("endpoint") + bulk("127.0.0.1") +
			bulk("role") + bulk("master") + bulk("replication-offset") + ":0\r\n" + bulk("health") + bulk("online"),
		"MYID": bulk(id),
	}
	r3 := map[string]string{
		"SLOTS": "*1\r\n*3\r\n:0\r\n:16383\r\n*4\r\n" + bulk("127.0.0.1") + ":7001\r\n" + bulk(id) + "%0\r\n",
		"SHARDS": "*1\r\n%2\r\n" + bulk("slots") + "*2\r\n:0\r\n:16383\r\n" + bulk("nodes") + "*1\r\n%7\r\n" +
			bulk("id") + bulk(id) + bulk("port") + ":7001\r\n" + bulk("ip") + bulk("127.0.0.1") + bulk("endpoint") + bulk("127.0.0.1") +
			bulk("role") + bulk("master") + bulk("replication-offset") + ":0\r\n" + bulk("health") + bulk("online"),
		"MYID": bulk(id),
	}
	for sub, want := range r2 {
		assert.Equal(t, want, h.cmd("CLUSTER", sub), "RESP2 CLUSTER %s", sub)
	}
	nodes2, info2 := h.cmd("CLUSTER", "NODES"), h.cmd("CLUSTER", "INFO")
	require.True(t, strings.HasPrefix(nodes2, "$"), nodes2)
	require.True(t, strings.HasPrefix(info2, "$"), info2)

	require.Equal(t, helloMap(3, int(h.c.ID), "cluster"), h.cmd("HELLO", "3"))
	for sub, want := range r3 {
		assert.Equal(t, want, h.cmd("CLUSTER", sub), "RESP3 CLUSTER %s", sub)
	}
	// NODES and INFO are the same text, as verbatim strings.
	body := func(bulkReply string) string { return bulkReply[strings.Index(bulkReply, "\r\n")+2 : len(bulkReply)-2] }
	assert.Equal(t, verbatim(body(nodes2)), h.cmd("CLUSTER", "NODES"))
	assert.Equal(t, verbatim(body(info2)), h.cmd("CLUSTER", "INFO"))
	assert.Equal(t, ":12182\r\n", h.cmd("CLUSTER", "KEYSLOT", "foo"))
	assert.Equal(t, "*0\r\n", h.cmd("CLUSTER", "GETKEYSINSLOT", "5", "10"))
}

// BenchmarkExecRESP3Pipeline runs the hot commands (CL.THROTTLE, PING, GET
// of a present and of an absent key) on a RESP3 connection: like
// BenchmarkExecThrottlePipeline, it must not allocate.
func BenchmarkExecRESP3Pipeline(b *testing.B) {
	st, _ := store.New(store.Config{Shards: 4})
	defer st.Close()
	srv, _ := New(Config{}, st)
	defer srv.Close()
	c := srv.NewClient(nil, nil)
	var out Out
	srv.Exec(c, [][][]byte{{[]byte("HELLO"), []byte("3")}}, &out)
	if c.Proto() != 3 {
		b.Fatal("HELLO 3 did not switch the connection")
	}
	var cmds [][][]byte
	for i := 0; i < 4; i++ {
		key := []byte("key" + fmtInt(i))
		cmds = append(cmds,
			[][]byte{[]byte("CL.THROTTLE"), key, []byte("1000000"), []byte("1"), []byte("1")},
			[][]byte{[]byte("PING")},
			[][]byte{[]byte("GET"), key},
			[][]byte{[]byte("GET"), []byte("absent" + fmtInt(i))})
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i += len(cmds) {
		out.B = out.B[:0]
		srv.Exec(c, cmds, &out)
	}
}
