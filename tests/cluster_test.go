package tests

// End-to-end tests of cluster mode (--cluster no|emulated|yes): nodes are
// started on free loopback ports, a topology is built from their real ports
// with `cellserver cluster init` and pushed with `cellserver cluster apply`,
// then go-redis's ClusterClient, redis-cli -c / --cluster check and ioredis
// (npm, tests/ioredis) talk to them.
//
// Expectations are computed independently of the server's code: slots with
// the CRC16 below (clSlot), node ids as SHA-1 of "host:port" (clNodeID), and
// topology documents edited as plain JSON (clDoc).

import (
	"bytes"
	"context"
	"crypto/sha1"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// ---------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------

// clSlot is Redis Cluster's key slot: CRC16/XMODEM of the key, or of its
// first non-empty {hash tag}, modulo 16384. Written here, not imported, so the
// tests check the server's routing against an independent implementation.
func clSlot(key string) int {
	if s := strings.IndexByte(key, '{'); s >= 0 {
		if e := strings.IndexByte(key[s+1:], '}'); e > 0 {
			key = key[s+1 : s+1+e]
		}
	}
	var crc uint16
	for i := 0; i < len(key); i++ {
		crc ^= uint16(key[i]) << 8
		for b := 0; b < 8; b++ {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc % 16384)
}

// clNodeID is the id a node announcing host:port has: hex SHA-1 of "host:port".
func clNodeID(host string, port int) string {
	sum := sha1.Sum([]byte(net.JoinHostPort(host, strconv.Itoa(port))))
	return hex.EncodeToString(sum[:])
}

// clDoc is a topology document as `cellserver cluster init` prints it.
type clDoc struct {
	Epoch  uint64    `json:"epoch"`
	Shards []clShard `json:"shards"`
}

type clShard struct {
	Slots    [][2]int `json:"slots"`
	Primary  clNode   `json:"primary"`
	Replicas []clNode `json:"replicas"`
}

type clNode struct {
	ID   string `json:"id"`
	Host string `json:"host"`
	Port int    `json:"port"`
}

func (n clNode) addr() string { return net.JoinHostPort(n.Host, strconv.Itoa(n.Port)) }

// owner returns the index of the shard owning slot, or -1.
func (d clDoc) owner(slot int) int {
	for i, s := range d.Shards {
		for _, r := range s.Slots {
			if r[0] <= slot && slot <= r[1] {
				return i
			}
		}
	}
	return -1
}

// clone deep-copies d so a test can edit the copy.
func (d clDoc) clone() clDoc {
	b, _ := json.Marshal(d)
	var c clDoc
	_ = json.Unmarshal(b, &c)
	return c
}

// clRun runs a program and returns its stdout, stderr and exit status.
func clRun(t testing.TB, timeout time.Duration, dir, name string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	require.NoError(t, ctx.Err(), "%s %q did not finish within %v; stdout:\n%s\nstderr:\n%s", name, args, timeout, o.String(), e.String())
	if err != nil {
		var ee *exec.ExitError
		require.True(t, errors.As(err, &ee), "running %s %q: %v", name, args, err)
		code = ee.ExitCode()
	}
	return o.String(), e.String(), code
}

// clStartNodes starts n nodes with --cluster yes (in memory unless extra
// names --data-dir) and checks they know who they are before any topology.
func clStartNodes(t *testing.T, n int, extra ...string) []*server {
	t.Helper()
	var nodes []*server
	for i := 0; i < n; i++ {
		args := append([]string{"--cluster", "yes"}, extra...)
		if !hasFlag(extra, "--data-dir") {
			args = append(args, "--in-memory")
		}
		nodes = append(nodes, startServer(t, args...))
	}
	return nodes
}

// clInit runs `cellserver cluster init --nodes ...` with the nodes' real
// addresses and checks the document: one shard per node, in order, with
// redis-cli's even split and ids derived from the addresses.
func clInit(t *testing.T, nodes []*server, epoch uint64) clDoc {
	t.Helper()
	var addrs []string
	for _, s := range nodes {
		addrs = append(addrs, s.Addr)
	}
	out, errOut, code := clRun(t, 10*time.Second, "", binPath, "cluster", "init", "--nodes", strings.Join(addrs, ","), "--epoch", strconv.FormatUint(epoch, 10))
	require.Equal(t, 0, code, "cluster init failed: %s", errOut)
	var doc clDoc
	dec := json.NewDecoder(strings.NewReader(out))
	dec.DisallowUnknownFields()
	require.NoError(t, dec.Decode(&doc), "cluster init printed:\n%s", out)
	require.Equal(t, epoch, doc.Epoch)
	require.Len(t, doc.Shards, len(nodes))
	for i, s := range nodes {
		sh := doc.Shards[i]
		assert.Equal(t, clNode{ID: clNodeID("127.0.0.1", s.Port), Host: "127.0.0.1", Port: s.Port}, sh.Primary, "shard %d primary", i)
		assert.Empty(t, sh.Replicas, "shard %d replicas", i)
	}
	if len(nodes) == 3 {
		// redis-cli --cluster create's split for three masters.
		want := [][2]int{{0, 5460}, {5461, 10922}, {10923, 16383}}
		for i := range 3 {
			assert.Equal(t, [][2]int{want[i]}, doc.Shards[i].Slots, "shard %d slots", i)
		}
	}
	return doc
}

// clWriteDoc writes doc to a new file and returns its path.
func clWriteDoc(t *testing.T, doc clDoc) string {
	t.Helper()
	for i := range doc.Shards {
		if doc.Shards[i].Replicas == nil {
			doc.Shards[i].Replicas = []clNode{}
		}
	}
	b, err := json.MarshalIndent(doc, "", "  ")
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), fmt.Sprintf("topology-epoch%d.json", doc.Epoch))
	require.NoError(t, os.WriteFile(path, b, 0o644))
	return path
}

// clApply runs `cellserver cluster apply FILE [extra...]`.
func clApply(t *testing.T, file string, extra ...string) (stdout, stderr string, code int) {
	t.Helper()
	return clRun(t, 30*time.Second, "", binPath, append([]string{"cluster", "apply", file}, extra...)...)
}

// clApplyOK applies doc and requires one "<addr> <id> ok" line per node, in
// document order, and exit status 0.
func clApplyOK(t *testing.T, doc clDoc, extra ...string) string {
	t.Helper()
	file := clWriteDoc(t, doc)
	out, errOut, code := clApply(t, file, extra...)
	require.Equal(t, 0, code, "cluster apply epoch %d: stdout:\n%s\nstderr:\n%s", doc.Epoch, out, errOut)
	var want, got []string
	for _, s := range doc.Shards {
		want = append(want, s.Primary.addr()+" "+s.Primary.ID+" ok")
	}
	// A document that moves slots also prints one "moved N keys of S
	// slots from A to B" line per (source, target) pair after the flip.
	for _, line := range strings.Split(strings.TrimRight(out, "\n"), "\n") {
		if !mvMovedLine.MatchString(line) {
			got = append(got, line)
		}
	}
	require.Equal(t, want, got, "cluster apply output:\n%s", out)
	return file
}

// clCluster starts 3 `--cluster yes` nodes, builds the topology from their
// ports with `cluster init` and pushes it with `cluster apply`.
func clCluster(t *testing.T, extra ...string) ([]*server, clDoc) {
	t.Helper()
	nodes := clStartNodes(t, 3, extra...)
	doc := clInit(t, nodes, 1)
	clApplyOK(t, doc)
	return nodes, doc
}

// clClusterClient is a go-redis ClusterClient seeded with the nodes' addresses.
func clClusterClient(t *testing.T, nodes []*server, mod ...func(*redis.ClusterOptions)) *redis.ClusterClient {
	t.Helper()
	opt := &redis.ClusterOptions{}
	for _, s := range nodes {
		opt.Addrs = append(opt.Addrs, s.Addr)
	}
	for _, f := range mod {
		f(opt)
	}
	rdb := redis.NewClusterClient(opt)
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// clInfo returns field from INFO section ("" if absent).
func clInfo(t testing.TB, rdb *redis.Client, section, field string) string {
	t.Helper()
	info, err := rdb.Info(ctxT(t, 10*time.Second), section).Result()
	require.NoError(t, err)
	for _, line := range strings.Split(info, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok && k == field {
			return v
		}
	}
	return ""
}

// clMoved is a node's cluster_moved_replies (INFO cluster).
func clMoved(t testing.TB, rdb *redis.Client) int64 {
	t.Helper()
	v := clInfo(t, rdb, "cluster", "cluster_moved_replies")
	n, err := strconv.ParseInt(v, 10, 64)
	require.NoError(t, err, "cluster_moved_replies = %q", v)
	return n
}

// clMovedTotal sums cluster_moved_replies over the nodes.
func clMovedTotal(t testing.TB, clients []*redis.Client) int64 {
	t.Helper()
	var n int64
	for _, c := range clients {
		n += clMoved(t, c)
	}
	return n
}

// clClients opens one plain go-redis client per node.
func clClients(t *testing.T, nodes []*server) []*redis.Client {
	var cs []*redis.Client
	for _, s := range nodes {
		cs = append(cs, s.Client(t))
	}
	return cs
}

// clClusterInfo parses CLUSTER INFO.
func clClusterInfo(t testing.TB, rdb *redis.Client) map[string]string {
	t.Helper()
	s, err := rdb.ClusterInfo(ctxT(t, 10*time.Second)).Result()
	require.NoError(t, err)
	m := map[string]string{}
	for _, line := range strings.Split(s, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			m[k] = v
		}
	}
	return m
}

