package bench

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// ClockTicks is USER_HZ, the unit of utime/stime in /proc/<pid>/stat. It is
// 100 on every Linux architecture Go supports.
const ClockTicks = 100

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Proc is a server process started by the harness. Its stderr and stdout go
// to LogPath; lines are also offered to the optional gctrace collector.
type Proc struct {
	Name    string
	Addr    string // 127.0.0.1:port
	LogPath string
	cmd     *exec.Cmd
	done    chan struct{}
	waitErr error
	GC      *GCTrace // non-nil when started with GODEBUG=gctrace=1
}

// StartOptions describes a server process to start.
type StartOptions struct {
	Name    string
	Path    string
	Args    []string
	Dir     string   // working directory (also where the log goes)
	Env     []string // extra environment, appended to os.Environ()
	Addr    string   // address to wait for
	GCTrace bool     // parse "gc N @..." lines from its output
}

// Start starts a server and waits until it answers PING on Addr (at most
// 20 s). The process gets SIGKILL if the harness dies (Pdeathsig).
func Start(o StartOptions) (*Proc, error) {
	if err := CheckLoopback(o.Addr); err != nil {
		return nil, err
	}
	logPath := filepath.Join(o.Dir, o.Name+".log")
	lf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	p := &Proc{Name: o.Name, Addr: o.Addr, LogPath: logPath, done: make(chan struct{})}
	cmd := exec.Command(o.Path, o.Args...)
	cmd.Dir = o.Dir
	cmd.Env = append(os.Environ(), o.Env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	var out io.Writer = lf
	var pw *io.PipeWriter
	if o.GCTrace {
		p.GC = &GCTrace{}
		var pr *io.PipeReader
		pr, pw = io.Pipe()
		out = io.MultiWriter(lf, pw)
		go p.GC.consume(pr)
	}
	cmd.Stdout = out
	cmd.Stderr = out
	if err := cmd.Start(); err != nil {
		lf.Close()
		return nil, fmt.Errorf("start %s: %w", o.Name, err)
	}
	p.cmd = cmd
	go func() {
		p.waitErr = cmd.Wait()
		lf.Close()
		if pw != nil {
			pw.Close()
		}
		close(p.done)
	}()
	if err := p.waitReady(20 * time.Second); err != nil {
		p.Stop()
		return nil, fmt.Errorf("%s did not come up on %s: %w\n%s", o.Name, o.Addr, err, p.LogTail(20))
	}
	return p, nil
}

func (p *Proc) waitReady(limit time.Duration) error {
	deadline := time.Now().Add(limit)
	var last error
	for i := 0; time.Now().Before(deadline) && i < 1000; i++ {
		if !p.Alive() {
			return fmt.Errorf("process exited: %v", p.waitErr)
		}
		c, err := Dial(p.Addr, time.Second)
		if err == nil {
			c.Timeout = 2 * time.Second
			v, err2 := c.Do("PING")
			c.Close()
			if err2 == nil && v.Kind == '+' {
				return nil
			}
			last = fmt.Errorf("PING: %v %v", v, err2)
		} else {
			last = err
		}
		time.Sleep(50 * time.Millisecond)
	}
	return last
}

// Pid returns the process id.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Alive reports whether the process is still running.
func (p *Proc) Alive() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// Stop sends SIGTERM, waits up to 10 s, then SIGKILL.
func (p *Proc) Stop() {
	if p == nil || p.cmd == nil || !p.Alive() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// LogTail returns the last n lines of the process log.
func (p *Proc) LogTail(n int) string {
	b, _ := os.ReadFile(p.LogPath)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// CPUSeconds returns utime+stime of the process (all threads) in seconds.
func (p *Proc) CPUSeconds() (float64, error) { return ProcCPUSeconds(p.Pid()) }

// RSS returns VmRSS of the process in bytes.
func (p *Proc) RSS() (int64, error) { return ProcRSS(p.Pid()) }

// ProcCPUSeconds reads utime+stime from /proc/<pid>/stat.
func ProcCPUSeconds(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may contain spaces; fields after ')' are safe.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, errors.New("bench: malformed /proc stat")
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state); utime is field 14, stime field 15.
	if len(f) < 13 {
		return 0, errors.New("bench: short /proc stat")
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, errors.New("bench: bad /proc stat times")
	}
	return float64(ut+st) / ClockTicks, nil
}

// ProcRSS reads VmRSS from /proc/<pid>/status, in bytes.
func ProcRSS(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(rest)
			if len(f) >= 1 {
				kb, err := strconv.ParseInt(f[0], 10, 64)
				return kb * 1024, err
			}
		}
	}
	return 0, errors.New("bench: no VmRSS")
}

