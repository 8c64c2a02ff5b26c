package commands

import (
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cellserver/cellserver/cluster"
	"github.com/cellserver/cellserver/cluster/clustertest"
	"github.com/cellserver/cellserver/peer"
)

// twoNodes is a harness for node 127.0.0.1:7001 of a two-node cluster
// (7001 owns slots 0-8191, 7002 the rest); it returns the two node ids.
func twoNodes(t *testing.T) (*harness, string, string) {
	h, ids := clusterOf(t, 2)
	return h, ids[0], ids[1]
}

// clusterOf is a harness for node 127.0.0.1:7001 of an n-node cluster on
// ports 7001... (cluster.Init's even split); it returns the node ids.
func clusterOf(t *testing.T, n int) (*harness, []string) {
	t.Helper()
	h := newHarness(t, Config{Cluster: ClusterConfig{Mode: ClusterYes, Host: "127.0.0.1", Port: 7001}})
	var addrs []string
	for i := range n {
		addrs = append(addrs, fmt.Sprintf("127.0.0.1:%d", 7001+i))
	}
	top, err := cluster.Init(addrs, 1)
	require.NoError(t, err)
	doc, err := top.Marshal()
	require.NoError(t, err)
	require.Equal(t, "+OK\r\n", h.do([]string{"CLUSTER", "SETTOPOLOGY", string(doc)}))
	var ids []string
	for _, sh := range top.Shards {
		ids = append(ids, sh.Primary.ID)
	}
	return h, ids
}

func TestSetSlotErrors(t *testing.T) {
	h, me, other := twoNodes(t)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"CLUSTER", "SETSLOT", "16384", "STABLE"}, ErrBadSlot},
		{[]string{"CLUSTER", "SETSLOT", "x", "STABLE"}, ErrBadSlot},
		{[]string{"CLUSTER", "SETSLOT", "1", "BOGUS"}, ErrSetSlotSyntax},
		{[]string{"CLUSTER", "SETSLOT", "1", "STABLE", "extra"}, ErrSetSlotSyntax},
		{[]string{"CLUSTER", "SETSLOT", "1", "MIGRATING"}, ErrSetSlotSyntax},
		{[]string{"CLUSTER", "SETSLOT", "9000", "MIGRATING", other}, "ERR I'm not the owner of hash slot 9000"},
		{[]string{"CLUSTER", "SETSLOT", "1", "IMPORTING", other}, "ERR I'm already the owner of hash slot 1"},
		{[]string{"CLUSTER", "SETSLOT", "1", "MIGRATING", strings.Repeat("a", 40)}, "ERR I don't know about node " + strings.Repeat("a", 40)},
		{[]string{"CLUSTER", "SETSLOT", "1", "MIGRATING", me}, "ERR Target node is this node"},
		{[]string{"CLUSTER", "SETSLOT", "1", "NODE", "nope"}, "ERR Unknown node nope"},
		{[]string{"CLUSTER", "SETSLOTRANGE", "10", "5", "STABLE"}, ErrBadSlot},
		{[]string{"CLUSTER", "SETSLOTRANGE", "8190", "8193", "MIGRATING", other}, "ERR I'm not the owner of hash slot 8192"},
		{[]string{"CLUSTER", "MOVEKEYS", me, "100"}, "ERR Target node is this node"},
		{[]string{"MIGRATE", "127.0.0.1", "7002", "k", "0", "100", "COPY"}, "ERR MIGRATE COPY is not supported: a limiter key lives on one node"},
		{[]string{"MIGRATE", "127.0.0.1", "7002", "k", "0", "100", "KEYS", "a"}, ErrMigrateKeysArg},
		{[]string{"MIGRATE", "127.0.0.1", "7002", "", "1", "100", "KEYS", "a"}, "ERR Target instance replied with error: ERR DB index is out of range"},
		{[]string{"MIGRATE", "10.9.9.9", "7002", "", "0", "100", "KEYS", "a"}, "ERR MIGRATE target 10.9.9.9:7002 is not a primary of this cluster"},
		{[]string{"MIGRATE", "127.0.0.1", "7002", "", "0", "100", "KEYS", "a", "b"}, ErrCrossSlot},
	} {
		assert.Equal(t, "-"+c.want+"\r\n", h.do(c.args), "%q", c.args)
	}
	// The range refusal changed nothing.
	assert.NotContains(t, h.do([]string{"CLUSTER", "NODES"}), "->-")
}