// clWantSlots is the CLUSTER SLOTS reply doc implies, sorted by first slot.
func clWantSlots(doc clDoc) []redis.ClusterSlot {
	var out []redis.ClusterSlot
	for _, sh := range doc.Shards {
		for _, r := range sh.Slots {
			out = append(out, redis.ClusterSlot{Start: r[0], End: r[1], Nodes: []redis.ClusterNode{{ID: sh.Primary.ID, Addr: sh.Primary.addr()}}})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Start < out[j].Start })
	return out
}

// clSlots reads CLUSTER SLOTS, dropping the (empty) networking metadata.
func clSlots(t testing.TB, rdb *redis.Client) []redis.ClusterSlot {
	t.Helper()
	got, err := rdb.ClusterSlots(ctxT(t, 10*time.Second)).Result()
	require.NoError(t, err)
	for i := range got {
		for j := range got[i].Nodes {
			got[i].Nodes[j].NetworkingMetadata = nil
		}
	}
	return got
}

// clDoer is a go-redis Client or ClusterClient.
type clDoer interface {
	Do(ctx context.Context, args ...any) *redis.Cmd
}

// clThrottle sends CL.THROTTLE through any go-redis client and returns the
// five integers.
func clThrottle(ctx context.Context, rdb clDoer, key string, burst, count, period int) ([]int64, error) {
	v, err := rdb.Do(ctx, "CL.THROTTLE", key, burst, count, period).Slice()
	if err != nil {
		return nil, err
	}
	if len(v) != 5 {
		return nil, fmt.Errorf("CL.THROTTLE %s: %d elements, want 5: %v", key, len(v), v)
	}
	out := make([]int64, 5)
	for i, x := range v {
		n, ok := x.(int64)
		if !ok {
			return nil, fmt.Errorf("CL.THROTTLE %s: element %d is %T, want int64", key, i, x)
		}
		out[i] = n
	}
	return out, nil
}

// clKeysInSlots returns n distinct keys "prefix<i>" whose slots satisfy in.
func clKeysInSlots(prefix string, n int, in func(slot int) bool) []string {
	var keys []string
	for i := 0; len(keys) < n; i++ {
		k := prefix + strconv.Itoa(i)
		if in(clSlot(k)) {
			keys = append(keys, k)
		}
	}
	return keys
}

// clStartOnPort starts cellserver listening on 127.0.0.1:port (to restart a
// stopped node at the address its topology announces) and waits until it
// answers. It is stopped with SIGTERM at cleanup and must exit with 0.
func clStartOnPort(t *testing.T, port int, args ...string) *server {
	t.Helper()
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	s := &server{t: t, Addr: addr, Port: port, stderr: &lockedBuffer{}, exited: make(chan struct{})}
	s.cmd = exec.Command(binPath, append([]string{"--addr", addr}, args...)...)
	s.cmd.Stdout, s.cmd.Stderr = s.stderr, s.stderr
	require.NoError(t, s.cmd.Start())
	go func() {
		s.waitErr = s.cmd.Wait()
		close(s.exited)
	}()
	t.Cleanup(func() {
		if code := s.Stop(); code != 0 {
			t.Errorf("cellserver %s exited with status %d after SIGTERM, want 0", addr, code)
		}
		if t.Failed() {
			t.Logf("cellserver %s (restarted) output:\n%s", addr, s.Output())
		}
	})
	deadline := time.Now().Add(10 * time.Second)
	for !pingRaw(addr) {
		select {
		case <-s.exited:
			t.Fatalf("cellserver on %s exited at start (%v); output:\n%s", addr, s.waitErr, s.Output())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("cellserver on %s: no reply to PING within 10s; output:\n%s", addr, s.Output())
		}
		time.Sleep(10 * time.Millisecond)
	}
	return s
}

// ---------------------------------------------------------------------------
// 1. Three nodes, topology pushed with the CLI, CLUSTER subcommands
// ---------------------------------------------------------------------------

func TestClusterThreeNodesTopology(t *testing.T) {
	nodes := clStartNodes(t, 3)
	cs := clClients(t, nodes)
	ctx := ctxT(t, 30*time.Second)

	// Before any topology: the node knows its id, owns nothing, serves no slot.
	for i, c := range cs {
		info := clClusterInfo(t, c)
		assert.Equal(t, "fail", info["cluster_state"], "node %d before apply", i)
		assert.Equal(t, "0", info["cluster_slots_assigned"], "node %d before apply", i)
		assert.Equal(t, clNodeID("127.0.0.1", nodes[i].Port), c.ClusterMyID(ctx).Val(), "node %d MYID before apply", i)
		assert.Empty(t, clSlots(t, c), "node %d CLUSTER SLOTS before apply", i)
		_, err := clThrottle(ctx, c, "user123", 15, 30, 60)
		assert.EqualError(t, err, "CLUSTERDOWN Hash slot not served", "node %d before apply", i)
	}

	doc := clInit(t, nodes, 1)
	clApplyOK(t, doc)

	wantSlots := clWantSlots(doc)
	for i, c := range cs {
		me := doc.Shards[i].Primary
		info := clClusterInfo(t, c)
		assert.Equal(t, "ok", info["cluster_state"], "node %d", i)
		assert.Equal(t, "16384", info["cluster_slots_assigned"], "node %d", i)
		assert.Equal(t, "3", info["cluster_known_nodes"], "node %d", i)
		assert.Equal(t, "3", info["cluster_size"], "node %d", i)
		assert.Equal(t, "1", info["cluster_current_epoch"], "node %d", i)

		assert.Equal(t, me.ID, c.ClusterMyID(ctx).Val(), "node %d CLUSTER MYID", i)
		assert.Equal(t, wantSlots, clSlots(t, c), "node %d CLUSTER SLOTS", i)

		shards, err := c.ClusterShards(ctx).Result()
		require.NoError(t, err)
		require.Len(t, shards, 3, "node %d CLUSTER SHARDS", i)
		for j, sh := range shards {
			p := doc.Shards[j].Primary
			r := doc.Shards[j].Slots[0]
			assert.Equal(t, []redis.SlotRange{{Start: int64(r[0]), End: int64(r[1])}}, sh.Slots, "node %d shard %d slots", i, j)
			require.Len(t, sh.Nodes, 1, "node %d shard %d nodes", i, j)
			n := sh.Nodes[0]
			assert.Equal(t, p.ID, n.ID)
			assert.Equal(t, int64(p.Port), n.Port)
			assert.Equal(t, "127.0.0.1", n.IP)
			assert.Equal(t, "127.0.0.1", n.Endpoint)
			assert.Equal(t, "master", n.Role)
			assert.Equal(t, "online", n.Health)
		}

		// CLUSTER NODES: "<id> <ip:port@cport> <flags> <master> <ping> <pong> <epoch> <link> <slots...>"
		text, err := c.ClusterNodes(ctx).Result()
		require.NoError(t, err)
		lines := strings.Split(strings.TrimRight(text, "\n"), "\n")
		require.Len(t, lines, 3, "node %d CLUSTER NODES:\n%s", i, text)
		for j, line := range lines {
			p := doc.Shards[j].Primary
			r := doc.Shards[j].Slots[0]
			flags := "master"
			if j == i {
				flags = "myself,master"
			}
			want := fmt.Sprintf("%s %s@%d %s - 0 0 1 connected %d-%d", p.ID, p.addr(), p.Port+10000, flags, r[0], r[1])
			assert.Equal(t, want, line, "node %d CLUSTER NODES line %d", i, j)
		}

		// CLUSTER KEYSLOT: values published in Redis's documentation.
		for key, slot := range map[string]int64{
			"user123": 13438, "somekey": 11058, "foo{hash_tag}": 2515, "bar{hash_tag}": 2515,
			"foo": 12182, "{user1000}.following": 3443, "{user1000}.followers": 3443, "foo{}{bar}": int64(clSlot("foo{}{bar}")),
		} {
			assert.Equal(t, slot, c.ClusterKeySlot(ctx, key).Val(), "node %d CLUSTER KEYSLOT %q", i, key)
			assert.Equal(t, slot, int64(clSlot(key)), "test's clSlot(%q)", key)
		}
	}
	require.False(t, t.Failed())

	// Keys live on their slot's owner. user123 (slot 13438) belongs to node 3.
	const slot = 13438
	owner := doc.owner(slot)
	require.Equal(t, 2, owner)
	oc := cs[owner]
	keys := []string{"user123", "{user123}:a", "{user123}:b"}
	for _, k := range keys {
		r, err := clThrottle(ctx, oc, k, 15, 30, 60)
		require.NoError(t, err, k)
		assert.Equal(t, []int64{0, 16, 15, -1, 2}, r, k)
	}
	assert.Equal(t, int64(3), oc.ClusterCountKeysInSlot(ctx, slot).Val(), "COUNTKEYSINSLOT on the owner")
	got, err := oc.ClusterGetKeysInSlot(ctx, slot, 10).Result()
	require.NoError(t, err)
	sort.Strings(got)
	assert.Equal(t, []string{"user123", "{user123}:a", "{user123}:b"}, got, "GETKEYSINSLOT on the owner")
	assert.Len(t, oc.ClusterGetKeysInSlot(ctx, slot, 2).Val(), 2, "GETKEYSINSLOT with count 2")
	assert.Equal(t, int64(0), oc.ClusterCountKeysInSlot(ctx, slot+1).Val(), "an empty slot")
	assert.Equal(t, int64(3), oc.DBSize(ctx).Val(), "DBSIZE on the owner")
	for _, i := range []int{0, 1} {
		assert.Equal(t, int64(0), cs[i].ClusterCountKeysInSlot(ctx, slot).Val(), "COUNTKEYSINSLOT on node %d (not the owner)", i)
		assert.Equal(t, int64(0), cs[i].DBSize(ctx).Val(), "DBSIZE on node %d", i)
	}
	assert.EqualError(t, oc.Do(ctx, "CLUSTER", "COUNTKEYSINSLOT", 16384).Err(), "ERR Invalid slot")
	assert.EqualError(t, oc.Do(ctx, "CLUSTER", "GETKEYSINSLOT", -1, 1).Err(), "ERR Invalid slot or number of keys")

	// Multi-key commands: one slot is fine, two slots are CROSSSLOT even when
	// this node owns both (foo is slot 12182, also node 3's).
	assert.Equal(t, int64(2), oc.Exists(ctx, "{user123}:a", "{user123}:b").Val())
	assert.EqualError(t, oc.Exists(ctx, "user123", "foo").Err(), "CROSSSLOT Keys in request don't hash to the same slot")
	assert.EqualError(t, oc.Del(ctx, "user123", "foo").Err(), "CROSSSLOT Keys in request don't hash to the same slot")

	// MOVED from the nodes that do not own the slot, counted in INFO.
	for _, i := range []int{0, 1} {
		before := clMoved(t, cs[i])
		_, err := clThrottle(ctx, cs[i], "user123", 15, 30, 60)
		assert.EqualError(t, err, fmt.Sprintf("MOVED %d %s", slot, nodes[owner].Addr), "node %d", i)
		err = cs[i].Get(ctx, "{user123}:a").Err()
		assert.EqualError(t, err, fmt.Sprintf("MOVED %d %s", slot, nodes[owner].Addr), "node %d GET", i)
		assert.Equal(t, before+2, clMoved(t, cs[i]), "node %d cluster_moved_replies", i)
		assert.Equal(t, fmt.Sprintf("count=%d", before+2), clInfo(t, cs[i], "errorstats", "errorstat_MOVED"), "node %d errorstat_MOVED", i)
		assert.Equal(t, "yes", clInfo(t, cs[i], "cluster", "cluster_mode"))
		assert.Equal(t, "1", clInfo(t, cs[i], "cluster", "cluster_enabled"))
	}
	assert.Equal(t, int64(0), clMoved(t, oc), "the owner answered no MOVED")
	// The MOVED calls changed nothing on the owner.
	r, err := clThrottle(ctx, oc, "user123", 15, 30, 60)
	require.NoError(t, err)
	assert.Equal(t, int64(14), r[2], "remaining after the owner's second call")

	// Keyless and cluster commands are answered by every node.
	for i, c := range cs {
		assert.Equal(t, "PONG", c.Ping(ctx).Val(), "node %d", i)
		assert.Equal(t, "OK", c.ReadOnly(ctx).Val(), "node %d READONLY", i)
		assert.Equal(t, "OK", c.ReadWrite(ctx).Val(), "node %d READWRITE", i)
		assert.Equal(t, "OK", c.Do(ctx, "ASKING").Val(), "node %d ASKING", i)
	}
}

