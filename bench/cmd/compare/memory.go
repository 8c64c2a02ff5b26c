package main

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/cellserver/cellserver/bench"
)

// memRow is what memory mode measured for one system at one key count.
type memRow struct {
	System    string   `json:"system"`
	Kind      string   `json:"kind,omitempty"` // gcra, fw or swc; "" in older results: gcra
	Keys      int      `json:"keys"`
	KeyBytes  int      `json:"key_bytes"`
	Command   []string `json:"command"`
	DBSize    int64    `json:"dbsize"`
	RSSBefore int64    `json:"rss_before"`
	RSSLoaded int64    `json:"rss_after_load"`
	RSSRun    int64    `json:"rss_after_run"`
	RSSPerKey float64  `json:"rss_bytes_per_key"`
	// RSSRunPerKey is (RSS after the load run − RSS before) / keys: the
	// steady state once the collector has paced the heap under updates.
	RSSRunPerKey float64 `json:"rss_bytes_per_key_after_run"`
	// LiveHeapPerKey is cellserver's live heap after the last GC cycle
	// (gctrace, MB resolution) / keys; it includes the idle server's few MB.
	LiveHeapPerKey float64 `json:"go_live_heap_bytes_per_key,omitempty"`
	// used_memory of INFO memory: Go HeapAlloc for cellserver, the allocator's
	// total for Redis.
	HeapBefore int64   `json:"used_memory_before"`
	HeapLoaded int64   `json:"used_memory_after_load"`
	HeapPerKey float64 `json:"used_memory_bytes_per_key"`
	// cellserver only: used_memory_keytable.
	KeyTable       int64           `json:"keytable_bytes,omitempty"`
	KeyTablePerKey float64         `json:"keytable_bytes_per_key,omitempty"`
	Load           bench.LoadStats `json:"load"`
	LoadGC         bench.GCSummary `json:"gc_during_load"`
	Run            runResult       `json:"load_run"`
	Error          string          `json:"error,omitempty"`
}

type memoryResult struct {
	Kind       string        `json:"kind"`
	Started    time.Time     `json:"started"`
	Machine    bench.Machine `json:"machine"`
	Config     config        `json:"config"`
	Cellserver string        `json:"cellserver_command"`
	Rows       []*memRow     `json:"rows"`
	LoadStart  string        `json:"loadavg_start"`
	LoadEnd    string        `json:"loadavg_end"`
}

const memPrefix = "mem:" // + 12 digits = 16-byte keys

// memKinds are the key kinds of --mem-kinds: gcra is loaded with
// CL.THROTTLE (and is the only kind the Redis references have), fw and swc
// with CL.LIMIT <key> FW|SWC <limit> <window_s>.
var memKinds = map[string]string{"gcra": "", "fw": "FW", "swc": "SWC"}

func runMemory(ctx context.Context, e *env) (*memoryResult, string, error) {
	e.cfg.GCTrace = true // the GC pauses are part of what this mode reports
	res := &memoryResult{Kind: "memory", Started: time.Now(), Machine: e.machine, Config: e.cfg, Cellserver: e.commandLine(),
		LoadStart: bench.LoadAvg()}
	var counts []int
	for _, s := range strings.Split(e.cfg.Keys, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1000 || n > 100_000_000 {
			return nil, "", fmt.Errorf("--keys: %q is not a count in 1000..100000000", s)
		}
		counts = append(counts, n)
	}
	type job struct{ system, kind string }
	var jobs []job
	for _, k := range strings.Split(e.cfg.MemKinds, ",") {
		k = strings.TrimSpace(k)
		jobs = append(jobs, job{sysCell, k})
		if k == "gcra" && e.cfg.MemRedis {
			jobs = append(jobs, job{sysLua, k})
			if e.cfg.RedisCell != "" {
				jobs = append(jobs, job{sysRedisCell, k})
			}
		}
	}
	for _, n := range counts {
		for _, j := range jobs {
			if ctx.Err() != nil {
				res.LoadEnd = bench.LoadAvg()
				return res, memoryReport(res), ctx.Err()
			}
			row, err := memoryOne(ctx, e, j.system, j.kind, n)
			res.Rows = append(res.Rows, row)
			if err != nil {
				row.Error = err.Error()
				logf("   %s %s at %d keys FAILED: %v", j.system, j.kind, n, err)
			}
		}
	}
	res.LoadEnd = bench.LoadAvg()
	return res, memoryReport(res), nil
}

