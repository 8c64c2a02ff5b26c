package main

import (
	"fmt"
	"io"
	"math"
	"os"
	"strings"
)

var stderr io.Writer = os.Stderr

// invocation is the command line as typed, for the report.
func invocation() string {
	s := "go run ./bench/cmd/compare"
	for _, a := range os.Args[1:] {
		if strings.ContainsAny(a, " \t'\"") {
			a = "'" + a + "'"
		}
		s += " " + a
	}
	return s
}

func report(r *compareResult) string {
	var b strings.Builder
	fmt.Fprintf(&b, "\n# cellserver vs Redis: CL.THROTTLE throughput, latency and CPU (%s)\n\n", r.Started.Format("2006-01-02 15:04 MST"))
	fmt.Fprintf(&b, "Command: `%s`\n\n", invocation())
	b.WriteString("Machine (load generator and servers share it, loopback only):\n\n")
	b.WriteString(r.Machine.String())
	fmt.Fprintf(&b, "- load average at start: %s, at end: %s\n", r.LoadStart, r.LoadEnd)
	fmt.Fprintf(&b, "\nServers: `%s` (its default flags: default persistence); `redis-server --save '' --appendonly no` with the GCRA Lua script (SHA %s) called by EVALSHA", r.Cellserver, r.LuaSHA)
	if r.Config.RedisCell != "" {
		fmt.Fprintf(&b, "; `redis-server --loadmodule %s`", r.Config.RedisCell)
	}
	fmt.Fprintf(&b, ".\nLoad: `%s -c %d -P <pipeline> [-r <keyspace>]`, systems alternating A B A B over %d measured rounds after one warm-up run each; every figure is the median over the rounds.\n",
		r.Config.Generator, r.Config.Clients, r.Config.Rounds)
	if r.Config.Generator == genPipeload {
		b.WriteString("The load generator is pipeload (`bench.Pipeload`): redis-benchmark's load (the same clients, pipelines and random keys) from one thread that counts replies without decoding them.\n")
	}
	for _, sc := range r.Scenarios {
		b.WriteString(scenarioTable(r, sc))
	}
	if r.Memory != nil {
		b.WriteString(strings.Replace(memoryReport(r.Memory), "\n# ", "\n## ", 1))
	}
	b.WriteString(targets(r))
	b.WriteString(issue16(r))
	b.WriteString(issue19(r))
	return b.String()
}

