package limit

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func utcMS(t *testing.T, s string) int64 {
	t.Helper()
	tm, err := time.Parse(time.RFC3339, s)
	require.NoError(t, err)
	return tm.UnixMilli()
}

func zone(t *testing.T, name string) Zone {
	t.Helper()
	z, err := LoadZone(name)
	require.NoError(t, err)
	return z
}

// The periods of spec §4 CAL, daylight-saving days and gaps included.
func TestPeriod(t *testing.T) {
	cases := []struct {
		zone       string
		unit       Unit
		at         string
		start, end string
		note       string
	}{
		{"UTC", Day, "2023-11-14T22:00:00Z", "2023-11-14T00:00:00Z", "2023-11-15T00:00:00Z", ""},
		{"UTC", Week, "2023-11-14T22:00:00Z", "2023-11-13T00:00:00Z", "2023-11-20T00:00:00Z", "weeks start on Monday"},
		{"UTC", Week, "2023-11-19T23:59:59Z", "2023-11-13T00:00:00Z", "2023-11-20T00:00:00Z", "Sunday"},
		{"UTC", Week, "2023-11-20T00:00:00Z", "2023-11-20T00:00:00Z", "2023-11-27T00:00:00Z", "Monday"},
		{"UTC", Week, "2024-01-01T12:00:00Z", "2024-01-01T00:00:00Z", "2024-01-08T00:00:00Z", "a Monday New Year"},
		{"UTC", Week, "2023-12-31T12:00:00Z", "2023-12-25T00:00:00Z", "2024-01-01T00:00:00Z", "across the year"},
		{"UTC", Month, "2024-02-29T23:59:59Z", "2024-02-01T00:00:00Z", "2024-03-01T00:00:00Z", "leap February"},
		{"UTC", Month, "2023-12-31T00:00:00Z", "2023-12-01T00:00:00Z", "2024-01-01T00:00:00Z", ""},
		{"UTC", Year, "2024-07-01T00:00:00Z", "2024-01-01T00:00:00Z", "2025-01-01T00:00:00Z", ""},
		{"Europe/Berlin", Month, "2023-11-14T22:00:00Z", "2023-10-31T23:00:00Z", "2023-11-30T23:00:00Z", "the spec's acct:9"},
		{"Europe/Berlin", Day, "2023-10-29T12:00:00Z", "2023-10-28T22:00:00Z", "2023-10-29T23:00:00Z", "25 hours"},
		{"Europe/Berlin", Day, "2023-03-26T12:00:00Z", "2023-03-25T23:00:00Z", "2023-03-26T22:00:00Z", "23 hours"},
		{"Europe/Berlin", Week, "2023-10-29T12:00:00Z", "2023-10-22T22:00:00Z", "2023-10-29T23:00:00Z", "a week of 169 hours"},
		{"America/Santiago", Day, "2023-09-03T12:00:00Z", "2023-09-03T04:00:00Z", "2023-09-04T03:00:00Z", "midnight skipped: 01:00"},
		{"America/Santiago", Day, "2023-09-02T12:00:00Z", "2023-09-02T04:00:00Z", "2023-09-03T04:00:00Z", "ends at the gap's end"},
		{"America/Santiago", Month, "2023-09-03T12:00:00Z", "2023-09-01T04:00:00Z", "2023-10-01T03:00:00Z", ""},
		{"America/Havana", Day, "2023-11-05T04:30:00Z", "2023-11-05T04:00:00Z", "2023-11-06T05:00:00Z", "00:00 twice: the first"},
		{"America/Havana", Day, "2023-11-05T05:30:00Z", "2023-11-05T04:00:00Z", "2023-11-06T05:00:00Z", "the second 00:30"},
		{"America/Havana", Day, "2023-11-04T12:00:00Z", "2023-11-04T04:00:00Z", "2023-11-05T04:00:00Z", ""},
		{"Pacific/Apia", Day, "2011-12-29T20:00:00Z", "2011-12-29T10:00:00Z", "2011-12-30T10:00:00Z", "30 December 2011 never was"},
		{"Pacific/Apia", Day, "2011-12-30T12:00:00Z", "2011-12-30T10:00:00Z", "2011-12-31T10:00:00Z", "31 December"},
		{"Pacific/Apia", Week, "2011-12-30T12:00:00Z", "2011-12-26T10:00:00Z", "2012-01-01T10:00:00Z", "a week of 6 days"},
		// St. John's ended DST at 00:01 until 2011: the clock showed 7 Nov
		// for a minute, then 6 Nov 23:01 again. Periods are contiguous, each
		// from the first instant showing its date: the repeated 59 minutes
		// come after 7 Nov started, so they are 7 Nov's.
		{"America/St_Johns", Day, "2010-11-07T02:45:00Z", "2010-11-07T02:30:00Z", "2010-11-08T03:30:00Z", "6 Nov 23:15 NST, second time"},
		{"America/St_Johns", Day, "2010-11-07T02:29:00Z", "2010-11-06T02:30:00Z", "2010-11-07T02:30:00Z", "6 Nov 23:59 NDT, first time"},
		{"Australia/Lord_Howe", Day, "2023-10-01T06:00:00Z", "2023-09-30T13:30:00Z", "2023-10-01T13:00:00Z", "23.5 hours"},
		{"Asia/Kolkata", Day, "2023-11-14T22:00:00Z", "2023-11-14T18:30:00Z", "2023-11-15T18:30:00Z", ""},
		{"Asia/Tehran", Day, "2022-03-22T12:00:00Z", "2022-03-21T20:30:00Z", "2022-03-22T19:30:00Z", "midnight skipped: 01:00"},
		// Go's ZoneBounds ends a leap year a day early (see zoneEnd).
		{"Europe/Berlin", Day, "2024-12-31T12:00:00Z", "2024-12-30T23:00:00Z", "2024-12-31T23:00:00Z", "31 December of a leap year"},
		{"Europe/Berlin", Year, "2024-03-06T18:00:00Z", "2023-12-31T23:00:00Z", "2024-12-31T23:00:00Z", "a leap year"},
		{"America/New_York", Year, "2024-12-31T12:00:00Z", "2024-01-01T05:00:00Z", "2025-01-01T05:00:00Z", ""},
		{"Australia/Sydney", Month, "2024-12-31T12:00:00Z", "2024-11-30T13:00:00Z", "2024-12-31T13:00:00Z", "31 Dec 23:00 AEDT"},
		{"Australia/Sydney", Year, "2024-12-31T12:00:00Z", "2023-12-31T13:00:00Z", "2024-12-31T13:00:00Z", "southern summer, leap year"},
	}
	for _, c := range cases {
		at := utcMS(t, c.at)
		start, end := Period(c.unit, zone(t, c.zone).Location(), at)
		assert.Equal(t, c.start, time.UnixMilli(start).UTC().Format(time.RFC3339), "%s %s %s start %s", c.zone, c.unit, c.at, c.note)
		assert.Equal(t, c.end, time.UnixMilli(end).UTC().Format(time.RFC3339), "%s %s %s end %s", c.zone, c.unit, c.at, c.note)
		assert.True(t, start <= at && at < end)
	}
}

