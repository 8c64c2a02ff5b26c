package limit

import (
	"math"
	"sort"
	"time"
)

// KindSWL is the sliding-window log.
const KindSWL Kind = 4

var swlAlgorithm = algorithm{
	kind: KindSWL, name: "SWL", label: "swl", nargs: 2,
	parse: parseSWL, decode: decodeSWL,
}

// SWL is SWL <limit> <window>: the exact sliding window. The key keeps a log
// of (instant, cost) entries; those less than Window old count. Exact, and
// so limited to MaxSWLLimit (the log's length); SWC is its constant-size
// estimate. The zero value is invalid.
type SWL struct {
	Limit  uint32        // cost allowed in any window of this length, 1..MaxSWLLimit
	Window time.Duration // whole ms, 1 ms..MaxWindow
}

// Kind returns KindSWL.
func (SWL) Kind() Kind { return KindSWL }

// Validate checks Limit (also against MaxSWLLimit) and Window (a RangeError
// in ms).
func (l SWL) Validate() error {
	if err := validateLimitWindow(l.Limit, l.Window); err != nil {
		return err
	}
	if l.Limit > MaxSWLLimit {
		return ErrSWLLimit
	}
	return nil
}

// swlLog is an encoded log read in place: entries of swlEntrySize bytes,
// strictly increasing instants, each cost at least 1. Decisions read it
// without decoding it into a slice.
type swlLog struct {
	w int64  // the window, ms
	b []byte // the entries
}

const (
	swlHead      = 12 // window (8) and entry count (4)
	swlEntrySize = 12 // instant (8) and cost (4)
)

func (g swlLog) len() int          { return len(g.b) / swlEntrySize }
func (g swlLog) ts(i int) int64    { return int64(be.Uint64(g.b[i*swlEntrySize:])) }
func (g swlLog) cost(i int) uint64 { return uint64(be.Uint32(g.b[i*swlEntrySize+8:])) }
func (g swlLog) newest() (int64, bool) {
	if n := g.len(); n > 0 {
		return g.ts(n - 1), true
	}
	return 0, false
}

// swlView checks an encoded body's header and length and returns its log;
// the entries are checked by Decode (check), where a state enters the
// keyspace, and trusted by eval.
func swlView(body []byte) (swlLog, error) {
	if len(body) < swlHead {
		return swlLog{}, ErrCorrupt
	}
	g := swlLog{w: int64(be.Uint64(body)), b: body[swlHead:]}
	n := int(be.Uint32(body[8:]))
	if !validWindowMS(g.w) || n > MaxSWLLimit || len(g.b) != n*swlEntrySize {
		return swlLog{}, ErrCorrupt
	}
	return g, nil
}

// check reports whether the entries are in strictly increasing order, each
// with a cost of at least 1.
func (g swlLog) check() error {
	for i := range g.len() {
		if g.cost(i) == 0 || (i > 0 && g.ts(i) <= g.ts(i-1)) {
			return ErrCorrupt
		}
	}
	return nil
}

// swlEval is an SWL key at one instant.
type swlEval struct {
	g    swlLog
	at   int64 // evaluation instant, ms
	from int   // first entry that counts (instant > at - W)
	used uint64
}

// eval finds the entries that count at now_ms, or at the newest entry when
// the clock is behind it (spec §3). A log of another window is a fresh key.
//
// A call costs a binary search and a sum of the costs that count, not a
// check of every entry: a 10,000-entry log is read at every call, and a
// client could otherwise make each of its calls cost the shard owner tens
// of µs. The entries are checked where a state enters the keyspace (Decode:
// the log's replay, IMPORTSTATE, slot moves); the header and the length,
// which the reads below rely on to stay in bounds, are checked here.
func (l SWL) eval(body []byte, nowMS int64) (swlEval, error) {
	e := swlEval{g: swlLog{w: l.Window.Milliseconds()}, at: nowMS}
	if body != nil {
		g, err := swlView(body)
		if err != nil {
			return e, err
		}
		if g.w == e.g.w {
			e.g = g
			if ts, ok := g.newest(); ok {
				e.at = max(e.at, ts)
			}
		}
	}
	lo, n := e.at-e.g.w, e.g.len()
	e.from = sort.Search(n, func(i int) bool { return e.g.ts(i) > lo })
	// At most MaxSWLLimit costs below 2^32: the sum cannot overflow.
	// Four entries a step: the loop, not the loads, bounds a plain one.
	b := e.g.b[e.from*swlEntrySize:]
	for ; len(b) >= 4*swlEntrySize; b = b[4*swlEntrySize:] {
		e.used += uint64(be.Uint32(b[8:])) + uint64(be.Uint32(b[20:])) +
			uint64(be.Uint32(b[32:])) + uint64(be.Uint32(b[44:]))
	}
	for ; len(b) >= swlEntrySize; b = b[swlEntrySize:] {
		e.used += uint64(be.Uint32(b[8:]))
	}
	return e, nil
}