// GCTrace collects the stop-the-world pauses printed by GODEBUG=gctrace=1.
type GCTrace struct {
	mu     sync.Mutex
	events []GCEvent
}

// GCEvent is one collection: when the harness read its line and its two
// stop-the-world phases (sweep termination and mark termination), in ms.
type GCEvent struct {
	At       time.Time
	STW1     float64
	STW2     float64
	HeapLive float64 // MB live after the cycle
}

// "gc 7 @1.234s 5%: 0.021+3.1+0.035 ms clock, ... 12->13->6 MB, ..."
var gcLine = regexp.MustCompile(`^gc \d+ @[\d.]+s \d+%: ([\d.]+)\+([\d.]+)\+([\d.]+) ms clock.*?(\d+)->(\d+)->(\d+) MB`)

func (g *GCTrace) consume(r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		m := gcLine.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		e := GCEvent{At: time.Now()}
		e.STW1, _ = strconv.ParseFloat(m[1], 64)
		e.STW2, _ = strconv.ParseFloat(m[3], 64)
		e.HeapLive, _ = strconv.ParseFloat(m[6], 64)
		g.mu.Lock()
		g.events = append(g.events, e)
		g.mu.Unlock()
	}
	_, _ = io.Copy(io.Discard, r)
}

// GCSummary describes the collections seen in a time window.
type GCSummary struct {
	Cycles     int     `json:"cycles"`
	PauseP50MS float64 `json:"stw_pause_p50_ms"`
	PauseP99MS float64 `json:"stw_pause_p99_ms"`
	PauseMaxMS float64 `json:"stw_pause_max_ms"`
	PauseSumMS float64 `json:"stw_pause_total_ms"`
	HeapLiveMB float64 `json:"heap_live_mb_last"`
}

// Window summarizes the cycles whose lines arrived in [from, to]. Each cycle
// contributes its two STW pauses to the percentiles.
func (g *GCTrace) Window(from, to time.Time) GCSummary {
	if g == nil {
		return GCSummary{}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	var s GCSummary
	var pauses []float64
	for _, e := range g.events {
		if e.At.Before(from) || e.At.After(to) {
			continue
		}
		s.Cycles++
		pauses = append(pauses, e.STW1, e.STW2)
		s.PauseSumMS += e.STW1 + e.STW2
		s.HeapLiveMB = e.HeapLive
	}
	if len(pauses) == 0 {
		return s
	}
	sort.Float64s(pauses)
	s.PauseP50MS = Percentile(pauses, 50)
	s.PauseP99MS = Percentile(pauses, 99)
	s.PauseMaxMS = pauses[len(pauses)-1]
	return s
}

// Percentile returns the nearest-rank p-th percentile of sorted xs.
func Percentile(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(p/100*float64(len(sorted))+0.999999) - 1
	if rank < 0 {
		rank = 0
	}
	if rank >= len(sorted) {
		rank = len(sorted) - 1
	}
	return sorted[rank]
}

// MachineBusySeconds returns the CPU time all processes on the machine have
// used since boot (user+nice+system+irq+softirq+steal from /proc/stat), in
// seconds summed over cores. The harness uses the difference around a run,
// minus the server's and redis-benchmark's own CPU, to show how busy the rest
// of the machine was.
func MachineBusySeconds() (float64, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 8 || f[0] != "cpu" {
		return 0, errors.New("bench: malformed /proc/stat")
	}
	var busy int64
	for i, s := range f[1:] {
		if i == 3 || i == 4 || i >= 8 { // idle, iowait; guest time is already in user
			continue
		}
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, err
		}
		busy += v
	}
	return float64(busy) / ClockTicks, nil
}

// LoadAvg returns the first three fields of /proc/loadavg.
func LoadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}