// ---------------------------------------------------------------------------
// 2. go-redis ClusterClient: 10,000 calls, zero MOVED after warm-up, exact limits
// ---------------------------------------------------------------------------

func TestClusterGoRedisClusterClient(t *testing.T) {
	nodes, doc := clCluster(t)
	cs := clClients(t, nodes)
	rdb := clClusterClient(t, nodes)
	ctx := ctxT(t, 60*time.Second)

	// COMMAND INFO must give CL.THROTTLE's key position, which cluster
	// clients use to route it (go-redis falls back to position 1 when it
	// has no info; others send it anywhere).
	ci, err := cs[0].Command(ctx).Result() // what go-redis loads for its cache
	require.NoError(t, err)
	info := ci["cl.throttle"]
	require.NotNil(t, info, "COMMAND INFO cl.throttle")
	assert.Equal(t, int8(1), info.FirstKeyPos)
	assert.Equal(t, int8(1), info.LastKeyPos)
	assert.Equal(t, int8(1), info.StepCount)
	assert.Contains(t, info.Flags, "write")
	assert.Equal(t, []string{"somekey"}, cs[0].CommandGetKeys(ctx, "CL.THROTTLE", "somekey", 1, 2, 3).Val(), "COMMAND GETKEYS")

	// Warm-up: the client loads CLUSTER SLOTS and COMMAND.
	movedStart := clMovedTotal(t, cs)
	var warmKeys []string
	for i := 0; i < 5; i++ {
		k := fmt.Sprint("warm:", i)
		warmKeys = append(warmKeys, k)
		_, err := clThrottle(ctx, rdb, k, 5, 1, 3600)
		require.NoError(t, err)
	}
	movedWarm := clMovedTotal(t, cs) - movedStart

	const nKeys, calls, workers = 500, 10000, 8
	const perKey = calls / nKeys
	keys := make([]string, nKeys)
	burst := make([]int, nKeys)
	for i := range keys {
		keys[i] = fmt.Sprint("lim:", i)
		burst[i] = i % 16 // allows burst+1 calls within the hour, all < perKey
	}
	replies := make([][][]int64, nKeys)
	var (
		wg      sync.WaitGroup
		errMu   sync.Mutex
		callErr []string
	)
	start := time.Now()
	for w := 0; w < workers; w++ {
		wg.Go(func() {
			// Each worker owns keys w, w+workers, ... and sends their calls in
			// rounds, so one key's calls are in order but keys interleave.
			for round := 0; round < perKey; round++ {
				for i := w; i < nKeys; i += workers {
					r, err := clThrottle(ctx, rdb, keys[i], burst[i], 1, 3600)
					if err != nil {
						errMu.Lock()
						callErr = append(callErr, err.Error())
						errMu.Unlock()
						return
					}
					replies[i] = append(replies[i], r)
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	require.Empty(t, callErr, "CL.THROTTLE errors through the ClusterClient")
	movedRun := clMovedTotal(t, cs) - movedStart - movedWarm

	// Exact limits: burst b allows exactly b+1 calls (1 token per hour), in
	// order, then refuses; the replies count down exactly.
	bad := 0
	for i, rs := range replies {
		b := int64(burst[i])
		require.Len(t, rs, perKey, keys[i])
		allowed := 0
		for j, r := range rs {
			j := int64(j)
			var want []int64
			if j <= b {
				allowed++
				want = []int64{0, b + 1, b - j, -1}
				if r[4] > (j+1)*3600 || r[4] < (j+1)*3600-30 {
					want = append(want, (j+1)*3600) // reset_after out of range: show the mismatch
				} else {
					want = append(want, r[4])
				}
			} else {
				want = []int64{1, b + 1, 0}
				if r[3] > 3600 || r[3] < 3600-30 {
					want = append(want, 3600)
				} else {
					want = append(want, r[3])
				}
				if r[4] > (b+1)*3600 || r[4] < (b+1)*3600-30 {
					want = append(want, (b+1)*3600)
				} else {
					want = append(want, r[4])
				}
			}
			if !assert.Equal(t, want, r, "%s (burst %d) call %d", keys[i], b, j) {
				bad++
			}
			if bad > 10 {
				t.FailNow()
			}
		}
		assert.Equal(t, int(b)+1, allowed, "%s: allowed calls", keys[i])
	}

	// Every key lives on its slot's owner, nowhere else.
	want := make([]int64, len(nodes))
	for _, k := range append(append([]string{}, keys...), warmKeys...) {
		want[doc.owner(clSlot(k))]++
	}
	var dist []string
	for i, c := range cs {
		n := c.DBSize(ctx).Val()
		dist = append(dist, fmt.Sprintf("node%d %s (slots %v): %d keys", i+1, nodes[i].Addr, doc.Shards[i].Slots, n))
		assert.Equal(t, want[i], n, "DBSIZE of node %d", i+1)
	}
	for _, k := range keys[:20] {
		o := doc.owner(clSlot(k))
		assert.Equal(t, int64(1), cs[o].Exists(ctx, k).Val(), "%s on its owner node %d", k, o+1)
	}

	t.Logf("go-redis ClusterClient: %d CL.THROTTLE calls over %d keys with %d workers in %v (%.0f calls/s)",
		calls, nKeys, workers, elapsed.Round(time.Millisecond), float64(calls)/elapsed.Seconds())
	t.Logf("MOVED replies: %d during the %d warm-up calls, %d during the %d calls after warm-up", movedWarm, len(warmKeys), movedRun, calls)
	t.Logf("per-node key distribution (DBSIZE): %s", strings.Join(dist, "; "))
	assert.Equal(t, int64(0), movedRun, "MOVED replies after warm-up: the ClusterClient must route CL.THROTTLE by its key")
}

// ---------------------------------------------------------------------------
// 3. redis-cli -c follows MOVED; redis-cli --cluster check passes
// ---------------------------------------------------------------------------

func TestClusterRedisCLI(t *testing.T) {
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		t.Skip("!!! redis-cli not installed: apt-get install -y redis-tools !!! (TestClusterRedisCLI NOT RUN)")
	}
	nodes, doc := clCluster(t)
	cs := clClients(t, nodes)
	const slot = 13438 // user123
	owner := doc.owner(slot)
	other := (owner + 1) % 3
	port := strconv.Itoa(nodes[other].Port)

	// Without -c: the MOVED error itself.
	out, _, _ := clRun(t, 10*time.Second, "", cli, "-h", "127.0.0.1", "-p", port, "CL.THROTTLE", "user123", "15", "30", "60")
	assert.Equal(t, fmt.Sprintf("MOVED %d %s", slot, nodes[owner].Addr), strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(out), "(error)")))

	// With -c: redis-cli follows MOVED to the owner and prints the 5 integers.
	movedBefore := clMoved(t, cs[other])
	for call := 0; call < 2; call++ {
		out, errOut, code := clRun(t, 10*time.Second, "", cli, "-c", "-h", "127.0.0.1", "-p", port, "CL.THROTTLE", "user123", "15", "30", "60")
		assert.Equal(t, 0, code, "redis-cli -c: %s", errOut)
		if call == 0 {
			assert.Equal(t, "0\n16\n15\n-1\n2\n", out, "redis-cli -c -p %s CL.THROTTLE user123 15 30 60", port)
			continue
		}
		// Second call: one token less; reset_after 4 s minus the time between the calls.
		f := strings.Fields(out)
		if assert.Len(t, f, 5, "second redis-cli -c call: %q", out) {
			assert.Equal(t, []string{"0", "16", "14", "-1"}, f[:4], "second redis-cli -c call")
			assert.Contains(t, []string{"3", "4"}, f[4], "second call reset_after")
		}
	}
	assert.Equal(t, movedBefore+2, clMoved(t, cs[other]), "node %d answered MOVED to each redis-cli -c call", other+1)
	assert.Equal(t, int64(1), cs[owner].Exists(ctxT(t, 5*time.Second), "user123").Val(), "user123 is stored on its owner")

	// redis-cli --cluster check, from every node.
	for i, s := range nodes {
		out, errOut, code := clRun(t, 20*time.Second, "", cli, "--cluster", "check", s.Addr)
		assert.Equal(t, 0, code, "redis-cli --cluster check %s exit status; stdout:\n%s\nstderr:\n%s", s.Addr, out, errOut)
		assert.Contains(t, out, "[OK] All 16384 slots covered", "node %d", i+1)
		assert.Contains(t, out, "[OK] All nodes agree about slots configuration", "node %d", i+1)
		assert.NotContains(t, out, "[ERR]", "node %d", i+1)
		assert.NotContains(t, out, "[WARNING]", "node %d", i+1)
		if i == 0 {
			t.Logf("redis-cli --cluster check %s:\n%s", s.Addr, out)
		}
	}
}

// ---------------------------------------------------------------------------
// 4. Topology change: a slot range moves from node 3 to node 1
// ---------------------------------------------------------------------------

func TestClusterTopologyChange(t *testing.T) {
	nodes, doc := clCluster(t)
	cs := clClients(t, nodes)
	rdb := clClusterClient(t, nodes)
	ctx := ctxT(t, 60*time.Second)

	// Node 3 owns [10923, 16383]; [12000, 13999] (with user123's slot 13438)
	// moves to node 1.
	const lo, hi = 12000, 13999
	require.Equal(t, 2, doc.owner(lo))
	require.Equal(t, 2, doc.owner(hi))
	inMoved := func(s int) bool { return lo <= s && s <= hi }
	movedKeys := clKeysInSlots("mv:", 40, inMoved)
	stayKeys := clKeysInSlots("stay:", 40, func(s int) bool { return doc.owner(s) == 2 && !inMoved(s) })
	otherKeys := clKeysInSlots("other:", 40, func(s int) bool { return doc.owner(s) != 2 })
	all := append(append(append([]string{}, movedKeys...), stayKeys...), otherKeys...)
	for _, k := range all {
		_, err := clThrottle(ctx, rdb, k, 100, 1, 3600)
		require.NoError(t, err, k)
	}
	// For the state subtest: a key exhausted on the old owner before the move.
	const stateKey = "exhausted{user123}" // slot 13438
	for i, wantLimited := range []int64{0, 0, 0, 1} {
		r, err := clThrottle(ctx, rdb, stateKey, 2, 1, 3600)
		require.NoError(t, err)
		require.Equal(t, wantLimited, r[0], "%s call %d before the move", stateKey, i+1)
	}

	slotsOf := func(keys []string) map[int]int64 {
		m := map[int]int64{}
		for _, k := range keys {
			m[clSlot(k)]++
		}
		return m
	}
	stateTAT, err := cs[2].Get(ctx, stateKey).Result()
	require.NoError(t, err)
	movedSlots := slotsOf(append([]string{stateKey}, movedKeys...))
	for s, n := range movedSlots {
		require.Equal(t, n, cs[2].ClusterCountKeysInSlot(ctx, s).Val(), "node 3 slot %d before the move", s)
	}
	dbsize3 := cs[2].DBSize(ctx).Val()
	require.Equal(t, int64(len(movedKeys)+len(stayKeys)+1), dbsize3)
	dbsize1 := cs[0].DBSize(ctx).Val()
	dbsize2 := cs[1].DBSize(ctx).Val()

	// Epoch 2: node 1 gets [12000, 13999]; node 3 keeps the rest of its range.
	doc2 := doc.clone()
	doc2.Epoch = 2
	doc2.Shards[0].Slots = [][2]int{{0, 5460}, {lo, hi}}
	doc2.Shards[2].Slots = [][2]int{{10923, lo - 1}, {hi + 1, 16383}}

	// SETTOPOLOGY alone no longer moves keys: node 3 refuses to give up a
	// slot it still holds keys of, with Redis's SETSLOT NODE text, and
	// nothing changes. Only `cluster apply` (open, move, flip) moves them.
	b2, err := json.Marshal(doc2)
	require.NoError(t, err)
	err = cs[2].Do(ctx, "CLUSTER", "SETTOPOLOGY", string(b2)).Err()
	if assert.Error(t, err, "raw SETTOPOLOGY taking slots with keys from node 3") {
		var n int
		_, scanErr := fmt.Sscanf(err.Error(), "ERR Can't assign hashslot %d to a different node while I still hold keys for this hash slot.", &n)
		assert.NoError(t, scanErr, "refusal text: %q", err.Error())
		assert.Contains(t, movedSlots, n, "the refused slot %d holds keys on node 3", n)
		assert.True(t, strings.HasSuffix(err.Error(), " to a different node while I still hold keys for this hash slot."), err.Error())
	}
	assert.Equal(t, "1", clClusterInfo(t, cs[2])["cluster_current_epoch"], "node 3 keeps epoch 1 after the refused SETTOPOLOGY")
	assert.Equal(t, dbsize3, cs[2].DBSize(ctx).Val(), "node 3 keeps its keys after the refused SETTOPOLOGY")

	clApplyOK(t, doc2)
	mvNoOpenSlots(t, cs)

	wantSlots := clWantSlots(doc2)
	for i, c := range cs {
		info := clClusterInfo(t, c)
		assert.Equal(t, "2", info["cluster_current_epoch"], "node %d", i+1)
		assert.Equal(t, "ok", info["cluster_state"], "node %d", i+1)
		assert.Equal(t, wantSlots, clSlots(t, c), "node %d CLUSTER SLOTS after the move", i+1)
	}
	nodesText := cs[1].ClusterNodes(ctx).Val()
	assert.Contains(t, nodesText, fmt.Sprintf("%s %s@%d master - 0 0 2 connected 0-5460 %d-%d\n", doc2.Shards[0].Primary.ID, nodes[0].Addr, nodes[0].Port+10000, lo, hi))
	assert.Contains(t, nodesText, fmt.Sprintf("%s %s@%d master - 0 0 2 connected 10923-%d %d-16383\n", doc2.Shards[2].Primary.ID, nodes[2].Addr, nodes[2].Port+10000, lo-1, hi+1))

	// Plain clients: the old owner redirects, the new owner serves.
	r3 := nodes[2].Raw(t)
	assert.Equal(t, string(respErr(fmt.Sprintf("MOVED 13438 %s", nodes[0].Addr))), string(r3.DoArgs("CL.THROTTLE", "user123", "15", "30", "60")), "old owner")
	r1 := nodes[0].Raw(t)
	assert.Equal(t, string(respInts(0, 16, 15, -1, 2)), string(r1.DoArgs("CL.THROTTLE", "user123", "15", "30", "60")), "new owner")
	for _, k := range stayKeys[:5] {
		assert.Equal(t, string(respErr(fmt.Sprintf("MOVED %d %s", clSlot(k), nodes[2].Addr))), string(r1.DoArgs("GET", k)), "node 1 does not own %s", k)
	}

	// The old owner sent the keys of the moved slots, only those, before
	// apply returned: nothing is left behind on it.
	for s := range movedSlots {
		assert.Equal(t, int64(0), cs[2].ClusterCountKeysInSlot(ctx, s).Val(), "node 3 COUNTKEYSINSLOT %d after the move", s)
		assert.Empty(t, cs[2].ClusterGetKeysInSlot(ctx, s, 10).Val(), "node 3 GETKEYSINSLOT %d after the move", s)
	}
	for s, n := range slotsOf(stayKeys) {
		assert.Equal(t, n, cs[2].ClusterCountKeysInSlot(ctx, s).Val(), "node 3 kept slot %d", s)
	}
	assert.Equal(t, int64(len(stayKeys)), cs[2].DBSize(ctx).Val(), "node 3 DBSIZE after the move")
	assert.Equal(t, dbsize2, cs[1].DBSize(ctx).Val(), "node 2 (not involved) DBSIZE")

	// The ClusterClient keeps working: its first calls after the move meet
	// MOVED from node 3, which it follows, and it reloads the slot map, after
	// which it sends every key straight to its owner.
	moved0 := clMovedTotal(t, cs)
	for _, k := range all {
		_, err := clThrottle(ctx, rdb, k, 100, 1, 3600)
		require.NoError(t, err, "ClusterClient right after the move: %s", k)
	}
	firstPass := clMovedTotal(t, cs) - moved0
	assert.Positive(t, firstPass, "the ClusterClient had the old map, so node 3 must have redirected some calls")
	passes := 1
	var lastPass int64
	require.Eventually(t, func() bool {
		m := clMovedTotal(t, cs)
		for _, k := range all {
			if _, err := clThrottle(ctx, rdb, k, 100, 1, 3600); err != nil {
				t.Logf("%s: %v", k, err)
				return false
			}
		}
		passes++
		lastPass = clMovedTotal(t, cs) - m
		return lastPass == 0
	}, 10*time.Second, 50*time.Millisecond, "the ClusterClient still gets MOVED after reloading the slot map")
	t.Logf("after the move: %d MOVED in the first pass over %d keys; %d passes until a pass with 0 MOVED", firstPass, len(all), passes)
	for _, k := range movedKeys {
		assert.Equal(t, int64(1), cs[0].Exists(ctx, k).Val(), "%s now on node 1", k)
	}

	t.Run("state moves with the slot", func(t *testing.T) {
		// The key was exhausted on node 3 (burst 2 allowed 3 calls, the 4th
		// was limited, no token returns within the hour). After its slot
		// moved to node 1 it must still be limited there: a move must not
		// hand clients a fresh burst. The state was moved before the flip,
		// so it is there as soon as apply returned.
		tat, err := cs[0].Get(ctx, stateKey).Result()
		require.NoError(t, err, "%s is not on node 1 (the new owner): its state did not move with the slot", stateKey)
		assert.Equal(t, stateTAT, tat, "%s: TAT on node 1 after the move, want node 3's before the move", stateKey)
		r, err := clThrottle(ctx, rdb, stateKey, 2, 1, 3600)
		require.NoError(t, err)
		assert.Equal(t, int64(1), r[0], "%s on the new owner after the move: reply %v (0 = allowed: the limiter state did not move with the slot)", stateKey, r)
		assert.Equal(t, int64(0), r[2], "remaining")
	})

	// Node 1: its keys, the moved keys, user123 and the state key.
	assert.Equal(t, dbsize1+int64(len(movedKeys))+2, cs[0].DBSize(ctx).Val(), "node 1 DBSIZE after the move")
	t.Logf("per-node keys after the move: node1 %d, node2 %d, node3 %d", cs[0].DBSize(ctx).Val(), cs[1].DBSize(ctx).Val(), cs[2].DBSize(ctx).Val())
}

// TestClusterStateTransferWindow: a move is acknowledged when `cluster
// apply` exits 0; the keys were moved (and acked durably by the new owner)
// before any node flipped, so there is no window: the first call on the new
// owner right after apply returns must apply the old owner's limits, and
// the old owner holds nothing of the slot any more. Pushing the flip alone
// (raw SETTOPOLOGY to the old owner) is refused while it holds the keys.
func TestClusterStateTransferWindow(t *testing.T) {
	nodes, doc := clCluster(t)
	cs := clClients(t, nodes)
	ctx := ctxT(t, 60*time.Second)
	for _, c := range cs {
		require.NoError(t, c.Ping(ctx).Err()) // connections open before the timing matters
	}
	const moves = 10
	var fresh []string
	owner := 2 // of [12000, 13999], with slot 13438
	for m := 0; m < moves; m++ {
		key := fmt.Sprintf("window%d{user123}", m)
		for i, wantLimited := range []int64{0, 0, 1} {
			r, err := clThrottle(ctx, cs[owner], key, 1, 1, 3600)
			require.NoError(t, err)
			require.Equal(t, wantLimited, r[0], "%s call %d on node %d before move %d", key, i+1, owner+1, m+1)
		}
		next := 2 - owner // node 3 <-> node 1
		d := doc.clone()
		d.Epoch = uint64(m + 2)
		if next == 0 {
			d.Shards[0].Slots = [][2]int{{0, 5460}, {12000, 13999}}
			d.Shards[2].Slots = [][2]int{{10923, 11999}, {14000, 16383}}
		}
		if m == 0 {
			b, err := json.Marshal(d)
			require.NoError(t, err)
			err = cs[owner].Do(ctx, "CLUSTER", "SETTOPOLOGY", string(b)).Err()
			assert.EqualError(t, err, "ERR Can't assign hashslot 13438 to a different node while I still hold keys for this hash slot.",
				"raw SETTOPOLOGY to the old owner while it holds %s", key)
			assert.Equal(t, "1", clClusterInfo(t, cs[owner])["cluster_current_epoch"], "the refused SETTOPOLOGY changed the epoch")
		}
		clApplyOK(t, d)
		r, err := clThrottle(ctx, cs[next], key, 1, 1, 3600)
		require.NoError(t, err)
		if r[0] != 1 {
			fresh = append(fresh, fmt.Sprintf("move %d (node %d -> node %d): %s got %v", m+1, owner+1, next+1, key, r))
		}
		assert.Equal(t, int64(0), cs[owner].Exists(ctx, key).Val(), "move %d: the old owner node %d still holds %s", m+1, owner+1, key)
		assert.Equal(t, int64(0), cs[owner].ClusterCountKeysInSlot(ctx, 13438).Val(), "move %d: the old owner node %d still holds keys of slot 13438", m+1, owner+1)
		owner = next
	}
	mvNoOpenSlots(t, cs)
	t.Logf("first call on the new owner right after apply returned: %d of %d moves gave an exhausted key a fresh burst", len(fresh), moves)
	assert.Empty(t, fresh, "keys exhausted on the old owner were allowed on the new owner right after `cluster apply` acknowledged the move")
}

// ---------------------------------------------------------------------------
// 5. Epochs: unassigned slots are CLUSTERDOWN; stale and equal epochs refused
// ---------------------------------------------------------------------------

func TestClusterStaleEpochRejected(t *testing.T) {
	nodes := clStartNodes(t, 3)
	cs := clClients(t, nodes)
	ctx := ctxT(t, 30*time.Second)
	full := clInit(t, nodes, 1)

	// Epoch 1 leaves [16000, 16383] unassigned.
	partial := full.clone()
	partial.Shards[2].Slots = [][2]int{{10923, 15999}}
	file1 := clApplyOK(t, partial)
	unassigned := clKeysInSlots("ua:", 1, func(s int) bool { return s >= 16000 })[0]
	for i, c := range cs {
		info := clClusterInfo(t, c)
		assert.Equal(t, "fail", info["cluster_state"], "node %d with unassigned slots", i+1)
		assert.Equal(t, "16000", info["cluster_slots_assigned"], "node %d", i+1)
		_, err := clThrottle(ctx, c, unassigned, 1, 1, 60)
		assert.EqualError(t, err, "CLUSTERDOWN Hash slot not served", "node %d, key %s in slot %d", i+1, unassigned, clSlot(unassigned))
	}
	// A key in an assigned slot still works on its owner.
	k := clKeysInSlots("ok:", 1, func(s int) bool { return partial.owner(s) == 0 })[0]
	_, err := clThrottle(ctx, cs[0], k, 1, 1, 60)
	require.NoError(t, err)

	// Epoch 2 covers everything.
	full.Epoch = 2
	file2 := clApplyOK(t, full)
	for i, c := range cs {
		info := clClusterInfo(t, c)
		assert.Equal(t, "ok", info["cluster_state"], "node %d", i+1)
		assert.Equal(t, "2", info["cluster_current_epoch"], "node %d", i+1)
	}
	wantSlots := clWantSlots(full)

	// Re-applying epoch 2 (equal, the same layout) is a no-op that
	// succeeds; epoch 1 (older) is refused before anything is sent, with
	// the epoch to write above.
	out, errOut, code := clApply(t, file2)
	assert.Equal(t, 0, code, "cluster apply of epoch 2 over epoch 2 (the same document); stdout:\n%s\nstderr:\n%s", out, errOut)
	out, errOut, code = clApply(t, file1)
	assert.Equal(t, 1, code, "cluster apply of epoch 1 over epoch 2: exit status; stdout:\n%s\nstderr:\n%s", out, errOut)
	assert.Contains(t, out+errOut, "is at epoch 2: write the document with an epoch above 2", "cluster apply of epoch 1 over epoch 2")
	for i, c := range cs {
		assert.Equal(t, "2", clClusterInfo(t, c)["cluster_current_epoch"], "node %d keeps epoch 2", i+1)
	}

	// A stale document that would move everything to node 1 changes nothing.
	grab := full.clone()
	grab.Epoch = 1
	grab.Shards[0].Slots = [][2]int{{0, 16383}}
	grab.Shards[1].Slots = [][2]int{}
	grab.Shards[2].Slots = [][2]int{}
	b, err := json.Marshal(grab)
	require.NoError(t, err)
	for i, c := range cs {
		err := c.Do(ctx, "CLUSTER", "SETTOPOLOGY", string(b)).Err()
		assert.EqualError(t, err, "ERR topology epoch 1 is not newer than the current epoch 2", "node %d", i+1)
		info := clClusterInfo(t, c)
		assert.Equal(t, "2", info["cluster_current_epoch"], "node %d keeps epoch 2", i+1)
		assert.Equal(t, wantSlots, clSlots(t, c), "node %d keeps its slots", i+1)
	}
	assert.Equal(t, int64(1), cs[0].Exists(ctx, k).Val(), "node 1 kept its key")

	// An invalid document is refused without touching the topology.
	err = cs[0].Do(ctx, "CLUSTER", "SETTOPOLOGY", `{"epoch": 9, "shards": []}`).Err()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "ERR invalid topology")
	assert.Equal(t, "2", clClusterInfo(t, cs[0])["cluster_current_epoch"])

	// A node that is down makes apply fail before anything changes, and it
	// says which one.
	require.Equal(t, 0, nodes[2].Stop())
	full.Epoch = 3
	out, errOut, code = clApply(t, clWriteDoc(t, full), "--timeout", "2s")
	assert.Equal(t, 1, code, "cluster apply with node 3 down; stdout:\n%s\nstderr:\n%s", out, errOut)
	assert.Contains(t, out, full.Shards[2].Primary.addr()+" "+full.Shards[2].Primary.ID+" error: ", "the line of node 3 (down)")
	assert.Contains(t, errOut, "nothing was changed")
	for i := 0; i < 2; i++ {
		assert.Equal(t, "2", clClusterInfo(t, cs[i])["cluster_current_epoch"], "node %d stays at epoch 2 while node 3 is down", i+1)
	}
}

// TestClusterApplyWithPassword: under --requirepass, SETTOPOLOGY needs an
// authenticated connection; `cluster apply --password` provides it.
func TestClusterApplyWithPassword(t *testing.T) {
	nodes := clStartNodes(t, 3, "--requirepass", "s3cret")
	doc := clInit(t, nodes, 1)
	file := clWriteDoc(t, doc)
	out, _, code := clApply(t, file)
	assert.Equal(t, 1, code, "apply without --password must fail:\n%s", out)
	for _, line := range strings.Split(strings.TrimRight(out, "\n"), "\n") {
		assert.Contains(t, line, "error: NOAUTH", "apply without password")
	}
	clApplyOK(t, doc, "--password", "s3cret")
	rdb := clClusterClient(t, nodes, func(o *redis.ClusterOptions) { o.Password = "s3cret" })
	ctx := ctxT(t, 10*time.Second)
	for i := 0; i < 30; i++ {
		_, err := clThrottle(ctx, rdb, fmt.Sprint("pw:", i), 5, 1, 60)
		require.NoError(t, err)
	}
	var cs []*redis.Client
	var n int64
	for _, s := range nodes {
		c := s.Client(t, func(o *redis.Options) { o.Password = "s3cret" })
		cs = append(cs, c)
		n += c.DBSize(ctx).Val()
	}
	assert.Equal(t, int64(30), n)

	// Unauthenticated connections may not change the topology.
	err := nodes[0].Client(t).Do(ctx, "CLUSTER", "SETTOPOLOGY", "{}").Err()
	require.Error(t, err)
	assert.True(t, strings.HasPrefix(err.Error(), "NOAUTH"), err.Error())

	// A move between password-protected nodes carries the state too: user123
	// (slot 13438) is exhausted on node 3, then [10923, 16383] goes to node 2.
	for i := 0; i < 2; i++ {
		_, err := clThrottle(ctx, rdb, "user123", 0, 1, 3600)
		require.NoError(t, err)
	}
	tat := cs[2].Get(ctx, "user123").Val()
	require.NotEmpty(t, tat)
	doc2 := doc.clone()
	doc2.Epoch = 2
	doc2.Shards[1].Slots = [][2]int{{5461, 16383}}
	doc2.Shards[2].Slots = [][2]int{}
	clApplyOK(t, doc2, "--password", "s3cret")
	assert.Eventually(t, func() bool { return cs[1].Get(ctx, "user123").Val() == tat }, 3*time.Second, 10*time.Millisecond,
		"user123's state did not reach node 2 (the new owner) under --requirepass")
	r, err := clThrottle(ctx, rdb, "user123", 0, 1, 3600)
	require.NoError(t, err)
	assert.Equal(t, int64(1), r[0], "user123 on node 2 after the move: %v", r)
	assert.Equal(t, int64(0), cs[2].DBSize(ctx).Val(), "node 3 owns nothing at epoch 2")
}

// ---------------------------------------------------------------------------
// 6. Restart: a node keeps its topology and its keys
// ---------------------------------------------------------------------------

func TestClusterRestartKeepsTopologyAndKeys(t *testing.T) {
	base := t.TempDir()
	dirs := []string{filepath.Join(base, "n1"), filepath.Join(base, "n2"), filepath.Join(base, "n3")}
	var nodes []*server
	for _, d := range dirs {
		nodes = append(nodes, startServer(t, "--cluster", "yes", "--data-dir", d))
	}
	doc := clInit(t, nodes, 1)
	clApplyOK(t, doc)
	rdb := clClusterClient(t, nodes)
	ctx := ctxT(t, 60*time.Second)

	keys := make([]string, 300)
	for i := range keys {
		keys[i] = fmt.Sprint("rs:", i)
		for j := 0; j <= i%4; j++ {
			_, err := clThrottle(ctx, rdb, keys[i], 10, 1, 3600)
			require.NoError(t, err)
		}
	}

	// Epoch 2: node 1 gives [0, 999] to node 2; those keys move there.
	doc2 := doc.clone()
	doc2.Epoch = 2
	doc2.Shards[0].Slots = [][2]int{{1000, 5460}}
	doc2.Shards[1].Slots = [][2]int{{0, 999}, {5461, 10922}}
	clApplyOK(t, doc2)

	c1 := nodes[0].Client(t)
	// A key exhausted on node 1 after the move (so no state transfer is involved).
	exKey := clKeysInSlots("ex:", 1, func(s int) bool { return doc2.owner(s) == 0 })[0]
	for i := 0; i < 3; i++ {
		_, err := clThrottle(ctx, c1, exKey, 1, 1, 3600)
		require.NoError(t, err)
	}
	droppedSlots := map[int]bool{} // slots node 1 gave away, with keys
	var movedAway []string
	type state struct {
		tat  string
		pttl time.Duration
	}
	kept := map[string]state{}
	for _, k := range append([]string{exKey}, keys...) {
		s := clSlot(k)
		switch {
		case doc.owner(s) == 0 && doc2.owner(s) != 0:
			droppedSlots[s] = true
			movedAway = append(movedAway, k)
		case doc2.owner(s) == 0:
			tat, err := c1.Get(ctx, k).Result()
			require.NoError(t, err, k)
			kept[k] = state{tat, c1.PTTL(ctx, k).Val()}
		}
	}
	require.NotEmpty(t, droppedSlots)
	require.Greater(t, len(kept), 50)
	for s := range droppedSlots {
		require.Equal(t, int64(0), c1.ClusterCountKeysInSlot(ctx, s).Val(), "node 1 gave away slot %d at epoch 2", s)
	}
	c2 := nodes[1].Client(t)
	for _, k := range movedAway {
		require.Equal(t, int64(1), c2.Exists(ctx, k).Val(), "%s moved to node 2 at epoch 2", k)
	}
	dbsize := c1.DBSize(ctx).Val()
	require.Equal(t, int64(len(kept)), dbsize)
	slotsBefore := clSlots(t, c1)
	myID := c1.ClusterMyID(ctx).Val()

	saved, err := os.ReadFile(filepath.Join(dirs[0], "cluster-topology.json"))
	require.NoError(t, err, "the applied topology is saved in the data dir")
	// The file is {"topology": doc, "migrating": ..., "importing": ...}
	// since issue #20 (the bare document before it).
	var savedState struct {
		Topology  *clDoc  `json:"topology"`
		Migrating [][]any `json:"migrating"`
		Importing [][]any `json:"importing"`
	}
	require.NoError(t, json.Unmarshal(saved, &savedState), "%s", saved)
	if assert.NotNil(t, savedState.Topology, "saved topology: %s", saved) {
		assert.Equal(t, doc2, *savedState.Topology, "saved topology")
	}
	assert.Empty(t, savedState.Migrating, "saved migrating slots after the move")
	assert.Empty(t, savedState.Importing, "saved importing slots after the move")

	// SIGTERM, then start again on the same address and data dir.
	stoppedAt := time.Now()
	require.Equal(t, 0, nodes[0].Stop(), "node 1 exit status after SIGTERM")
	n1 := clStartOnPort(t, nodes[0].Port, "--cluster", "yes", "--data-dir", dirs[0])
	c1 = n1.Client(t)
	sinceStop := time.Since(stoppedAt)

	info := clClusterInfo(t, c1)
	assert.Equal(t, "ok", info["cluster_state"], "after restart")
	assert.Equal(t, "2", info["cluster_current_epoch"], "after restart")
	assert.Equal(t, "16384", info["cluster_slots_assigned"], "after restart")
	assert.Equal(t, myID, c1.ClusterMyID(ctx).Val(), "MYID after restart")
	assert.Equal(t, slotsBefore, clSlots(t, c1), "CLUSTER SLOTS after restart")

	// MOVED as at epoch 2: [0, 999] is node 2's, [10923, 16383] node 3's.
	for _, k := range []string{
		clKeysInSlots("m:", 1, func(s int) bool { return s <= 999 })[0],
		clKeysInSlots("m:", 1, func(s int) bool { return 10923 <= s })[0],
	} {
		o := doc2.owner(clSlot(k))
		_, err := clThrottle(ctx, c1, k, 1, 1, 60)
		assert.EqualError(t, err, fmt.Sprintf("MOVED %d %s", clSlot(k), nodes[o].Addr), "after restart, key %s", k)
	}

	// Its keys, with the same TAT; the dropped keys did not come back.
	assert.Equal(t, dbsize, c1.DBSize(ctx).Val(), "DBSIZE after restart")
	for k, want := range kept {
		tat, err := c1.Get(ctx, k).Result()
		if !assert.NoError(t, err, k) {
			continue
		}
		assert.Equal(t, want.tat, tat, "TAT of %s after restart", k)
		pttl := c1.PTTL(ctx, k).Val()
		assert.LessOrEqual(t, pttl, want.pttl, k)
		assert.GreaterOrEqual(t, pttl, want.pttl-sinceStop-time.Second, k)
	}
	for s := range droppedSlots {
		assert.Equal(t, int64(0), c1.ClusterCountKeysInSlot(ctx, s).Val(), "keys of slot %d, moved away before the restart, came back", s)
	}
	r, err := clThrottle(ctx, c1, exKey, 1, 1, 3600)
	require.NoError(t, err)
	assert.Equal(t, int64(1), r[0], "%s was exhausted before the restart: %v", exKey, r)

	// The restarted node remembers epoch 2: applying the same document
	// again is a no-op that succeeds, an older epoch is refused.
	out, errOut, code := clApply(t, clWriteDoc(t, doc2))
	assert.Equal(t, 0, code, "re-applying epoch 2 after the restart: stdout:\n%s\nstderr:\n%s", out, errOut)
	assert.NotRegexp(t, `(?m)^moved [1-9]`, out, "re-applying the current document moves nothing")
	b1, err := json.Marshal(doc)
	require.NoError(t, err)
	assert.EqualError(t, c1.Do(ctx, "CLUSTER", "SETTOPOLOGY", string(b1)).Err(), "ERR topology epoch 1 is not newer than the current epoch 2")

	// And the cluster works as a whole through a fresh ClusterClient.
	rdb2 := clClusterClient(t, []*server{n1, nodes[1], nodes[2]})
	for _, k := range keys[:50] {
		_, err := clThrottle(ctx, rdb2, k, 10, 1, 3600)
		require.NoError(t, err, k)
	}
}

// ---------------------------------------------------------------------------
// 7. --cluster emulated: one node owning every slot
// ---------------------------------------------------------------------------

func TestClusterEmulated(t *testing.T) {
	s := startServer(t, "--cluster", "emulated", "--in-memory")
	c := s.Client(t)
	ctx := ctxT(t, 30*time.Second)
	id := clNodeID("127.0.0.1", s.Port)

	assert.Equal(t, []redis.ClusterSlot{{Start: 0, End: 16383, Nodes: []redis.ClusterNode{{ID: id, Addr: s.Addr}}}}, clSlots(t, c), "CLUSTER SLOTS")
	assert.Equal(t, id, c.ClusterMyID(ctx).Val())
	assert.Equal(t, fmt.Sprintf("%s %s@%d myself,master - 0 0 1 connected 0-16383\n", id, s.Addr, s.Port+10000), c.ClusterNodes(ctx).Val())
	info := clClusterInfo(t, c)
	assert.Equal(t, "ok", info["cluster_state"])
	assert.Equal(t, "16384", info["cluster_slots_assigned"])
	assert.Equal(t, "1", info["cluster_known_nodes"])
	assert.Equal(t, "emulated", clInfo(t, c, "cluster", "cluster_mode"))
	assert.EqualError(t, c.Del(ctx, "a", "b").Err(), "CROSSSLOT Keys in request don't hash to the same slot")
	err := c.Do(ctx, "CLUSTER", "SETTOPOLOGY", `{"epoch":5,"shards":[]}`).Err()
	require.Error(t, err, "SETTOPOLOGY in emulated mode")
	assert.True(t, strings.HasPrefix(err.Error(), "ERR "), err.Error())

	rdb := clClusterClient(t, []*server{s})
	for i := 0; i < 50; i++ {
		k := fmt.Sprint("emu:", i)
		for j := int64(0); j < 4; j++ {
			r, err := clThrottle(ctx, rdb, k, 2, 1, 3600)
			require.NoError(t, err, k)
			if j < 3 {
				assert.Equal(t, []int64{0, 3, 2 - j, -1}, r[:4], "%s call %d", k, j+1)
			} else {
				assert.Equal(t, []int64{1, 3, 0}, r[:3], "%s call %d", k, j+1)
			}
		}
	}
	assert.Equal(t, int64(50), c.DBSize(ctx).Val())
	assert.Equal(t, int64(0), clMoved(t, c))

	// --cluster no (the default) refuses CLUSTER.
	plain := startServer(t, "--in-memory").Client(t)
	assert.EqualError(t, plain.ClusterInfo(ctx).Err(), "ERR This instance has cluster support disabled")
	assert.Equal(t, "0", clInfo(t, plain, "cluster", "cluster_enabled"))
}

// ---------------------------------------------------------------------------
// 8. ioredis (npm): Cluster against emulated and yes modes
// ---------------------------------------------------------------------------

// clNpmInstall installs tests/ioredis's pinned dependencies into its own
// node_modules (npm ci, from package-lock.json) unless they are there.
// clRunJSON runs a client script (bin script cfg-as-JSON in dir), which
// must exit 0 and print JSON, decoded into res.
func clRunJSON(t *testing.T, dir, bin, script string, cfg, res any) {
	t.Helper()
	b, err := json.Marshal(cfg)
	require.NoError(t, err)
	out, errOut, code := clRun(t, 60*time.Second, dir, bin, script, string(b))
	require.Equal(t, 0, code, "%s %s: stdout:\n%s\nstderr:\n%s", bin, script, out, errOut)
	require.NoError(t, json.Unmarshal([]byte(out), res), "%s printed:\n%s\nstderr:\n%s", script, out, errOut)
}

// nodePackage returns node's path and the absolute path of the Node.js
// test package pkg under tests/, its pinned npm packages installed; it
// skips the test, loudly, without node and npm.
func nodePackage(t *testing.T, pkg string) (node, dir string) {
	t.Helper()
	node, err1 := exec.LookPath("node")
	npm, err2 := exec.LookPath("npm")
	if err1 != nil || err2 != nil {
		t.Skipf("!!! node/npm not installed: %s NOT RUN (apt-get install -y nodejs npm) !!!", t.Name())
	}
	// The pinned clients need Node.js 20 (node-redis 6's engines field);
	// an older Debian's nodejs would fail them for its own reasons.
	if v, err := exec.Command(node, "--version").Output(); err != nil {
		t.Skipf("!!! node --version failed (%v): %s NOT RUN !!!", err, t.Name())
	} else if major, _, _ := strings.Cut(strings.TrimPrefix(strings.TrimSpace(string(v)), "v"), "."); atoiOr0(major) < 20 {
		t.Skipf("!!! node %s is older than 20: %s NOT RUN (install Node.js 20 or later) !!!", strings.TrimSpace(string(v)), t.Name())
	}
	dir, err := filepath.Abs(pkg)
	require.NoError(t, err)
	clNpmInstall(t, dir, npm)
	return node, dir
}

func clNpmInstall(t *testing.T, dir, npm string) {
	t.Helper()
	var pkg struct {
		Dependencies map[string]string `json:"dependencies"`
	}
	b, err := os.ReadFile(filepath.Join(dir, "package.json"))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &pkg))
	installed := true
	for name, version := range pkg.Dependencies {
		var got struct {
			Version string `json:"version"`
		}
		b, err := os.ReadFile(filepath.Join(dir, "node_modules", name, "package.json"))
		if err != nil || json.Unmarshal(b, &got) != nil || got.Version != version {
			installed = false
		}
	}
	if installed {
		return
	}
	start := time.Now()
	out, errOut, code := clRun(t, 3*time.Minute, dir, npm, "ci", "--no-audit", "--no-fund", "--loglevel=error")
	require.Equal(t, 0, code, "npm ci in %s failed:\n%s\n%s", dir, out, errOut)
	t.Logf("npm ci in %s took %v", dir, time.Since(start).Round(time.Millisecond))
}

