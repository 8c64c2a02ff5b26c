package store

import (
	"fmt"
	"hash/maphash"
	"math"
	"math/rand/v2"
	"os"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"
)

// TestTableMatchesMap drives the table and a Go map with the same random
// inserts and removes, so rehashing, tombstones, free-list and pair reuse
// and arena compaction are all checked against a trivially correct model.
// Keys are of every length from 2 to 40 bytes: inline, pairs, arena.
func TestTableMatchesMap(t *testing.T) {
	tb := newTable(maphash.MakeSeed())
	defer tb.release()
	model := map[string]uint64{}
	rng := rand.New(rand.NewPCG(1, 2))
	key := func() []byte {
		i := rng.IntN(5000)
		k := []byte(fmt.Sprint(i, ":"))
		for len(k) < i%41 {
			k = append(k, 'x')
		}
		return k
	}
	for i := 0; i < 200000; i++ {
		k := key()
		ei := tb.find(k)
		v, ok := model[string(k)]
		require.Equal(t, ok, ei >= 0, "presence of %q at step %d", k, i)
		if ok {
			require.Equal(t, v, tb.at(uint32(ei)).tat)
			require.Equal(t, string(k), string(tb.keyOf(tb.at(uint32(ei)))))
		}
		switch {
		case ok && rng.IntN(2) == 0:
			tb.remove(uint32(ei))
			delete(model, string(k))
		case !ok:
			ei := tb.insert(k)
			tb.at(ei).tat = uint64(i)
			model[string(k)] = uint64(i)
		}
		require.Equal(t, len(model), tb.len())
	}
	// Every live entry is reachable; every other one is on a free list or
	// the second of a live pair.
	live, pairs := 0, 0
	for i := uint32(0); i < tb.nent; i++ {
		e := tb.at(i)
		if !e.isFree() {
			live++
			require.Equal(t, int64(i), tb.find(tb.keyOf(e)))
			if e.isPair() {
				pairs++
				require.Zero(t, i%2, "a pair starts at an even index")
				require.True(t, tb.at(i+1).isFree(), "a pair's second entry reads as free")
			}
		}
	}
	require.Equal(t, len(model), live)
	if pairKey > inlineKey { // none on a big-endian machine
		require.Greater(t, pairs, 100)
	}
	for _, ei := range tb.freeL {
		require.True(t, tb.at(ei).isFree())
	}
	for _, ei := range tb.freeP {
		require.True(t, tb.at(ei).isFree() && tb.at(ei+1).isFree())
	}
	require.Equal(t, int(tb.nent), live+pairs+len(tb.freeL)+2*len(tb.freeP))
}

// TestPairAfterOddEntry: a pair must start at an even index, so after an
// odd number of entries one is skipped; it must read as free to whatever
// walks the entries (the load's expiry pass once took it for a key).
func TestPairAfterOddEntry(t *testing.T) {
	if pairKey == inlineKey {
		t.Skip("no pairs on a big-endian machine")
	}
	tb := newTable(maphash.MakeSeed())
	defer tb.release()
	require.Equal(t, uint32(0), tb.insert([]byte("one")))
	require.Equal(t, uint32(2), tb.insert([]byte("a pair-sized key!")))
	require.Equal(t, uint32(4), tb.nent)
	require.True(t, tb.at(1).isFree())
	require.True(t, tb.at(3).isFree())
	require.Equal(t, uint32(1), tb.insert([]byte("two")), "the skipped entry is used next")
}

// TestEntryKeyClasses stores a key of every length from 0 to 40 next to
// its neighbours and checks that each reads back whole, that a pair's key
// leaves the second entry's flags (free) alone, and that expiry, flags and
// TAT survive the key being written, and the key them.
func TestEntryKeyClasses(t *testing.T) {
	tb := newTable(maphash.MakeSeed())
	defer tb.release()
	var eis []uint32
	var keys [][]byte
	for n := 0; n <= 40; n++ {
		k := make([]byte, n)
		for i := range k {
			k[i] = 0xfe // a stray write over the pair's flags byte would clear "free"
		}
		ei := tb.insert(k)
		e := tb.at(ei)
		e.tat = ^uint64(0)
		e.setExp(-19_000_000_000_000)
		e.setDirty(true)
		e.setOnDisk()
		eis, keys = append(eis, ei), append(keys, k)
		require.Equal(t, n > inlineKey && n <= pairKey, e.isPair(), "length %d", n)
		require.Equal(t, n > pairKey, e.inArena(), "length %d", n)
	}
	for i, ei := range eis {
		e := tb.at(ei)
		require.Equal(t, keys[i], tb.keyOf(e))
		require.Equal(t, len(keys[i]), e.keyLen())
		require.Equal(t, int64(-19_000_000_000_000), e.exp())
		require.True(t, e.isDirty() && e.isOnDisk() && !e.isFree())
		require.Equal(t, ^uint64(0), e.tat)
		if e.isPair() {
			require.Equal(t, uint64(metaFree>>56), tb.at(ei+1).meta>>56, "the second entry's flags: free, nothing else")
		}
		e.setExp(noExpiry)
		require.Equal(t, int64(noExpiry), e.exp())
		e.setExp(19_000_000_000_000)
		require.Equal(t, int64(19_000_000_000_000), e.exp())
		require.Equal(t, keys[i], tb.keyOf(e))
	}
}