func scenarioTable(r *compareResult, sc *scenarioResult) string {
	var b strings.Builder
	s := sc.Scenario
	fmt.Fprintf(&b, "\n## %s: %s\n\n", s.Name, s.Title)
	if len(sc.Systems) > 0 {
		cmd := strings.Join(sc.Systems[0].Command, " ")
		if s.Limit != nil {
			cmd = strings.Join(s.Limit, " ") + "` against `" + cmd
		}
		ks := ""
		if s.Keyspace > 0 {
			ks = fmt.Sprintf(" -r %d", s.Keyspace)
		}
		fmt.Fprintf(&b, "`%s -c %d -P %d%s %s`", r.Config.Generator, r.Config.Clients, s.Pipeline, ks, cmd)
		if s.Preload > 0 {
			fmt.Fprintf(&b, " after loading keys %s000000000000..%s%012d", s.Prefix, s.Prefix, s.Preload-1)
		}
		if s.Flat {
			fmt.Fprintf(&b, " on the big server; on the second one `-r 100000` after loading %s000000000000..%s000000099999", s.Prefix, s.Prefix)
		}
		b.WriteString("\n\n")
	}
	b.WriteString("| system | rps (median) | rps min-max | p50 ms | p99 ms | p99.9 ms | server CPU µs/op | " + r.Config.Generator + " CPU µs/op | GC cycles (max STW ms) | others' CPU |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, sys := range sc.Systems {
		m := sys.Median
		if sys.Skipped != "" {
			fmt.Fprintf(&b, "| %s | skipped: %s | | | | | | | | |\n", sys.System, firstLine(sys.Skipped))
			continue
		}
		if !m.OK {
			fmt.Fprintf(&b, "| %s | failed | | | | | | | | |\n", sys.System)
			continue
		}
		gc := "-"
		if strings.HasPrefix(sys.System, "cellserver") && r.Config.GCTrace {
			gc = fmt.Sprintf("%d (%.2f)", m.GCCycles, m.GCMaxMS)
		}
		fmt.Fprintf(&b, "| %s | %s | %s-%s | %.3f | %.3f | %.3f | %.2f | %.2f | %s | %.2f |\n",
			sys.System, kilo(m.RPS), kilo(m.RPSMin), kilo(m.RPSMax), m.P50, m.P99, m.P999, m.CPUPerOp, m.BenchCPU, gc, m.Others)
	}
	notes := append([]string(nil), sc.Notes...)
	if s.Limit != nil {
		if rs := pairRatios(sc, sysCellLimit, sysCellThrottle, rps); len(rs) > 0 {
			notes = append(notes, fmt.Sprintf("CL.LIMIT / CL.THROTTLE rps, same server, round by round: %s (median %.2fx)", fmtRatios(rs), median(rs)))
		}
		if rs := pairRatios(sc, sysCellLimit, sysCellThrottle, cpuPerOp); len(rs) > 0 {
			notes = append(notes, fmt.Sprintf("CL.LIMIT / CL.THROTTLE server CPU/op, round by round: %s (median %.2fx)", fmtRatios(rs), median(rs)))
		}
	} else if s.RESP3 {
		if rs := pairRatios(sc, sysCellRESP3, sysCellThrottle, rps); len(rs) > 0 {
			notes = append(notes, fmt.Sprintf("RESP3 / RESP2 rps, same server, round by round: %s (median %.2fx)", fmtRatios(rs), median(rs)))
		}
		if rs := pairRatios(sc, sysCellRESP3, sysCellThrottle, cpuPerOp); len(rs) > 0 {
			notes = append(notes, fmt.Sprintf("RESP3 / RESP2 server CPU/op, round by round: %s (median %.2fx)", fmtRatios(rs), median(rs)))
		}
	} else if s.Ping {
		if c, err := r.find(s.Name, sysCellPing); err == nil {
			if p, err := r.find(s.Name, sysPing); err == nil {
				notes = append(notes, fmt.Sprintf("cellserver PING / redis-server PING: rps %s", ratio(c.RPS, p.RPS)))
			}
		}
	} else if s.Ceiling {
		pairs := [][3]string{
			{sysCannedThrottle, sysPing, "canned CL.THROTTLE / redis-server PING (the most any server's CL.THROTTLE can show against that PING here)"},
			{sysCell, sysPing, "cellserver CL.THROTTLE / redis-server PING"},
			{sysCell, sysCannedThrottle, "cellserver CL.THROTTLE / canned CL.THROTTLE"},
			{sysCannedFW, sysCannedThrottle, "canned CL.LIMIT FW / canned CL.THROTTLE (the most limit-fw-p16 can show here)"},
			{sysCannedSWC, sysCannedThrottle, "canned CL.LIMIT SWC / canned CL.THROTTLE (the most limit-swc-p16 can show here)"},
			{sysCannedTwo, sysCannedThrottle, "canned CL.LIMIT two FW / canned CL.THROTTLE (the most limit2-p16 can show here)"},
		}
		for _, p := range pairs {
			if rs := pairRatios(sc, p[0], p[1], rps); len(rs) > 0 {
				notes = append(notes, fmt.Sprintf("%s, rps round by round: %s (median %.2fx)", p[2], fmtRatios(rs), median(rs)))
			}
		}
	} else if s.Flat {
		if small, big, ok := flatPair(sc); ok {
			notes = append(notes, fmt.Sprintf("CPU/op %s against 100k live keys: medians %s (%.2f -> %.2f µs/op), rps %s",
				strings.ToUpper(short(s.Keyspace)), ratio(big.CPUPerOp, small.CPUPerOp), small.CPUPerOp, big.CPUPerOp, ratio(big.RPS, small.RPS)))
			if rs := flatRatios(sc); len(rs) > 0 {
				notes = append(notes, fmt.Sprintf("CPU/op %s against 100k live keys, round by round: %s (median %.2fx)",
					strings.ToUpper(short(s.Keyspace)), fmtRatios(rs), median(rs)))
			}
		}
	} else if c, err := r.find(s.Name, sysCell); err == nil {
		if r.Baseline != "" {
			if x, err := r.find(s.Name, r.Baseline); err == nil {
				notes = append(notes, fmt.Sprintf("cellserver / %s: rps %s, p99 %s, CPU/op %s (medians)",
					r.Baseline, ratio(c.RPS, x.RPS), ratio(c.P99, x.P99), ratio(c.CPUPerOp, x.CPUPerOp)))
				if rs := pairRatios(sc, sysCell, r.Baseline, rps); len(rs) > 0 {
					notes = append(notes, fmt.Sprintf("cellserver / %s round by round: rps %s (median %.2fx); CPU/op %s (median %.2fx)",
						r.Baseline, fmtRatios(rs), median(rs), fmtRatios(pairRatios(sc, sysCell, r.Baseline, cpuPerOp)),
						median(pairRatios(sc, sysCell, r.Baseline, cpuPerOp))))
				}
			}
		}
		for _, ref := range []string{sysLua, sysRedisCell} {
			if x, err := r.find(s.Name, ref); err == nil {
				notes = append(notes, fmt.Sprintf("cellserver / %s: rps %s, p99 %s, CPU/op %s",
					ref, ratio(c.RPS, x.RPS), ratio(c.P99, x.P99), ratio(c.CPUPerOp, x.CPUPerOp)))
			}
		}
		if p, err := r.find(fmt.Sprintf("ping-p%d", s.Pipeline), sysPing); err == nil {
			notes = append(notes, fmt.Sprintf("cellserver / redis-server PING ceiling (depth %d, same run): rps %s", s.Pipeline, ratio(c.RPS, p.RPS)))
			if l, err := r.find(s.Name, sysLua); err == nil {
				notes = append(notes, fmt.Sprintf("redis+lua / redis-server PING ceiling (depth %d, same run): rps %s", s.Pipeline, ratio(l.RPS, p.RPS)))
			}
		}
	}
	if len(notes) > 0 {
		b.WriteString("\n")
		for _, n := range notes {
			b.WriteString("- " + n + "\n")
		}
	}
	return b.String()
}

