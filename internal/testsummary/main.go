// Command testsummary reads the events of `go test -json` on its standard
// input and writes what `go test` writes without -v: a line per package
// ("ok", "FAIL", "?") and the output of each failed test, build errors
// included. It ends with the list of every skipped test and the reason it
// gave, then the list of failures, and exits 1 if anything failed.
//
// test.sh pipes the whole suite through it, because `go test` without -v
// never prints why a test skipped, and with -v the reasons drown in the
// output of the tests that passed:
//
//	go test -json ./... | go run ./internal/testsummary
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"regexp"
	"sort"
	"strings"
)

func main() {
	failed, err := summarize(os.Stdin, os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "testsummary:", err)
		os.Exit(1)
	}
	if failed {
		os.Exit(1)
	}
}

// event is one line of `go test -json` (cmd/test2json's TestEvent, and the
// build events of the go command).
type event struct {
	Action      string
	Package     string
	Test        string
	Output      string
	FailedBuild string
}

// test is what is kept of a test until its result: its output lines.
type test struct {
	out    []string
	done   bool
	failed bool
}

// result is one skipped or failed test of the summary.
type result struct {
	pkg, test, reason string
}

type summary struct {
	w      io.Writer
	tests  map[[2]string]*test // by package and test name
	late   map[string][]string // output of finished tests, printed if the package fails
	ended  map[string]bool     // packages with a result
	skips  []result
	fails  []result
	failed bool
}

// summarize copies r's events to w as described in the package comment. It
// reports whether a test or package failed, or a package started and never
// ended (go test was stopped).
func summarize(r io.Reader, w io.Writer) (failed bool, err error) {
	s := &summary{w: w, tests: map[[2]string]*test{}, late: map[string][]string{}, ended: map[string]bool{}}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	events := 0
	for sc.Scan() {
		line := sc.Bytes()
		var e event
		if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &e) != nil {
			fmt.Fprintf(w, "%s\n", line) // not an event: go test's own words
			continue
		}
		events++
		s.event(e)
	}
	if err := sc.Err(); err != nil {
		return true, err
	}
	if events == 0 {
		return true, fmt.Errorf("no test events read (is the input `go test -json`?)")
	}
	s.report()
	return s.failed, nil
}

func (s *summary) event(e event) {
	switch e.Action {
	case "build-output":
		io.WriteString(s.w, e.Output)
	case "start":
		s.ended[e.Package] = false
	case "run":
		s.tests[[2]string{e.Package, e.Test}] = &test{}
	case "output":
		s.output(e)
	case "pass", "skip", "fail":
		if e.Test == "" {
			s.packageEnd(e)
		} else {
			s.testEnd(e)
		}
	}
}

// output keeps a test's line until its result, prints a package's own lines
// (its "ok"/"FAIL" line) but the test binary's bare PASS, which go test
// drops too.
func (s *summary) output(e event) {
	if e.Test == "" {
		if e.Output != "PASS\n" {
			io.WriteString(s.w, e.Output)
		}
		return
	}
	t := s.tests[[2]string{e.Package, e.Test}]
	switch {
	case t == nil:
		s.late[e.Package] = append(s.late[e.Package], e.Output)
	case !t.done:
		t.out = append(t.out, e.Output)
	case t.failed:
		io.WriteString(s.w, e.Output)
	default:
		s.late[e.Package] = append(s.late[e.Package], e.Output)
	}
}

// framing reports whether line is one of the lines -v adds around a test's
// own output.
func framing(line string) bool {
	for _, p := range []string{"=== RUN ", "=== PAUSE ", "=== CONT ", "=== NAME ", "--- PASS: ", "--- SKIP: "} {
		if strings.HasPrefix(strings.TrimLeft(line, " "), p) {
			return true
		}
	}
	return false
}

func (s *summary) testEnd(e event) {
	key := [2]string{e.Package, e.Test}
	t := s.tests[key]
	if t == nil {
		t = &test{}
		s.tests[key] = t
	}
	t.done = true
	switch e.Action {
	case "fail":
		t.failed, s.failed = true, true
		for _, l := range t.out {
			if !framing(l) {
				io.WriteString(s.w, l)
			}
		}
		s.fails = append(s.fails, result{pkg: e.Package, test: e.Test})
	case "skip":
		s.skips = append(s.skips, result{pkg: e.Package, test: e.Test, reason: skipReason(t.out)})
	}
	t.out = nil
}

