package tests

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestGoRedisCommands exercises single commands through go-redis v9 with its
// default options (HELLO 3: the connection speaks RESP3).
func TestGoRedisCommands(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	rdb := s.Client(t)
	ctx := ctxT(t, 60*time.Second)

	t.Run("ping echo", func(t *testing.T) {
		require.Equal(t, "PONG", rdb.Ping(ctx).Val())
		v, err := rdb.Echo(ctx, "hello world").Result()
		require.NoError(t, err)
		require.Equal(t, "hello world", v)
		v, err = rdb.Do(ctx, "PING", "msg").Text()
		require.NoError(t, err)
		require.Equal(t, "msg", v)
	})

	t.Run("throttle and key state", func(t *testing.T) {
		require.NoError(t, rdb.FlushDB(ctx).Err())
		before := time.Now().UnixNano()
		v, err := rdb.Do(ctx, "CL.THROTTLE", "user123", 15, 30, 60).Int64Slice()
		require.NoError(t, err)
		require.Equal(t, []int64{0, 16, 15, -1, 2}, v)
		v, err = rdb.Do(ctx, "cl.throttle", "user123", "15", "30", "60", "1").Int64Slice()
		require.NoError(t, err)
		require.Equal(t, []int64{0, 16, 14, -1, 4}, v)
		after := time.Now().UnixNano()

		tat, err := rdb.Get(ctx, "user123").Result()
		require.NoError(t, err)
		n, err := strconv.ParseUint(tat, 10, 64)
		require.NoError(t, err, "GET must return the TAT as a decimal u64, got %q", tat)
		// Two calls of T = 2 s: TAT = first call's now + 4 s.
		require.GreaterOrEqual(t, n, uint64(before+4e9))
		require.LessOrEqual(t, n, uint64(after+4e9))

		pttl, err := rdb.Do(ctx, "PTTL", "user123").Int64()
		require.NoError(t, err)
		require.True(t, pttl > 3000 && pttl <= 4000, "PTTL %d, want (3000,4000]", pttl)
		ttl, err := rdb.TTL(ctx, "user123").Result()
		require.NoError(t, err)
		require.Contains(t, []time.Duration{3 * time.Second, 4 * time.Second}, ttl, "TTL rounds PTTL to whole seconds")
		d, err := rdb.PTTL(ctx, "user123").Result()
		require.NoError(t, err)
		require.True(t, d > 3*time.Second && d <= 4*time.Second, "PTTL %v", d)

		require.Equal(t, "string", rdb.Type(ctx, "user123").Val())
		require.Equal(t, "none", rdb.Type(ctx, "missing").Val())
		require.Equal(t, int64(1), rdb.Exists(ctx, "user123").Val())
		require.Equal(t, int64(2), rdb.Exists(ctx, "user123", "missing", "user123").Val())
		require.Equal(t, int64(1), rdb.DBSize(ctx).Val())
		require.Equal(t, []string{"user123"}, rdb.Keys(ctx, "*").Val())
		require.Equal(t, []string{"user123"}, rdb.Keys(ctx, "user1?3").Val())
		require.Empty(t, rdb.Keys(ctx, "x*").Val())

		require.Equal(t, int64(1), rdb.Del(ctx, "user123", "missing").Val())
		require.Equal(t, int64(0), rdb.Exists(ctx, "user123").Val())
		_, err = rdb.Get(ctx, "user123").Result()
		require.Equal(t, redis.Nil, err)
		pttl, err = rdb.Do(ctx, "PTTL", "user123").Int64()
		require.NoError(t, err)
		require.Equal(t, int64(-2), pttl)
		ttlN, err := rdb.Do(ctx, "TTL", "user123").Int64()
		require.NoError(t, err)
		require.Equal(t, int64(-2), ttlN)
		// DEL reset the limiter: the next call is a fresh key.
		v, err = rdb.Do(ctx, "CL.THROTTLE", "user123", 15, 30, 60).Int64Slice()
		require.NoError(t, err)
		require.Equal(t, []int64{0, 16, 15, -1, 2}, v)
		require.Equal(t, int64(1), rdb.Unlink(ctx, "user123").Val())
	})

	t.Run("scan 1000 keys", func(t *testing.T) {
		require.NoError(t, rdb.FlushDB(ctx).Err())
		want := map[string]bool{}
		_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i := 0; i < 1000; i++ {
				k := fmt.Sprintf("scan:%04d", i)
				want[k] = true
				p.Do(ctx, "CL.THROTTLE", k, 10, 1, 3600)
			}
			for i := 0; i < 300; i++ {
				p.Do(ctx, "CL.THROTTLE", fmt.Sprintf("other:%d", i), 10, 1, 3600)
			}
			return nil
		})
		require.NoError(t, err)
		require.Equal(t, int64(1300), rdb.DBSize(ctx).Val())

		for _, count := range []int64{1, 7, 100, 5000} {
			got := map[string]int{}
			var cursor uint64
			calls := 0
			for {
				keys, next, err := rdb.Scan(ctx, cursor, "scan:*", count).Result()
				require.NoError(t, err)
				for _, k := range keys {
					got[k]++
				}
				calls++
				require.Less(t, calls, 10000, "SCAN does not terminate")
				if next == 0 {
					break
				}
				cursor = next
			}
			require.Len(t, got, len(want), "COUNT %d: SCAN MATCH scan:* must return every key", count)
			for k := range got {
				require.True(t, want[k], "COUNT %d: unexpected key %q", count, k)
			}
		}
		// The iterator helper and no MATCH.
		all := map[string]bool{}
		it := rdb.Scan(ctx, 0, "", 50).Iterator()
		for it.Next(ctx) {
			all[it.Val()] = true
		}
		require.NoError(t, it.Err())
		require.Len(t, all, 1300)
		// KEYS agrees.
		keys := rdb.Keys(ctx, "scan:*").Val()
		require.Len(t, keys, 1000)
		// SCAN errors as Redis 7.
		require.EqualError(t, rdb.Do(ctx, "SCAN", "abc").Err(), "ERR invalid cursor")
		require.EqualError(t, rdb.Do(ctx, "SCAN", "0", "COUNT", "0").Err(), "ERR syntax error")
		require.EqualError(t, rdb.Do(ctx, "SCAN", "0", "COUNT", "x").Err(), "ERR value is not an integer or out of range")
		require.EqualError(t, rdb.Do(ctx, "SCAN", "0", "MATCH").Err(), "ERR syntax error")

		require.NoError(t, rdb.FlushDB(ctx).Err())
		require.Equal(t, int64(0), rdb.DBSize(ctx).Val())
		require.Empty(t, rdb.Keys(ctx, "*").Val())
	})

	t.Run("time info config", func(t *testing.T) {
		tm, err := rdb.Time(ctx).Result()
		require.NoError(t, err)
		require.WithinDuration(t, time.Now(), tm, 5*time.Second)

		info, err := rdb.Info(ctx).Result()
		require.NoError(t, err)
		for _, want := range []string{"# Server\r\n", "redis_version:", "# Clients\r\n", "connected_clients:", "# Persistence\r\n", "loading:0\r\n", "# Keyspace\r\n"} {
			require.Contains(t, info, want)
		}
		server, err := rdb.Info(ctx, "server").Result()
		require.NoError(t, err)
		require.True(t, strings.HasPrefix(server, "# Server\r\n"), "INFO server: %q", server)
		require.Contains(t, server, "tcp_port:"+strconv.Itoa(s.Port)+"\r\n")
		require.NotContains(t, server, "# Clients")
		persist, err := rdb.Info(ctx, "persistence").Result()
		require.NoError(t, err)
		require.Contains(t, persist, "loading:0\r\n")
		m, err := rdb.InfoMap(ctx, "server", "clients").Result()
		require.NoError(t, err)
		require.NotEmpty(t, m["Server"]["redis_version"])
		require.NotEmpty(t, m["Clients"]["connected_clients"])

		cfg, err := rdb.ConfigGet(ctx, "maxmemory").Result()
		require.NoError(t, err)
		require.Equal(t, map[string]string{"maxmemory": "0"}, cfg)
		cfg, err = rdb.ConfigGet(ctx, "port").Result()
		require.NoError(t, err)
		require.Equal(t, map[string]string{"port": strconv.Itoa(s.Port)}, cfg)
	})

	t.Run("client commands on one connection", func(t *testing.T) {
		conn := rdb.Conn()
		defer conn.Close()
		_, err := conn.ClientGetName(ctx).Result()
		require.Equal(t, redis.Nil, err, "a fresh connection has no name")
		require.NoError(t, conn.ClientSetName(ctx, "e2e-conn").Err())
		name, err := conn.ClientGetName(ctx).Result()
		require.NoError(t, err)
		require.Equal(t, "e2e-conn", name)
		require.EqualError(t, conn.Do(ctx, "CLIENT", "SETNAME", "has space").Err(),
			"ERR Client names cannot contain spaces, newlines or special characters.")

		id, err := conn.ClientID(ctx).Result()
		require.NoError(t, err)
		require.Positive(t, id)

		ci, err := conn.ClientInfo(ctx).Result()
		require.NoError(t, err, "go-redis must parse CLIENT INFO")
		require.Equal(t, id, ci.ID)
		require.Equal(t, "e2e-conn", ci.Name)
		require.True(t, strings.HasPrefix(ci.LibName, "go-redis("), "CLIENT SETINFO lib-name from go-redis, got %q", ci.LibName)
		require.Equal(t, 3, rdb.Options().Protocol, "the client asks for RESP3 (HELLO 3) by default")
		require.Equal(t, 3, ci.Resp, "cellserver accepts HELLO 3: the connection speaks RESP3")

		list, err := conn.ClientList(ctx).Result()
		require.NoError(t, err)
		require.Contains(t, list, fmt.Sprintf("id=%d ", id))
		require.Contains(t, list, " name=e2e-conn ")

		require.Equal(t, "OK", conn.Select(ctx, 0).Val())
		require.EqualError(t, conn.Select(ctx, 1).Err(), "ERR DB index is out of range")
		require.EqualError(t, conn.Do(ctx, "SELECT", "x").Err(), "ERR value is not an integer or out of range")
		require.Equal(t, "PONG", conn.Ping(ctx).Val(), "connection still usable")
	})

	t.Run("COMMAND", func(t *testing.T) {
		cmds, err := rdb.Command(ctx).Result()
		require.NoError(t, err, "go-redis must parse COMMAND")
		ct := cmds["cl.throttle"]
		require.NotNil(t, ct, "COMMAND must list cl.throttle")
		assert.Equal(t, "cl.throttle", ct.Name)
		assert.Equal(t, int8(-1), ct.Arity)
		assert.Equal(t, int8(1), ct.FirstKeyPos)
		assert.Equal(t, int8(1), ct.LastKeyPos)
		assert.Equal(t, int8(1), ct.StepCount)
		assert.Contains(t, ct.Flags, "write")
		for _, name := range []string{"get", "del", "exists", "pttl", "ping", "scan", "info"} {
			assert.NotNil(t, cmds[name], "COMMAND must list %s", name)
		}
		assert.Equal(t, int8(1), cmds["get"].FirstKeyPos)
		assert.True(t, cmds["get"].ReadOnly)
		n, err := rdb.Do(ctx, "COMMAND", "COUNT").Int64()
		require.NoError(t, err)
		assert.Equal(t, int64(len(cmds)), n)
		keys, err := rdb.CommandGetKeys(ctx, "CL.THROTTLE", "mykey", 1, 2, 3).Result()
		require.NoError(t, err)
		assert.Equal(t, []string{"mykey"}, keys)
	})
}