// targets checks the "done when" figures of issue #4 that one compare run
// can show.
func targets(r *compareResult) string {
	type row struct{ what, got, verdict string }
	var rows []row
	check := func(what string, got float64, ok bool, gotFmt string) {
		v := "no"
		if ok {
			v = "yes"
		}
		rows = append(rows, row{what, fmt.Sprintf(gotFmt, got), v})
	}
	var context []string
	if c, err := r.find("rand100k-p1", sysCell); err == nil {
		if l, err := r.find("rand100k-p1", sysLua); err == nil {
			check("depth 1: cellserver rps ≥ 1.3x Redis+Lua", c.RPS/l.RPS, c.RPS >= 1.3*l.RPS, "%.2fx")
			check("depth 1: cellserver p99 ≤ Redis+Lua p99", c.P99/l.P99, c.P99 <= l.P99, "%.2fx")
			if p, err := r.find("ping-p1", sysPing); err == nil {
				// Without pipelining, the load generator and the kernel set a
				// ceiling that a server doing nothing (PING) shows.
				context = append(context, fmt.Sprintf("Depth-1 ceiling in this run: redis-server PING at depth 1 = %s rps = %s of Redis+Lua; "+
					"1.3x Redis+Lua is above it unless that is ≥ 1.30x. cellserver = %s of that ceiling.",
					kilo(p.RPS), ratio(p.RPS, l.RPS), ratio(c.RPS, p.RPS)))
			}
		}
	}
	if c, err := r.find("rand100k-p16", sysCell); err == nil {
		if l, err := r.find("rand100k-p16", sysLua); err == nil {
			check("depth 16: cellserver rps ≥ 3x Redis+Lua", c.RPS/l.RPS, c.RPS >= 3*l.RPS, "%.2fx")
		}
		if p, err := r.find("ping-p16", sysPing); err == nil {
			check("depth 16: cellserver rps ≥ 0.6x redis-server PING", c.RPS/p.RPS, c.RPS >= 0.6*p.RPS, "%.2fx")
		}
	}
	// Flatness: from flat-p16, where the two sizes alternate in the same
	// rounds; else from the two live scenarios, measured minutes apart.
	var small, big summary
	var bigName, how string
	ok := false
	flat := math.NaN() // median of flat-p16's round-by-round ratios
	for _, sc := range r.Scenarios {
		if sc.Scenario.Flat {
			if small, big, ok = flatPair(sc); ok {
				bigName, how = short(sc.Scenario.Keyspace), "flat-p16, alternating"
				if rs := flatRatios(sc); len(rs) > 0 {
					flat = median(rs)
					how = fmt.Sprintf("flat-p16, median of %d alternating pairs: %s", len(rs), fmtRatios(rs))
				}
			}
		}
	}
	if !ok {
		for _, sc := range r.Scenarios {
			if strings.HasPrefix(sc.Scenario.Name, "live") && sc.Scenario.Name != "live100k-p16" {
				bigName = strings.TrimSuffix(strings.TrimPrefix(sc.Scenario.Name, "live"), "-p16")
				var err1, err2 error
				small, err1 = r.find("live100k-p16", sysCell)
				big, err2 = r.find(sc.Scenario.Name, sysCell)
				ok, how = err1 == nil && err2 == nil, "live100k-p16 and "+sc.Scenario.Name
			}
		}
	}
	if ok {
		if math.IsNaN(flat) {
			flat = big.CPUPerOp / small.CPUPerOp
		}
		check(fmt.Sprintf("CPU/op flat from 100k to %s live keys (%s; medians %.2f -> %.2f µs/op; yes if within 1.25x)",
			strings.ToUpper(bigName), how, small.CPUPerOp, big.CPUPerOp),
			flat, flat <= 1.25, "%.2fx")
	}
	if len(rows) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("\n## Issue #4 targets measurable in this run\n\n| target | measured | met |\n|---|---:|---|\n")
	for _, x := range rows {
		fmt.Fprintf(&b, "| %s | %s | %s |\n", x.what, x.got, x.verdict)
	}
	for _, c := range context {
		b.WriteString("\n" + c + "\n")
	}
	b.WriteString("\n(Memory targets: `go run ./bench/cmd/compare --memory --keys 10000000`.)\n")
	return b.String()
}

