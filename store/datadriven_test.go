package store

import (
	"fmt"
	"log/slog"
	"math"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/cellserver/cellserver/cluster"
	"github.com/cellserver/cellserver/gcra"
	"github.com/cellserver/cellserver/limit"
)

// The data-driven tests of the shard and its persistence: every file under
// testdata/ is a scenario of directives, each followed by "----" and the
// output it must give (regenerate with go test ./store -run TestDataDriven
// -rewrite, then check every changed line against the spec by hand).
//
// Every use of the store's API is in the do* functions right below, so
// that a change of that API is a change of these functions only; the
// testdata files know nothing of it.

// doThrottle runs CL.THROTTLE on key.
func doThrottle(st *Store, key string, p gcra.Params) (gcra.Result, error) {
	r := &ThrottleReq{Key: []byte(key), Params: p}
	if err := ddRun(st, r); err != nil {
		return gcra.Result{}, err
	}
	return r.Result, r.Err
}

// doPeek runs CL.PEEK on key.
func doPeek(st *Store, key string, p gcra.Params) (gcra.Result, error) {
	r := &PeekReq{Key: []byte(key), Params: p}
	if err := ddRun(st, r); err != nil {
		return gcra.Result{}, err
	}
	return r.Result, r.Err
}

// doLimit runs one parsed CL.LIMIT call as the front end does: as a
// request on its shard when its keys share one, else as a held request
// (Session.AddHeld).
func doLimit(st *Store, call limit.Call) (*LimitReq, error) {
	r := &LimitReq{Call: call}
	s := st.NewSession()
	if ids := r.Shards(st, nil); len(ids) == 1 {
		s.AddTo(ids[0], r)
	} else {
		s.AddHeld(r)
	}
	s.Run()
	if err := r.Status(); err != nil {
		return r, err
	}
	return r, r.Err
}

// doInspect returns a key's encoded state and PTTL (CL.INSPECT).
func doInspect(st *Store, key string) (state []byte, pttl int64, found bool, err error) {
	r := &InspectReq{Key: []byte(key)}
	err = ddRun(st, r)
	return r.State, r.PTTL, r.Found, err
}

// doPTTL returns PTTL key: -2 missing, -1 no expiry, else ms left.
func doPTTL(st *Store, key string) (int64, error) {
	r := &PTTLReq{Key: []byte(key)}
	err := ddRun(st, r)
	return r.PTTL, err
}

// doDel deletes key, reporting whether a live key was removed.
func doDel(st *Store, key string) (bool, error) {
	r := &DelReq{Key: []byte(key)}
	err := ddRun(st, r)
	return r.Removed, err
}

// onEveryShard runs one request of each shard, made by mk, and returns
// them once all ran.
func onEveryShard[R Request](st *Store, mk func() R) ([]R, error) {
	rs := make([]R, st.NumShards())
	s := st.NewSession()
	for i := range rs {
		rs[i] = mk()
		s.AddTo(i, rs[i])
	}
	s.Run()
	for _, r := range rs {
		if err := r.Status(); err != nil {
			return nil, err
		}
	}
	return rs, nil
}

// doDBSize sums DBSIZE over the shards.
func doDBSize(st *Store) (int64, error) {
	rs, err := onEveryShard(st, func() *DBSizeReq { return &DBSizeReq{} })
	var n int64
	for _, r := range rs {
		n += r.Keys
	}
	return n, err
}

// dumpReq is an ExportReq of every live key of the slot ranges.
func dumpReq(ranges [][2]int) *ExportReq {
	return &ExportReq{In: func(slot int) bool { return inRanges(slot, ranges) }, Max: math.MaxInt}
}

// doDump returns every live key of the slot ranges, with its state and
// expiry, in key order.
func doDump(st *Store, ranges [][2]int) ([]Entry, error) {
	rs, err := onEveryShard(st, func() *ExportReq { return dumpReq(ranges) })
	var es []Entry
	for _, r := range rs {
		es = append(es, r.Entries...)
	}
	sort.Slice(es, func(i, j int) bool { return string(es[i].Key) < string(es[j].Key) })
	return es, err
}

// doDrop removes every key of the slot ranges, returning how many.
func doDrop(st *Store, ranges [][2]int) (int64, error) {
	rs, err := onEveryShard(st, func() *DropSlotsReq { return &DropSlotsReq{Ranges: ranges} })
	var n int64
	for _, r := range rs {
		n += r.Dropped
	}
	return n, err
}

// doImport merges a moved entry into the store (CLUSTER IMPORTSTATE),
// reporting whether the key changed.
func doImport(st *Store, e Entry) (bool, error) {
	r := &ImportReq{Key: e.Key, State: e.State, Expires: e.Expires}
	s := st.NewSession()
	s.AddTo(st.ShardOf(e.Key), r)
	s.Run()
	if err := r.Status(); err != nil {
		return false, err
	}
	return r.Applied, r.Err
}

