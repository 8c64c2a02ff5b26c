package service

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cellserver/cellserver/cluster"
	"github.com/cellserver/cellserver/gcra"
	"github.com/cellserver/cellserver/limit"
	"github.com/cellserver/cellserver/store"
)

const t0 = 1_700_000_000_000_000_000 // a round second, in ns

func newService(t *testing.T, cfg Config) (*Service, *store.Clock) {
	t.Helper()
	clk := &store.Clock{}
	clk.Set(t0)
	st, err := store.New(store.Config{Shards: 4, Clock: clk})
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	cfg.Store = st
	return New(cfg), clk
}

// limitCall parses a CL.LIMIT command line, as a front end that has one.
func limitCall(t *testing.T, line string) *Limit {
	t.Helper()
	var argv [][]byte
	for _, f := range strings.Fields("CL.LIMIT " + line) {
		argv = append(argv, []byte(f))
	}
	c, err := limit.ParseLimit(argv)
	require.NoError(t, err, line)
	return &Limit{Call: c}
}

// onTwoShards returns two keys of different shards (of 4).
func onTwoShards(st *store.Store) (string, string) {
	a := "a"
	for i := 0; ; i++ {
		b := "b" + strings.Repeat("x", i)
		if st.ShardOf([]byte(a)) != st.ShardOf([]byte(b)) {
			return a, b
		}
	}
}

func TestThrottleIsGCRA(t *testing.T) {
	svc, _ := newService(t, Config{})
	p := gcra.Params{MaxBurst: 1, Count: 1, Period: 60, Quantity: 1}
	want := []bool{false, false, true}
	for i, limited := range want {
		c := &Throttle{Key: []byte("k"), Params: p}
		require.NoError(t, svc.Do(c))
		require.NoError(t, c.Err)
		assert.Equal(t, limited, c.Result.Limited, "call %d", i)
		assert.Equal(t, int64(2), c.Result.Limit)
	}
	// A peek answers the decision and changes nothing.
	peek := &Throttle{Key: []byte("k"), Params: p, Peek: true}
	require.NoError(t, svc.Do(peek))
	require.NoError(t, peek.Err)
	assert.True(t, peek.Result.Limited)
	fresh := &Throttle{Key: []byte("new"), Params: p, Peek: true}
	require.NoError(t, svc.Do(fresh))
	in := &Inspect{Key: []byte("new")}
	require.NoError(t, svc.Do(in))
	assert.False(t, in.Found, "a peek creates no key")
}

// Several limits are charged all or nothing, on one shard or several.
func TestLimitAllOrNothing(t *testing.T) {
	svc, _ := newService(t, Config{})
	a, b := onTwoShards(svc.Store())
	for _, keys := range [][2]string{{"{t}x", "{t}y"}, {a, b}} {
		// b's limit is 1: the second call is refused by it, and a is not
		// charged either.
		line := keys[0] + " FW 5 60 AND " + keys[1] + " FW 1 60"
		first := limitCall(t, line)
		require.NoError(t, svc.Do(first))
		require.NoError(t, first.Err)
		assert.False(t, first.Decision.Limited)
		second := limitCall(t, line)
		require.NoError(t, svc.Do(second))
		require.NoError(t, second.Err)
		assert.True(t, second.Decision.Limited)
		assert.Equal(t, 2, second.Decision.Index, "the deciding limit is the second")
		assert.Equal(t, int64(4), second.Results()[0].Remaining, "%v: the refused call charged nothing", keys)
		in := &Inspect{Key: []byte(keys[0])}
		require.NoError(t, svc.Do(in))
		require.True(t, in.Found)
		assert.Contains(t, in.Fields, limit.Field{Name: "count", Value: int64(1)}, "%v", keys)
	}
}

func TestWrongType(t *testing.T) {
	svc, _ := newService(t, Config{})
	require.NoError(t, svc.Do(limitCall(t, "fw FW 5 60")))
	th := &Throttle{Key: []byte("fw"), Params: gcra.Params{MaxBurst: 1, Count: 1, Period: 1, Quantity: 1}}
	require.NoError(t, svc.Do(th))
	assert.ErrorIs(t, th.Err, ErrWrongType)
	sw := limitCall(t, "fw SWC 5 60")
	require.NoError(t, svc.Do(sw))
	assert.ErrorIs(t, sw.Err, ErrWrongType)
}

func TestResetAndInspect(t *testing.T) {
	svc, clk := newService(t, Config{})
	require.NoError(t, svc.Do(limitCall(t, "a FW 5 60 AND b SWL 3 900")))
	in := &Inspect{Key: []byte("a")}
	require.NoError(t, svc.Do(in))
	require.True(t, in.Found)
	// Windows are aligned to the Unix epoch: t0 is 20 s into one.
	assert.Equal(t, int64(40_000), in.PTTL, "FW 60: the window's end")
	clk.Advance(1e9)
	r := &Reset{Keys: [][]byte{[]byte("a"), []byte("b"), []byte("missing")}}
	require.NoError(t, svc.Do(r))
	require.NoError(t, r.Err)
	assert.Equal(t, int64(2), r.Removed)
	require.NoError(t, svc.Do(in))
	assert.False(t, in.Found)
}

type slots map[int]string // slot -> owner address ("" = this node)

func (s slots) Locate(slot int) (string, bool, bool) {
	addr, ok := s[slot]
	return addr, ok && addr == "", ok
}