func kilo(x float64) string {
	switch {
	case math.IsNaN(x):
		return "-"
	case x >= 1e6:
		return fmt.Sprintf("%.2fM", x/1e6)
	case x >= 1e3:
		return fmt.Sprintf("%.1fk", x/1e3)
	}
	return fmt.Sprintf("%.0f", x)
}

func ratio(a, b float64) string {
	if b == 0 || math.IsNaN(a) || math.IsNaN(b) {
		return "-"
	}
	return fmt.Sprintf("%.2fx", a/b)
}

// flatPair returns flat-p16's two medians: 100k live keys, and the big
// live keyspace.
func flatPair(sr *scenarioResult) (small, big summary, ok bool) {
	if len(sr.Systems) != 2 || !sr.Systems[0].Median.OK || !sr.Systems[1].Median.OK {
		return small, big, false
	}
	return sr.Systems[0].Median, sr.Systems[1].Median, true
}

// flatRatios returns, for each round of flat-p16 that both systems
// completed, the big keyspace's CPU per op over the 100k one's: two runs
// seconds apart, so the VM's drift over minutes cancels out of each ratio.
// The verdict is their median.
func flatRatios(sr *scenarioResult) []float64 {
	if len(sr.Systems) != 2 {
		return nil
	}
	return runRatios(sr.Systems[1], sr.Systems[0], cpuPerOp)
}

func rps(r runResult) float64      { return r.RPS }
func cpuPerOp(r runResult) float64 { return r.CPUPerOp }

// pairRatios returns, for each measured round both systems completed,
// metric of system a over metric of system b in that round: runs seconds
// apart, so the machine's drift over minutes cancels out of each ratio.
func pairRatios(sr *scenarioResult, a, b string, metric func(runResult) float64) []float64 {
	var x, y *systemResult
	for _, s := range sr.Systems {
		switch s.System {
		case a:
			x = s
		case b:
			y = s
		}
	}
	if x == nil || y == nil {
		return nil
	}
	return runRatios(x, y, metric)
}

func runRatios(a, b *systemResult, metric func(runResult) float64) []float64 {
	byRound := map[int]float64{}
	for _, r := range b.Runs {
		if r.Round > 0 && r.Error == "" && metric(r) > 0 {
			byRound[r.Round] = metric(r)
		}
	}
	var out []float64
	for _, r := range a.Runs {
		if d, ok := byRound[r.Round]; ok && r.Error == "" && metric(r) > 0 { // byRound has no warm-up
			out = append(out, metric(r)/d)
		}
	}
	return out
}

// fmtRatios lists ratios as "1.10x, 1.25x".
func fmtRatios(xs []float64) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = fmt.Sprintf("%.2fx", x)
	}
	return strings.Join(parts, ", ")
}

