package limit

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cellserver/cellserver/gcra"
	"github.com/stretchr/testify/require"
)

// conformanceDir returns the repository's conformance/ folder:
// $CELLSERVER_CONFORMANCE_DIR if set, else ../conformance relative to this
// package. A missing folder fails the test: the vectors are the contract and
// are never skipped.
func conformanceDir(t testing.TB) string {
	t.Helper()
	dir := os.Getenv("CELLSERVER_CONFORMANCE_DIR")
	if dir == "" {
		dir = filepath.Join("..", "conformance")
	}
	if _, err := os.Stat(filepath.Join(dir, "README.md")); err != nil {
		t.Fatalf("conformance vectors not found in %s (set CELLSERVER_CONFORMANCE_DIR): %v", dir, err)
	}
	return dir
}

// skipLines lists vector lines that contradict the spec's text, by file and
// 1-based line number, with the reason. Empty: every line is run.
var skipLines = map[string]map[int]string{}

// TestConformance replays every line of conformance/cl-limit/*.jsonl
// against an in-memory executor built on this package and package gcra, and
// compares each reply and each PTTL.
func TestConformance(t *testing.T) {
	dir := filepath.Join(conformanceDir(t), "cl-limit")
	files, err := filepath.Glob(filepath.Join(dir, "*.jsonl"))
	require.NoError(t, err)
	require.NotEmpty(t, files, "no vectors in %s", dir)
	for _, path := range files {
		name := filepath.Base(path)
		t.Run(name, func(t *testing.T) {
			f, err := os.Open(path)
			require.NoError(t, err)
			defer f.Close()
			x := newExecutor()
			sc := bufio.NewScanner(f)
			sc.Buffer(make([]byte, 1<<20), 1<<24)
			lines, failed := 0, 0
			for n := 1; sc.Scan(); n++ {
				if len(bytes.TrimSpace(sc.Bytes())) == 0 {
					continue
				}
				lines++
				if why, ok := skipLines[name][n]; ok {
					t.Logf("%s:%d skipped: %s", name, n, why)
					continue
				}
				if msg := x.check(sc.Bytes()); msg != "" {
					failed++
					if failed <= 20 {
						t.Errorf("%s:%d: %s", name, n, msg)
					}
				}
			}
			require.NoError(t, sc.Err())
			t.Logf("%s: %d/%d lines pass", name, lines-failed, lines)
		})
	}
}

// vector is one line of a .jsonl file.
type vector struct {
	Now   int64            `json:"now"`
	Cmd   []string         `json:"cmd"`
	Reply json.RawMessage  `json:"reply"`
	PTTL  map[string]int64 `json:"pttl"`
}

// check runs one line and returns what differs, "" if nothing.
func (x *executor) check(line []byte) string {
	var v vector
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		return "bad line: " + err.Error()
	}
	argv := make([][]byte, len(v.Cmd))
	for i, a := range v.Cmd {
		argv[i] = []byte(a)
	}
	got := canonical(x.run(v.Now, argv))
	if v.Reply != nil {
		var want any
		d := json.NewDecoder(bytes.NewReader(v.Reply))
		d.UseNumber()
		if err := d.Decode(&want); err != nil {
			return "bad reply: " + err.Error()
		}
		if w := canonical(want); w != got {
			return strings.Join(v.Cmd, " ") + "\n\twant " + w + "\n\tgot  " + got
		}
	}
	for k, want := range v.PTTL {
		if p := x.pttl(k, v.Now); p != want {
			return strings.Join(v.Cmd, " ") + ": PTTL " + k + " want " + itoa(want) + " got " + itoa(p)
		}
	}
	return ""
}

func canonical(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return "!" + err.Error()
	}
	return string(b)
}

// errReply is an error reply, encoded as the vectors write it.
type errReply struct {
	Err string `json:"err"`
}

// execEntry is one key: its encoded state and expiry (Unix ms or NoExpiry).
type execEntry struct {
	state []byte
	exp   int64
}

// executor is a minimal single-threaded server: the commands the vectors
// use, with Redis's expiry rule (a key is gone once now_ms > exp).
type executor struct {
	keys map[string]execEntry
	buf  []byte
	res  [MaxLimits]Result
}

func newExecutor() *executor { return &executor{keys: map[string]execEntry{}} }

func (x *executor) get(key string, now int64) (execEntry, bool) {
	e, ok := x.keys[key]
	if ok && e.exp != NoExpiry && floorMS(now) > e.exp {
		delete(x.keys, key)
		return execEntry{}, false
	}
	return e, ok
}

