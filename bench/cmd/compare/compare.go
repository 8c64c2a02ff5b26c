package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/cellserver/cellserver/bench"
	"github.com/cellserver/cellserver/cluster"
)

// Names of the systems in the tables.
const (
	sysCell      = "cellserver"
	sysLua       = "redis+lua"
	sysRedisCell = "redis-cell"
	sysPing      = "redis-server PING"
	sysCellPing  = "cellserver PING"
	sysCell100k  = "cellserver, 100k live keys"
	// The CL.LIMIT scenarios' reference, on the same server in the same rounds.
	sysCellThrottle = "cellserver CL.THROTTLE"
	sysCellLimit    = "cellserver CL.LIMIT"
	sysCellRESP3    = "cellserver CL.THROTTLE, RESP3"
	// The ceiling scenarios' canned-reply server (bench.Canned).
	sysCannedPing     = "canned PING"
	sysCannedThrottle = "canned CL.THROTTLE"
	sysCannedFW       = "canned CL.LIMIT FW"
	sysCannedSWC      = "canned CL.LIMIT SWC"
	sysCannedTwo      = "canned CL.LIMIT two FW"
)

// system is one server answering one kind of command.
type system struct {
	name string
	proc *bench.Proc
	argv func(key string, params []string) []string // nil: PING
	// check says whether the reply to one call is what the benchmark
	// expects; nil: CL.THROTTLE's five integers.
	check func(v bench.Value) error
	// keyspace and preload, when set, replace the scenario's (flat-p16
	// runs one keyspace per system).
	keyspace, preload int
	resp3             bool // redis-benchmark -3
}

// scenario is one row group of the report.
type scenario struct {
	Name     string   `json:"name"`
	Title    string   `json:"title"`
	Pipeline int      `json:"pipeline"`
	Keyspace int      `json:"keyspace"` // redis-benchmark -r; 0: one key
	Key      string   `json:"key"`
	Params   []string `json:"params"`
	Preload  int      `json:"preload"` // keys [0, Preload) of Prefix loaded first
	Prefix   string   `json:"-"`
	Ping     bool     `json:"ping"`
	// Flat: two cellservers, one holding 100k live keys and one holding
	// the big live keyspace, alternate in the same rounds, so the cost per
	// op of the two sizes is measured side by side, not minutes apart.
	Flat bool `json:"flat"`
	// Limit is the argv of a CL.LIMIT scenario (cellserver only: Redis has
	// no such command). Its first system is CL.THROTTLE Key Params on the
	// same server, the reference its ratios are taken to round by round.
	// Its limits are never reached, as --params' are not at these rates:
	// every call of both charges. (A reachable FW limit is refused for
	// part of each window, aligned to the epoch, and a refused call writes
	// nothing: the ratio then depended on where in the minute a round
	// fell.)
	Limit []string `json:"limit,omitempty"`
	// Tags are hash tags that must land on different shards of the server
	// (a CL.LIMIT across shards); the scenario is skipped if they do not.
	Tags []string `json:"tags,omitempty"`
	// RESP3: CL.THROTTLE on one cellserver from RESP2 and from RESP3
	// clients (redis-benchmark -3), alternating round by round.
	RESP3 bool `json:"resp3,omitempty"`
	// Ceiling: the same load against a server that answers each command
	// with a reply recorded from cellserver and does nothing else
	// (bench.Canned), alternating with the references: what redis-benchmark
	// and the wire alone allow here, reply shape by reply shape.
	Ceiling bool `json:"ceiling,omitempty"`
}

// The CL.LIMIT calls of the limit scenarios (and of ceiling-p16).
var (
	limitFW  = []string{"CL.LIMIT", "fw:__rand_int__", "FW", "1000", "60"}
	limitSWC = []string{"CL.LIMIT", "swc:__rand_int__", "SWC", "1000", "60"}
	limitTwo = []string{"CL.LIMIT", "{a}k:__rand_int__", "FW", "1000", "60", "AND", "{b}k:__rand_int__", "FW", "100000", "3600"}
)