// Eval: admits iff used + cost <= Limit (spec §4 SWL).
func (l SWL) Eval(state []byte, now int64, cost uint32, ms bool) (R5, error) {
	r, _, _, err := l.charge(nil, state, now, cost, ms, false)
	return r, err
}

// r5 is the decision on e of a charge of cost at nowMS.
func (l SWL) r5(e swlEval, nowMS int64, cost uint32, ms bool) R5 {
	lim, c := uint64(l.Limit), uint64(cost)
	r := R5{Limit: int64(lim), RetryAfter: -1}
	newest, counting := e.g.newest()
	counting = counting && e.from < e.g.len()
	if after := satAdd(e.used, c); after <= lim {
		r.Remaining = int64(lim - after)
		if c > 0 {
			newest, counting = e.at, true
		}
	} else {
		r.Limited = true
		if e.used < lim {
			r.Remaining = int64(lim - e.used)
		}
		if c <= lim {
			// Wait until enough of the oldest entries have left the
			// window: entry i leaves at its instant + W.
			excess, gone := after-lim, uint64(0)
			for i := e.from; i < e.g.len(); i++ {
				if gone = satAdd(gone, e.g.cost(i)); gone >= excess {
					r.RetryAfter = reply(e.g.ts(i)+e.g.w-nowMS, ms)
					break
				}
			}
		}
	}
	if counting {
		r.ResetAfter = reply(newest+e.g.w-nowMS, ms)
	}
	return r
}

// AppendCharged: the entries that still count, plus (instant, cost) (added
// to the newest entry if it has the same ms); the key expires Window after
// it.
func (l SWL) AppendCharged(dst, state []byte, now int64, cost uint32) ([]byte, int64, error) {
	body, err := checkState(state, KindSWL)
	if err != nil {
		return dst, 0, err
	}
	e, err := l.eval(body, floorMS(now))
	if err != nil {
		return dst, 0, err
	}
	if cost == 0 || satAdd(e.used, uint64(cost)) > uint64(l.Limit) {
		return dst, 0, ErrNotAdmitted
	}
	dst, exp := e.appendCharged(dst, cost)
	return dst, exp, nil
}

// appendCharged appends e's log charged with cost at e.at.
func (e swlEval) appendCharged(dst []byte, cost uint32) ([]byte, int64) {
	kept := e.g.b[e.from*swlEntrySize:]
	n := len(kept) / swlEntrySize
	last := uint64(0)
	if ts, ok := e.g.newest(); ok && n > 0 && ts == e.at {
		// Same ms as the newest entry: one entry, costs added.
		n--
		last = e.g.cost(e.g.len() - 1)
		kept = kept[:n*swlEntrySize]
	}
	dst = appendHeader(dst, KindSWL)
	dst = be.AppendUint64(dst, uint64(e.g.w))
	dst = be.AppendUint32(dst, uint32(n+1))
	dst = append(dst, kept...)
	dst = appendEntry(dst, SWLEntry{TS: e.at, Cost: satCost(last + uint64(cost))})
	return dst, e.at + e.g.w
}

func appendEntry(dst []byte, x SWLEntry) []byte {
	return be.AppendUint32(be.AppendUint64(dst, uint64(x.TS)), x.Cost)
}

// satCost is a cost saturated at MaxUint32 (an entry's field width).
func satCost(v uint64) uint32 {
	if v > math.MaxUint32 {
		return math.MaxUint32
	}
	return uint32(v)
}

func parseSWL(raw rawLimit, ms bool) (Limit, uint32, error) {
	lim, w, cost, err := parseLimitWindow(&raw, ms)
	if err != nil {
		return nil, 0, err
	}
	if lim > MaxSWLLimit {
		return nil, 0, ErrSWLLimit
	}
	return intern(internKey{kind: KindSWL, a: lim, w: w}), cost, nil
}

// SWLState is a sliding-window log.
// Encoding (14 + 12n bytes): kind, version, WindowMS (8 bytes), n (4), then
// n entries of TS (8) and Cost (4), all big-endian, in increasing TS. The
// zero value is invalid (WindowMS 0); an empty log is valid.
type SWLState struct {
	WindowMS int64      // the window length W, ms (1..MaxWindow)
	Entries  []SWLEntry // at most MaxSWLLimit, strictly increasing TS, each Cost >= 1
}

// SWLEntry is one charge of a log.
type SWLEntry struct {
	TS   int64  // Unix ms of the charge
	Cost uint32 // cost charged at TS (charges of one ms are one entry)
}

