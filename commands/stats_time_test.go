package commands

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A pipeline's queued call must not be charged the time of a Run command
// (here: a failed AUTH's pause) that ran before it in the same pipeline.
func TestStatsSkipEarlierRunCommand(t *testing.T) {
	h := newHarness(t, Config{RequirePass: "pw"})
	require.Equal(t, "+OK\r\n", h.cmd("AUTH", "pw"))
	h.srv.sleep = func(time.Duration) { time.Sleep(40 * time.Millisecond) }
	require.Equal(t, "+OK\r\n", h.cmd("SLOWLOG", "RESET"))
	out := h.do([]string{"AUTH", "bad"}, []string{"CL.THROTTLE", "k", "10", "10", "60"})
	require.True(t, strings.HasPrefix(out, "-"), "%q", out)
	slow := h.cmd("SLOWLOG", "GET")
	t.Logf("SLOWLOG GET: %q", slow)
	assert.NotContains(t, strings.ToLower(slow), "cl.throttle", "CL.THROTTLE took microseconds, yet is in the slow log")
	for _, line := range strings.Split(h.cmd("INFO", "commandstats"), "\r\n") {
		if strings.HasPrefix(line, "cmdstat_cl.throttle:") {
			t.Logf("%s", line)
			var calls, usec int64
			_, err := fmt.Sscanf(strings.TrimPrefix(line, "cmdstat_cl.throttle:"), "calls=%d,usec=%d", &calls, &usec)
			require.NoError(t, err)
			assert.Less(t, usec, int64(20000), "counted the AUTH pause")
		}
	}
}

// A write that waited on CLIENT PAUSE (off the loop) must not count the
// wait as its run time (Redis's call() times the command, not the pause).
func TestStatsSkipPauseWait(t *testing.T) {
	h := newHarness(t, Config{})
	require.Equal(t, "+OK\r\n", h.cmd("CLIENT", "PAUSE", "100000", "WRITE"))
	throttle := [][]byte{[]byte("CL.THROTTLE"), []byte("k"), []byte("1"), []byte("1"), []byte("60")}
	done := h.execOffLoop(h.srv.NewClient(nil, nil), throttle)
	time.Sleep(60 * time.Millisecond)
	require.Equal(t, "+OK\r\n", h.cmd("CLIENT", "UNPAUSE"))
	<-done
	slow := h.cmd("SLOWLOG", "GET")
	t.Logf("SLOWLOG GET: %q", slow)
	assert.NotContains(t, strings.ToLower(slow), "cl.throttle", "the pause wait was counted as CL.THROTTLE's time")
}
