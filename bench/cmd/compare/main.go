// Command compare benchmarks cellserver side by side with Redis running a
// GCRA Lua script (and, optionally, Redis with the redis-cell module), driving
// each with redis-benchmark (or, with --generator pipeload, bench.Pipeload) in
// turn, and prints markdown tables.
//
//	go run ./bench/cmd/compare                      # the full comparison
//	go run ./bench/cmd/compare --rounds 2 --quick   # shorter
//	go run ./bench/cmd/compare --memory --keys 1000000,10000000
//
// See bench/README.md for what each scenario and column means. It installs
// nothing: redis-server and redis-benchmark must be in PATH (Debian package
// redis-server). Every server it starts listens on 127.0.0.1 only and every
// byte of load goes to 127.0.0.1.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/cellserver/cellserver/bench"
)

// The load generators of --generator.
const (
	genRedisBenchmark = "redis-benchmark"
	genPipeload       = "pipeload"
)

// config is everything the flags set.
type config struct {
	Rounds         int           `json:"rounds"`
	FlatRounds     int           `json:"flat_rounds"`
	Quick          bool          `json:"quick"`
	Requests       int           `json:"requests"`
	Duration       time.Duration `json:"-"`
	DurationS      float64       `json:"duration_s"`
	DurationScale  float64       `json:"duration_scale"`
	Clients        int           `json:"clients"`
	Threads        int           `json:"bench_threads"`
	Generator      string        `json:"generator"`
	pipeload       string        // this program, when Generator is pipeload
	ServerArgs     string        `json:"server_args"`
	RedisCell      string        `json:"redis_cell_module"`
	CellserverBin  string        `json:"cellserver_bin"`
	Rev            string        `json:"rev"`
	BaselineRev    string        `json:"baseline_rev,omitempty"`
	BaselineBin    string        `json:"baseline_bin,omitempty"`
	BaselineArgs   string        `json:"baseline_args,omitempty"`
	Params         string        `json:"params"`
	LiveParams     string        `json:"live_params"`
	BigKeys        int           `json:"big_keys"`
	Scenarios      string        `json:"scenarios"`
	Out            string        `json:"-"`
	RedisServer    string        `json:"-"`
	RedisBenchmark string        `json:"-"`
	GCTrace        bool          `json:"gctrace"`
	KeepTmp        bool          `json:"-"`

	Memory      bool    `json:"memory"`
	Keys        string  `json:"keys"`
	MemParams   string  `json:"mem_params"`
	MemRedis    bool    `json:"mem_redis"`
	LoadSeconds float64 `json:"load_run_s"`
	MemKinds    string  `json:"mem_kinds"`
	MemLimit    string  `json:"mem_limit_params"`
	WithMemory  bool    `json:"with_memory"`
}