// issue16 checks the figures issue #16's acceptance asks of one run: the
// hot path against the release before the change, CL.LIMIT against
// CL.THROTTLE, and the RSS per key of each kind at 10M keys. Each ratio is
// the median of round-by-round ratios (runs seconds apart).
func issue16(r *compareResult) string {
	var rows []row
	if r.Baseline != "" {
		for _, name := range []string{"rand100k-p1", "rand100k-p16"} {
			sc := r.scenario(name)
			c, err1 := r.find(name, sysCell)
			x, err2 := r.find(name, r.Baseline)
			if sc == nil || err1 != nil || err2 != nil {
				continue
			}
			depth := sc.Scenario.Pipeline
			if rs := pairRatios(sc, sysCell, r.Baseline, rps); len(rs) > 0 {
				m := median(rs)
				rows = append(rows, row{fmt.Sprintf("depth %d: CL.THROTTLE rps, this tree / %s (%s)", depth, r.Baseline, name),
					fmt.Sprintf("%s / %s rps: %.2fx (rounds %s)", kilo(c.RPS), kilo(x.RPS), m, fmtRatios(rs)), "≥ 0.95x", verdict(m >= 0.95)})
			}
			if rs := pairRatios(sc, sysCell, r.Baseline, cpuPerOp); len(rs) > 0 {
				m := median(rs)
				rows = append(rows, row{fmt.Sprintf("depth %d: server CPU/op, this tree / %s (%s)", depth, r.Baseline, name),
					fmt.Sprintf("%.2f / %.2f µs: %.2fx (rounds %s)", c.CPUPerOp, x.CPUPerOp, m, fmtRatios(rs)), "≤ 1.05x", verdict(m <= 1.05)})
			}
		}
	}
	for _, t := range []struct {
		name, what string
		min        float64
		canned     string
	}{
		{"limit-fw-p16", "depth 16: CL.LIMIT one FW limit / CL.THROTTLE rps", 0.9, sysCannedFW},
		{"limit-swc-p16", "depth 16: CL.LIMIT one SWC limit / CL.THROTTLE rps", 0.9, sysCannedSWC},
		{"limit2-p16", "depth 16: CL.LIMIT two FW limits on two shards / CL.THROTTLE rps", 0.5, sysCannedTwo},
	} {
		sc := r.scenario(t.name)
		if sc == nil {
			continue
		}
		l, err1 := r.find(t.name, sysCellLimit)
		c, err2 := r.find(t.name, sysCellThrottle)
		rs := pairRatios(sc, sysCellLimit, sysCellThrottle, rps)
		if err1 != nil || err2 != nil || len(rs) == 0 {
			rows = append(rows, row{t.what, "not measured", fmt.Sprintf("≥ %.1fx", t.min), "-"})
			continue
		}
		m := median(rs)
		got := fmt.Sprintf("%s / %s rps: %.2fx (rounds %s); CPU/op %.2f / %.2f µs", kilo(l.RPS), kilo(c.RPS), m, fmtRatios(rs),
			l.CPUPerOp, c.CPUPerOp)
		if cs := r.scenario("ceiling-p16"); cs != nil {
			if cr := pairRatios(cs, t.canned, sysCannedThrottle, rps); len(cr) > 0 {
				got += fmt.Sprintf("; the load generator's ceiling for this ratio (ceiling-p16, a server doing nothing): %.2fx", median(cr))
			}
		}
		rows = append(rows, row{t.what, got, fmt.Sprintf("≥ %.1fx", t.min), verdict(m >= t.min)})
	}
	if r.Memory != nil {
		for _, x := range r.Memory.Rows {
			if x.System != sysCell {
				continue
			}
			what := fmt.Sprintf("RSS per %s key at %s keys (16-byte keys)", strings.ToUpper(x.kind()), strings.ToUpper(short(x.Keys)))
			if x.Error != "" || x.RSSLoaded == 0 {
				rows = append(rows, row{what, "failed: " + firstLine(x.Error), "", "-"})
				continue
			}
			got := fmt.Sprintf("%.1f B (dbsize %d; %.1f B after the load run)", x.RSSPerKey, x.DBSize, x.RSSRunPerKey)
			target, met := "reported", "-"
			if x.kind() == "gcra" {
				target, met = "≤ 58 B", verdict(x.RSSPerKey <= 58)
			}
			rows = append(rows, row{what, got, target, met})
		}
	}
	return acceptance("Issue #16", rows, `"within 5%" is read as no more than 5% slower or costlier (faster passes).`)
}

// scenario returns the result of the scenario called name, or nil.
func (r *compareResult) scenario(name string) *scenarioResult {
	for _, sc := range r.Scenarios {
		if sc.Scenario.Name == name {
			return sc
		}
	}
	return nil
}

