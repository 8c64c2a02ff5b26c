package commands

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cellserver/cellserver/service"
	"github.com/cellserver/cellserver/store"
)

// TestLoopPoolsShared: the clients of one event loop take their calls from
// the loop's pools in turn, one pool while no pipeline waits on another
// loop; a pipeline that waits keeps its pool, and the loop's other clients
// meanwhile take another, so that neither's calls are overwritten.
func TestLoopPoolsShared(t *testing.T) {
	st, err := store.New(store.Config{Shards: 2, Owners: 2})
	require.NoError(t, err)
	defer st.Close()
	// Two loops: o runs shard 0 ({b}), the clients' loop; o1 shard 1
	// ({a}), served below by hand.
	o, o1 := st.Owners()[0], st.Owners()[1]
	o.Adopt(&benchHost{})
	defer o.Detach()
	o1.Adopt(&benchHost{})
	defer o1.Detach()
	srv, err := New(Config{}, st)
	require.NoError(t, err)
	defer srv.Close()
	a, b := srv.NewClient(nil, nil), srv.NewClient(nil, nil)
	a.SetHome(o)
	b.SetHome(o)

	exec := func(c *Client, done func(), cmds ...[]string) (*Out, bool) {
		var args [][][]byte
		for _, cmd := range cmds {
			var argv [][]byte
			for _, s := range cmd {
				argv = append(argv, []byte(s))
			}
			args = append(args, argv)
		}
		out := &Out{}
		_, pending := srv.ExecAsync(c, args, out, done)
		return out, pending
	}
	first := func() *service.Limit { return srv.loopPools[o.ID()].free[0].limits.items[0] }

	// Inline pipelines: the pool goes back to the loop, and the next
	// client takes the same one.
	out, pending := exec(a, func() {}, []string{"CL.LIMIT", "{b}1", "FW", "10", "60"})
	require.False(t, pending)
	// (reset_after, the sixth line, depends on the time within the minute.)
	assert.True(t, strings.HasPrefix(string(out.B), "*7\r\n:0\r\n:10\r\n:9\r\n:-1\r\n"), "%q", out.B)
	require.Nil(t, a.calls)
	require.Len(t, srv.loopPools[o.ID()].free, 1)
	l := first()
	_, pending = exec(b, func() {}, []string{"CL.LIMIT", "{b}2", "FW", "10", "60"})
	require.False(t, pending)
	assert.Same(t, l, first(), "the next client reuses the loop's pool")

	// a's pipeline waits on shard 1's owner: it keeps its pool until it
	// is resumed, and b meanwhile gets another.
	ran := make(chan struct{})
	out, pending = exec(a, func() { close(ran) }, []string{"CL.LIMIT", "{a}1", "FW", "10", "60", "COST", "3"})
	require.True(t, pending)
	require.NotNil(t, a.calls)
	assert.Empty(t, srv.loopPools[o.ID()].free)
	outB, pending := exec(b, func() {}, []string{"CL.LIMIT", "{b}3", "FW", "5", "60"})
	require.False(t, pending)
	assert.True(t, strings.HasPrefix(string(outB.B), "*7\r\n:0\r\n:5\r\n:4\r\n:-1\r\n"), "%q", outB.B)
	for waiting := true; waiting; {
		select {
		case <-ran:
			waiting = false
		default:
			o1.Serve()
		}
	}
	o.Serve() // the loop takes the batch's end back
	srv.Resume(a, out)
	assert.True(t, strings.HasPrefix(string(out.B), "*7\r\n:0\r\n:10\r\n:7\r\n:-1\r\n"), "a's own call, not b's: %q", out.B)
	assert.Len(t, srv.loopPools[o.ID()].free, 2, "both pools are back")

	// Off the loop (the wire layer's slow path) a client uses its own;
	// the loop serves its shards meanwhile.
	a.SetOffLoop(true)
	out = &Out{}
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		srv.Exec(a, [][][]byte{{[]byte("CL.LIMIT"), []byte("{b}4"), []byte("FW"), []byte("10"), []byte("60")}}, out)
	}()
	for served := false; !served; {
		select {
		case <-ended:
			served = true
		default:
			o.Serve()
		}
	}
	a.SetOffLoop(false)
	assert.Contains(t, string(out.B), ":9\r\n")
	assert.Len(t, srv.loopPools[o.ID()].free, 2)
	require.NotEmpty(t, a.own.limits.items, "the call came from the client's own pool")
}
