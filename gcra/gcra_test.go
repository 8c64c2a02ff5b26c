package gcra

import (
	"bufio"
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const (
	errZeroRateText = "Cell error: Store error: Zero rates are not supported"
	errExpireText   = "Cell error: Store error: Error while setting key expire"
)

// ---------------------------------------------------------------------------
// Conformance vectors
// ---------------------------------------------------------------------------

// conformanceDir locates the repository's conformance/ folder:
// $CELLSERVER_CONFORMANCE_DIR if set, else ../conformance relative to this
// package. A missing directory is a test failure, never a skip.
func conformanceDir(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("CELLSERVER_CONFORMANCE_DIR")
	if dir == "" {
		dir = filepath.Join("..", "conformance")
	}
	st, err := os.Stat(dir)
	if err != nil || !st.IsDir() {
		t.Fatalf("conformance vectors not found at %q (set CELLSERVER_CONFORMANCE_DIR): %v", dir, err)
	}
	return dir
}

// fakeEntry is one key of the in-test store. It keeps expired entries (like
// the generator's store) and applies Redis expiry semantics on every read.
type fakeEntry struct {
	tat        uint64
	expireAtMs int64
	hasExpiry  bool
}

type fakeStore map[string]fakeEntry

// floorMs is floor(now / 1e6), the clock's whole milliseconds.
func floorMs(now int64) int64 {
	q := now / 1_000_000
	if now%1_000_000 < 0 {
		q--
	}
	return q
}

// visible reports whether e is alive at now: a key is expired once
// floor(now/1e6) > expireAtMs.
func (e fakeEntry) visible(now int64) bool {
	return !e.hasExpiry || floorMs(now) <= e.expireAtMs
}

func (s fakeStore) get(key string, now int64) (uint64, bool) {
	e, ok := s[key]
	if !ok || !e.visible(now) {
		return 0, false
	}
	return e.tat, true
}

// apply performs the write side of a Result as a command handler would.
func (s fakeStore) apply(key string, r Result, now int64) {
	if !r.Write {
		return
	}
	e := fakeEntry{tat: r.NewTAT}
	if r.Expiry == ExpireAfter {
		e.hasExpiry = true
		e.expireAtMs = floorMs(now) + r.TTLMillis
	}
	s[key] = e
}

// replyText renders a Throttle outcome the way the vector files spell it.
func replyText(r Result, err error) string {
	switch {
	case err == ErrZeroRate:
		return "ERR " + errZeroRateText
	case err != nil:
		return "ERR unexpected: " + err.Error()
	case r.Write && r.Expiry == ExpireError:
		return "ERR " + errExpireText
	}
	l := 0
	if r.Limited {
		l = 1
	}
	return fmt.Sprintf("%d %d %d %d %d", l, r.Limit, r.Remaining, r.RetryAfter, r.ResetAfter)
}

type vectorLine struct {
	file   string
	lineNo int
	text   string

	flush bool
	now   int64
	key   string
	p     Params
	reply string
	state string
}

func parseVectorFile(t *testing.T, path string) []vectorLine {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()

	var out []vectorLine
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	n := 0
	for sc.Scan() {
		n++
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		v := vectorLine{file: filepath.Base(path), lineNo: n, text: line}
		if line == "FLUSHALL" {
			v.flush = true
			out = append(out, v)
			continue
		}
		cols := strings.Split(line, "|")
		require.Lenf(t, cols, 4, "%s:%d: want 4 columns: %q", v.file, n, line)
		for i := range cols {
			cols[i] = strings.TrimSpace(cols[i])
		}
		v.now, err = strconv.ParseInt(cols[0], 10, 64)
		require.NoErrorf(t, err, "%s:%d: now", v.file, n)
		args := strings.Fields(cols[1])
		require.Lenf(t, args, 5, "%s:%d: want key and 4 numbers", v.file, n)
		v.key = args[0]
		nums := make([]int64, 4)
		for i := range nums {
			nums[i], err = strconv.ParseInt(args[i+1], 10, 64)
			require.NoErrorf(t, err, "%s:%d: arg %d", v.file, n, i+1)
		}
		v.p = Params{MaxBurst: nums[0], Count: nums[1], Period: nums[2], Quantity: nums[3]}
		v.reply = strings.Join(strings.Fields(cols[2]), " ")
		v.state = strings.Join(strings.Fields(cols[3]), " ")
		out = append(out, v)
	}
	require.NoError(t, sc.Err())
	return out
}

// checkState compares the store with the <state after> column.
func checkState(s fakeStore, v vectorLine) error {
	if v.state == "-" {
		return nil
	}
	e, raw := s[v.key]
	alive := raw && e.visible(v.now)
	if v.state == "nil" {
		if alive {
			return fmt.Errorf("want no key, have tat=%d expireAtMs=%d hasExpiry=%v", e.tat, e.expireAtMs, e.hasExpiry)
		}
		return nil
	}
	f := strings.Fields(v.state)
	if len(f) != 2 {
		return fmt.Errorf("bad state column %q", v.state)
	}
	wantTat, err := strconv.ParseUint(f[0], 10, 64)
	if err != nil {
		return fmt.Errorf("bad state tat %q: %v", f[0], err)
	}
	if f[1] == "none" {
		if !alive || e.hasExpiry || e.tat != wantTat {
			return fmt.Errorf("want tat=%d no expiry, have present=%v tat=%d hasExpiry=%v expireAtMs=%d",
				wantTat, alive, e.tat, e.hasExpiry, e.expireAtMs)
		}
		return nil
	}
	wantExp, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		return fmt.Errorf("bad state expire_at_ms %q: %v", f[1], err)
	}
	if wantExp < floorMs(v.now) {
		// Already expired: the key must not be visible. The recorded entry
		// is kept by the generator's store, and so by ours; compare it too.
		if alive {
			return fmt.Errorf("want expired key, have live tat=%d expireAtMs=%d", e.tat, e.expireAtMs)
		}
		if raw && (e.tat != wantTat || !e.hasExpiry || e.expireAtMs != wantExp) {
			return fmt.Errorf("expired entry mismatch: want tat=%d expireAtMs=%d, have tat=%d expireAtMs=%d hasExpiry=%v",
				wantTat, wantExp, e.tat, e.expireAtMs, e.hasExpiry)
		}
		return nil
	}
	if !alive || !e.hasExpiry || e.tat != wantTat || e.expireAtMs != wantExp {
		return fmt.Errorf("want tat=%d expireAtMs=%d, have present=%v tat=%d expireAtMs=%d hasExpiry=%v",
			wantTat, wantExp, alive, e.tat, e.expireAtMs, e.hasExpiry)
	}
	return nil
}