// TestMigratingSlotServesWhatItHolds: on the source, a key still here is
// served, a missing one is ASKed for on the target, several keys of which
// some moved get TRYAGAIN; the open slot shows in CLUSTER NODES as
// redis-cli reads it; the slot cannot be given up while keys remain.
func TestMigratingSlotServesWhatItHolds(t *testing.T) {
	h, me, other := twoNodes(t)
	held, gone := clustertest.KeyInSlot("held", 5), clustertest.KeyInSlot("gone", 5)
	assert.Equal(t, "*5\r\n:0\r\n", h.do([]string{"CL.THROTTLE", held, "5", "1", "60"})[:8])
	require.Equal(t, "+OK\r\n", h.do([]string{"CLUSTER", "SETSLOT", "5", "migrating", other}))
	require.Equal(t, "+OK\r\n", h.do([]string{"CLUSTER", "SETSLOT", "5", "MIGRATING", other}), "a repeat is OK")
	assert.Contains(t, h.do([]string{"CLUSTER", "NODES"}), me+" 127.0.0.1:7001@17001 myself,master - 0 0 1 connected 0-8191 [5->-"+other+"]\n")
	assert.Equal(t, "*5\r\n:0\r\n", h.do([]string{"CL.THROTTLE", held, "5", "1", "60"})[:8], "held here: served")
	assert.Equal(t, "-ASK 5 127.0.0.1:7002\r\n", h.do([]string{"CL.THROTTLE", gone, "5", "1", "60"}))
	assert.Equal(t, "-ASK 5 127.0.0.1:7002\r\n", h.do([]string{"GET", gone}))
	assert.Equal(t, "-"+ErrTryAgain+"\r\n", h.do([]string{"DEL", held, gone}))
	assert.Equal(t, fmt.Sprintf("-"+peer.ErrHoldsKeys+"\r\n", 5), h.do([]string{"CLUSTER", "SETSLOT", "5", "NODE", other}))
	assert.Contains(t, h.do([]string{"INFO", "cluster"}), "cluster_ask_replies:2\r\ncluster_tryagain_replies:1\r\ncluster_migrating_slots:1\r\n")
	// Closing the move here needs the target to hold none of the slot's
	// keys (else they would start afresh here); a target it cannot ask
	// refuses too.
	assert.Equal(t, "-ERR cannot ask 127.0.0.1:7002 whether it holds keys of the slot: dial tcp 127.0.0.1:7002: connect: connection refused; the slot stays open\r\n",
		h.do([]string{"CLUSTER", "SETSLOT", "5", "STABLE"}))
	assert.Equal(t, "-ASK 5 127.0.0.1:7002\r\n", h.do([]string{"GET", gone}), "still open")
}

// TestImportingSlotNeedsAsking: a slot importing here is served only to the
// command right after ASKING (inside MULTI: until EXEC); any other gets
// MOVED to the owner.
func TestImportingSlotNeedsAsking(t *testing.T) {
	h, me, other := twoNodes(t)
	k := clustertest.KeyInSlot("in", 9000)
	require.Equal(t, "+OK\r\n", h.do([]string{"CLUSTER", "SETSLOT", "9000", "IMPORTING", other}))
	assert.Contains(t, h.do([]string{"CLUSTER", "NODES"}), " [9000-<-"+other+"]\n")
	assert.NotContains(t, h.do([]string{"CLUSTER", "NODES"}), me+" 127.0.0.1:7001@17001 myself,master - 0 0 1 connected 0-8191 9000")
	moved := "-MOVED 9000 127.0.0.1:7002\r\n"
	assert.Equal(t, moved, h.do([]string{"CL.THROTTLE", k, "5", "1", "60"}))
	out := h.do([]string{"ASKING"}, []string{"CL.THROTTLE", k, "5", "1", "60"}, []string{"CL.THROTTLE", k, "5", "1", "60"})
	assert.True(t, strings.HasPrefix(out, "+OK\r\n*5\r\n:0\r\n"), out)
	assert.True(t, strings.HasSuffix(out, moved), "ASKING lasts one command: %q", out)
	out = h.do([]string{"ASKING"}, []string{"MULTI"}, []string{"CL.THROTTLE", k, "5", "1", "60"}, []string{"GET", k}, []string{"EXEC"})
	assert.True(t, strings.HasPrefix(out, "+OK\r\n+OK\r\n+QUEUED\r\n+QUEUED\r\n*2\r\n*5\r\n:0\r\n"), "inside MULTI until EXEC: %q", out)
	assert.Equal(t, moved, h.do([]string{"GET", k}))
	// The slot flips here: served without ASKING, the epoch bumped.
	require.Equal(t, "+OK\r\n", h.do([]string{"CLUSTER", "SETSLOT", "9000", "NODE", me}))
	assert.Contains(t, h.do([]string{"CLUSTER", "NODES"}), me+" 127.0.0.1:7001@17001 myself,master - 0 0 2 connected 0-8191 9000\n")
	assert.Equal(t, "*5\r\n:0\r\n", h.do([]string{"CL.THROTTLE", k, "5", "1", "60"})[:8])
}

