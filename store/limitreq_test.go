package store

import (
	"bytes"
	"fmt"
	"hash/maphash"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cellserver/cellserver/limit"
)

func parseLimitLine(t *testing.T, line string) limit.Call {
	t.Helper()
	var argv [][]byte
	for _, f := range strings.Fields("CL.LIMIT " + line) {
		argv = append(argv, []byte(f))
	}
	c, err := limit.ParseLimit(argv)
	require.NoError(t, err, line)
	return c
}

// TestLimitStateSurvivesCompaction: a CL.LIMIT whose first key's state is
// in the arena and whose second key is found expired. Removing that key
// may compact the arena (and give its old pages back to the system), so
// decide must not hold the first state across the second lookup: once it
// did, and the call read unmapped memory (a fault no recover catches).
func TestLimitStateSurvivesCompaction(t *testing.T) {
	st, clk := newTestStore(t, 1)
	long := strings.Repeat("k", 200)
	const n = 20000
	for i := range n {
		_, err := doLimit(st, parseLimitLine(t, fmt.Sprintf("%s%d SWL 5 1", long, i)))
		require.NoError(t, err)
	}
	_, err := doLimit(st, parseLimitLine(t, "A SWL 1000 100000"))
	require.NoError(t, err)
	clk.Set(t0 + int64(5*time.Second))
	for i := range n {
		r, err := doLimit(st, parseLimitLine(t, fmt.Sprintf("A SWL 1000 100000 AND %s%d SWL 5 1 PEEK", long, i)))
		require.NoError(t, err)
		require.Equal(t, int64(998), r.Results[0].Remaining, "call %d", i)
	}
}

// TestLimitInlineAgreesWithDecide: a call of GCRA, FW and SWC limits is
// decided on its entries' fields (decideInline for one limit,
// decideFields for several); it must reply, charge and store exactly what
// the encoded path (decideEach: limit.Decide on encoded states) does. Two
// shards get the same random calls of one to three limits, one shard by
// each path: kinds and parameters that change under a key, costs around the
// limit, COST 0, PEEK, MS, a clock that jumps forward (past expiries) and
// back, keys of another kind (WRONGTYPE), and SWC states whose counts do
// not fit an entry (merged ones, in the arena).
func TestLimitInlineAgreesWithDecide(t *testing.T) {
	seed := maphash.MakeSeed()
	cfg := Config{Shards: 1, Clock: &Clock{}}
	fast, slow := newShard(0, seed, cfg, nil), newShard(0, seed, cfg, nil)
	defer fast.t.release()
	defer slow.t.release()
	keys := [][]byte{[]byte("a"), []byte("b"), []byte("a-key-of-pair-size"), []byte(strings.Repeat("long", 10))}
	rnd := rand.New(rand.NewPCG(7, 11))
	window := func() time.Duration {
		if rnd.IntN(2) == 0 {
			return time.Duration(1+rnd.IntN(3)) * time.Second
		}
		return time.Duration(1+rnd.IntN(1500)) * time.Millisecond
	}
	randLimit := func() limit.Limit {
		n := uint32(1 + rnd.IntN(5))
		switch rnd.IntN(7) {
		case 0, 1:
			return limit.FW{Limit: n, Window: window()}
		case 2, 3:
			return limit.SWC{Limit: n, Window: window()}
		case 4, 5:
			return limit.GCRA{MaxBurst: n - 1, Count: uint32(1 + rnd.IntN(3)), Period: window()}
		}
		return limit.SWL{Limit: n, Window: window()} // kept in the arena
	}
	now := t0
	ran, seen := map[bool]int{}, map[string]int{}
	for step := range 20000 {
		switch rnd.IntN(10) {
		case 0:
			now -= int64(rnd.IntN(1500)) * int64(time.Millisecond) // a clock that goes back
		case 1:
			now += int64(rnd.IntN(10)) * int64(time.Second) // past expiries
		default:
			now += int64(rnd.IntN(400)) * int64(time.Millisecond)
		}
		key := keys[rnd.IntN(len(keys))]
		if rnd.IntN(200) == 0 {
			// An SWC state with counts past 32 bits, as a merge makes:
			// it cannot be inline.
			w := int64(1000)
			enc, _ := limit.SWCState{WindowMS: w, StartMS: floorMs(now) / w * w,
				Prev: 1 << 33, Cur: uint64(rnd.IntN(3)) << 32}.AppendBinary(nil)
			for _, sh := range []*shard{fast, slow} {
				ei := sh.find(key, sh.t.hash(key), floorMs(now))
				if ei < 0 {
					ei = int64(sh.t.insertFor(key, sh.t.hash(key), limit.KindSWC))
				}
				sh.setState(uint32(ei), enc, floorMs(now)+2*w)
			}
		}
		// One limit, or up to three on distinct keys.
		var specs []limit.Spec
		for _, i := range rnd.Perm(len(keys))[:1+rnd.IntN(3)*rnd.IntN(2)] {
			if len(specs) == 0 {
				i = slices.IndexFunc(keys, func(k []byte) bool { return bytes.Equal(k, key) })
			} else if bytes.Equal(keys[i], key) {
				continue
			}
			sp := limit.Spec{Key: keys[i], Limit: randLimit(), Cost: uint32(rnd.IntN(4))}
			if rnd.IntN(4) == 0 {
				sp.Cost = uint32(rnd.IntN(8))
			}
			specs = append(specs, sp)
		}
		spec := specs[0]
		opt := limit.Options{Peek: rnd.IntN(8) == 0, MS: rnd.IntN(2) == 0}
		var a, b LimitReq
		a.Call = limit.Call{Limits: specs, Options: opt}
		b.Call = a.Call
		// a as the store runs it; b always through limit.Decide.
		a.decide(nil, fast, now)
		b.Now = now
		bx := b.scratch()
		b.Results = bx.results[:len(specs)]
		b.locate(bx, nil, slow)
		bw := slow.work()
		b.lookup(bx, bw, now)
		b.decideEach(bx, bw, now)
		inline := len(specs) == 1 && spec.Limit.Kind() != limit.KindSWL
		ran[inline]++
		what := fmt.Sprintf("step %d: %+v %+v", step, specs, opt)
		require.Equal(t, b.Err, a.Err, what)
		switch {
		case a.Err == ErrWrongType:
			seen["wrongtype"]++
		case a.Err != nil:
		case a.Decision.Limited:
			seen["limited"]++
		case a.Results[0].Write:
			seen["charged"]++
		}
		if a.Err == nil {
			require.Equal(t, b.Decision, a.Decision, what)
			for i := range specs {
				ra, rb := a.Results[i], b.Results[i]
				require.Equal(t, rb.R5, ra.R5, what)
				require.Equal(t, rb.Write, ra.Write, what)
				require.Equal(t, rb.ExpireAt, ra.ExpireAt, what)
			}
		}
		for _, k := range keys {
			ea, eb := fast.t.findHash(k, fast.t.hash(k)), slow.t.findHash(k, slow.t.hash(k))
			require.Equal(t, eb >= 0, ea >= 0, "%s: key %s present", what, k)
			if ea < 0 {
				continue
			}
			xa, xb := fast.t.at(uint32(ea)), slow.t.at(uint32(eb))
			require.Equal(t, slow.t.state(xb, nil), fast.t.state(xa, nil), "%s: key %s state", what, k)
			require.Equal(t, xb.exp(), xa.exp(), "%s: key %s expiry", what, k)
		}
	}
	// Both kinds of call, often.
	require.Greater(t, ran[true], 5000)
	require.Greater(t, ran[false], 5000)
	for _, k := range []string{"wrongtype", "limited", "charged"} {
		require.Greater(t, seen[k], 1000, k)
	}
}