// replayVectors replays one vector file through Throttle and the fake store
// and returns the number of CL.THROTTLE lines checked.
func replayVectors(t *testing.T, path string) int {
	t.Helper()
	lines := parseVectorFile(t, path)
	store := fakeStore{}
	calls, failures, wide := 0, 0, 0
	for _, v := range lines {
		if v.flush {
			clear(store)
			continue
		}
		calls++
		tat, exists := store.get(v.key, v.now)
		r, err := Throttle(v.p, tat, exists, v.now)
		got := replyText(r, err)
		if err == nil && !pathsAgree(t, v.p, tat, exists, v.now) {
			wide++
		}
		if err == nil {
			store.apply(v.key, r, v.now)
		}
		ok := assert.Equalf(t, v.reply, got, "%s:%d reply: %s", v.file, v.lineNo, v.text)
		if serr := checkState(store, v); serr != nil {
			ok = false
			t.Errorf("%s:%d state: %v\n\tline: %s", v.file, v.lineNo, serr, v.text)
		}
		if !ok {
			failures++
			if failures >= 20 {
				t.Fatalf("%s: too many failures, stopping", v.file)
			}
		}
	}
	t.Logf("%s: %d lines needed the 128-bit path", filepath.Base(path), wide)
	return calls
}

// pathsAgree runs the int64 fast path and the 128-bit path on the same input
// and fails the test if the fast path accepts the input but disagrees. It
// returns whether the fast path accepted it.
func pathsAgree(t *testing.T, p Params, tat uint64, exists bool, now int64) bool {
	t.Helper()
	T := Interval(p.Count, p.Period)
	limit := p.MaxBurst + 1
	tau, inc := T*limit, T*p.Quantity
	var wide Result
	throttleWide(&wide, T, limit, tau, inc, tat, exists, now)
	if exists && tat > math.MaxUint64>>1 {
		return false
	}
	tat64 := now
	if exists {
		tat64 = int64(tat)
	}
	var fast Result
	if !throttle64(&fast, T, limit, tau, inc, tat64, now) {
		return false
	}
	require.Equalf(t, wide, fast, "fast path disagrees: %+v tat=%d exists=%v now=%d", p, tat, exists, now)
	return true
}

func TestConformanceVectors(t *testing.T) {
	dir := conformanceDir(t)
	total := 0
	for _, name := range []string{"examples.txt", "random-sane.txt", "random-mixed.txt"} {
		path := filepath.Join(dir, name)
		t.Run(name, func(t *testing.T) {
			n := replayVectors(t, path)
			require.Positive(t, n, "no vector lines in %s", name)
			t.Logf("%s: %d CL.THROTTLE lines checked", name, n)
			total += n
		})
	}
	t.Logf("total: %d CL.THROTTLE lines checked", total)
}

