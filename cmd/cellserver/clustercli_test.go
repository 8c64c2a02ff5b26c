package main

import (
	"bytes"
	"encoding/json"
	"fmt"
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
		{"dump without address", []string{"dump"}, 2, "HOST:PORT is required"},
		{"dump two addresses", []string{"dump", "h:1", "h:2"}, 2, `unexpected argument "h:2"`},
		{"dump bad address", []string{"dump", "h"}, 2, `address "h": want host:port`},
		{"dump zero timeout", []string{"dump", "h:1", "--timeout", "0s"}, 2, "--timeout must be positive"},
		{"dump --help", []string{"dump", "--help"}, 0, "Usage: cellserver cluster dump HOST:PORT"},
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
// node: it answers CLUSTER SETTOPOLOGY with reply and records what it got,
// CLUSTER GETSTATE with states (in turn, the last one repeating; by default
// a node with no topology), CLUSTER MOVEKEYS with moves (in turn, then 0),
// and CLUSTER SETSLOTRANGE with OK. A command starting with a key of refuse
// gets that error instead. Every command (but HELLO and AUTH) is appended
// to log, if set, shared by the fakes of a test to check their order.
type fakeNode struct {
	addr     string
	host     string
	port     int
	password string // if set, AUTH is required
	admin    string // if set, AUTH admin <admin> also logs in
	reply    func(c redcon.Conn)
	states   []string
	moves    []int64
	refuse   map[string]string
	log      *fakeLog

	mu       sync.Mutex
	received []string
	getstate int
	// migrating and importing hold the slots SETSLOTRANGE opened, until
	// a SETTOPOLOGY or STABLE: GETSTATE shows them (apply checks them
	// before its flip), without taking the next of states meanwhile.
	migrating, importing map[int]string
}

// fakeLog is the order in which the fakes of a test got their commands:
// "<port> <command and arguments>", SETTOPOLOGY's payload left out.
type fakeLog struct {
	mu    sync.Mutex
	lines []string
}

func (l *fakeLog) add(line string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, line)
}

func (l *fakeLog) get() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.lines...)
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
	case name == "CLUSTER" && len(cmd.Args) >= 2:
		f.cluster(c, cmd)
	default:
		c.WriteError("ERR unexpected command " + name)
	}
}