func memoryOne(ctx context.Context, e *env, name, kind string, n int) (*memRow, error) {
	params := strings.Fields(e.cfg.MemParams)
	row := &memRow{System: name, Kind: kind, Keys: n, KeyBytes: len(bench.KeyName(nil, memPrefix, 0))}
	logf("== memory: %s, %s keys: %d keys of %d bytes", name, kind, n, row.KeyBytes)
	var p *bench.Proc
	var err error
	var argv func(key string) []string
	switch name {
	case sysCell:
		p, err = e.startCellserver("cellserver-mem-" + kind)
		argv = func(key string) []string { return append([]string{"CL.THROTTLE", key}, params...) }
		if alg := memKinds[kind]; alg != "" {
			lp := strings.Fields(e.cfg.MemLimit)
			argv = func(key string) []string { return append([]string{"CL.LIMIT", key, alg}, lp...) }
		}
	case sysLua, sysRedisCell:
		module := ""
		if name == sysRedisCell {
			module = e.cfg.RedisCell
		}
		p, err = e.startRedis("redis-mem", module)
		if err != nil {
			break
		}
		argv = func(key string) []string { return append([]string{"CL.THROTTLE", key}, params...) }
		if name == sysLua {
			sha, err2 := bench.ScriptLoad(p.Addr, bench.ThrottleLua)
			if err2 != nil {
				p.Stop()
				return row, err2
			}
			argv = func(key string) []string { return append([]string{"EVALSHA", sha, "1", key}, params...) }
		}
	}
	if err != nil {
		return row, err
	}
	defer p.Stop()
	row.Command = argv(memPrefix + "__rand_int__")

	time.Sleep(time.Second)
	if memKinds[kind] != "" {
		alignWindow(ctx, strings.Fields(e.cfg.MemLimit)[1])
	}
	row.RSSBefore, _ = p.RSS()
	row.HeapBefore, _ = bench.InfoField(p.Addr, "memory", "used_memory")

	loadStart := time.Now()
	st, err := bench.Load(ctx, bench.LoadSpec{Addr: p.Addr, Prefix: memPrefix, From: 0, To: n,
		Command:  func(key []byte) [][]byte { return byteArgs(argv(string(key))) },
		Progress: func(k int) { logf("   ... %d keys", k) }})
	if err != nil {
		return row, err
	}
	row.Load = st
	row.LoadGC = p.GC.Window(loadStart, time.Now().Add(100*time.Millisecond))
	logf("   loaded %d keys in %.1fs (%.0f keys/s)", st.Keys, st.Seconds, st.Rate)

	time.Sleep(2 * time.Second) // let background work (flushes, frees) settle
	row.RSSLoaded, _ = p.RSS()
	row.HeapLoaded, _ = bench.InfoField(p.Addr, "memory", "used_memory")
	if name == sysCell {
		row.KeyTable, _ = bench.InfoField(p.Addr, "memory", "used_memory_keytable")
		row.KeyTablePerKey = float64(row.KeyTable) / float64(n)
	}
	if v, err := bench.One(p.Addr, "DBSIZE"); err == nil && v.Kind == ':' {
		row.DBSize = v.Int
	}
	row.RSSPerKey = float64(row.RSSLoaded-row.RSSBefore) / float64(n)
	row.HeapPerKey = float64(row.HeapLoaded-row.HeapBefore) / float64(n)
	logf("   RSS %s -> %s (%.1f B/key), used_memory %.1f B/key, dbsize %d",
		mb(row.RSSBefore), mb(row.RSSLoaded), row.RSSPerKey, row.HeapPerKey, row.DBSize)

	// A load run over the loaded keys, to see GC pauses against latency.
	s := system{name: name, proc: p}
	spec := bench.BenchSpec{Binary: e.cfg.RedisBenchmark, Addr: p.Addr, Clients: e.cfg.Clients, Pipeline: 16,
		Keyspace: n, Threads: e.cfg.Threads, Command: row.Command, Requests: 100_000, Pipeload: e.cfg.pipeload}
	warm := measure(ctx, spec, s, 0)
	if warm.Error != "" {
		return row, fmt.Errorf("warm-up: %s", warm.Error)
	}
	target := e.cfg.LoadSeconds * e.cfg.DurationScale
	spec.Requests = min(max(int(math.Round(warm.RPS*target/1000))*1000, 20_000), 200_000_000)
	spec.Timeout = time.Duration(max(120, 10*target)) * time.Second
	row.Run = measure(ctx, spec, s, 1)
	if row.Run.Error != "" {
		return row, fmt.Errorf("load run: %s", row.Run.Error)
	}
	row.RSSRun = row.Run.RSS
	row.RSSRunPerKey = float64(row.RSSRun-row.RSSBefore) / float64(n)
	if p.GC != nil {
		if g := p.GC.Window(time.Time{}, time.Now().Add(time.Hour)); g.Cycles > 0 {
			row.LiveHeapPerKey = g.HeapLiveMB * (1 << 20) / float64(n)
		}
	}
	gc := ""
	if row.Run.GC != nil {
		gc = fmt.Sprintf(", gc %d cycles, STW p99 %.3f ms max %.3f ms", row.Run.GC.Cycles, row.Run.GC.PauseP99MS, row.Run.GC.PauseMaxMS)
	}
	logf("   load run: %.0f rps, p99 %.3f ms, p99.9 %.3f ms%s", row.Run.RPS, row.Run.P99MS, row.Run.P999MS, gc)
	return row, nil
}