// ---------------------------------------------------------------------------
// Spec §6 worked examples at fixed instants
// ---------------------------------------------------------------------------

const t0 = int64(1_700_000_000_000_000_000)

type step struct {
	at    int64 // offset from t0 in ns
	q     int64
	reply string // "l limit rem retry reset" or "ERR ..."
}

// runSteps plays steps against one key with the fake store.
func runSteps(t *testing.T, burst, count, period int64, steps []step) fakeStore {
	t.Helper()
	s := fakeStore{}
	for i, st := range steps {
		now := t0 + st.at
		tat, ok := s.get("k", now)
		r, err := Throttle(Params{MaxBurst: burst, Count: count, Period: period, Quantity: st.q}, tat, ok, now)
		require.Equalf(t, st.reply, replyText(r, err), "step %d (t0%+dns q=%d)", i, st.at, st.q)
		if err == nil {
			s.apply("k", r, now)
		}
	}
	return s
}

const sec = int64(1_000_000_000)

func TestExampleA(t *testing.T) {
	var steps []step
	for k := int64(1); k <= 16; k++ {
		steps = append(steps, step{0, 1, fmt.Sprintf("0 16 %d -1 %d", 16-k, 2*k)})
	}
	steps = append(steps,
		step{0, 1, "1 16 0 2 32"},
		step{1 * sec, 1, "1 16 0 1 31"},
		step{2 * sec, 1, "0 16 0 -1 32"},
		step{2 * sec, 1, "1 16 0 2 32"},
		step{10 * sec, 0, "0 16 4 -1 24"},
		step{40 * sec, 1, "0 16 15 -1 2"},
	)
	s := runSteps(t, 15, 30, 60, steps)
	assert.Equal(t, fakeEntry{tat: uint64(t0 + 42*sec), expireAtMs: (t0 + 42*sec) / 1e6, hasExpiry: true}, s["k"])
}

func TestExampleAFirstCallTTL(t *testing.T) {
	r, err := Throttle(Params{15, 30, 60, 1}, 0, false, t0)
	require.NoError(t, err)
	assert.True(t, r.Write)
	assert.Equal(t, ExpireAfter, r.Expiry)
	assert.Equal(t, int64(2000), r.TTLMillis) // T = 2 s -> PTTL 2000
	assert.Equal(t, uint64(t0+2*sec), r.NewTAT)

	// T = 1/3 s -> PTTL 333.
	r, err = Throttle(Params{5, 3, 1, 1}, 0, false, t0)
	require.NoError(t, err)
	assert.Equal(t, int64(333), r.TTLMillis)
}

func TestExampleB(t *testing.T) {
	runSteps(t, 0, 1, 2, []step{
		{0, 1, "0 1 0 -1 2"},
		{0, 1, "1 1 0 2 2"},
		{1 * sec, 1, "1 1 0 1 1"},
		{2 * sec, 1, "0 1 0 -1 2"},
		{2*sec + sec/2, 1, "1 1 0 2 2"},
	})
}

func TestExampleC(t *testing.T) {
	s := runSteps(t, 4, 1, 1, []step{{0, 6, "1 5 5 -1 0"}})
	assert.Empty(t, s, "q=6 on a fresh key must not create it")

	runSteps(t, 4, 1, 1, []step{
		{0, 1, "0 5 4 -1 1"},
		{0, 1, "0 5 3 -1 2"},
		{0, 1, "0 5 2 -1 3"},
		{0, 1, "0 5 1 -1 4"},
		{0, 1, "0 5 0 -1 5"},
		{0, 1, "1 5 0 1 5"},
		{3 * sec, 1, "0 5 2 -1 3"},
		{3*sec + sec/10, 1, "0 5 1 -1 4"},
		{4 * sec, 1, "0 5 1 -1 4"},
		{8 * sec, 1, "0 5 4 -1 1"},
		{9*sec + sec/2, 1, "0 5 4 -1 1"},
		{9*sec + sec/2, 0, "0 5 4 -1 1"},
		{9*sec + sec/2, 2, "0 5 2 -1 3"},
		{9*sec + sec/2, 5, "1 5 2 3 3"},
	})
}

func TestExampleDPeeks(t *testing.T) {
	s := runSteps(t, 4, 1, 1, []step{{0, 0, "0 5 5 -1 0"}})
	// A fresh-key peek stores now with a 0 ms TTL.
	assert.Equal(t, fakeEntry{tat: uint64(t0), expireAtMs: t0 / 1e6, hasExpiry: true}, s["k"])

	runSteps(t, 4, 1, 1, []step{
		{0, 1, "0 5 4 -1 1"},
		{0, 0, "0 5 4 -1 1"},
		{0, 4, "0 5 0 -1 5"},
		{0, 0, "0 5 0 -1 5"},
		{0, 1, "1 5 0 1 5"},
	})
}

