package limit

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestShapesAgreeWithParse: ParseLimitInto, which answers calls of a
// remembered shape from it, gives exactly what parsing them gives, for
// random calls good and bad: each is parsed three times (so that it is
// remembered, then answered from its shape) and then with other keys,
// keys that repeat, and keys spelled AND.
func TestShapesAgreeWithParse(t *testing.T) {
	rnd := rand.New(rand.NewPCG(3, 5))
	pick := func(s ...string) string { return s[rnd.IntN(len(s))] }
	num := func() string {
		if rnd.IntN(10) == 0 {
			return pick("0", "-1", "01", "x", "4294967296")
		}
		return pick("1", "2", "10", "60", "1000")
	}
	keys := []string{"a", "b", "c", "AND", "and", ""}
	limitArgs := func() []string {
		switch pick("FW", "SWC", "GCRA", "SWL", "CAL", "FW", "SWC", "GCRA", "SWL", "CAL", "bad") {
		case "FW":
			return []string{pick("FW", "fw"), num(), num()}
		case "SWC":
			return []string{"SWC", num(), num()}
		case "GCRA":
			return []string{"GCRA", num(), num(), num()}
		case "SWL":
			return []string{"SWL", num(), num()}
		case "CAL":
			a := []string{"CAL", num(), pick("minute", "hour", "day", "fortnight")}
			if rnd.IntN(2) == 0 {
				a = append(a, "TZ", pick("UTC", "Europe/Paris", "Nowhere/Nope"))
			}
			return a
		}
		return []string{"NOPE", num(), num()}
	}
	gen := func() []string {
		a := []string{"CL.LIMIT"}
		for i := range 1 + rnd.IntN(3) {
			if i > 0 {
				a = append(a, "AND")
			}
			a = append(a, pick(keys...))
			a = append(a, limitArgs()...)
			if rnd.IntN(3) == 0 {
				a = append(a, "COST", num())
			}
		}
		if rnd.IntN(3) == 0 {
			a = append(a, pick("PEEK", "MS", "peek", "AND", "COST"))
		}
		if rnd.IntN(10) == 0 { // a stray token anywhere
			i := 2 + rnd.IntN(len(a)-1)
			a = append(a[:i], append([]string{pick("AND", "COST", "1", "FW")}, a[i:]...)...)
		}
		return a
	}
	toArgv := func(a []string) [][]byte {
		v := make([][]byte, len(a))
		for i, s := range a {
			v[i] = []byte(s)
		}
		return v
	}
	// parse parses without the shapes.
	parse := func(v [][]byte) (Call, error) {
		var keys [MaxLimits]int
		return parseLimit(nil, v, &keys)
	}
	check := func(a []string) {
		v := toArgv(a)
		want, wantErr := parse(v)
		got, err := ParseLimitInto(make([]Spec, 0, 2), v)
		what := fmt.Sprint(a)
		require.Equal(t, wantErr, err, what)
		require.Equal(t, want, got, what)
	}
	// known reports whether a call of v's shape is remembered.
	known := func(v [][]byte) bool {
		h, ok := shapeHash(v)
		s := shapes[shapeSlot(h)].Load()
		return ok && s != nil && s.match(v)
	}
	hits, repeats := 0, 0
	for range 5000 {
		a := gen()
		for range 3 {
			check(a)
		}
		if known(toArgv(a)) {
			hits++
		}
		// The same call with other keys: at index 1 and after each AND.
		b := append([]string(nil), a...)
		for i := 1; i < len(b); i++ {
			if i == 1 || b[i-1] == "AND" {
				b[i] = pick(keys...)
			}
		}
		check(b)
		if _, err := parse(toArgv(b)); err != nil && known(toArgv(b)) {
			repeats++ // the shape's limits, with keys that repeat
		}
	}
	require.Greater(t, hits, 1000, "calls answered from their shape")
	require.Greater(t, repeats, 50, "calls of a known shape with repeated keys")
}

// A call answered from its shape allocates nothing.
func TestShapeHitAllocates(t *testing.T) {
	v := argv("CL.LIMIT k FW 100 60 AND j SWC 5 1 COST 2 MS")
	buf := make([]Spec, 0, 2)
	for range 3 {
		_, err := ParseLimitInto(buf, v)
		require.NoError(t, err)
	}
	var c Call
	var err error
	n := testing.AllocsPerRun(100, func() {
		v[1][0]++
		c, err = ParseLimitInto(buf, v)
	})
	require.NoError(t, err)
	require.Equal(t, v[1], c.Limits[0].Key)
	require.Zero(t, n)
}
