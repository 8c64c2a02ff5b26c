package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// BenchSpec is one redis-benchmark invocation against a server.
type BenchSpec struct {
	Binary   string   // redis-benchmark path
	Addr     string   // 127.0.0.1:port
	Clients  int      // -c
	Requests int      // -n
	Pipeline int      // -P
	Keyspace int      // -r; 0 leaves it out (every __rand_int__ stays literal)
	Threads  int      // --threads; 0 leaves it out
	RESP3    bool     // -3: every client says HELLO 3 first
	Command  []string // the command and its arguments
	Timeout  time.Duration
	// Pipeload, when set, is a program that runs the same load with
	// Pipeload (see PipeloadArg) instead of redis-benchmark (Binary and
	// Threads are then unused).
	Pipeload string `json:"-"`
}

// BenchResult is what one run measured. Latencies are in milliseconds as
// reported by redis-benchmark (per request; with -P the latency of a request
// is measured from the write of its pipeline batch).
type BenchResult struct {
	Requests   int     `json:"requests"`
	RPS        float64 `json:"rps"`
	AvgMS      float64 `json:"avg_ms"`
	P50MS      float64 `json:"p50_ms"`
	P95MS      float64 `json:"p95_ms"`
	P99MS      float64 `json:"p99_ms"`
	P999MS     float64 `json:"p999_ms"`
	MaxMS      float64 `json:"max_ms"`
	Elapsed    float64 `json:"elapsed_s"`
	ClientCPU  float64 `json:"client_cpu_s"`
	Percentile string  `json:"-"` // the raw "Latency by percentile distribution" block
}

// Args returns the redis-benchmark command line (without the binary).
func (s BenchSpec) Args() []string {
	host, port, _ := strings.Cut(s.Addr, ":")
	a := []string{"-h", host, "-p", port,
		"-c", strconv.Itoa(s.Clients), "-n", strconv.Itoa(s.Requests),
		"-P", strconv.Itoa(max(s.Pipeline, 1)), "--precision", "3"}
	if s.Keyspace > 0 {
		a = append(a, "-r", strconv.Itoa(s.Keyspace))
	}
	if s.Threads > 0 {
		a = append(a, "--threads", strconv.Itoa(s.Threads))
	}
	if s.RESP3 {
		a = append(a, "-3")
	}
	return append(a, s.Command...)
}

// RunBenchmark runs redis-benchmark once and parses its full (non-CSV)
// output, which in 7.x carries the whole percentile distribution (the CSV
// output stops at p99); with s.Pipeload set, it runs the same load with
// Pipeload instead.
func RunBenchmark(ctx context.Context, s BenchSpec) (BenchResult, string, error) {
	if err := CheckLoopback(s.Addr); err != nil {
		return BenchResult{}, "", err
	}
	if s.Pipeload != "" {
		return runPipeload(ctx, s)
	}
	if s.Timeout == 0 {
		s.Timeout = 2 * time.Minute
	}
	out, cpu, elapsed, err := runTool(ctx, "redis-benchmark", s.Timeout, s.Binary, s.Args()...)
	text := cleanProgress(out)
	if err != nil {
		return BenchResult{}, text, err
	}
	r, perr := ParseBenchmark(text)
	if perr != nil {
		return r, text, perr
	}
	r.Requests = s.Requests
	r.Elapsed = elapsed.Seconds()
	r.ClientCPU = cpu
	return r, text, nil
}

// runTool runs a load generator (bin args) to its end, killed if the
// harness dies or timeout passes, and returns its output, its CPU time
// (user + system) and how long it ran.
func runTool(ctx context.Context, name string, timeout time.Duration, bin string, args ...string) (stdout string, cpu float64, elapsed time.Duration, err error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	start := time.Now()
	err = cmd.Run()
	elapsed = time.Since(start)
	if ps := cmd.ProcessState; ps != nil {
		cpu = (ps.UserTime() + ps.SystemTime()).Seconds()
	}
	switch {
	case ctx.Err() != nil:
		err = fmt.Errorf("%s timed out after %s", name, timeout)
	case err != nil:
		err = fmt.Errorf("%s: %v: %s", name, err, strings.TrimSpace(errb.String()))
	}
	return out.String(), cpu, elapsed, err
}

// cleanProgress drops the \r-separated progress lines redis-benchmark prints.
func cleanProgress(s string) string {
	var b strings.Builder
	for _, line := range strings.Split(strings.ReplaceAll(s, "\r", "\n"), "\n") {
		t := strings.TrimSpace(line)
		if t == "" || strings.Contains(t, "rps=") {
			continue
		}
		b.WriteString(line)
		b.WriteByte('\n')
	}
	return b.String()
}

var (
	reThroughput = regexp.MustCompile(`throughput summary: ([\d.]+) requests per second`)
	rePctLine    = regexp.MustCompile(`^\s*([\d.]+)% <= ([\d.]+) milliseconds \(cumulative count (\d+)\)`)
	reCompleted  = regexp.MustCompile(`(\d+) requests completed in`)
)

// ParseBenchmark reads the summary and the percentile distribution of one
// redis-benchmark 7.x run.
func ParseBenchmark(text string) (BenchResult, error) {
	var r BenchResult
	m := reThroughput.FindStringSubmatch(text)
	if m == nil {
		return r, errors.New("redis-benchmark output has no throughput summary (is it 7.x?)")
	}
	r.RPS, _ = strconv.ParseFloat(m[1], 64)
	// latency summary: a header line "avg min p50 p95 p99 max" then numbers.
	lines := strings.Split(text, "\n")
	for i, l := range lines {
		f := strings.Fields(l)
		if len(f) == 6 && f[0] == "avg" && f[2] == "p50" && i+1 < len(lines) {
			v := strings.Fields(lines[i+1])
			if len(v) == 6 {
				nums := make([]float64, 6)
				for j := range v {
					nums[j], _ = strconv.ParseFloat(v[j], 64)
				}
				r.AvgMS, r.P50MS, r.P95MS, r.P99MS, r.MaxMS = nums[0], nums[2], nums[3], nums[4], nums[5]
			}
		}
	}
	// p99.9 from the percentile distribution: the first latency whose
	// cumulative count reaches 99.9% of all requests.
	total := 0
	if m := reCompleted.FindStringSubmatch(text); m != nil {
		total, _ = strconv.Atoi(m[1])
	}
	var block strings.Builder
	in := false
	r.P999MS = math.NaN()
	for _, l := range lines {
		if strings.HasPrefix(l, "Latency by percentile distribution") {
			in = true
			continue
		}
		if in && strings.HasPrefix(l, "Cumulative distribution") {
			break
		}
		if !in {
			continue
		}
		m := rePctLine.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		block.WriteString(l + "\n")
		lat, _ := strconv.ParseFloat(m[2], 64)
		cum, _ := strconv.Atoi(m[3])
		if total > 0 && math.IsNaN(r.P999MS) && float64(cum) >= 0.999*float64(total) {
			r.P999MS = lat
		}
	}
	r.Percentile = block.String()
	if math.IsNaN(r.P999MS) {
		r.P999MS = r.MaxMS
	}
	if r.P50MS == 0 && r.MaxMS == 0 {
		return r, errors.New("redis-benchmark output has no latency summary")
	}
	return r, nil
}
