package tests

// MULTI/EXEC/DISCARD/WATCH/UNWATCH end to end: the real binary, real
// clients (go-redis TxPipeline, redis-py's default pipeline(), ioredis and
// node-redis multi()), and the isolation EXEC promises across shards.

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cellserver/cellserver/cluster"
)

// txShards is the shard count the tests start servers with, so that keys
// of different shards are known: shard of slot s is s*txShards/16384.
const txShards = 8

// txKeys returns n keys of n different shards of a server started with
// --shards txShards.
func txKeys(t *testing.T, prefix string, n int) []string {
	t.Helper()
	seen := map[int]bool{}
	var keys []string
	for i := 0; len(keys) < n; i++ {
		require.Less(t, i, 100000)
		k := fmt.Sprintf("%s%d", prefix, i)
		sh := cluster.KeySlot([]byte(k)) * txShards / cluster.SlotCount
		if !seen[sh] {
			seen[sh] = true
			keys = append(keys, k)
		}
	}
	return keys
}

func txServer(t *testing.T, extra ...string) *server {
	return startServer(t, append([]string{"--in-memory", "--shards", strconv.Itoa(txShards), "--enable-debug-command", "yes"}, extra...)...)
}

// The "Done when" test: many clients charge two keys of different shards
// in one transaction while others read both in one: no reader ever sees
// one charged and not the other, and every charge is counted.
func TestTxIsolatedAcrossShards(t *testing.T) {
	t.Parallel()
	s := txServer(t)
	ctx := ctxT(t, 120*time.Second)
	keys := txKeys(t, "iso:", 2)
	a, b := keys[0], keys[1]
	// Frozen: every transaction charges both keys at one instant, so both
	// TATs move in step (a charge adds 60 s; the burst admits them all).
	admin := s.Client(t)
	require.NoError(t, admin.Do(ctx, "DEBUG", "CLOCK", "SET", strconv.FormatInt(time.Now().UnixNano(), 10)).Err())
	const writers, readers, perWriter = 6, 4, 150
	var wg sync.WaitGroup
	for range writers {
		c := s.Client(t)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range perWriter {
				cmds, err := c.TxPipelined(ctx, func(p redis.Pipeliner) error {
					p.Do(ctx, "CL.THROTTLE", a, 100000, 1, 60)
					p.Do(ctx, "CL.THROTTLE", b, 100000, 1, 60)
					return nil
				})
				if !assert.NoError(t, err) {
					return
				}
				for _, cmd := range cmds {
					r, err := cmd.(*redis.Cmd).Int64Slice()
					if !assert.NoError(t, err) || !assert.Len(t, r, 5) || !assert.Equal(t, int64(0), r[0], "allowed") {
						return
					}
				}
			}
		}()
	}
	stop := make(chan struct{})
	var rg sync.WaitGroup
	var reads, charged int64
	var mu sync.Mutex
	for range readers {
		c := s.Client(t)
		rg.Add(1)
		go func() {
			defer rg.Done()
			n, seen := int64(0), int64(0)
			defer func() { mu.Lock(); reads += n; charged += seen; mu.Unlock() }()
			for {
				select {
				case <-stop:
					return
				default:
				}
				var ga, gb *redis.StringCmd
				_, err := c.TxPipelined(ctx, func(p redis.Pipeliner) error {
					ga, gb = p.Get(ctx, a), p.Get(ctx, b)
					return nil
				})
				if err != nil && err != redis.Nil {
					assert.NoError(t, err)
					return
				}
				if !assert.Equal(t, ga.Val(), gb.Val(), "a reader saw one key charged and not the other") {
					return
				}
				n++
				if ga.Val() != "" {
					seen++
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	rg.Wait()
	t.Logf("%d reads, %d of them after the first charge", reads, charged)
	assert.Positive(t, reads)
	total := int64(writers * perWriter)
	for _, k := range keys {
		r, err := admin.Do(ctx, "CL.THROTTLE", k, 100000, 1, 60, 0).Int64Slice()
		require.NoError(t, err)
		assert.Equal(t, 100001-total, r[2], "%s charged once per transaction", k)
	}
	ta, tb := admin.Get(ctx, a).Val(), admin.Get(ctx, b).Val()
	assert.Equal(t, ta, tb)
}

// go-redis TxPipeline: replies in order, a queueing error runs nothing, a
// watched key charged by another client aborts the transaction.
func TestTxGoRedis(t *testing.T) {
	t.Parallel()
	s := txServer(t)
	ctx := ctxT(t, 30*time.Second)
	c, other := s.Client(t), s.Client(t)
	keys := txKeys(t, "gr:", 2)

	p := c.TxPipeline()
	t1 := p.Do(ctx, "CL.THROTTLE", keys[0], 15, 30, 60)
	t2 := p.Do(ctx, "CL.THROTTLE", keys[1], 15, 30, 60)
	t3 := p.Do(ctx, "CL.THROTTLE", keys[0], 15, 30, 60)
	_, err := p.Exec(ctx)
	require.NoError(t, err)
	for i, x := range []struct {
		cmd  *redis.Cmd
		want []int64
	}{{t1, []int64{0, 16, 15, -1, 2}}, {t2, []int64{0, 16, 15, -1, 2}}, {t3, []int64{0, 16, 14, -1, 4}}} {
		r, err := x.cmd.Int64Slice()
		require.NoError(t, err, "command %d", i)
		assert.Equal(t, x.want, r, "command %d", i)
	}

	// A queueing error: EXECABORT, nothing charged.
	p = c.TxPipeline()
	p.Do(ctx, "CL.THROTTLE", "gr:bad", 15, 30, 60)
	p.Do(ctx, "GET") // wrong arity
	_, err = p.Exec(ctx)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "EXECABORT Transaction discarded because of previous errors.")
	assert.Equal(t, int64(0), c.Exists(ctx, "gr:bad").Val(), "a refused transaction charges nothing")

	// WATCH, then another client's allowed CL.THROTTLE: the transaction fails.
	err = c.Watch(ctx, func(tx *redis.Tx) error {
		require.NoError(t, other.Do(ctx, "CL.THROTTLE", "gr:w", 15, 30, 60).Err())
		_, err := tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.Do(ctx, "CL.THROTTLE", "gr:w", 15, 30, 60)
			return nil
		})
		return err
	}, "gr:w")
	assert.Equal(t, redis.TxFailedErr, err)
	r, err := other.Do(ctx, "CL.THROTTLE", "gr:w", 15, 30, 60, 0).Int64Slice()
	require.NoError(t, err)
	assert.Equal(t, int64(15), r[2], "charged by the other client only")

	// A denied CL.THROTTLE changes nothing: the transaction runs.
	for range 16 {
		other.Do(ctx, "CL.THROTTLE", "gr:d", 15, 1, 3600)
	}
	err = c.Watch(ctx, func(tx *redis.Tx) error {
		r, err := other.Do(ctx, "CL.THROTTLE", "gr:d", 15, 1, 3600).Int64Slice()
		require.NoError(t, err)
		require.Equal(t, int64(1), r[0], "denied")
		_, err = tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.Do(ctx, "PING")
			return nil
		})
		return err
	}, "gr:d")
	assert.NoError(t, err)
}