// expect is what one pipelined command must return.
type expect struct {
	kind byte // '+' status, '$' bulk, '_' nil bulk, ':' int, '*' int array, '-' error
	s    string
	n    int64
	arr  []int64
}

func (e expect) resp() []byte {
	switch e.kind {
	case '+':
		return []byte("+" + e.s + "\r\n")
	case '$':
		return respBulk(e.s)
	case '_':
		return []byte("$-1\r\n")
	case ':':
		return fmt.Appendf(nil, ":%d\r\n", e.n)
	case '*':
		return respInts(e.arr...)
	}
	return respErr(e.s)
}

// mixedPipeline builds n commands and the reply each must get, for a server
// whose clock is frozen at now. Every key is limited by "4 1 1" (T = 1 s,
// limit 5) and counts calls since its last DEL.
func mixedPipeline(n int, now int64, seed uint64) ([][]string, []expect) {
	rng := rand.New(rand.NewPCG(seed, 42))
	calls := map[string]int64{} // allowed calls since the key was (re)created
	var cmds [][]string
	var want []expect
	for len(cmds) < n {
		k := fmt.Sprintf("pipe:%d", rng.IntN(300))
		c := calls[k]
		switch r := rng.IntN(100); {
		case r < 40:
			cmds = append(cmds, []string{"CL.THROTTLE", k, "4", "1", "1"})
			if c < 5 {
				c++
				calls[k] = c
				want = append(want, expect{kind: '*', arr: []int64{0, 5, 5 - c, -1, c}})
			} else {
				want = append(want, expect{kind: '*', arr: []int64{1, 5, 0, 1, 5}})
			}
		case r < 50:
			cmds = append(cmds, []string{"GET", k})
			if c == 0 {
				want = append(want, expect{kind: '_'})
			} else {
				want = append(want, expect{kind: '$', s: strconv.FormatInt(now+c*1e9, 10)})
			}
		case r < 60:
			cmds = append(cmds, []string{"PTTL", k})
			if c == 0 {
				want = append(want, expect{kind: ':', n: -2})
			} else {
				want = append(want, expect{kind: ':', n: c * 1000})
			}
		case r < 68:
			cmds = append(cmds, []string{"EXISTS", k})
			want = append(want, expect{kind: ':', n: min(c, 1)})
		case r < 74:
			cmds = append(cmds, []string{"DEL", k})
			want = append(want, expect{kind: ':', n: min(c, 1)})
			delete(calls, k)
		case r < 80:
			cmds = append(cmds, []string{"PING"})
			want = append(want, expect{kind: '+', s: "PONG"})
		case r < 86:
			msg := fmt.Sprintf("echo-%d", len(cmds))
			cmds = append(cmds, []string{"ECHO", msg})
			want = append(want, expect{kind: '$', s: msg})
		case r < 92:
			cmds = append(cmds, []string{"INCR", k})
			want = append(want, expect{kind: '-', s: "ERR unknown command 'INCR', with args beginning with: '" + k + "' "})
		case r < 93:
			cmds = append(cmds, []string{"GET"})
			want = append(want, expect{kind: '-', s: "ERR wrong number of arguments for 'get' command"})
		case r < 94:
			// Non-keyed commands must see every keyed command before them.
			cmds = append(cmds, []string{"DBSIZE"})
			n := int64(0)
			for _, v := range calls {
				if v > 0 {
					n++
				}
			}
			want = append(want, expect{kind: ':', n: n})
		case r < 95:
			if rng.IntN(10) == 0 {
				cmds = append(cmds, []string{"FLUSHALL"})
				want = append(want, expect{kind: '+', s: "OK"})
				clear(calls)
			} else {
				cmds = append(cmds, []string{"TTL", k})
				want = append(want, expect{kind: ':', n: map[bool]int64{true: -2, false: c}[c == 0]})
			}
		case r < 98:
			cmds = append(cmds, []string{"CL.THROTTLE", k, "4", "0", "1"})
			want = append(want, expect{kind: '-', s: "Cell error: Store error: Zero rates are not supported"})
		default:
			// A peek: quantity 0 never changes the reply's remaining.
			cmds = append(cmds, []string{"CL.THROTTLE", k, "4", "1", "1", "0"})
			if c == 0 {
				// Fresh-key peek stores now with a 0 ms TTL: the key exists
				// (PTTL 0) until the frozen clock moves.
				want = append(want, expect{kind: '*', arr: []int64{0, 5, 5, -1, 0}})
				calls[k] = 0
				cmds = append(cmds, []string{"DEL", k})
				want = append(want, expect{kind: ':', n: 1})
			} else {
				want = append(want, expect{kind: '*', arr: []int64{0, 5, 5 - c, -1, c}})
			}
		}
	}
	return cmds, want
}