// Around every offset change of zones with unusual rules, 2010-2026, DAY
// and WEEK periods match a scan of the local clock: a period starts at the
// first instant whose local date is its first date or later, and ends where
// the next one starts.
func TestPeriodScan(t *testing.T) {
	zones := []string{"Europe/Berlin", "America/New_York", "America/Santiago", "America/Havana",
		"Asia/Tehran", "America/Asuncion", "America/Sao_Paulo", "Pacific/Apia", "Australia/Lord_Howe",
		"Pacific/Chatham", "America/St_Johns", "Africa/Casablanca", "Asia/Gaza", "Europe/Moscow",
		"America/Godthab", "Antarctica/Troll"}
	if testing.Short() {
		zones = zones[:4]
	}
	checked := 0
	for _, name := range zones {
		loc := zone(t, name).Location()
		for ts := time.Date(2010, 1, 1, 0, 0, 0, 0, time.UTC); ts.Year() < 2026; {
			_, next := ts.In(loc).ZoneBounds()
			if next.IsZero() {
				break
			}
			if !next.After(ts) { // Go's leap-year bug, see zoneEnd
				next = ts.Add(24 * time.Hour)
			}
			ts = next
			for _, off := range []time.Duration{-13 * time.Hour, -time.Hour, -time.Second, 0, time.Hour, 13 * time.Hour} {
				at := ts.Add(off).UnixMilli()
				for _, u := range []Unit{Day, Week} {
					start, end := Period(u, loc, at)
					ws, we := scanPeriod(u, loc, at)
					require.Equal(t, ws, start, "%s %s at %s: start", name, u, time.UnixMilli(at).In(loc))
					require.Equal(t, we, end, "%s %s at %s: end", name, u, time.UnixMilli(at).In(loc))
					checked++
				}
			}
		}
	}
	require.Greater(t, checked, 500)
}

