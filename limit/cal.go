package limit

import (
	"archive/zip"
	"bytes"
	_ "embed"
	"errors"
	"io"
	"math"
	"sync"
	"time"
)

// KindCAL is the calendar window.
const KindCAL Kind = 5

var calAlgorithm = algorithm{
	kind: KindCAL, name: "CAL", label: "cal", nargs: 2,
	parse: parseCAL, decode: decodeCAL,
}

// Unit is a calendar period.
type Unit uint8

// The calendar units. The zero Unit is invalid.
const (
	Day   Unit = 1 + iota // a local date
	Week                  // Monday to Sunday
	Month                 // a calendar month
	Year                  // a calendar year
)

var unitNames = [...]string{Day: "DAY", Week: "WEEK", Month: "MONTH", Year: "YEAR"}

// String returns the unit's keyword (DAY, WEEK, MONTH, YEAR).
func (u Unit) String() string {
	if u.valid() {
		return unitNames[u]
	}
	return "unit(" + itoa(int64(u)) + ")"
}

func (u Unit) valid() bool { return Day <= u && u <= Year }

// Zone is a time zone of the IANA database, known by the name it was loaded
// with. The zero Zone is UTC.
type Zone struct {
	name string
	loc  *time.Location
}

// Name returns the name as loaded ("UTC" for the zero Zone).
func (z Zone) Name() string {
	if z.loc == nil {
		return "UTC"
	}
	return z.name
}

// Location returns the zone's *time.Location (time.UTC for the zero Zone).
func (z Zone) Location() *time.Location {
	if z.loc == nil {
		return time.UTC
	}
	return z.loc
}

// zoneinfoZip is the zone database, Go's own lib/time/zoneinfo.zip (the
// file time/tzdata embeds too), IANA tzdata 2025c from Go 1.26. Zones come
// only from here, never from the machine's /usr/share/zoneinfo, so that
// every machine knows the same names with the same rules (spec §2, §4 CAL):
// a system directory would add hundreds of names, among them "localtime",
// the machine's own zone. To update it, copy a newer Go's file:
//
//go:generate sh -c "cp \"$(go env GOROOT)/lib/time/zoneinfo.zip\" zoneinfo.zip"
//go:embed zoneinfo.zip
var zoneinfoZip []byte

// zoneFiles indexes zoneinfoZip by zone name, once.
var zoneFiles = sync.OnceValues(func() (map[string]*zip.File, error) {
	r, err := zip.NewReader(bytes.NewReader(zoneinfoZip), int64(len(zoneinfoZip)))
	if err != nil {
		return nil, err
	}
	m := make(map[string]*zip.File, len(r.File))
	for _, f := range r.File {
		m[f.Name] = f
	}
	return m, nil
})

// zones caches loaded zones by name. It holds only names that loaded, so it
// is bounded by the database (598 names); a *time.Location is immutable and
// safe to share.
var zones sync.Map // string -> *time.Location

// LoadZone returns the zone of an IANA name, case-sensitive and taken as
// sent (Asia/Calcutta and Asia/Kolkata are two zones, spec §2), from the
// database embedded in the binary. The empty name and "Local" are unknown:
// a limit must not depend on the machine's own zone. The error is an
// *UnknownZoneError. Safe for concurrent use.
func LoadZone(name string) (Zone, error) {
	if loc, ok := zones.Load(name); ok {
		return Zone{name, loc.(*time.Location)}, nil
	}
	loc, err := loadZone(name)
	if err != nil {
		return Zone{}, &UnknownZoneError{Zone: name}
	}
	zones.Store(name, loc)
	return Zone{name, loc}, nil
}

func loadZone(name string) (*time.Location, error) {
	files, err := zoneFiles()
	if err != nil {
		return nil, err
	}
	f, ok := files[name]
	if !ok || name == "" || name == "Local" || len(name) > maxZoneName {
		return nil, errUnknownZone
	}
	rc, err := f.Open()
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	data, err := io.ReadAll(rc)
	if err != nil {
		return nil, err
	}
	return time.LoadLocationFromTZData(name, data)
}