// doOpen starts a store; doLoaded reports what its load found.
func doOpen(cfg Config) (*Store, error) { return New(cfg) }

func doLoaded(st *Store) (keys, expired int64) {
	ps := st.PersistStats()
	return ps.KeysLoaded, ps.ExpiredAtLoad
}

// ddRun runs one keyed request and returns the store's status.
func ddRun(st *Store, r KeyedRequest) error {
	s := st.NewSession()
	s.Add(r)
	s.Run()
	return r.Status()
}

// The harness. Times in the files are relative to an epoch (default
// 2100-01-01T00:00:00Z, later than any wall clock the tests will meet, so
// that loading, which judges expiry by the wall clock, drops nothing the
// file's clock still sees live; "epoch at=RFC3339" moves it).

type ddEnv struct {
	t     *testing.T
	clk   *Clock
	epoch int64 // Unix ns
	st    *Store
	cfg   Config
	root  string
	fs    map[string]*vfs.MemFS // crashable file systems by dir name
	saved map[string][]Entry    // dumps kept for import
}

var ddDefaultEpoch = time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()

func TestDataDriven(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		e := &ddEnv{t: t, clk: &Clock{}, epoch: ddDefaultEpoch, root: t.TempDir(),
			fs: map[string]*vfs.MemFS{}, saved: map[string][]Entry{}}
		e.clk.Set(e.epoch)
		defer e.closeStore()
		datadriven.RunTest(t, path, func(t *testing.T, td *datadriven.TestData) string {
			out, err := e.cmd(td)
			if err != nil {
				return "error: " + err.Error() + "\n"
			}
			return out
		})
	})
}

func (e *ddEnv) closeStore() {
	if e.st != nil {
		_ = e.st.Close()
		e.st = nil
	}
}

func (e *ddEnv) cmd(td *datadriven.TestData) (string, error) {
	if e.st == nil && td.Cmd != "open" && td.Cmd != "reopen" && td.Cmd != "time" && td.Cmd != "epoch" {
		return "", fmt.Errorf("no store open")
	}
	switch td.Cmd {
	case "open":
		return e.open(td)
	case "close":
		e.closeStore()
		return "ok\n", nil
	case "reopen": // close (unless closed already) and open the same config
		if e.cfg.Clock == nil {
			return "", fmt.Errorf("nothing opened yet")
		}
		e.closeStore()
		return e.start()
	case "crash":
		return e.crash(td)
	case "epoch":
		at, err := time.Parse(time.RFC3339Nano, e.arg(td, "at", ""))
		if err != nil {
			return "", err
		}
		e.epoch = at.UnixNano()
		e.clk.Set(e.epoch)
		return e.now(), nil
	case "time":
		if v := e.arg(td, "set", ""); v != "" {
			d, err := ddDuration(v)
			if err != nil {
				return "", err
			}
			e.clk.Set(e.epoch + d)
		}
		if v := e.arg(td, "advance", ""); v != "" {
			d, err := ddDuration(v)
			if err != nil {
				return "", err
			}
			e.clk.Advance(d)
		}
		return e.now(), nil
	case "throttle", "peek":
		return e.throttle(td)
	case "limit":
		return e.limit(td)
	case "inspect":
		return e.perKey(td, e.inspect)
	case "pttl":
		return e.perKey(td, func(k string) (string, error) {
			n, err := doPTTL(e.st, k)
			return fmt.Sprintf("%s: %d", k, n), err
		})
	case "del":
		return e.perKey(td, func(k string) (string, error) {
			ok, err := doDel(e.st, k)
			return fmt.Sprintf("%s: %t", k, ok), err
		})
	case "dbsize":
		n, err := doDBSize(e.st)
		return fmt.Sprintf("%d\n", n), err
	case "dump":
		return e.dump(td)
	case "drop":
		rs, err := ddRanges(e.arg(td, "slots", "0-16383"))
		if err != nil {
			return "", err
		}
		n, err := doDrop(e.st, rs)
		return fmt.Sprintf("dropped %d\n", n), err
	case "import":
		var b strings.Builder
		for _, en := range e.saved[e.arg(td, "from", "")] {
			ok, err := doImport(e.st, en)
			if err != nil {
				fmt.Fprintf(&b, "%s: error: %v\n", en.Key, err)
				continue
			}
			fmt.Fprintf(&b, "%s: applied=%t\n", en.Key, ok)
		}
		return b.String(), nil
	}
	return "", fmt.Errorf("unknown command %q", td.Cmd)
}

func (e *ddEnv) arg(td *datadriven.TestData, key, def string) string {
	if a, ok := td.Arg(key); ok {
		return strings.Join(a.Vals, ",")
	}
	return def
}