// TestSetTopologyRefusesToDropKeys: a document that takes a slot holding
// keys away from this node is refused, with Redis's text, and changes
// nothing: the keys are moved first (CLUSTER MOVEKEYS), never dropped. The
// same document again at the same epoch is OK once applied (a re-run).
func TestSetTopologyRefusesToDropKeys(t *testing.T) {
	h, _, _ := twoNodes(t)
	k := clustertest.KeyInSlot("k", 100)
	h.do([]string{"CL.THROTTLE", k, "5", "1", "60"})
	top, err := cluster.Init([]string{"127.0.0.1:7001", "127.0.0.1:7002"}, 2)
	require.NoError(t, err)
	top.Shards[0].Slots = [][2]int{{101, 8191}}
	top.Shards[1].Slots = [][2]int{{0, 100}, {8192, 16383}}
	require.NoError(t, top.Validate())
	doc, err := top.Marshal()
	require.NoError(t, err)
	assert.Equal(t, fmt.Sprintf("-"+peer.ErrHoldsKeys+"\r\n", 100), h.do([]string{"CLUSTER", "SETTOPOLOGY", string(doc)}))
	assert.Contains(t, h.do([]string{"CLUSTER", "NODES"}), "connected 0-8191\n")
	h.do([]string{"DEL", k})
	assert.Equal(t, "+OK\r\n", h.do([]string{"CLUSTER", "SETTOPOLOGY", string(doc)}))
	assert.Equal(t, "+OK\r\n", h.do([]string{"CLUSTER", "SETTOPOLOGY", string(doc)}), "the same document again")
	assert.Equal(t, "-MOVED 100 127.0.0.1:7002\r\n", h.do([]string{"GET", k}))
}

// TestOpenSlotTransactionsAndAsking: the review's cases. EXEC on the old
// owner checks the transaction's keys together (all here → runs; none →
// ASK; some → TRYAGAIN, nothing run); a refused command consumes ASKING,
// and an ASKING run by EXEC ends with it; slot-moving commands are refused
// inside MULTI; CL.RESET of several keys in an open slot gets TRYAGAIN.
func TestOpenSlotTransactionsAndAsking(t *testing.T) {
	h, _, other := twoNodes(t)
	tag := clustertest.KeyInSlot("t", 77)
	hk, gk := "{"+tag+"}h", "{"+tag+"}g"
	slot := 77
	h.do([]string{"CL.THROTTLE", hk, "5", "1", "60"})
	require.Equal(t, "+OK\r\n", h.do([]string{"CLUSTER", "SETSLOT", strconv.Itoa(slot), "MIGRATING", other}))
	tx := func(keys ...string) string {
		cmds := [][]string{{"MULTI"}}
		for _, k := range keys {
			cmds = append(cmds, []string{"CL.THROTTLE", k, "5", "1", "60"})
		}
		out := h.do(append(cmds, []string{"EXEC"})...)
		return out[strings.LastIndex(out, "QUEUED\r\n")+8:]
	}
	assert.Equal(t, "-"+ErrTryAgain+"\r\n", tx(hk, gk))
	assert.Equal(t, fmt.Sprintf("-ASK %d 127.0.0.1:7002\r\n", slot), tx(gk, "{"+tag+"}x"))
	assert.True(t, strings.HasPrefix(tx(hk), "*1\r\n*5\r\n:0\r\n"), "all here: runs")
	th := h.do([]string{"CL.THROTTLE", hk, "5", "1", "60"})
	assert.Contains(t, th, ":6\r\n:3\r\n", "the refused transactions charged nothing: 6 - 3 calls")

	assert.Equal(t, "-"+ErrTryAgain+"\r\n", h.do([]string{"CL.RESET", hk, gk}))
	assert.Equal(t, "+OK\r\n-ERR Command not allowed inside a transaction\r\n",
		h.do([]string{"MULTI"}, []string{"CLUSTER", "SETSLOT", "1", "STABLE"}))
	h.do([]string{"DISCARD"})

	in := clustertest.KeyInSlot("in", 9000)
	require.Equal(t, "+OK\r\n", h.do([]string{"CLUSTER", "SETSLOT", "9000", "IMPORTING", other}))
	moved := "-MOVED 9000 127.0.0.1:7002\r\n"
	out := h.do([]string{"ASKING"}, []string{"GET"}, []string{"GET", in})
	assert.True(t, strings.HasSuffix(out, moved), "a refused command consumed ASKING: %q", out)
	out = h.do([]string{"MULTI"}, []string{"ASKING"}, []string{"EXEC"}, []string{"GET", in})
	assert.True(t, strings.HasSuffix(out, moved), "ASKING run by EXEC ends with it: %q", out)
}

