package main

import (
	"io"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestParseFlagsThreads: shards follow --threads unless set, and the
// default of both is every CPU the runtime sees.
func TestParseFlagsThreads(t *testing.T) {
	for _, tc := range []struct {
		args            []string
		threads, shards int
	}{
		{nil, 0, runtime.GOMAXPROCS(0)},
		{[]string{"--threads", "1"}, 1, 1},
		{[]string{"--threads", "3"}, 3, 3},
		{[]string{"--threads", "1", "--shards", "4"}, 1, 4},
		{[]string{"--shards", "5"}, 0, 5},
	} {
		c, err := parseFlags(tc.args, io.Discard)
		require.NoError(t, err, tc.args)
		require.Equal(t, tc.threads, c.Threads, tc.args)
		require.Equal(t, tc.shards, c.Shards, tc.args)
	}
	_, err := parseFlags([]string{"--threads", "-1"}, io.Discard)
	require.EqualError(t, err, "--threads must be at least 1 (or 0 for every CPU), got -1")
}

func TestParseFlagsRecoverCorrupt(t *testing.T) {
	c, err := parseFlags(nil, io.Discard)
	require.NoError(t, err)
	require.False(t, c.RecoverCorrupt, "a damaged data dir is refused unless told otherwise")
	c, err = parseFlags([]string{"--recover-corrupt", "yes"}, io.Discard)
	require.NoError(t, err)
	require.True(t, c.RecoverCorrupt)
	_, err = parseFlags([]string{"--recover-corrupt", "maybe"}, io.Discard)
	require.EqualError(t, err, `--recover-corrupt must be yes or no, got "maybe"`)
}

func TestParseFlagsEmptyDataDir(t *testing.T) {
	_, err := parseFlags([]string{"--data-dir", ""}, io.Discard)
	require.EqualError(t, err, "--data-dir must not be empty (--in-memory keeps state in memory only)")
	c, err := parseFlags([]string{"--data-dir", "", "--in-memory"}, io.Discard)
	require.NoError(t, err)
	require.True(t, c.InMemory)
}
