package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"testing"

	"github.com/cellserver/cellserver/bench"
	"github.com/stretchr/testify/require"
)

// TestFlatRatiosPairRounds: each ratio is one round's big run over the
// same round's 100k run; warm-ups and failed runs are left out.
func TestFlatRatiosPairRounds(t *testing.T) {
	sr := &scenarioResult{Systems: []*systemResult{
		{System: sysCell100k, Runs: []runResult{
			{Round: 0, CPUPerOp: 9}, {Round: 1, CPUPerOp: 2}, {Round: 2, CPUPerOp: 1.5},
			{Round: 3, Error: "timeout"}, {Round: 4, CPUPerOp: 1},
		}},
		{System: "cellserver, 10M live keys", Runs: []runResult{
			{Round: 0, CPUPerOp: 1}, {Round: 1, CPUPerOp: 2.5}, {Round: 2, CPUPerOp: 1.8},
			{Round: 3, CPUPerOp: 5}, {Round: 4, Error: "timeout"}, {Round: 5},
		}},
	}}
	sr.Systems[0].Runs = append(sr.Systems[0].Runs, runResult{Round: 5, CPUPerOp: 1}) // its pair measured no CPU
	require.InDeltaSlice(t, []float64{1.25, 1.2}, flatRatios(sr), 1e-9)
	require.Equal(t, "1.25x, 1.20x", fmtRatios(flatRatios(sr)))
	require.Nil(t, flatRatios(&scenarioResult{}))
}

// TestReportFlatVerdict renders a saved run's report: the flatness verdict
// is the median of its round-by-round ratios.
func TestReportFlatVerdict(t *testing.T) {
	raw, err := os.ReadFile("../../results/compare-20261130-082916.json")
	require.NoError(t, err)
	var r compareResult
	require.NoError(t, json.Unmarshal(raw, &r))
	var rs []float64
	for _, sc := range r.Scenarios {
		if sc.Scenario.Flat {
			rs = flatRatios(sc)
		}
	}
	require.Len(t, rs, 2)
	out := report(&r)
	require.Contains(t, out, "median of 2 alternating pairs: "+fmtRatios(rs))
	require.Contains(t, out, "| "+ratio(median(rs), 1)+" | no |")
}

// TestUnknownCommandSkips: only Redis's unknown-command reply makes a
// system sit a scenario out; any other failure still stops the run.
func TestUnknownCommandSkips(t *testing.T) {
	err := fmt.Errorf("old: CL.LIMIT k FW 1 1 answered %w", errorReply("ERR unknown command 'CL.LIMIT', with args beginning with: 'k' "))
	why, ok := unknownCommand(err)
	require.True(t, ok)
	require.Equal(t, "ERR unknown command 'CL.LIMIT'", why)
	_, ok = unknownCommand(fmt.Errorf("x: %w", errorReply("WRONGTYPE Operation against a key holding the wrong kind of value")))
	require.False(t, ok)
	_, ok = unknownCommand(errors.New("ERR unknown command 'CL.LIMIT'")) // not a reply
	require.False(t, ok)
}

// TestCheckLimitReply accepts CL.LIMIT's seven elements, and not
// CL.THROTTLE's five integers.
func TestCheckLimitReply(t *testing.T) {
	i := func(n int64) bench.Value { return bench.Value{Kind: ':', Int: n} }
	r5 := bench.Value{Kind: '*', Array: []bench.Value{i(0), i(100), i(99), i(-1), i(60)}}
	limit := bench.Value{Kind: '*', Array: []bench.Value{i(0), i(100), i(99), i(-1), i(60), i(0), {Kind: '*', Array: []bench.Value{r5}}}}
	require.NoError(t, checkLimitReply(limit))
	require.Error(t, checkLimitReply(r5))
	require.NoError(t, checkThrottleReply(r5))
	require.Error(t, checkThrottleReply(limit))
}

