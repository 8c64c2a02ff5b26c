package tests

// RESP3 end to end: the same commands after HELLO 3 to a real redis-server
// and to cellserver, raw replies compared byte for byte where both have the
// same state, by shape where values differ by nature (ids, times, versions,
// the text of COMMAND DOCS). Then RESP3 clients: go-redis with Protocol 3,
// redis-cli -3, redis-benchmark -3 and node-redis 6 with its defaults.
//
// Debian's redis-server is 7.0.x; cellserver reports 7.2.0. For these
// commands RESP3's shapes are the same in 7.0 and 7.2. The differences
// found are in content, not shape, and allowed explicitly: CLIENT INFO/LIST
// in 7.2 end with lib-name and lib-ver (CLIENT SETINFO came in 7.2), and
// 7.2's unauthenticated-HELLO error says "HELLO <proto> AUTH" where 7.0's
// says "HELLO AUTH" (r3Known70).

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// r3Ref is a redis-server started for the comparison.
type r3Ref struct {
	Addr string
	cmd  *exec.Cmd
	out  *lockedBuffer
}

// startR3Ref starts redis-server on a free loopback port with no
// persistence, and stops it at cleanup. It skips the test, loudly, when
// redis-server is not installed.
func startR3Ref(t *testing.T, extra ...string) *r3Ref {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Skip("!!! redis-server not installed (apt-get install -y redis-server; test.sh does): " + t.Name() + " NOT RUN !!!")
	}
	dir := t.TempDir()
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		port := freePort(t)
		args := append([]string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
			"--dir", dir, "--daemonize", "no", "--maxclients", "100", "--databases", "1"}, extra...)
		r := &r3Ref{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), out: &lockedBuffer{}}
		r.cmd = exec.Command(bin, args...)
		r.cmd.Stdout, r.cmd.Stderr = r.out, r.out
		if lastErr = r.cmd.Start(); lastErr != nil {
			continue
		}
		exited := make(chan struct{})
		go func() { _ = r.cmd.Wait(); close(exited) }()
		deadline := time.Now().Add(10 * time.Second)
		for !pingRaw(r.Addr) && time.Now().Before(deadline) {
			select {
			case <-exited:
				deadline = time.Time{}
			case <-time.After(10 * time.Millisecond):
			}
		}
		if !pingRaw(r.Addr) {
			_ = r.cmd.Process.Kill()
			<-exited
			lastErr = fmt.Errorf("redis-server did not answer on %s; output:\n%s", r.Addr, r.out.String())
			continue
		}
		t.Cleanup(func() {
			_ = r.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-exited:
			case <-time.After(10 * time.Second):
				_ = r.cmd.Process.Kill()
				<-exited
			}
		})
		return r
	}
	t.Fatalf("redis-server did not start: %v", lastErr)
	return nil
}

// Raw opens a raw connection to the reference server.
func (r *r3Ref) Raw(t *testing.T) *rawConn {
	t.Helper()
	nc, err := net.DialTimeout("tcp", r.Addr, 5*time.Second)
	require.NoError(t, err)
	t.Cleanup(func() { _ = nc.Close() })
	return &rawConn{t: t, nc: nc, r: newReader(nc)}
}

// r3Value is a parsed RESP2/RESP3 reply.
type r3Value struct {
	typ   byte
	s     string    // a scalar's text (a verbatim string's with its format)
	elems []r3Value // an aggregate's elements (a map's keys and values in turn)
}

// parseR3 parses one whole reply (as ReadReply returns it).
func parseR3(b []byte) (r3Value, error) {
	v, rest, err := parseR3Prefix(b)
	if err == nil && len(rest) > 0 {
		err = fmt.Errorf("%d bytes after the reply", len(rest))
	}
	return v, err
}

