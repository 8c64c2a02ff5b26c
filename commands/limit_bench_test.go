package commands

import (
	"testing"

	"github.com/cellserver/cellserver/store"
)

// benchPipeline runs pipelines of 16 commands built by mk(i) through Exec;
// ns/op is per command.
func benchPipeline(b *testing.B, mk func(i int) []string) {
	st, _ := store.New(store.Config{Shards: 4})
	defer st.Close()
	srv, _ := New(Config{}, st)
	defer srv.Close()
	c := srv.NewClient(nil, nil)
	var cmds [][][]byte
	for i := 0; i < 16; i++ {
		var argv [][]byte
		for _, a := range mk(i) {
			argv = append(argv, []byte(a))
		}
		cmds = append(cmds, argv)
	}
	var out Out
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i += 16 {
		out.B = out.B[:0]
		srv.Exec(c, cmds, &out)
	}
}

func BenchmarkExecLimitPipeline(b *testing.B) {
	b.Run("FW", func(b *testing.B) {
		benchPipeline(b, func(i int) []string { return []string{"CL.LIMIT", "key" + fmtInt(i), "FW", "1000000000", "60"} })
	})
	b.Run("SWC", func(b *testing.B) {
		benchPipeline(b, func(i int) []string { return []string{"CL.LIMIT", "key" + fmtInt(i), "SWC", "1000000000", "60"} })
	})
	// {a} and {b} live on different shards of 4: every call is held.
	b.Run("FW2-cross-shard", func(b *testing.B) {
		benchPipeline(b, func(i int) []string {
			return []string{"CL.LIMIT", "{a}" + fmtInt(i), "FW", "1000000000", "60", "AND", "{b}" + fmtInt(i), "FW", "1000000000", "3600"}
		})
	})
}