func TestClusterIORedis(t *testing.T) {
	node, dir := nodePackage(t, "ioredis")

	emu := startServer(t, "--cluster", "emulated", "--in-memory")
	nodes, doc := clCluster(t)
	emuDoc := clDoc{Epoch: 1, Shards: []clShard{{Slots: [][2]int{{0, 16383}}, Primary: clNode{Host: "127.0.0.1", Port: emu.Port}}}}

	type result struct {
		Mode    string               `json:"mode"`
		Masters int                  `json:"masters"`
		Ms      int64                `json:"ms"`
		Results map[string][][]int64 `json:"results"`
		Errors  []string             `json:"errors"`
	}
	const nKeys, calls = 30, 3
	for _, target := range []struct {
		name  string
		nodes []*server
		doc   clDoc
	}{{"emulated", []*server{emu}, emuDoc}, {"yes", nodes, doc}} {
		cs := clClients(t, target.nodes)
		for _, mode := range []string{"call", "routed"} {
			var keys []string
			for i := 0; i < nKeys; i++ {
				keys = append(keys, fmt.Sprintf("io:%s:%s:%d", target.name, mode, i))
			}
			cfg, err := json.Marshal(map[string]any{
				"nodes": []map[string]any{{"host": "127.0.0.1", "port": target.nodes[0].Port}},
				"keys":  keys, "calls": calls, "mode": mode, "burst": 15, "count": 30, "period": 60,
			})
			require.NoError(t, err)
			before := clMovedTotal(t, cs)
			out, errOut, code := clRun(t, 60*time.Second, dir, node, "throttle.js", string(cfg))
			require.Equal(t, 0, code, "node throttle.js (%s, %s): stdout:\n%s\nstderr:\n%s", target.name, mode, out, errOut)
			moved := clMovedTotal(t, cs) - before
			var res result
			require.NoError(t, json.Unmarshal([]byte(out), &res), "throttle.js printed:\n%s\nstderr:\n%s", out, errOut)
			require.Empty(t, res.Errors, "ioredis errors (%s, %s)", target.name, mode)
			assert.Equal(t, len(target.nodes), res.Masters, "masters ioredis found")
			require.Len(t, res.Results, nKeys)
			for _, k := range keys {
				rs := res.Results[k]
				require.Len(t, rs, calls, k)
				for j, r := range rs {
					j := int64(j)
					require.Len(t, r, 5, "%s call %d", k, j+1)
					assert.Equal(t, []int64{0, 16, 15 - j, -1}, r[:4], "%s call %d (%s, %s)", k, j+1, target.name, mode)
					assert.True(t, 1 <= r[4] && r[4] <= 2*(j+1), "%s call %d reset_after %d", k, j+1, r[4])
				}
				o := target.doc.owner(clSlot(k))
				assert.Equal(t, int64(1), cs[o].Exists(ctxT(t, 5*time.Second), k).Val(), "%s stored on its owner", k)
			}
			t.Logf("ioredis 6.0.0, --cluster %s, %-6s: %d CL.THROTTLE calls over %d keys, %d MOVED replies, %d ms",
				target.name, mode, nKeys*calls, nKeys, moved, res.Ms)
			switch {
			case target.name == "emulated":
				assert.Equal(t, int64(0), moved, "emulated mode never redirects")
			case mode == "call":
				// ioredis does not know CL.THROTTLE's key: each call goes to a
				// random master and about 2 in 3 are redirected.
				assert.Positive(t, moved, "ioredis cluster.call sends CL.THROTTLE to a random node, so some calls are redirected")
				assert.LessOrEqual(t, moved, int64(nKeys*calls), "at most one redirect per call")
			default:
				assert.Equal(t, int64(0), moved, "with the slot set on the Command, ioredis must route every call to the owner")
			}
		}
	}
}

