package limit

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The typed one-limit decisions (DecideFW, DecideSWC, DecideGCRA) and
// DecideFields, which a store that keeps states as fields calls instead of
// Decide, give Decide's answer: the same decision, results and next state,
// whatever was in the caller's d and res before.
func TestTypedDecisionsMatchDecide(t *testing.T) {
	rnd := rand.New(rand.NewPCG(16, 19))
	base := int64(1_700_000_000_000) * int64(time.Millisecond)
	for i := range 20000 {
		var l Limit
		switch i % 3 {
		case 0:
			l = FW{Limit: 1 + rnd.Uint32N(5), Window: time.Duration(1+rnd.IntN(3000)) * time.Millisecond}
		case 1:
			l = SWC{Limit: 1 + rnd.Uint32N(5), Window: time.Duration(1+rnd.IntN(3000)) * time.Millisecond}
		default:
			l = GCRA{MaxBurst: rnd.Uint32N(4), Count: 1 + rnd.Uint32N(5), Period: time.Duration(1+rnd.IntN(3000)) * time.Millisecond}
		}
		// A state built by a few charges, or none (a missing key).
		now := base + rnd.Int64N(10_000)*int64(time.Millisecond)
		var state []byte
		for range rnd.IntN(6) {
			if next, _, err := l.AppendCharged(nil, state, now, 1+rnd.Uint32N(2)); err == nil {
				state = next
			}
			now += rnd.Int64N(800) * int64(time.Millisecond)
		}
		now += rnd.Int64N(int64(time.Second))
		spec := Spec{Key: []byte("k"), Limit: l, Cost: rnd.Uint32N(4)}
		opt := Options{Peek: rnd.IntN(4) == 0, MS: rnd.IntN(2) == 0}

		wantRes := make([]Result, 1)
		want, _, err := Decide([]Spec{spec}, [][]byte{state}, now, opt, wantRes, nil)
		require.NoError(t, err)
		w := wantRes[0]

		// Garbage in d and res: the typed decisions must set every field.
		junk := R5{Limited: true, Limit: -7, Remaining: -7, RetryAfter: -7, ResetAfter: -7}
		d, res := Decision{R5: junk, Index: 9}, Result{R5: junk, Write: true, State: []byte("x"), ExpireAt: -7}
		var got []byte
		found := state != nil
		switch l := l.(type) {
		case FW:
			s, _ := DecodeFW(state)
			next := DecideFW(l, s, found, now, spec.Cost, opt, &d, &res)
			got = next.appendTo(nil)
		case SWC:
			s, _, err := swcOf(state)
			require.NoError(t, err)
			next := DecideSWC(l, s, found, now, spec.Cost, opt, &d, &res)
			got = next.appendTo(nil)
		case GCRA:
			tat, _, err := gcraOf(state)
			require.NoError(t, err)
			next, err := DecideGCRA(l, GCRAState{tat}, found, now, spec.Cost, opt, &d, &res)
			require.NoError(t, err)
			got = next.appendTo(nil)
		}
		require.Equal(t, want, d, "case %d: %+v %+v", i, spec, opt)
		require.Equal(t, w.R5, res.R5, "case %d", i)
		require.Equal(t, w.Write, res.Write, "case %d", i)
		require.Nil(t, res.State, "case %d", i)
		if w.Write {
			require.Equal(t, w.ExpireAt, res.ExpireAt, "case %d", i)
			require.Equal(t, w.State, got, "case %d", i)
		}

		// DecideFields, on the state as fields.
		var f Fields
		if found {
			st, err := Decode(state)
			require.NoError(t, err)
			switch st := st.(type) {
			case FWState:
				f = Fields{Kind: KindFW, FW: st}
			case SWCState:
				f = Fields{Kind: KindSWC, SWC: st}
			case GCRAState:
				f = Fields{Kind: KindGCRA, GCRA: st}
			}
		}
		fres, next := make([]Result, 1), make([]Fields, 1)
		fd, err := DecideFields([]Spec{spec}, []Fields{f}, now, opt, fres, next)
		require.NoError(t, err)
		require.Equal(t, want, fd, "case %d", i)
		require.Equal(t, w.R5, fres[0].R5, "case %d", i)
		require.Equal(t, w.Write, fres[0].Write, "case %d", i)
		if w.Write {
			require.Equal(t, w.ExpireAt, fres[0].ExpireAt, "case %d", i)
			var enc []byte
			switch next[0].Kind {
			case KindFW:
				enc = next[0].FW.appendTo(nil)
			case KindSWC:
				enc = next[0].SWC.appendTo(nil)
			case KindGCRA:
				enc = next[0].GCRA.appendTo(nil)
			}
			require.Equal(t, w.State, enc, "case %d", i)
		}
	}
}