func parseFlags(args []string, stderr io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("compare", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&c.Rounds, "rounds", 3, "measured rounds per scenario; systems alternate A B A B ...")
	fs.IntVar(&c.FlatRounds, "flat-rounds", 5, "measured rounds of flat-p16 at least (its verdict is a ratio of two noisy runs)")
	fs.BoolVar(&c.Quick, "quick", false, "shrink the big live keyspace from 10M to 1M keys (see --big-keys)")
	fs.IntVar(&c.Requests, "requests", 0, "redis-benchmark -n for every measured run; 0: calibrate each to --duration")
	fs.DurationVar(&c.Duration, "duration", 5*time.Second, "target length of one measured run when calibrating -n")
	fs.Float64Var(&c.DurationScale, "duration-scale", 1, "multiply every run's length (0.5: half as long)")
	fs.IntVar(&c.Clients, "clients", 50, "redis-benchmark -c")
	fs.IntVar(&c.Threads, "bench-threads", 0, "redis-benchmark --threads (0: single-threaded, its default)")
	fs.StringVar(&c.Generator, "generator", genRedisBenchmark, "load generator: redis-benchmark, or pipeload (bench.Pipeload: the same load, one thread, replies counted, not decoded)")
	fs.StringVar(&c.ServerArgs, "server-args", "", "extra cellserver flags, e.g. \"--fsync always\" or \"--in-memory\"")
	fs.StringVar(&c.RedisCell, "redis-cell-module", "", "`path` of a built redis-cell module (libredis_cell.so); adds Redis+redis-cell")
	fs.StringVar(&c.CellserverBin, "cellserver-bin", "", "use this cellserver binary instead of building ./cmd/cellserver")
	fs.StringVar(&c.Rev, "rev", "", "build cellserver from this git revision (a clean git archive snapshot, e.g. HEAD) instead of the work tree")
	fs.StringVar(&c.BaselineRev, "baseline-rev", "", "also build cellserver at this git revision and run it as a second system beside the first in the CL.THROTTLE scenarios (A B A B)")
	fs.StringVar(&c.BaselineArgs, "baseline-args", "", "extra flags for the baseline cellserver only, after --server-args (with --baseline-rev HEAD: one binary in two configurations, e.g. \"--threads 1\")")
	fs.StringVar(&c.BaselineBin, "baseline-bin", "", "the same with a built binary instead of a revision")
	fs.StringVar(&c.Params, "params", "100 10 1", "max_burst count period of the random-key and hot-key scenarios")
	fs.StringVar(&c.LiveParams, "live-params", "1000 1 3600", "max_burst count period of the preloaded live-keyspace scenarios (keys must not expire)")
	fs.IntVar(&c.BigKeys, "big-keys", 0, "keys of the big live keyspace (default 10000000, or 1000000 with --quick)")
	fs.StringVar(&c.Scenarios, "scenarios", "", "comma-separated scenario names to run (default: all; see README)")
	fs.StringVar(&c.Out, "out", "", "directory for the JSON and markdown results (default <repo>/bench/out)")
	fs.StringVar(&c.RedisServer, "redis-server", "redis-server", "redis-server binary")
	fs.StringVar(&c.RedisBenchmark, "redis-benchmark", "redis-benchmark", "redis-benchmark binary")
	fs.BoolVar(&c.GCTrace, "gctrace", true, "run cellserver with GODEBUG=gctrace=1 and report its GC pauses per run")
	fs.BoolVar(&c.KeepTmp, "keep-tmp", false, "keep the temporary directory (binaries, logs, data dirs)")
	fs.BoolVar(&c.Memory, "memory", false, "memory mode: load N distinct keys and report RSS, heap and GC pauses")
	fs.StringVar(&c.Keys, "keys", "1000000", "memory mode: comma-separated key counts, each on fresh servers")
	fs.StringVar(&c.MemParams, "mem-params", "100 1 86400", "memory mode: max_burst count period (long, so nothing expires)")
	fs.BoolVar(&c.MemRedis, "mem-redis", true, "memory mode: also measure redis-server + Lua (and redis-cell if given)")
	fs.Float64Var(&c.LoadSeconds, "load-seconds", 10, "memory mode: length of the redis-benchmark run over the loaded keys")
	fs.StringVar(&c.MemKinds, "mem-kinds", "gcra,fw,swc", "memory mode: key kinds to load, each on a fresh cellserver: gcra (CL.THROTTLE), fw, swc (CL.LIMIT)")
	fs.StringVar(&c.MemLimit, "mem-limit-params", "100 86400", "memory mode: limit window_s of the fw and swc keys (a day by default: loading 10M keys takes longer than a minute, and a key's size does not depend on its window)")
	fs.BoolVar(&c.WithMemory, "with-memory", false, "after the scenarios, run memory mode too (--keys, --mem-kinds) and report both in one file")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if c.RedisCell != "" {
		if _, err := os.Stat(c.RedisCell); err != nil {
			return c, fmt.Errorf("--redis-cell-module: %w", err)
		}
	}
	if c.Rev != "" && c.CellserverBin != "" {
		return c, fmt.Errorf("--rev and --cellserver-bin exclude each other")
	}
	if c.BaselineRev != "" && c.BaselineBin != "" {
		return c, fmt.Errorf("--baseline-rev and --baseline-bin exclude each other")
	}
	for _, k := range strings.Split(c.MemKinds, ",") {
		if _, ok := memKinds[strings.TrimSpace(k)]; !ok {
			return c, fmt.Errorf("--mem-kinds: unknown kind %q (want gcra, fw, swc)", k)
		}
	}
	if len(strings.Fields(c.MemLimit)) != 2 {
		return c, fmt.Errorf("--mem-limit-params %q: want \"limit window_s\"", c.MemLimit)
	}
	switch c.Generator {
	case genRedisBenchmark:
	case genPipeload:
		if c.Threads != 0 {
			return c, fmt.Errorf("--bench-threads is redis-benchmark's: pipeload has one thread")
		}
		self, err := os.Executable()
		if err != nil {
			return c, fmt.Errorf("--generator pipeload: %w", err)
		}
		c.pipeload = self
	default:
		return c, fmt.Errorf("--generator %q: want %s or %s", c.Generator, genRedisBenchmark, genPipeload)
	}
	if c.Rounds < 1 || c.Rounds > 100 {
		return c, fmt.Errorf("--rounds must be 1..100")
	}
	if c.FlatRounds < 0 || c.FlatRounds > 100 {
		return c, fmt.Errorf("--flat-rounds must be 0..100")
	}
	if c.Clients < 1 || c.Clients > 1000 {
		return c, fmt.Errorf("--clients must be 1..1000")
	}
	if c.DurationScale <= 0 || c.Duration <= 0 {
		return c, fmt.Errorf("--duration and --duration-scale must be positive")
	}
	if c.BigKeys == 0 {
		c.BigKeys = 10_000_000
		if c.Quick {
			c.BigKeys = 1_000_000
		}
	}
	if c.BigKeys < 1000 || c.BigKeys > 100_000_000 {
		return c, fmt.Errorf("--big-keys must be 1000..100000000")
	}
	for _, p := range []string{c.Params, c.LiveParams, c.MemParams} {
		if len(strings.Fields(p)) != 3 {
			return c, fmt.Errorf("parameters %q: want \"max_burst count period\"", p)
		}
	}
	c.DurationS = c.Duration.Seconds()
	return c, nil
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == cannedArg {
		os.Exit(cannedMain(os.Args[2:]))
	}
	if len(os.Args) > 1 && os.Args[1] == bench.PipeloadArg {
		os.Exit(bench.PipeloadMain(os.Args[2:], os.Stdout, os.Stderr))
	}
	os.Exit(run())
}

