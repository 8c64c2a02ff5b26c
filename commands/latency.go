package commands

import (
	"fmt"
	"math/bits"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// histBuckets is how many latency buckets each command has: bucket k
// counts calls of at most 1024<<k ns (about 2^k µs), the last one every
// longer call too, as Redis's per-command histograms (1 µs to 1 s,
// doubling).
const histBuckets = 21

// cmdHist is one command's latency histogram. Every connection adds to the
// same counters: one atomic add per command run.
type cmdHist struct{ b [histBuckets]atomic.Int64 }

func (h *cmdHist) add(ns int64) { h.addN(ns, 1) }

// addN counts n calls of ns each.
func (h *cmdHist) addN(ns, n int64) {
	k := 0
	if ns > 1024 {
		k = min(bits.Len64(uint64(ns-1)>>10), histBuckets-1)
	}
	h.b[k].Add(n)
}

// latencyMonitor is Redis's latency monitor: per event ("command" for a
// slow command, "fast-command" for a slow command flagged fast), the
// samples of at least threshold ms, one per second (the largest), the
// latest latencyHistoryLen of them. Off while threshold is 0.
type latencyMonitor struct {
	threshold atomic.Int64 // ms
	mu        sync.Mutex
	events    map[string]*latencyEvent
}

// latencyHistoryLen is Redis's LATENCY_TS_LEN.
const latencyHistoryLen = 160

type latencySample struct{ unix, ms int64 }

type latencyEvent struct {
	samples []latencySample // oldest first
	max     int64
}

// record notes a command that took ns, if the monitor is on and it took
// at least the threshold.
func (m *latencyMonitor) record(fast bool, ns int64) {
	t := m.threshold.Load()
	ms := ns / 1e6
	if t <= 0 || ms < t {
		return
	}
	name := "command"
	if fast {
		name = "fast-command"
	}
	now := time.Now().Unix()
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.events == nil {
		m.events = map[string]*latencyEvent{}
	}
	ev := m.events[name]
	if ev == nil {
		ev = &latencyEvent{}
		m.events[name] = ev
	}
	ev.max = max(ev.max, ms)
	if n := len(ev.samples); n > 0 && ev.samples[n-1].unix == now {
		ev.samples[n-1].ms = max(ev.samples[n-1].ms, ms)
		return
	}
	if len(ev.samples) == latencyHistoryLen {
		ev.samples = append(ev.samples[:0], ev.samples[1:]...)
	}
	ev.samples = append(ev.samples, latencySample{now, ms})
}

// recordCommand records one run of cmd that took ns in its histogram, the
// latency monitor and (usec) the slow log.
func (s *Server) recordCommand(c *Client, cmd *Command, args [][]byte, ns int64) {
	if cmd.id < len(s.hists) { // a command added after New (tests) has none
		s.hists[cmd.id].add(ns)
	}
	if s.slowlog.slow(ns / 1e3) {
		s.slowlog.record(c, cmd, args, ns/1e3)
	}
	if s.latency.threshold.Load() > 0 {
		s.latency.record(cmd.Flags&FlagFast != 0, ns)
	}
}

// batchRecorder records the commands of one batch of store requests
// (Server.finish), which are each timed at the batch's mean: consecutive
// runs of one command take one histogram add, so a pipeline of N
// CL.THROTTLEs costs one atomic add, not N; the slow log and latency
// monitor are checked once for the batch.
type batchRecorder struct {
	s         *Server
	c         *Client
	ns        int64
	slow, lat bool
	cmd       *Command
	n         int64
}

func (s *Server) batch(c *Client, ns int64) batchRecorder {
	return batchRecorder{s: s, c: c, ns: ns, slow: s.slowlog.slow(ns / 1e3), lat: s.latency.threshold.Load() > 0}
}

// add records one run of cmd with args.
func (b *batchRecorder) add(cmd *Command, args [][]byte) {
	if cmd != b.cmd {
		b.flush()
		b.cmd = cmd
	}
	b.n++
	if b.slow {
		b.s.slowlog.record(b.c, cmd, args, b.ns/1e3)
	}
	if b.lat {
		b.s.latency.record(cmd.Flags&FlagFast != 0, b.ns)
	}
}

// flush adds the pending run to its command's histogram.
func (b *batchRecorder) flush() {
	if b.n > 0 && b.cmd.id < len(b.s.hists) {
		b.s.hists[b.cmd.id].addN(b.ns, b.n)
	}
	b.n = 0
}

var latencyTips = []string{"nondeterministic_output", "request_policy:all_nodes", "response_policy:special"}

func registerLatency(t Table) {
	t.add(&Command{Name: "latency", Arity: -2, Cats: CatSlow, Group: "server", Summary: "A container for latency diagnostics commands.", Since: "2.8.13",
		Subcommands: []*Command{
			{Name: "latency|latest", Arity: 2, Flags: FlagAdmin | FlagNoScript | FlagLoading | FlagStale, Cats: CatAdmin | CatSlow | CatDangerous, Run: latencyLatest, Tips: latencyTips,
				Summary: "Returns the latest latency samples for all events.", Since: "2.8.13"},
			{Name: "latency|history", Arity: 3, Flags: FlagAdmin | FlagNoScript | FlagLoading | FlagStale, Cats: CatAdmin | CatSlow | CatDangerous, Run: latencyHistory, Tips: latencyTips,
				Summary: "Returns timestamp-latency samples for an event.", Since: "2.8.13"},
			{Name: "latency|reset", Arity: -2, Flags: FlagAdmin | FlagNoScript | FlagLoading | FlagStale | AdminOnly, Cats: CatAdmin | CatSlow | CatDangerous, Run: latencyReset,
				Tips:    []string{"request_policy:all_nodes", "response_policy:all_succeeded"},
				Summary: "Resets the latency data for one or more events.", Since: "2.8.13"},
			{Name: "latency|doctor", Arity: 2, Flags: FlagAdmin | FlagNoScript | FlagLoading | FlagStale, Cats: CatAdmin | CatSlow | CatDangerous, Run: latencyDoctor, Tips: latencyTips,
				Summary: "Returns a human-readable latency analysis report.", Since: "2.8.13"},
			{Name: "latency|histogram", Arity: -2, Flags: FlagAdmin | FlagNoScript | FlagLoading | FlagStale, Cats: CatAdmin | CatSlow | CatDangerous, Run: latencyHistogram, Tips: latencyTips,
				Summary: "Returns the cumulative distribution of latencies of a subset or all commands.", Since: "7.0.0"},
			{Name: "latency|graph", Arity: 3, Flags: FlagAdmin | FlagNoScript | FlagLoading | FlagStale | AdminOnly, Cats: CatAdmin | CatSlow | CatDangerous, Run: latencyGraph, Tips: latencyTips,
				Summary: "Returns a latency graph for an event.", Since: "2.8.13"},
			{Name: "latency|help", Arity: 2, Flags: FlagLoading | FlagStale, Cats: CatSlow, Run: latencyHelp,
				Summary: "Returns helpful text about the different subcommands.", Since: "2.8.13"},
		}})
}

// LATENCY LATEST: per event, its name, the latest sample's time and
// latency, and the largest latency seen.
func latencyLatest(c *Client, w *Out, _ [][]byte) {
	m := &c.srv.latency
	m.mu.Lock()
	defer m.mu.Unlock()
	names := make([]string, 0, len(m.events))
	for n := range m.events {
		names = append(names, n)
	}
	sort.Strings(names)
	w.WriteArray(len(names))
	for _, n := range names {
		ev := m.events[n]
		last := ev.samples[len(ev.samples)-1]
		w.WriteArray(4)
		w.WriteBulkString(n)
		w.WriteInt(last.unix)
		w.WriteInt(last.ms)
		w.WriteInt(ev.max)
	}
}

// LATENCY HISTORY event
func latencyHistory(c *Client, w *Out, args [][]byte) {
	m := &c.srv.latency
	m.mu.Lock()
	defer m.mu.Unlock()
	ev := m.events[string(args[2])]
	if ev == nil {
		w.WriteArray(0)
		return
	}
	w.WriteArray(len(ev.samples))
	for _, s := range ev.samples {
		w.WriteArray(2)
		w.WriteInt(s.unix)
		w.WriteInt(s.ms)
	}
}

// LATENCY GRAPH event: Redis's ASCII sparkline of the event's samples.
func latencyGraph(c *Client, w *Out, args [][]byte) {
	m := &c.srv.latency
	m.mu.Lock()
	defer m.mu.Unlock()
	ev := m.events[string(args[2])]
	if ev == nil {
		w.WriteError("ERR No samples available for event '" + cstr(args[2]) + "'")
		return
	}
	w.WriteVerbatim(renderLatencyGraph(string(args[2]), ev, time.Now().Unix()))
}

// Redis's latency graph layout (latency.c, sparkline.c).
const (
	graphCols  = 80
	graphRows  = 4
	graphChars = "_o#" // Redis's fill charset
)

// renderLatencyGraph draws ev's samples as Redis's LATENCY GRAPH does at
// Unix time now: a header, 80 dashes, then per 80 samples four rows of
// bars and each sample's age written downwards.
func renderLatencyGraph(name string, ev *latencyEvent, now int64) string {
	lo, hi := ev.samples[0].ms, ev.samples[0].ms
	labels := make([]string, len(ev.samples))
	for i, x := range ev.samples {
		lo, hi = min(lo, x.ms), max(hi, x.ms)
		switch age := now - x.unix; {
		case age < 60:
			labels[i] = strconv.FormatInt(age, 10) + "s"
		case age < 3600:
			labels[i] = strconv.FormatInt(age/60, 10) + "m"
		case age < 86400:
			labels[i] = strconv.FormatInt(age/3600, 10) + "h"
		default:
			labels[i] = strconv.FormatInt(age/86400, 10) + "d"
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s - high %d ms, low %d ms (all time high %d ms)\n", name, hi, lo, ev.max)
	b.WriteString(strings.Repeat("-", graphCols) + "\n")
	relmax := float64(hi - lo)
	if relmax == 0 {
		relmax = 1
	}
	steps := len(graphChars) * graphRows
	for from := 0; from < len(ev.samples); from += graphCols {
		to := min(from+graphCols, len(ev.samples))
		if from != 0 {
			b.WriteByte('\n')
		}
		line := make([]byte, to-from)
		for row := 0; ; row++ {
			more := false
			for j := range line {
				line[j] = ' '
			}
			for j := from; j < to; j++ {
				if row < graphRows {
					more = true
					step := int(float64(int(float64(ev.samples[j].ms-lo)*float64(steps))) / relmax)
					step = min(max(step, 0), steps-1)
					switch k := step - (graphRows-row-1)*len(graphChars); {
					case k >= 0 && k < len(graphChars):
						line[j-from] = graphChars[k]
					case k >= len(graphChars):
						line[j-from] = '|'
					}
					continue
				}
				if row == graphRows { // the margin above the labels
					more = true
					break
				}
				if k := row - graphRows - 1; k < len(labels[j]) {
					more = true
					line[j-from] = labels[j][k]
				}
			}
			if !more {
				break
			}
			b.Write(line)
			b.WriteByte('\n')
		}
	}
	return b.String()
}

// LATENCY RESET [event ...]: how many events it dropped.
func latencyReset(c *Client, w *Out, args [][]byte) {
	m := &c.srv.latency
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	if len(args) == 2 {
		n = len(m.events)
		m.events = nil
	} else {
		for _, a := range args[2:] {
			if _, ok := m.events[string(a)]; ok {
				delete(m.events, string(a))
				n++
			}
		}
	}
	w.WriteInt(int64(n))
}

// LATENCY DOCTOR: Redis's report, with its per-event lines and its advice
// on slow commands (Redis's further advice on the kernel, fork and AOF has
// no counterpart here).
func latencyDoctor(c *Client, w *Out, _ [][]byte) {
	s := c.srv
	if s.latency.threshold.Load() <= 0 {
		w.WriteVerbatim("I'm sorry, Dave, I can't do that. Latency monitoring is disabled in this Redis instance. You may use \"CONFIG SET latency-monitor-threshold <milliseconds>.\" in order to enable it. If we weren't in a deep space mission I'd suggest to take a look at https://redis.io/topics/latency-monitor.\n")
		return
	}
	m := &s.latency
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.events) == 0 {
		w.WriteVerbatim("Dave, no latency spike was observed during the lifetime of this Redis instance, not in the slightest bit. I honestly think you ought to sit down calmly, take a stress pill, and think things over.\n")
		return
	}
	names := make([]string, 0, len(m.events))
	for n := range m.events {
		names = append(names, n)
	}
	sort.Strings(names)
	var b strings.Builder
	b.WriteString("Dave, I have observed latency spikes in this Redis instance. You don't mind talking about it, do you Dave?\n\n")
	now := time.Now().Unix()
	for i, n := range names {
		ev := m.events[n]
		var sum int64
		for _, x := range ev.samples {
			sum += x.ms
		}
		k := int64(len(ev.samples))
		avg := sum / k
		var dev int64
		for _, x := range ev.samples {
			dev += max(x.ms-avg, avg-x.ms)
		}
		period := max(now-ev.samples[0].unix, 1) // Redis's: at least a second
		fmt.Fprintf(&b, "%d. %s: %d latency spikes (average %dms, mean deviation %dms, period %.2f sec). Worst all time event %dms.\n",
			i+1, n, k, avg, dev/k, float64(period)/float64(k), ev.max)
	}
	b.WriteString("\nI have a few advices for you:\n\n")
	if s.slowlog.slowerThan.Load() < 0 {
		b.WriteString("- The system slow log is disabled: enable it with --slowlog-log-slower-than or CONFIG SET slowlog-log-slower-than, in order to see which commands are slow.\n")
	} else {
		b.WriteString("- Check your Slow Log to understand what are the commands you are running which are too slow to execute. Please check https://redis.io/commands/slowlog for more information.\n")
	}
	w.WriteVerbatim(b.String())
}

// LATENCY HISTOGRAM [command ...]: per command that ran, its calls and
// cumulative counts by bucket (only the buckets where the count grows),
// as Redis 7.
func latencyHistogram(c *Client, w *Out, args [][]byte) {
	s := c.srv
	var list []*Command
	add := func(cmd *Command) {
		for _, x := range append([]*Command{cmd}, cmd.Subcommands...) {
			if s.histCalls(x) > 0 {
				list = append(list, x)
			}
		}
	}
	if len(args) == 2 {
		for _, n := range s.commandNames() {
			add(s.table[n])
		}
	} else {
		seen := map[*Command]bool{}
		for _, a := range args[2:] {
			if cmd := s.lookupFull(a); cmd != nil && !seen[cmd] {
				seen[cmd] = true
				add(cmd)
			}
		}
	}
	w.WriteMap(len(list))
	for _, cmd := range list {
		h := &s.hists[cmd.id]
		var counts [histBuckets]int64
		var total int64
		for k := range counts {
			counts[k] = h.b[k].Load()
			total += counts[k]
		}
		w.WriteBulkString(cmd.Name)
		w.WriteMap(2)
		w.WriteBulkString("calls")
		w.WriteInt(total)
		w.WriteBulkString("histogram_usec")
		n := 0
		for _, v := range counts {
			if v > 0 {
				n++
			}
		}
		w.WriteMap(n)
		var cum int64
		for k, v := range counts {
			if v == 0 {
				continue
			}
			cum += v
			w.WriteInt(int64(1024<<k) / 1000)
			w.WriteInt(cum)
		}
	}
}

// histCalls is how many runs cmd's histogram counted.
func (s *Server) histCalls(cmd *Command) int64 {
	if cmd.id >= len(s.hists) {
		return 0
	}
	var n int64
	for k := range s.hists[cmd.id].b {
		n += s.hists[cmd.id].b[k].Load()
	}
	return n
}

// LATENCY HELP
func latencyHelp(_ *Client, w *Out, _ [][]byte) {
	writeHelp(w, []string{
		"LATENCY <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
		"DOCTOR",
		"    Return a human readable latency analysis report.",
		"GRAPH <event>",
		"    Return an ASCII latency graph for the <event> class.",
		"HISTORY <event>",
		"    Return time-latency samples for the <event> class.",
		"LATEST",
		"    Return the latest latency samples for all events.",
		"RESET [<event> ...]",
		"    Reset latency data of one or more <event> classes.",
		"    (default: reset all data for all event classes)",
		"HISTOGRAM [COMMAND ...]",
		"    Return a cumulative distribution of latencies in the format of a histogram for the specified command names.",
		"    If no commands are specified then all histograms are replied.",
		"HELP",
		"    Prints this help.",
	})
}

// initDiagnostics applies the slow log's and the latency monitor's
// settings from the config, defaults filled in.
func (s *Server) initDiagnostics() {
	s.slowlog.slowerThan.Store(DefaultSlowlogSlowerThan)
	if p := s.cfg.SlowlogLogSlowerThan; p != nil {
		s.slowlog.slowerThan.Store(*p)
	}
	s.slowlog.maxLen.Store(DefaultSlowlogMaxLen)
	if p := s.cfg.SlowlogMaxLen; p != nil {
		s.slowlog.maxLen.Store(max(*p, 0))
	}
	s.latency.threshold.Store(max(s.cfg.LatencyMonitorThreshold, 0))
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	s.startMem = int64(ms.HeapAlloc)
	s.memPeak.Store(s.startMem)
}

// writeLatencyStats writes INFO latencystats: per command that ran, its
// p50, p99 and p99.9 latencies in µs, from its histogram (each the upper
// bound of the bucket it falls in, so to a factor of two; Redis's finer
// histograms give finer figures).
func (s *Server) writeLatencyStats(b *strings.Builder) {
	for _, n := range s.commandNames() {
		cmd := s.table[n]
		for _, x := range append([]*Command{cmd}, cmd.Subcommands...) {
			if x.id >= len(s.hists) {
				continue
			}
			var counts [histBuckets]int64
			var total int64
			for k := range counts {
				counts[k] = s.hists[x.id].b[k].Load()
				total += counts[k]
			}
			if total == 0 {
				continue
			}
			pct := func(p float64) float64 {
				want := int64(p*float64(total)/100 + 0.999999)
				var cum int64
				for k, v := range counts {
					if cum += v; cum >= want {
						return float64(int64(1024)<<k) / 1000
					}
				}
				return float64(int64(1024)<<(histBuckets-1)) / 1000
			}
			fmt.Fprintf(b, "latency_percentiles_usec_%s:p50=%.3f,p99=%.3f,p99.9=%.3f\r\n", x.Name, pct(50), pct(99), pct(99.9))
		}
	}
}
