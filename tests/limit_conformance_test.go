package tests

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// limitVector is one line of conformance/cl-limit/*.jsonl.
type limitVector struct {
	Now   int64            `json:"now"`
	Cmd   []string         `json:"cmd"`
	Reply json.RawMessage  `json:"reply"`
	PTTL  map[string]int64 `json:"pttl"`
	line  int
}

// TestLimitConformanceOverTheWire replays every line of
// conformance/cl-limit/*.jsonl against a running server with a
// frozen clock (DEBUG CLOCK SET before each line), comparing each reply and
// each PTTL the line gives.
func TestLimitConformanceOverTheWire(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob(filepath.Join(conformanceDir(t), "cl-limit", "*.jsonl"))
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, path := range files {
		name := filepath.Base(path)
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			vecs := loadLimitVectors(t, path)
			s := startServer(t, "--enable-debug-command", "yes")
			rdb := s.Client(t, func(o *redis.Options) { o.Protocol = 2 })
			ctx := ctxT(t, 120*time.Second)
			require.NoError(t, rdb.FlushAll(ctx).Err())
			type sent struct {
				v    limitVector
				cmd  *redis.Cmd
				keys []string
				pttl []*redis.Cmd
			}
			failed := 0
			const batch = 200
			for from := 0; from < len(vecs); from += batch {
				var out []sent
				_, _ = rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
					for _, v := range vecs[from:min(from+batch, len(vecs))] {
						x := sent{v: v}
						if v.Now != 0 {
							p.Do(ctx, "DEBUG", "CLOCK", "SET", strconv.FormatInt(v.Now, 10))
						}
						args := make([]any, len(v.Cmd))
						for i, a := range v.Cmd {
							args[i] = a
						}
						x.cmd = p.Do(ctx, args...)
						for k := range v.PTTL {
							x.keys = append(x.keys, k)
							x.pttl = append(x.pttl, p.Do(ctx, "PTTL", k))
						}
						out = append(out, x)
					}
					return nil
				})
				for _, x := range out {
					msg := ""
					got := canonicalReply(x.cmd)
					if x.v.Reply != nil {
						if want := canonicalJSON(x.v.Reply); want != got {
							msg = "want " + want + "\n\tgot  " + got
						}
					}
					for i, k := range x.keys {
						want := x.v.PTTL[k]
						p, err := x.pttl[i].Int64()
						if err != nil {
							p = -999
						}
						if p != want {
							msg += "\n\tPTTL " + k + " want " + strconv.FormatInt(want, 10) + " got " + strconv.FormatInt(p, 10)
						}
					}
					if msg != "" {
						failed++
						if failed <= 20 {
							t.Errorf("%s:%d: %s\n\t%s", name, x.v.line, strings.Join(x.v.Cmd, " "), msg)
						}
					}
				}
			}
			t.Logf("%s: %d/%d lines pass over the wire", name, len(vecs)-failed, len(vecs))
		})
	}
}

func loadLimitVectors(t *testing.T, path string) []limitVector {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	var out []limitVector
	for n := 1; sc.Scan(); n++ {
		if len(bytes.TrimSpace(sc.Bytes())) == 0 {
			continue
		}
		var v limitVector
		require.NoError(t, json.Unmarshal(sc.Bytes(), &v), "%s:%d", path, n)
		v.line = n
		out = append(out, v)
	}
	require.NoError(t, sc.Err())
	require.NotEmpty(t, out)
	return out
}

// canonicalJSON re-encodes a vector's reply so that it compares as text.
func canonicalJSON(raw json.RawMessage) string {
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return "!" + err.Error()
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// canonicalReply encodes a go-redis reply as the vectors write replies:
// errors as {"err": text}, nil as null.
func canonicalReply(c *redis.Cmd) string {
	v, err := c.Result()
	var re redis.Error
	switch {
	case errors.Is(err, redis.Nil):
		v = nil
	case errors.As(err, &re):
		v = map[string]string{"err": re.Error()}
	case err != nil:
		v = map[string]string{"transport": err.Error()}
	}
	b, _ := json.Marshal(v)
	return string(b)
}
