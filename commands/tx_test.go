package commands

import (
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The texts and shapes below were read from a real redis-server 7.0 with
// the same bytes (tests/tx_test.go compares against one where available).
func TestTxRawReplies(t *testing.T) {
	cases := []struct {
		name string
		cmds [][]string
		want string
	}{
		{"exec without multi", [][]string{{"EXEC"}}, "-ERR EXEC without MULTI\r\n"},
		{"discard without multi", [][]string{{"DISCARD"}}, "-ERR DISCARD without MULTI\r\n"},
		{"unwatch without watch", [][]string{{"UNWATCH"}}, "+OK\r\n"},
		{"empty", [][]string{{"MULTI"}, {"EXEC"}}, "+OK\r\n*0\r\n"},
		{"queued and run", [][]string{{"MULTI"}, {"CL.THROTTLE", "a", "5", "1", "60"}, {"PING"}, {"GET", "a"}, {"EXEC"}},
			"+OK\r\n+QUEUED\r\n+QUEUED\r\n+QUEUED\r\n*3\r\n*5\r\n:0\r\n:6\r\n:5\r\n:-1\r\n:60\r\n+PONG\r\n$19\r\n1700000060000000000\r\n"},
		{"an error inside is an element", [][]string{{"MULTI"}, {"CL.THROTTLE", "a", "x", "1", "60"}, {"CL.THROTTLE", "a", "5", "1", "60"}, {"EXEC"}},
			"+OK\r\n+QUEUED\r\n+QUEUED\r\n*2\r\n-Cell error: Store error: Couldn't parse as integer: x\r\n*5\r\n:0\r\n:6\r\n:5\r\n:-1\r\n:60\r\n"},
		{"nested multi", [][]string{{"MULTI"}, {"MULTI"}, {"PING"}, {"EXEC"}},
			"+OK\r\n-ERR MULTI calls can not be nested\r\n+QUEUED\r\n*1\r\n+PONG\r\n"},
		{"watch inside multi", [][]string{{"MULTI"}, {"WATCH", "x"}, {"PING"}, {"EXEC"}},
			"+OK\r\n-ERR WATCH inside MULTI is not allowed\r\n+QUEUED\r\n*1\r\n+PONG\r\n"},
		{"unknown command", [][]string{{"MULTI"}, {"NOPE", "x"}, {"CL.THROTTLE", "a", "5", "1", "60"}, {"EXEC"}, {"GET", "a"}},
			"+OK\r\n-ERR unknown command 'NOPE', with args beginning with: 'x' \r\n+QUEUED\r\n-EXECABORT Transaction discarded because of previous errors.\r\n$-1\r\n"},
		{"wrong arity", [][]string{{"MULTI"}, {"GET"}, {"CL.THROTTLE", "a", "5", "1", "60"}, {"EXEC"}, {"GET", "a"}},
			"+OK\r\n-ERR wrong number of arguments for 'get' command\r\n+QUEUED\r\n-EXECABORT Transaction discarded because of previous errors.\r\n$-1\r\n"},
		{"unknown subcommand", [][]string{{"MULTI"}, {"CLIENT", "NOSUCH"}, {"EXEC"}},
			"+OK\r\n-ERR unknown subcommand 'NOSUCH'. Try CLIENT HELP.\r\n-EXECABORT Transaction discarded because of previous errors.\r\n"},
		{"exec with arguments", [][]string{{"MULTI"}, {"EXEC", "x"}, {"EXEC"}},
			"+OK\r\n-EXECABORT Transaction discarded because of: wrong number of arguments for 'exec' command\r\n-ERR EXEC without MULTI\r\n"},
		{"discard with arguments", [][]string{{"MULTI"}, {"DISCARD", "x"}, {"EXEC"}},
			"+OK\r\n-ERR wrong number of arguments for 'discard' command\r\n-EXECABORT Transaction discarded because of previous errors.\r\n"},
		{"multi with arguments", [][]string{{"MULTI", "x"}, {"EXEC"}},
			"-ERR wrong number of arguments for 'multi' command\r\n-ERR EXEC without MULTI\r\n"},
		{"watch without keys in multi", [][]string{{"MULTI"}, {"WATCH"}, {"EXEC"}},
			"+OK\r\n-ERR wrong number of arguments for 'watch' command\r\n-EXECABORT Transaction discarded because of previous errors.\r\n"},
		{"discard", [][]string{{"MULTI"}, {"CL.THROTTLE", "a", "5", "1", "60"}, {"DISCARD"}, {"EXEC"}, {"GET", "a"}},
			"+OK\r\n+QUEUED\r\n+OK\r\n-ERR EXEC without MULTI\r\n$-1\r\n"},
		{"after an abort the client is out of multi", [][]string{{"MULTI"}, {"NOPE"}, {"EXEC"}, {"EXEC"}},
			"+OK\r\n-ERR unknown command 'NOPE', with args beginning with: \r\n-EXECABORT Transaction discarded because of previous errors.\r\n-ERR EXEC without MULTI\r\n"},
		{"quit runs at once", [][]string{{"MULTI"}, {"QUIT"}}, "+OK\r\n+OK\r\n"},
		{"unwatch is queued", [][]string{{"WATCH", "a"}, {"MULTI"}, {"UNWATCH"}, {"EXEC"}}, "+OK\r\n+OK\r\n+QUEUED\r\n*1\r\n+OK\r\n"},
		{"cl.limit, keys, scan, del", [][]string{{"MULTI"}, {"CL.LIMIT", "la", "FW", "5", "60", "AND", "lb", "FW", "5", "60"}, {"KEYS", "l*"}, {"DEL", "la", "lb", "lc"}, {"EXISTS", "la"}, {"EXEC"}},
			"+OK\r\n+QUEUED\r\n+QUEUED\r\n+QUEUED\r\n+QUEUED\r\n*4\r\n*7\r\n:0\r\n:5\r\n:4\r\n:-1\r\n:40\r\n:1\r\n*2\r\n*5\r\n:0\r\n:5\r\n:4\r\n:-1\r\n:40\r\n*5\r\n:0\r\n:5\r\n:4\r\n:-1\r\n:40\r\n*2\r\n$2\r\nlb\r\n$2\r\nla\r\n:2\r\n:0\r\n"},
		{"keyspace commands", [][]string{{"CL.THROTTLE", "a", "5", "1", "60"}, {"MULTI"}, {"DBSIZE"}, {"FLUSHALL"}, {"DBSIZE"}, {"EXEC"}},
			"*5\r\n:0\r\n:6\r\n:5\r\n:-1\r\n:60\r\n+OK\r\n+QUEUED\r\n+QUEUED\r\n+QUEUED\r\n*3\r\n:1\r\n+OK\r\n:0\r\n"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, Config{})
			assert.Equal(t, tc.want, h.do(tc.cmds...))
		})
	}
}