func parseR3Prefix(b []byte) (r3Value, []byte, error) {
	i := bytes.Index(b, []byte("\r\n"))
	if i < 1 {
		return r3Value{}, nil, fmt.Errorf("no reply line in %q", clip(b))
	}
	v := r3Value{typ: b[0], s: string(b[1:i])}
	rest := b[i+2:]
	switch v.typ {
	case '$', '=', '!':
		n, err := strconv.Atoi(v.s)
		if err != nil || n < 0 {
			return v, rest, err // $-1: a RESP2 null, s "-1"
		}
		if len(rest) < n+2 {
			return v, nil, fmt.Errorf("short bulk")
		}
		v.s, rest = string(rest[:n]), rest[n+2:]
	case '*', '~', '%', '>':
		n, err := strconv.Atoi(v.s)
		if err != nil {
			return v, nil, err
		}
		if v.typ == '%' {
			n *= 2
		}
		for j := 0; j < n; j++ {
			var e r3Value
			if e, rest, err = parseR3Prefix(rest); err != nil {
				return v, nil, err
			}
			v.elems = append(v.elems, e)
		}
	}
	return v, rest, nil
}

// mapGet returns the value of key in a map (or a RESP2 key-value array).
func (v r3Value) mapGet(key string) (r3Value, bool) {
	for j := 0; j+1 < len(v.elems); j += 2 {
		if v.elems[j].s == key {
			return v.elems[j+1], true
		}
	}
	return r3Value{}, false
}

// skeleton is v's shape: types and map keys, no values. An aggregate whose
// elements are all scalars of one type is that type once, whatever the
// count (flags, ACL categories, slot numbers); other aggregates list their
// elements' skeletons in order.
func skeleton(v r3Value) string {
	switch v.typ {
	case '*', '~', '>':
		if len(v.elems) == 0 {
			return string(v.typ) + "[]"
		}
		if t := v.elems[0].typ; !isAggregate(t) && !slices.ContainsFunc(v.elems, func(e r3Value) bool { return e.typ != t }) {
			return string(v.typ) + "[" + string(t) + "...]"
		}
		parts := make([]string, len(v.elems))
		for j, e := range v.elems {
			parts[j] = skeleton(e)
		}
		return string(v.typ) + "[" + strings.Join(parts, ",") + "]"
	case '%':
		var parts []string
		for j := 0; j+1 < len(v.elems); j += 2 {
			parts = append(parts, v.elems[j].s+":"+skeleton(v.elems[j+1]))
		}
		return "%{" + strings.Join(parts, ",") + "}"
	}
	return string(v.typ)
}

func isAggregate(t byte) bool { return t == '*' || t == '~' || t == '%' || t == '>' }

// r3Compare checks cellserver's reply against Redis's; nil if they agree.
type r3Compare func(redisRaw, cellRaw []byte) error

// r3Exact: byte for byte.
func r3Exact(r, c []byte) error {
	if !bytes.Equal(r, c) {
		return fmt.Errorf("redis %q\n  cell  %q", clip(r), clip(c))
	}
	return nil
}

// r3Shape: the same skeleton.
func r3Shape(r, c []byte) error {
	rv, err := parseR3(r)
	if err != nil {
		return fmt.Errorf("redis reply: %v", err)
	}
	cv, err := parseR3(c)
	if err != nil {
		return fmt.Errorf("cellserver reply: %v", err)
	}
	if rs, cs := skeleton(rv), skeleton(cv); rs != cs {
		return fmt.Errorf("shapes differ:\n  redis %s\n  cell  %s", rs, cs)
	}
	return nil
}

// r3Hello: the same map, keys in order, values equal except version and id.
func r3Hello(r, c []byte) error {
	if err := r3Shape(r, c); err != nil {
		return err
	}
	rv, _ := parseR3(r)
	cv, _ := parseR3(c)
	if rv.typ != '%' {
		return fmt.Errorf("HELLO 3 is a map in Redis, got %q", clip(r))
	}
	for j := 0; j+1 < len(rv.elems); j += 2 {
		k := rv.elems[j].s
		if k == "version" || k == "id" {
			continue
		}
		if rs, cs := fmt.Sprint(rv.elems[j+1]), fmt.Sprint(cv.elems[j+1]); rs != cs {
			return fmt.Errorf("HELLO %s: redis %s, cell %s", k, rs, cs)
		}
	}
	return nil
}