// TestGoRedisBigPipeline sends 10,000 mixed commands in one go-redis
// pipeline and checks every reply at its position; then the same over raw
// RESP, byte for byte.
func TestGoRedisBigPipeline(t *testing.T) {
	t.Parallel()
	s := startServer(t, "--enable-debug-command", "yes")
	rdb := s.Client(t)
	ctx := ctxT(t, 60*time.Second)
	const now = int64(1700000000123456789)
	require.NoError(t, rdb.Do(ctx, "DEBUG", "CLOCK", "SET", now).Err())

	cmds, want := mixedPipeline(10000, now, 1)
	pipe := rdb.Pipeline()
	results := make([]*redis.Cmd, len(cmds))
	for i, c := range cmds {
		results[i] = pipe.Do(ctx, toAny(c)...)
	}
	_, err := pipe.Exec(ctx)
	if err != nil {
		require.True(t, isRedisReplyError(err), "pipeline transport error: %v", err)
	}
	bad := 0
	for i, r := range results {
		if msg := checkExpect(r, want[i]); msg != "" {
			bad++
			if bad <= 20 {
				t.Errorf("pipeline position %d %q: %s", i, cmds[i], msg)
			}
		}
	}
	require.Zero(t, bad, "%d of %d pipelined replies wrong", bad, len(cmds))

	// Same commands over raw TCP, written as one buffer, read back byte-exact.
	require.NoError(t, rdb.FlushAll(ctx).Err())
	cmds, want = mixedPipeline(10000, now, 2)
	c := s.Raw(t)
	var buf []byte
	for _, a := range cmds {
		buf = append(buf, encodeCommand(a...)...)
	}
	go func() { _, _ = c.nc.Write(buf) }() // the reader must drain replies meanwhile
	for i := range cmds {
		got := c.ReadReply()
		if !bytes.Equal(got, want[i].resp()) {
			bad++
			if bad <= 20 {
				t.Errorf("raw pipeline position %d %q: got %q, want %q", i, cmds[i], got, want[i].resp())
			}
		}
	}
	require.Zero(t, bad)
}