// TestOpenSlotsCannotBeStranded: the second review's cases. An open slot
// is not re-targeted; NODE to itself of a migrating slot checks the target
// as STABLE does; MOVEKEYS with nothing migrating is an error, not "0
// left"; SETTOPOLOGY refuses a document that gives an open slot to a third
// node; MIGRATE sends keys only where the slot's state sends them; inside
// an EXEC whose keys were all here nothing is redirected.
func TestOpenSlotsCannotBeStranded(t *testing.T) {
	h, ids := clusterOf(t, 3)
	me, b, c := ids[0], ids[1], ids[2]
	ok := "+OK\r\n"
	k5 := clustertest.KeyInSlot("x", 5)
	h.do([]string{"CL.THROTTLE", k5, "5", "1", "60"}) // before slot 5 opens: a new key there would be ASKed for
	assert.Equal(t, "-ERR no slot is migrating to "+b+"\r\n", h.do([]string{"CLUSTER", "MOVEKEYS", b, "100"}))
	require.Equal(t, ok, h.do([]string{"CLUSTER", "SETSLOT", "5", "MIGRATING", b}))
	assert.Equal(t, "-ERR slot 5 is already migrating to "+b+": close that move first (SETSLOT 5 STABLE)\r\n",
		h.do([]string{"CLUSTER", "SETSLOT", "5", "MIGRATING", c}))
	require.Equal(t, ok, h.do([]string{"CLUSTER", "SETSLOT", "9000", "IMPORTING", b}))
	assert.Equal(t, "-ERR slot 9000 is already importing from "+b+": close that move first (SETSLOT 9000 STABLE)\r\n",
		h.do([]string{"CLUSTER", "SETSLOT", "9000", "IMPORTING", c}))
	assert.Contains(t, h.do([]string{"CLUSTER", "SETSLOT", "5", "NODE", me}), "-ERR cannot ask 127.0.0.1:7002 whether it holds keys", "as STABLE")

	// A document giving slot 5 to the third node strands what moved to b.
	top, err := cluster.Init([]string{"127.0.0.1:7001", "127.0.0.1:7002", "127.0.0.1:7003"}, 2)
	require.NoError(t, err)
	top.Shards[0].Slots = [][2]int{{0, 4}, {6, 5460}}
	top.Shards[2].Slots = [][2]int{{5, 5}, {10923, 16383}}
	require.NoError(t, top.Validate())
	doc, err := top.Marshal()
	require.NoError(t, err)
	assert.Equal(t, "-ERR slot 5 is migrating to "+b+": the document must give it to that node or leave both with it open; finish or close that move first\r\n",
		h.do([]string{"CLUSTER", "SETTOPOLOGY", string(doc)}))

	k6 := clustertest.KeyInSlot("m", 6)
	h.do([]string{"CL.THROTTLE", k6, "5", "1", "60"})
	assert.Equal(t, "-ERR slot 6 is not migrating to "+b+" (CLUSTER SETSLOT 6 MIGRATING "+b+" first)\r\n",
		h.do([]string{"MIGRATE", "127.0.0.1", "7002", "", "0", "100", "KEYS", k6}))

	out := h.do([]string{"MULTI"}, []string{"CL.THROTTLE", k5, "5", "1", "60"}, []string{"DEL", k5}, []string{"CL.THROTTLE", k5, "5", "1", "60"}, []string{"EXEC"})
	assert.True(t, strings.HasSuffix(out, "+QUEUED\r\n*3\r\n*5\r\n:0\r\n:6\r\n:4\r\n:-1\r\n:120\r\n:1\r\n*5\r\n:0\r\n:6\r\n:5\r\n:-1\r\n:60\r\n"),
		"a key the transaction deletes and makes again is not redirected: %q", out)

	// IMPORTSTATE names no keys EXEC could check: refused inside MULTI.
	assert.Equal(t, "+OK\r\n-ERR Command not allowed inside a transaction\r\n",
		h.do([]string{"MULTI"}, []string{"CLUSTER", "IMPORTSTATE", k6, "1", "-1"}))
	h.do([]string{"DISCARD"})
	// A target lost for good: STABLE FORCE closes without asking it.
	gone := clustertest.KeyInSlot("gone", 5)
	assert.Equal(t, "-ASK 5 127.0.0.1:7002\r\n", h.do([]string{"GET", gone}))
	assert.Equal(t, ok, h.do([]string{"CLUSTER", "SETSLOT", "5", "STABLE", "FORCE"}))
	assert.Equal(t, "$-1\r\n", h.do([]string{"GET", gone}), "served here again")
}

