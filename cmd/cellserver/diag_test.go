package main

import (
	"io"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestParseFlagsDiagnostics: the slow log's and latency monitor's flags
// default as Redis's settings and refuse what Redis's CONFIG SET refuses.
func TestParseFlagsDiagnostics(t *testing.T) {
	c, err := parseFlags(nil, io.Discard)
	require.NoError(t, err)
	require.Equal(t, int64(10000), c.SlowlogLogSlowerThan)
	require.Equal(t, int64(128), c.SlowlogMaxLen)
	require.Equal(t, int64(0), c.LatencyMonitorThreshold)
	c, err = parseFlags([]string{"--slowlog-log-slower-than", "-1", "--slowlog-max-len", "0", "--latency-monitor-threshold", "5"}, io.Discard)
	require.NoError(t, err)
	require.Equal(t, int64(-1), c.SlowlogLogSlowerThan)
	require.Equal(t, int64(0), c.SlowlogMaxLen)
	require.Equal(t, int64(5), c.LatencyMonitorThreshold)
	_, err = parseFlags([]string{"--slowlog-log-slower-than", "-2"}, io.Discard)
	require.EqualError(t, err, "--slowlog-log-slower-than must be at least -1 (-1: off), got -2")
	_, err = parseFlags([]string{"--slowlog-max-len", "-1"}, io.Discard)
	require.EqualError(t, err, "--slowlog-max-len must not be negative, got -1")
	_, err = parseFlags([]string{"--latency-monitor-threshold", "-1"}, io.Discard)
	require.EqualError(t, err, "--latency-monitor-threshold must not be negative, got -1")
}