func run() int {
	cfg, err := parseFlags(os.Args[1:], os.Stderr)
	if err == flag.ErrHelp {
		return 0
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "compare:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	rs, rb, err := bench.LookTools(cfg.RedisServer, cfg.RedisBenchmark)
	if err != nil {
		fmt.Fprintln(os.Stderr, "compare:", err)
		return 1
	}
	cfg.RedisServer, cfg.RedisBenchmark = rs, rb
	repo, err := bench.FindRepo(".")
	if err != nil {
		fmt.Fprintln(os.Stderr, "compare:", err)
		return 1
	}
	if cfg.Out == "" {
		cfg.Out = filepath.Join(repo, "bench", "out")
	}
	if err := os.MkdirAll(cfg.Out, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, "compare:", err)
		return 1
	}
	tmp, err := os.MkdirTemp("", "cellserver-bench-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "compare:", err)
		return 1
	}
	if cfg.KeepTmp {
		logf("keeping %s", tmp)
	} else {
		defer os.RemoveAll(tmp)
	}

	machine := bench.DescribeMachine(repo, rs, rb)
	bin := cfg.CellserverBin
	switch {
	case bin != "":
		machine.Cellserver = "binary " + bin
	case cfg.Rev != "":
		logf("building ./cmd/cellserver at %s (CGO_ENABLED=0)", cfg.Rev)
		var commit string
		if bin, commit, err = bench.BuildCellserverRev(repo, cfg.Rev, tmp); err != nil {
			fmt.Fprintln(os.Stderr, "compare:", err)
			return 1
		}
		machine.Cellserver = fmt.Sprintf("commit %s (--rev %s)", commit, cfg.Rev)
	default:
		logf("building ./cmd/cellserver (CGO_ENABLED=0)")
		if bin, err = bench.BuildCellserver(repo, tmp); err != nil {
			fmt.Fprintln(os.Stderr, "compare:", err)
			return 1
		}
	}
	baseBin, baseName := cfg.BaselineBin, ""
	switch {
	case baseBin != "":
		machine.Baseline, baseName = "binary "+baseBin, sysCell+"@"+filepath.Base(baseBin)
	case cfg.BaselineRev != "":
		logf("building the baseline ./cmd/cellserver at %s (CGO_ENABLED=0)", cfg.BaselineRev)
		var commit string
		if baseBin, commit, err = bench.BuildCellserverRev(repo, cfg.BaselineRev, filepath.Join(tmp, "baseline")); err != nil {
			fmt.Fprintln(os.Stderr, "compare:", err)
			return 1
		}
		machine.Baseline = fmt.Sprintf("commit %s (--baseline-rev %s)", commit, cfg.BaselineRev)
		baseName = sysCell + "@" + commit[:7]
	}
	serverArgs, err := bench.SplitArgs(cfg.ServerArgs)
	if err != nil {
		fmt.Fprintln(os.Stderr, "compare: --server-args:", err)
		return 2
	}
	baseArgs, err := bench.SplitArgs(cfg.BaselineArgs)
	if err != nil {
		fmt.Fprintln(os.Stderr, "compare: --baseline-args:", err)
		return 2
	}
	if len(baseArgs) > 0 && baseName != "" {
		baseName += " " + strings.Join(baseArgs, " ")
		machine.Baseline += ", with " + strings.Join(baseArgs, " ")
	}
	env := &env{cfg: cfg, bin: bin, baseBin: baseBin, baseName: baseName, serverArgs: serverArgs, baseArgs: baseArgs, tmp: tmp, machine: machine}

	stamp := time.Now().Format("20060102-150405")
	var report string
	var result any
	if cfg.Memory {
		res, rep, err := runMemory(ctx, env)
		if err != nil {
			fmt.Fprintln(os.Stderr, "compare:", err)
			return 1
		}
		result, report, stamp = res, rep, "memory-"+stamp
	} else {
		res, rep, err := runCompare(ctx, env)
		if err != nil {
			fmt.Fprintln(os.Stderr, "compare:", err)
			if res == nil {
				return 1
			}
			// Partial results are still worth writing.
		}
		if cfg.WithMemory && ctx.Err() == nil {
			mres, _, merr := runMemory(ctx, env)
			if merr != nil {
				fmt.Fprintln(os.Stderr, "compare: memory:", merr)
			}
			res.Memory = mres
			rep = finish(res)
		}
		result, report, stamp = res, rep, "compare-"+stamp
	}
	fmt.Print(report)
	js, _ := json.MarshalIndent(result, "", "  ")
	jsonPath := filepath.Join(cfg.Out, stamp+".json")
	mdPath := filepath.Join(cfg.Out, stamp+".md")
	if err := os.WriteFile(jsonPath, append(js, '\n'), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "compare:", err)
		return 1
	}
	if err := os.WriteFile(mdPath, []byte(report), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "compare:", err)
		return 1
	}
	fmt.Printf("\nRaw results: %s\nReport: %s\n", jsonPath, mdPath)
	if ctx.Err() != nil {
		return 130
	}
	return 0
}

