package commands

import (
	"strings"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cellserver/cellserver/service"
	"github.com/cellserver/cellserver/store"
)

// TestLimitCommandTable: COMMAND INFO, DOCS and GETKEYS know the CL.LIMIT
// family; GETKEYS finds CL.LIMIT's keys by parsing.
func TestLimitCommandTable(t *testing.T) {
	h := newHarness(t, Config{})
	assert.Equal(t, "*3\r\n$1\r\na\r\n$1\r\nb\r\n$1\r\nc\r\n",
		h.cmd("COMMAND", "GETKEYS", "CL.LIMIT", "a", "FW", "1", "60", "AND", "b", "GCRA", "1", "2", "3", "COST", "2", "AND", "c", "CAL", "5", "DAY", "TZ", "UTC", "MS"))
	assert.Equal(t, "*2\r\n$1\r\na\r\n$1\r\nb\r\n", h.cmd("COMMAND", "GETKEYS", "CL.RESET", "a", "b"))
	assert.Equal(t, "*1\r\n$1\r\nk\r\n", h.cmd("COMMAND", "GETKEYS", "CL.PEEK", "k", "1", "2", "3"))
	assert.Equal(t, "*1\r\n$1\r\nk\r\n", h.cmd("COMMAND", "GETKEYS", "CL.INSPECT", "k"))
	info := h.cmd("COMMAND", "INFO", "cl.limit", "cl.peek", "cl.reset", "cl.inspect")
	for _, want := range []string{"$8\r\ncl.limit\r\n:-5\r\n", "movablekeys", "$7\r\ncl.peek\r\n:-1\r\n", "$8\r\ncl.reset\r\n:-2\r\n", "$10\r\ncl.inspect\r\n:2\r\n"} {
		assert.Contains(t, info, want)
	}
	docs := h.cmd("COMMAND", "DOCS", "cl.limit")
	assert.Contains(t, docs, "all or nothing")
	assert.Equal(t, "-ERR wrong number of arguments for 'cl.limit' command\r\n", h.cmd("CL.LIMIT", "k", "FW", "10"))
	assert.Equal(t, "-ERR wrong number of arguments for 'cl.reset' command\r\n", h.cmd("CL.RESET"))
}

// TestLimitCrossSlot: in cluster modes a CL.LIMIT's keys must share a slot;
// without cluster mode keys on different shards are decided together.
func TestLimitCrossSlot(t *testing.T) {
	h := newHarness(t, Config{Cluster: ClusterConfig{Mode: ClusterEmulated, Host: "127.0.0.1", Port: 7001}})
	assert.Equal(t, "-"+ErrCrossSlot+"\r\n", h.cmd("CL.LIMIT", "a", "FW", "1", "60", "AND", "b", "FW", "1", "60"))
	assert.Equal(t, "-"+ErrCrossSlot+"\r\n", h.cmd("CL.RESET", "a", "b"))
	assert.True(t, strings.HasPrefix(h.cmd("CL.LIMIT", "{u}a", "FW", "1", "60", "AND", "{u}b", "FW", "1", "60"), "*7\r\n:0\r\n"))

	p := newHarness(t, Config{})
	var a, b string // two keys on different shards of the harness's 4
	for _, k := range []string{"k1", "k2", "k3", "k4", "k5", "k6", "k7", "k8"} {
		if a == "" {
			a = k
		} else if p.srv.st.ShardOf([]byte(k)) != p.srv.st.ShardOf([]byte(a)) {
			b = k
			break
		}
	}
	assert.NotEmpty(t, b)
	ok := "*7\r\n:0\r\n:1\r\n:0\r\n:-1\r\n:40\r\n:1\r\n*2\r\n*5\r\n:0\r\n:1\r\n:0\r\n:-1\r\n:40\r\n*5\r\n:0\r\n:2\r\n:1\r\n:-1\r\n:40\r\n"
	got := p.do([]string{"CL.LIMIT", a, "FW", "1", "60", "AND", b, "FW", "2", "60"}, []string{"CL.LIMIT", a, "FW", "1", "60", "AND", b, "FW", "2", "60"}, []string{"CL.INSPECT", b})
	assert.True(t, strings.HasPrefix(got, ok), got)
	assert.Contains(t, got, "*7\r\n:1\r\n:1\r\n:0\r\n", "the second call is limited by the first limit")
	assert.Contains(t, got, "$5\r\ncount\r\n:1\r\n", "the limited call charged nothing on the other shard")
	assert.Equal(t, "+cl-limit\r\n", p.cmd("TYPE", a))
	assert.Equal(t, "-"+ErrWrongType+"\r\n", p.cmd("GET", a))
	assert.Equal(t, ":2\r\n", p.cmd("CL.RESET", a, b, a, "nokey"))
}