// silentPeer is a two-node cluster whose other node accepts connections
// and never answers: a harness for node 127.0.0.1:7001, the topology, and
// a hash tag of a slot the node owns ours ("{a}" or "{b}").
func silentPeer(t *testing.T, ours bool) (h *harness, top *cluster.Topology, tag string) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	go func() { // accepts, reads, never answers
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go io.Copy(io.Discard, c)
		}
	}()
	h = newHarness(t, Config{Cluster: ClusterConfig{Mode: ClusterYes, Host: "127.0.0.1", Port: 7001}})
	top, err = cluster.Init([]string{"127.0.0.1:7001", ln.Addr().String()}, 1)
	require.NoError(t, err)
	doc, err := top.Marshal()
	require.NoError(t, err)
	require.Equal(t, "+OK\r\n", h.do([]string{"CLUSTER", "SETTOPOLOGY", string(doc)}))
	want := top.Shards[1].Primary.ID
	if ours {
		want = top.Shards[0].Primary.ID
	}
	tag = "{a}" // slot 15495 or, if that is the other node's, {b}: 3300
	if owner, _ := top.PrimaryOf(cluster.KeySlot([]byte(tag))); owner != want {
		tag = "{b}"
	}
	return h, top, tag
}

// migrateAsync sends MIGRATE of key to the silent peer from a client of
// its own (an admin on loopback, as the harness's) and returns its reply.
func migrateAsync(h *harness, top *cluster.Topology, key string) <-chan string {
	host, port, _ := net.SplitHostPort(top.Shards[1].Primary.Addr())
	remote := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 5556}
	mover := h.srv.NewClient(remote, remote)
	done := make(chan string, 1)
	go func() {
		var out Out
		h.srv.Exec(mover, [][][]byte{{[]byte("MIGRATE"), []byte(host), []byte(port), []byte(""), []byte("0"), []byte("600000"), []byte("KEYS"), []byte(key)}}, &out)
		done <- string(out.B)
	}()
	return done
}

// blackHole is silentPeer where key and tag+"other" (each charged once by
// CL.THROTTLE) are in a slot of this node, migrating to the silent one.
func blackHole(t *testing.T) (h *harness, top *cluster.Topology, key, tag string) {
	h, top, tag = silentPeer(t, true)
	key = tag + "k"
	for _, k := range []string{key, tag + "other"} {
		require.Equal(t, "*5\r\n:0\r\n:11\r\n:10\r\n:-1\r\n:60\r\n", h.do([]string{"CL.THROTTLE", k, "10", "1", "60"}))
	}
	slot := cluster.KeySlot([]byte(key))
	require.Equal(t, "+OK\r\n", h.do([]string{"CLUSTER", "SETSLOT", strconv.Itoa(slot), "MIGRATING", top.Shards[1].Primary.ID}))
	return h, top, key, tag
}

// TestMigrateWaitIsCapped: a MIGRATE to a target that accepts the
// connection and never answers gives up after the node's longest batch
// wait (twice it at most), not after the timeout the client gave; and
// nothing moved.
func TestMigrateWaitIsCapped(t *testing.T) {
	h, top, key, _ := blackHole(t)
	h.srv.node.SetMaxMoveWait(200 * time.Millisecond)
	start := time.Now()
	got := <-migrateAsync(h, top, key)
	took := time.Since(start)
	assert.Equal(t, "-IOERR error or timeout reading to target instance\r\n", got)
	assert.Less(t, took, 5*time.Second, "waited for the client's 10-minute timeout")
	assert.Equal(t, ":1\r\n", h.do([]string{"EXISTS", key}), "a failed batch drops nothing")
}