// What makes a watched key changed: DEL, expiry, FLUSHALL, CL.RESET; raw
// bytes, so the null array itself is checked.
func TestTxWatchedKeyChanges(t *testing.T) {
	t.Parallel()
	s := txServer(t)
	throttle := func(k string) []byte { return encodeCommand("CL.THROTTLE", k, "15", "30", "60") }
	for _, tc := range []struct {
		name   string
		change func(o *rawConn, k string)
	}{
		{"throttle", func(o *rawConn, k string) { o.Do(throttle(k)) }},
		{"del", func(o *rawConn, k string) { o.DoArgs("DEL", k) }},
		{"cl.reset", func(o *rawConn, k string) { o.DoArgs("CL.RESET", k) }},
		{"flushall", func(o *rawConn, k string) { o.DoArgs("FLUSHALL") }},
		{"expiry", func(o *rawConn, k string) {
			o.DoArgs("DEBUG", "CLOCK", "SET", strconv.FormatInt(time.Now().Add(time.Hour).UnixNano(), 10))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, o := s.Raw(t), s.Raw(t)
			k := "wk:" + tc.name
			o.DoArgs("DEBUG", "CLOCK", "REAL")
			require.Equal(t, "*5\r\n:0\r\n", string(o.Do(throttle(k))[:8]), "allowed")
			require.Equal(t, "+OK\r\n", string(c.DoArgs("WATCH", k)))
			tc.change(o, k)
			require.Equal(t, "+OK\r\n", string(c.DoArgs("MULTI")))
			require.Equal(t, "+QUEUED\r\n", string(c.Do(throttle(k+":x"))))
			assert.Equal(t, "*-1\r\n", string(c.DoArgs("EXEC")))
			assert.Equal(t, ":0\r\n", string(c.DoArgs("EXISTS", k+":x")), "the aborted transaction ran nothing")
			o.DoArgs("DEBUG", "CLOCK", "REAL")
		})
	}
	// RESP3: the null.
	c, o := s.Raw(t), s.Raw(t)
	c.DoArgs("HELLO", "3")
	c.DoArgs("WATCH", "wk:resp3")
	o.Do(throttle("wk:resp3"))
	c.DoArgs("MULTI")
	c.DoArgs("PING")
	assert.Equal(t, "_\r\n", string(c.DoArgs("EXEC")))
}

