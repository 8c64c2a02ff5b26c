package tests

// End-to-end tests of issue 15's findings 4 and 8: admin commands (CLUSTER
// SETTOPOLOGY, CLUSTER IMPORTSTATE, DEBUG) need the admin user, or a
// loopback client when no --admin-password is set; topology epochs and
// imported states are bounded; failed AUTHs are slowed down on their own
// connection without holding up others.

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// noPerm is Redis 7.2's reply to a command the user may not run.
func noPerm(user, cmd string) string {
	return "NOPERM User " + user + " has no permissions to run the '" + cmd + "' command"
}

// TestAdminPasswordGuardsClusterCommands: with --admin-password, only a
// connection logged in as admin may change the topology or import state;
// `cluster apply --admin-password` and the nodes' own state pushes do.
func TestAdminPasswordGuardsClusterCommands(t *testing.T) {
	nodes := clStartNodes(t, 2, "--admin-password", "adm1n")
	doc := clInit(t, nodes, 1)
	file := clWriteDoc(t, doc)
	out, _, code := clApply(t, file)
	assert.Equal(t, 1, code, "apply without --admin-password must fail:\n%s", out)
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	require.Len(t, lines, 2, out)
	for i, line := range lines {
		assert.Equal(t, doc.Shards[i].Primary.addr()+" "+doc.Shards[i].Primary.ID+" error: "+noPerm("default", "cluster|getstate"), line)
	}
	clApplyOK(t, doc, "--admin-password", "adm1n")

	// A plain connection, even from loopback: NOPERM, and nothing merged.
	plain := nodes[1].Raw(t)
	doc2 := doc.clone()
	doc2.Epoch = 2
	doc2.Shards[0].Slots = [][2]int{{0, 16383}}
	doc2.Shards[1].Slots = [][2]int{}
	b, err := json.Marshal(doc2)
	require.NoError(t, err)
	assert.Equal(t, string(respErr(noPerm("default", "cluster|settopology"))), string(plain.DoArgs("CLUSTER", "SETTOPOLOGY", string(b))))
	tat := strconv.FormatInt(time.Now().Add(time.Minute).UnixNano(), 10)
	exp := strconv.FormatInt(time.Now().Add(time.Minute).UnixMilli(), 10)
	assert.Equal(t, string(respErr(noPerm("default", "cluster|importstate"))), string(plain.DoArgs("CLUSTER", "IMPORTSTATE", "user123", tat, exp)))
	assert.Equal(t, ":0\r\n", string(plain.DoArgs("EXISTS", "user123")))
	// What cluster clients need stays open to it.
	for _, args := range [][]string{{"SLOTS"}, {"SHARDS"}, {"NODES"}, {"INFO"}, {"MYID"}, {"KEYSLOT", "k"}, {"COUNTKEYSINSLOT", "1"}, {"GETKEYSINSLOT", "1", "1"}} {
		reply := plain.DoArgs(append([]string{"CLUSTER"}, args...)...)
		assert.NotEqual(t, byte('-'), reply[0], "CLUSTER %v: %q", args, reply)
	}
	assert.Equal(t, "3", clInfo(t, nodes[1].Client(t), "stats", "acl_access_denied_cmd"), "apply's SETTOPOLOGY, then these two")

	// The admin user: a wrong password is refused, the right one works.
	admin := nodes[1].Raw(t)
	assert.Equal(t, string(respErr("WRONGPASS invalid username-password pair or user is disabled.")), string(admin.DoArgs("AUTH", "admin", "nope")))
	assert.Equal(t, "+OK\r\n", string(admin.DoArgs("AUTH", "admin", "adm1n")))
	assert.Contains(t, string(admin.DoArgs("CLIENT", "INFO")), " user=admin ")
	assert.Equal(t, ":1\r\n", string(admin.DoArgs("CLUSTER", "IMPORTSTATE", "user123", tat, exp)))
	assert.Equal(t, string(respBulk(tat)), string(plain.DoArgs("GET", "user123")))

	// A move carries state between nodes that require the admin password:
	// user123 (slot 13438, node 2) goes to node 1 with its TAT.
	clApplyOK(t, doc2, "--admin-password", "adm1n")
	c1 := nodes[0].Client(t)
	ctx := ctxT(t, 10*time.Second)
	assert.Eventually(t, func() bool { return c1.Get(ctx, "user123").Val() == tat }, 3*time.Second, 10*time.Millisecond,
		"user123's state did not reach node 1: the push did not log in as admin?\n%s", nodes[1].Output())
	assert.NotContains(t, nodes[1].Output(), "moving key state to the new owner failed")
}