// r3Digits: the same shape, every scalar a decimal (TIME).
func r3Digits(r, c []byte) error {
	if err := r3Shape(r, c); err != nil {
		return err
	}
	cv, _ := parseR3(c)
	for _, e := range cv.elems {
		if _, err := strconv.ParseUint(e.s, 10, 64); err != nil {
			return fmt.Errorf("not a decimal: %q", e.s)
		}
	}
	return nil
}

// r3MapSubset: both maps of maps (COMMAND DOCS); every field cellserver
// sends, Redis sends too, with the same skeleton.
func r3MapSubset(r, c []byte) error {
	rv, err1 := parseR3(r)
	cv, err2 := parseR3(c)
	if err := errors.Join(err1, err2); err != nil {
		return err
	}
	if rv.typ != '%' || cv.typ != '%' || len(rv.elems) != len(cv.elems) {
		return fmt.Errorf("not maps of the same size: redis %s, cell %s", skeleton(rv), skeleton(cv))
	}
	for j := 0; j+1 < len(cv.elems); j += 2 {
		name := cv.elems[j].s
		rd, ok := rv.mapGet(name)
		if !ok {
			return fmt.Errorf("redis has no %q", name)
		}
		cd := cv.elems[j+1]
		if rd.typ != '%' || cd.typ != '%' {
			return fmt.Errorf("%s: not maps: redis %c, cell %c", name, rd.typ, cd.typ)
		}
		for k := 0; k+1 < len(cd.elems); k += 2 {
			field := cd.elems[k].s
			rf, ok := rd.mapGet(field)
			if !ok {
				return fmt.Errorf("%s: redis has no field %q", name, field)
			}
			if rs, cs := skeleton(rf), skeleton(cd.elems[k+1]); rs != cs {
				return fmt.Errorf("%s.%s: redis %s, cell %s", name, field, rs, cs)
			}
		}
	}
	return nil
}

// r3ClientLine: both verbatim txt strings of CLIENT INFO lines with the same
// fields in the same order, cellserver's (7.2) ending with lib-name and
// lib-ver, which 7.0 lacks; resp=3 in both.
func r3ClientLine(r, c []byte) error {
	rv, err1 := parseR3(r)
	cv, err2 := parseR3(c)
	if err := errors.Join(err1, err2); err != nil {
		return err
	}
	if rv.typ != '=' || cv.typ != '=' {
		return fmt.Errorf("not verbatim strings: redis %c, cell %c", rv.typ, cv.typ)
	}
	keys := func(s string) ([]string, error) {
		line, ok := strings.CutPrefix(s, "txt:")
		if !ok || !strings.HasSuffix(line, "\n") {
			return nil, fmt.Errorf("not txt: or no final newline: %q", s)
		}
		var ks []string
		for _, f := range strings.Fields(line) {
			k, _, _ := strings.Cut(f, "=")
			ks = append(ks, k)
		}
		if !strings.Contains(line, " resp=3 ") && !strings.HasSuffix(line, " resp=3\n") {
			return nil, fmt.Errorf("no resp=3 in %q", line)
		}
		return ks, nil
	}
	rk, err1 := keys(rv.s)
	ck, err2 := keys(cv.s)
	if err := errors.Join(err1, err2); err != nil {
		return err
	}
	if want := append(rk, "lib-name", "lib-ver"); !slices.Equal(want, ck) {
		return fmt.Errorf("fields differ:\n  redis %v (+ lib-name lib-ver in 7.2)\n  cell  %v", rk, ck)
	}
	return nil
}

// r3Known70 returns a comparison: exact once cellserver's Redis 7.2 text
// is turned into Redis 7.0's, v72 replaced by v70.
func r3Known70(v72, v70 string) r3Compare {
	return func(r, c []byte) error {
		if !bytes.Contains(c, []byte(v72)) {
			return fmt.Errorf("cellserver's reply lacks Redis 7.2's %q: %q", v72, clip(c))
		}
		return r3Exact(r, bytes.ReplaceAll(c, []byte(v72), []byte(v70)))
	}
}