// TestTableGrowsIncrementally checks that growing the index moves it a few
// slots per insert (no insert rebuilds a big index at once) and that every
// key stays reachable, and removable, while both indexes are in use.
func TestTableGrowsIncrementally(t *testing.T) {
	tb := newTable(maphash.MakeSeed())
	defer tb.release()
	rng := rand.New(rand.NewPCG(3, 4))
	var keys [][]byte
	var eis []uint32
	rebuilds, midChecks := 0, 0
	for i := 0; i < 200_000; i++ {
		wasOld, pos := tb.old != nil, tb.oldPos
		k := []byte(fmt.Sprintf("user:%012d", i))
		keys, eis = append(keys, k), append(eis, tb.insert(k))
		switch {
		case tb.old != nil && !wasOld:
			rebuilds++
			require.Zero(t, tb.oldPos, "a rebuild starts with nothing moved")
		case wasOld && tb.old != nil:
			require.LessOrEqual(t, tb.oldPos-pos, tb.migStep)
			require.Equal(t, migrateStep, tb.migStep, "a growing rebuild moves the minimum")
		}
		if tb.old != nil && len(tb.old) >= 1<<16 && tb.oldPos > len(tb.old)/2 && midChecks < 3 {
			// Halfway through moving a big index: every key is found.
			midChecks++
			for j, k := range keys {
				require.Equal(t, int64(eis[j]), tb.find(k), "key %q during a rebuild", k)
			}
		}
		if i%3 == 0 { // remove a random earlier key (maybe still in the old index)
			j := rng.IntN(len(keys))
			tb.remove(eis[j])
			require.Equal(t, int64(-1), tb.find(keys[j]))
			keys[j], eis[j] = keys[len(keys)-1], eis[len(eis)-1]
			keys, eis = keys[:len(keys)-1], eis[:len(eis)-1]
		}
	}
	require.Greater(t, rebuilds, 10)
	require.Equal(t, 3, midChecks)
	for j, k := range keys {
		require.Equal(t, int64(eis[j]), tb.find(k))
	}
	require.Equal(t, len(keys), tb.len())
}

// TestTableShrinkingRebuild deletes most keys of a big table, then churns
// until tombstones start a rebuild into a small index, and keeps inserting:
// the old index must be moved before the small one fills (an insert once
// looped forever looking for a free slot there).
func TestTableShrinkingRebuild(t *testing.T) {
	tb := newTable(maphash.MakeSeed())
	defer tb.release()
	var keys [][]byte
	for i := 0; len(tb.idx) < 4096 || tb.old != nil || (tb.used+2)*4 < len(tb.idx)*3; i++ {
		k := []byte(fmt.Sprintf("a%d", i))
		tb.insert(k)
		keys = append(keys, k)
	}
	// Keep 7 keys whose home is in the upper half of the big index, so the
	// move reaches them late.
	var kept [][]byte
	for _, k := range keys {
		if len(kept) < 7 && tb.hash(k)>>63 == 1 {
			kept = append(kept, k)
			continue
		}
		tb.remove(uint32(tb.find(k)))
	}
	for c := 0; tb.old == nil; c++ { // tombstones pile up until a rebuild
		tb.remove(tb.insert([]byte(fmt.Sprintf("c%d", c))))
	}
	require.Less(t, len(tb.idx), len(tb.old), "a shrinking rebuild")
	done := make(chan struct{})
	rebuiltMidMove := false
	go func() {
		defer close(done)
		for i := 0; i < 200; i++ {
			k := []byte(fmt.Sprintf("n%d", i))
			size, moving := len(tb.idx), tb.old != nil
			tb.insert(k)
			kept = append(kept, k)
			if len(tb.idx) != size && moving {
				rebuiltMidMove = true // the safety net in rehash, a stall
			}
		}
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("inserts after a shrinking rebuild do not finish")
	}
	require.False(t, rebuiltMidMove, "the move ended before the next rebuild")
	for _, k := range kept {
		require.GreaterOrEqual(t, tb.find(k), int64(0), "key %q", k)
	}
	require.Equal(t, len(kept), tb.len())
}

