package commands

import (
	"math/rand/v2"
	"sync/atomic"
	"testing"

	"github.com/cellserver/cellserver/store"
)

// benchHost hosts the benchmark's one owner on the benchmark's goroutine:
// Wake only notes that Serve is due.
type benchHost struct{ woken atomic.Bool }

func (h *benchHost) Wake() { h.woken.Store(true) }

// benchInline runs pipelines of 16 calls as the server does by default on
// 2 cores: one owner hosting both shards, run inline by the goroutine that
// executes the pipelines (an event loop's), 50 clients taking turns, keys
// picked at random among 100,000 (so tables, entries and the clients'
// pooled requests are mostly out of cache, as under real load), each
// pipeline's arguments in one buffer rewritten before it runs (a read
// buffer, just filled). mk gives a call's arguments for a key suffix.
func benchInline(b *testing.B, mk func(k string) []string) {
	st, err := store.New(store.Config{Shards: 2, Owners: 1})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	o := st.Owners()[0]
	h := &benchHost{}
	o.Adopt(h)
	defer o.Detach()
	srv, err := New(Config{}, st)
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Close()
	var cls []*Client
	for range 50 {
		c := srv.NewClient(nil, nil)
		c.SetHome(o)
		cls = append(cls, c)
	}
	const pipes = 4096
	rnd := rand.New(rand.NewPCG(1, 2))
	var raw [pipes][]byte   // each pipeline's arguments, back to back
	var lens [pipes][][]int // and each call's argument lengths
	for p := range pipes {
		for range 16 {
			var ls []int
			for _, a := range mk(fmtInt(int(rnd.Int64N(100_000)) + 100_000_000_000)) {
				raw[p] = append(raw[p], a...)
				ls = append(ls, len(a))
			}
			lens[p] = append(lens[p], ls)
		}
	}
	buf := make([]byte, 64<<10)
	cmds := make([][][]byte, 16)
	var out Out
	run := func(i int) {
		p := i % pipes
		copy(buf, raw[p])
		at := 0
		for j, ls := range lens[p] {
			cmds[j] = cmds[j][:0]
			for _, n := range ls {
				cmds[j] = append(cmds[j], buf[at:at+n])
				at += n
			}
		}
		out.B = out.B[:0]
		srv.ExecAsync(cls[i%len(cls)], cmds, &out, nil)
		if h.woken.Load() {
			o.Serve()
		}
	}
	for i := range pipes { // every key exists before timing
		run(i)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i += 16 {
		run(i / 16)
	}
}

// BenchmarkExecInline: CL.THROTTLE and CL.LIMIT calls that are always
// admitted (every call charges), one pipeline of 16 at a time on the
// inline owner; ns/op is per call. Compare the rows with each other, in
// one run.
func BenchmarkExecInline(b *testing.B) {
	b.Run("THROTTLE", func(b *testing.B) {
		benchInline(b, func(k string) []string { return []string{"CL.THROTTLE", "key:" + k, "1000000", "1", "1"} })
	})
	// A key refills in 1 µs and is hit again ~30 ms later: every call
	// finds its key expired, as a limiter's keys mostly are under load.
	b.Run("THROTTLE-expired", func(b *testing.B) {
		benchInline(b, func(k string) []string { return []string{"CL.THROTTLE", "key:" + k, "100", "1000000", "1"} })
	})
	b.Run("FW", func(b *testing.B) {
		benchInline(b, func(k string) []string { return []string{"CL.LIMIT", "fw:" + k, "FW", "1000000", "60"} })
	})
	b.Run("SWC", func(b *testing.B) {
		benchInline(b, func(k string) []string { return []string{"CL.LIMIT", "swc:" + k, "SWC", "1000000", "60"} })
	})
	b.Run("FW2-one-shard", func(b *testing.B) {
		benchInline(b, func(k string) []string {
			return []string{"CL.LIMIT", "{a}k:" + k, "FW", "1000000", "60", "AND", "{a}j:" + k, "FW", "1000000", "3600"}
		})
	})
	// {a} and {b} are on different shards of 2: every call is held.
	b.Run("FW2-two-shards", func(b *testing.B) {
		benchInline(b, func(k string) []string {
			return []string{"CL.LIMIT", "{a}k:" + k, "FW", "1000000", "60", "AND", "{b}k:" + k, "FW", "1000000", "3600"}
		})
	})
}
