package limit

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestSWLSteps(t *testing.T) {
	swl := SWL{Limit: 5, Window: 100 * time.Second}
	state := runSteps(t, swl, false, []step{
		{at: sec(0), cost: 2, want: r5(0, 5, 3, -1, 100), pttl: pt(100000)},
		{at: sec(0), cost: 1, want: r5(0, 5, 2, -1, 100), note: "same ms: one entry"},
		{at: sec(10), cost: 1, want: r5(0, 5, 1, -1, 100), pttl: pt(100000)},
		{at: sec(10), cost: 0, want: r5(0, 5, 1, -1, 100), note: "COST 0 adds nothing"},
		// 4 counted; 3 more: 2 must leave, both at t0 (one entry of 3).
		{at: sec(20), cost: 3, want: r5(1, 5, 1, 80, 90), pttl: pt(90000)},
		{at: sec(20), cost: 2, want: r5(1, 5, 1, 80, 90)},
		{at: sec(20), cost: 1, want: r5(0, 5, 0, -1, 100)},
		// 5 counted: t0 (3), t0+10 (1), t0+20 (1); 5 more leave at t0+120.
		{at: sec(20), cost: 5, want: r5(1, 5, 0, 100, 100)},
		{at: sec(20), cost: 6, want: r5(1, 5, 0, -1, 100), note: "can never fit"},
		// At t0+100 the t0 entry is out of the window (ts > now - W).
		{at: sec(100), cost: 3, want: r5(0, 5, 0, -1, 100), pttl: pt(100000)},
		// The clock goes back below the newest entry: evaluated there.
		{at: sec(50), cost: 0, want: r5(0, 5, 0, -1, 150)},
		{at: sec(50), cost: 1, want: r5(1, 5, 0, 60, 150), note: "t0+10's entry leaves at t0+110"},
		// A lowered limit: remaining never below 0.
		{at: sec(100), cost: 0, lim: SWL{Limit: 2, Window: 100 * time.Second}, want: r5(1, 2, 0, 100, 100), note: "5 counted, 3 must leave: all three entries"},
		{at: sec(100), cost: 0, lim: SWL{Limit: 4, Window: 100 * time.Second}, want: r5(1, 4, 0, 10, 100), note: "1 must leave: t0+10's"},
		// Another window: fresh, replaced.
		{at: sec(100), cost: 1, lim: SWL{Limit: 2, Window: time.Second}, want: r5(0, 2, 1, -1, 1), pttl: pt(1000)},
	})
	s, err := Decode(state)
	require.NoError(t, err)
	assert.Equal(t, SWLState{WindowMS: 1000, Entries: []SWLEntry{{TS: floorMS(sec(100)), Cost: 1}}}, s)
}

// The log keeps only the entries that count, one per ms.
func TestSWLLog(t *testing.T) {
	l := SWL{Limit: 10, Window: time.Second}
	var state []byte
	for _, c := range []struct {
		at   int64
		cost uint32
	}{{msec(0), 1}, {msec(0), 2}, {msec(500), 1}, {msec(999), 1}, {msec(1000), 4}, {msec(1000), 1}} {
		var err error
		state, _, err = l.AppendCharged(nil, state, c.at, c.cost)
		require.NoError(t, err)
	}
	s, err := Decode(state)
	require.NoError(t, err)
	assert.Equal(t, []SWLEntry{{floorMS(msec(500)), 1}, {floorMS(msec(999)), 1}, {floorMS(msec(1000)), 5}}, s.(SWLState).Entries)

	_, _, err = l.AppendCharged(nil, state, msec(1000), 4)
	assert.ErrorIs(t, err, ErrNotAdmitted)
	_, _, err = l.AppendCharged(nil, state, msec(1000), 0)
	assert.ErrorIs(t, err, ErrNotAdmitted)
}