// TestTableRebuildDuringMove drives rehash's safety net directly (inserts
// never reach it): a rebuild started while the previous move is unfinished
// puts both indexes into the new one and every key stays reachable.
func TestTableRebuildDuringMove(t *testing.T) {
	tb := newTable(maphash.MakeSeed())
	defer tb.release()
	var keys [][]byte
	for i := 0; tb.old == nil || len(tb.old) < 1024; i++ {
		k := []byte(fmt.Sprintf("k%d", i))
		tb.insert(k)
		keys = append(keys, k)
	}
	require.Less(t, tb.oldPos, len(tb.old), "a move in progress")
	tb.rehash()
	require.True(t, tb.old == nil, "the rebuild ends the unfinished move")
	for _, k := range keys {
		require.GreaterOrEqual(t, tb.find(k), int64(0), "key %q", k)
	}
	require.Equal(t, len(keys), tb.len())
}

func TestTableArenaCompacts(t *testing.T) {
	tb := newTable(maphash.MakeSeed())
	big := make([]byte, 4096)
	for round := 0; round < 20; round++ {
		var idx []uint32
		for i := 0; i < 1000; i++ {
			k := append([]byte(fmt.Sprintf("%d:%d:", round, i)), big...)
			idx = append(idx, tb.insert(k))
		}
		for _, ei := range idx {
			tb.remove(ei)
		}
	}
	require.Equal(t, 0, tb.len())
	// 20 rounds wrote ~80 MB of keys; garbage collection of the arena keeps
	// it to a few pages.
	require.Less(t, tb.arena.total, 16<<20)
}

func TestTableLongKey(t *testing.T) {
	tb := newTable(maphash.MakeSeed())
	k := make([]byte, 3<<20)
	k[len(k)-1] = 1
	ei := tb.insert(k)
	require.Equal(t, int64(ei), tb.find(k))
	tb.insert([]byte("short"))
	require.Equal(t, int64(ei), tb.find(k))
}

// BenchmarkTableFind looks up 17-byte keys (each in a pair of entries) in random
// order, so a big table pays its cache and TLB misses as a server does.
func BenchmarkTableFind(b *testing.B) {
	sizes := []int{100_000, 1_000_000}
	if os.Getenv("CELLSERVER_BENCH_10M") != "" {
		sizes = append(sizes, 10_000_000)
	}
	for _, n := range sizes {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			tb := newTable(maphash.MakeSeed())
			defer tb.release()
			keys := make([][]byte, n)
			for i := range keys {
				keys[i] = []byte(fmt.Sprintf("user:%012d", i))
				tb.insert(keys[i])
			}
			rand.New(rand.NewPCG(1, 2)).Shuffle(n, func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if tb.find(keys[i%n]) < 0 {
					b.Fatal("missing")
				}
			}
		})
	}
}

func TestEntryMetaPacking(t *testing.T) {
	tb := newTable(maphash.MakeSeed())
	long := []byte("a key that is longer than sixteen bytes")
	pair := []byte("a twenty-byte key!!!")
	for _, key := range [][]byte{[]byte(""), []byte("k"), []byte("exactly16bytes!!"), pair, long} {
		ei := tb.insert(key)
		e := tb.at(ei)
		for _, exp := range []int64{noExpiry, 0, -1, -2, -5_000_000_000_000, 19_000_000_000_000, 1_700_000_000_000} {
			e.setExp(exp)
			e.setDirty(true)
			require.Equal(t, exp, e.exp())
			require.True(t, e.isDirty())
			e.setDirty(false)
			require.False(t, e.isDirty())
			require.Equal(t, exp, e.exp())
			require.Equal(t, string(key), string(tb.keyOf(e)))
			require.False(t, e.isFree())
		}
		tb.remove(ei)
		require.True(t, tb.at(ei).isFree())
	}
	require.Equal(t, uintptr(32), unsafe.Sizeof(entry{}))
}

// An expiry beyond the 50 bits an entry keeps (CLUSTER IMPORTSTATE takes
// any) is clamped: never read back as no expiry, never wrapped into the
// past.
func TestEntryExpiryClamped(t *testing.T) {
	var e entry
	for _, ms := range []int64{metaNoExp - 1, metaNoExp, metaNoExp + 1, 1 << 55, math.MaxInt64 - 1} {
		e.setExp(ms)
		require.Equal(t, int64(metaNoExp-1), e.exp(), "%d", ms)
	}
	for _, ms := range []int64{-metaNoExp, -metaNoExp - 1, -1 << 60, math.MinInt64} {
		e.setExp(ms)
		require.Equal(t, int64(-metaNoExp), e.exp(), "%d", ms)
	}
	e.setExp(noExpiry)
	require.Equal(t, int64(noExpiry), e.exp())
	require.Zero(t, e.meta>>metaLenShift, "the length and flags are untouched")
}