// TestLimitReqReuseForgetsWarm: a request kept in a free list whose warm
// pass ran without its run (a refused call) must not hand that pass's
// shards and hashes to its next call: SetCall forgets them. Else the next
// call's keys would be looked up, and inserted, under the old keys'
// hashes, where no later lookup finds them.
func TestLimitReqReuseForgetsWarm(t *testing.T) {
	st, _ := newTestStore(t, 1)
	sh := st.shards[0]
	var r LimitReq
	r.SetCall(parseLimitLine(t, "a1 FW 10 60 AND a2 FW 10 60"))
	r.warmKeys(nil, sh) // and never run
	r.SetCall(parseLimitLine(t, "b1 FW 10 60 AND b2 FW 10 60"))
	s := st.NewSession()
	s.AddTo(0, &r) // a batch of one: no warm pass
	s.Run()
	require.NoError(t, r.Status())
	require.NoError(t, r.Err)
	for _, k := range []string{"b1", "b2"} {
		p, err := doLimit(st, parseLimitLine(t, k+" FW 10 60 PEEK"))
		require.NoError(t, err)
		require.Equal(t, int64(8), p.Results[0].Remaining, "%s was charged once, where a lookup finds it (a PEEK shows the count after charging)", k)
	}
	for _, k := range []string{"a1", "a2"} {
		pttl, err := doPTTL(st, k)
		require.NoError(t, err)
		require.Equal(t, int64(-2), pttl, "%s never existed", k)
	}
}

// TestLimitStateBufferIsTheShards: the new states of a call are encoded
// into its shard's buffer, not the request's: a pipeline's requests are
// all in flight at once, and each call on a 10,000-entry SWL log would
// otherwise allocate its 120 KB afresh. No result keeps a reference to
// that buffer, and the shard keeps at most maxWorkBuf of it between calls.
func TestLimitStateBufferIsTheShards(t *testing.T) {
	st, clk := newTestStore(t, 1)
	full := "a SWL 10000 10000 MS"
	for range 10_000 {
		clk.Advance(int64(time.Millisecond)) // one entry per call
		_, err := doLimit(st, parseLimitLine(t, full))
		require.NoError(t, err)
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	const calls = 50
	for range calls {
		clk.Advance(int64(time.Millisecond))
		r, err := doLimit(st, parseLimitLine(t, full))
		require.NoError(t, err)
		require.False(t, r.Decision.Limited)
		require.Nil(t, r.Results[0].State, "the result does not alias the shard's buffer")
	}
	runtime.ReadMemStats(&after)
	require.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(calls*16<<10),
		"a call on a 120 KB log allocates no state buffer of its own")
	w := st.shards[0].work()
	require.NotNil(t, w.buf, "the shard keeps a buffer of a log's size")

	// Four logs of 6,000 entries: 288 KB of new states, past maxWorkBuf.
	big := "b SWL 10000 10000 AND c SWL 10000 10000 AND d SWL 10000 10000 AND e SWL 10000 10000 MS"
	for range 6_000 {
		clk.Advance(int64(time.Millisecond))
		r, err := doLimit(st, parseLimitLine(t, big))
		require.NoError(t, err)
		for _, res := range r.Results {
			require.Nil(t, res.State)
		}
	}
	require.Nil(t, w.buf, "a buffer past maxWorkBuf is not kept")
	_, err := doLimit(st, parseLimitLine(t, "f FW 10 60 AND g SWL 5 60"))
	require.NoError(t, err)
	require.NotNil(t, w.buf, "a small buffer is kept for the next call")
	require.LessOrEqual(t, cap(w.buf), maxWorkBuf)
}
