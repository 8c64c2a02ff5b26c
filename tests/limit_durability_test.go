package tests

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// limitKinds are one limit of every type, with room for every call a test
// makes (windows of 366 days, so none rolls over while it runs), and the
// limit each reports.
var limitKinds = []struct {
	name  string
	args  []any
	limit int64
	typ   string // TYPE's answer
}{
	{"gcra", []any{"GCRA", 9999, 1, 3600}, 10000, "string"}, // one token an hour: none comes back during a test
	{"fw", []any{"FW", 100000, 31622400}, 100000, "cl-limit"},
	{"swc", []any{"SWC", 100000, 31622400}, 100000, "cl-limit"},
	{"swl", []any{"SWL", 10000, 31622400}, 10000, "cl-limit"},
	{"cal", []any{"CAL", 100000, "YEAR", "TZ", "Europe/Berlin"}, 100000, "cl-limit"},
}

func limitArgs(key string, kind int, extra ...any) []any {
	args := append([]any{"CL.LIMIT", key}, limitKinds[kind].args...)
	return append(args, extra...)
}

// limitUsed is what a key's state has charged: its limit minus the
// remaining a COST 0 PEEK reports.
func limitUsed(t *testing.T, ctx context.Context, rdb clDoer, key string, kind int) int64 {
	t.Helper()
	v, err := rdb.Do(ctx, limitArgs(key, kind, "COST", 0, "PEEK")...).Slice()
	require.NoError(t, err, key)
	return limitKinds[kind].limit - v[2].(int64)
}

// TestLimitKill9AlwaysKeepsEveryType: under --fsync always, workers charge
// keys of every type; after kill -9 and a restart every acknowledged
// charge is there (and none that was never sent), each key keeps its type,
// and a clean restart after that keeps them all again.
func TestLimitKill9AlwaysKeepsEveryType(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	srv := startServer(t, "--data-dir", dir, "--fsync", "always")
	ctx := ctxT(t, 60*time.Second)
	const workers = 4
	type count struct{ acked, sent int64 }
	counts := make([][]count, workers)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range workers {
		counts[w] = make([]count, len(limitKinds))
		rdb := srv.Client(t, func(o *redis.Options) { o.PoolSize = 1; o.MaxRetries = -1 })
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				k := i % len(limitKinds)
				counts[w][k].sent++
				v, err := rdb.Do(ctx, limitArgs(fmt.Sprintf("w%d:%s", w, limitKinds[k].name), k)...).Slice()
				if err != nil {
					return // the server is gone
				}
				if v[0].(int64) == 0 {
					counts[w][k].acked++
				}
			}
		}()
	}
	time.Sleep(1200 * time.Millisecond)
	srv.Kill9()
	close(stop)
	wg.Wait()

	type keyKind struct {
		key  string
		kind int
	}
	check := func(rdb *redis.Client, what string) map[keyKind]int64 {
		got := map[keyKind]int64{}
		total := int64(0)
		for w := range workers {
			for k, kind := range limitKinds {
				key := fmt.Sprintf("w%d:%s", w, kind.name)
				used := limitUsed(t, ctx, rdb, key, k)
				c := counts[w][k]
				require.GreaterOrEqual(t, used, c.acked, "%s: %s lost acknowledged charges", what, key)
				require.LessOrEqual(t, used, c.sent, "%s: %s holds charges never sent", what, key)
				if c.acked > 0 {
					assert.Equal(t, kind.typ, rdb.Type(ctx, key).Val(), "%s: %s", what, key)
				}
				got[keyKind{key, k}] = used
				total += c.acked
			}
		}
		require.Greater(t, total, int64(len(limitKinds)*workers), "the load must charge every key")
		t.Logf("%s: %d acknowledged charges over %d keys of %d types all survived", what, total, len(got), len(limitKinds))
		return got
	}
	srv2 := startServer(t, "--data-dir", dir, "--fsync", "always")
	before := check(srv2.Client(t), "after kill -9")
	require.Equal(t, 0, srv2.Stop())
	srv3 := startServer(t, "--data-dir", dir)
	rdb3 := srv3.Client(t)
	for kk, used := range before {
		assert.Equal(t, used, limitUsed(t, ctx, rdb3, kk.key, kk.kind), "after a clean restart: %s", kk.key)
	}
}

