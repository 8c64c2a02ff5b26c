package limit

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// decideOnce runs Decide on fresh result slots and returns the decision and
// the results.
func decideOnce(t *testing.T, specs []Spec, states [][]byte, now int64, opt Options) (Decision, []Result) {
	t.Helper()
	res := make([]Result, len(specs))
	d, _, err := Decide(specs, states, now, opt, res, nil)
	require.NoError(t, err)
	return d, res
}

func charge(t *testing.T, l Limit, state []byte, now int64, cost uint32) []byte {
	t.Helper()
	b, _, err := l.AppendCharged(nil, state, now, cost)
	require.NoError(t, err)
	return b
}

// A rejected call charges nothing, and the limits that would admit show
// their state before charging; GCRA its CL.THROTTLE reply with quantity 0.
func TestDecideAllOrNothing(t *testing.T) {
	g := GCRA{MaxBurst: 4, Count: 1, Period: time.Second}
	fw := FW{Limit: 10, Window: time.Minute}
	swl := SWL{Limit: 2, Window: time.Minute}
	gs := charge(t, g, nil, t0, 2)   // TAT t0+2s
	fs := charge(t, fw, nil, t0, 3)  // 3 of 10
	ss := charge(t, swl, nil, t0, 2) // full
	specs := []Spec{{Limit: g, Cost: 1}, {Limit: fw, Cost: 2}, {Limit: swl, Cost: 1}}
	states := [][]byte{gs, fs, ss}

	d, res := decideOnce(t, specs, states, t0, Options{})
	assert.Equal(t, Decision{R5: r5(1, 2, 0, 60, 60), Index: 3}, d)
	assert.Equal(t, r5(0, 5, 3, -1, 2), res[0].R5, "GCRA: quantity 0, not charged")
	assert.Equal(t, r5(0, 10, 7, -1, 60), res[1].R5, "FW: before charging")
	for _, r := range res {
		assert.False(t, r.Write)
	}

	// Without the full SWL the same call is admitted and charges both.
	d, res = decideOnce(t, specs[:2], states[:2], t0, Options{})
	assert.Equal(t, Decision{R5: r5(0, 5, 2, -1, 3), Index: 1}, d)
	assert.Equal(t, r5(0, 10, 5, -1, 60), res[1].R5)
	require.True(t, res[0].Write && res[1].Write)
	assert.Equal(t, charge(t, g, gs, t0, 1), res[0].State)
	assert.Equal(t, charge(t, fw, fs, t0, 2), res[1].State)
	assert.Equal(t, floorMS(t0)+3000, res[0].ExpireAt)
	assert.Equal(t, floorMS(t0)+60000, res[1].ExpireAt)

	// PEEK: the same reply, nothing written.
	pd, pres := decideOnce(t, specs[:2], states[:2], t0, Options{Peek: true})
	assert.Equal(t, d, pd)
	for i := range pres {
		assert.Equal(t, res[i].R5, pres[i].R5)
		assert.False(t, pres[i].Write)
	}

	// COST 0: decided, never written.
	specs[1].Cost = 0
	_, res = decideOnce(t, specs[:2], states[:2], t0, Options{})
	assert.True(t, res[0].Write)
	assert.False(t, res[1].Write)
	assert.Nil(t, res[1].State)
}

func TestDecideDeciding(t *testing.T) {
	fw := func(l uint32) FW { return FW{Limit: l, Window: time.Minute} }
	full := func(l uint32) []byte { return charge(t, fw(l), nil, t0, l) }
	at := sec(10) // 50 s to the window's end

	// Admitted: the least remaining, ties to the lowest index.
	d, _ := decideOnce(t, []Spec{{Limit: fw(5), Cost: 1}, {Limit: fw(3), Cost: 1}, {Limit: fw(3), Cost: 1}}, make([][]byte, 3), at, Options{})
	assert.Equal(t, 2, d.Index)
	assert.Equal(t, int64(2), d.Remaining)

	// Rejected: the largest retry_after, -1 (never) the largest.
	swc := SWC{Limit: 2, Window: time.Second}
	specs := []Spec{{Limit: fw(2), Cost: 1}, {Limit: swc, Cost: 1}, {Limit: fw(2), Cost: 3}, {Limit: fw(2), Cost: 3}}
	states := [][]byte{full(2), charge(t, swc, nil, at, 2), nil, nil}
	d, res := decideOnce(t, specs, states, at, Options{})
	assert.Equal(t, 3, d.Index, "the first that can never fit")
	assert.Equal(t, r5(1, 2, 2, -1, 0), d.R5)
	assert.Equal(t, int64(50), res[0].RetryAfter)

	d, _ = decideOnce(t, specs[:2], states[:2], at, Options{})
	assert.Equal(t, 1, d.Index, "50 s over the SWC's 1 s")

	// Ties are of the values as reported: 1.2 s and 1.5 s are both 2 s.
	a := SWL{Limit: 1, Window: 1200 * time.Millisecond}
	b := SWL{Limit: 1, Window: 1500 * time.Millisecond}
	specs = []Spec{{Limit: b, Cost: 1}, {Limit: a, Cost: 1}}
	states = [][]byte{charge(t, b, nil, at, 1), charge(t, a, nil, at, 1)}
	d, _ = decideOnce(t, specs, states, at, Options{})
	assert.Equal(t, Decision{R5: r5(1, 1, 0, 2, 2), Index: 1}, d)
	d, _ = decideOnce(t, specs, states, at, Options{MS: true})
	assert.Equal(t, Decision{R5: r5(1, 1, 0, 1500, 1500), Index: 1}, d)
	specs[0], specs[1], states[0], states[1] = specs[1], specs[0], states[1], states[0]
	d, _ = decideOnce(t, specs, states, at, Options{})
	assert.Equal(t, 1, d.Index)
	d, _ = decideOnce(t, specs, states, at, Options{MS: true})
	assert.Equal(t, 2, d.Index)
}