// Compacting the arena rewrites arena keys only: pairs and inline keys
// beside them keep their keys.
func TestArenaCompactsBesidePairs(t *testing.T) {
	tb := newTable(maphash.MakeSeed())
	defer tb.release()
	big := make([]byte, 4096)
	var keep [][]byte
	var keepEI []uint32
	for round := 0; round < 3; round++ {
		var drop []uint32
		for i := 0; i < 1000; i++ {
			for _, k := range [][]byte{fmt.Appendf(nil, "s%d:%d", round, i), fmt.Appendf(nil, "a-pair-key:%d:%d", round, i), append(fmt.Appendf(nil, "%d:%d:", round, i), big...)} {
				ei := tb.insert(k)
				if len(k) > pairKey && i%10 != 0 {
					drop = append(drop, ei)
				} else {
					keep, keepEI = append(keep, k), append(keepEI, ei)
				}
			}
		}
		for _, ei := range drop {
			tb.remove(ei)
		}
	}
	require.Less(t, tb.arena.garbage, 3*arenaPageSize, "compacted")
	for i, k := range keep {
		require.Equal(t, int64(keepEI[i]), tb.find(k))
		require.Equal(t, k, tb.keyOf(tb.at(keepEI[i])))
	}
}

// TestCandidateFindsDisplacedKeys: warm prefetches the entry candidate
// names, found from the index alone. It must be the key's own entry,
// keys that sit past their home slot included (prefetching the home
// slot's entry, as warm once did, misses theirs), and -1 for absent keys.
func TestCandidateFindsDisplacedKeys(t *testing.T) {
	tb := newTable(maphash.MakeSeed())
	defer tb.release()
	const n = 5000
	for i := 0; i < n; i++ {
		tb.insert([]byte(fmt.Sprintf("live:%012d", i)))
	}
	displaced := 0
	for i := 0; i < n; i++ {
		k := []byte(fmt.Sprintf("live:%012d", i))
		h := tb.hash(k)
		ei := tb.find(k)
		require.GreaterOrEqual(t, ei, int64(0))
		// The candidate is a guess by the hash's upper 32 bits: another
		// key with the same ones before it (rare, with a random seed) is a
		// right answer for the guess, which the lookup then checks.
		sameTag := func(cand int64, h uint64) bool { return tb.hashAt(uint32(cand))>>32 == h>>32 }
		if c := tb.candidate(tb.idx, tb.shift, h); c != ei {
			require.True(t, c >= 0 && sameTag(c, h), "key %s: candidate %d, entry %d", k, c, ei)
		}
		if v := tb.idx[home(h, tb.shift)]; v <= idxTomb || int64(uint32(v)-2) != ei {
			displaced++
		}
		hg := tb.hash([]byte(fmt.Sprintf("gone:%012d", i)))
		if c := tb.candidate(tb.idx, tb.shift, hg); c != -1 {
			require.True(t, sameTag(c, hg), "gone:%012d: candidate %d", i, c)
		}
	}
	require.Greater(t, displaced, n/10, "too few keys past their home slot to test them")
}

// TestWarmCandidateDuringMigration: while the index is rebuilt (keys not
// yet moved are found in the old one), warm still names each key's own
// entry, and none for a removed key.
func TestWarmCandidateDuringMigration(t *testing.T) {
	sh := newShard(0, maphash.MakeSeed(), Config{Shards: 1, Clock: &Clock{}}, nil)
	defer sh.t.release()
	key := func(i int) []byte { return []byte(fmt.Sprintf("mig:%d", i)) }
	checked := 0
	for i := 0; i < 50000; i++ {
		sh.t.insert(key(i))
		if i%7 == 3 {
			sh.t.remove(uint32(sh.t.find(key(i - 3))))
		}
		if sh.t.old == nil || i%16 != 0 {
			continue
		}
		ops := make([]*envelope, 8)
		for j := range ops {
			ops[j] = (&GetReq{Key: key((i*31 + j*977) % (i + 1))}).route()
		}
		sh.warm(ops)
		for _, op := range ops {
			require.Equal(t, sh.t.find(op.key), op.cand, "key %s at insert %d", op.key, i)
			checked++
		}
	}
	require.Greater(t, checked, 200, "too few checks during a migration")
}