// logLine is the start of a line a test logged (t.Log, t.Skip): its
// file and line; the lines of a multi-line message that follow are indented
// further.
var logLine = regexp.MustCompile(`^    [^ ]+\.go:\d+: `)

// skipReason is the last message a skipped test logged (t.Skip's own), on
// one line.
func skipReason(out []string) string {
	last := -1
	for i, l := range out {
		if logLine.MatchString(l) {
			last = i
		}
	}
	var why []string
	for _, l := range out[max(last, 0):] {
		if l = strings.TrimSpace(l); l != "" && !framing(l) {
			why = append(why, l)
		}
	}
	if len(why) == 0 {
		return "(no reason given)"
	}
	return strings.Join(why, " / ")
}

// packageEnd ends a package. A failed one also gets the output of its tests
// that never ended (a panic, a timeout: the test binary died under them)
// and of those that wrote after their end.
func (s *summary) packageEnd(e event) {
	s.ended[e.Package] = true
	var open []string
	for key, t := range s.tests {
		if key[0] != e.Package {
			continue
		}
		if !t.done && e.Action == "fail" {
			open = append(open, key[1])
		}
	}
	if e.Action == "fail" {
		s.failed = true
		sort.Strings(open)
		for _, name := range open {
			fmt.Fprintf(s.w, "--- %s did not finish; its output:\n", name)
			for _, l := range s.tests[[2]string{e.Package, name}].out {
				if !framing(l) {
					io.WriteString(s.w, l)
				}
			}
			s.fails = append(s.fails, result{pkg: e.Package, test: name, reason: "did not finish"})
		}
		for _, l := range s.late[e.Package] {
			io.WriteString(s.w, l)
		}
		switch {
		case e.FailedBuild != "":
			s.fails = append(s.fails, result{pkg: e.Package, reason: "build failed: " + e.FailedBuild})
		case !s.anyFailed(e.Package):
			// TestMain, or the binary itself, failed outside any test.
			s.fails = append(s.fails, result{pkg: e.Package, reason: "failed outside its tests"})
		}
	}
	for key := range s.tests {
		if key[0] == e.Package {
			delete(s.tests, key)
		}
	}
	delete(s.late, e.Package)
}

// anyFailed reports whether a test of pkg is in the list of failures.
func (s *summary) anyFailed(pkg string) bool {
	for _, r := range s.fails {
		if r.pkg == pkg && r.test != "" {
			return true
		}
	}
	return false
}

// report writes the lists of skips and failures.
func (s *summary) report() {
	var unended []string
	for pkg, ended := range s.ended {
		if !ended {
			unended = append(unended, pkg)
		}
	}
	sort.Strings(unended)
	for _, pkg := range unended {
		s.failed = true
		s.fails = append(s.fails, result{pkg: pkg, reason: "no result (go test stopped before the package ended)"})
	}
	byPackage := func(rs []result) {
		sort.SliceStable(rs, func(i, j int) bool { return rs[i].pkg < rs[j].pkg })
	}
	byPackage(s.skips)
	byPackage(s.fails)
	fmt.Fprintf(s.w, "\n%d skipped:\n", len(s.skips))
	for _, r := range s.skips {
		fmt.Fprintf(s.w, "SKIP %s %s: %s\n", r.pkg, r.test, r.reason)
	}
	if len(s.fails) == 0 {
		fmt.Fprintln(s.w, "no failures")
		return
	}
	fmt.Fprintf(s.w, "%d failed:\n", len(s.fails))
	for _, r := range s.fails {
		switch {
		case r.test == "":
			fmt.Fprintf(s.w, "FAIL %s (%s)\n", r.pkg, r.reason)
		case r.reason != "":
			fmt.Fprintf(s.w, "FAIL %s %s (%s)\n", r.pkg, r.test, r.reason)
		default:
			fmt.Fprintf(s.w, "FAIL %s %s\n", r.pkg, r.test)
		}
	}
}