// Each command of a pipeline holding a transaction answers as when sent
// one at a time.
func TestTxOnePipelineOrOneAtATime(t *testing.T) {
	cmds := [][]string{{"CL.THROTTLE", "a", "5", "1", "60"}, {"MULTI"}, {"CL.THROTTLE", "a", "5", "1", "60"}, {"NOPE"}, {"EXEC"},
		{"MULTI"}, {"CL.THROTTLE", "b", "5", "1", "60"}, {"GET", "b"}, {"EXEC"}, {"GET", "a"}}
	h := newHarness(t, Config{})
	var each strings.Builder
	for _, c := range cmds {
		each.WriteString(h.do(c))
	}
	h2 := newHarness(t, Config{})
	assert.Equal(t, each.String(), h2.do(cmds...))
}

func TestTxRESP3(t *testing.T) {
	h := newHarness(t, Config{})
	h.cmd("HELLO", "3")
	assert.Equal(t, "+OK\r\n+QUEUED\r\n*1\r\n+PONG\r\n", h.do([]string{"MULTI"}, []string{"PING"}, []string{"EXEC"}))
	h.cmd("WATCH", "w")
	other := h.srv.NewClient(nil, nil)
	var out Out
	h.srv.Exec(other, [][][]byte{{[]byte("CL.THROTTLE"), []byte("w"), []byte("5"), []byte("1"), []byte("60")}}, &out)
	assert.Equal(t, "+OK\r\n+QUEUED\r\n_\r\n", h.do([]string{"MULTI"}, []string{"PING"}, []string{"EXEC"}))
}

// other runs a pipeline as another client.
func (h *harness) other(cmds ...[]string) string {
	c := h.srv.NewClient(&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 5556}, nil)
	defer c.Close()
	saved := h.c
	h.c = c
	defer func() { h.c = saved }()
	return h.do(cmds...)
}

