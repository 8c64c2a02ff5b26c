package main

import (
	"bytes"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/redcon"

	"github.com/cellserver/cellserver/cluster"
)

func runClusterCLI(args ...string) (code int, stdout, stderr string) {
	var o, e bytes.Buffer
	code = clusterCLI(args, &o, &e)
	return code, o.String(), e.String()
}

func TestClusterInit(t *testing.T) {
	for _, args := range [][]string{
		{"init", "--nodes", "127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003", "--epoch", "4"},
		{"init", "--epoch=4", "--nodes= 127.0.0.1:7001 , 127.0.0.1:7002,127.0.0.1:7003"},
		{"init", "-epoch", "4", "-nodes", "127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003"},
	} {
		code, stdout, stderr := runClusterCLI(args...)
		require.Equal(t, 0, code, stderr)
		assert.Empty(t, stderr)
		top, err := cluster.Parse([]byte(stdout))
		require.NoError(t, err, stdout)
		assert.Equal(t, uint64(4), top.Epoch)
		assert.Equal(t, cluster.SlotCount, top.Covered())
		require.Len(t, top.Shards, 3)
		want := [][2]int{{0, 5460}, {5461, 10922}, {10923, 16383}}
		for i, s := range top.Shards {
			port := 7001 + i
			assert.Equal(t, [][2]int{want[i]}, s.Slots)
			assert.Equal(t, cluster.Node{ID: cluster.NodeID("127.0.0.1", port), Host: "127.0.0.1", Port: port}, s.Primary)
		}
		assert.True(t, strings.HasSuffix(stdout, "}\n"))
	}

	// The default epoch is 1; a single node owns everything.
	code, stdout, _ := runClusterCLI("init", "--nodes", "localhost:6379")
	require.Equal(t, 0, code)
	top, err := cluster.Parse([]byte(stdout))
	require.NoError(t, err)
	assert.Equal(t, uint64(1), top.Epoch)
	assert.Equal(t, [][2]int{{0, 16383}}, top.Shards[0].Slots)
}

func TestClusterUsageErrors(t *testing.T) {
	dir := t.TempDir()
	invalid := filepath.Join(dir, "invalid.json")
	require.NoError(t, os.WriteFile(invalid, []byte(`{"epoch":1,"shards":[]}`), 0o600))
	cases := []struct {
		name   string
		args   []string
		code   int
		stderr string
	}{
		{"no subcommand", nil, 2, "Usage:\n  cellserver cluster init"},
		{"unknown subcommand", []string{"meet"}, 2, `unknown subcommand "meet"`},
		{"help", []string{"help"}, 0, "Usage:"},
		{"--help", []string{"--help"}, 0, "Usage:"},
		{"init without nodes", []string{"init"}, 2, "--nodes is required"},
		{"init nodes without value", []string{"init", "--nodes"}, 2, "flag needs an argument"},
		{"init empty entry", []string{"init", "--nodes", "h:1,,h:2"}, 2, "--nodes has an empty entry"},
		{"init duplicate", []string{"init", "--nodes", "h:1,h:2,h:1"}, 2, "node h:1 is listed twice"},
		{"init no port", []string{"init", "--nodes", "127.0.0.1"}, 2, `address "127.0.0.1": want host:port`},
		{"init bad port", []string{"init", "--nodes", "h:99999"}, 2, "port must be a number in 1..65535"},
		{"init epoch zero", []string{"init", "--nodes", "h:1", "--epoch", "0"}, 2, "epoch must be at least 1"},
		{"init epoch negative", []string{"init", "--nodes", "h:1", "--epoch", "-1"}, 2, "invalid value"},
		{"init epoch above 2^53-1", []string{"init", "--nodes", "h:1", "--epoch", "9007199254740992"}, 2, "epoch must be at most 9007199254740991 (2^53-1)"},
		{"init extra argument", []string{"init", "--nodes", "h:1", "extra"}, 2, `unexpected argument "extra"`},
		{"init unknown flag", []string{"init", "--replicas", "1"}, 2, "flag provided but not defined: -replicas"},
		{"init -h", []string{"init", "-h"}, 0, "Usage: cellserver cluster init"},
		{"apply without file", []string{"apply"}, 2, "FILE is required"},
		{"apply two files", []string{"apply", "a.json", "b.json"}, 2, `unexpected argument "b.json"`},
		{"apply zero timeout", []string{"apply", "a.json", "--timeout", "0s"}, 2, "--timeout must be positive"},
		{"apply bad timeout", []string{"apply", "a.json", "--timeout", "soon"}, 2, "invalid value"},
		{"apply --help", []string{"apply", "--help"}, 0, "Usage: cellserver cluster apply FILE"},
		{"apply missing file", []string{"apply", filepath.Join(dir, "nope.json")}, 1, "no such file"},
		{"apply invalid file", []string{"apply", invalid}, 1, invalid + ": no shards"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, stdout, stderr := runClusterCLI(c.args...)
			assert.Equal(t, c.code, code)
			assert.Empty(t, stdout)
			assert.Contains(t, stderr, c.stderr)
		})
	}
}