// Two nodes hand slots to each other in one topology change, each with one
// event loop (GOMAXPROCS=1). `cluster apply` opens both directions, then
// each node's MOVEKEYS sends its keys to the other, which must serve the
// import while it is itself a source; if either side waited on its only
// event loop for the other, the move would hang until a timeout. The change
// must finish well within the apply timeout, leave no slot open and keep the
// exhausted keys limited.
func TestClusterSwapSlotsBothWays(t *testing.T) {
	t.Setenv("GOMAXPROCS", "1")
	nodes := clStartNodes(t, 2)
	doc := clInit(t, nodes, 1)
	clApplyOK(t, doc)
	rdb := clClusterClient(t, nodes)
	ctx := ctxT(t, 60*time.Second)

	// Node 1 owns [0, 8191], node 2 [8192, 16383]. Epoch 2 swaps
	// [4000, 5999] (to node 2) and [10000, 11999] (to node 1).
	require.Equal(t, [][2]int{{0, 8191}}, doc.Shards[0].Slots)
	a := clKeysInSlots("a:", 20, func(s int) bool { return 4000 <= s && s <= 5999 })
	b := clKeysInSlots("b:", 20, func(s int) bool { return 10000 <= s && s <= 11999 })
	for _, k := range append(append([]string{}, a...), b...) {
		for i, want := range []int64{0, 0, 1} { // burst 2: the third call is limited
			r, err := clThrottle(ctx, rdb, k, 1, 1, 3600)
			require.NoError(t, err, k)
			require.Equal(t, want, r[0], "%s call %d", k, i+1)
		}
	}
	doc2 := doc.clone()
	doc2.Epoch = 2
	doc2.Shards[0].Slots = [][2]int{{0, 3999}, {6000, 8191}, {10000, 11999}}
	doc2.Shards[1].Slots = [][2]int{{4000, 5999}, {8192, 9999}, {12000, 16383}}
	start := time.Now()
	clApplyOK(t, doc2, "--timeout", "20s")
	assert.Less(t, time.Since(start), 10*time.Second, "a slot swap should not wait on push timeouts")

	cs := clClients(t, nodes)
	mvNoOpenSlots(t, cs)
	mvCheckLayout(t, cs, doc2)
	for _, k := range a {
		assert.Equal(t, int64(1), cs[1].Exists(ctx, k).Val(), "%s moved to node 2", k)
	}
	for _, k := range b {
		assert.Equal(t, int64(1), cs[0].Exists(ctx, k).Val(), "%s moved to node 1", k)
	}
	for _, k := range append(append([]string{}, a...), b...) {
		r, err := clThrottle(ctx, rdb, k, 1, 1, 3600)
		require.NoError(t, err, k)
		assert.Equal(t, int64(1), r[0], "%s is still limited after the swap", k)
	}
}

