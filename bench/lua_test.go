package bench

import (
	"bufio"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// needRedis returns redis-server's path or skips the test, saying why and
// how to install it.
func needRedis(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("redis-server")
	if err != nil {
		t.Skipf("SKIPPED: redis-server not found in PATH, so the Lua reference script is NOT checked. Install it with: %s", AptHint)
	}
	return p
}

func startRedis(t *testing.T) *Proc {
	t.Helper()
	p, err := StartRedis(RedisOptions{Binary: needRedis(t), Dir: t.TempDir(), Name: "redis"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Stop)
	return p
}

func dialT(t *testing.T, addr string) *Conn {
	t.Helper()
	c, err := Dial(addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// conformanceDir returns the repository's conformance/ folder, or
// $CELLSERVER_CONFORMANCE_DIR if set; a missing folder fails the test.
func conformanceDir(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("CELLSERVER_CONFORMANCE_DIR")
	if dir == "" {
		dir = filepath.Join("..", "conformance")
	}
	if _, err := os.Stat(filepath.Join(dir, "README.md")); err != nil {
		t.Fatalf("conformance vectors not found in %s (set CELLSERVER_CONFORMANCE_DIR): %v", dir, err)
	}
	return dir
}

// TestLuaScriptConformanceVectors replays the sane conformance vectors
// (frozen clock) through the fixed-clock variant of the Lua script, which
// shares every line of arithmetic with ThrottleLua. Expiry follows the
// vectors' frozen clock: the test deletes a key once the vector clock passes
// the expiry the vectors recorded for it.
func TestLuaScriptConformanceVectors(t *testing.T) {
	dir := conformanceDir(t)
	r := startRedis(t)
	sha, err := ScriptLoad(r.Addr, throttleLuaFixedClock)
	if err != nil {
		t.Fatal(err)
	}
	c := dialT(t, r.Addr)
	for _, file := range []string{"examples.txt", "random-sane.txt"} {
		f, err := os.Open(filepath.Join(dir, file))
		if err != nil {
			t.Fatal(err)
		}
		expiry := map[string]int64{} // key -> expire_at_ms; -1: no TTL
		tainted := map[string]bool{}
		sc := bufio.NewScanner(f)
		checked, skipped := 0, 0
		resync := func(key, reply, state string, nowNs int64) {
			f := strings.Fields(state)
			switch {
			case state == "nil":
				c.Do("DEL", key)
				delete(tainted, key)
				delete(expiry, key)
			case state == "-":
				if !strings.Contains(reply, "parse") && !strings.Contains(reply, "Zero rates") {
					tainted[key] = true
				}
			case len(f) == 2:
				tat, err := strconv.ParseInt(f[0], 10, 64)
				if err != nil || tat-nowNs > 1e15 || nowNs-tat > 1e15 {
					tainted[key] = true
					return
				}
				c.Do("SET", key, f[0])
				delete(tainted, key)
				expiry[key] = -1
				if f[1] != "none" {
					expiry[key], _ = strconv.ParseInt(f[1], 10, 64)
				}
			}
		}
		for n := 1; sc.Scan(); n++ {
			line := strings.TrimSpace(sc.Text())
			if line == "" || strings.HasPrefix(line, "#") {
				continue
			}
			pos := fmt.Sprintf("%s:%d", file, n)
			if line == "FLUSHALL" {
				if _, err := c.Do("FLUSHALL"); err != nil {
					t.Fatal(err)
				}
				expiry = map[string]int64{}
				tainted = map[string]bool{}
				continue
			}
			cols := strings.Split(line, "|")
			if len(cols) != 4 {
				t.Fatalf("%s: malformed vector", pos)
			}
			now := strings.TrimSpace(cols[0])
			args := strings.Fields(cols[1])
			want := strings.TrimSpace(cols[2])
			state := strings.TrimSpace(cols[3])
			nowNs, _ := strconv.ParseInt(now, 10, 64)
			key := args[0]
			if exp, ok := expiry[key]; ok && exp >= 0 && exp < nowNs/1e6 {
				c.Do("DEL", key)
				delete(expiry, key)
			}
			if !saneCall(args[1:]) {
				// Outside what the Lua reference models (int64 wrap-around,
				// T < 1 µs): skip the call but take over the state it left,
				// when that state is a TAT near now.
				skipped++
				resync(key, want, state, nowNs)
				continue
			}
			if tainted[key] {
				skipped++
				resync(key, want, state, nowNs)
				continue
			}
			v, err := c.Do(append([]string{"EVALSHA", sha, "1"}, append(args, now)...)...)
			if err != nil {
				t.Fatal(err)
			}
			got := v.String()
			if v.Kind == '-' {
				got = "ERR " + v.Str
			} else if ints, err := v.Ints(); err == nil {
				got = strings.Trim(fmt.Sprint(ints), "[]")
			}
			if got != want {
				t.Errorf("%s: CL.THROTTLE %s at %s: Lua gave %q, want %q", pos, strings.Join(args, " "), now, got, want)
				continue
			}
			checked++
			switch f := strings.Fields(state); {
			case state == "-":
				if strings.Contains(want, "Error while setting key expire") {
					expiry[key] = -1
				}
			case state == "nil":
				g, _ := c.Do("GET", key)
				if !g.Null {
					t.Errorf("%s: key %s holds %s, want none", pos, key, g)
				}
			case len(f) == 2 && f[1] != "none" && atoi(f[1]) < nowNs/1e6:
				// Recorded, but already expired at this instant: absent.
				c.Do("DEL", key)
				delete(expiry, key)
			case len(f) == 2:
				g, _ := c.Do("GET", key)
				if g.Str != f[0] {
					t.Errorf("%s: key %s holds %s, want TAT %s", pos, key, g, f[0])
				}
				if f[1] == "none" {
					expiry[key] = -1
				} else {
					expiry[key], _ = strconv.ParseInt(f[1], 10, 64)
				}
			}
		}
		f.Close()
		t.Logf("%s: %d calls matched, %d skipped (absurd parameters, or a key they left far from now)", file, checked, skipped)
		if checked < 500 && file != "examples.txt" {
			t.Errorf("%s: only %d calls checked", file, checked)
		}
	}
}

// TestLuaErrorsMatchRedisCell checks the error texts of the real (TIME-based)
// script against the redis-cell wording in the spec.
func TestLuaErrorsMatchRedisCell(t *testing.T) {
	r := startRedis(t)
	sha, err := ScriptLoad(r.Addr, ThrottleLua)
	if err != nil {
		t.Fatal(err)
	}
	c := dialT(t, r.Addr)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"k", "1", "1"}, "Cell error: Store error: Usage: cl.throttle <key> <max_burst> <count per period> <period> [<quantity>]"},
		{[]string{"k", "1", "1", "1", "1", "1"}, "Cell error: Store error: Usage: cl.throttle <key> <max_burst> <count per period> <period> [<quantity>]"},
		{[]string{"k", "1.5", "1", "1"}, "Cell error: Store error: Couldn't parse as integer: 1.5"},
		{[]string{"k", "1", "x", "1"}, "Cell error: Store error: Couldn't parse as integer: x"},
		{[]string{"k", "1", "1", "1", "9223372036854775808"}, "Cell error: Store error: Couldn't parse as integer: 9223372036854775808"},
		{[]string{"k", "1", "0", "1"}, "Cell error: Store error: Zero rates are not supported"},
		{[]string{"k", "10", "1000000001", "1"}, "Cell error: Store error: Zero rates are not supported"},
	} {
		v, err := c.Do(append([]string{"EVALSHA", sha, "1"}, tc.args...)...)
		if err != nil {
			t.Fatal(err)
		}
		if v.Kind != '-' || v.Str != tc.want {
			t.Errorf("%v: got %s, want error %q", tc.args, v, tc.want)
		}
	}
	v, _ := c.Do(append([]string{"EVALSHA", sha, "1"}, "k", "10", "1000000000", "1")...)
	if ints, err := v.Ints(); err != nil || ints[1] != 11 {
		t.Errorf("10 1000000000 1 (T = 1 ns): got %s", v)
	}
}

// TestLuaMatchesCellserver sends the same sequences of CL.THROTTLE calls to a
// freshly built cellserver and to the Lua script on redis-server, both on
// their real clocks, and compares the replies: limited, limit and remaining
// exactly, retry_after and reset_after within ±1 (the clocks differ), and the
// stored TAT and PTTL roughly.
func TestLuaMatchesCellserver(t *testing.T) {
	r := startRedis(t)
	repo, err := FindRepo(".")
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	bin, err := BuildCellserver(repo, tmp)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := StartCellserver(CellserverOptions{Binary: bin, Dir: filepath.Join(tmp, "run")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cs.Stop)
	sha, err := ScriptLoad(r.Addr, ThrottleLua)
	if err != nil {
		t.Fatal(err)
	}
	cc, rc := dialT(t, cs.Addr), dialT(t, r.Addr)

	type call struct {
		params string // max_burst count period
		qty    []int  // one call per entry; -1 means "no quantity argument"
	}
	rep := func(q, n int) []int {
		out := make([]int, n)
		for i := range out {
			out[i] = q
		}
		return out
	}
	cases := []call{
		{"15 30 60", rep(-1, 18)},                       // spec example A: 16 allowed, then limited
		{"4 1 1", []int{6, 1, 1, 1, 1, 1, 1, 0, 2, 5}},  // example C at t0
		{"4 1 1", []int{0, 1, 0, 4, 0, 1}},              // example D: peeks
		{"4 1 1", []int{5, 6, 1}},                       // example E
		{"0 1 2", rep(1, 3)},                            // example B
		{"5 3 1", rep(1, 4)},                            // T = 333,333,333 ns
		{"5 2500 2501", rep(1, 2)},                      // T = 1.0004 s
		{"100 10 1", rep(-1, 5)},                        // the benchmark's parameters
		{"1000 1 3600", rep(-1, 3)},                     // the live-keyspace parameters
		{"100 1 86400", rep(-1, 3)},                     // the memory-mode parameters
		{"10 100 10", append(rep(3, 4), 0, 20, 1, 1)},   // bigger quantities
		{"2 10 1", rep(1, 5)},                           // T = 100 ms
		{"1000000 1000000 1", append(rep(1, 3), 1000)},  // T = 1 µs
		{"50 100 10", []int{50, 1, 60, 0}},              // quantity near the limit
		{"9 7 3", rep(1, 12)},                           // T = 428,571,428 ns
		{"100 1000 60", append(rep(10, 12), 0, 1)},      // runs out
		{"1000 5000 3600", append(rep(100, 11), 1, 0)},  // long period
		{"10 1 86400", append(rep(1, 12), 0)},           // one per day
		{"15 320 2837", rep(2, 9)},                      // odd T
		{"43 148 2844", append(rep(1, 3), 44, 1, 0, 2)}, // odd T, overflow the burst
	}
	tag := strconv.FormatInt(time.Now().UnixNano(), 36)
	for i, tc := range cases {
		key := fmt.Sprintf("eq:%s:%d", tag, i)
		for j, q := range tc.qty {
			args := append([]string{key}, strings.Fields(tc.params)...)
			if q >= 0 {
				args = append(args, strconv.Itoa(q))
			}
			cv, err := cc.Do(append([]string{"CL.THROTTLE"}, args...)...)
			if err != nil {
				t.Fatal(err)
			}
			lv, err := rc.Do(append([]string{"EVALSHA", sha, "1"}, args...)...)
			if err != nil {
				t.Fatal(err)
			}
			what := fmt.Sprintf("case %d (%s) call %d %v", i, tc.params, j+1, args)
			a, err1 := cv.Ints()
			b, err2 := lv.Ints()
			if err1 != nil || err2 != nil || len(a) != 5 || len(b) != 5 {
				t.Fatalf("%s: cellserver %s, Lua %s", what, cv, lv)
			}
			ok := a[0] == b[0] && a[1] == b[1] && a[2] == b[2] && near(a[3], b[3], 1) && near(a[4], b[4], 1)
			if !ok {
				t.Errorf("%s: cellserver %v, Lua %v", what, a, b)
			}
		}
		// State: the same TAT (ns since the epoch, within the clocks' skew) and PTTL.
		cg, _ := cc.Do("GET", key)
		lg, _ := rc.Do("GET", key)
		if cg.Null != lg.Null {
			// One side may have expired between the two GETs (case 12's
			// key lives ~300 ms): allowed if the other expires within the
			// same 1 s skew the PTTL check allows.
			live := cc
			if cg.Null {
				live = rc
			}
			// -2: it expired meanwhile too.
			if p, _ := live.Do("PTTL", key); p.Int == -1 || p.Int < -2 || p.Int > 1000 {
				t.Errorf("case %d: GET cellserver %s, Lua %s (PTTL of the live one %s)", i, cg, lg, p)
			}
			continue
		}
		if !cg.Null {
			ct, _ := strconv.ParseInt(cg.Str, 10, 64)
			lt, _ := strconv.ParseInt(lg.Str, 10, 64)
			if !near(ct, lt, int64(time.Second)) {
				t.Errorf("case %d: TAT cellserver %s, Lua %s", i, cg.Str, lg.Str)
			}
			cp, _ := cc.Do("PTTL", key)
			lp, _ := rc.Do("PTTL", key)
			if !near(cp.Int, lp.Int, 1000) {
				t.Errorf("case %d: PTTL cellserver %s, Lua %s", i, cp, lp)
			}
		}
	}
}

// saneCall reports whether max_burst, count, period and quantity are within
// what ThrottleLua reproduces exactly: no int64 wrap-around anywhere (T, τ
// and the increment stay within ±1e17 ns) and an emission interval of at
// least 1 µs. Calls that fail to parse are modelled, so they count as sane.
func saneCall(nums []string) bool {
	var v [4]float64
	for i, s := range nums {
		x, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return true
		}
		v[i] = float64(x)
	}
	burst, count, period, qty := v[0], v[1], v[2], v[3]
	if count == 0 || period == 0 {
		return true // the zero-rate error
	}
	T := math.Trunc(period * 1e9 / count)
	if math.Abs(T) < 1000 {
		return T == 0
	}
	return math.Abs(T) <= 1e17 && math.Abs(T*(burst+1)) <= 1e17 && math.Abs(T*qty) <= 1e17
}

func atoi(s string) int64 {
	x, _ := strconv.ParseInt(s, 10, 64)
	return x
}

func near(a, b, tol int64) bool {
	d := a - b
	return d >= -tol && d <= tol
}

func TestKeyNameMatchesRandInt(t *testing.T) {
	if got := string(KeyName(nil, "key:", 83708)); got != "key:000000083708" {
		t.Fatalf("KeyName = %q", got)
	}
	if got := len(KeyName(nil, "mem:", 9999999)); got != 16 {
		t.Fatalf("memory-mode keys must be 16 bytes, got %d", got)
	}
}

func TestSplitArgs(t *testing.T) {
	got, err := SplitArgs(` --fsync always  --data-dir "/tmp/a b" --x='' `)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"--fsync", "always", "--data-dir", "/tmp/a b", "--x="}
	if fmt.Sprint(got) != fmt.Sprint(want) || len(got) != len(want) {
		t.Fatalf("SplitArgs = %q, want %q", got, want)
	}
	if _, err := SplitArgs(`"open`); err == nil {
		t.Fatal("unterminated quote accepted")
	}
}