// Cluster mode: a transaction's keys share a slot.
func TestTxCrossSlot(t *testing.T) {
	t.Parallel()
	s := startServer(t, "--cluster", "emulated", "--in-memory")
	c := s.Raw(t)
	c.DoArgs("MULTI")
	assert.Equal(t, "+QUEUED\r\n", string(c.DoArgs("CL.THROTTLE", "x", "15", "30", "60")))
	assert.Equal(t, "+QUEUED\r\n", string(c.DoArgs("CL.THROTTLE", "y", "15", "30", "60")))
	assert.Equal(t, "-CROSSSLOT Keys in request don't hash to the same slot\r\n", string(c.DoArgs("EXEC")))
	assert.Equal(t, ":0\r\n", string(c.DoArgs("EXISTS", "x")))
	c.DoArgs("MULTI")
	c.DoArgs("CL.THROTTLE", "{u}x", "15", "30", "60")
	c.DoArgs("CL.THROTTLE", "{u}y", "15", "30", "60")
	assert.Equal(t, "*2\r\n*5\r\n:0\r\n:16\r\n:15\r\n:-1\r\n:2\r\n*5\r\n:0\r\n:16\r\n:15\r\n:-1\r\n:2\r\n", string(c.DoArgs("EXEC")))
}

// The transaction commands' replies, byte for byte against a real
// redis-server, in RESP2 and RESP3 (commands every server has).
func TestTxDifferential(t *testing.T) {
	t.Parallel()
	ref := startRedis(t)
	s := txServer(t)
	cases := [][][]string{
		{{"EXEC"}}, {{"DISCARD"}}, {{"UNWATCH"}}, {{"WATCH"}},
		{{"MULTI"}, {"MULTI"}, {"PING"}, {"EXEC"}},
		{{"MULTI"}, {"WATCH", "x"}, {"PING"}, {"EXEC"}},
		{{"MULTI"}, {"NOPE", "x"}, {"PING"}, {"EXEC"}},
		{{"MULTI"}, {"GET"}, {"PING"}, {"EXEC"}},
		{{"MULTI"}, {"EXEC"}},
		{{"MULTI"}, {"DISCARD"}, {"EXEC"}},
		{{"WATCH", "w"}, {"MULTI"}, {"MULTI"}, {"EXEC"}},
		{{"MULTI"}, {"EXEC", "x"}, {"EXEC"}},
		{{"MULTI"}, {"DISCARD", "x"}, {"EXEC"}},
		{{"MULTI", "x"}, {"EXEC"}},
		{{"MULTI"}, {"CLIENT", "NOSUCH"}, {"EXEC"}},
		{{"MULTI"}, {"NOPE"}, {"EXEC"}, {"EXEC"}},
		{{"MULTI"}, {"NOPE"}, {"DISCARD"}},
		{{"MULTI"}, {"PING"}, {"ECHO", "x"}, {"DEL", "dk"}, {"EXISTS", "dk"}, {"UNWATCH"}, {"EXEC"}},
		{{"MULTI"}, {"WATCH"}, {"EXEC"}},
		{{"MULTI"}, {"UNWATCH", "x"}, {"EXEC"}},
		{{"WATCH", "a", "b"}, {"UNWATCH"}, {"MULTI"}, {"PING"}, {"EXEC"}},
	}
	for _, proto := range []string{"2", "3"} {
		for _, cmds := range cases {
			var got [2]string
			for i, addr := range []string{ref.Addr, s.Addr} {
				c := dialDiff(t, addr)
				if proto == "3" {
					require.NoError(t, c.send(encodeCommand("HELLO", "3")))
					_, err := c.read()
					require.NoError(t, err)
				}
				for _, cmd := range cmds {
					require.NoError(t, c.send(encodeCommand(cmd...)))
				}
				for range cmds {
					r, err := c.read()
					require.NoError(t, err)
					got[i] += string(r.raw)
				}
			}
			assert.Equal(t, got[0], got[1], "RESP%s %v", proto, cmds)
		}
	}
}