// The new owner of a slot being moved refuses to take it over
// (SETSLOT <slot> NODE <itself>) while the old owner still holds keys of
// it: from then on it would serve those keys afresh while the old owner
// still serves them (redis-server 7.0 accepts it). Once every key moved,
// the flip is accepted on both nodes and the counts carried over.
func TestClusterSetSlotNodeWaitsForTheKeys(t *testing.T) {
	nodes := clStartNodes(t, 2)
	doc := clInit(t, nodes, 1)
	clApplyOK(t, doc)
	cs := clClients(t, nodes)
	ctx := ctxT(t, 30*time.Second)
	tag := "t0"
	for i := 0; clSlot("{"+tag+"}") >= 8192; i++ { // node 1's
		tag = "t" + strconv.Itoa(i)
	}
	slot := clSlot("{" + tag + "}")
	keys := []string{"{" + tag + "}1", "{" + tag + "}2", "{" + tag + "}3", "{" + tag + "}4"}
	for _, k := range keys {
		require.NoError(t, cs[0].Do(ctx, "CL.LIMIT", k, "FW", 100, 3600).Err())
	}
	id1, id2 := clNodeID("127.0.0.1", nodes[0].Port), clNodeID("127.0.0.1", nodes[1].Port)
	require.NoError(t, cs[1].Do(ctx, "CLUSTER", "SETSLOT", slot, "IMPORTING", id1).Err())
	require.NoError(t, cs[0].Do(ctx, "CLUSTER", "SETSLOT", slot, "MIGRATING", id2).Err())
	migrate := func(ks ...string) {
		args := []any{"MIGRATE", "127.0.0.1", nodes[1].Port, "", 0, 5000, "KEYS"}
		for _, k := range ks {
			args = append(args, k)
		}
		require.NoError(t, cs[0].Do(ctx, args...).Err())
	}
	migrate(keys[:2]...)
	err := cs[1].Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", id2).Err()
	require.Error(t, err)
	assert.Equal(t, fmt.Sprintf("ERR slot %d has 2 keys on %s: move them here first (MIGRATE, or CLUSTER MOVEKEYS there)", slot, nodes[0].Addr), err.Error())
	migrate(keys[2:]...)
	require.NoError(t, cs[1].Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", id2).Err())
	require.NoError(t, cs[0].Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", id2).Err())
	for _, k := range keys {
		r, err := cs[1].Do(ctx, "CL.LIMIT", k, "FW", 100, 3600).Slice()
		require.NoError(t, err, k)
		assert.Equal(t, int64(98), r[2], "%s: charged once before the move, once after", k)
	}
}

// atoiOr0 is strconv.Atoi, 0 for what is not a number.
func atoiOr0(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}

// Two nodes move slots to each other at the same time, each with one event
// loop and one store shard (GOMAXPROCS=1), by MOVEKEYS sent to both at once
// (two redis-cli reshards in opposite directions do this). A batch lets its
// shard go while it travels, so each node serves the other's import while
// its own batch waits: both finish at once, where they used to wait for
// each other until the timeout and fail with IOERR.
func TestClusterOppositeMovesAtOnce(t *testing.T) {
	t.Setenv("GOMAXPROCS", "1")
	nodes := clStartNodes(t, 2)
	doc := clInit(t, nodes, 1)
	clApplyOK(t, doc)
	cs := clClients(t, nodes)
	ctx := ctxT(t, 60*time.Second)
	id := []string{clNodeID("127.0.0.1", nodes[0].Port), clNodeID("127.0.0.1", nodes[1].Port)}
	slot := []int{4000, 10000} // node 1's, node 2's
	var keys [2][]string
	for n := range 2 {
		keys[n] = clKeysInSlots(fmt.Sprintf("n%d:", n), 300, func(s int) bool { return s == slot[n] })
		for _, k := range keys[n] {
			require.NoError(t, cs[n].Do(ctx, "CL.THROTTLE", k, 1, 1, 3600).Err())
		}
	}
	for n := range 2 {
		require.NoError(t, cs[1-n].Do(ctx, "CLUSTER", "SETSLOT", slot[n], "IMPORTING", id[n]).Err())
		require.NoError(t, cs[n].Do(ctx, "CLUSTER", "SETSLOT", slot[n], "MIGRATING", id[1-n]).Err())
	}
	start := time.Now()
	var wg sync.WaitGroup
	moved := make([]int64, 2)
	errs := make([]error, 2)
	for n := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			moved[n], errs[n] = cs[n].Do(ctx, "CLUSTER", "MOVEKEYS", id[1-n], 4000).Int64()
		}()
	}
	wg.Wait()
	took := time.Since(start)
	for n := range 2 {
		require.NoError(t, errs[n], "node %d's MOVEKEYS", n+1)
		assert.Equal(t, int64(len(keys[n])), moved[n])
	}
	assert.Less(t, took, 4*time.Second, "the moves waited for each other")
	for n := range 2 {
		for _, k := range keys[n] {
			pipe := cs[1-n].Pipeline() // ASKING and the call on one connection
			pipe.Do(ctx, "ASKING")
			call := pipe.Do(ctx, "CL.THROTTLE", k, 1, 1, 3600)
			_, err := pipe.Exec(ctx)
			require.NoError(t, err, k)
			r, err := call.Int64Slice()
			require.NoError(t, err, k)
			require.Equal(t, int64(0), r[2], "%s: its one call came along", k)
		}
	}
}