var errUnknownZone = errors.New("limit: unknown zone")

// maxZoneName is the longest zone name a CAL state can hold (a length byte).
const maxZoneName = 255

// CAL is CAL <limit> <unit> [TZ <zone>]: at most Limit units of cost per
// calendar day, week, month or year in a zone's local time. A period starts
// at the first instant at which the local clock shows a date in it (the
// day's 00:00, or the end of a gap that skips midnight) and ends where the
// next one starts, so daylight-saving days last 23 or 25 hours. The zero
// value is invalid (Limit 0, Unit 0).
type CAL struct {
	Limit uint32 // cost allowed per period, at least 1
	Unit  Unit
	Zone  Zone // the zero Zone is UTC
}

// Kind returns KindCAL.
func (CAL) Kind() Kind { return KindCAL }

// Validate checks Limit and Unit.
func (l CAL) Validate() error {
	if l.Limit == 0 {
		return &RangeError{"limit", 1, MaxValue}
	}
	if !l.Unit.valid() {
		return &UnknownUnitError{Unit: l.Unit.String()}
	}
	return nil
}

// calWindow is the period a call is evaluated in and the count in it.
type calWindow struct {
	start, end int64 // Unix ms
	n          uint64
}

// window finds the period of now_ms, or of the stored period's start when
// the clock is behind it (spec §3). A state of another unit or zone is a
// fresh key.
func (l CAL) window(body []byte, nowMS int64) (calWindow, error) {
	at := nowMS
	if body != nil {
		s, zone, err := calView(body)
		if err != nil {
			return calWindow{}, err
		}
		if s.Unit == l.Unit && string(zone) == l.Zone.Name() {
			if at = max(at, s.StartMS); at < s.EndMS {
				return calWindow{s.StartMS, s.EndMS, s.Count}, nil
			}
		}
	}
	start, end := Period(l.Unit, l.Zone.Location(), at)
	return calWindow{start: start, end: end}, nil
}

// Eval: admits iff n + cost <= Limit, as FW.
func (l CAL) Eval(state []byte, now int64, cost uint32, ms bool) (R5, error) {
	body, err := checkState(state, KindCAL)
	if err != nil {
		return R5{}, err
	}
	nowMS := floorMS(now)
	x, err := l.window(body, nowMS)
	if err != nil {
		return R5{}, err
	}
	return windowR5(uint64(l.Limit), x.n, uint64(cost), x.end-nowMS, ms), nil
}

// AppendCharged: the period's count grows by cost; the key expires at the
// period's end.
func (l CAL) AppendCharged(dst, state []byte, now int64, cost uint32) ([]byte, int64, error) {
	body, err := checkState(state, KindCAL)
	if err != nil {
		return dst, 0, err
	}
	x, err := l.window(body, floorMS(now))
	if err != nil {
		return dst, 0, err
	}
	n := satAdd(x.n, uint64(cost))
	if cost == 0 || n > uint64(l.Limit) {
		return dst, 0, ErrNotAdmitted
	}
	s := CALState{Unit: l.Unit, Zone: l.Zone.Name(), StartMS: x.start, EndMS: x.end, Count: n}
	dst, err = s.AppendBinary(dst)
	return dst, x.end, err
}

