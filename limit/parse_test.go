package limit

import (
	"strings"
	"testing"
	"time"

	"github.com/cellserver/cellserver/gcra"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func argv(s string) [][]byte {
	var out [][]byte
	for _, f := range strings.Fields(s) {
		if f == `""` {
			f = ""
		}
		out = append(out, []byte(f))
	}
	return out
}

// The error texts and their precedence (spec §2.1), beyond what the vectors
// cover: each row would fail if a check moved.
func TestParseLimitErrors(t *testing.T) {
	many := func(n int, tail string) string {
		s := "CL.LIMIT"
		for i := range n {
			if i > 0 {
				s += " AND"
			}
			s += " k" + itoa(int64(i)) + " FW 1 1"
		}
		return s + tail
	}
	cases := []struct{ args, want string }{
		{"CL.LIMIT k FW 10", string(ErrArity)},
		{"CL.LIMIT k fw 10 60 and j xx 1 1", "ERR unknown limit type 'xx'"},
		// Structure (step 2) comes before every number (step 3).
		{"CL.LIMIT k FW x 60 AND j FW 1", string(ErrSyntax)},
		{"CL.LIMIT k FW x 60 COST", string(ErrSyntax)},
		{"CL.LIMIT k FW x 60 PEEK MS PEEK", string(ErrSyntax)},
		{"CL.LIMIT k FW x 60 PEEK COST 1", string(ErrSyntax)},
		{"CL.LIMIT k FW x 60 TZ UTC", string(ErrSyntax)},
		{"CL.LIMIT k CAL 1 DAY TZ UTC TZ UTC", string(ErrSyntax)},
		{"CL.LIMIT k CAL 1 DAY COST 1 TZ UTC COST 2", string(ErrSyntax)},
		// Positional arguments are taken whatever they spell.
		{"CL.LIMIT k GCRA 1 2 PEEK", string(ErrNotInteger)},
		{"CL.LIMIT k CAL 5 PEEK", "ERR unknown calendar unit 'PEEK'"},
		// Within a limit: the numbers in the order written, then COST.
		{"CL.LIMIT k FW 0 x", "ERR limit must be between 1 and 4294967295"},
		{"CL.LIMIT k FW 5 0 COST x", "ERR window must be between 1 and 31622400"},
		{"CL.LIMIT k FW 5 60 COST x", string(ErrNotInteger)},
		{"CL.LIMIT k FW 5 60 COST -0", string(ErrNotInteger)},
		{"CL.LIMIT k FW 5 60 COST 99999999999999999999", string(ErrNotInteger)},
		{"CL.LIMIT k FW 5 60 COST 9223372036854775807", "ERR cost must be between 0 and 4294967295"},
		{"CL.LIMIT k GCRA 4294967296 1 1", "ERR max_burst must be between 0 and 4294967295"},
		{"CL.LIMIT k GCRA 1 1 31622401", "ERR period must be between 1 and 31622400"},
		{"CL.LIMIT k GCRA 1 1 31622400001 MS", "ERR period must be between 1 and 31622400000"},
		{"CL.LIMIT k FW 1 31622400001 MS", "ERR window must be between 1 and 31622400000"},
		// COST before the unit, the unit before the zone, then SWL's bound,
		// then GCRA's interval.
		{"CL.LIMIT k CAL 5 HOUR COST x", string(ErrNotInteger)},
		{"CL.LIMIT k CAL 5 HOUR TZ Mars/Olympus", "ERR unknown calendar unit 'HOUR'"},
		{"CL.LIMIT k CAL 5 day TZ Local", "ERR unknown time zone 'Local'"},
		{`CL.LIMIT k CAL 5 day TZ ""`, "ERR unknown time zone ''"},
		{"CL.LIMIT k CAL 5 day TZ europe/berlin", "ERR unknown time zone 'europe/berlin'"},
		{"CL.LIMIT k SWL 10001 60 COST x", string(ErrNotInteger)},
		{"CL.LIMIT k SWL 10001 0", "ERR window must be between 1 and 31622400"},
		{"CL.LIMIT k GCRA 1 4294967295 1", string(ErrRateTooHigh)},
		{"CL.LIMIT k GCRA 1 4294967295 4", string(ErrRateTooHigh)},
		{"CL.LIMIT k GCRA 1 4294967295 1 COST x", string(ErrNotInteger)},
		// Limit by limit: an error in limit 1 wins over one in limit 2,
		// and a repeated key is checked after its limit's own numbers.
		{"CL.LIMIT k FW 1 1 AND j FW 0 1 AND k FW 1 1", "ERR limit must be between 1 and 4294967295"},
		{"CL.LIMIT k FW 1 1 AND k FW 0 1", "ERR limit must be between 1 and 4294967295"},
		{"CL.LIMIT k FW 1 1 AND j FW 1 1 AND j FW 1 1 AND k FW 1 1", "ERR limit 3 repeats the key of limit 2"},
		// The 17th limit: once its own structure is read, before what follows.
		{many(17, ""), string(ErrTooManyLimits)},
		{many(17, " AND"), string(ErrTooManyLimits)},
		{many(17, " BOGUS"), string(ErrTooManyLimits)},
		{many(16, " AND k16 FW 1"), string(ErrSyntax)},
		{many(16, " AND k16 XX 1 1"), "ERR unknown limit type 'XX'"},
		{many(16, " AND k0 FW 0 1"), string(ErrTooManyLimits)},
	}
	for _, c := range cases {
		_, err := ParseLimit(argv(c.args))
		if assert.Error(t, err, c.args) {
			assert.Equal(t, c.want, err.Error(), c.args)
		}
	}
}

func TestParseLimitCall(t *testing.T) {
	berlin, err := LoadZone("Europe/Berlin")
	require.NoError(t, err)
	c, err := ParseLimit(argv("cl.limit a gcra 15 30 60 cost 0 AND b Fw 5 60000 AND c SWC 50 60 COST 3 " +
		"AND d swl 5 900 AND e CAL 100 month tz Europe/Berlin cost 7 AND f cal 1 YEAR ms peek"))
	require.NoError(t, err)
	assert.Equal(t, Options{Peek: true, MS: true}, c.Options)
	want := []Spec{
		{[]byte("a"), GCRA{MaxBurst: 15, Count: 30, Period: 60 * time.Millisecond}, 0},
		{[]byte("b"), FW{Limit: 5, Window: time.Minute}, 1},
		{[]byte("c"), SWC{Limit: 50, Window: 60 * time.Millisecond}, 3},
		{[]byte("d"), SWL{Limit: 5, Window: 900 * time.Millisecond}, 1},
		{[]byte("e"), CAL{Limit: 100, Unit: Month, Zone: berlin}, 7},
		{[]byte("f"), CAL{Limit: 1, Unit: Year}, 1},
	}
	assert.Equal(t, want, c.Limits)
	for _, s := range c.Limits {
		assert.NoError(t, s.Limit.Validate())
	}

	// Keys are whatever follows AND, keywords included.
	c, err = ParseLimit(argv("CL.LIMIT AND FW 10 60 AND PEEK FW 1 1 MS"))
	require.NoError(t, err)
	assert.Equal(t, "AND", string(c.Limits[0].Key))
	assert.Equal(t, "PEEK", string(c.Limits[1].Key))
	assert.Equal(t, Options{MS: true}, c.Options)
	assert.Equal(t, FW{Limit: 10, Window: 60 * time.Millisecond}, c.Limits[0].Limit)

	// Two names of one zone stay two zones.
	c, err = ParseLimit(argv("CL.LIMIT k CAL 1 DAY TZ Asia/Calcutta AND j CAL 1 DAY TZ Asia/Kolkata"))
	require.NoError(t, err)
	assert.Equal(t, "Asia/Calcutta", c.Limits[0].Limit.(CAL).Zone.Name())
	assert.Equal(t, "Asia/Kolkata", c.Limits[1].Limit.(CAL).Zone.Name())
}

func TestParseRedisInt(t *testing.T) {
	good := map[string]int64{"0": 0, "1": 1, "-1": -1, "9223372036854775807": 1<<63 - 1, "-9223372036854775808": -1 << 63}
	for s, v := range good {
		got, ok := ParseRedisInt([]byte(s))
		assert.True(t, ok, s)
		assert.Equal(t, v, got, s)
	}
	for _, s := range []string{"", "-", "+1", "01", "-0", "00", " 1", "1 ", "1.0", "1e3", "0x10", "9223372036854775808", "-9223372036854775809", "123456789012345678901"} {
		_, ok := ParseRedisInt([]byte(s))
		assert.False(t, ok, s)
	}
}

func TestParsePeek(t *testing.T) {
	key, p, err := ParsePeek(argv("CL.PEEK u:1 +007 -30 -60"))
	require.NoError(t, err)
	assert.Equal(t, "u:1", string(key))
	assert.Equal(t, gcra.Params{MaxBurst: 7, Count: -30, Period: -60, Quantity: 1}, p)
	_, p, err = ParsePeek(argv("CL.PEEK u 1 1 1 -5"))
	require.NoError(t, err)
	assert.Equal(t, int64(-5), p.Quantity)

	cases := map[string]string{
		"CL.PEEK k":           string(ErrPeekUsage),
		"CL.PEEK k 1 1 1 1 1": string(ErrPeekUsage),
		"CL.PEEK k 1 x 1":     "Cell error: Store error: Couldn't parse as integer: x",
		"CL.PEEK k 1 1 1 1.5": "Cell error: Store error: Couldn't parse as integer: 1.5",
		"CL.PEEK k 1 1 +":     "Cell error: Store error: Couldn't parse as integer: +",
		"CL.PEEK k x 0 1":     "Cell error: Store error: Couldn't parse as integer: x",
		"CL.PEEK k 1 0 1":     string(ErrCellZeroRate),
		"CL.PEEK k 1 1 0 x":   "Cell error: Store error: Couldn't parse as integer: x",
	}
	for args, want := range cases {
		_, _, err := ParsePeek(argv(args))
		if assert.Error(t, err, args) {
			assert.Equal(t, want, err.Error(), args)
		}
	}
}

func TestParseResetInspect(t *testing.T) {
	keys, err := ParseReset(argv("CL.RESET a b a c b"))
	require.NoError(t, err)
	assert.Equal(t, [][]byte{[]byte("a"), []byte("b"), []byte("c")}, keys)
	_, err = ParseReset(argv("CL.RESET"))
	assert.Equal(t, ErrResetArity, err)

	key, err := ParseInspect(argv("CL.INSPECT k"))
	require.NoError(t, err)
	assert.Equal(t, "k", string(key))
	for _, a := range []string{"CL.INSPECT", "CL.INSPECT a b"} {
		_, err = ParseInspect(argv(a))
		assert.Equal(t, ErrInspectArity, err)
	}
}

func TestLoadZone(t *testing.T) {
	z, err := LoadZone("Europe/Berlin")
	require.NoError(t, err)
	assert.Equal(t, "Europe/Berlin", z.Name())
	assert.Equal(t, "Europe/Berlin", z.Location().String())
	again, err := LoadZone("Europe/Berlin")
	require.NoError(t, err)
	assert.Same(t, z.Location(), again.Location(), "cached")

	// The embedded data agrees with the Go runtime's own for a zone it has.
	ref, err := time.LoadLocation("America/Santiago")
	require.NoError(t, err)
	santiago, err := LoadZone("America/Santiago")
	require.NoError(t, err)
	for _, at := range []string{"2023-09-02T12:00:00Z", "2023-09-03T12:00:00Z", "2024-04-07T12:00:00Z"} {
		tm, _ := time.Parse(time.RFC3339, at)
		_, want := tm.In(ref).Zone()
		_, got := tm.In(santiago.Location()).Zone()
		assert.Equal(t, want, got, at)
	}

	utc, err := LoadZone("UTC")
	require.NoError(t, err)
	assert.Equal(t, Zone{}.Name(), utc.Name())
	assert.Equal(t, time.UTC, Zone{}.Location())

	// Only the embedded database: names a system zone directory adds (this
	// machine's own zone among them) are unknown everywhere.
	for _, bad := range []string{"", "Local", "Mars/Olympus", "../etc/passwd", "/etc/localtime", strings.Repeat("A", 256),
		"localtime", "posixrules", "posix/Europe/Berlin", "right/UTC", "zone.tab", "Europe", "utc"} {
		_, err := LoadZone(bad)
		var ue *UnknownZoneError
		if assert.ErrorAs(t, err, &ue, bad) {
			assert.Equal(t, bad, ue.Zone)
		}
	}
}