// r3Verbatim returns a comparison: both verbatim txt strings starting with
// prefix (after txt:).
func r3Verbatim(prefix string) r3Compare {
	return func(r, c []byte) error {
		for _, b := range [][]byte{r, c} {
			v, err := parseR3(b)
			if err != nil {
				return err
			}
			if v.typ != '=' || !strings.HasPrefix(v.s, "txt:"+prefix) {
				return fmt.Errorf("not a verbatim txt string starting %q: %q", prefix, clip(b))
			}
		}
		return nil
	}
}

// r3Case is one request sent to both servers.
type r3Case struct {
	args []string
	cmp  r3Compare
}

func r3Exacts(cmds ...[]string) []r3Case {
	out := make([]r3Case, len(cmds))
	for i, c := range cmds {
		out[i] = r3Case{c, r3Exact}
	}
	return out
}

func r3Args(a ...string) []string { return a }

// runR3Cases sends each case to both connections and compares.
func runR3Cases(t *testing.T, rc, cc *rawConn, cases []r3Case) {
	t.Helper()
	for _, tc := range cases {
		r, c := rc.DoArgs(tc.args...), cc.DoArgs(tc.args...)
		if err := tc.cmp(r, c); err != nil {
			t.Errorf("%q: %v", tc.args, err)
		}
	}
}

// TestRESP3Differential: after HELLO 3, cellserver answers as redis-server
// does, for the commands both have, with empty keyspaces.
func TestRESP3Differential(t *testing.T) {
	t.Parallel()
	ref := startR3Ref(t)
	cell := startServer(t, "--maxclients", "100", "--in-memory")
	rc, cc := ref.Raw(t), cell.Raw(t)

	cases := append([]r3Case{{r3Args("HELLO", "3"), r3Hello}},
		r3Exacts(
			r3Args("PING"), r3Args("PING", "hi"), r3Args("ECHO", "hi"), r3Args("ECHO", ""),
			r3Args("GET", "nope"), r3Args("TYPE", "nope"), r3Args("TTL", "nope"), r3Args("PTTL", "nope"),
			r3Args("EXISTS", "nope", "nope2"), r3Args("DEL", "nope"), r3Args("UNLINK", "nope"),
			r3Args("KEYS", "*"), r3Args("KEYS", "nope*"), r3Args("SCAN", "0"), r3Args("SCAN", "0", "MATCH", "x*", "COUNT", "100"),
			r3Args("DBSIZE"), r3Args("SELECT", "0"),
			r3Args("CONFIG", "GET", "maxclients"), r3Args("CONFIG", "GET", "timeout"), r3Args("CONFIG", "GET", "nosuch"),
			r3Args("CLIENT", "GETNAME"),
			r3Args("COMMAND", "INFO", "nosuch"), r3Args("COMMAND", "DOCS", "nosuch"),
			r3Args("COMMAND", "GETKEYS", "GET", "k"),
			r3Args("CLUSTER", "INFO"), r3Args("CLUSTER", "SLOTS"),
			r3Args("HELLO", "4"), r3Args("HELLO", "1"), r3Args("HELLO", "x"),
			r3Args("GET"), r3Args("nosuchcmd", "a"), r3Args("SELECT", "1"),
		)...)
	cases = append(cases,
		r3Case{r3Args("TIME"), r3Digits},
		r3Case{r3Args("COMMAND", "INFO", "get"), r3Shape},
		// TTL would differ in content: Redis tips it nondeterministic_output.
		r3Case{r3Args("COMMAND", "INFO", "get", "nosuch", "type"), r3Shape},
		r3Case{r3Args("COMMAND", "DOCS", "get"), r3MapSubset},
		r3Case{r3Args("COMMAND", "DOCS", "ping", "ttl"), r3MapSubset},
		r3Case{r3Args("CLIENT", "INFO"), r3ClientLine},
		r3Case{r3Args("CLIENT", "LIST", "ID", "999999"), r3Exact},
		r3Case{r3Args("INFO", "server"), r3Verbatim("# Server\r\n")},
		r3Case{r3Args("INFO", "keyspace"), r3Exact},
		r3Case{r3Args("CLIENT", "SETNAME", "r3"), r3Exact},
		r3Case{r3Args("CLIENT", "GETNAME"), r3Exact},
		// HELLO without a version keeps RESP3.
		r3Case{r3Args("HELLO"), r3Hello},
		r3Case{r3Args("GET", "nope"), r3Exact},
		// Back to RESP2, and the same commands in RESP2's forms.
		r3Case{r3Args("HELLO", "2"), r3Shape},
		r3Case{r3Args("GET", "nope"), r3Exact},
		r3Case{r3Args("CONFIG", "GET", "maxclients"), r3Exact},
		r3Case{r3Args("COMMAND", "INFO", "nosuch"), r3Exact},
		r3Case{r3Args("COMMAND", "INFO", "get"), r3Shape},
		r3Case{r3Args("INFO", "keyspace"), r3Exact},
		r3Case{r3Args("HELLO", "3", "SETNAME", "again"), r3Hello},
		r3Case{r3Args("CLIENT", "GETNAME"), r3Exact},
	)
	runR3Cases(t, rc, cc, cases)

	// A pipeline switching protocols twice, in one write.
	var pipe []byte
	for _, a := range [][]string{{"GET", "nope"}, {"HELLO", "2"}, {"GET", "nope"}, {"COMMAND", "INFO", "nosuch"}, {"HELLO", "3"}, {"GET", "nope"}} {
		pipe = append(pipe, encodeCommand(a...)...)
	}
	rc.Send(pipe)
	cc.Send(pipe)
	for i, cmp := range []r3Compare{r3Exact, r3Shape, r3Exact, r3Exact, r3Hello, r3Exact} {
		if err := cmp(rc.ReadReply(), cc.ReadReply()); err != nil {
			t.Errorf("pipeline reply %d: %v", i, err)
		}
	}
}