func (x *executor) pttl(key string, now int64) int64 {
	e, ok := x.get(key, now)
	switch {
	case !ok:
		return -2
	case e.exp == NoExpiry:
		return -1
	}
	return e.exp - floorMS(now)
}

func (x *executor) set(key []byte, state []byte, exp int64) {
	x.keys[string(key)] = execEntry{bytes.Clone(state), exp}
}

func errOf(err error) errReply { return errReply{err.Error()} }

func (x *executor) run(now int64, argv [][]byte) any {
	switch strings.ToUpper(string(argv[0])) {
	case "CL.LIMIT":
		return x.limit(now, argv)
	case "CL.PEEK":
		return x.throttle(now, argv, true)
	case "CL.THROTTLE":
		return x.throttle(now, argv, false)
	case "CL.RESET":
		keys, err := ParseReset(argv)
		if err != nil {
			return errOf(err)
		}
		n := int64(0)
		for _, k := range keys {
			if e, ok := x.get(string(k), now); ok && KindOf(e.state).Valid() {
				delete(x.keys, string(k))
				n++
			}
		}
		return n
	case "CL.INSPECT":
		key, err := ParseInspect(argv)
		if err != nil {
			return errOf(err)
		}
		e, ok := x.get(string(key), now)
		if !ok {
			return nil
		}
		fs, err := Inspect(e.state)
		if err != nil {
			return errOf(err)
		}
		var out []any
		for _, f := range fs {
			out = append(out, f.Name, f.Value)
		}
		return append(out, "pttl", x.pttl(string(key), now))
	case "TYPE":
		e, ok := x.get(string(argv[1]), now)
		if !ok {
			return "none"
		}
		return KindOf(e.state).TypeName()
	case "PTTL":
		return x.pttl(string(argv[1]), now)
	case "DEL":
		n := int64(0)
		for _, k := range argv[1:] {
			if _, ok := x.get(string(k), now); ok {
				delete(x.keys, string(k))
				n++
			}
		}
		return n
	case "FLUSHALL":
		clear(x.keys)
		return "OK"
	}
	return errReply{"ERR unknown command '" + string(argv[0]) + "'"}
}

func (x *executor) limit(now int64, argv [][]byte) any {
	c, err := ParseLimit(argv)
	if err != nil {
		return errOf(err)
	}
	states := make([][]byte, len(c.Limits))
	for i, s := range c.Limits {
		if e, ok := x.get(string(s.Key), now); ok {
			states[i] = e.state
		}
	}
	res := x.res[:len(c.Limits)]
	d, buf, err := Decide(c.Limits, states, now, c.Options, res, x.buf[:0])
	x.buf = buf
	if err != nil {
		return errOf(err)
	}
	per := make([]any, len(res))
	for i, r := range res {
		if r.Write {
			x.set(c.Limits[i].Key, r.State, r.ExpireAt)
		}
		per[i] = r5List(r.R5)
	}
	return append(r5List(d.R5), int64(d.Index), per)
}

func r5List(r R5) []any {
	l := int64(0)
	if r.Limited {
		l = 1
	}
	return []any{l, r.Limit, r.Remaining, r.RetryAfter, r.ResetAfter}
}

// throttle is CL.THROTTLE, or with peek CL.PEEK (the same reply, nothing
// written), on a GCRA key.
func (x *executor) throttle(now int64, argv [][]byte, peek bool) any {
	key, p, err := ParsePeek(argv)
	if err != nil {
		if !peek && errors.Is(err, ErrPeekUsage) {
			return errReply{"Cell error: Store error: Usage: cl.throttle <key> <max_burst> <count per period> <period> [<quantity>]"}
		}
		return errOf(err)
	}
	e, exists := x.get(string(key), now)
	var tat uint64
	if exists {
		s, err := Decode(e.state)
		if err != nil {
			return errOf(err)
		}
		g, ok := s.(GCRAState)
		if !ok {
			return errOf(ErrWrongType)
		}
		tat = g.TAT
	}
	r, err := gcra.Throttle(p, tat, exists, now)
	if err != nil {
		return errOf(ErrCellZeroRate)
	}
	if r.Write && !peek {
		exp := int64(NoExpiry)
		if r.Expiry == gcra.ExpireAfter {
			exp = floorMS(now) + r.TTLMillis
		}
		x.set(key, GCRAState{r.NewTAT}.appendTo(nil), exp)
	}
	if r.Write && r.Expiry == gcra.ExpireError {
		return errOf(ErrCellExpire)
	}
	limited := int64(0)
	if r.Limited {
		limited = 1
	}
	return []any{limited, r.Limit, r.Remaining, r.RetryAfter, r.ResetAfter}
}
