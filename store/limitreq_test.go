package store

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cellserver/cellserver/limit"
)

func parseLimitLine(t *testing.T, line string) limit.Call {
	t.Helper()
	var argv [][]byte
	for _, f := range strings.Fields("CL.LIMIT " + line) {
		argv = append(argv, []byte(f))
	}
	c, err := limit.ParseLimit(argv)
	require.NoError(t, err, line)
	return c
}

// TestLimitStateSurvivesCompaction: a CL.LIMIT whose first key's state is
// in the arena and whose second key is found expired. Removing that key
// may compact the arena (and give its old pages back to the system), so
// decide must not hold the first state across the second lookup: once it
// did, and the call read unmapped memory (a fault no recover catches).
func TestLimitStateSurvivesCompaction(t *testing.T) {
	st, clk := newTestStore(t, 1)
	long := strings.Repeat("k", 200)
	const n = 20000
	for i := range n {
		_, err := doLimit(st, parseLimitLine(t, fmt.Sprintf("%s%d SWL 5 1", long, i)))
		require.NoError(t, err)
	}
	_, err := doLimit(st, parseLimitLine(t, "A SWL 1000 100000"))
	require.NoError(t, err)
	clk.Set(t0 + int64(5*time.Second))
	for i := range n {
		r, err := doLimit(st, parseLimitLine(t, fmt.Sprintf("A SWL 1000 100000 AND %s%d SWL 5 1 PEEK", long, i)))
		require.NoError(t, err)
		require.Equal(t, int64(998), r.Results[0].Remaining, "call %d", i)
	}
}