func TestWatch(t *testing.T) {
	throttle := []string{"CL.THROTTLE", "w", "5", "1", "60"}
	cases := []struct {
		name    string
		setup   [][]string // before WATCH
		change  func(h *harness)
		aborted bool
	}{
		{"untouched", nil, func(h *harness) {}, false},
		{"allowed throttle by another client", nil, func(h *harness) { h.other(throttle) }, true},
		{"allowed throttle by the client itself", nil, func(h *harness) { h.cmd(throttle...) }, true},
		{"denied throttle", [][]string{{"CL.THROTTLE", "w", "0", "1", "60"}},
			func(h *harness) { h.other([]string{"CL.THROTTLE", "w", "0", "1", "60"}) }, false},
		{"read", [][]string{throttle}, func(h *harness) { h.other([]string{"GET", "w"}, []string{"PTTL", "w"}) }, false},
		{"another key", nil, func(h *harness) { h.other([]string{"CL.THROTTLE", "v", "5", "1", "60"}) }, false},
		{"del", [][]string{throttle}, func(h *harness) { h.other([]string{"DEL", "w"}) }, true},
		{"cl.reset", [][]string{throttle}, func(h *harness) { h.other([]string{"CL.RESET", "w"}) }, true},
		{"del of a missing key", nil, func(h *harness) { h.other([]string{"DEL", "w"}) }, false},
		{"flushall", [][]string{throttle}, func(h *harness) { h.other([]string{"FLUSHALL"}) }, true},
		{"flushall without the key", nil, func(h *harness) { h.other([]string{"FLUSHALL"}) }, false},
		{"charged cl.limit", nil, func(h *harness) { h.other([]string{"CL.LIMIT", "w", "FW", "5", "60"}) }, true},
		{"expiry", [][]string{throttle}, func(h *harness) { h.srv.clock.Advance(3600e9) }, true},
		{"unwatch", nil, func(h *harness) { h.cmd("UNWATCH"); h.other(throttle) }, false},
		{"discard", nil, func(h *harness) { h.do([]string{"MULTI"}, []string{"DISCARD"}); h.other(throttle) }, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, Config{})
			h.do(tc.setup...)
			require.Equal(t, "+OK\r\n", h.cmd("WATCH", "w", "w"))
			tc.change(h)
			got := h.do([]string{"MULTI"}, []string{"CL.THROTTLE", "x", "5", "1", "60"}, []string{"EXEC"})
			if tc.aborted {
				assert.Equal(t, "+OK\r\n+QUEUED\r\n*-1\r\n", got)
				assert.Equal(t, "$-1\r\n", h.cmd("GET", "x"), "nothing ran")
			} else {
				assert.Equal(t, "+OK\r\n+QUEUED\r\n*1\r\n*5\r\n:0\r\n:6\r\n:5\r\n:-1\r\n:60\r\n", got)
			}
			// EXEC unwatched: a change now aborts nothing.
			h.other(throttle)
			assert.Equal(t, "+OK\r\n+QUEUED\r\n*1\r\n+PONG\r\n", h.do([]string{"MULTI"}, []string{"PING"}, []string{"EXEC"}))
		})
	}
}

// A key that had expired when it was watched did not change when it is
// found expired later (Redis 7).
func TestWatchOfAnExpiredKey(t *testing.T) {
	h := newHarness(t, Config{})
	h.cmd("CL.THROTTLE", "w", "5", "1", "60")
	h.srv.clock.Advance(3600e9)
	h.cmd("WATCH", "w")
	assert.Equal(t, "+OK\r\n+QUEUED\r\n*1\r\n:0\r\n", h.do([]string{"MULTI"}, []string{"EXISTS", "w"}, []string{"EXEC"}))
}

// A client's watches go when it does, and the store keeps none.
func TestWatchesAreWithdrawn(t *testing.T) {
	h := newHarness(t, Config{})
	h.cmd("WATCH", "a", "b", "c")
	c := h.c
	c.Close()
	assert.Empty(t, c.tx.watched)
	// Were a registration left, this would tell the closed client's
	// watcher.
	h.other([]string{"CL.THROTTLE", "a", "5", "1", "60"})
	assert.False(t, c.tx.w.changed.Load())
}

func TestWatchBound(t *testing.T) {
	h := newHarness(t, Config{})
	args := []string{"WATCH"}
	for i := range MaxWatchedKeys {
		args = append(args, fmt.Sprintf("k%d", i))
	}
	require.Equal(t, "+OK\r\n", h.cmd(args...))
	require.Equal(t, "+OK\r\n", h.cmd("WATCH", "k0"), "already watched")
	assert.Equal(t, "-"+errTooManyWatched+"\r\n", h.cmd("WATCH", "one-more"))
	h.cmd("UNWATCH")
	assert.Equal(t, "+OK\r\n", h.cmd("WATCH", "one-more"))
}