// TestTopologyEpochAndImportBounds: a document with an epoch above 2^53-1
// is refused (the node stays open to later topologies), and IMPORTSTATE
// refuses issue 15's blocking state, leaving the key unblocked.
func TestTopologyEpochAndImportBounds(t *testing.T) {
	nodes := clStartNodes(t, 1)
	doc := clInit(t, nodes, 1)
	c := nodes[0].Raw(t) // loopback, no --admin-password: may run admin commands
	locked := doc.clone()
	locked.Epoch = 1<<64 - 1
	b, err := json.Marshal(locked)
	require.NoError(t, err)
	assert.Equal(t, string(respErr("ERR invalid topology: epoch must be at most 9007199254740991 (2^53-1), got 18446744073709551615")),
		string(c.DoArgs("CLUSTER", "SETTOPOLOGY", string(b))))
	clApplyOK(t, doc)
	doc.Epoch = 9007199254740991
	clApplyOK(t, doc)
	assert.Equal(t, "cluster_current_epoch:9007199254740991", clInfoLine(t, c, "cluster_current_epoch"))

	reply := string(c.DoArgs("CLUSTER", "IMPORTSTATE", "victim", "18446744073709551615", "4611686018427387904"))
	assert.True(t, strings.HasPrefix(reply, "-ERR invalid limiter state for key 'victim': expiry 4611686018427387904 ms is later than "), reply)
	reply = string(c.DoArgs("CLUSTER", "IMPORTSTATE", "victim2", "18446744073709551615", "9223372036854775807"))
	assert.True(t, strings.HasPrefix(reply, "-ERR invalid limiter state for key 'victim2': TAT 18446744073709551615 of a key without expiry is in the future"), reply)
	assert.Equal(t, ":0\r\n", string(c.DoArgs("EXISTS", "victim")))
	assert.Equal(t, ":0\r\n", string(c.DoArgs("EXISTS", "victim2")))
	assert.Equal(t, string(respInts(0, 11, 10, -1, 6)), string(c.DoArgs("CL.THROTTLE", "victim", "10", "10", "60")), "victim is not blocked")
}

// clInfoLine returns the "field:value" line of CLUSTER INFO.
func clInfoLine(t *testing.T, c *rawConn, field string) string {
	t.Helper()
	for _, line := range strings.Split(string(c.DoArgs("CLUSTER", "INFO")), "\r\n") {
		if strings.HasPrefix(line, field+":") {
			return line
		}
	}
	return ""
}

// netnsCounter numbers the namespaces one test process creates.
var netnsCounter atomic.Int32