// fakeNode is a minimal Redis-protocol server standing in for a cellserver
// node: it answers CLUSTER SETTOPOLOGY with reply and records what it got.
type fakeNode struct {
	addr     string
	host     string
	port     int
	password string // if set, AUTH is required
	admin    string // if set, AUTH admin <admin> also logs in
	reply    func(c redcon.Conn)

	mu       sync.Mutex
	received []string
}

func startFakeNode(t *testing.T, password string, reply func(c redcon.Conn)) *fakeNode {
	t.Helper()
	return startFake(t, &fakeNode{password: password, reply: reply})
}

// startFake serves f (password, admin and reply filled in).
func startFake(t *testing.T, f *fakeNode) *fakeNode {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	f.addr = ln.Addr().String()
	h, p, _ := net.SplitHostPort(f.addr)
	f.host = h
	f.port, _ = strconv.Atoi(p)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = redcon.Serve(ln, f.handle, nil, nil)
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
	})
	return f
}

func (f *fakeNode) handle(c redcon.Conn, cmd redcon.Command) {
	name := strings.ToUpper(string(cmd.Args[0]))
	switch {
	case name == "HELLO": // like a server without RESP3: go-redis falls back
		c.WriteError("ERR unknown command 'HELLO'")
	case name == "AUTH":
		if len(cmd.Args) == 2 && f.password != "" && string(cmd.Args[1]) == f.password ||
			len(cmd.Args) == 3 && f.admin != "" && string(cmd.Args[1]) == "admin" && string(cmd.Args[2]) == f.admin {
			c.SetContext(true)
			c.WriteString("OK")
		} else {
			c.WriteError("WRONGPASS invalid username-password pair or user is disabled.")
		}
	case f.password != "" && c.Context() != true:
		c.WriteError("NOAUTH Authentication required.")
	case name == "CLUSTER" && len(cmd.Args) == 3 && strings.EqualFold(string(cmd.Args[1]), "SETTOPOLOGY"):
		f.mu.Lock()
		f.received = append(f.received, string(cmd.Args[2]))
		f.mu.Unlock()
		f.reply(c)
	default:
		c.WriteError("ERR unexpected command " + name)
	}
}

func (f *fakeNode) got() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.received...)
}

func (f *fakeNode) node() cluster.Node {
	return cluster.Node{ID: cluster.NodeID(f.host, f.port), Host: f.host, Port: f.port}
}

func replyOK(c redcon.Conn)    { c.WriteString("OK") }
func replyStale(c redcon.Conn) { c.WriteError("ERR epoch 1 is not newer than the current epoch 5") }
func replyOdd(c redcon.Conn)   { c.WriteInt(1) }

// deadAddr is a loopback address with nothing listening.
func deadAddr(t *testing.T) cluster.Node {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().(*net.TCPAddr)
	ln.Close()
	return cluster.Node{ID: cluster.NodeID("127.0.0.1", addr.Port), Host: "127.0.0.1", Port: addr.Port}
}

// writeTopology saves shards (primary, replicas...) as an indented document.
func writeTopology(t *testing.T, epoch uint64, shards ...[]cluster.Node) string {
	t.Helper()
	top := &cluster.Topology{Epoch: epoch}
	for i, s := range shards {
		lo, hi := i*cluster.SlotCount/len(shards), (i+1)*cluster.SlotCount/len(shards)-1
		top.Shards = append(top.Shards, cluster.Shard{Slots: [][2]int{{lo, hi}}, Primary: s[0], Replicas: s[1:]})
	}
	require.NoError(t, top.Validate())
	path := filepath.Join(t.TempDir(), "topology.json")
	require.NoError(t, top.Save(path))
	return path
}

func compacted(t *testing.T, path string) string {
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Contains(t, string(data), "\n", "the file is indented")
	var b bytes.Buffer
	require.NoError(t, json.Compact(&b, data))
	return b.String()
}