func TestRoute(t *testing.T) {
	ka, kb := []byte("{a}1"), []byte("{b}1")
	sa, sb := cluster.KeySlot(ka), cluster.KeySlot(kb)
	svc, _ := newService(t, Config{Slots: slots{sa: "", sb: "10.0.0.2:7000"}, MaxKeyBytes: 8})
	// Refusals charge nothing and come as typed errors.
	err := svc.Do(limitCall(t, "{a}1 FW 1 60 AND {b}1 FW 1 60"))
	assert.ErrorIs(t, err, ErrCrossSlot)
	err = svc.Do(&Throttle{Key: kb, Params: gcra.Params{Count: 1, Period: 1, Quantity: 1}})
	var no *NotOwnerError
	require.True(t, errors.As(err, &no), "%v", err)
	assert.Equal(t, NotOwnerError{Slot: sb, Addr: "10.0.0.2:7000"}, *no)
	err = svc.Do(&Inspect{Key: []byte("{c}1")})
	assert.ErrorIs(t, err, ErrClusterDown)
	err = svc.Do(&Inspect{Key: bytes.Repeat([]byte("a"), 9)})
	assert.ErrorIs(t, err, ErrKeyTooLong)
	// The first key's slot decides, as Redis Cluster: unserved first slot
	// is CLUSTERDOWN even when the others differ.
	assert.ErrorIs(t, svc.Route([][]byte{[]byte("{c}1"), ka}), ErrClusterDown)
	ok := limitCall(t, "{a}1 FW 1 60 AND {a}2 FW 1 60")
	require.NoError(t, svc.Do(ok))
	assert.NoError(t, ok.Err)

	// Outside cluster modes keys need not share a slot.
	plain, _ := newService(t, Config{})
	assert.NoError(t, plain.Do(limitCall(t, "{a}1 FW 1 60 AND {b}1 FW 1 60")))
}

// Calls queued on one session run in the order queued, whether single-
// or cross-shard, and see each other's charges.
func TestQueueKeepsOrder(t *testing.T) {
	svc, _ := newService(t, Config{})
	a, b := onTwoShards(svc.Store())
	sess := svc.Store().NewSession()
	var calls []*Limit
	for _, line := range []string{a + " FW 3 60", a + " FW 3 60 AND " + b + " FW 3 60", a + " FW 3 60", a + " FW 3 60 AND " + b + " FW 3 60"} {
		c := limitCall(t, line)
		require.NoError(t, svc.Queue(sess, c))
		calls = append(calls, c)
	}
	sess.Run()
	for i, c := range calls {
		c.Done()
		require.NoError(t, c.Err)
		assert.Equal(t, i == 3, c.Decision.Limited, "call %d", i)
		if i < 3 {
			assert.Equal(t, int64(2-i), c.Results()[0].Remaining, "call %d", i)
		}
	}
}

func TestClosed(t *testing.T) {
	svc, _ := newService(t, Config{})
	a, b := onTwoShards(svc.Store())
	require.NoError(t, svc.Store().Close())
	for _, c := range []Call{
		&Throttle{Key: []byte("k"), Params: gcra.Params{Count: 1, Period: 1, Quantity: 1}},
		limitCall(t, a+" FW 1 60 AND "+b+" FW 1 60"),
		limitCall(t, "k FW 1 60"),
		&Reset{Keys: [][]byte{[]byte("k")}},
		&Inspect{Key: []byte("k")},
	} {
		require.NoError(t, svc.Do(c))
		assert.ErrorIs(t, ErrOf(c), ErrClosed, "%T", c)
	}
}

// Calls built by a front end other than RESP's parsers are checked too:
// a bad one is refused before it touches the store.
func TestBadCalls(t *testing.T) {
	svc, _ := newService(t, Config{})
	one := limitCall(t, "dup FW 10 60").Call.Limits[0]
	var many limit.Call
	for i := range limit.MaxLimits + 1 {
		sp := one
		sp.Key = []byte{byte('a' + i)}
		many.Limits = append(many.Limits, sp)
	}
	for name, c := range map[string]Call{
		"no limits":   &Limit{},
		"17 limits":   &Limit{Call: many},
		"a key twice": &Limit{Call: limit.Call{Limits: []limit.Spec{one, one}}},
		"zero rate":   &Throttle{Key: []byte("k"), Params: gcra.Params{MaxBurst: 1, Quantity: 1}},
	} {
		assert.ErrorIs(t, svc.Do(c), ErrBadCall, name)
	}
	in := &Inspect{Key: []byte("dup")}
	require.NoError(t, svc.Do(in))
	assert.False(t, in.Found, "nothing was written")
}

// TestInspectReleaseBoundsBuffers: a released Inspect keeps neither the
// fields it answered nor an SWL log's state buffer (front ends pool their
// calls: thousands of them once held 540 MB after clients that never read
// their CL.INSPECT replies were gone), and keeps a small state's buffer.
func TestInspectReleaseBoundsBuffers(t *testing.T) {
	svc, clk := newService(t, Config{})
	for range 1000 {
		clk.Advance(1e6) // one entry per call
		l := limitCall(t, "log SWL 10000 3600")
		require.NoError(t, svc.Do(l))
		require.NoError(t, l.Err)
	}
	require.NoError(t, svc.Do(limitCall(t, "small FW 5 60")))
	in := &Inspect{Key: []byte("log")}
	require.NoError(t, svc.Do(in))
	require.True(t, in.Found)
	require.Greater(t, cap(in.req.State), maxKeptState, "1000 entries of 12 bytes")
	in.Release()
	assert.Nil(t, in.Fields)
	assert.Nil(t, in.req.State)

	in.Key = []byte("small")
	require.NoError(t, svc.Do(in))
	require.True(t, in.Found)
	kept := cap(in.req.State)
	in.Release()
	assert.Nil(t, in.Fields)
	assert.Equal(t, kept, cap(in.req.State), "a small state's buffer is kept for the next use")
}