func TestExampleELargeQuantities(t *testing.T) {
	runSteps(t, 4, 1, 1, []step{{0, 5, "0 5 0 -1 5"}})
	runSteps(t, 4, 1, 1, []step{
		{0, 2, "0 5 3 -1 2"},
		{0, 6, "1 5 3 -1 2"},
		{0, 4, "1 5 3 1 2"},
	})
}

func TestExampleGNegativeQuantity(t *testing.T) {
	s := fakeStore{}
	p := Params{MaxBurst: 4, Count: 1, Period: 1}
	do := func(q int64, want string) Result {
		t.Helper()
		p.Quantity = q
		tat, ok := s.get("k", t0)
		r, err := Throttle(p, tat, ok, t0)
		require.Equal(t, want, replyText(r, err))
		s.apply("k", r, t0)
		return r
	}
	do(3, "0 5 2 -1 3")
	do(-1, "0 5 3 -1 2")
	r := do(-5, "ERR "+errExpireText)
	assert.True(t, r.Write)
	assert.Equal(t, ExpireError, r.Expiry)
	assert.Equal(t, fakeEntry{tat: uint64(t0 - 3*sec)}, s["k"], "value written with no TTL")
	do(1, "0 5 4 -1 1")
}

func TestExampleRounding(t *testing.T) {
	runSteps(t, 5, 3, 1, []step{
		{0, 1, "0 6 5 -1 1"},
		{0, 1, "0 6 4 -1 1"},
		{0, 1, "0 6 3 -1 1"},
		{0, 1, "0 6 2 -1 2"},
	})
	for _, tc := range []struct {
		at    int64
		reply string
	}{
		{999_500_000, "1 1 0 0 0"},
		{999_000_000, "1 1 0 1 1"},
		{1 * sec, "0 1 0 -1 1"},
	} {
		runSteps(t, 0, 1, 1, []step{{0, 1, "0 1 0 -1 1"}, {tc.at, 1, tc.reply}})
	}
	runSteps(t, 5, 2500, 2501, []step{{0, 1, "0 6 5 -1 1"}})
}

func TestExampleFastRates(t *testing.T) {
	r, err := Throttle(Params{1000, 1000, 60, 1}, 0, false, t0)
	require.NoError(t, err)
	assert.Equal(t, "0 1001 1000 -1 1", replyText(r, err))
	assert.Equal(t, int64(60), r.TTLMillis)

	r, err = Throttle(Params{10, 2_000_000, 1, 1}, 0, false, t0)
	require.NoError(t, err)
	assert.Equal(t, int64(500), Interval(2_000_000, 1))
	assert.Equal(t, int64(math.MaxInt64), r.Remaining)
}

func TestClockJumpsBack(t *testing.T) {
	runSteps(t, 4, 1, 1, []step{
		{0, 1, "0 5 4 -1 1"},
		{-3 * sec, 1, "0 5 0 -1 5"},
		{-3 * sec, 1, "1 5 0 1 5"},
	})
}

// Spec §2.3 observed table.
func TestOddParameters(t *testing.T) {
	for _, tc := range []struct {
		p     Params
		reply string
		write bool
	}{
		{Params{5, 0, 60, 1}, "ERR " + errZeroRateText, false},
		{Params{5, 30, 0, 1}, "ERR " + errZeroRateText, false},
		{Params{10, 1_000_000_001, 1, 1}, "ERR " + errZeroRateText, false},
		{Params{-1, 1, 1, 1}, "1 0 0 -1 0", false},
		{Params{-1, 1, 1, 0}, "0 0 0 -1 0", true},
		{Params{-5, 1, 1, 1}, "1 -4 0 -1 0", false},
		{Params{5, -1, 1, 1}, "1 6 0 -1 0", false},
		{Params{5, 1, -1, 1}, "1 6 0 -1 0", false},
		{Params{15, -30, -60, 1}, "0 16 15 -1 2", true},
		{Params{math.MaxInt64, 1, 1, 1}, "1 -9223372036854775808 0 -1 0", false},
		{Params{1_000_000_000, 1, 60, 1}, "0 1000000001 77662796 -1 60", true},
		{Params{4, 1, 1, 4611686018427387904}, "0 5 5 -1 0", true}, // I wraps to 0: a peek
		{Params{4, 1, 1, 10_000_000_000}, "ERR " + errExpireText, true},
	} {
		r, err := Throttle(tc.p, 0, false, t0)
		assert.Equalf(t, tc.reply, replyText(r, err), "%+v", tc.p)
		assert.Equalf(t, tc.write, r.Write, "%+v write", tc.p)
	}
	assert.Equal(t, int64(1), Interval(1_000_000_000, 1))
	assert.Equal(t, int64(math.MaxInt64), Interval(1, 9_223_372_037))
	assert.Equal(t, int64(math.MaxInt64), Interval(1, math.MaxInt64))
	assert.Equal(t, int64(math.MinInt64), Interval(-1, math.MaxInt64))
	assert.Equal(t, int64(9_223_372_036_000_000_000), Interval(1, 9_223_372_036))
	assert.Equal(t, int64(math.MinInt64), Interval(1, math.MinInt64))
}