// TestIssue16Ratios: the acceptance table takes each ratio as the median
// of the rounds' ratios, and a skipped system leaves its row unmeasured.
func TestIssue16Ratios(t *testing.T) {
	runs := func(rps ...float64) []runResult {
		out := []runResult{{Round: 0, RPS: 1, CPUPerOp: 1}}
		for k, x := range rps {
			out = append(out, runResult{Round: k + 1, RPS: x, CPUPerOp: 1e6 / x})
		}
		return out
	}
	sys := func(name string, rps ...float64) *systemResult {
		s := &systemResult{System: name, Runs: runs(rps...)}
		s.Median = summarize(s.Runs)
		return s
	}
	r := &compareResult{Baseline: "cellserver@f4e336a", Scenarios: []*scenarioResult{
		{Scenario: scenario{Name: "rand100k-p16", Pipeline: 16}, Systems: []*systemResult{
			sys(sysCell, 300, 200, 400), sys("cellserver@f4e336a", 310, 210, 300)}},
		{Scenario: scenario{Name: "limit-fw-p16", Pipeline: 16, Limit: []string{"CL.LIMIT"}}, Systems: []*systemResult{
			sys(sysCellThrottle, 100, 100, 100), sys(sysCellLimit, 95, 80, 91)}},
		{Scenario: scenario{Name: "limit2-p16", Pipeline: 16, Limit: []string{"CL.LIMIT"}}, Systems: []*systemResult{
			sys(sysCellThrottle, 100), {System: sysCellLimit, Skipped: "ERR unknown command 'CL.LIMIT'"}}},
	}}
	r.Scenarios = append(r.Scenarios, &scenarioResult{Scenario: scenario{Name: "ceiling-p16", Pipeline: 16, Ceiling: true},
		Systems: []*systemResult{sys(sysCannedThrottle, 100, 100, 100), sys(sysCannedFW, 90, 85, 88)}})
	out := issue16(r)
	require.Contains(t, out, "300 / 300 rps: 0.97x (rounds 0.97x, 0.95x, 1.33x) | ≥ 0.95x | yes |")
	require.Contains(t, out, "0.91x (rounds 0.95x, 0.80x, 0.91x)")
	require.Contains(t, out, "the load generator's ceiling for this ratio (ceiling-p16, a server doing nothing): 0.88x | ≥ 0.9x | yes |")
	require.Contains(t, out, "two shards / CL.THROTTLE rps | not measured |")
}

// TestIssue19Rows: the depth-1 rows come from ceiling-p1, where redis-server's
// PING and cellserver's CL.THROTTLE alternate, round by round, with the
// canned server's ratio as the ceiling.
func TestIssue19Rows(t *testing.T) {
	sys := func(name string, rps, cpu []float64) *systemResult {
		s := &systemResult{System: name}
		for k := range rps {
			s.Runs = append(s.Runs, runResult{Round: k + 1, RPS: rps[k], CPUPerOp: cpu[k]})
		}
		s.Median = summarize(s.Runs)
		return s
	}
	r := &compareResult{Scenarios: []*scenarioResult{{Scenario: scenario{Name: "ceiling-p1", Pipeline: 1, Ceiling: true},
		Systems: []*systemResult{
			sys(sysPing, []float64{100, 100}, []float64{10, 10}),
			sys(sysCannedThrottle, []float64{102, 104}, []float64{11, 11}),
			sys(sysCell, []float64{99, 97}, []float64{13, 12}),
		}}}}
	out := issue19(r)
	require.Contains(t, out, "rps: 0.98x (rounds 0.99x, 0.97x); the load generator's ceiling (a server doing nothing, answering CL.THROTTLE's reply): 1.03x | ≥ 1.0x | no |")
	require.Contains(t, out, "12.50 / 10.00 µs: 1.25x (rounds 1.30x, 1.20x) | ≤ 1.0x | no |")
	require.Equal(t, "", issue19(&compareResult{}))
}