// Period returns the calendar period of unit u in loc holding the instant
// at (Unix ms), as [start, end) in Unix ms (spec §4 CAL).
func Period(u Unit, loc *time.Location, at int64) (start, end int64) {
	t := time.UnixMilli(at).In(loc)
	y, m, d := t.Date()
	switch u {
	case Week:
		d -= (int(t.Weekday()) + 6) % 7 // back to Monday
	case Month:
		d = 1
	case Year:
		m, d = time.January, 1
	}
	start = firstAtOrAfter(loc, wallSeconds(y, m, d)) * 1000
	y, m, d = nextStart(u, y, m, d)
	end = firstAtOrAfter(loc, wallSeconds(y, m, d)) * 1000
	// Where a clock set back across midnight shows the previous date again
	// after the next period has started, the period ends where the next one
	// starts, and at belongs to the next one.
	for i := 0; end <= at && i < 8; i++ {
		start = end
		y, m, d = nextStart(u, y, m, d)
		end = firstAtOrAfter(loc, wallSeconds(y, m, d)) * 1000
	}
	return start, end
}

// nextStart returns the first date of the period after the one starting on
// y-m-d.
func nextStart(u Unit, y int, m time.Month, d int) (int, time.Month, int) {
	switch u {
	case Week:
		d += 7
	case Month:
		m++
	case Year:
		y++
	default:
		d++
	}
	return time.Date(y, m, d, 0, 0, 0, 0, time.UTC).Date()
}

// wallSeconds is the local date's 00:00 as a count of seconds, as if the
// wall clock were UTC (time.Date normalises day and month overflow).
func wallSeconds(y int, m time.Month, d int) int64 {
	return time.Date(y, m, d, 0, 0, 0, 0, time.UTC).Unix()
}

// firstAtOrAfter returns the first instant (Unix s) at which loc's wall
// clock shows wall (seconds, see wallSeconds) or later. In a gap that skips
// wall it is the end of the gap; where wall is shown twice, the first time.
// It walks the zone's offset periods from a day and a half before, where
// every clock still shows an earlier time (offsets stay within ±26 h), so
// it does not rely on time.Date's choice inside gaps and overlaps.
func firstAtOrAfter(loc *time.Location, wall int64) int64 {
	t := wall - 36*3600
	for range 64 {
		tm := time.Unix(t, 0).In(loc)
		_, off := tm.Zone()
		next := zoneEnd(tm)
		c := max(t, wall-int64(off)) // within this offset period, the clock shows wall at wall-off
		if next == noZoneEnd || c < next {
			return c
		}
		t = next
	}
	return t
}

const noZoneEnd = int64(math.MaxInt64)

// zoneEnd is the end of tm's offset period (Unix s, after tm), or noZoneEnd.
//
// time.Time.ZoneBounds computes the periods that follow a zone's last
// listed transition (Go's slim tzdata lists none after 2007 for most zones)
// from its rule string, and ends the last one of a year at the year's start
// plus 365 days: one day early in a leap year (go/src/time/zoneinfo.go,
// tzset; golang/go#81583), so on 31 December the end it gives is before tm.
// No offset changes there: the period really ends at the next UTC year's
// start. Without this, every CAL YEAR limit of 2024 in Berlin was wrong.
func zoneEnd(tm time.Time) int64 {
	_, end := tm.ZoneBounds()
	if end.IsZero() {
		return noZoneEnd
	}
	if e := end.Unix(); e > tm.Unix() {
		return e
	}
	return time.Date(tm.UTC().Year()+1, time.January, 1, 0, 0, 0, 0, time.UTC).Unix()
}

func parseCAL(raw rawLimit, _ bool) (Limit, uint32, error) {
	lim, err := parseRange(raw.args[0], "limit", 1, MaxValue)
	if err != nil {
		return nil, 0, err
	}
	cost, err := raw.parseCost()
	if err != nil {
		return nil, 0, err
	}
	l := CAL{Limit: uint32(lim)}
	for u := Day; u <= Year; u++ {
		if keyword(raw.args[1], unitNames[u]) {
			l.Unit = u
		}
	}
	if l.Unit == 0 {
		return nil, 0, &UnknownUnitError{Unit: string(raw.args[1])}
	}
	if raw.tz != nil {
		if l.Zone, err = LoadZone(string(raw.tz)); err != nil {
			return nil, 0, err
		}
	}
	return l, cost, nil
}

