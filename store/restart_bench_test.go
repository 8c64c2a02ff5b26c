package store

import (
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/cellserver/cellserver/gcra"
)

// BenchmarkRestart measures how long a store takes to open a data dir
// holding N live keys (16-byte keys, 1 h period), i.e. the restart time.
// The 10M case runs only with CELLSERVER_BENCH_10M=1 (it writes ~1 GB).
//
//	go test -run xxx -bench Restart -benchtime 1x ./store/
func BenchmarkRestart(b *testing.B) {
	sizes := []int{1_000_000}
	if os.Getenv("CELLSERVER_BENCH_10M") == "1" {
		sizes = append(sizes, 10_000_000)
	}
	for _, n := range sizes {
		b.Run(fmt.Sprintf("keys=%d", n), func(b *testing.B) {
			dir := b.TempDir()
			clk := &Clock{}
			clk.Set(time.Now().UnixNano())
			st, err := New(Config{Shards: 16, Clock: clk, DataDir: dir, Fsync: FsyncNo, SweepInterval: -1})
			if err != nil {
				b.Fatal(err)
			}
			fill := time.Now()
			sess := st.NewSession()
			ops := make([]ThrottleReq, 256)
			for i := 0; i < n; i += len(ops) {
				m := min(len(ops), n-i)
				for j := range ops[:m] {
					ops[j] = ThrottleReq{Key: []byte(fmt.Sprintf("key:%012d", i+j)),
						Params: gcra.Params{MaxBurst: 10, Count: 1, Period: 3600, Quantity: 1}}
					sess.Add(&ops[j])
				}
				sess.Run()
			}
			if err := st.Close(); err != nil {
				b.Fatal(err)
			}
			b.Logf("filled %d keys in %v; dir %d MB", n, time.Since(fill).Round(time.Millisecond), dirSizeB(dir)>>20)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				start := time.Now()
				st, err := New(Config{Shards: 16, Clock: clk, DataDir: dir, SweepInterval: -1})
				if err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(time.Since(start).Seconds(), "s/restart")
				if got := st.Stats().Keys; got != int64(n) {
					b.Fatalf("loaded %d keys, want %d", got, n)
				}
				b.StopTimer()
				_ = st.Close()
				b.StartTimer()
			}
		})
	}
}

func dirSizeB(dir string) int64 {
	var n int64
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if info, err := e.Info(); err == nil {
			n += info.Size()
		}
	}
	return n
}