func scenarios(c config) []scenario {
	p := strings.Fields(c.Params)
	lp := strings.Fields(c.LiveParams)
	big := c.BigKeys
	bigName := fmt.Sprintf("live%s-p16", short(big))
	return []scenario{
		{Name: "ping-p16", Title: "PING, the wire's ceiling: 50 clients, pipeline 16", Pipeline: 16, Ping: true},
		{Name: "ping-p1", Title: "PING without pipelining, the ceiling at depth 1: 50 clients", Pipeline: 1, Ping: true},
		{Name: "rand100k-p1", Title: "100k random keys, no pipelining", Pipeline: 1, Keyspace: 100_000, Key: "key:__rand_int__", Params: p},
		{Name: "rand100k-p16", Title: "100k random keys, pipeline 16", Pipeline: 16, Keyspace: 100_000, Key: "key:__rand_int__", Params: p},
		{Name: "hot-p16", Title: "one hot key shared by all clients, pipeline 16", Pipeline: 16, Key: "hot:key", Params: p},
		{Name: "rand10m-p16", Title: "10M random keys (mostly fresh), pipeline 16", Pipeline: 16, Keyspace: 10_000_000, Key: "key:__rand_int__", Params: p},
		{Name: "live100k-p16", Title: "100k live keys (preloaded, long period), pipeline 16", Pipeline: 16, Keyspace: 100_000,
			Key: "live:__rand_int__", Params: lp, Preload: 100_000, Prefix: "live:"},
		{Name: bigName, Title: fmt.Sprintf("%s live keys (preloaded, long period), pipeline 16", strings.ToUpper(short(big))), Pipeline: 16, Keyspace: big,
			Key: "live:__rand_int__", Params: lp, Preload: big, Prefix: "live:"},
		{Name: "limit-fw-p16", Title: "CL.LIMIT with one FW limit against CL.THROTTLE, 100k random keys, pipeline 16", Pipeline: 16, Keyspace: 100_000,
			Key: "key:__rand_int__", Params: p, Limit: limitFW},
		{Name: "limit-swc-p16", Title: "CL.LIMIT with one SWC limit against CL.THROTTLE, 100k random keys, pipeline 16", Pipeline: 16, Keyspace: 100_000,
			Key: "key:__rand_int__", Params: p, Limit: limitSWC},
		{Name: "limit2-p16", Title: "CL.LIMIT with two FW limits on different shards against CL.THROTTLE, 100k random keys, pipeline 16", Pipeline: 16, Keyspace: 100_000,
			Key: "key:__rand_int__", Params: p, Tags: []string{"a", "b"}, Limit: limitTwo},
		{Name: "ceiling-p1", Title: "the load generator's ceiling at depth 1: CL.THROTTLE against a canned-reply server, 100k random keys, no pipelining", Pipeline: 1, Keyspace: 100_000,
			Key: "key:__rand_int__", Params: p, Ceiling: true},
		{Name: "ceiling-p16", Title: "the load generator's ceiling of the CL.LIMIT / CL.THROTTLE ratios: a canned-reply server, 100k random keys, pipeline 16", Pipeline: 16, Keyspace: 100_000,
			Key: "key:__rand_int__", Params: p, Ceiling: true},
		{Name: "resp3-p1", Title: "CL.THROTTLE from RESP2 and RESP3 clients, 100k random keys, no pipelining", Pipeline: 1, Keyspace: 100_000,
			Key: "key:__rand_int__", Params: p, RESP3: true},
		{Name: "resp3-p16", Title: "CL.THROTTLE from RESP2 and RESP3 clients, 100k random keys, pipeline 16", Pipeline: 16, Keyspace: 100_000,
			Key: "key:__rand_int__", Params: p, RESP3: true},
		{Name: "flat-p16", Title: fmt.Sprintf("cost per op, 100k against %s live keys: two cellservers alternating, pipeline 16", strings.ToUpper(short(big))),
			Pipeline: 16, Keyspace: big, Key: "live:__rand_int__", Params: lp, Preload: big, Prefix: "live:", Flat: true},
	}
}

// fixed is an argv for a system that sends argv whatever the scenario's
// key and parameters.
func fixed(argv []string) func(string, []string) []string {
	return func(string, []string) []string { return argv }
}

func short(n int) string {
	switch {
	case n%1_000_000 == 0:
		return fmt.Sprintf("%dm", n/1_000_000)
	case n%1000 == 0:
		return fmt.Sprintf("%dk", n/1000)
	}
	return fmt.Sprint(n)
}