// TestKeyedCommandsAllocateNothingWhenWarm: every keyed command takes its
// store request from the client's free lists, so a warm client's pipeline
// of them allocates nothing. (CL.INSPECT and CL.RESET are not here:
// CL.INSPECT's fields and CL.RESET's key list allocate.)
func TestKeyedCommandsAllocateNothingWhenWarm(t *testing.T) {
	h := newHarness(t, Config{})
	var cmds [][][]byte
	for _, c := range [][]string{
		{"CL.THROTTLE", "k1", "100", "1", "1"},
		{"CL.PEEK", "k1", "100", "1", "1"},
		{"GET", "k1"},
		{"EXISTS", "k1", "nope", "k2"},
		{"PTTL", "k1"},
		{"TTL", "k2"},
		{"TYPE", "k1"},
		{"DEL", "k9", "k8"},
		{"UNLINK", "k7"},
		{"CL.LIMIT", "l1", "FW", "100", "60"},
		{"CL.LIMIT", "{t}a", "SWC", "100", "60", "AND", "{t}b", "GCRA", "10", "100", "60"},
		{"CL.LIMIT", "{a}x", "FW", "100", "60", "AND", "{b}x", "FW", "100", "60"}, // two shards of four
	} {
		var argv [][]byte
		for _, a := range c {
			argv = append(argv, []byte(a))
		}
		cmds = append(cmds, argv)
	}
	var out Out
	h.srv.Exec(h.c, cmds, &out)
	assert.NotContains(t, "\n"+string(out.B), "\n-", "a command failed: %q", out.B)
	allocs := testing.AllocsPerRun(100, func() {
		out.B = out.B[:0]
		h.srv.Exec(h.c, cmds, &out)
	})
	assert.Zero(t, allocs)
}

// TestScanType: SCAN's TYPE filter knows both kinds of state, as TYPE
// names them: "string" for CL.THROTTLE's GCRA TAT, "cl-limit" for the
// other algorithms; a type no key has lists nothing.
func TestScanType(t *testing.T) {
	h := newHarness(t, Config{})
	h.cmd("CL.THROTTLE", "g", "1", "1", "60")
	h.cmd("CL.LIMIT", "f", "FW", "5", "60")
	h.cmd("CL.LIMIT", "s", "SWL", "5", "60")
	scan := func(typ string) []string {
		var keys []string
		for _, l := range strings.Split(h.cmd("SCAN", "0", "COUNT", "1000", "TYPE", typ), "\r\n") {
			if len(l) == 1 && strings.Contains("fgs", l) {
				keys = append(keys, l)
			}
		}
		return keys
	}
	assert.Equal(t, []string{"g"}, scan("string"))
	assert.Equal(t, []string{"g"}, scan("STRING"))
	assert.ElementsMatch(t, []string{"f", "s"}, scan("cl-limit"))
	assert.Empty(t, scan("hash"))
}

// TestLimitPoolKeepsScratchBounded: a client that once pipelined
// thousands of calls of several limits keeps the scratch of such calls on
// at most keptScratches of its pooled calls (about 1 MiB with the calls
// themselves), not on every call its free list keeps.
func TestLimitPoolKeepsScratchBounded(t *testing.T) {
	h := newHarness(t, Config{})
	var cmds [][]string
	for i := range 3000 {
		k := fmtInt(i)
		cmds = append(cmds, []string{"CL.LIMIT", "{a}x" + k, "FW", "10", "60", "AND", "{a}y" + k, "FW", "10", "60"})
	}
	h.do(cmds...)
	kept, scratched := 0, 0
	for _, l := range h.c.own.limits.items {
		kept++
		if l.HasScratch() {
			scratched++
		}
	}
	bound := keptBytes / (int(unsafe.Sizeof(service.Limit{})) + store.LimitScratchBytes)
	require.Greater(t, kept, bound, "the test must keep more calls than scratches")
	require.Greater(t, scratched, 0)
	require.LessOrEqual(t, scratched, bound)
}