// scanPeriod finds the period of at by reading the local clock: 15-minute
// steps, then seconds.
func scanPeriod(u Unit, loc *time.Location, at int64) (start, end int64) {
	local := time.UnixMilli(at).In(loc)
	y, m, d := local.Date()
	switch u {
	case Week:
		d -= (int(local.Weekday()) + 6) % 7
	}
	days := 1
	if u == Week {
		days = 7
	}
	first := time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
	start, end = scanFirst(loc, first)*1000, scanFirst(loc, first.AddDate(0, 0, days))*1000
	for i := 0; end <= at && i < 3; i++ { // the clock went back across midnight (St. John's)
		first = first.AddDate(0, 0, days)
		start, end = end, scanFirst(loc, first.AddDate(0, 0, days))*1000
	}
	return start, end
}

// scanFirst is the first instant whose local date is date's or later.
func scanFirst(loc *time.Location, date time.Time) int64 {
	reached := func(s int64) bool {
		y, m, d := time.Unix(s, 0).In(loc).Date()
		return !time.Date(y, m, d, 0, 0, 0, 0, time.UTC).Before(date)
	}
	s := date.Unix() - 36*3600
	for !reached(s) {
		s += 900
	}
	for s -= 899; !reached(s); s++ {
	}
	return s
}

func TestCALSteps(t *testing.T) {
	berlin := zone(t, "Europe/Berlin")
	day := CAL{Limit: 3, Unit: Day, Zone: berlin}
	// t0 is 2023-11-14 23:00 in Berlin: the day ends in 1 h.
	runSteps(t, day, false, []step{
		{at: t0, cost: 2, want: r5(0, 3, 1, -1, 3600), pttl: pt(3600000)},
		{at: sec(1800), cost: 2, want: r5(1, 3, 1, 1800, 1800)},
		{at: sec(1800), cost: 4, want: r5(1, 3, 1, -1, 1800), note: "can never fit"},
		{at: sec(3600), cost: 2, want: r5(0, 3, 1, -1, 86400), pttl: pt(86400000), note: "the next day"},
		{at: sec(3599), cost: 1, want: r5(0, 3, 0, -1, 86401), note: "clock back: evaluated at the day's start"},
		{at: sec(3600), cost: 0, lim: CAL{Limit: 3, Unit: Day}, want: r5(0, 3, 3, -1, 0), note: "UTC: another zone, fresh"},
		{at: sec(3600), cost: 0, lim: CAL{Limit: 3, Unit: Week, Zone: berlin}, want: r5(0, 3, 3, -1, 0), note: "another unit, fresh"},
		{at: sec(3600), cost: 1, lim: CAL{Limit: 3, Unit: Week, Zone: berlin}, want: r5(0, 3, 2, -1, 5*86400), pttl: pt(5 * 86400000), note: "replaced: Wed 00:00 to Mon 00:00"},
	})
	runSteps(t, CAL{Limit: 1000000, Unit: Month}, true, []step{
		{at: t0, cost: 250, want: r5(0, 1000000, 999750, -1, 1389600000), pttl: pt(1389600000)},
	})
}