func TestDecideErrors(t *testing.T) {
	fw := FW{Limit: 5, Window: time.Minute}
	fs := charge(t, fw, nil, t0, 1)
	gs := GCRAState{uint64(t0)}.appendTo(nil)
	res := make([]Result, MaxLimits+1)
	cases := []struct {
		specs  []Spec
		states [][]byte
		err    error
	}{
		{[]Spec{{Limit: fw, Cost: 1}}, [][]byte{gs}, ErrWrongType},
		{[]Spec{{Limit: SWC{Limit: 5, Window: time.Minute}, Cost: 1}}, [][]byte{fs}, ErrWrongType},
		{[]Spec{{Limit: GCRA{1, 1, time.Second}, Cost: 1}}, [][]byte{fs}, ErrWrongType},
		// WRONGTYPE anywhere wins, before anything is decided.
		{[]Spec{{Limit: fw, Cost: 9}, {Limit: fw, Cost: 1}}, [][]byte{{0xff}, gs}, ErrCorrupt},
		{[]Spec{{Limit: fw, Cost: 9}, {Limit: fw, Cost: 1}}, [][]byte{fs[:5], gs}, ErrWrongType},
		{[]Spec{{Limit: fw, Cost: 1}}, [][]byte{fs[:5]}, ErrCorrupt},
		{[]Spec{{Limit: fw, Cost: 1}}, [][]byte{{}}, ErrCorrupt},
		{nil, nil, ErrBadCall},
		{make([]Spec, MaxLimits+1), make([][]byte, MaxLimits+1), ErrBadCall},
		{[]Spec{{Limit: fw, Cost: 1}}, nil, ErrBadCall},
	}
	for i, c := range cases {
		_, _, err := Decide(c.specs, c.states, t0, Options{}, res, nil)
		assert.ErrorIs(t, err, c.err, "case %d", i)
	}
	_, _, err := Decide([]Spec{{Limit: fw, Cost: 1}}, [][]byte{nil}, t0, Options{}, nil, nil)
	assert.ErrorIs(t, err, ErrBadCall)
}

// New states are slices of the returned buffer, right even when it grew,
// and what the buffer held before is kept.
func TestDecideBuffer(t *testing.T) {
	var specs []Spec
	var states [][]byte
	for i := range MaxLimits {
		specs = append(specs, Spec{Limit: SWL{Limit: 100, Window: time.Duration(i+1) * time.Second}, Cost: uint32(i + 1)})
		states = append(states, nil)
	}
	res := make([]Result, len(specs))
	buf := append(make([]byte, 0, 4), "keep"...)
	_, buf, err := Decide(specs, states, t0, Options{}, res, buf)
	require.NoError(t, err)
	assert.Equal(t, "keep", string(buf[:4]))
	for i, r := range res {
		require.True(t, r.Write)
		s, err := Decode(r.State)
		require.NoError(t, err)
		assert.Equal(t, SWLState{WindowMS: int64(i+1) * 1000, Entries: []SWLEntry{{floorMS(t0), uint32(i + 1)}}}, s)
		assert.Equal(t, floorMS(t0)+int64(i+1)*1000, r.ExpireAt)
	}
}

// The 2-limit decision on GCRA, FW and SWC keys does not allocate.
func TestDecideAllocs(t *testing.T) {
	g := GCRA{MaxBurst: 100, Count: 10, Period: time.Second}
	fw := FW{Limit: 1 << 30, Window: time.Minute}
	swc := SWC{Limit: 1 << 30, Window: time.Minute}
	specs := []Spec{{Limit: g, Cost: 1}, {Limit: fw, Cost: 1}, {Limit: swc, Cost: 1}}
	states := [][]byte{charge(t, g, nil, t0, 1), charge(t, fw, nil, t0, 1), charge(t, swc, nil, t0, 1)}
	res := make([]Result, len(specs))
	buf := make([]byte, 0, 256)
	allocs := testing.AllocsPerRun(100, func() {
		_, buf, _ = Decide(specs, states, t0, Options{}, res, buf[:0])
	})
	assert.Zero(t, allocs)
}

// Capacity is the limit every algorithm's R5 shows.
func TestCapacityIsR5Limit(t *testing.T) {
	for _, l := range []Limit{
		GCRA{MaxBurst: 4, Count: 10, Period: time.Minute},
		FW{Limit: 7, Window: time.Minute},
		SWC{Limit: 8, Window: time.Minute},
		SWL{Limit: 9, Window: time.Minute},
		CAL{Limit: 11, Unit: Day},
	} {
		r, err := l.Eval(nil, 1_800_000_000*int64(time.Second), 1, false)
		require.NoError(t, err)
		assert.Equal(t, r.Limit, Capacity(l), "%T", l)
	}
	assert.Zero(t, Capacity(nil))
}