// issue19 checks the figures issue #19's acceptance asks of one run:
// unpipelined CL.THROTTLE against redis-server answering PING (rate and
// server CPU per request, from ceiling-p1 where they alternate in the same
// rounds, else from rand100k-p1 and ping-p1), with the load generator's
// ceiling, and the pipelined rows against the release before.
func issue19(r *compareResult) string {
	var rows []row
	if sc := r.scenario("ceiling-p1"); sc != nil {
		c, err1 := r.find("ceiling-p1", sysCell)
		p, err2 := r.find("ceiling-p1", sysPing)
		if err1 == nil && err2 == nil {
			if rs := pairRatios(sc, sysCell, sysPing, rps); len(rs) > 0 {
				m := median(rs)
				got := fmt.Sprintf("%s / %s rps: %.2fx (rounds %s)", kilo(c.RPS), kilo(p.RPS), m, fmtRatios(rs))
				if cr := pairRatios(sc, sysCannedThrottle, sysPing, rps); len(cr) > 0 {
					got += fmt.Sprintf("; the load generator's ceiling (a server doing nothing, answering CL.THROTTLE's reply): %.2fx", median(cr))
				}
				rows = append(rows, row{"depth 1: CL.THROTTLE (50 clients, 100k keys) rps / redis-server PING rps (ceiling-p1)", got, "≥ 1.0x", verdict(m >= 1)})
			}
			if rs := pairRatios(sc, sysCell, sysPing, cpuPerOp); len(rs) > 0 {
				m := median(rs)
				rows = append(rows, row{"depth 1: CL.THROTTLE server CPU per request / redis-server PING's (ceiling-p1)",
					fmt.Sprintf("%.2f / %.2f µs: %.2fx (rounds %s)", c.CPUPerOp, p.CPUPerOp, m, fmtRatios(rs)), "≤ 1.0x", verdict(m <= 1)})
			}
		}
	} else if c, err := r.find("rand100k-p1", sysCell); err == nil {
		if p, err := r.find("ping-p1", sysPing); err == nil {
			rows = append(rows, row{"depth 1: CL.THROTTLE rps (rand100k-p1) / redis-server PING rps (ping-p1, minutes apart)",
				fmt.Sprintf("%s / %s rps: %s", kilo(c.RPS), kilo(p.RPS), ratio(c.RPS, p.RPS)), "≥ 1.0x", verdict(c.RPS >= p.RPS)})
			rows = append(rows, row{"depth 1: CL.THROTTLE server CPU per request / redis-server PING's (minutes apart)",
				fmt.Sprintf("%.2f / %.2f µs: %s", c.CPUPerOp, p.CPUPerOp, ratio(c.CPUPerOp, p.CPUPerOp)), "≤ 1.0x", verdict(c.CPUPerOp <= p.CPUPerOp)})
		}
	}
	if r.Baseline != "" {
		for _, sc := range r.Scenarios {
			name := sc.Scenario.Name
			if name != "rand100k-p1" && name != "rand100k-p16" && !(strings.HasPrefix(name, "live") && name != "live100k-p16") {
				continue
			}
			rs := pairRatios(sc, sysCell, r.Baseline, rps)
			cs := pairRatios(sc, sysCell, r.Baseline, cpuPerOp)
			if len(rs) == 0 || len(cs) == 0 {
				continue
			}
			rows = append(rows, row{fmt.Sprintf("%s: this tree / %s, rps and CPU per op", name, r.Baseline),
				fmt.Sprintf("%.2fx (rounds %s); %.2fx (rounds %s)", median(rs), fmtRatios(rs), median(cs), fmtRatios(cs)),
				"no worse", verdict(median(rs) >= 0.95 && median(cs) <= 1.05)})
		}
	}
	return acceptance("Issue #19", rows, `"no worse" is read as within 5%.`)
}

// row is one figure of an issue's acceptance table.
type row struct{ what, got, target, met string }

func verdict(ok bool) string {
	if ok {
		return "yes"
	}
	return "no"
}

// acceptance renders an issue's acceptance table ("" without rows).
func acceptance(issue string, rows []row, reading string) string {
	if len(rows) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("\n## " + issue + " acceptance\n\n| figure | measured | target | met |\n|---|---|---|---|\n")
	for _, x := range rows {
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", x.what, x.got, x.target, x.met)
	}
	b.WriteString("\nRatios are medians of round-by-round ratios; " + reading + "\n")
	return b.String()
}