// TestRESP3DifferentialAuth: HELLO 3 with AUTH and SETNAME under a password.
func TestRESP3DifferentialAuth(t *testing.T) {
	t.Parallel()
	ref := startR3Ref(t, "--requirepass", "pw")
	cell := startServer(t, "--requirepass", "pw", "--in-memory")
	rc, cc := ref.Raw(t), cell.Raw(t)
	runR3Cases(t, rc, cc, []r3Case{
		{r3Args("HELLO", "3"), r3Known70("HELLO <proto> AUTH", "HELLO AUTH")},
		{r3Args("HELLO", "3", "AUTH", "default", "wrong"), r3Exact},
		{r3Args("GET", "nope"), r3Exact},
		{r3Args("HELLO", "3", "AUTH", "default", "pw", "SETNAME", "me"), r3Hello},
		{r3Args("CLIENT", "GETNAME"), r3Exact},
		{r3Args("GET", "nope"), r3Exact},
		{r3Args("HELLO", "2", "AUTH", "default", "pw"), r3Shape},
		{r3Args("GET", "nope"), r3Exact},
	})
}

// TestRESP3DifferentialCluster: CLUSTER's RESP3 shapes, against a
// cluster-enabled redis-server given every slot (cellserver --cluster
// emulated). Values differ (node ids, announced addresses).
func TestRESP3DifferentialCluster(t *testing.T) {
	t.Parallel()
	ref := startR3Ref(t, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf") // in its own --dir
	cell := startServer(t, "--cluster", "emulated", "--in-memory")
	rc, cc := ref.Raw(t), cell.Raw(t)
	require.Equal(t, "+OK\r\n", string(rc.DoArgs("CLUSTER", "ADDSLOTSRANGE", "0", "16383")))
	runR3Cases(t, rc, cc, []r3Case{
		{r3Args("HELLO", "3"), r3Hello},
		{r3Args("CLUSTER", "SLOTS"), r3Shape},
		{r3Args("CLUSTER", "SHARDS"), r3Shape},
		{r3Args("CLUSTER", "INFO"), r3Verbatim("cluster_state:")},
		{r3Args("CLUSTER", "NODES"), r3Verbatim("")},
		{r3Args("CLUSTER", "MYID"), r3Shape},
		{r3Args("CLUSTER", "KEYSLOT", "{user1}:x"), r3Exact},
		{r3Args("CLUSTER", "COUNTKEYSINSLOT", "5"), r3Exact},
		{r3Args("CLUSTER", "GETKEYSINSLOT", "5", "10"), r3Exact},
	})
}

// TestGoRedisRESP3 runs cellserver's commands through go-redis with
// Protocol 3 and checks the values it decodes.
func TestGoRedisRESP3(t *testing.T) {
	t.Parallel()
	s := startServer(t, "--enable-debug-command", "yes")
	rdb := s.Client(t, func(o *redis.Options) { o.Protocol = 3 })
	ctx := ctxT(t, 30*time.Second)
	const now = int64(1_700_000_000_000_000_000)
	require.NoError(t, rdb.Do(ctx, "DEBUG", "CLOCK", "SET", now).Err())

	v, err := rdb.Do(ctx, "CL.THROTTLE", "user123", 15, 30, 60).Int64Slice()
	require.NoError(t, err)
	require.Equal(t, []int64{0, 16, 15, -1, 2}, v)
	tat, err := rdb.Get(ctx, "user123").Result()
	require.NoError(t, err)
	require.Equal(t, strconv.FormatInt(now+2e9, 10), tat)
	_, err = rdb.Get(ctx, "missing").Result()
	require.Equal(t, redis.Nil, err, "GET of an absent key is RESP3's null")
	d, err := rdb.PTTL(ctx, "user123").Result()
	require.NoError(t, err)
	require.Equal(t, 2*time.Second, d)

	info, err := rdb.Info(ctx, "server").Result()
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(info, "# Server\r\n"), "INFO is the text without verbatim's txt: prefix: %q", clip([]byte(info)))
	require.Contains(t, info, "tcp_port:"+strconv.Itoa(s.Port)+"\r\n")
	cfg, err := rdb.ConfigGet(ctx, "maxmemory").Result()
	require.NoError(t, err)
	require.Equal(t, map[string]string{"maxmemory": "0"}, cfg)

	conn := rdb.Conn()
	defer conn.Close()
	require.NoError(t, conn.ClientSetName(ctx, "resp3-conn").Err())
	ci, err := conn.ClientInfo(ctx).Result()
	require.NoError(t, err)
	require.Equal(t, 3, ci.Resp)
	require.Equal(t, "resp3-conn", ci.Name)
	hello, err := conn.Do(ctx, "HELLO").Result()
	require.NoError(t, err)
	hm, ok := hello.(map[any]any)
	require.True(t, ok, "HELLO in RESP3 is a map, got %T", hello)
	require.Equal(t, int64(3), hm["proto"])
	require.Equal(t, "standalone", hm["mode"])
	require.Equal(t, ci.ID, hm["id"])
	cmds, err := rdb.Command(ctx).Result()
	require.NoError(t, err, "go-redis parses COMMAND's RESP3 sets")
	require.Contains(t, cmds["cl.throttle"].Flags, "write")
	require.True(t, cmds["get"].ReadOnly)
}