// open [dir=NAME] [fs=crash] [fsync=always|everysec|no] [shards=N]: no
// dir keeps the store in memory; fs=crash puts the dir on a file system
// in memory that "crash" can clone as a power cut would leave it.
func (e *ddEnv) open(td *datadriven.TestData) (string, error) {
	e.closeStore()
	shards, err := strconv.Atoi(e.arg(td, "shards", "4"))
	if err != nil {
		return "", err
	}
	cfg := Config{Shards: shards, Clock: e.clk, SweepInterval: -1, MemTableSize: 1 << 20,
		PersistInterval: time.Hour, Logger: slog.New(slog.DiscardHandler)}
	if dir := e.arg(td, "dir", ""); dir != "" {
		if cfg.Fsync, err = ParseFsync(e.arg(td, "fsync", "always")); err != nil {
			return "", err
		}
		cfg.DataDir = filepath.Join(e.root, dir)
		if e.arg(td, "fs", "os") == "crash" {
			if e.fs[dir] == nil {
				e.fs[dir] = vfs.NewCrashableMem()
			}
			cfg.FS, cfg.DataDir = e.fs[dir], dir
		}
	}
	e.cfg = cfg
	return e.start()
}

// start opens the store of e.cfg and reports what it loaded.
func (e *ddEnv) start() (string, error) {
	st, err := doOpen(e.cfg)
	if err != nil {
		return "", err
	}
	e.st = st
	if e.cfg.DataDir == "" {
		return "ok\n", nil
	}
	keys, expired := doLoaded(st)
	return fmt.Sprintf("loaded %d, expired at load %d\n", keys, expired), nil
}

// crash: the dir as a power cut at this instant leaves it (what was not
// synced is lost), opened by a new store; the old one is closed after
// the copy was taken, so its last writes reach only the old copy.
func (e *ddEnv) crash(td *datadriven.TestData) (string, error) {
	mem, ok := e.cfg.FS.(*vfs.MemFS)
	if !ok {
		return "", fmt.Errorf("crash needs open fs=crash")
	}
	clone := mem.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0})
	e.closeStore()
	e.cfg.FS = clone
	e.fs[e.cfg.DataDir] = clone
	return e.start()
}

// throttle/peek key=K burst=B count=C period=P [qty=Q] [n=N], or one
// "key max_burst count period [quantity]" per input line.
func (e *ddEnv) throttle(td *datadriven.TestData) (string, error) {
	var lines [][]string
	if td.Input != "" {
		for _, l := range strings.Split(td.Input, "\n") {
			lines = append(lines, strings.Fields(l))
		}
	} else {
		n, err := strconv.Atoi(e.arg(td, "n", "1"))
		if err != nil {
			return "", err
		}
		l := []string{e.arg(td, "key", ""), e.arg(td, "burst", ""), e.arg(td, "count", ""), e.arg(td, "period", ""), e.arg(td, "qty", "1")}
		for range n {
			lines = append(lines, l)
		}
	}
	var b strings.Builder
	for _, l := range lines {
		if len(l) == 4 {
			l = append(l, "1")
		}
		if len(l) != 5 {
			return "", fmt.Errorf("want key max_burst count period [quantity], got %q", l)
		}
		var v [4]int64
		for i := range v {
			n, err := strconv.ParseInt(l[i+1], 10, 64)
			if err != nil {
				return "", err
			}
			v[i] = n
		}
		p := gcra.Params{MaxBurst: v[0], Count: v[1], Period: v[2], Quantity: v[3]}
		do := doThrottle
		if td.Cmd == "peek" {
			do = doPeek
		}
		r, err := do(e.st, l[0], p)
		if err != nil {
			fmt.Fprintf(&b, "error: %v\n", err)
			continue
		}
		if r.Write && r.Expiry == gcra.ExpireError { // stored, then replied as an error (§4)
			b.WriteString("error: Cell error: Store error: Error while setting key expire\n")
			continue
		}
		fmt.Fprintf(&b, "[%d, %d, %d, %d, %d]\n", b2i(r.Limited), r.Limit, r.Remaining, r.RetryAfter, r.ResetAfter)
	}
	return b.String(), nil
}

// limit: one CL.LIMIT call per input line (its arguments after the
// command name); the reply as the spec writes it.
func (e *ddEnv) limit(td *datadriven.TestData) (string, error) {
	var b strings.Builder
	for _, l := range strings.Split(td.Input, "\n") {
		argv := [][]byte{[]byte("CL.LIMIT")}
		for _, f := range strings.Fields(l) {
			argv = append(argv, []byte(f))
		}
		call, err := limit.ParseLimit(argv)
		if err != nil {
			fmt.Fprintf(&b, "error: %v\n", err)
			continue
		}
		r, err := doLimit(e.st, call)
		if err != nil {
			fmt.Fprintf(&b, "error: %v\n", err)
			continue
		}
		r5 := func(x limit.R5) string {
			return fmt.Sprintf("%d, %d, %d, %d, %d", b2i(x.Limited), x.Limit, x.Remaining, x.RetryAfter, x.ResetAfter)
		}
		parts := make([]string, len(call.Limits))
		for i := range parts {
			parts[i] = "[" + r5(r.Results[i].R5) + "]"
		}
		fmt.Fprintf(&b, "[%s, %d, [%s]]\n", r5(r.Decision.R5), r.Decision.Index, strings.Join(parts, ", "))
	}
	return b.String(), nil
}