// The largest log (10000 entries of cost 1) decides and charges.
func TestSWLFull(t *testing.T) {
	l := SWL{Limit: MaxSWLLimit, Window: time.Hour}
	s := SWLState{WindowMS: 3600000}
	for i := range int64(MaxSWLLimit - 1) {
		s.Entries = append(s.Entries, SWLEntry{TS: floorMS(msec(i)), Cost: 1})
	}
	state, err := s.AppendBinary(nil)
	require.NoError(t, err)
	state, _, err = l.AppendCharged(nil, state, msec(MaxSWLLimit-1), 1)
	require.NoError(t, err)
	assert.Len(t, state, 2+swlHead+MaxSWLLimit*swlEntrySize)
	r, err := l.Eval(state, msec(MaxSWLLimit), 1, true)
	require.NoError(t, err)
	assert.Equal(t, r5(1, MaxSWLLimit, 0, 3600000-MaxSWLLimit, 3600000-1), r)
	r, err = l.Eval(state, msec(3600000), 1, true)
	require.NoError(t, err)
	assert.Equal(t, r5(0, MaxSWLLimit, 0, -1, 3600000), r, "the first entry has left")
	_, err = SWLState{WindowMS: 1, Entries: make([]SWLEntry, MaxSWLLimit+1)}.AppendBinary(nil)
	assert.ErrorIs(t, err, ErrCorrupt, "no log above 10000 entries")
}

// retry_after is the smallest wait after which the same call is admitted.
func TestSWLRetryIsSmallest(t *testing.T) {
	rng := rand.New(rand.NewPCG(16, 4))
	checked := 0
	for range 3000 {
		w := int64(1 + rng.IntN(40))
		l := SWL{Limit: uint32(1 + rng.IntN(8)), Window: time.Duration(w) * time.Millisecond}
		var state []byte
		now := t0 + rng.Int64N(1000)*1e6
		for range rng.IntN(12) {
			now += rng.Int64N(w) * 1e6
			c := uint32(1 + rng.IntN(3))
			r, err := l.Eval(state, now, c, true)
			require.NoError(t, err)
			if !r.Limited {
				state, _, err = l.AppendCharged(nil, state, now, c)
				require.NoError(t, err)
			}
		}
		c := uint32(rng.IntN(int(l.Limit) + 1))
		r, err := l.Eval(state, now, c, true)
		require.NoError(t, err)
		if !r.Limited {
			continue
		}
		checked++
		for d := int64(1); d < r.RetryAfter; d++ {
			x, err := l.Eval(state, now+d*1e6, c, true)
			require.NoError(t, err)
			require.True(t, x.Limited, "admitted after %d ms, retry said %d", d, r.RetryAfter)
		}
		x, err := l.Eval(state, now+r.RetryAfter*1e6, c, true)
		require.NoError(t, err)
		require.False(t, x.Limited, "limited after retry %d ms", r.RetryAfter)
	}
	require.Greater(t, checked, 300)
}

// TestSWLEvalMatchesScan checks eval's binary search and sum against a
// plain scan of random logs: the entries that count are those with an
// instant above at - W, whatever their number and the clock's place.
func TestSWLEvalMatchesScan(t *testing.T) {
	rnd := rand.New(rand.NewPCG(3, 4))
	for range 2000 {
		w := 1 + rnd.Int64N(1000)
		s := SWLState{WindowMS: w}
		ts := int64(1_700_000_000_000)
		for range rnd.IntN(40) {
			ts += 1 + rnd.Int64N(50)
			s.Entries = append(s.Entries, SWLEntry{TS: ts, Cost: 1 + uint32(rnd.Int64N(1<<32-1))})
		}
		enc, err := s.AppendBinary(nil)
		require.NoError(t, err)
		now := 1_700_000_000_000 + rnd.Int64N(ts-1_700_000_000_000+2*w+1)
		e, err := SWL{Limit: 1, Window: time.Duration(w) * time.Millisecond}.eval(enc[headerSize:], now)
		require.NoError(t, err)
		at := now
		if len(s.Entries) > 0 {
			at = max(at, s.newestTS())
		}
		from, used := len(s.Entries), uint64(0)
		for i, x := range s.Entries {
			if x.TS > at-w {
				from = min(from, i)
				used += uint64(x.Cost)
			}
		}
		require.Equal(t, from, e.from, "%+v at %d", s, now)
		require.Equal(t, used, e.used, "%+v at %d", s, now)
	}
}
