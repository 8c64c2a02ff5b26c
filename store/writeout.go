package store

import (
	"bytes"
	"slices"

	"github.com/cockroachdb/pebble/v2"
)

// dirtyItem is one key of a write-out, in 16 bytes: a changed key, whose
// disk key is sets[start:start+n] followed by its value, or a deleted one
// (delBit set in pos), whose disk key is dels[start:start+n]. seq says
// which came last; it wraps, and is compared as a difference (a write-out
// spans far fewer than 2^31 changes).
type dirtyItem struct {
	pos uint64
	n   uint32
	seq uint32
}

const delBit = 1 << 63

func (it dirtyItem) del() bool  { return it.pos&delBit != 0 }
func (it dirtyItem) start() int { return int(it.pos &^ delBit) }

// after reports whether it came after o.
func (it dirtyItem) after(o dirtyItem) bool { return int32(it.seq-o.seq) > 0 }

// writeBufs is one write-out: copies of the changed keys with their values,
// and the keys deleted, of one shard. The shard's owner fills it; the
// committer sorts it into a Pebble batch (so the owner never spends that
// time), then hands it back for reuse.
type writeBufs struct {
	items   []dirtyItem
	perm    []uint32 // items' order by disk key (see sort)
	sets    []byte   // disk key then value, back to back
	dels    []byte   // disk keys back to back, delEnds marking where each ends
	delEnds []int
	delSeqs []uint64

	slotLo, slotHi int // the shard's slot range
	slotCount      []uint32
}

func newWriteBufs(slotLo, slotHi int) *writeBufs {
	return &writeBufs{slotLo: slotLo, slotHi: slotHi}
}

func (w *writeBufs) empty() bool { return len(w.items) == 0 && len(w.delEnds) == 0 }

// changes is how many keys the write-out holds (before merging repeats).
func (w *writeBufs) changes() int64 { return int64(len(w.items) + len(w.delEnds)) }

// addSet appends a changed key's disk key and value.
func (w *writeBufs) addSet(slot int, key []byte, value []byte, seq uint64) {
	start := len(w.sets)
	w.sets = append(w.sets, prefixKey, byte(slot>>8), byte(slot))
	w.sets = append(w.sets, key...)
	w.items = append(w.items, dirtyItem{pos: uint64(start), n: uint32(len(w.sets) - start), seq: uint32(seq)})
	w.sets = append(w.sets, value...)
}

// addDelete appends a deleted key's disk key.
func (w *writeBufs) addDelete(slot int, key []byte, seq uint64) {
	w.dels = append(append(w.dels, prefixKey, byte(slot>>8), byte(slot)), key...)
	w.delEnds = append(w.delEnds, len(w.dels))
	w.delSeqs = append(w.delSeqs, seq)
}

// build appends the write-out to b: a Set for every changed key and a
// Delete for every deleted one, each key once with its latest state (the
// highest seq), sorted by disk key. A sorted batch is what Pebble ingests
// fastest (its sort of a large batch, and its memtable inserts, are then
// linear), which is why deletions wait for the write-out.
func (w *writeBufs) build(b *pebble.Batch) {
	start := 0
	for i, end := range w.delEnds {
		w.items = append(w.items, dirtyItem{pos: uint64(start) | delBit, n: uint32(end - start), seq: uint32(w.delSeqs[i])})
		start = end
	}
	perm := w.sort()
	for i := 0; i < len(perm); {
		// A key deleted, created again or changed after its copy shows up
		// more than once: the last of them is its state.
		last := w.items[perm[i]]
		key := w.key(last)
		j := i + 1
		for ; j < len(perm) && bytes.Equal(w.key(w.items[perm[j]]), key); j++ {
			if it := w.items[perm[j]]; it.after(last) {
				last = it
			}
		}
		if last.del() {
			_ = b.Delete(key, nil)
		} else {
			v := last.start() + int(last.n)
			_ = b.Set(key, w.sets[v:v+valueLen], nil)
		}
		i = j
	}
}

// size is about how many bytes build appends.
func (w *writeBufs) size() int { return len(w.sets) + len(w.dels) + 4*(len(w.items)+len(w.delEnds)) }

// sort orders the items by disk key into perm: a counting sort by slot
// (the shard owns a contiguous slot range), then a sort of each slot's few
// keys by their bytes, on the copies, so that comparisons do not chase the
// table.
func (w *writeBufs) sort() []uint32 {
	if len(w.slotCount) == 0 {
		w.slotCount = make([]uint32, w.slotHi-w.slotLo+1)
	}
	cnt := w.slotCount
	clear(cnt)
	for _, it := range w.items {
		cnt[w.slot(it)-w.slotLo+1]++
	}
	for i := 1; i < len(cnt); i++ {
		cnt[i] += cnt[i-1]
	}
	perm := slices.Grow(w.perm[:0], len(w.items))[:len(w.items)]
	for i, it := range w.items {
		s := w.slot(it) - w.slotLo
		perm[cnt[s]] = uint32(i)
		cnt[s]++
	}
	// cnt[i] is now the end of slot lo+i's run (and the start of the next).
	start := uint32(0)
	for _, end := range cnt[:len(cnt)-1] {
		if end-start > 1 {
			slices.SortFunc(perm[start:end], func(a, b uint32) int {
				return bytes.Compare(w.key(w.items[a]), w.key(w.items[b]))
			})
		}
		start = end
	}
	w.perm = perm
	return perm
}

// key returns the disk key of an item.
func (w *writeBufs) key(it dirtyItem) []byte {
	if it.del() {
		return w.dels[it.start() : it.start()+int(it.n)]
	}
	return w.sets[it.start() : it.start()+int(it.n)]
}

// slot returns an item's hash slot, from its disk key.
func (w *writeBufs) slot(it dirtyItem) int {
	k := w.key(it)
	return int(k[1])<<8 | int(k[2])
}

// reset empties w for reuse, giving back a burst's worth of memory: a
// buffer four times bigger than this write-out needed is dropped.
func (w *writeBufs) reset() {
	n := len(w.items)
	if cap(w.items) > 1<<16 && n < cap(w.items)/4 {
		w.items, w.perm = nil, nil
	}
	if cap(w.sets) > 1<<20 && len(w.sets) < cap(w.sets)/4 {
		w.sets = nil
	}
	if cap(w.delEnds) > 1<<16 && len(w.delEnds) < cap(w.delEnds)/4 {
		w.dels, w.delEnds, w.delSeqs = nil, nil, nil
	}
	w.items, w.perm = w.items[:0], w.perm[:0]
	w.sets, w.dels, w.delEnds, w.delSeqs = w.sets[:0], w.dels[:0], w.delEnds[:0], w.delSeqs[:0]
}