// env is what every mode shares.
type env struct {
	cfg        config
	bin        string
	baseBin    string // --baseline-rev or --baseline-bin; "" without one
	baseName   string // its system name, cellserver@<commit>
	serverArgs []string
	baseArgs   []string // the baseline's own, after serverArgs
	tmp        string
	machine    bench.Machine
	seq        int
}

// dir returns a fresh directory under the temporary directory.
func (e *env) dir(name string) string {
	e.seq++
	return filepath.Join(e.tmp, strconv.Itoa(e.seq)+"-"+name)
}

func (e *env) startCellserver(name string) (*bench.Proc, error) {
	return e.startBinary(e.bin, name)
}

func (e *env) startBinary(bin, name string) (*bench.Proc, error) {
	args := e.serverArgs
	if name == "cellserver-baseline" {
		args = append(append([]string(nil), args...), e.baseArgs...)
	}
	return bench.StartCellserver(bench.CellserverOptions{
		Binary: bin, Dir: e.dir(name), Args: args, GCTrace: e.cfg.GCTrace, Name: name,
	})
}

func (e *env) startRedis(name, module string) (*bench.Proc, error) {
	return bench.StartRedis(bench.RedisOptions{Binary: e.cfg.RedisServer, Dir: e.dir(name), Name: name, Module: module})
}

// commandLine is the cellserver command line the run used, for the report.
func (e *env) commandLine() string {
	s := "cellserver --addr 127.0.0.1:<port>"
	if len(e.serverArgs) > 0 {
		s += " " + strings.Join(e.serverArgs, " ")
	}
	if e.cfg.GCTrace {
		s = "GODEBUG=gctrace=1 " + s
	}
	return s
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "[%s] %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}