// The year-2343 lock of spec §2.3: quantity 10^10 at T = 1 s wraps the
// increment negative; the call replies with the expiry error but stores a
// value that reads back ~317 years ahead, and later calls are limited with
// "[1,6,0,9999999979,9999999984]" (here 16 s later).
func TestWrappedIncrementLocksKey(t *testing.T) {
	s := fakeStore{}
	r, err := Throttle(Params{5, 1, 1, 10_000_000_000}, 0, false, t0)
	require.NoError(t, err)
	require.Equal(t, "ERR "+errExpireText, replyText(r, err))
	s.apply("k", r, t0)
	q := int64(10_000_000_000)
	wantTat := uint64(t0 + sec*q) // wraps mod 2^64
	assert.Equal(t, uint64(11_700_000_000_000_000_000), wantTat)
	assert.Equal(t, wantTat, s["k"].tat)
	assert.False(t, s["k"].hasExpiry)

	now := t0 + 16*sec
	tat, ok := s.get("k", now)
	require.True(t, ok)
	r, err = Throttle(Params{5, 1, 1, 1}, tat, ok, now)
	assert.Equal(t, "1 6 0 9999999979 9999999984", replyText(r, err))
	assert.False(t, r.Write)
}

// TestMaxTTL: the longest emission interval with a burst of 1 reaches
// MaxTTLMillis exactly, and the widest parameters never pass it.
func TestMaxTTL(t *testing.T) {
	r, err := Throttle(Params{0, 1, math.MaxInt64, 1}, 0, false, t0)
	require.NoError(t, err)
	require.True(t, r.Write)
	assert.Equal(t, ExpireAfter, r.Expiry)
	assert.Equal(t, int64(MaxTTLMillis), r.TTLMillis)
	assert.Equal(t, int64(9_223_372_036_854), r.TTLMillis)
	for _, p := range []Params{{math.MaxInt64, 1, math.MaxInt64, 1}, {math.MaxInt64, 1, math.MaxInt64, math.MaxInt64}, {1 << 40, 3, 1 << 40, 1 << 20}} {
		r, err := Throttle(p, 0, false, t0)
		require.NoError(t, err)
		if r.Write && r.Expiry == ExpireAfter {
			assert.LessOrEqual(t, r.TTLMillis, int64(MaxTTLMillis), "%+v", p)
		}
	}
}

func TestForeignValues(t *testing.T) {
	// SET k 5: a TAT in 1970 behaves like a fresh key.
	r, err := Throttle(Params{4, 1, 1, 1}, 5, true, t0)
	require.NoError(t, err)
	assert.Equal(t, "0 5 4 -1 1", replyText(r, err))
	// SET k 9999999999999999999: TAT in 2286, stays limited.
	r, err = Throttle(Params{4, 1, 1, 1}, 9_999_999_999_999_999_999, true, t0)
	require.NoError(t, err)
	assert.True(t, r.Limited)
	d := new(big.Int).Sub(new(big.Int).SetUint64(9_999_999_999_999_999_999), big.NewInt(t0))
	wantReset := new(big.Int).Quo(d, big.NewInt(1e9)).Int64() + 1 // fraction >= 1 ms
	assert.Equal(t, wantReset, r.ResetAfter)
	assert.Equal(t, wantReset-4, r.RetryAfter) // retry = ttl - (τ - I) = ttl - 4 s
	// Max u64 TAT with max T: exercises the widest values.
	r, err = Throttle(Params{math.MaxInt64, 1, math.MaxInt64, math.MaxInt64}, math.MaxUint64, true, math.MinInt64)
	require.NoError(t, err)
	assert.Equal(t, refThrottle(Params{math.MaxInt64, 1, math.MaxInt64, math.MaxInt64}, math.MaxUint64, true, math.MinInt64), r)
}

// ---------------------------------------------------------------------------
// secs() rounding (spec §3) and saturation helpers
// ---------------------------------------------------------------------------