// TestRedisCLIRESP3: redis-cli -3 and redis-benchmark -3 against cellserver.
func TestRedisCLIRESP3(t *testing.T) {
	t.Parallel()
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		t.Skip("!!! redis-cli not installed: apt-get install -y redis-tools !!! (TestRedisCLIRESP3 NOT RUN)")
	}
	s := startServer(t, "--enable-debug-command", "yes")
	port := strconv.Itoa(s.Port)
	run := func(bin string, args ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		out, err := exec.CommandContext(ctx, bin, append([]string{"-h", "127.0.0.1", "-p", port, "-3"}, args...)...).CombinedOutput()
		require.NoError(t, err, "%s %q: %s", bin, args, out)
		return string(out)
	}
	assert.Equal(t, "OK\n", run(cli, "DEBUG", "CLOCK", "SET", "1700000000000000000"))
	assert.Equal(t, "PONG\n", run(cli, "PING"))
	assert.Equal(t, "0\n6\n5\n-1\n6\n", run(cli, "CL.THROTTLE", "k", "5", "10", "60"))
	assert.Equal(t, "1) (integer) 0\n2) (integer) 6\n3) (integer) 4\n4) (integer) -1\n5) (integer) 12\n",
		run(cli, "--no-raw", "CL.THROTTLE", "k", "5", "10", "60"))
	assert.Equal(t, "(nil)\n", run(cli, "--no-raw", "GET", "missing"), "RESP3's null")
	assert.Equal(t, "1# \"maxmemory\" => \"0\"\n", run(cli, "--no-raw", "CONFIG", "GET", "maxmemory"), "redis-cli shows a map")
	assert.Contains(t, run(cli, "--no-raw", "HELLO", "3"), "3# \"proto\" => (integer) 3\n")
	assert.Contains(t, run(cli, "CLIENT", "INFO"), " resp=3 ")
	assert.True(t, strings.HasPrefix(run(cli, "INFO", "server"), "# Server"))

	bench, err := exec.LookPath("redis-benchmark")
	if err != nil {
		t.Log("!!! redis-benchmark not installed: its RESP3 run NOT DONE !!!")
		return
	}
	rdb := s.Client(t)
	ctx := ctxT(t, 30*time.Second)
	hellos := func() int {
		stats, err := rdb.Info(ctx, "commandstats").Result()
		require.NoError(t, err)
		m := regexp.MustCompile(`cmdstat_hello:calls=(\d+),`).FindStringSubmatch(stats)
		require.NotNil(t, m, stats)
		n, _ := strconv.Atoi(m[1])
		return n
	}
	before := hellos()
	out := run(bench, "-n", "1000", "-c", "4", "-q", "CL.THROTTLE", "bench:__rand_int__", "100", "10", "60")
	assert.Contains(t, out, "CL.THROTTLE bench:__rand_int__ 100 10 60: ")
	assert.Contains(t, out, " requests per second")
	assert.NotContains(t, strings.ToLower(out), "error")
	assert.GreaterOrEqual(t, hellos()-before, 4, "each of redis-benchmark's 4 clients sent HELLO 3")
	// Every one of 1000 calls on one key was counted.
	run(bench, "-n", "1000", "-c", "4", "-q", "CL.THROTTLE", "one", "2000", "10", "60")
	assert.Equal(t, "0\n2001\n1000\n-1\n6006\n", run(cli, "CL.THROTTLE", "one", "2000", "10", "60"))
}