// txClientResult is what tests/{redispy,ioredis,noderedis}/tx.* print.
type txClientResult struct {
	Exec         json.RawMessage `json:"exec"`
	Abort        string          `json:"abort"`
	BadExists    int64           `json:"badExists"`
	Watch        json.RawMessage `json:"watch"`
	WatchedAfter []int64         `json:"watchedAfter"`
	Errors       []string        `json:"errors"`
}

// txClientKeys are the keys the client scripts use: a and b of different
// shards.
func txClientKeys(t *testing.T, prefix string) map[string]any {
	keys := txKeys(t, prefix, 2)
	return map[string]any{"a": keys[0], "b": keys[1], "bad": prefix + "bad", "watched": prefix + "w"}
}

// checkTxClient checks a client script's output: the transaction's three
// CL.THROTTLE replies, EXECABORT (or the client's wording of the queueing
// error) with nothing charged, and the watched transaction aborted (the
// other client's second call sees only its own two charges).
func checkTxClient(t *testing.T, res txClientResult, exec [][]int64, abort string, watch string) {
	t.Helper()
	require.Empty(t, res.Errors)
	var got [][]int64
	if err := json.Unmarshal(res.Exec, &got); err != nil {
		// ioredis: [[err, reply], ...]
		got = nil
		var pairs [][2]json.RawMessage
		require.NoError(t, json.Unmarshal(res.Exec, &pairs), "exec: %s", res.Exec)
		for _, p := range pairs {
			require.Equal(t, "null", string(p[0]), "no error in %s", res.Exec)
			var r []int64
			require.NoError(t, json.Unmarshal(p[1], &r))
			got = append(got, r)
		}
	}
	assert.Equal(t, exec, got)
	assert.Contains(t, res.Abort, abort)
	assert.Equal(t, int64(0), res.BadExists, "a transaction with a queueing error charges nothing")
	assert.Equal(t, watch, string(res.Watch))
	assert.Equal(t, []int64{0, 16, 14, -1, 4}, res.WatchedAfter, "the aborted transaction did not charge the watched key")
}

var txExec = [][]int64{{0, 16, 15, -1, 2}, {0, 16, 15, -1, 2}, {0, 16, 14, -1, 4}}