func (f *fakeNode) cluster(c redcon.Conn, cmd redcon.Command) {
	var words []string
	for _, a := range cmd.Args {
		words = append(words, string(a))
	}
	sub := strings.ToUpper(words[1])
	line := strings.Join(words, " ")
	if sub == "SETTOPOLOGY" {
		line = "CLUSTER SETTOPOLOGY"
	}
	if f.log != nil {
		f.log.add(strconv.Itoa(f.port) + " " + line)
	}
	for prefix, msg := range f.refuse {
		if strings.HasPrefix(line, prefix) {
			c.WriteError(msg)
			return
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case sub == "SETTOPOLOGY" && len(words) == 3:
		f.received = append(f.received, words[2])
		f.migrating, f.importing = nil, nil
		f.reply(c)
	case sub == "GETSTATE" && len(f.migrating)+len(f.importing) > 0:
		list := func(m map[int]string) string {
			var open []string
			for _, e := range cluster.Sorted(m) {
				open = append(open, fmt.Sprintf("[%d,%q]", e.Slot, e.Peer))
			}
			return "[" + strings.Join(open, ",") + "]"
		}
		c.WriteBulkString(fakeState(f.node().ID, 0, nil, 0, list(f.migrating), list(f.importing)))
	case sub == "GETSTATE":
		if len(f.states) == 0 {
			c.WriteBulkString(fakeState(f.node().ID, 0, nil, 0))
			return
		}
		c.WriteBulkString(f.states[min(f.getstate, len(f.states)-1)])
		f.getstate++
	case sub == "SETSLOTRANGE":
		if len(words) == 6 {
			lo, _ := strconv.Atoi(words[2])
			hi, _ := strconv.Atoi(words[3])
			m := &f.importing
			if strings.EqualFold(words[4], "migrating") {
				m = &f.migrating
			}
			if *m == nil {
				*m = map[int]string{}
			}
			for slot := lo; slot <= hi; slot++ {
				(*m)[slot] = words[5]
			}
		}
		c.WriteString("OK")
	case sub == "MOVEKEYS":
		var n int64
		if len(f.moves) > 0 {
			n, f.moves = f.moves[0], f.moves[1:]
		}
		c.WriteInt64(n)
	default:
		c.WriteError("ERR unexpected command CLUSTER " + sub)
	}
}

// fakeState is a GETSTATE reply: top nil is no topology; open slots are
// given as raw JSON ("migrating":[...],) in extra if needed.
func fakeState(id string, epoch uint64, top *cluster.Topology, orphans int, extra ...string) string {
	doc := "null"
	if top != nil {
		b, err := top.Marshal()
		if err != nil {
			panic(err)
		}
		var c bytes.Buffer
		if err := json.Compact(&c, b); err != nil {
			panic(err)
		}
		doc = c.String()
	}
	migrating, importing := "[]", "[]"
	if len(extra) > 0 {
		migrating = extra[0]
	}
	if len(extra) > 1 {
		importing = extra[1]
	}
	return fmt.Sprintf(`{"id":%q,"epoch":%d,"topology":%s,"migrating":%s,"importing":%s,"orphans":%d,"migrated":0,"imported":0}`,
		id, epoch, doc, migrating, importing, orphans)
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

	t.Run("a node is down: nothing is changed anywhere", func(t *testing.T) {
		path := writeTopology(t, 1, []cluster.Node{ok1.node(), ok2.node()}, []cluster.Node{dead})
		before1, before2 := len(ok1.got()), len(ok2.got())
		code, stdout, stderr := runClusterCLI("apply", "--timeout", "2s", path) // flags first works too
		assert.Equal(t, 1, code)
		assert.Contains(t, stderr, "cellserver cluster apply: nothing was changed: 1 of 3 nodes did not answer CLUSTER GETSTATE")
		assert.True(t, strings.HasPrefix(stdout, dead.Addr()+" "+dead.ID+" error: unreachable: "), stdout)
		assert.Contains(t, stdout, "connection refused")
		assert.Equal(t, 1, strings.Count(stdout, "\n"), "one line, for the node that failed")
		assert.Len(t, ok1.got(), before1)
		assert.Len(t, ok2.got(), before2)
	})

	t.Run("some refuse the topology", func(t *testing.T) {
		path := writeTopology(t, 1,
			[]cluster.Node{ok1.node(), ok2.node()}, // replica ok2
			[]cluster.Node{stale.node()},
			[]cluster.Node{odd.node()})
		code, stdout, stderr := runClusterCLI("apply", "--timeout", "2s", path)
		assert.Equal(t, 1, code)
		assert.Contains(t, stderr, "2 of 4 nodes did not accept epoch 1")
		lines := strings.Split(strings.TrimSuffix(stdout, "\n"), "\n")
		require.Len(t, lines, 4, stdout)
		assert.Equal(t, ok1.addr+" "+ok1.node().ID+" ok", lines[0])
		assert.Equal(t, ok2.addr+" "+ok2.node().ID+" ok", lines[1])
		assert.Equal(t, stale.addr+" "+stale.node().ID+" error: ERR epoch 1 is not newer than the current epoch 5", lines[2])
		assert.Equal(t, odd.addr+" "+odd.node().ID+" error: unexpected reply 1", lines[3])
		assert.Equal(t, compacted(t, path), stale.got()[len(stale.got())-1])
	})

	t.Run("a node at a higher epoch: nothing is sent", func(t *testing.T) {
		ahead := startFake(t, &fakeNode{reply: replyOK})
		ahead.states = []string{fakeState(ahead.node().ID, 5, nil, 0)}
		path := writeTopology(t, 5, []cluster.Node{ok1.node()}, []cluster.Node{ahead.node()})
		before := len(ok1.got())
		code, stdout, stderr := runClusterCLI("apply", path)
		assert.Equal(t, 1, code)
		assert.Empty(t, stdout)
		assert.Contains(t, stderr, "node "+ahead.addr+" is at epoch 5: write the document with an epoch above 5")
		assert.Contains(t, stderr, "nothing was changed")
		assert.Len(t, ok1.got(), before)
		assert.Empty(t, ahead.got())
	})
}

// movePair is two fakes, a owning every slot at epoch 1 and b in a's
// topology with none, and a document at epoch 2 giving b 8192-16383.
func movePair(t *testing.T) (a, b *fakeNode, log *fakeLog, path string) {
	t.Helper()
	log = &fakeLog{}
	a = startFake(t, &fakeNode{reply: replyOK, log: log})
	b = startFake(t, &fakeNode{reply: replyOK, log: log})
	before := &cluster.Topology{Epoch: 1, Shards: []cluster.Shard{
		{Slots: [][2]int{{0, 16383}}, Primary: a.node(), Replicas: []cluster.Node{}},
		{Slots: [][2]int{}, Primary: b.node(), Replicas: []cluster.Node{}},
	}}
	require.NoError(t, before.Validate())
	a.states = []string{fakeState(a.node().ID, 1, before, 0)}
	b.states = []string{fakeState(b.node().ID, 1, before, 0)}
	path = writeTopology(t, 2, []cluster.Node{a.node()}, []cluster.Node{b.node()})
	return a, b, log, path
}

func TestClusterApplyMovesKeys(t *testing.T) {
	a, b, log, path := movePair(t)
	a.moves = []int64{7, 3}
	pa, pb := strconv.Itoa(a.port)+" ", strconv.Itoa(b.port)+" "

	code, stdout, stderr := runClusterCLI("apply", path, "--timeout", "2s")
	require.Equal(t, 0, code, stderr)
	assert.Empty(t, stderr)
	assert.Equal(t,
		a.addr+" "+a.node().ID+" ok\n"+
			b.addr+" "+b.node().ID+" ok\n"+
			"moved 10 keys of 8192 slots from "+a.addr+" to "+b.addr+"\n", stdout)

	// The order that makes the move safe: both GETSTATEs before anything;
	// importing on the destination before migrating on the source; keys
	// moved until none are left; the destination flipped first.
	var order []string
	for _, l := range log.get() {
		if !strings.HasSuffix(l, "GETSTATE") {
			order = append(order, l)
		}
	}
	assert.Equal(t, []string{
		pb + "CLUSTER SETSLOTRANGE 8192 16383 IMPORTING " + a.node().ID,
		pa + "CLUSTER SETSLOTRANGE 8192 16383 MIGRATING " + b.node().ID,
		pa + "CLUSTER MOVEKEYS " + b.node().ID + " 2000",
		pa + "CLUSTER MOVEKEYS " + b.node().ID + " 2000",
		pa + "CLUSTER MOVEKEYS " + b.node().ID + " 2000",
		pb + "CLUSTER SETTOPOLOGY",
		pa + "CLUSTER SETTOPOLOGY",
	}, order)
	all := log.get()
	require.Len(t, all, 7+8, all) // preflight, after the flip, at the end: 2 each; both before the flip
	for _, l := range all[:2] {
		assert.True(t, strings.HasSuffix(l, "GETSTATE"), l)
	}
	assert.Equal(t, pa+"CLUSTER GETSTATE", all[7], "the source's slots are checked still open just before the flip")
}

func TestClusterApplyStops(t *testing.T) {
	t.Run("the source refuses to open: the destination is closed again", func(t *testing.T) {
		a, b, log, path := movePair(t)
		a.refuse = map[string]string{"CLUSTER SETSLOTRANGE": "ERR I'm not the owner of hash slot 8192"}
		code, stdout, stderr := runClusterCLI("apply", path)
		assert.Equal(t, 1, code)
		assert.Equal(t, a.addr+" "+a.node().ID+" error: CLUSTER SETSLOTRANGE 8192 16383 MIGRATING: ERR I'm not the owner of hash slot 8192\n", stdout)
		assert.Contains(t, stderr, "could not open slots 8192-16383 from "+a.addr+" to "+b.addr+"; no keys were moved")
		assert.Contains(t, log.get(), strconv.Itoa(b.port)+" CLUSTER SETSLOTRANGE 8192 16383 STABLE")
		assert.Empty(t, a.got())
		assert.Empty(t, b.got())
	})

	t.Run("a move fails: no flip, the slots stay open", func(t *testing.T) {
		a, b, log, path := movePair(t)
		a.refuse = map[string]string{"CLUSTER MOVEKEYS": "ERR moved 200 keys, then " + b.addr + ": i/o timeout"}
		code, stdout, stderr := runClusterCLI("apply", path)
		assert.Equal(t, 1, code)
		assert.Equal(t, a.addr+" "+a.node().ID+" error: CLUSTER MOVEKEYS to "+b.addr+": ERR moved 200 keys, then "+b.addr+": i/o timeout\n", stdout)
		assert.Contains(t, stderr, "the slots stay open and served; run apply again to resume")
		assert.Empty(t, a.got())
		assert.Empty(t, b.got())
		assert.NotContains(t, log.get(), strconv.Itoa(b.port)+" CLUSTER SETSLOTRANGE 8192 16383 STABLE")
	})

	t.Run("the destination refuses the flip: the source is not sent it", func(t *testing.T) {
		a, b, _, path := movePair(t)
		b.reply = replyStale
		code, stdout, stderr := runClusterCLI("apply", path)
		assert.Equal(t, 1, code)
		assert.Equal(t,
			a.addr+" "+a.node().ID+" error: not sent: a node of an earlier group refused\n"+
				b.addr+" "+b.node().ID+" error: ERR epoch 1 is not newer than the current epoch 5\n", stdout)
		assert.Contains(t, stderr, "2 of 2 nodes did not accept epoch 2")
		assert.Empty(t, a.got())
	})
}

func TestClusterApplyOrphans(t *testing.T) {
	a, b, log, path := movePair(t)
	doc, err := cluster.Parse([]byte(compacted(t, path)))
	require.NoError(t, err)
	// After the flip b reports 4 orphans; after MOVEKEYS ORPHANS, none.
	b.states = append(b.states, fakeState(b.node().ID, 2, doc, 4), fakeState(b.node().ID, 2, doc, 0))
	b.moves = []int64{4}
	code, stdout, stderr := runClusterCLI("apply", path)
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stdout, "moved 4 orphan keys from "+b.addr+" to "+a.addr+"\n")
	assert.Contains(t, log.get(), strconv.Itoa(b.port)+" CLUSTER MOVEKEYS "+a.node().ID+" 5000 ORPHANS")

	// Orphans that stay are reported.
	a, b, _, path = movePair(t)
	b.states = append(b.states, fakeState(b.node().ID, 2, doc, 4))
	a.states = append(a.states, fakeState(a.node().ID, 2, doc, 0, `[[8192,"`+b.node().ID+`"]]`))
	code, stdout, stderr = runClusterCLI("apply", path)
	assert.Equal(t, 1, code)
	assert.Contains(t, stdout, b.addr+" "+b.node().ID+" error: 4 orphan keys left\n")
	assert.Contains(t, stdout, a.addr+" "+a.node().ID+" error: slots still open: [8192->-"+b.node().ID+"]\n")
	assert.Contains(t, stderr, "epoch 2 is applied, but 2 of 2 nodes are not settled")
}

func TestClusterDump(t *testing.T) {
	a, b, _, _ := movePair(t)
	code, stdout, stderr := runClusterCLI("dump", a.addr)
	require.Equal(t, 0, code, stderr)
	top, err := cluster.Parse([]byte(stdout))
	require.NoError(t, err)
	want, err := top.Marshal()
	require.NoError(t, err)
	assert.Equal(t, string(want), stdout, "the format init prints")
	assert.Equal(t, uint64(1), top.Epoch)
	assert.Equal(t, [][2]int{{0, 16383}}, top.SlotsOf(a.node().ID))
	assert.Empty(t, top.SlotsOf(b.node().ID))

	none := startFake(t, &fakeNode{reply: replyOK})
	code, stdout, stderr = runClusterCLI("dump", none.addr)
	assert.Equal(t, 1, code)
	assert.Empty(t, stdout)
	assert.Contains(t, stderr, "the node has no topology yet")

	code, _, stderr = runClusterCLI("dump", deadAddr(t).Addr(), "--timeout", "1s")
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, "unreachable: ")
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
