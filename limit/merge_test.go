package limit

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestMerge(t *testing.T) {
	now := t0
	ms := floorMS(now)
	day := int64(86400000)
	cases := []struct {
		a, b State
		want State
		exp  int64
		note string
	}{
		{GCRAState{uint64(now + 3e9)}, GCRAState{uint64(now + 2e9)}, GCRAState{uint64(now + 5e9)}, ms + 5000, "debts add up"},
		{GCRAState{uint64(now - 1e9)}, GCRAState{uint64(now + 2e9)}, GCRAState{uint64(now + 2e9)}, ms + 2000, "no debt in the past"},
		{GCRAState{uint64(now - 1e9)}, GCRAState{uint64(now - 2e9)}, GCRAState{uint64(now - 1e9)}, ms, "no debt at all"},
		{GCRAState{1<<64 - 1}, GCRAState{1<<64 - 1}, GCRAState{1<<64 - 1}, ms + int64((1<<64-1-uint64(now))/1e6), "saturates"},

		{FWState{60000, ms, 3}, FWState{60000, ms, 4}, FWState{60000, ms, 7}, ms + 60000, "counts add up"},
		{FWState{60000, ms, 3}, FWState{60000, ms - 60000, 40}, FWState{60000, ms, 3}, ms + 60000, "the earlier window is over"},
		{FWState{60000, ms, 3}, FWState{1000, ms + 5000, 1}, FWState{1000, ms + 5000, 1}, ms + 6000, "other windows: the later start"},
		{FWState{60000, ms, 3}, FWState{1000, ms, 9}, FWState{60000, ms, 3}, ms + 60000, "same start: the longer window"},

		{SWCState{1000, ms, 1, 2}, SWCState{1000, ms, 3, 4}, SWCState{1000, ms, 4, 6}, ms + 2000, "same window"},
		{SWCState{1000, ms, 1, 2}, SWCState{1000, ms - 1000, 30, 4}, SWCState{1000, ms, 5, 2}, ms + 2000, "one apart: cur becomes prev"},
		{SWCState{1000, ms, 1, 2}, SWCState{1000, ms - 2000, 30, 40}, SWCState{1000, ms, 1, 2}, ms + 2000, "two apart: out of the window"},

		{SWLState{1000, []SWLEntry{{ms - 500, 1}, {ms - 10, 2}}}, SWLState{1000, []SWLEntry{{ms - 2000, 9}, {ms - 10, 3}, {ms, 1}}},
			SWLState{1000, []SWLEntry{{ms - 500, 1}, {ms - 10, 5}, {ms, 1}}}, ms + 1000, "logs unite; out-of-window entries go"},
		{SWLState{1000, nil}, SWLState{1000, []SWLEntry{{ms - 1000, 9}}}, SWLState{1000, []SWLEntry{}}, ms, "nothing counts"},
		{SWLState{1000, []SWLEntry{{ms + 50, 1}}}, SWLState{1000, []SWLEntry{{ms - 960, 2}}},
			SWLState{1000, []SWLEntry{{ms + 50, 1}}}, ms + 1050, "pruned at the newest entry, which is after now"},

		{CALState{Day, "UTC", ms - 1000, ms + day, 5}, CALState{Day, "UTC", ms - 1000, ms + day, 6}, CALState{Day, "UTC", ms - 1000, ms + day, 11}, ms + day, "same period"},
		{CALState{Day, "UTC", ms - 1000, ms + day, 5}, CALState{Day, "UTC", ms - 1000 - day, ms - 1000, 60}, CALState{Day, "UTC", ms - 1000, ms + day, 5}, ms + day, "later period"},
		{CALState{Day, "UTC", ms - 1000, ms + day, 5}, CALState{Day, "Asia/Kolkata", ms - 500, ms + day, 6}, CALState{Day, "Asia/Kolkata", ms - 500, ms + day, 6}, ms + day, "another zone: the later start"},
	}
	for _, c := range cases {
		for _, swap := range []bool{false, true} {
			a, b := c.a, c.b
			if swap {
				a, b = b, a
			}
			got, exp, err := Merge(a, b, now)
			require.NoError(t, err, c.note)
			assert.Equal(t, c.want, got, "%s (swapped %v)", c.note, swap)
			assert.Equal(t, c.exp, exp, "%s (swapped %v): expiry", c.note, swap)
		}
	}
	_, _, err := Merge(FWState{1, 0, 1}, SWCState{1, 0, 0, 1}, now)
	assert.ErrorIs(t, err, ErrKindMismatch)
}

