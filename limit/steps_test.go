package limit

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// t0 is the spec's worked examples' instant, 2023-11-14 22:00:00 UTC, in ns.
const t0 = int64(1699999200) * 1e9

// sec and msec are offsets from t0 in ns.
func sec(s float64) int64 { return t0 + int64(s*1e9) }
func msec(m int64) int64  { return t0 + m*1e6 }
func pt(v int64) *int64   { return &v }
func r5(l, lim, rem, retry, reset int64) R5 {
	return R5{Limited: l == 1, Limit: lim, Remaining: rem, RetryAfter: retry, ResetAfter: reset}
}

// step is one call of a step table: at an instant, a cost, what the limit
// must reply and the key's PTTL afterwards.
type step struct {
	at   int64 // Unix ns
	cost uint32
	want R5
	pttl *int64 // if set, the key's PTTL after the call (-2: missing)
	lim  Limit  // nil: the table's limit
	note string
}

// runSteps plays a step table against one key held as a store would: the
// encoded state and its expiry, dropped once now_ms is past it. Each call
// is a single-limit Decide, so Eval and AppendCharged are both exercised.
func runSteps(t *testing.T, lim Limit, ms bool, steps []step) []byte {
	t.Helper()
	var state []byte
	exp := int64(0)
	res := make([]Result, 1)
	for i, s := range steps {
		l := lim
		if s.lim != nil {
			l = s.lim
		}
		if state != nil && floorMS(s.at) > exp {
			state = nil
		}
		d, _, err := Decide([]Spec{{Key: []byte("k"), Limit: l, Cost: s.cost}}, [][]byte{state}, s.at, Options{MS: ms}, res, nil)
		require.NoError(t, err, "step %d %s", i, s.note)
		if s.want.Limit == -1 { // repeat's filler: only admitted
			require.False(t, d.Limited, "step %d %s", i, s.note)
		} else {
			require.Equal(t, s.want, d.R5, "step %d %s", i, s.note)
			require.Equal(t, s.want, res[0].R5, "step %d %s", i, s.note)
		}
		if res[0].Write {
			state, exp = res[0].State, res[0].ExpireAt
		}
		pttl := int64(-2)
		if state != nil && floorMS(s.at) <= exp {
			pttl = exp - floorMS(s.at)
		}
		if s.pttl != nil {
			require.Equal(t, *s.pttl, pttl, "step %d %s: pttl", i, s.note)
		}
	}
	return state
}