// runResult is one measured (or warm-up) redis-benchmark run.
type runResult struct {
	Round     int     `json:"round"` // 0: warm-up / calibration
	Requests  int     `json:"requests"`
	RPS       float64 `json:"rps"`
	AvgMS     float64 `json:"avg_ms"`
	P50MS     float64 `json:"p50_ms"`
	P99MS     float64 `json:"p99_ms"`
	P999MS    float64 `json:"p999_ms"`
	MaxMS     float64 `json:"max_ms"`
	ElapsedS  float64 `json:"elapsed_s"`
	ServerCPU float64 `json:"server_cpu_s"`
	CPUPerOp  float64 `json:"server_cpu_us_per_op"`
	BenchCPU  float64 `json:"bench_cpu_us_per_op"`
	RSS       int64   `json:"server_rss_bytes_after"`
	// Others is the CPU, in cores, that everything except the server and
	// redis-benchmark used during the run: noise from the rest of the machine.
	Others float64          `json:"others_cpu_cores"`
	GC     *bench.GCSummary `json:"gc,omitempty"`
	Error  string           `json:"error,omitempty"`
	Raw    string           `json:"latency_distribution,omitempty"`
}

// summary is the median over the measured rounds of one system (each
// metric's own median), plus the range of rps and the GC totals.
type summary struct {
	OK       bool    `json:"ok"`
	RPS      float64 `json:"rps"`
	RPSMin   float64 `json:"rps_min"`
	RPSMax   float64 `json:"rps_max"`
	P50      float64 `json:"p50_ms"`
	P99      float64 `json:"p99_ms"`
	P999     float64 `json:"p999_ms"`
	CPUPerOp float64 `json:"server_cpu_us_per_op"`
	BenchCPU float64 `json:"bench_cpu_us_per_op"`
	Others   float64 `json:"others_cpu_cores_max"`
	GCCycles int     `json:"gc_cycles"`
	GCMaxMS  float64 `json:"gc_max_stw_ms"`
}

type systemResult struct {
	System  string           `json:"system"`
	Command []string         `json:"command"`
	Runs    []runResult      `json:"runs"`
	Load    *bench.LoadStats `json:"preload,omitempty"`
	Median  summary          `json:"median"`
	// Skipped says why the system did not run (a command it does not know).
	Skipped string `json:"skipped,omitempty"`
}

type scenarioResult struct {
	Scenario scenario        `json:"scenario"`
	Systems  []*systemResult `json:"systems"`
	Notes    []string        `json:"notes,omitempty"`
}

type compareResult struct {
	Kind       string            `json:"kind"`
	Started    time.Time         `json:"started"`
	Machine    bench.Machine     `json:"machine"`
	Config     config            `json:"config"`
	Cellserver string            `json:"cellserver_command"`
	LuaSHA     string            `json:"lua_sha"`
	LoadStart  string            `json:"loadavg_start"`
	LoadEnd    string            `json:"loadavg_end"`
	Scenarios  []*scenarioResult `json:"scenarios"`
	// Baseline is the system name of --baseline-rev's cellserver, "" without.
	Baseline string `json:"baseline,omitempty"`
	// Memory is --with-memory's result.
	Memory *memoryResult `json:"memory,omitempty"`
}