func checkExpect(r *redis.Cmd, e expect) string {
	v, err := r.Result()
	switch e.kind {
	case '-':
		if err == nil || err.Error() != e.s {
			return fmt.Sprintf("got %v, %v; want error %q", v, err, e.s)
		}
	case '_':
		if err != redis.Nil {
			return fmt.Sprintf("got %v, %v; want nil", v, err)
		}
	case '+', '$':
		if err != nil || v != e.s {
			return fmt.Sprintf("got %#v, %v; want %q", v, err, e.s)
		}
	case ':':
		if err != nil || v != e.n {
			return fmt.Sprintf("got %#v, %v; want %d", v, err, e.n)
		}
	case '*':
		ints, ok := asInts(v)
		if err != nil || !ok || !slices.Equal(ints, e.arr) {
			return fmt.Sprintf("got %v, %v; want %v", v, err, e.arr)
		}
	}
	return ""
}

// TestRedisCLI runs the stock redis-cli against cellserver.
func TestRedisCLI(t *testing.T) {
	t.Parallel()
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		t.Skip("!!! redis-cli not installed: apt-get install -y redis-tools !!! (TestRedisCLI NOT RUN)")
	}
	// A frozen clock: replies must not depend on how long redis-cli takes
	// to start under load.
	s := startServer(t, "--enable-debug-command", "yes")
	port := strconv.Itoa(s.Port)
	run := func(args ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, cli, append([]string{"-h", "127.0.0.1", "-p", port}, args...)...)
		out, err := cmd.Output()
		if err != nil {
			var stderr []byte
			if ee, ok := err.(*exec.ExitError); ok {
				stderr = ee.Stderr
			}
			// redis-cli exits 1 on error replies in newer versions; the
			// output is what matters.
			t.Logf("redis-cli %q: %v %s", args, err, stderr)
		}
		return string(out)
	}

	assert.Equal(t, "OK\n", run("DEBUG", "CLOCK", "SET", strconv.FormatInt(time.Now().UnixNano(), 10)))
	assert.Equal(t, "0\n16\n15\n-1\n2\n", run("CL.THROTTLE", "user123", "15", "30", "60"))
	// quantity > limit: limited, retry -1, remaining/reset describe the current state.
	assert.Equal(t, "1\n16\n15\n-1\n2\n", run("cl.throttle", "user123", "15", "30", "60", "17"))
	assert.Equal(t, "PONG\n", run("PING"))
	assert.Equal(t, "ERR unknown command 'foo', with args beginning with: 'a' 'b' ",
		strings.TrimRight(run("foo", "a", "b"), "\n"))
	assert.Equal(t, "Cell error: Store error: Zero rates are not supported",
		strings.TrimRight(run("CL.THROTTLE", "k", "1", "0", "1"), "\n"))

	run("DEL", "user123")
	for i := 0; i < 25; i++ {
		run("CL.THROTTLE", fmt.Sprintf("cli:%d", i), "5", "1", "60")
	}
	scanned := strings.Fields(run("--scan"))
	sort.Strings(scanned)
	var want []string
	for i := 0; i < 25; i++ {
		want = append(want, fmt.Sprintf("cli:%d", i))
	}
	sort.Strings(want)
	assert.Equal(t, want, scanned, "redis-cli --scan")
	patterned := strings.Fields(run("--scan", "--pattern", "cli:1*"))
	assert.Len(t, patterned, 11, "redis-cli --scan --pattern cli:1*: %q", patterned)

	info := run("INFO", "server")
	assert.True(t, strings.HasPrefix(info, "# Server\n") || strings.HasPrefix(info, "# Server\r\n"), "INFO server: %q", info)
	assert.Contains(t, info, "redis_version:")
	assert.Contains(t, info, "tcp_port:"+port)
	assert.Equal(t, "25\n", run("DBSIZE"))
	assert.Equal(t, "OK\n", run("FLUSHALL"))
	assert.Equal(t, "0\n", run("DBSIZE"))
}
