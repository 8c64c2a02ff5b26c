package bench

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
)

// Machine describes where a run happened.
type Machine struct {
	NProc          int    `json:"nproc"`
	CPUModel       string `json:"cpu_model"`
	Kernel         string `json:"kernel"`
	MemTotal       string `json:"mem_total"`
	GoVersion      string `json:"go_version"`
	RedisServer    string `json:"redis_server"`
	RedisBenchmark string `json:"redis_benchmark"`
	GitCommit      string `json:"git_commit"`
	GitDirty       bool   `json:"git_dirty"`
	// Cellserver says which cellserver was measured when it was not the work
	// tree: "commit <hash> (--rev X)" or "binary <path>".
	Cellserver string `json:"cellserver,omitempty"`
	// Baseline is the second cellserver of --baseline-rev or --baseline-bin.
	Baseline string `json:"baseline,omitempty"`
}

// DescribeMachine gathers the machine facts; missing pieces are left empty.
func DescribeMachine(repo, redisServer, redisBenchmark string) Machine {
	m := Machine{NProc: runtime.NumCPU()}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPUModel = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = "Linux " + strings.TrimSpace(string(b))
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "MemTotal:"); ok {
				m.MemTotal = strings.TrimSpace(v)
			}
		}
	}
	m.GoVersion = firstLine(command(repo, "go", "version"))
	if m.GoVersion == "" {
		m.GoVersion = runtime.Version()
	}
	m.RedisServer = firstLine(command("", redisServer, "--version"))
	m.RedisBenchmark = firstLine(command("", redisBenchmark, "--version"))
	m.GitCommit = firstLine(command(repo, "git", "rev-parse", "--short", "HEAD"))
	m.GitDirty = strings.TrimSpace(command(repo, "git", "status", "--porcelain", "--untracked-files=no")) != ""
	return m
}

// String renders the machine block printed above the tables.
func (m Machine) String() string {
	cs := m.Cellserver
	if cs == "" {
		cs = "work tree at commit " + m.GitCommit
		if m.GitDirty {
			cs += " with uncommitted changes"
		}
	}
	s := fmt.Sprintf("- nproc: %d\n- CPU: %s\n- memory: %s\n- kernel: %s\n- %s\n- %s\n- %s\n- cellserver: %s\n",
		m.NProc, m.CPUModel, m.MemTotal, m.Kernel, m.GoVersion, m.RedisServer, m.RedisBenchmark, cs)
	if m.Baseline != "" {
		s += "- baseline cellserver: " + m.Baseline + "\n"
	}
	return s
}

func command(dir, name string, args ...string) string {
	if name == "" {
		return ""
	}
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		return ""
	}
	return string(out)
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	return s
}
