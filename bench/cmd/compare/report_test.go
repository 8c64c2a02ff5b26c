package main

import (
	"encoding/json"
	"os"
	"testing"

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
