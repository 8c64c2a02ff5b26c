package store

import (
	"bytes"
	"fmt"
	"hash/maphash"
	"math"
	"math/rand/v2"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/cellserver/cellserver/limit"
)

// inlineKeys are keys of each class: inline (up to 16 bytes), pair-sized
// (17 to 31), in the arena (longer).
var inlineKeys = []string{"k", "k:12345678", "sixteen-bytes-ky", "seventeen-bytes-k", "a-key-of-exactly-31-bytes-xxxxx", "a key long enough to live in the arena, 48 bytes"}

// TestInlineStateRoundTrip stores FW and SWC states in wide entries of
// every key class: each comes back byte for byte, inline when its fields
// fit the room, from the arena when they do not, and the key is intact.
func TestInlineStateRoundTrip(t *testing.T) {
	states := []struct {
		s      limit.State
		inline bool
	}{
		{limit.FWState{WindowMS: 60000, StartMS: 1_700_000_040_000, Count: 7}, true},
		{limit.FWState{WindowMS: 1, StartMS: -5, Count: math.MaxUint64}, true},
		{limit.FWState{WindowMS: 31_622_400_000, StartMS: 0, Count: 0}, true},
		{limit.SWCState{WindowMS: 60000, StartMS: 1_700_000_040_000, Prev: 3, Cur: 9}, true},
		{limit.SWCState{WindowMS: 7, StartMS: -7000, Prev: math.MaxUint32, Cur: math.MaxUint32}, true},
		{limit.SWCState{WindowMS: 60000, StartMS: 60000, Prev: math.MaxUint32 + 1, Cur: 1}, false},
		{limit.SWCState{WindowMS: 60000, StartMS: 60000, Prev: 1, Cur: math.MaxUint64}, false},
	}
	for _, key := range inlineKeys {
		for _, c := range states {
			t.Run(fmt.Sprintf("%d/%v", len(key), c.s), func(t *testing.T) {
				tb := newTable(maphash.MakeSeed())
				defer tb.release()
				want := enc(t, c.s)
				ei := tb.insertFor([]byte(key), tb.hash([]byte(key)), c.s.Kind())
				e := tb.at(ei)
				require.True(t, e.isWide())
				tb.setState(e, want)
				require.Equal(t, c.inline, e.inlineState())
				require.Equal(t, c.s.Kind(), e.kind())
				require.Equal(t, want, tb.state(e, nil))
				require.Equal(t, want, tb.state(e, make([]byte, 0, 4)))
				require.Equal(t, key, string(tb.keyOf(e)))
				require.Equal(t, int64(ei), tb.find([]byte(key)))
				require.True(t, tb.at(ei+1).isFree(), "the room's entry reads as free")
			})
		}
	}
}

// TestInlineStateTransitions moves one wide entry through every kind of
// value it can hold (an arena state, a GCRA TAT, an inline state of the
// other kind) and removes it: the arena accounts for every byte, and the
// freed pair is reused.
func TestInlineStateTransitions(t *testing.T) {
	for _, key := range inlineKeys {
		tb := newTable(maphash.MakeSeed())
		fw := enc(t, limit.FWState{WindowMS: 1000, StartMS: 5000, Count: 3})
		swc := enc(t, limit.SWCState{WindowMS: 1000, StartMS: 5000, Prev: 1, Cur: 2})
		big := enc(t, limit.SWCState{WindowMS: 1000, StartMS: 5000, Prev: 1 << 40, Cur: 2})
		swl := enc(t, limit.SWLState{WindowMS: 1000, Entries: []limit.SWLEntry{{TS: 4000, Cost: 1}}})
		keyBytes := tb.arena.liveBytes()
		ei := tb.insertFor([]byte(key), tb.hash([]byte(key)), limit.KindFW)
		keyBytes = tb.arena.liveBytes() - keyBytes
		e := tb.at(ei)
		for _, step := range []struct {
			enc    []byte
			inline bool
		}{{fw, true}, {big, false}, {swc, true}, {swl, false}, {fw, true}, {fw, true}, {big, false}, {big, false}} {
			tb.setState(e, step.enc)
			require.Equal(t, step.inline, e.inlineState(), "key %q, state %x", key, step.enc)
			require.Equal(t, step.enc, tb.state(e, nil))
			stateBytes := 0
			if !step.inline {
				stateBytes = len(step.enc) + stateLenSize
			}
			require.Equal(t, keyBytes+stateBytes, tb.arena.liveBytes(), "key %q, state %x", key, step.enc)
		}
		tb.setTAT(e, 42)
		require.Equal(t, limit.KindGCRA, e.kind())
		require.False(t, e.inlineState())
		require.Equal(t, keyBytes, tb.arena.liveBytes())
		require.Equal(t, enc(t, limit.GCRAState{TAT: 42}), tb.state(e, nil))
		tb.setState(e, swc)
		require.True(t, e.inlineState())
		tb.remove(ei)
		require.Zero(t, tb.arena.liveBytes())
		require.Equal(t, []uint32{ei}, tb.freeP)
		require.Equal(t, ei, tb.insertFor([]byte("again"), tb.hash([]byte("again")), limit.KindSWC))
		tb.release()
	}
}