// perKey runs f on every key of key=(a,b,...), one line each.
func (e *ddEnv) perKey(td *datadriven.TestData, f func(string) (string, error)) (string, error) {
	a, ok := td.Arg("key")
	if !ok {
		return "", fmt.Errorf("%s needs key=", td.Cmd)
	}
	var b strings.Builder
	for _, k := range a.Vals {
		line, err := f(k)
		if err != nil {
			return "", err
		}
		b.WriteString(line + "\n")
	}
	return b.String(), nil
}

// inspect: "key: missing" or the state's CL.INSPECT fields, instants as
// offsets from the epoch, then the PTTL.
func (e *ddEnv) inspect(key string) (string, error) {
	state, pttl, found, err := doInspect(e.st, key)
	if err != nil || !found {
		return key + ": missing", err
	}
	return fmt.Sprintf("%s: %s pttl=%d", key, e.state(state), pttl), nil
}

// state formats an encoded state as its CL.INSPECT fields.
func (e *ddEnv) state(b []byte) string {
	fs, err := limit.Inspect(b)
	if err != nil {
		return "undecodable: " + err.Error()
	}
	parts := make([]string, 0, len(fs))
	for _, f := range fs {
		var v string
		switch x := f.Value.(type) {
		case int64:
			switch {
			case f.Name == "tat_ns":
				v = e.rel(x)
			case strings.HasSuffix(f.Name, "start_ms") || strings.HasSuffix(f.Name, "end_ms"):
				v = e.relMs(x)
			default:
				v = strconv.FormatInt(x, 10)
			}
		case [][2]int64:
			es := make([]string, len(x))
			for i, en := range x {
				es[i] = fmt.Sprintf("%s:%d", e.relMs(en[0]), en[1])
			}
			v = "[" + strings.Join(es, " ") + "]"
		default:
			v = fmt.Sprint(x)
		}
		parts = append(parts, f.Name+"="+v)
	}
	return strings.Join(parts, " ")
}

// dump [slots=LO-HI,...] [save=NAME]: every live key of the slots, with
// its slot, state and expiry; save keeps them for "import from=NAME".
func (e *ddEnv) dump(td *datadriven.TestData) (string, error) {
	rs, err := ddRanges(e.arg(td, "slots", "0-16383"))
	if err != nil {
		return "", err
	}
	es, err := doDump(e.st, rs)
	if err != nil {
		return "", err
	}
	if name := e.arg(td, "save", ""); name != "" {
		e.saved[name] = es
	}
	var b strings.Builder
	for _, en := range es {
		exp := "none"
		if en.Expires != NoExpiry {
			exp = e.relMs(en.Expires)
		}
		fmt.Fprintf(&b, "%s slot=%d %s expires=%s\n", en.Key, cluster.KeySlot(en.Key), e.state(en.State), exp)
	}
	if len(es) == 0 {
		b.WriteString("empty\n")
	}
	return b.String(), nil
}

func (e *ddEnv) now() string { return "now=" + e.rel(e.clk.Now()) + "\n" }

// rel formats a Unix ns instant as an offset from the epoch.
func (e *ddEnv) rel(ns int64) string {
	d := time.Duration(ns - e.epoch)
	if d >= 0 {
		return "+" + d.String()
	}
	return d.String()
}

func (e *ddEnv) relMs(ms int64) string { return e.rel(ms * int64(time.Millisecond)) }

// ddDuration parses a Go duration, or an integer of milliseconds.
func ddDuration(s string) (int64, error) {
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		return n * int64(time.Millisecond), nil
	}
	d, err := time.ParseDuration(s)
	return int64(d), err
}

// ddRanges parses slot ranges "0-100,200-300" (a lone slot is a range).
func ddRanges(s string) ([][2]int, error) {
	var rs [][2]int
	for _, p := range strings.Split(s, ",") {
		lo, hi, ok := strings.Cut(p, "-")
		if !ok {
			hi = lo
		}
		a, err := strconv.Atoi(lo)
		if err != nil {
			return nil, err
		}
		b, err := strconv.Atoi(hi)
		if err != nil {
			return nil, err
		}
		rs = append(rs, [2]int{a, b})
	}
	return rs, nil
}