// CALState is a calendar period's count.
// Encoding (29 + len(Zone) bytes): kind, version, Unit (1 byte), len(Zone)
// (1), Zone, StartMS, EndMS, Count (8 bytes each, big-endian). The period's
// bounds are stored, not recomputed, so a key keeps its period even if the
// zone's rules change under it. The zero value is invalid (Unit 0).
type CALState struct {
	Unit    Unit
	Zone    string // the zone's name as sent ("UTC" by default), 1..255 bytes
	StartMS int64  // the period's start, Unix ms
	EndMS   int64  // the period's end (the next one's start), Unix ms, > StartMS
	Count   uint64 // cost charged in the period
}

// Kind returns KindCAL.
func (CALState) Kind() Kind { return KindCAL }

// AppendBinary appends the encoding; an invalid unit, a zone name of 0 or
// above 255 bytes, or an empty period is ErrCorrupt.
func (s CALState) AppendBinary(dst []byte) ([]byte, error) {
	if !s.Unit.valid() || len(s.Zone) == 0 || len(s.Zone) > maxZoneName || s.EndMS <= s.StartMS {
		return dst, ErrCorrupt
	}
	dst = appendHeader(dst, KindCAL)
	dst = append(dst, byte(s.Unit), byte(len(s.Zone)))
	dst = append(dst, s.Zone...)
	dst = be.AppendUint64(dst, uint64(s.StartMS))
	dst = be.AppendUint64(dst, uint64(s.EndMS))
	return be.AppendUint64(dst, s.Count), nil
}

func decodeCAL(body []byte) (State, error) {
	s, zone, err := calView(body)
	if err != nil {
		return nil, err
	}
	s.Zone = string(zone)
	return s, nil
}

// calView decodes a body but for the zone name, which it returns as a slice
// of body: a decision compares it without allocating a string.
func calView(body []byte) (CALState, []byte, error) {
	if len(body) < 2 {
		return CALState{}, nil, ErrCorrupt
	}
	u, zl := Unit(body[0]), int(body[1])
	if !u.valid() || zl == 0 || len(body) != 2+zl+24 {
		return CALState{}, nil, ErrCorrupt
	}
	rest := body[2+zl:]
	s := CALState{
		Unit:    u,
		StartMS: int64(be.Uint64(rest)),
		EndMS:   int64(be.Uint64(rest[8:])),
		Count:   be.Uint64(rest[16:]),
	}
	if s.EndMS <= s.StartMS {
		return CALState{}, nil, ErrCorrupt
	}
	return s, body[2 : 2+zl], nil
}

// fields: unit, zone, window_start_ms, window_end_ms, count.
func (s CALState) fields() []Field {
	return []Field{{"unit", s.Unit.String()}, {"zone", s.Zone},
		{"window_start_ms", s.StartMS}, {"window_end_ms", s.EndMS}, {"count", satInt(s.Count)}}
}

// merge: the same period's counts add up; of two periods the later is kept;
// another unit or zone: see pickLater. The expiry is the kept period's end.
func (s CALState) merge(other State, _ int64) (State, int64) {
	o := other.(CALState)
	if s.Unit == o.Unit && s.Zone == o.Zone && s.StartMS == o.StartMS && s.EndMS == o.EndMS {
		m := s
		m.Count = satAdd(s.Count, o.Count)
		return m, m.EndMS
	}
	m := pickLater(s, o, s.StartMS, o.StartMS, s.EndMS-s.StartMS, o.EndMS-o.StartMS).(CALState)
	return m, m.EndMS
}

// charge: Eval, then AppendCharged (see Limit).
func (l CAL) charge(dst, state []byte, now int64, cost uint32, ms, write bool) (R5, []byte, int64, error) {
	r, err := l.Eval(state, now, cost, ms)
	if err != nil || !write || r.Limited {
		return r, dst, 0, err
	}
	dst, exp, err := l.AppendCharged(dst, state, now, cost)
	return r, dst, exp, err
}