func runCompare(ctx context.Context, e *env) (*compareResult, string, error) {
	cfg := e.cfg
	res := &compareResult{Kind: "compare", Started: time.Now(), Machine: e.machine, Config: cfg, Cellserver: e.commandLine(),
		LoadStart: bench.LoadAvg(), Baseline: e.baseName}

	want := map[string]bool{}
	for _, s := range strings.Split(cfg.Scenarios, ",") {
		if s = strings.TrimSpace(s); s != "" {
			want[s] = true
		}
	}
	var list []scenario
	for _, s := range scenarios(cfg) {
		if len(want) == 0 || want[s.Name] {
			list = append(list, s)
		}
	}
	if len(list) == 0 {
		return nil, "", fmt.Errorf("--scenarios %q matches none of: %s", cfg.Scenarios, scenarioNames(cfg))
	}

	logf("starting servers")
	cs, err := e.startCellserver("cellserver")
	if err != nil {
		return nil, "", err
	}
	defer cs.Stop()
	rd, err := e.startRedis("redis-lua", "")
	if err != nil {
		return nil, "", err
	}
	defer rd.Stop()
	sha, err := bench.ScriptLoad(rd.Addr, bench.ThrottleLua)
	if err != nil {
		return nil, "", err
	}
	res.LuaSHA = sha
	var rc *bench.Proc
	if cfg.RedisCell != "" {
		if rc, err = e.startRedis("redis-cell", cfg.RedisCell); err != nil {
			return nil, "", err
		}
		defer rc.Stop()
	}
	throttle := func(key string, p []string) []string { return append([]string{"CL.THROTTLE", key}, p...) }
	lua := func(key string, p []string) []string { return append([]string{"EVALSHA", sha, "1", key}, p...) }
	limiters := []system{{name: sysCell, proc: cs, argv: throttle}}
	var base *bench.Proc
	if e.baseBin != "" {
		if base, err = e.startBinary(e.baseBin, "cellserver-baseline"); err != nil {
			return nil, "", err
		}
		defer base.Stop()
		logf("baseline: %s %s (pid %d)", e.baseName, base.Addr, base.Pid())
		limiters = append(limiters, system{name: e.baseName, proc: base, argv: throttle})
	}
	limiters = append(limiters, system{name: sysLua, proc: rd, argv: lua})
	if rc != nil {
		limiters = append(limiters, system{name: sysRedisCell, proc: rc, argv: throttle})
	}
	pings := []system{{name: sysPing, proc: rd}, {name: sysCellPing, proc: cs}}
	loaded := map[string]int{} // server address/prefix -> keys loaded
	var cs2 *bench.Proc        // flat-p16's 100k-key cellserver
	var canned *bench.Proc     // the ceiling scenarios' canned-reply server
	var cannedShown []string

	logf("servers: cellserver %s (pid %d), redis+lua %s (pid %d)", cs.Addr, cs.Pid(), rd.Addr, rd.Pid())
	for _, sc := range list {
		if ctx.Err() != nil {
			return res, finish(res), ctx.Err()
		}
		systems := limiters
		if sc.Ping {
			systems = pings
		}
		if sc.Limit != nil {
			limit := fixed(sc.Limit)
			systems = []system{
				{name: sysCellThrottle, proc: cs, argv: throttle},
				{name: sysCellLimit, proc: cs, argv: limit, check: checkLimitReply},
			}
			if base != nil {
				systems = append(systems, system{name: e.baseName + " CL.LIMIT", proc: base, argv: limit, check: checkLimitReply})
			}
		}
		if sc.RESP3 {
			systems = []system{
				{name: sysCellThrottle, proc: cs, argv: throttle},
				{name: sysCellRESP3, proc: cs, argv: throttle, resp3: true},
			}
		}
		if sc.Flat {
			if cs2 == nil {
				logf("starting a second cellserver for 100k live keys")
				if cs2, err = e.startCellserver("cellserver-100k"); err != nil {
					return res, finish(res), fmt.Errorf("scenario %s: %w", sc.Name, err)
				}
				defer cs2.Stop()
			}
			systems = []system{
				{name: sysCell100k, proc: cs2, argv: throttle, keyspace: 100_000, preload: 100_000},
				{name: sysCell + ", " + strings.ToUpper(short(sc.Keyspace)) + " live keys", proc: cs, argv: throttle},
			}
		}
		if sc.Ceiling {
			if canned == nil {
				logf("starting the canned-reply server (replies recorded from cellserver)")
				if canned, cannedShown, err = e.startCanned(cs.Addr, [][]string{throttle(sc.Key, sc.Params), limitFW, limitSWC, limitTwo}); err != nil {
					return res, finish(res), fmt.Errorf("scenario %s: %w", sc.Name, err)
				}
				defer canned.Stop()
			}
			if sc.Pipeline == 1 {
				systems = []system{
					{name: sysPing, proc: rd},
					{name: sysCannedPing, proc: canned},
					{name: sysCannedThrottle, proc: canned, argv: throttle},
					{name: sysCell, proc: cs, argv: throttle},
				}
			} else {
				systems = []system{
					{name: sysCannedThrottle, proc: canned, argv: throttle},
					{name: sysCannedFW, proc: canned, argv: fixed(limitFW), check: checkLimitReply},
					{name: sysCannedSWC, proc: canned, argv: fixed(limitSWC), check: checkLimitReply},
					{name: sysCannedTwo, proc: canned, argv: fixed(limitTwo), check: checkLimitReply},
				}
			}
		}
		sr := &scenarioResult{Scenario: sc}
		if sc.Ceiling {
			sr.Notes = append(sr.Notes, "The canned server answers every call the same, whatever its arguments: "+strings.Join(cannedShown, "; "))
		}
		res.Scenarios = append(res.Scenarios, sr)
		if err := runScenario(ctx, e, sc, systems, loaded, sr); err != nil {
			return res, finish(res), fmt.Errorf("scenario %s: %w", sc.Name, err)
		}
		fmt.Fprint(stderr, scenarioTable(res, sr))
	}
	return res, finish(res), nil
}