// TestLimitSlotMoveCarriesEveryType: keys of every type charged on one
// node move with their slots to the other; the new owner holds the same
// charges and types, and the old owner redirects.
func TestLimitSlotMoveCarriesEveryType(t *testing.T) {
	nodes := clStartNodes(t, 2)
	doc := clInit(t, nodes, 1)
	clApplyOK(t, doc)
	rdb := clClusterClient(t, nodes)
	ctx := ctxT(t, 60*time.Second)
	require.Equal(t, [][2]int{{0, 8191}}, doc.Shards[0].Slots)
	keys := clKeysInSlots("mv:", len(limitKinds), func(s int) bool { return 4000 <= s && s <= 5999 })
	for k, key := range keys {
		for range 3 {
			v, err := rdb.Do(ctx, limitArgs(key, k, "COST", 2)...).Slice()
			require.NoError(t, err, key)
			require.Equal(t, int64(0), v[0], key)
		}
		require.Equal(t, int64(6), limitUsed(t, ctx, rdb, key, k), key)
	}
	doc2 := doc.clone()
	doc2.Epoch = 2
	doc2.Shards[0].Slots = [][2]int{{0, 3999}, {6000, 8191}}
	doc2.Shards[1].Slots = [][2]int{{4000, 5999}, {8192, 16383}}
	clApplyOK(t, doc2, "--timeout", "20s")
	cs := clClients(t, nodes)
	for k, key := range keys {
		assert.Equal(t, limitKinds[k].typ, cs[1].Type(ctx, key).Val(), "%s moved to node 2 with its type", key)
		assert.Equal(t, int64(6), limitUsed(t, ctx, cs[1], key, k), "%s moved with its charges", key)
		assert.ErrorContains(t, cs[0].Do(ctx, limitArgs(key, k)...).Err(), "MOVED", key)
	}
}

// TestUpgradeDataDirOfPreviousRelease: a data dir written by the release
// before typed states (testdata/datadir-cellserver2: 10 GCRA keys with
// expiries and one without, written by CL.THROTTLE) loads unchanged, takes
// new CL.LIMIT states beside its TATs, and keeps both across a restart.
func TestUpgradeDataDirOfPreviousRelease(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	require.NoError(t, os.CopyFS(dir, os.DirFS(filepath.Join("testdata", "datadir-cellserver2"))))
	srv := startServer(t, "--data-dir", dir)
	rdb := srv.Client(t)
	ctx := ctxT(t, 30*time.Second)
	assert.Equal(t, int64(11), infoInt(t, rdb, "persistence", "loaded_keys")+infoInt(t, rdb, "persistence", "loaded_expired_dropped"))
	assert.Equal(t, "1796121233184450755", rdb.Get(ctx, "forever").Val(), "the key without expiry")
	assert.Equal(t, "string", rdb.Type(ctx, "forever").Val())
	if tat, err := rdb.Get(ctx, "old:10").Result(); err == nil { // until late 2027
		assert.Equal(t, "1832121238175680303", tat)
	}
	require.NoError(t, rdb.Do(ctx, "CL.LIMIT", "new:fw", "FW", 10, 60).Err())
	require.Equal(t, 0, srv.Stop())
	srv2 := startServer(t, "--data-dir", dir)
	rdb2 := srv2.Client(t)
	assert.Equal(t, "1796121233184450755", rdb2.Get(ctx, "forever").Val())
	assert.Equal(t, "cl-limit", rdb2.Type(ctx, "new:fw").Val())
}