// redis-py's pipeline() is a transaction by default: MULTI, the commands,
// EXEC in one write. Commands after a refused one must not run.
func TestTxRedisPy(t *testing.T) {
	t.Parallel()
	py := ""
	for _, p := range []string{"/usr/bin/python3", "python3"} {
		if path, err := exec.LookPath(p); err == nil && exec.Command(path, "-c", "import redis").Run() == nil {
			py = path
			break
		}
	}
	if py == "" {
		t.Skip("!!! python3 with redis-py not installed: TestTxRedisPy NOT DONE (bash test.sh installs python3-redis) !!!")
	}
	s := txServer(t)
	cfg := txClientKeys(t, "py:")
	cfg["host"], cfg["port"] = "127.0.0.1", s.Port
	dir, err := filepath.Abs("redispy")
	require.NoError(t, err)
	var res txClientResult
	clRunJSON(t, dir, py, "tx.py", cfg, &res)
	checkTxClient(t, res, txExec, "unknown command 'NOPE'", `"WatchError"`)
}

func TestTxIORedis(t *testing.T) {
	t.Parallel()
	node, dir := nodePackage(t, "ioredis")
	s := txServer(t)
	cfg := txClientKeys(t, "io:")
	cfg["host"], cfg["port"] = "127.0.0.1", s.Port
	var res txClientResult
	clRunJSON(t, dir, node, "tx.js", cfg, &res)
	checkTxClient(t, res, txExec, "EXECABORT Transaction discarded because of previous errors.", "null")
}

func TestTxNodeRedis(t *testing.T) {
	t.Parallel()
	node, dir := nodePackage(t, "noderedis")
	s := txServer(t)
	cfg := txClientKeys(t, "nr:")
	cfg["url"] = "redis://" + s.Addr
	var res txClientResult
	clRunJSON(t, dir, node, "tx.js", cfg, &res)
	checkTxClient(t, res, txExec, "unknown command 'NOPE'", `"WatchError"`)
}

// Under --fsync always EXEC answers once its changes are synced: kill -9
// right after the reply loses none of them, on any of the shards.
func TestTxFsyncAlwaysKill9(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "data")
	args := []string{"--data-dir", dir, "--fsync", "always", "--shards", strconv.Itoa(txShards)}
	srv := startServer(t, args...)
	ctx := ctxT(t, 60*time.Second)
	c := srv.Client(t)
	keys := txKeys(t, "dur:", 4)
	cmds, err := c.TxPipelined(ctx, func(p redis.Pipeliner) error {
		for _, k := range keys {
			p.Do(ctx, "CL.THROTTLE", k, 10, 1, 3600)
		}
		return nil
	})
	require.NoError(t, err)
	require.Len(t, cmds, len(keys))
	srv.Kill9() // nothing read first: a read would wait for the sync itself
	c2 := startServer(t, args...).Client(t)
	for _, k := range keys {
		r, err := c2.Do(ctx, "CL.THROTTLE", k, 10, 1, 3600, 0).Int64Slice()
		require.NoError(t, err)
		assert.Equal(t, int64(10), r[2], "%s charged once (11: lost), after kill -9", k)
	}
}

// A client that sends MULTI, commands and EXEC in one write (redis-py's
// pipeline()) must not have the commands run when MULTI itself is refused:
// here before AUTH, where each of them is refused too.
func TestTxRefusedMultiRunsNothing(t *testing.T) {
	t.Parallel()
	s := startServer(t, "--in-memory", "--requirepass", "pw")
	c := s.Raw(t)
	var b []byte
	b = append(b, encodeCommand("MULTI")...)
	b = append(b, encodeCommand("CL.THROTTLE", "na", "15", "30", "60")...)
	b = append(b, encodeCommand("EXEC")...)
	c.Send(b)
	for range 3 {
		assert.Equal(t, "-NOAUTH Authentication required.\r\n", string(c.ReadReply()))
	}
	assert.Equal(t, "+OK\r\n", string(c.DoArgs("AUTH", "pw")))
	assert.Equal(t, ":0\r\n", string(c.DoArgs("EXISTS", "na")))
	assert.Equal(t, "-ERR EXEC without MULTI\r\n", string(c.DoArgs("EXEC")))
}