// TestNodeRedisRESP3: node-redis 6 (npm redis, pinned in tests/noderedis)
// connects with its defaults, which speak RESP3 and do not fall back to
// RESP2: before cellserver had RESP3 it never connected.
func TestNodeRedisRESP3(t *testing.T) {
	t.Parallel()
	node, dir := nodePackage(t, "noderedis")
	s := startServer(t, "--in-memory")
	cfg := fmt.Sprintf(`{"url":"redis://%s","key":"nr:k","calls":3}`, s.Addr)
	out, errOut, code := clRun(t, 60*time.Second, dir, node, "throttle.js", cfg)
	require.Equal(t, 0, code, "node throttle.js: stdout:\n%s\nstderr:\n%s", out, errOut)
	var res struct {
		Throttle   [][]int64      `json:"throttle"`
		Get        *string        `json:"get"`
		Missing    *string        `json:"missing"`
		PTTL       int64          `json:"pttl"`
		ClientInfo string         `json:"clientInfo"`
		Hello      map[string]any `json:"hello"`
		Errors     []string       `json:"errors"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &res), "throttle.js printed:\n%s\nstderr:\n%s", out, errOut)
	require.Empty(t, res.Errors)
	require.Equal(t, [][]int64{{0, 16, 15, -1, 2}, {0, 16, 14, -1, 4}, {0, 16, 13, -1, 6}}, res.Throttle)
	require.NotNil(t, res.Get)
	_, err := strconv.ParseUint(*res.Get, 10, 64)
	require.NoError(t, err, "GET is the TAT: %q", *res.Get)
	require.Nil(t, res.Missing, "GET of an absent key is null")
	require.True(t, res.PTTL > 5000 && res.PTTL <= 6000, "PTTL %d", res.PTTL)
	require.Contains(t, res.ClientInfo, " resp=3 ")
	require.Contains(t, res.ClientInfo, " lib-name=node-redis ")
	require.Equal(t, float64(3), res.Hello["proto"], "node-redis decoded HELLO's map: %v", res.Hello)
	require.Equal(t, "standalone", res.Hello["mode"])
}