// finish stamps the end of the run and renders the report.
func finish(r *compareResult) string {
	r.LoadEnd = bench.LoadAvg()
	return report(r)
}

func scenarioNames(c config) string {
	var n []string
	for _, s := range scenarios(c) {
		n = append(n, s.Name)
	}
	return strings.Join(n, ", ")
}

func runScenario(ctx context.Context, e *env, sc scenario, systems []system, loaded map[string]int, sr *scenarioResult) error {
	cfg := e.cfg
	logf("== %s: %s", sc.Name, sc.Title)
	results := make([]*systemResult, len(systems))
	specs := make([]bench.BenchSpec, len(systems))
	for i, s := range systems {
		argv := []string{"PING"}
		if s.argv != nil {
			argv = s.argv(sc.Key, sc.Params)
		}
		results[i] = &systemResult{System: s.name, Command: argv}
		sr.Systems = append(sr.Systems, results[i])
		keyspace, preload := sc.Keyspace, sc.Preload
		if s.keyspace > 0 {
			keyspace, preload = s.keyspace, s.preload
		}
		specs[i] = bench.BenchSpec{Binary: cfg.RedisBenchmark, Addr: s.proc.Addr, Clients: cfg.Clients,
			Pipeline: sc.Pipeline, Keyspace: keyspace, Threads: cfg.Threads, Command: argv, RESP3: s.resp3, Pipeload: cfg.pipeload}

		// Preload the live keyspace, continuing where an earlier scenario stopped.
		if preload > 0 && s.argv != nil {
			id := s.proc.Addr + "/" + sc.Prefix
			if from := loaded[id]; from < preload {
				logf("   preloading %s keys %d..%d into %s", sc.Prefix, from, preload, s.name)
				params := sc.Params
				st, err := bench.Load(ctx, bench.LoadSpec{Addr: s.proc.Addr, Prefix: sc.Prefix, From: from, To: preload,
					Command:  func(key []byte) [][]byte { return byteArgs(s.argv(string(key), params)) },
					Progress: func(n int) { logf("   ... %d keys", n) }})
				if err != nil {
					return fmt.Errorf("preload %s: %w", s.name, err)
				}
				loaded[id] = preload
				results[i].Load = &st
				logf("   loaded %d keys in %.1fs (%.0f keys/s)", st.Keys, st.Seconds, st.Rate)
			}
		}
		// The command must work before it is benchmarked; a system that
		// does not know it (an older revision and CL.LIMIT) sits this one out.
		note, why := shardCheck(s, sc)
		if note != "" {
			sr.Notes = append(sr.Notes, note)
		}
		if why != "" {
			results[i].Skipped = why
			logf("   %-18s skipped: %s", s.name, why)
			continue
		}
		if err := checkCommand(s, argv); err != nil {
			if e, ok := unknownCommand(err); ok {
				results[i].Skipped = e
				logf("   %-18s skipped: %v", s.name, err)
				continue
			}
			return err
		}
	}

	// Warm-up, which also calibrates -n to the target duration.
	target := cfg.Duration.Seconds() * cfg.DurationScale
	for i, s := range systems {
		if results[i].Skipped != "" {
			continue
		}
		n := cfg.Requests
		warm := 20_000
		if sc.Pipeline > 1 {
			warm = 100_000
		}
		if n > 0 {
			warm = max(n/10, 1000)
		}
		spec := specs[i]
		spec.Requests = warm
		r := measure(ctx, spec, s, 0)
		results[i].Runs = append(results[i].Runs, r)
		if r.Error != "" {
			return fmt.Errorf("%s warm-up: %s", s.name, r.Error)
		}
		if n == 0 {
			n = int(math.Round(r.RPS*target/1000)) * 1000
			n = min(max(n, 20_000), 200_000_000)
		}
		specs[i].Requests = n
		specs[i].Timeout = time.Duration(max(120, 10*target)) * time.Second
		logf("   %-18s warm-up %8.0f rps -> -n %d", s.name, r.RPS, n)
	}
	rounds := cfg.Rounds
	if sc.Flat {
		rounds = max(rounds, cfg.FlatRounds)
	}
	for round := 1; round <= rounds; round++ {
		for i, s := range systems {
			if results[i].Skipped != "" {
				continue
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			r := measure(ctx, specs[i], s, round)
			results[i].Runs = append(results[i].Runs, r)
			if r.Error != "" {
				logf("   %-18s round %d FAILED: %s", s.name, round, r.Error)
				continue
			}
			gc := ""
			if r.GC != nil {
				gc = fmt.Sprintf("  gc %d (max STW %.2f ms)", r.GC.Cycles, r.GC.PauseMaxMS)
			}
			logf("   %-18s round %d: %9.0f rps  p50 %.3f  p99 %.3f  p99.9 %.3f ms  cpu %.2f us/op%s",
				s.name, round, r.RPS, r.P50MS, r.P99MS, r.P999MS, r.CPUPerOp, gc)
		}
	}
	for _, r := range results {
		r.Median = summarize(r.Runs)
	}
	return nil
}

// checkCommand sends the benchmark command once (with __rand_int__ as zeros)
// and insists on the reply shape the benchmark expects.
func checkCommand(s system, argv []string) error {
	a := make([]string, len(argv))
	for i, x := range argv {
		a[i] = strings.ReplaceAll(x, "__rand_int__", "000000000000")
	}
	v, err := bench.One(s.proc.Addr, a...)
	if err != nil {
		return fmt.Errorf("%s: %w", s.name, err)
	}
	if s.argv == nil {
		if v.Kind != '+' {
			return fmt.Errorf("%s: PING answered %s", s.name, v)
		}
		return nil
	}
	if v.Kind == '-' {
		return fmt.Errorf("%s: %s answered %w", s.name, strings.Join(a, " "), errorReply(v.Str))
	}
	check := s.check
	if check == nil {
		check = checkThrottleReply
	}
	if err := check(v); err != nil {
		return fmt.Errorf("%s: %s answered %s, want %v", s.name, strings.Join(a, " "), v, err)
	}
	return nil
}

// errorReply is a server's error reply.
type errorReply string

func (e errorReply) Error() string { return "(error) " + string(e) }

// unknownCommand says whether err carries Redis's unknown-command reply,
// and returns that reply up to its list of arguments.
func unknownCommand(err error) (string, bool) {
	var e errorReply
	if !errors.As(err, &e) || !strings.HasPrefix(string(e), "ERR unknown command") {
		return "", false
	}
	s, _, _ := strings.Cut(string(e), ", with args")
	return s, true
}

func checkThrottleReply(v bench.Value) error {
	if ints, err := v.Ints(); err != nil || len(ints) != 5 {
		return errors.New("5 integers")
	}
	return nil
}

// checkLimitReply wants CL.LIMIT's [limited, limit, remaining, retry_after,
// reset_after, index, [R5 per limit]].
func checkLimitReply(v bench.Value) error {
	want := errors.New("6 integers and an array of the limits' replies")
	if v.Kind != '*' || len(v.Array) != 7 || v.Array[6].Kind != '*' {
		return want
	}
	for _, x := range v.Array[:6] {
		if x.Kind != ':' {
			return want
		}
	}
	return nil
}

// shardCheck checks that the hash tags of scenario sc land on different
// shards of the CL.LIMIT system s (the server's shard count from INFO, and
// its rule: shards own equal contiguous ranges of slots). It returns where
// they land, and why s cannot run sc, or "".
func shardCheck(s system, sc scenario) (note, why string) {
	if len(sc.Tags) < 2 || s.check == nil {
		return "", ""
	}
	n, err := bench.InfoField(s.proc.Addr, "server", "shards")
	if err != nil || n < 1 {
		return "", fmt.Sprintf("no shard count in INFO server: %v", err)
	}
	seen := map[int]string{}
	var where []string
	for _, t := range sc.Tags {
		slot := cluster.KeySlot([]byte("{" + t + "}"))
		sh := slot * int(n) / cluster.SlotCount
		where = append(where, fmt.Sprintf("{%s} slot %d shard %d", t, slot, sh))
		if o, ok := seen[sh]; ok {
			why = fmt.Sprintf("hash tags {%s} and {%s} share shard %d of %d: pick others", o, t, sh, n)
		}
		seen[sh] = t
	}
	return fmt.Sprintf("%s: %s of %d shards", s.name, strings.Join(where, ", "), n), why
}

// measure runs redis-benchmark once and reads the server's CPU time and GC
// pauses around it.
func measure(ctx context.Context, spec bench.BenchSpec, s system, round int) runResult {
	out := runResult{Round: round, Requests: spec.Requests}
	if !s.proc.Alive() {
		out.Error = s.name + " is not running:\n" + s.proc.LogTail(20)
		return out
	}
	cpu0, err := s.proc.CPUSeconds()
	if err != nil {
		out.Error = err.Error()
		return out
	}
	busy0, _ := bench.MachineBusySeconds()
	start := time.Now()
	br, _, err := bench.RunBenchmark(ctx, spec)
	end := time.Now()
	busy1, _ := bench.MachineBusySeconds()
	cpu1, err2 := s.proc.CPUSeconds()
	if err == nil && err2 != nil {
		err = fmt.Errorf("%s died during the run: %v\n%s", s.name, err2, s.proc.LogTail(20))
	}
	if err != nil {
		out.Error = err.Error()
		return out
	}
	out.RPS, out.AvgMS, out.P50MS, out.P99MS, out.P999MS, out.MaxMS = br.RPS, br.AvgMS, br.P50MS, br.P99MS, br.P999MS, br.MaxMS
	out.ElapsedS = br.Elapsed
	out.ServerCPU = cpu1 - cpu0
	out.CPUPerOp = out.ServerCPU / float64(spec.Requests) * 1e6
	out.BenchCPU = br.ClientCPU / float64(spec.Requests) * 1e6
	out.RSS, _ = s.proc.RSS()
	out.Others = math.Max(0, (busy1-busy0)-out.ServerCPU-br.ClientCPU) / end.Sub(start).Seconds()
	out.Raw = br.Percentile
	if s.proc.GC != nil {
		// gctrace lines arrive through a pipe: give the last one a moment.
		time.Sleep(50 * time.Millisecond)
		g := s.proc.GC.Window(start, end.Add(50*time.Millisecond))
		out.GC = &g
	}
	return out
}

func summarize(runs []runResult) summary {
	var rps, p50, p99, p999, cpu, bcpu []float64
	var s summary
	for _, r := range runs {
		if r.Round == 0 || r.Error != "" {
			continue
		}
		rps = append(rps, r.RPS)
		p50 = append(p50, r.P50MS)
		p99 = append(p99, r.P99MS)
		p999 = append(p999, r.P999MS)
		cpu = append(cpu, r.CPUPerOp)
		bcpu = append(bcpu, r.BenchCPU)
		s.Others = math.Max(s.Others, r.Others)
		if r.GC != nil {
			s.GCCycles += r.GC.Cycles
			s.GCMaxMS = math.Max(s.GCMaxMS, r.GC.PauseMaxMS)
		}
	}
	if len(rps) == 0 {
		return s
	}
	s.OK = true
	s.RPS, s.P50, s.P99, s.P999, s.CPUPerOp, s.BenchCPU = median(rps), median(p50), median(p99), median(p999), median(cpu), median(bcpu)
	sort.Float64s(rps)
	s.RPSMin, s.RPSMax = rps[0], rps[len(rps)-1]
	return s
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

var errNoResult = errors.New("no result")

// find returns the summary of one system in one scenario.
func (r *compareResult) find(scenario, system string) (summary, error) {
	for _, sc := range r.Scenarios {
		if sc.Scenario.Name != scenario {
			continue
		}
		for _, s := range sc.Systems {
			if s.System == system && s.Median.OK {
				return s.Median, nil
			}
		}
	}
	return summary{}, errNoResult
}

// byteArgs converts an argv to the byte slices bench.Load sends.
func byteArgs(a []string) [][]byte {
	out := make([][]byte, len(a))
	for i := range a {
		out[i] = []byte(a[i])
	}
	return out
}
