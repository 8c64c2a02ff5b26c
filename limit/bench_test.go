package limit

import (
	"testing"
	"time"
)

// benchCase is one limit and a state it admits a cost of 1 on, at benchNow.
type benchCase struct {
	name  string
	limit Limit
	state []byte
}

const benchNow = t0 + 30e9

func benchCases(b *testing.B) []benchCase {
	berlin, err := LoadZone("Europe/Berlin")
	if err != nil {
		b.Fatal(err)
	}
	swl := func(n int) []byte {
		s := SWLState{WindowMS: 3600000}
		for i := range n {
			s.Entries = append(s.Entries, SWLEntry{floorMS(benchNow) - int64(n-i), 1})
		}
		enc, _ := s.AppendBinary(nil)
		return enc
	}
	cases := []benchCase{
		{"gcra", GCRA{MaxBurst: 1000, Count: 100, Period: time.Second}, GCRAState{uint64(benchNow + 1e9)}.appendTo(nil)},
		{"fw", FW{Limit: 1 << 30, Window: time.Minute}, FWState{60000, floorMS(t0), 100}.appendTo(nil)},
		{"swc", SWC{Limit: 1 << 30, Window: time.Minute}, SWCState{60000, floorMS(t0), 100, 100}.appendTo(nil)},
		{"swl-10", SWL{Limit: MaxSWLLimit, Window: time.Hour}, swl(10)},
		{"swl-1000", SWL{Limit: MaxSWLLimit, Window: time.Hour}, swl(1000)},
		{"swl-9999", SWL{Limit: MaxSWLLimit, Window: time.Hour}, swl(9999)},
		{"cal", CAL{Limit: 1 << 30, Unit: Month, Zone: berlin}, nil},
	}
	for i := range cases {
		if cases[i].state == nil { // CAL: the stored period of benchNow
			cases[i].state, _, _ = cases[i].limit.AppendCharged(nil, nil, benchNow, 1)
		}
	}
	return cases
}

var sinkR5 R5

// BenchmarkEval is one limit's decision on an existing key, charging
// nothing (a PEEK, or the first half of any call).
func BenchmarkEval(b *testing.B) {
	for _, c := range benchCases(b) {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				sinkR5, _ = c.limit.Eval(c.state, benchNow, 1, false)
			}
		})
	}
}

// BenchmarkDecide1 is a whole single-limit call that charges: decide,
// then encode the new state into a reused buffer.
func BenchmarkDecide1(b *testing.B) {
	for _, c := range benchCases(b) {
		b.Run(c.name, func(b *testing.B) {
			specs := []Spec{{Limit: c.limit, Cost: 1}}
			states := [][]byte{c.state}
			res := make([]Result, 1)
			buf := make([]byte, 0, 64<<10)
			b.ReportAllocs()
			for b.Loop() {
				_, buf, _ = Decide(specs, states, benchNow, Options{}, res, buf[:0])
			}
		})
	}
}

// BenchmarkDecide2 is the two-limit call of the spec's example (per second
// and per minute): admitted and charging both, or rejected by the second.
func BenchmarkDecide2(b *testing.B) {
	g := GCRA{MaxBurst: 1000, Count: 100, Period: time.Second}
	gs := GCRAState{uint64(benchNow + 1e9)}.appendTo(nil)
	for _, c := range []struct {
		name  string
		limit uint32
	}{{"admitted", 1 << 30}, {"rejected", 100}} {
		b.Run(c.name, func(b *testing.B) {
			fw := FW{Limit: c.limit, Window: time.Minute}
			specs := []Spec{{Limit: g, Cost: 1}, {Limit: fw, Cost: 1}}
			states := [][]byte{gs, FWState{60000, floorMS(t0), 100}.appendTo(nil)}
			res := make([]Result, 2)
			buf := make([]byte, 0, 256)
			b.ReportAllocs()
			for b.Loop() {
				_, buf, _ = Decide(specs, states, benchNow, Options{}, res, buf[:0])
			}
		})
	}
}

var sinkCall Call

func BenchmarkParseLimit(b *testing.B) {
	args := argv("CL.LIMIT {u42}:s GCRA 2 1 1 AND {u42}:min FW 5 60 AND {u42}:day CAL 1000 DAY TZ Europe/Berlin")
	b.ReportAllocs()
	for b.Loop() {
		sinkCall, _ = ParseLimit(args)
	}
}

// BenchmarkParseLimit1 is the common single-limit call, its limit interned.
func BenchmarkParseLimit1(b *testing.B) {
	for _, c := range []string{"CL.LIMIT k:1 FW 100 60", "CL.LIMIT k:1 SWC 100 60 COST 2"} {
		b.Run(c, func(b *testing.B) {
			args := argv(c)
			b.ReportAllocs()
			for b.Loop() {
				sinkCall, _ = ParseLimit(args)
			}
		})
	}
}