// netnsClient joins a new network namespace to this host by a veth pair,
// 10.200.K.(4n+1) on the host and 10.200.K.(4n+2) inside, a private /30
// that carries only this test's traffic and never leaves the machine. It
// returns the namespace's address (the clients' address as the server sees
// it) and a function that runs redis-cli inside the namespace against the
// host side (port given as -p) and returns its output without the final
// newlines. Both ends are removed at cleanup.
// Without root, `ip`, network namespaces or redis-cli it skips, saying why.
func netnsClient(t *testing.T) (clientIP string, cli func(args ...string) string) {
	t.Helper()
	const skipping = "SKIPPING the non-loopback client check: "
	if os.Geteuid() != 0 {
		t.Skip(skipping + "network namespaces need root (run the e2e tests as root)")
	}
	ipBin, err := exec.LookPath("ip")
	if err != nil {
		t.Skip(skipping + "`ip` not found (install iproute2; test.sh does)")
	}
	redisCLI, err := exec.LookPath("redis-cli")
	if err != nil {
		t.Skip(skipping + "redis-cli not found (test.sh installs it)")
	}
	n := int(netnsCounter.Add(1)) - 1
	k := os.Getpid() % 250
	name := fmt.Sprintf("cs15-%d-%d", os.Getpid(), n)
	hostIf, nsIf := fmt.Sprintf("cs%dh%d", os.Getpid()%100000, n), fmt.Sprintf("cs%dn%d", os.Getpid()%100000, n)
	hostIP := fmt.Sprintf("10.200.%d.%d", k, 4*n+1)
	nsIP := fmt.Sprintf("10.200.%d.%d", k, 4*n+2)
	ip := func(args ...string) error {
		out, err := exec.Command(ipBin, args...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
		return nil
	}
	if err := ip("netns", "add", name); err != nil {
		t.Skip(skipping + "cannot create a network namespace here (no CAP_SYS_ADMIN?): " + err.Error())
	}
	t.Cleanup(func() {
		_ = ip("link", "del", hostIf) // deletes its peer too
		if err := ip("netns", "del", name); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	for _, args := range [][]string{
		{"link", "add", hostIf, "type", "veth", "peer", "name", nsIf},
		{"link", "set", nsIf, "netns", name},
		{"addr", "add", hostIP + "/30", "dev", hostIf},
		{"link", "set", hostIf, "up"},
		{"netns", "exec", name, ipBin, "addr", "add", nsIP + "/30", "dev", nsIf},
		{"netns", "exec", name, ipBin, "link", "set", nsIf, "up"},
	} {
		require.NoError(t, ip(args...))
	}
	return nsIP, func(args ...string) string {
		t.Helper()
		out, errOut, code := clRun(t, 15*time.Second, "", ipBin, append([]string{"netns", "exec", name, redisCLI, "-h", hostIP}, args...)...)
		require.Equal(t, 0, code, "redis-cli %q in %s: %s", args, name, errOut)
		return strings.TrimRight(out, "\n")
	}
}

// TestAdminCommandsLoopbackOnlyWithoutPassword: with no --admin-password a
// client reaching the node over the network (from a network namespace)
// gets NOPERM for admin commands and may run the rest; loopback clients
// keep every right; with --admin-password the admin user may run admin
// commands from anywhere.
func TestAdminCommandsLoopbackOnlyWithoutPassword(t *testing.T) {
	clientIP, remote := netnsClient(t)
	// Emulated: the node serves every slot, so an import lands (under
	// --cluster yes with no topology applied no slot is served).
	s := startServerOn(t, "0.0.0.0", "--cluster", "emulated", "--in-memory", "--enable-debug-command", "yes")
	port := strconv.Itoa(s.Port)
	tat := strconv.FormatInt(time.Now().Add(time.Minute).UnixNano(), 10)
	exp := strconv.FormatInt(time.Now().Add(time.Minute).UnixMilli(), 10)

	assert.Equal(t, "PONG", remote("-p", port, "PING"))
	assert.Equal(t, clNodeID("0.0.0.0", s.Port), remote("-p", port, "CLUSTER", "MYID"), "read-only CLUSTER subcommands stay open")
	assert.Contains(t, remote("-p", port, "CLIENT", "INFO"), " addr="+clientIP+":", "the client really comes over the veth")
	assert.Equal(t, noPerm("default", "cluster|settopology"), remote("-p", port, "CLUSTER", "SETTOPOLOGY", `{"epoch":2,"shards":[]}`))
	assert.Equal(t, noPerm("default", "cluster|importstate"), remote("-p", port, "CLUSTER", "IMPORTSTATE", "remote-k", tat, exp))
	assert.Equal(t, noPerm("default", "debug"), remote("-p", port, "DEBUG", "CLOCK", "SET", "1"))
	assert.Equal(t, "WRONGPASS invalid username-password pair or user is disabled.", remote("-p", port, "AUTH", "admin", "x"),
		"no admin user without --admin-password")

	local := s.Raw(t)
	assert.Equal(t, ":0\r\n", string(local.DoArgs("DBSIZE")), "the remote IMPORTSTATE merged nothing")
	assert.Equal(t, ":1\r\n", string(local.DoArgs("CLUSTER", "IMPORTSTATE", "local-k", tat, exp)), "loopback clients keep admin rights")
	assert.Equal(t, ":1\r\n", string(local.DoArgs("DBSIZE")))
	assert.Equal(t, "+OK\r\n", string(local.DoArgs("DEBUG", "CLOCK", "REAL")))
	assert.Equal(t, "3", clInfo(t, s.Client(t), "stats", "acl_access_denied_cmd"))

	s2 := startServerOn(t, "0.0.0.0", "--cluster", "emulated", "--in-memory", "--admin-password", "adm1n")
	port2 := strconv.Itoa(s2.Port)
	assert.Equal(t, noPerm("default", "cluster|importstate"), remote("-p", port2, "CLUSTER", "IMPORTSTATE", "k", tat, exp))
	assert.Equal(t, "1", remote("-p", port2, "--user", "admin", "--pass", "adm1n", "--no-auth-warning", "CLUSTER", "IMPORTSTATE", "k", tat, exp))
	assert.Equal(t, string(respErr(noPerm("default", "cluster|importstate"))), string(s2.Raw(t).DoArgs("CLUSTER", "IMPORTSTATE", "k", tat, exp)),
		"with --admin-password loopback alone is not enough")
}

// TestFailedAuthSlowedOnItsConnectionOnly: 11 wrong passwords on one
// connection take at least the sum of the pauses (4 ms, 8 ms, ... 512 ms,
// then 1 s thrice: 4.02 s), while PINGs on another connection of the same event loop
// (--threads 1) are answered at once. A pause on the loop itself would hold
// a PING for up to a second; the bound is half that, for a loaded machine.
func TestFailedAuthSlowedOnItsConnectionOnly(t *testing.T) {
	s := startServer(t, "--requirepass", "pw", "--threads", "1", "--in-memory")
	other := s.Raw(t)
	require.Equal(t, "+OK\r\n", string(other.DoArgs("AUTH", "pw")))
	attacker := s.Raw(t)

	const fails = 11
	var want time.Duration
	for i := range fails {
		want += min(4*time.Millisecond<<i, time.Second)
	}
	require.Equal(t, 4020*time.Millisecond, want)

	var replies []string
	var elapsed time.Duration
	var attackErr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		start := time.Now()
		for range fails {
			_ = attacker.nc.SetDeadline(time.Now().Add(10 * time.Second))
			if _, attackErr = attacker.nc.Write(encodeCommand("AUTH", "wrong")); attackErr != nil {
				return
			}
			var line string
			if line, attackErr = attacker.r.ReadString('\n'); attackErr != nil {
				return
			}
			replies = append(replies, line)
		}
		elapsed = time.Since(start)
	}()
	var worst time.Duration
	pings := 0
	for running := true; running; {
		select {
		case <-done:
			running = false
		case <-time.After(20 * time.Millisecond):
			start := time.Now()
			require.Equal(t, "+PONG\r\n", string(other.DoArgs("PING")))
			worst = max(worst, time.Since(start))
			pings++
		}
	}
	require.NoError(t, attackErr)
	require.Len(t, replies, fails)
	for _, r := range replies {
		assert.Equal(t, string(respErr("WRONGPASS invalid username-password pair or user is disabled.")), r)
	}
	t.Logf("%d wrong AUTHs took %v (pauses sum to %v); %d PINGs on the other connection meanwhile, the slowest %v", fails, elapsed, want, pings, worst)
	assert.GreaterOrEqual(t, elapsed, want, "the failed AUTHs were not slowed down")
	assert.Less(t, worst, 500*time.Millisecond, "a PING on another connection waited for the failing AUTHs")
	assert.Greater(t, pings, 20)
	rdb := s.Client(t, func(o *redis.Options) { o.Password = "pw" })
	assert.Equal(t, strconv.Itoa(fails), clInfo(t, rdb, "stats", "acl_access_denied_auth"))
}