func TestTxBound(t *testing.T) {
	h := newHarness(t, Config{})
	h.cmd("MULTI")
	cmds := make([][]string, MaxTxCommands)
	for i := range cmds {
		cmds[i] = []string{"PING"}
	}
	h.do(cmds...)
	assert.Equal(t, "-"+errTxTooLarge+"\r\n", h.cmd("PING"))
	assert.Equal(t, "+QUEUED\r\n", h.cmd("PING"))
	assert.Equal(t, "-"+ErrExecAbort+"\r\n", h.cmd("EXEC"))

	h.cmd("MULTI")
	big := strings.Repeat("x", 1<<20)
	for range MaxTxBytes >> 20 {
		require.Equal(t, "+QUEUED\r\n", h.cmd("ECHO", big[:len(big)-64]))
	}
	assert.Equal(t, "-"+errTxTooLarge+"\r\n", h.cmd("ECHO", big))
	assert.Equal(t, "-"+ErrExecAbort+"\r\n", h.cmd("EXEC"))
}

func TestTxCluster(t *testing.T) {
	h := newHarness(t, Config{Cluster: ClusterConfig{Mode: ClusterEmulated, Host: "127.0.0.1", Port: 7001}})
	assert.Equal(t, "+OK\r\n+QUEUED\r\n+QUEUED\r\n-CROSSSLOT Keys in request don't hash to the same slot\r\n",
		h.do([]string{"MULTI"}, []string{"CL.THROTTLE", "a", "5", "1", "60"}, []string{"CL.THROTTLE", "b", "5", "1", "60"}, []string{"EXEC"}))
	assert.Equal(t, "$-1\r\n", h.cmd("GET", "a"), "nothing ran")
	assert.Equal(t, "-ERR EXEC without MULTI\r\n", h.cmd("EXEC"), "discarded")
	assert.Equal(t, "+OK\r\n-CROSSSLOT Keys in request don't hash to the same slot\r\n-EXECABORT Transaction discarded because of previous errors.\r\n",
		h.do([]string{"MULTI"}, []string{"DEL", "a", "b"}, []string{"EXEC"}))
	assert.Equal(t, "+OK\r\n+QUEUED\r\n+QUEUED\r\n*2\r\n*5\r\n:0\r\n:6\r\n:5\r\n:-1\r\n:60\r\n*5\r\n:0\r\n:6\r\n:5\r\n:-1\r\n:60\r\n",
		h.do([]string{"MULTI"}, []string{"CL.THROTTLE", "{t}a", "5", "1", "60"}, []string{"CL.THROTTLE", "{t}b", "5", "1", "60"}, []string{"EXEC"}))
	assert.Equal(t, "+OK\r\n-ERR Command not allowed inside a transaction\r\n-EXECABORT Transaction discarded because of previous errors.\r\n",
		h.do([]string{"MULTI"}, []string{"CLUSTER", "SETTOPOLOGY", "{}"}, []string{"EXEC"}))
}

// The shards EXEC holds: its keys', the watched keys', or all of them.
func TestTxShards(t *testing.T) {
	h := newHarness(t, Config{})
	s := h.srv
	var a, b string
	for i := 0; a == "" || b == ""; i++ {
		k := fmt.Sprintf("k%d", i)
		switch s.st.ShardOf([]byte(k)) {
		case 0:
			a = k
		case 3:
			b = k
		}
	}
	look := func(args ...string) txCmd {
		var argv [][]byte
		for _, x := range args {
			argv = append(argv, []byte(x))
		}
		cmd := s.table.Lookup(argv[0])
		if len(cmd.Subcommands) > 0 {
			cmd = cmd.sub(argv[1])
		}
		return txCmd{cmd: cmd, args: argv}
	}
	tx := &txState{}
	assert.Equal(t, []int{}, s.txShards(tx, []txCmd{look("PING"), look("CLIENT", "ID")}))
	assert.ElementsMatch(t, []int{0, 3}, s.txShards(tx, []txCmd{look("CL.THROTTLE", a, "1", "1", "1"), look("DEL", b, a)}))
	assert.ElementsMatch(t, []int{0, 3}, s.txShards(tx, []txCmd{look("CL.LIMIT", a, "FW", "1", "1", "AND", b, "FW", "1", "1")}))
	assert.Nil(t, s.txShards(tx, []txCmd{look("CL.THROTTLE", a, "1", "1", "1"), look("FLUSHALL")}))
	assert.Nil(t, s.txShards(tx, []txCmd{look("CLUSTER", "GETKEYSINSLOT", "1", "1")}))
	tx.watched = map[string]struct{}{b: {}}
	assert.ElementsMatch(t, []int{0, 3}, s.txShards(tx, []txCmd{look("GET", a)}))
}