// TestMigrateLetsTheShardGo: while a batch travels, its keys get TRYAGAIN
// and the shard's other keys are served at once (the batch does not hold
// the shard, nor the event loop that owns it, for the round trip); once
// the batch failed its keys are served again, unchanged.
func TestMigrateLetsTheShardGo(t *testing.T) {
	h, top, key, tag := blackHole(t)
	h.srv.node.SetMaxMoveWait(3 * time.Second)
	done := migrateAsync(h, top, key)
	// The batch is in flight once its key is refused (a peek charges
	// nothing before that).
	require.Eventually(t, func() bool {
		return strings.HasPrefix(h.do([]string{"CL.PEEK", key, "10", "1", "60"}), "-TRYAGAIN")
	}, 2*time.Second, 5*time.Millisecond)
	assert.True(t, strings.HasPrefix(h.do([]string{"CL.THROTTLE", key, "10", "1", "60"}), "-TRYAGAIN"))
	start := time.Now()
	assert.Equal(t, "*5\r\n:0\r\n:11\r\n:9\r\n:-1\r\n:120\r\n", h.do([]string{"CL.THROTTLE", tag + "other", "10", "1", "60"}))
	assert.Less(t, time.Since(start), time.Second, "another key of the shard waited for the batch")
	assert.True(t, strings.HasPrefix(h.do([]string{"CL.LIMIT", tag + "other", "FW", "10", "60", "AND", key, "FW", "10", "60"}), "-TRYAGAIN"))
	select {
	case got := <-done:
		t.Fatalf("MIGRATE returned while the target was silent: %q", got)
	default:
	}
	assert.Equal(t, "-IOERR error or timeout reading to target instance\r\n", <-done)
	assert.Equal(t, "*5\r\n:0\r\n:11\r\n:9\r\n:-1\r\n:120\r\n", h.do([]string{"CL.THROTTLE", key, "10", "1", "60"}),
		"served again, with the one charge it had")
}

// TestExecWaitsForKeysInFlight: a transaction naming a key in flight gets
// TRYAGAIN as a whole, even when the slot is not migrating here (MIGRATE
// sends a key of a slot this node imports back to its owner): none of its
// commands runs. (Found by review: each command was refused alone, after
// those before it had run.)
func TestExecWaitsForKeysInFlight(t *testing.T) {
	h, top, tag := silentPeer(t, false) // the silent node owns the slot
	key, other := tag+"k", tag+"other"
	slot := cluster.KeySlot([]byte(key))
	require.Equal(t, "+OK\r\n", h.do([]string{"CLUSTER", "SETSLOT", strconv.Itoa(slot), "IMPORTING", top.Shards[1].Primary.ID}))
	for _, k := range []string{key, other} {
		require.Equal(t, "+OK\r\n*5\r\n:0\r\n:11\r\n:10\r\n:-1\r\n:60\r\n", h.do([]string{"ASKING"}, []string{"CL.THROTTLE", k, "10", "1", "60"}))
	}
	h.srv.node.SetMaxMoveWait(2 * time.Second)
	done := migrateAsync(h, top, key)
	require.Eventually(t, func() bool {
		return strings.Contains(h.do([]string{"ASKING"}, []string{"CL.PEEK", key, "10", "1", "60"}), "-TRYAGAIN")
	}, 2*time.Second, 5*time.Millisecond)
	got := h.do([]string{"ASKING"}, []string{"MULTI"}, []string{"CL.THROTTLE", other, "10", "1", "60"},
		[]string{"CL.THROTTLE", key, "10", "1", "60"}, []string{"EXEC"})
	assert.True(t, strings.HasSuffix(got, "-TRYAGAIN Multiple keys request during rehashing of slot\r\n"), got)
	// A peek answers as a call of quantity 1 would: charged once, not twice.
	assert.Equal(t, "+OK\r\n*5\r\n:0\r\n:11\r\n:9\r\n:-1\r\n:120\r\n", h.do([]string{"ASKING"}, []string{"CL.PEEK", other, "10", "1", "60"}),
		"no command of the transaction ran")
	assert.Equal(t, "-IOERR error or timeout reading to target instance\r\n", <-done)
}