func TestClusterApply(t *testing.T) {
	ok1 := startFakeNode(t, "", replyOK)
	ok2 := startFakeNode(t, "", replyOK)
	stale := startFakeNode(t, "", replyStale)
	odd := startFakeNode(t, "", replyOdd)
	dead := deadAddr(t)

	t.Run("all nodes accept", func(t *testing.T) {
		path := writeTopology(t, 1, []cluster.Node{ok1.node(), ok2.node()})
		before1, before2 := len(ok1.got()), len(ok2.got())
		code, stdout, stderr := runClusterCLI("apply", path, "--timeout", "2s")
		assert.Equal(t, 0, code, stderr)
		assert.Empty(t, stderr)
		assert.Equal(t,
			ok1.addr+" "+ok1.node().ID+" ok\n"+
				ok2.addr+" "+ok2.node().ID+" ok\n", stdout)
		want := compacted(t, path)
		assert.Equal(t, []string{want}, ok1.got()[before1:])
		assert.Equal(t, []string{want}, ok2.got()[before2:])
		_, err := cluster.Parse([]byte(want))
		assert.NoError(t, err)
	})

	t.Run("some refuse or are down", func(t *testing.T) {
		path := writeTopology(t, 1,
			[]cluster.Node{ok1.node(), ok2.node()}, // replica ok2
			[]cluster.Node{stale.node()},
			[]cluster.Node{dead},
			[]cluster.Node{odd.node()})
		code, stdout, stderr := runClusterCLI("apply", "--timeout", "2s", path) // flags first works too
		assert.Equal(t, 1, code)
		assert.Contains(t, stderr, "3 of 5 nodes did not accept epoch 1")
		lines := strings.Split(strings.TrimSuffix(stdout, "\n"), "\n")
		require.Len(t, lines, 5, stdout)
		assert.Equal(t, ok1.addr+" "+ok1.node().ID+" ok", lines[0])
		assert.Equal(t, ok2.addr+" "+ok2.node().ID+" ok", lines[1])
		assert.Equal(t, stale.addr+" "+stale.node().ID+" error: ERR epoch 1 is not newer than the current epoch 5", lines[2])
		assert.True(t, strings.HasPrefix(lines[3], dead.Addr()+" "+dead.ID+" error: "), lines[3])
		assert.Contains(t, lines[3], "connection refused")
		assert.Equal(t, odd.addr+" "+odd.node().ID+" error: unexpected reply 1", lines[4])
		assert.Equal(t, compacted(t, path), stale.got()[len(stale.got())-1])
	})
}

func TestClusterApplyPassword(t *testing.T) {
	secured := startFakeNode(t, "sekret", replyOK)
	path := writeTopology(t, 2, []cluster.Node{secured.node()})
	prefix := secured.addr + " " + secured.node().ID

	code, stdout, _ := runClusterCLI("apply", path, "--password", "sekret")
	assert.Equal(t, 0, code)
	assert.Equal(t, prefix+" ok\n", stdout)
	assert.Len(t, secured.got(), 1)

	code, stdout, _ = runClusterCLI("apply", path)
	assert.Equal(t, 1, code)
	assert.Equal(t, prefix+" error: NOAUTH Authentication required.\n", stdout)

	code, stdout, _ = runClusterCLI("apply", path, "--password", "wrong")
	assert.Equal(t, 1, code)
	assert.True(t, strings.HasPrefix(stdout, prefix+" error: "), stdout)
	assert.Contains(t, stdout, "WRONGPASS")
	assert.Len(t, secured.got(), 1, "nothing reached the node without the right password")
}

// TestClusterApplyAdminPassword: --admin-password logs in as admin (AUTH
// admin P), which a node requiring a password accepts in its place.
func TestClusterApplyAdminPassword(t *testing.T) {
	secured := startFake(t, &fakeNode{password: "sekret", admin: "adm", reply: replyOK})
	path := writeTopology(t, 2, []cluster.Node{secured.node()})
	prefix := secured.addr + " " + secured.node().ID

	code, stdout, _ := runClusterCLI("apply", path, "--admin-password", "adm")
	assert.Equal(t, 0, code)
	assert.Equal(t, prefix+" ok\n", stdout)
	assert.Len(t, secured.got(), 1)

	code, stdout, _ = runClusterCLI("apply", path, "--admin-password", "sekret", "--password", "sekret")
	assert.Equal(t, 1, code, "the admin password is tried as admin's, not the default user's")
	assert.Contains(t, stdout, prefix+" error: WRONGPASS")
	assert.Len(t, secured.got(), 1)
}