func TestSecsRounding(t *testing.T) {
	for _, tc := range []struct {
		ns   int64
		want int64
	}{
		{2_000_000_000, 2},
		{3_900_000_000, 4},
		{999_999_999, 1},
		{1_000_400_000, 1},
		{500_000, 0},
		{-1_000_000_000, -1},
		{-500_000_000, 0},
		{-1_500_000_000, -1},
		{0, 0},
		{999_999, 0},
		{1_000_000, 1},
		{1_000_999_999, 1},
		{1_001_000_000, 2},
		{-1_000_000, 0},
		{-999_999_999, 0},
		{60_000_000, 1}, // v0.3.0 truncated this to 0
		{1_990_000_000, 2},
		{math.MaxInt64, 9_223_372_037},
		{math.MinInt64, -9_223_372_036},
	} {
		assert.Equalf(t, tc.want, secs(i128(tc.ns)), "secs(%d)", tc.ns)
	}
	// Beyond int64: 2^64 + 1.5 ms ns.
	x := int128{hi: 1, lo: 1_500_000}
	assert.Equal(t, int64(18_446_744_073+1), secs(x)) // 2^64 ns = 18446744073.709551616 s
	assert.Equal(t, int64(-18_446_744_073), secs(x.neg()))
}

func TestSatF64(t *testing.T) {
	for _, tc := range []struct {
		f    float64
		want int64
	}{
		{math.NaN(), 0},
		{math.Inf(1), math.MaxInt64},
		{math.Inf(-1), math.MinInt64},
		{0x1p63, math.MaxInt64},
		{1e300, math.MaxInt64},
		{-0x1p63, math.MinInt64},
		{-1e300, math.MinInt64},
		{math.Nextafter(0x1p63, 0), 0x7FFFFFFFFFFFFC00},
		{1.9, 1},
		{-1.9, -1},
		{-0.5, 0},
		{0, 0},
	} {
		assert.Equalf(t, tc.want, satF64(tc.f), "satF64(%v)", tc.f)
	}
}

func TestInterval(t *testing.T) {
	assert.Equal(t, int64(0), Interval(0, 60))
	assert.Equal(t, int64(0), Interval(30, 0))
	assert.Equal(t, int64(2_000_000_000), Interval(30, 60))
	assert.Equal(t, int64(2_000_000_000), Interval(-30, -60))
	assert.Equal(t, int64(-5_000_000_000), Interval(-1, 5))
	assert.Equal(t, int64(333_333_333), Interval(3, 1))
	assert.Equal(t, int64(1_000_400_000), Interval(2500, 2501))
	assert.Equal(t, int64(1), Interval(1_000_000_000, 1))
	assert.Equal(t, int64(0), Interval(1_000_000_001, 1))
	assert.Equal(t, int64(0), Interval(math.MinInt64, 1))
	// Reference: exact product rounded once, divided, truncated.
	rng := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		c, p := randParam(rng), randParam(rng)
		if c == 0 || p == 0 {
			continue
		}
		assert.Equal(t, refInterval(c, p), Interval(c, p), "Interval(%d, %d)", c, p)
	}
}

func TestInt128(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	toBig := func(a int128) *big.Int {
		b := new(big.Int).SetInt64(a.hi)
		b.Lsh(b, 64)
		return b.Add(b, new(big.Int).SetUint64(a.lo))
	}
	two127 := new(big.Int).Lsh(big.NewInt(1), 126)
	small := func() int128 {
		// Values below 2^126 in magnitude, the domain int128 is used on.
		v := int128{hi: int64(rng.Uint64()) >> uint(rng.IntN(64)+2), lo: rng.Uint64()}
		if rng.IntN(4) == 0 {
			v = i128(int64(rng.Uint64()) >> uint(rng.IntN(64)))
		}
		return v
	}
	for range 20000 {
		a, b := small(), small()
		ba, bb := toBig(a), toBig(b)
		require.Equal(t, new(big.Int).Add(ba, bb).String(), toBig(a.add(b)).String())
		require.Equal(t, new(big.Int).Sub(ba, bb).String(), toBig(a.sub(b)).String())
		require.Equal(t, new(big.Int).Neg(ba).String(), toBig(a.neg()).String())
		require.Equal(t, ba.Cmp(bb), a.cmp(b))
		require.Equal(t, ba.IsInt64(), a.isInt64())
		for _, d := range []int64{1000, 1_000_000, 1_000_000_000, 7, math.MaxInt64} {
			q, r := a.quoRem(d)
			bq, br := new(big.Int).QuoRem(ba, big.NewInt(d), new(big.Int))
			require.Equal(t, bq.String(), toBig(q).String(), "%s / %d", ba, d)
			require.Equal(t, br.Int64(), r, "%s %% %d", ba, d)
		}
		wf, _ := new(big.Float).SetInt(ba).Float64() // nearest, ties to even
		require.Equal(t, wf, a.float64(), "float64(%s)", ba)
		require.True(t, ba.CmpAbs(two127) < 0)
	}
	// Rounding corner cases: ties to even just above 2^64.
	for _, a := range []int128{
		{hi: 1, lo: 1 << 11},        // 2^64 + 2^11: exact tie -> even (down)
		{hi: 1, lo: 1<<11 + 1},      // just above tie -> up
		{hi: 1, lo: 3 << 11},        // tie -> even (up)
		{hi: 1, lo: math.MaxUint64}, // rounds up to 2^65
		{hi: math.MaxInt64 >> 1, lo: math.MaxUint64},
		{hi: -1, lo: 0},
		{hi: -2, lo: 1<<11 + 0},
	} {
		wf, _ := new(big.Float).SetInt(toBig(a)).Float64()
		assert.Equal(t, wf, a.float64(), "float64(%s)", toBig(a))
	}
	assert.Equal(t, int64(math.MaxInt64), int128{hi: 1}.sat64())
	assert.Equal(t, int64(math.MinInt64), int128{hi: -2}.sat64())
	assert.Equal(t, int64(-7), i128(-7).sat64())
}