// Fixes from an adversarial review of transactions.
func TestTxReviewFixes(t *testing.T) {
	t.Run("CLIENT REPLY OFF silences QUEUED", func(t *testing.T) {
		h := newHarness(t, Config{})
		assert.Equal(t, "+OK\r\n+PONG\r\n", h.do([]string{"CLIENT", "REPLY", "OFF"}, []string{"MULTI"}, []string{"PING"},
			[]string{"EXEC"}, []string{"CLIENT", "REPLY", "ON"}, []string{"PING"}))
	})
	t.Run("a key named twice in one WATCH counts once", func(t *testing.T) {
		h := newHarness(t, Config{})
		args := []string{"WATCH"}
		for range MaxWatchedKeys + 1 {
			args = append(args, "k")
		}
		assert.Equal(t, "+OK\r\n", h.do(args))
	})
	t.Run("watched keys are bounded in bytes", func(t *testing.T) {
		h := newHarness(t, Config{})
		big := strings.Repeat("x", 60<<10)
		var err string
		for i := 0; i < MaxWatchedBytes/len(big)+2 && err == ""; i++ {
			if r := h.cmd("WATCH", fmt.Sprint(i, big)); r != "+OK\r\n" {
				err = r
			}
		}
		assert.Equal(t, "-"+errTooManyWatched+"\r\n", err)
		assert.Equal(t, "+OK\r\n", h.cmd("UNWATCH"))
		assert.Equal(t, "+OK\r\n", h.cmd("WATCH", big), "UNWATCH gives the room back")
	})
	t.Run("CLIENT LIST shows multi and flag x", func(t *testing.T) {
		h := newHarness(t, Config{})
		assert.Contains(t, h.c.infoLine(), " flags=N ")
		assert.Contains(t, h.c.infoLine(), " multi=-1 ")
		h.do([]string{"MULTI"}, []string{"PING"}, []string{"PING"})
		assert.Contains(t, h.c.infoLine(), " flags=x ")
		assert.Contains(t, h.c.infoLine(), " multi=2 ")
		h.cmd("EXEC")
		assert.Contains(t, h.c.infoLine(), " multi=-1 ")
	})
	t.Run("a failed AUTH inside EXEC pauses after the shards are let go", func(t *testing.T) {
		h := newHarness(t, Config{RequirePass: "pw"})
		var holding []bool
		h.srv.sleep = func(time.Duration) { holding = append(holding, h.c.sess.Holding()) }
		assert.Equal(t, "+OK\r\n+OK\r\n+QUEUED\r\n+QUEUED\r\n*2\r\n-WRONGPASS invalid username-password pair or user is disabled.\r\n:0\r\n",
			h.do([]string{"AUTH", "pw"}, []string{"MULTI"}, []string{"AUTH", "bad"}, []string{"DBSIZE"}, []string{"EXEC"}))
		assert.Equal(t, []bool{false}, holding, "one pause, paid once the shards were released")
	})
	t.Run("past the client's room EXEC runs every command and drops their replies", func(t *testing.T) {
		h := newHarness(t, Config{})
		cmds := [][]string{{"MULTI"}}
		for i := 0; i < 50; i++ {
			cmds = append(cmds, []string{"COMMAND", "DOCS"}, []string{"CL.THROTTLE", fmt.Sprint("room", i), "5", "1", "60"})
		}
		cmds = append(cmds, []string{"EXEC"})
		var argvs [][][]byte
		for _, c := range cmds {
			var argv [][]byte
			for _, a := range c {
				argv = append(argv, []byte(a))
			}
			argvs = append(argvs, argv)
		}
		one := len(h.cmd("COMMAND", "DOCS"))
		out := Out{Room: 3 * one}
		h.srv.Exec(h.c, argvs, &out)
		assert.True(t, out.OverRoom())
		assert.Less(t, out.Len(), 5*one, "the replies past the room were dropped")
		assert.Equal(t, ":50\r\n", h.cmd("DBSIZE"), "every command of the transaction ran")
	})
}
