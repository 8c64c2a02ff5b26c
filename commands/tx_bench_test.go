package commands

import (
	"testing"

	"github.com/cellserver/cellserver/store"
)

// BenchmarkExecTx: a pipeline of MULTI, 16 CL.THROTTLE on keys of two
// shards, EXEC: the cost per queued command of copying it, holding both
// shards and running it inline (compare BenchmarkExecThrottlePipeline).
func BenchmarkExecTx(b *testing.B) {
	st, _ := store.New(store.Config{Shards: 4})
	defer st.Close()
	srv, _ := New(Config{}, st)
	defer srv.Close()
	c := srv.NewClient(nil, nil)
	cmds := [][][]byte{{[]byte("MULTI")}}
	for i := range 16 {
		k := "{a}" + fmtInt(i) // {a} and {b} live on different shards of 4
		if i%2 == 1 {
			k = "{b}" + fmtInt(i)
		}
		cmds = append(cmds, [][]byte{[]byte("CL.THROTTLE"), []byte(k), []byte("1000000000"), []byte("1000000000"), []byte("60")})
	}
	cmds = append(cmds, [][]byte{[]byte("EXEC")})
	var out Out
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i += 16 {
		out.B = out.B[:0]
		srv.Exec(c, cmds, &out)
	}
}