// A merged state charges what both sides allowed: after a side admitted
// a and the other b, the merged key has room for exactly L-a-b.
func TestMergeChargesBoth(t *testing.T) {
	limits := []Limit{
		GCRA{MaxBurst: 9, Count: 1, Period: time.Second},
		FW{Limit: 10, Window: time.Minute},
		SWC{Limit: 10, Window: time.Minute},
		SWL{Limit: 10, Window: time.Minute},
		CAL{Limit: 10, Unit: Day, Zone: zone(t, "Europe/Berlin")},
	}
	for _, l := range limits {
		var a, b []byte
		var err error
		a, _, err = l.AppendCharged(nil, nil, t0, 3)
		require.NoError(t, err)
		b, _, err = l.AppendCharged(nil, nil, t0+1e6, 4)
		require.NoError(t, err)
		m, _, err := MergeEncoded(nil, a, b, t0+1e6)
		require.NoError(t, err)
		r, err := l.Eval(m, t0+1e6, 0, false)
		require.NoError(t, err)
		assert.Equal(t, int64(3), r.Remaining, "%T", l)
		r, err = l.Eval(m, t0+1e6, 4, false)
		require.NoError(t, err)
		assert.True(t, r.Limited, "%T: 4 more do not fit", l)
	}
}

// Merge is commutative on random states of every kind.
func TestMergeCommutes(t *testing.T) {
	rng := rand.New(rand.NewPCG(16, 6))
	ms := floorMS(t0)
	gen := []func() State{
		func() State { return GCRAState{uint64(t0 + rng.Int64N(1e10) - 5e9)} },
		func() State {
			w := int64(1000 * (1 + rng.IntN(3)))
			return FWState{w, (ms/w - int64(rng.IntN(3))) * w, rng.Uint64N(5)}
		},
		func() State {
			w := int64(1000 * (1 + rng.IntN(3)))
			return SWCState{w, (ms/w - int64(rng.IntN(3))) * w, rng.Uint64N(5), rng.Uint64N(5)}
		},
		func() State {
			s := SWLState{WindowMS: int64(1000 * (1 + rng.IntN(2))), Entries: []SWLEntry{}}
			ts := ms - 2000
			for range rng.IntN(6) {
				ts += 1 + rng.Int64N(500)
				s.Entries = append(s.Entries, SWLEntry{ts, uint32(1 + rng.IntN(3))})
			}
			return s
		},
		func() State {
			z := []string{"UTC", "Europe/Berlin"}[rng.IntN(2)]
			start := ms - rng.Int64N(3)*1000
			return CALState{Unit(1 + rng.IntN(2)), z, start, start + 86400000, rng.Uint64N(5)}
		},
	}
	for range 5000 {
		g := gen[rng.IntN(len(gen))]
		a, b := g(), g()
		ab, e1, err := Merge(a, b, t0)
		require.NoError(t, err)
		ba, e2, err := Merge(b, a, t0)
		require.NoError(t, err)
		require.Equal(t, ab, ba, "%#v %#v", a, b)
		require.Equal(t, e1, e2)
		_, err = Encode(ab)
		require.NoError(t, err)
	}
}

// A union above 10000 entries folds its oldest entries forward: the
// total cost is kept, the log stays encodable.
func TestMergeFoldsLongLogs(t *testing.T) {
	ms := floorMS(t0)
	var a, b SWLState
	a.WindowMS, b.WindowMS = 3600000, 3600000
	for i := range int64(MaxSWLLimit) {
		a.Entries = append(a.Entries, SWLEntry{ms - 20000 + 2*i, 1})
		b.Entries = append(b.Entries, SWLEntry{ms - 20000 + 2*i + 1, 1})
	}
	m, _, err := Merge(a, b, t0)
	require.NoError(t, err)
	es := m.(SWLState).Entries
	require.Len(t, es, MaxSWLLimit)
	sum := 0
	for _, x := range es {
		sum += int(x.Cost)
	}
	assert.Equal(t, 2*MaxSWLLimit, sum)
	assert.Equal(t, uint32(MaxSWLLimit+1), es[0].Cost)
	_, err = Encode(m)
	assert.NoError(t, err)
}
