package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"
)

// PipeloadArg, as a program's first argument, makes it run PipeloadMain: the
// harness runs Pipeload as a process of its own (itself, re-executed), so
// that the load generator's CPU is measured apart from the harness's, as
// redis-benchmark's is.
const PipeloadArg = "pipeload"

// PipeloadMain runs Pipeload with the BenchSpec given as JSON in args[0] and
// prints the BenchResult as JSON.
func PipeloadMain(args []string, stdout, stderr io.Writer) int {
	var s BenchSpec
	if len(args) != 1 {
		fmt.Fprintln(stderr, "pipeload: want one argument, the JSON spec")
		return 2
	}
	if err := json.Unmarshal([]byte(args[0]), &s); err != nil {
		fmt.Fprintln(stderr, "pipeload:", err)
		return 2
	}
	r, err := Pipeload(s)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	js, _ := json.Marshal(r)
	fmt.Fprintf(stdout, "%s\n", js)
	return 0
}

// runPipeload runs s with Pipeload in the program s.Pipeload (see
// PipeloadArg) and adds that process's CPU time to the result.
func runPipeload(ctx context.Context, s BenchSpec) (BenchResult, string, error) {
	if s.Timeout == 0 {
		s.Timeout = 2 * time.Minute
	}
	js, err := json.Marshal(s)
	if err != nil {
		return BenchResult{}, "", err
	}
	// Pipeload gives up at s.Timeout itself; the margin is for its start.
	out, cpu, _, err := runTool(ctx, "pipeload", s.Timeout+10*time.Second, s.Pipeload, PipeloadArg, string(js))
	if err != nil {
		return BenchResult{}, out, err
	}
	var r BenchResult
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		return r, out, fmt.Errorf("pipeload's output: %w", err)
	}
	r.ClientCPU = cpu
	return r, out, nil
}