// ---------------------------------------------------------------------------
// Differential test against a math/big reference of spec §2.1
// ---------------------------------------------------------------------------

// refInterval is spec §2.1 step 1 with math/big.
func refInterval(count, period int64) int64 {
	if count == 0 || period == 0 {
		return 0
	}
	num := new(big.Int).Mul(big.NewInt(period), big.NewInt(1e9))
	f, _ := new(big.Float).SetInt(num).Float64()
	return satF64(f / float64(count))
}

func refSecs(d *big.Int) int64 {
	q, r := new(big.Int).QuoRem(d, big.NewInt(1e9), new(big.Int))
	s := q.Int64()
	if r.Cmp(big.NewInt(1e6)) >= 0 {
		s++
	}
	return s
}

// refThrottle is a straightforward math/big transcription of spec §2.1.
func refThrottle(p Params, tat uint64, exists bool, now int64) Result {
	T := refInterval(p.Count, p.Period)
	limit := p.MaxBurst + 1
	tau := T * limit
	inc := T * p.Quantity
	bNow := big.NewInt(now)
	bTat := new(big.Int).SetUint64(tat)
	if !exists {
		bTat.Set(bNow)
	}
	base := bTat
	if bNow.Cmp(bTat) > 0 {
		base = bNow
	}
	newTat := new(big.Int).Add(base, big.NewInt(inc))
	allowAt := new(big.Int).Sub(newTat, big.NewInt(tau))
	diff := new(big.Int).Sub(bNow, allowAt)
	r := Result{Limit: limit, RetryAfter: -1}
	var ttl *big.Int
	if diff.Sign() < 0 {
		r.Limited = true
		if inc <= tau {
			r.RetryAfter = refSecs(new(big.Int).Neg(diff))
		}
		ttl = new(big.Int).Sub(bTat, bNow)
	} else {
		ttl = new(big.Int).Sub(newTat, bNow)
		r.Write = true
		mod := new(big.Int).And(newTat, new(big.Int).SetUint64(math.MaxUint64))
		r.NewTAT = mod.Uint64()
		ms := new(big.Int).Quo(ttl, big.NewInt(1e6))
		if !ms.IsInt64() {
			panic("ttl ms beyond int64")
		}
		r.TTLMillis = ms.Int64()
		switch {
		case r.TTLMillis >= 0:
			r.Expiry = ExpireAfter
		case r.TTLMillis == -1:
			r.Expiry = ExpireNever
		default:
			r.Expiry = ExpireError
		}
	}
	next := new(big.Int).Sub(big.NewInt(tau), ttl)
	if next.Cmp(new(big.Int).Neg(big.NewInt(T))) > 0 {
		nus := new(big.Int).Quo(next, big.NewInt(1000))
		nf, _ := new(big.Float).SetInt(nus).Float64()
		r.Remaining = satF64(nf / float64(T/1000))
	}
	r.ResetAfter = refSecs(ttl)
	return r
}

// randParam draws from a mix of small, boundary and arbitrary int64 values.
func randParam(rng *rand.Rand) int64 {
	switch rng.IntN(6) {
	case 0:
		return rng.Int64N(100) - 10
	case 1:
		return []int64{0, 1, -1, math.MaxInt64, math.MinInt64, math.MaxInt64 - 1, math.MinInt64 + 1,
			1 << 31, 1 << 62, 9_223_372_037, 1_000_000_000, 1_000_000_001}[rng.IntN(12)]
	case 2:
		return rng.Int64N(1_000_000)
	case 3:
		return -rng.Int64N(1_000_000)
	default:
		return int64(rng.Uint64())
	}
}

func TestThrottleMatchesBigReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for i := range 200000 {
		p := Params{randParam(rng), randParam(rng), randParam(rng), randParam(rng)}
		if rng.IntN(2) == 0 {
			p.Count = rng.Int64N(5000) + 1
			p.Period = rng.Int64N(5000) + 1
		}
		now := t0 + rng.Int64N(1_000_000*sec)
		if rng.IntN(20) == 0 {
			now = int64(rng.Uint64())
		}
		var tat uint64
		exists := rng.IntN(4) != 0
		switch rng.IntN(4) {
		case 0:
			tat = rng.Uint64()
		case 1:
			tat = []uint64{0, math.MaxUint64, 1 << 63, 1<<63 - 1}[rng.IntN(4)]
		default:
			tat = uint64(now + rng.Int64N(200*sec) - 100*sec)
		}
		got, err := Throttle(p, tat, exists, now)
		if Interval(p.Count, p.Period) == 0 {
			require.ErrorIs(t, err, ErrZeroRate)
			continue
		}
		require.NoError(t, err)
		want := refThrottle(p, tat, exists, now)
		require.Equalf(t, want, got, "iter %d: Throttle(%+v, %d, %v, %d)", i, p, tat, exists, now)
	}
}

// TestFastPathMatchesWide checks the int64 fast path against the 128-bit
// path wherever the fast path accepts the input, and that both kinds of
// input occur.
func TestFastPathMatchesWide(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	fast, slow := 0, 0
	for range 300000 {
		p := Params{randParam(rng), randParam(rng), randParam(rng), randParam(rng)}
		if rng.IntN(2) == 0 {
			p.Count, p.Period = rng.Int64N(5000)+1, rng.Int64N(5000)+1
		}
		if Interval(p.Count, p.Period) == 0 {
			continue
		}
		now := t0 + rng.Int64N(1_000_000*sec)
		if rng.IntN(10) == 0 {
			now = int64(rng.Uint64())
		}
		tat := uint64(now + rng.Int64N(200*sec) - 100*sec)
		if rng.IntN(5) == 0 {
			tat = rng.Uint64() >> 1
		}
		if pathsAgree(t, p, tat, rng.IntN(4) != 0, now) {
			fast++
		} else {
			slow++
		}
	}
	t.Logf("fast path: %d inputs, fallback: %d", fast, slow)
	assert.Greater(t, fast, 10000)
	assert.Greater(t, slow, 10000)
}

func TestThrottleNoAllocs(t *testing.T) {
	p := Params{15, 30, 60, 1}
	allocs := testing.AllocsPerRun(1000, func() {
		_, _ = Throttle(p, uint64(t0), true, t0)
		_, _ = Throttle(p, 0, false, t0)
		_, _ = Throttle(Params{0, 0, 1, 1}, 0, false, t0)
		_, _ = Throttle(Params{1, 1, math.MaxInt64, math.MaxInt64}, math.MaxUint64, true, t0)
	})
	assert.Zero(t, allocs)
}

func TestExpiryKindString(t *testing.T) {
	assert.Equal(t, "ExpireAfter", ExpireAfter.String())
	assert.Equal(t, "ExpireNever", ExpireNever.String())
	assert.Equal(t, "ExpireError", ExpireError.String())
	assert.Equal(t, "ExpiryKind(?)", ExpiryKind(9).String())
}

// ExpireNever: a ttl in (-2 ms, -1 ms] makes the key persistent.
func TestExpireNever(t *testing.T) {
	// T = 1 s, stored TAT = now + 1 s, q = -2 -> ttl = -1 s -> ms -1000: error.
	// To hit ms == -1 exactly, use a tiny T: count 10^9/period 1 -> T = 1 ns.
	// tat = now, q = -1_500_000 -> new_tat = now - 1.5 ms -> ms = -1.
	r, err := Throttle(Params{MaxBurst: 5, Count: 1_000_000_000, Period: 1, Quantity: -1_500_000}, uint64(t0), true, t0)
	require.NoError(t, err)
	assert.True(t, r.Write)
	assert.Equal(t, ExpireNever, r.Expiry)
	assert.Equal(t, int64(-1), r.TTLMillis)
	assert.Equal(t, uint64(t0-1_500_000), r.NewTAT)

	r, err = Throttle(Params{MaxBurst: 5, Count: 1_000_000_000, Period: 1, Quantity: -2_000_000}, uint64(t0), true, t0)
	require.NoError(t, err)
	assert.Equal(t, ExpireError, r.Expiry)

	r, err = Throttle(Params{MaxBurst: 5, Count: 1_000_000_000, Period: 1, Quantity: -999_999}, uint64(t0), true, t0)
	require.NoError(t, err)
	assert.Equal(t, ExpireAfter, r.Expiry)
	assert.Equal(t, int64(0), r.TTLMillis)
}
