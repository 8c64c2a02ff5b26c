package limit

import (
	"bytes"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Every state's bytes, field by field: a change of layout fails here and
// must come with a new format version.
func TestEncoding(t *testing.T) {
	cases := []struct {
		s   State
		hex string
	}{
		{GCRAState{TAT: 0x0102030405060708}, "01 01 0102030405060708"},
		{FWState{WindowMS: 60000, StartMS: 1699999200000, Count: 7},
			"02 01 000000000000ea60 0000018bcfd93300 0000000000000007"},
		{SWCState{WindowMS: 1000, StartMS: -2000, Prev: 1, Cur: 1 << 40},
			"03 01 00000000000003e8 fffffffffffff830 0000000000000001 0000010000000000"},
		{SWLState{WindowMS: 900000, Entries: []SWLEntry{{1699999200000, 1}, {1699999260000, 65536}}},
			"04 01 00000000000dbba0 00000002 0000018bcfd93300 00000001 0000018bcfda1d60 00010000"},
		{SWLState{WindowMS: 1}, "04 01 0000000000000001 00000000"},
		{CALState{Unit: Month, Zone: "UTC", StartMS: 1698796800000, EndMS: 1701388800000, Count: 250},
			"05 01 03 03 555443 0000018b882e0800 0000018c22acd000 00000000000000fa"},
	}
	for _, c := range cases {
		want, err := hex.DecodeString(strings.ReplaceAll(c.hex, " ", ""))
		require.NoError(t, err)
		got, err := c.s.AppendBinary([]byte("x"))
		require.NoError(t, err)
		assert.Equal(t, want, got[1:], "%#v", c.s)
		back, err := Decode(want)
		require.NoError(t, err)
		if sw, ok := c.s.(SWLState); ok && sw.Entries == nil {
			sw.Entries = []SWLEntry{}
			c.s = sw
		}
		assert.Equal(t, c.s, back)
		assert.Equal(t, c.s.Kind(), KindOf(want))
	}
	assert.Len(t, mustEncode(t, GCRAState{}), 10)
	assert.Len(t, mustEncode(t, FWState{WindowMS: 1}), 26)
	assert.Len(t, mustEncode(t, SWCState{WindowMS: 1}), 34)
}

func mustEncode(t *testing.T, s State) []byte {
	t.Helper()
	b, err := Encode(s)
	require.NoError(t, err)
	return b
}

func TestDecodeRejects(t *testing.T) {
	good := map[Kind][]byte{
		KindGCRA: mustEncode(t, GCRAState{1}),
		KindFW:   mustEncode(t, FWState{WindowMS: 1000, StartMS: 5000, Count: 1}),
		KindSWC:  mustEncode(t, SWCState{WindowMS: 1000, StartMS: 5000, Cur: 1}),
		KindSWL:  mustEncode(t, SWLState{WindowMS: 10, Entries: []SWLEntry{{1, 1}, {2, 1}}}),
		KindCAL:  mustEncode(t, CALState{Unit: Day, Zone: "UTC", StartMS: 0, EndMS: 86400000}),
	}
	bad := [][]byte{nil, {}, {1}, {0, 1}, {6, 1}, {0xff, 1, 0, 0}}
	for k, b := range good {
		for n := range len(b) {
			bad = append(bad, b[:n]) // every truncation
		}
		bad = append(bad, append(bytes.Clone(b), 0))         // a byte too many
		bad = append(bad, append([]byte{b[0], 2}, b[2:]...)) // another version
		_, err := Decode(b)
		require.NoError(t, err, k)
	}
	patch := func(k Kind, at int, v ...byte) []byte {
		b := bytes.Clone(good[k])
		copy(b[at:], v)
		return b
	}
	bad = append(bad,
		patch(KindFW, 2, 0, 0, 0, 0, 0, 0, 0, 0),                                     // window 0
		patch(KindFW, 2, 0, 0, 0, 7, 0x5c, 0xec, 0x28, 0x01, 0, 0, 0, 0, 0, 0, 0, 0), // window above 366 days
		patch(KindFW, 17, 1),                            // start not a multiple of the window
		patch(KindSWC, 17, 1),                           // same
		patch(KindSWL, 10, 0, 0, 0, 3),                  // count says 3, holds 2
		patch(KindSWL, 14+12+7, 1),                      // second entry not after the first
		patch(KindSWL, 14+8, 0, 0, 0, 0),                // a zero cost
		patch(KindCAL, 2, 0),                            // unit 0
		patch(KindCAL, 2, 5),                            // unit 5
		patch(KindCAL, 3, 0),                            // empty zone
		patch(KindCAL, 3, 4),                            // zone length beyond the body
		patch(KindCAL, 2+2+3+8, 0, 0, 0, 0, 0, 0, 0, 0), // end <= start
	)
	for _, b := range bad {
		s, err := Decode(b)
		assert.ErrorIs(t, err, ErrCorrupt, "%x decoded as %#v", b, s)
	}
}

func TestInspect(t *testing.T) {
	cases := []struct {
		s    State
		want []Field
	}{
		{GCRAState{42}, []Field{{"type", "gcra"}, {"tat_ns", int64(42)}}},
		{GCRAState{1<<64 - 1}, []Field{{"type", "gcra"}, {"tat_ns", "18446744073709551615"}}},
		{FWState{60000, 120000, 3}, []Field{{"type", "fw"}, {"window_ms", int64(60000)}, {"window_start_ms", int64(120000)}, {"count", int64(3)}}},
		{SWCState{1000, 5000, 1, 2}, []Field{{"type", "swc"}, {"window_ms", int64(1000)}, {"window_start_ms", int64(5000)}, {"prev", int64(1)}, {"cur", int64(2)}}},
		{SWLState{10, []SWLEntry{{1, 2}, {3, 4}}}, []Field{{"type", "swl"}, {"window_ms", int64(10)}, {"entries", [][2]int64{{1, 2}, {3, 4}}}}},
		{CALState{Week, "Europe/Berlin", 10, 20, 5}, []Field{{"type", "cal"}, {"unit", "WEEK"}, {"zone", "Europe/Berlin"},
			{"window_start_ms", int64(10)}, {"window_end_ms", int64(20)}, {"count", int64(5)}}},
	}
	for _, c := range cases {
		got, err := Inspect(mustEncode(t, c.s))
		require.NoError(t, err)
		assert.Equal(t, c.want, got)
	}
	_, err := Inspect([]byte{9, 9})
	assert.ErrorIs(t, err, ErrCorrupt)
	assert.Equal(t, "string", KindGCRA.TypeName())
	assert.Equal(t, "cl-limit", KindSWL.TypeName())
	assert.Equal(t, "kind(9)", Kind(9).String())
}

// fuzzLimits are evaluated against every fuzzed state.
var fuzzLimits = []Limit{
	GCRA{MaxBurst: 3, Count: 1, Period: time.Second},
	FW{Limit: 5, Window: time.Second}, FW{Limit: 5, Window: 10 * time.Millisecond},
	SWC{Limit: 5, Window: time.Second}, SWC{Limit: 5, Window: 10 * time.Millisecond},
	SWL{Limit: 5, Window: time.Second}, SWL{Limit: 5, Window: 10 * time.Millisecond},
	CAL{Limit: 5, Unit: Day}, CAL{Limit: 5, Unit: Month},
}

// FuzzDecode: no input makes Decode or a decision panic; anything that
// decodes encodes back to the same bytes (the encoding is canonical).
func FuzzDecode(f *testing.F) {
	seeds := []State{
		GCRAState{uint64(t0)}, FWState{1000, floorMS(t0), 3}, SWCState{1000, floorMS(t0), 2, 3},
		SWLState{1000, []SWLEntry{{floorMS(t0), 1}, {floorMS(t0) + 5, 2}}},
		CALState{Day, "UTC", floorMS(t0) - 79200000, floorMS(t0) + 7200000, 4},
	}
	for _, s := range seeds {
		b, _ := Encode(s)
		f.Add(b, int64(0))
	}
	f.Add([]byte{4, 1, 0, 0, 0, 0, 0, 0, 0, 1, 0xff, 0xff, 0xff, 0xff}, int64(5))
	f.Fuzz(func(t *testing.T, b []byte, dt int64) {
		now := t0 + dt%(1<<50)
		s, err := Decode(b)
		if err == nil {
			again, err := s.AppendBinary(nil)
			require.NoError(t, err)
			require.Equal(t, b, again)
			_, err = Inspect(b)
			require.NoError(t, err)
			_, _, err = Merge(s, s, now)
			require.NoError(t, err)
		} else {
			require.ErrorIs(t, err, ErrCorrupt)
		}
		for _, l := range fuzzLimits {
			for _, c := range []uint32{0, 1, 5, 6} {
				r, err := l.Eval(b, now, c, false)
				if err != nil || r.Limited || c == 0 {
					continue
				}
				nb, _, err := l.AppendCharged(nil, b, now, c)
				require.NoError(t, err, "%T admitted cost %d", l, c)
				_, err = Decode(nb)
				require.NoError(t, err)
			}
		}
	})
}

// FuzzParseLimit: no argument list makes the parser panic, and every
// error is one of the client-facing ones.
func FuzzParseLimit(f *testing.F) {
	for _, s := range []string{
		"k FW 10 60", "k GCRA 1 2 3 COST 4 AND j CAL 5 DAY TZ Europe/Berlin COST 1 PEEK MS",
		"k SWL 10001 60", "AND FW 1 1 AND PEEK FW 1 1 PEEK", "k CAL 1 WEEK TZ Asia/Kolkata",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		args := [][]byte{[]byte("CL.LIMIT")}
		for _, a := range strings.Split(s, " ") {
			args = append(args, []byte(a))
		}
		c, err := ParseLimit(args)
		if err != nil {
			require.True(t, strings.HasPrefix(err.Error(), "ERR "), err.Error())
			return
		}
		require.NotEmpty(t, c.Limits)
		require.LessOrEqual(t, len(c.Limits), MaxLimits)
		for _, sp := range c.Limits {
			require.NoError(t, sp.Limit.Validate())
		}
	})
}