func TestParseBenchmark(t *testing.T) {
	out := `====== CL.THROTTLE key:__rand_int__ 100 10 1 ======
  50000 requests completed in 0.10 seconds
  50 parallel clients

Latency by percentile distribution:
0.000% <= 0.135 milliseconds (cumulative count 16)
50.000% <= 0.927 milliseconds (cumulative count 25808)
99.805% <= 2.791 milliseconds (cumulative count 49904)
99.902% <= 2.863 milliseconds (cumulative count 49952)
100.000% <= 2.983 milliseconds (cumulative count 50000)

Cumulative distribution of latencies:
0.000% <= 0.103 milliseconds (cumulative count 0)
100.000% <= 3.103 milliseconds (cumulative count 50000)

Summary:
  throughput summary: 520833.34 requests per second
  latency summary (msec):
          avg       min       p50       p95       p99       max
        0.960     0.128     0.927     1.511     2.223     2.983
`
	r, err := ParseBenchmark(out)
	if err != nil {
		t.Fatal(err)
	}
	if r.RPS != 520833.34 || r.P50MS != 0.927 || r.P99MS != 2.223 || r.P999MS != 2.863 || r.MaxMS != 2.983 || r.AvgMS != 0.96 {
		t.Fatalf("parsed %+v", r)
	}
}
