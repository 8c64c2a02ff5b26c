package tests

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// clientRun is what the client scripts print: CL.THROTTLE's replies by
// key, and the errors the client met.
type clientRun struct {
	Results map[string][][]int64 `json:"results"`
	Errors  []string             `json:"errors"`
}

// TestNodeRedisCluster: node-redis 6's createCluster with its default
// options (RESP3, which it never falls back from) finds the three masters
// of a cellserver cluster from one root node and routes CL.THROTTLE to each
// key's owner when the key is given as sendCommand's firstKey.
func TestNodeRedisCluster(t *testing.T) {
	node, dir := nodePackage(t, "noderedis")

	nodes, doc := clCluster(t)
	cs := clClients(t, nodes)
	const nKeys, calls = 30, 3
	var keys []string
	for i := 0; i < nKeys; i++ {
		keys = append(keys, fmt.Sprintf("nrc:%d", i))
	}
	var res struct {
		clientRun
		Masters int                `json:"masters"`
		Get     map[string]*string `json:"get"`
	}
	before := clMovedTotal(t, cs)
	clRunJSON(t, dir, node, "cluster.js", map[string]any{"url": "redis://" + nodes[0].Addr, "keys": keys, "calls": calls}, &res)
	assert.Zero(t, clMovedTotal(t, cs)-before, "with the key as firstKey every call goes to its owner")
	require.Empty(t, res.Errors)
	assert.Equal(t, len(nodes), res.Masters, "masters node-redis found")
	owners := map[int]bool{}
	for _, k := range keys {
		rs := res.Results[k]
		require.Len(t, rs, calls, k)
		for j, r := range rs {
			j := int64(j)
			require.Len(t, r, 5, "%s call %d", k, j+1)
			assert.Equal(t, []int64{0, 16, 15 - j, -1}, r[:4], "%s call %d", k, j+1)
			assert.True(t, 1 <= r[4] && r[4] <= 2*(j+1), "%s call %d reset_after %d", k, j+1, r[4])
		}
		require.NotNil(t, res.Get[k], "GET %s through the cluster", k)
		_, err := strconv.ParseUint(*res.Get[k], 10, 64)
		require.NoError(t, err, "GET is the TAT: %q", *res.Get[k])
		o := doc.owner(clSlot(k))
		owners[o] = true
		assert.Equal(t, int64(1), cs[o].Exists(ctxT(t, 5*time.Second), k).Val(), "%s stored on its owner", k)
	}
	assert.Len(t, owners, len(nodes), "the keys span every node")
}

// TestClusterIORedisPipeline: what the README tells ioredis users is true. An
// ioredis Cluster pipeline of CL.THROTTLE goes to the keys' owner only when
// each command carries cmd.keys = [key] as well as cmd.slot; with the slot
// alone ioredis sends it to a random master.
func TestClusterIORedisPipeline(t *testing.T) {
	node, dir := nodePackage(t, "ioredis")
	nodes, doc := clCluster(t)
	cs := clClients(t, nodes)

	for _, mode := range []string{"keys", "slot"} {
		// With the slot alone each pipeline goes to a random master: 12
		// pipelines all landing on the owner by chance is (1/3)^12.
		calls := 3
		if mode == "slot" {
			calls = 12
		}
		// Keys of one slot, whose owner is not the node the test connects to
		// first, so a pipeline sent to the wrong node shows.
		var keys []string
		for i := 0; len(keys) < 5; i++ {
			k := fmt.Sprintf("{iop:%s:%d}", mode, i)
			if doc.owner(clSlot(k)) == 0 {
				continue
			}
			keys = []string{k}
			for j := 1; j < 5; j++ {
				keys = append(keys, fmt.Sprintf("%s:%d", k, j))
			}
		}
		var res clientRun
		before := clMovedTotal(t, cs)
		clRunJSON(t, dir, node, "pipeline.js", map[string]any{
			"nodes": []map[string]any{{"host": "127.0.0.1", "port": nodes[0].Port}},
			"keys":  keys, "calls": calls, "mode": mode,
		}, &res)
		moved := clMovedTotal(t, cs) - before
		t.Logf("ioredis pipeline, mode %s: %d MOVED replies over %d pipelines, errors %v", mode, moved, calls, res.Errors)
		if mode == "slot" {
			assert.NotZero(t, moved, "with cmd.slot alone the pipeline is not routed to its owner")
			continue
		}
		require.Empty(t, res.Errors)
		assert.Zero(t, moved, "with cmd.keys the pipeline goes to its owner")
		for _, k := range keys {
			rs := res.Results[k]
			require.Len(t, rs, calls, k)
			for j, r := range rs {
				require.Len(t, r, 5)
				assert.Equal(t, []int64{0, 16, 15 - int64(j), -1}, r[:4], "%s call %d", k, j+1)
			}
		}
	}
}

// TestClusterRedisRb: redis-rb's Redis::Cluster (Debian's ruby-redis)
// routes CL.THROTTLE to its key's owner when the command is sent in lower
// case, as COMMAND names it; sent in upper case it reaches a random node and
// costs a MOVED, with the same replies.
func TestClusterRedisRb(t *testing.T) {
	ruby, err := exec.LookPath("ruby")
	if err != nil || exec.Command(ruby, "-e", "require 'redis'").Run() != nil {
		t.Skip("!!! ruby with redis-rb not installed: TestClusterRedisRb NOT RUN (apt-get install -y ruby-redis) !!!")
	}
	dir, err := filepath.Abs("redisrb")
	require.NoError(t, err)
	nodes, _ := clCluster(t)
	cs := clClients(t, nodes)
	for _, name := range []string{"cl.throttle", "CL.THROTTLE"} {
		var keys []string
		for i := 0; i < 30; i++ {
			keys = append(keys, fmt.Sprintf("rb:%s:%d", name, i))
		}
		const calls = 3
		var res clientRun
		before := clMovedTotal(t, cs)
		clRunJSON(t, dir, ruby, "throttle.rb", map[string]any{
			"nodes": []string{"redis://" + nodes[0].Addr}, "keys": keys, "calls": calls, "name": name,
		}, &res)
		moved := clMovedTotal(t, cs) - before
		require.Empty(t, res.Errors, name)
		t.Logf("redis-rb Redis::Cluster, %s: %d MOVED replies over %d calls", name, moved, len(keys)*calls)
		for _, k := range keys {
			rs := res.Results[k]
			require.Len(t, rs, calls, k)
			for j, r := range rs {
				require.Len(t, r, 5)
				assert.Equal(t, []int64{0, 16, 15 - int64(j), -1}, r[:4], "%s call %d", k, j+1)
			}
		}
		if name == "cl.throttle" {
			assert.Zero(t, moved, "lower case: every call goes to its owner")
		} else {
			assert.NotZero(t, moved, "upper case: redis-rb does not find the key")
		}
	}
}