// TestGCRAEntryDoesNotGrow: CL.THROTTLE's keys keep one 32-byte entry
// each with nothing in the arena, beside wide FW and SWC keys.
func TestGCRAEntryDoesNotGrow(t *testing.T) {
	require.Equal(t, uintptr(32), unsafe.Sizeof(entry{}))
	tb := newTable(maphash.MakeSeed())
	defer tb.release()
	for i := range 1000 {
		key := fmt.Appendf(nil, "g:%d", i)
		tb.setTAT(tb.at(tb.insert(key)), uint64(i))
		key = fmt.Appendf(nil, "f:%d", i)
		tb.setState(tb.at(tb.insertFor(key, tb.hash(key), limit.KindFW)), enc(t, limit.FWState{WindowMS: 1000, StartMS: 0, Count: uint64(i)}))
	}
	require.Equal(t, uint32(3*1000), tb.nent)
	require.Zero(t, tb.arena.total)
}

// TestInlineStatesSurviveChurn drives wide entries of random keys through
// inserts, state changes and removes beside GCRA keys and long keys whose
// removal compacts the arena: every state reads back as last written.
func TestInlineStatesSurviveChurn(t *testing.T) {
	tb := newTable(maphash.MakeSeed())
	defer tb.release()
	model := map[string][]byte{}
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range 200000 {
		k := []byte(fmt.Sprint(rng.IntN(3000), ":"))
		for len(k) < rng.IntN(60) {
			k = append(k, 'x')
		}
		var s []byte
		switch rng.IntN(4) {
		case 0:
			s = enc(t, limit.FWState{WindowMS: 1000, StartMS: int64(i) * 1000, Count: uint64(i)})
		case 1:
			s = enc(t, limit.SWCState{WindowMS: 1000, StartMS: int64(i) * 1000, Prev: uint64(i), Cur: uint64(i) << uint(rng.IntN(40))})
		case 2:
			s = enc(t, limit.GCRAState{TAT: uint64(i)})
		default:
			sw := limit.SWLState{WindowMS: 1000}
			for j := range rng.IntN(4) {
				sw.Entries = append(sw.Entries, limit.SWLEntry{TS: int64(i*10 + j), Cost: 1})
			}
			s = enc(t, sw)
		}
		ei := tb.find(k)
		if want, ok := model[string(k)]; ok {
			require.Equal(t, want, tb.state(tb.at(uint32(ei)), nil), "key %q at step %d", k, i)
			if rng.IntN(3) == 0 {
				tb.remove(uint32(ei))
				delete(model, string(k))
				continue
			}
		} else {
			ei = int64(tb.insertFor(k, tb.hash(k), limit.KindOf(s)))
		}
		tb.setState(tb.at(uint32(ei)), s)
		model[string(k)] = s
	}
	for k, want := range model {
		ei := tb.find([]byte(k))
		require.GreaterOrEqual(t, ei, int64(0))
		require.True(t, bytes.Equal(want, tb.state(tb.at(uint32(ei)), nil)), "key %q", k)
	}
}