// alignWindow waits for the start of the next window when less than 9/10 of
// the current one is left: FW windows are aligned to the Unix epoch (FW n 60
// is per UTC minute) and their keys expire when it ends, so a load that
// straddled an edge would lose the keys loaded before it. Windows longer
// than 10 minutes are not waited for.
func alignWindow(ctx context.Context, windowS string) {
	w, err := strconv.Atoi(windowS)
	if err != nil || w < 1 || w > 600 {
		return
	}
	win := time.Duration(w) * time.Second
	now := time.Now()
	left := now.Truncate(win).Add(win).Sub(now)
	if left >= win*9/10 {
		return
	}
	logf("   waiting %.0fs for the next %ds window, so no key expires before it is measured", left.Seconds(), w)
	select {
	case <-ctx.Done():
	case <-time.After(left + 200*time.Millisecond):
	}
}

func memoryReport(r *memoryResult) string {
	var b strings.Builder
	fmt.Fprintf(&b, "\n# cellserver memory per key (%s)\n\n", r.Started.Format("2006-01-02 15:04 MST"))
	fmt.Fprintf(&b, "Command: `%s`\n\n", invocation())
	b.WriteString("Machine:\n\n")
	b.WriteString(r.Machine.String())
	fmt.Fprintf(&b, "- load average at start: %s, at end: %s\n", r.LoadStart, r.LoadEnd)
	fmt.Fprintf(&b, "\nServers: `%s`; `redis-server --save '' --appendonly no` + GCRA Lua. Each key count on fresh servers.\n", r.Cellserver)
	fmt.Fprintf(&b, "Keys: `%s000000000000`.. (16 bytes), one call each, pipelined 256 deep over 4 connections: %s.\n\n",
		memPrefix, strings.Join(memCommands(r), "; "))

	b.WriteString("| system | kind | keys | dbsize | RSS before | RSS after load | RSS B/key | RSS B/key after run | used_memory B/key | Go live heap B/key | key table B/key | load keys/s | GC during load: cycles, STW p99 / max ms |\n")
	b.WriteString("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, x := range r.Rows {
		if x.Error != "" && x.Load.Keys == 0 {
			fmt.Fprintf(&b, "| %s | %s | %d | failed: %s | | | | | | | | | |\n", x.System, x.kind(), x.Keys, firstLine(x.Error))
			continue
		}
		kt, gc, live, after := "-", "-", "-", "-"
		if x.RSSRun > 0 {
			after = fmt.Sprintf("%.1f", x.RSSRunPerKey)
		}
		if x.System == sysCell {
			kt = fmt.Sprintf("%.1f", x.KeyTablePerKey)
			live = fmt.Sprintf("%.1f", x.LiveHeapPerKey)
			gc = fmt.Sprintf("%d, %.3f / %.3f", x.LoadGC.Cycles, x.LoadGC.PauseP99MS, x.LoadGC.PauseMaxMS)
		}
		fmt.Fprintf(&b, "| %s | %s | %d | %d | %s | %s | %.1f | %s | %.1f | %s | %s | %s | %s |\n", x.System, x.kind(), x.Keys, x.DBSize,
			mb(x.RSSBefore), mb(x.RSSLoaded), x.RSSPerKey, after, x.HeapPerKey, live, kt, kilo(x.Load.Rate), gc)
	}
	fmt.Fprintf(&b, "\nLoad run over the loaded keys (`%s -c 50 -P 16 -r <keys>`, same command):\n\n", r.Config.Generator)
	b.WriteString("| system | kind | keys | rps | p50 ms | p99 ms | p99.9 ms | max ms | server CPU µs/op | GC cycles | GC STW p99 ms | GC STW max ms | RSS after run | others' CPU |\n")
	b.WriteString("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, x := range r.Rows {
		if x.Run.RPS == 0 {
			continue
		}
		cyc, p99, mx := "-", "-", "-"
		if x.Run.GC != nil {
			cyc = strconv.Itoa(x.Run.GC.Cycles)
			p99 = fmt.Sprintf("%.3f", x.Run.GC.PauseP99MS)
			mx = fmt.Sprintf("%.3f", x.Run.GC.PauseMaxMS)
		}
		fmt.Fprintf(&b, "| %s | %s | %d | %s | %.3f | %.3f | %.3f | %.3f | %.2f | %s | %s | %s | %s | %.2f |\n", x.System, x.kind(), x.Keys,
			kilo(x.Run.RPS), x.Run.P50MS, x.Run.P99MS, x.Run.P999MS, x.Run.MaxMS, x.Run.CPUPerOp, cyc, p99, mx, mb(x.RSSRun), x.Run.Others)
	}
	b.WriteString("\nTargets at 10M keys: issue #4, at most 64 B of RSS per key and GC pauses that do not show in p99 " +
		"(compare the STW p99/max with the run's p99); issue #16, at most 58 B per GCRA key, FW and SWC keys reported. " +
		"A dbsize below keys means keys expired before the measurement.\n")
	return b.String()
}

func (x *memRow) kind() string {
	if x.Kind == "" {
		return "gcra"
	}
	return x.Kind
}

// memCommands lists each kind's loading command once.
func memCommands(r *memoryResult) []string {
	var out []string
	seen := map[string]bool{}
	for _, x := range r.Rows {
		k := x.System + "/" + x.kind()
		if !seen[k] && len(x.Command) > 0 {
			seen[k] = true
			out = append(out, fmt.Sprintf("%s %s `%s`", x.System, x.kind(), strings.Join(x.Command, " ")))
		}
	}
	return out
}

func mb(n int64) string { return fmt.Sprintf("%.1f MB", float64(n)/(1<<20)) }

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}