// Kind returns KindSWL.
func (SWLState) Kind() Kind { return KindSWL }

// AppendBinary appends the encoding; a log above MaxSWLLimit entries, out
// of order or with a zero cost is ErrCorrupt.
func (s SWLState) AppendBinary(dst []byte) ([]byte, error) {
	if !validWindowMS(s.WindowMS) || len(s.Entries) > MaxSWLLimit {
		return dst, ErrCorrupt
	}
	for i, x := range s.Entries {
		if x.Cost == 0 || (i > 0 && x.TS <= s.Entries[i-1].TS) {
			return dst, ErrCorrupt
		}
	}
	dst = appendHeader(dst, KindSWL)
	dst = be.AppendUint64(dst, uint64(s.WindowMS))
	dst = be.AppendUint32(dst, uint32(len(s.Entries)))
	for _, x := range s.Entries {
		dst = appendEntry(dst, x)
	}
	return dst, nil
}

func decodeSWL(body []byte) (State, error) {
	g, err := swlView(body)
	if err == nil {
		err = g.check()
	}
	if err != nil {
		return nil, err
	}
	s := SWLState{WindowMS: g.w, Entries: make([]SWLEntry, g.len())}
	for i := range s.Entries {
		s.Entries[i] = SWLEntry{TS: g.ts(i), Cost: uint32(g.cost(i))}
	}
	return s, nil
}

// fields: window_ms, entries as [ts_ms, cost] pairs.
func (s SWLState) fields() []Field {
	es := make([][2]int64, len(s.Entries))
	for i, x := range s.Entries {
		es[i] = [2]int64{x.TS, int64(x.Cost)}
	}
	return []Field{{"window_ms", s.WindowMS}, {"entries", es}}
}

// merge: the logs unite, costs of the same ms added, dropping what no
// longer counts at now (or at the newest entry, if later). Should the union
// exceed MaxSWLLimit entries, the oldest entries are folded into the next
// one: their cost then counts a little longer, never less. Other window
// lengths: see pickLater. The expiry is Window after the newest entry.
func (s SWLState) merge(other State, now int64) (State, int64) {
	o := other.(SWLState)
	if s.WindowMS != o.WindowMS {
		m := pickLater(s, o, s.newestTS(), o.newestTS(), s.WindowMS, o.WindowMS).(SWLState)
		return m, m.expireAt(now)
	}
	at := max(floorMS(now), s.newestTS(), o.newestTS())
	lo := at - s.WindowMS
	m := SWLState{WindowMS: s.WindowMS, Entries: make([]SWLEntry, 0, len(s.Entries)+len(o.Entries))}
	a, b := s.Entries, o.Entries
	for len(a) > 0 || len(b) > 0 {
		var x SWLEntry
		switch {
		case len(b) == 0 || (len(a) > 0 && a[0].TS < b[0].TS):
			x, a = a[0], a[1:]
		case len(a) == 0 || b[0].TS < a[0].TS:
			x, b = b[0], b[1:]
		default: // same ms
			x = SWLEntry{a[0].TS, satCost(uint64(a[0].Cost) + uint64(b[0].Cost))}
			a, b = a[1:], b[1:]
		}
		if x.TS > lo {
			m.Entries = append(m.Entries, x)
		}
	}
	for len(m.Entries) > MaxSWLLimit {
		m.Entries[1].Cost = satCost(uint64(m.Entries[1].Cost) + uint64(m.Entries[0].Cost))
		m.Entries = m.Entries[1:]
	}
	return m, m.expireAt(now)
}

// newestTS is the newest entry's instant, MinInt64 for an empty log.
func (s SWLState) newestTS() int64 {
	if n := len(s.Entries); n > 0 {
		return s.Entries[n-1].TS
	}
	return math.MinInt64
}

// expireAt is Window after the newest entry; an empty log expires now.
func (s SWLState) expireAt(now int64) int64 {
	if len(s.Entries) == 0 {
		return floorMS(now)
	}
	return s.newestTS() + s.WindowMS
}

// charge: Eval and AppendCharged on one reading of the log (see Limit).
func (l SWL) charge(dst, state []byte, now int64, cost uint32, ms, write bool) (R5, []byte, int64, error) {
	body, err := checkState(state, KindSWL)
	if err != nil {
		return R5{}, dst, 0, err
	}
	nowMS := floorMS(now)
	e, err := l.eval(body, nowMS)
	if err != nil {
		return R5{}, dst, 0, err
	}
	r := l.r5(e, nowMS, cost, ms)
	if !write || r.Limited || cost == 0 {
		return r, dst, 0, nil
	}
	dst, exp := e.appendCharged(dst, cost)
	return r, dst, exp, nil
}
