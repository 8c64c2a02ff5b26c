package store

import (
	"bytes"
	"encoding/binary"
	"hash/maphash"
	"math"
	"unsafe"

	"github.com/cellserver/cellserver/limit"
)

// noExpiry is the expireAt value of a key without a TTL.
const noExpiry = math.MaxInt64

// inlineKey is the longest key stored inside its entry; pairKey (31 on
// little-endian machines, see pair_le.go) the longest stored in a pair of
// entries (see below); longer keys live in the table's byte arena.
const inlineKey = 16

// entry is one key's record: 32 bytes, half a cache line. It holds no Go
// pointers, so the garbage collector never scans the key table.
//
// Where the key is depends on its length:
//   - up to 16 bytes (inlineKey): in k;
//   - 17 to 31 bytes (pairKey): in a pair of entries, an even index and the
//     next, which share one 64-byte cache line. The key starts at k and runs
//     on over the second entry's first 15 bytes; that entry's last byte
//     (the top byte of its meta, where the flags are) says "free", so
//     everything that walks the entries skips it as it skips a free one;
//   - longer: in the arena; k holds its location (8 bytes) and length (4).
//
// The pair is what keeps a typical rate-limit key ("rl:user:12345678",
// "ratelimit:ip:10.1.2.3") to one cache miss: with the key in the arena a
// lookup at 10M keys cost a third random memory access.
//
// The value knows its kind (meta's kind bits): a GCRA state (kind 0, what
// CL.THROTTLE writes) keeps its TAT inline in tat, so GCRA keys are as small
// as they ever were. An FW or SWC state is kept inline too, in a wide entry:
// one that owns the next entry as well, as a pair does (whatever its key's
// length), the state's fields in its tat and in the second entry's k (see
// wideRoom). Its key and state then share one cache line, as a GCRA key's
// do. Any other CL.LIMIT state (limit.Encode bytes), or one that does not
// fit the room, lives in the arena, length-prefixed, and tat holds its
// location.
type entry struct {
	tat  uint64          // GCRA: theoretical arrival time, Unix ns (the value GET returns); else the state's arena location
	meta uint64          // flags << 56 | key length << 50 | expiry (50 bits, signed)
	k    [inlineKey]byte // the key if short, else its start (pair) or arena location
}

const (
	metaExpBits  = 50
	metaExpMask  = 1<<metaExpBits - 1
	metaLenShift = metaExpBits
	metaLenMask  = 63
	metaArenaKey = 63 // length field of a key in the arena
	// Flags, in meta's top byte: the byte a pair's second entry keeps.
	metaFree   = 1 << 56
	metaDirty  = 1 << 57
	metaOnDisk = 1 << 58 // some state of this key was written out since it was created
	// The kind bits: 0 for a GCRA TAT inline, else the limit.Kind of a state
	// kept in the arena or, with metaInline, in the wide room.
	metaKindShift = 59
	metaKindMask  = 7
	metaWide      = 1 << 62 // the entry owns the next one too: room for an inline state
	metaInline    = 1 << 63 // the (non-GCRA) state is in the wide room, not the arena
	// metaNoExp is the stored expiry that stands for noExpiry: CL.THROTTLE's
	// expiries are Unix ms within ±1.9e13 (see package gcra), far from 2^49;
	// setExp clamps any other.
	metaNoExp = 1<<(metaExpBits-1) - 1
)

// exp returns the expiry in Unix ms (the key is gone once now_ms > exp), or
// noExpiry.
func (e *entry) exp() int64 {
	v := int64(e.meta<<(64-metaExpBits)) >> (64 - metaExpBits) // sign-extended
	if v == metaNoExp {
		return noExpiry
	}
	return v
}

// setExp sets the expiry. One beyond what the field holds (about 17,800
// years either side of 1970, only reachable through CLUSTER IMPORTSTATE)
// is clamped to the nearest it holds: as far off, in effect, and never
// mistaken for no expiry or wrapped into the past.
func (e *entry) setExp(ms int64) {
	if ms == noExpiry {
		ms = metaNoExp
	} else {
		ms = min(max(ms, -metaNoExp), metaNoExp-1)
	}
	e.meta = e.meta&^metaExpMask | uint64(ms)&metaExpMask
}

func (e *entry) isFree() bool { return e.meta&metaFree != 0 }

// outKind is the kind of a state other than a GCRA TAT (in the arena or the
// wide room), 0 for a GCRA TAT in tat.
func (e *entry) outKind() limit.Kind { return limit.Kind(e.meta >> metaKindShift & metaKindMask) }

// kind is the algorithm of the entry's state.
func (e *entry) kind() limit.Kind {
	if k := e.outKind(); k != 0 {
		return k
	}
	return limit.KindGCRA
}
func (e *entry) isDirty() bool  { return e.meta&metaDirty != 0 }
func (e *entry) isOnDisk() bool { return e.meta&metaOnDisk != 0 }
func (e *entry) setOnDisk()     { e.meta |= metaOnDisk }

func (e *entry) setDirty(d bool) {
	if d {
		e.meta |= metaDirty
	} else {
		e.meta &^= metaDirty
	}
}

// lenField is the key-length field: the length, or metaArenaKey.
func (e *entry) lenField() int { return int(e.meta >> metaLenShift & metaLenMask) }

// keyLen returns the length of the entry's key.
func (e *entry) keyLen() int {
	if n := e.lenField(); n != metaArenaKey {
		return n
	}
	return int(binary.LittleEndian.Uint32(e.k[8:12]))
}

// isPair reports that the entry's key takes the next entry too.
func (e *entry) isPair() bool { return pairLen(e.lenField()) }

// isWide reports that the entry owns the next one as room for a state.
func (e *entry) isWide() bool { return e.meta&metaWide != 0 }

// inlineState reports that the entry's state is in its wide room.
func (e *entry) inlineState() bool { return e.meta&metaInline != 0 }

// wideKind reports whether a state of kind k is kept in a wide entry.
func wideKind(k limit.Kind) bool { return k == limit.KindFW || k == limit.KindSWC }

// inArena reports that the entry's key is in the arena.
func (e *entry) inArena() bool { return e.lenField() == metaArenaKey }

// pairLen reports that a key of n bytes is kept in a pair of entries.
func pairLen(n int) bool { return n > inlineKey && n <= pairKey }

const (
	entryPageBits = 16 // 2 MiB pages: one huge page each (see flatmem.go)
	entryPageSize = 1 << entryPageBits
	arenaPageSize = 2 << 20 // one huge page each, like the entry pages
	idxEmpty      = 0
	idxTomb       = 1
	minIdxSize    = 16
)

// table is an open-addressing hash table of limiter keys, owned by one shard
// goroutine (not safe for concurrent use). Entries live in fixed-size pages so
// growth never copies or doubles them; an entry's index is stable for its
// lifetime, which is what SCAN's cursor and the expiry sweep walk over.
//
// The index is rebuilt without touching entries or keys: a key's home slot
// is the top bits of its hash, which its index value keeps (the top 32), so
// a bigger index places every value from the value alone. The rebuild is
// incremental, as Redis's dict rehashing is: the previous index (old) stays
// beside the new one and each insert moves the next migStep of its
// slots, so growing a table of millions of keys never stalls the shard
// (rehashing them all at once takes a large fraction of a second). Lookups
// meanwhile probe the new index, then the old one.
type table struct {
	seed maphash.Seed
	// idx holds, per slot, hashTag<<32 | (entry index + 2), where hashTag is
	// the top 32 bits of the key's hash; 0 empty, 1 tombstone. A key's home
	// slot is the top log2(len(idx)) bits of its hash (hash >> shift).
	idx   []uint64
	shift uint
	used  int // non-empty idx slots (live + tombstones)
	live  int
	// old is the index being migrated into idx (nil: none); its slots below
	// oldPos are moved (tombstones left, so probe chains stay whole).
	old      []uint64
	oldShift uint
	oldPos   int
	migStep  int // old slots each insert moves (see rehash)
	pages    [][]entry
	nent     uint32   // entries handed out (high-water mark)
	freeL    []uint32 // free entry indexes, reused before growing
	freeP    []uint32 // free pairs (their even first index), likewise
	arena    arena
	scratch  [limit.SWCStateLen]byte // state's buffer when given none
}

// migrateStep is the fewest old index slots each insert moves. More ends a
// migration sooner, and while it lasts a lookup that misses the new index
// probes the old one too. Moving is cheap: old slots are read in order and,
// homes being the top bits of the hash, land in order in the new index (128
// slots: 16 cache lines read, 32 written).
const migrateStep = 128

func newTable(seed maphash.Seed) *table {
	return &table{seed: seed, idx: make([]uint64, minIdxSize), shift: 64 - 4}
}

// home is the first slot of hash h in an index of 64-shift bits.
func home(h uint64, shift uint) uint64 { return h >> shift }

func (t *table) len() int { return t.live }

// bytes is the memory the table holds: index, entry pages and arena pages.
func (t *table) bytes() int64 {
	n := int64(len(t.idx)+len(t.old))*8 + int64(len(t.pages))*entryPageSize*int64(unsafe.Sizeof(entry{})) + int64(cap(t.freeL)+cap(t.freeP))*4
	for _, p := range t.arena.pages {
		n += int64(cap(p))
	}
	return n
}

func (t *table) hash(key []byte) uint64 { return maphash.Bytes(t.seed, key) }

func (t *table) at(i uint32) *entry { return &t.pages[i>>entryPageBits][i&(entryPageSize-1)] }

// keyOf returns the key of e. The slice aliases the table: use it before the
// next change to the table.
func (t *table) keyOf(e *entry) []byte {
	switch n := e.lenField(); {
	case n <= inlineKey:
		return e.k[:n:n]
	case n <= pairKey:
		// The pair is one run of memory (an entry page, or one heap
		// array): the key goes on into the next entry.
		return unsafe.Slice(&e.k[0], pairKey)[:n:n]
	}
	return t.arena.get(binary.LittleEndian.Uint64(e.k[:8]), uint32(e.keyLen()))
}

// prefetchKey prefetches the bytes of e's key if they are in the arena
// (both cache lines when the key straddles two).
func (t *table) prefetchKey(e *entry) {
	if e.isFree() || !e.inArena() {
		return
	}
	k := t.keyOf(e)
	p := uintptr(unsafe.Pointer(unsafe.SliceData(k)))
	prefetch(p)
	if last := p + uintptr(len(k)) - 1; last>>6 != p>>6 {
		prefetch(last)
	}
}

// setKey stores key into e, which must have room for it (a pair for a
// pair-sized key), inline or in the arena.
func (t *table) setKey(e *entry, key []byte, a *arena) {
	e.meta &^= metaLenMask << metaLenShift
	switch {
	case len(key) <= inlineKey:
		copy(e.k[:], key)
	case len(key) <= pairKey:
		copy(unsafe.Slice(&e.k[0], pairKey), key)
	default:
		e.meta |= metaArenaKey << metaLenShift
		binary.LittleEndian.PutUint64(e.k[:8], a.put(key))
		binary.LittleEndian.PutUint32(e.k[8:12], uint32(len(key)))
		return
	}
	e.meta |= uint64(len(key)) << metaLenShift
}

// find returns the entry index of key, or -1.
func (t *table) find(key []byte) int64 { return t.findHash(key, t.hash(key)) }

// findHash is find with the key's hash already computed.
func (t *table) findHash(key []byte, h uint64) int64 {
	if ei := t.probe(t.idx, t.shift, key, h); ei >= 0 || t.old == nil {
		return ei
	}
	return t.probe(t.old, t.oldShift, key, h)
}

// probe looks key up in one index.
func (t *table) probe(idx []uint64, shift uint, key []byte, h uint64) int64 {
	tag, mask := h>>32, uint64(len(idx)-1)
	for i := home(h, shift); ; i = (i + 1) & mask {
		var ei int64
		if i, ei = nextTagged(idx, i, mask, tag); ei < 0 {
			return -1
		}
		if e := t.at(uint32(ei)); e.keyLen() == len(key) && bytes.Equal(t.keyOf(e), key) {
			return ei
		}
	}
}

// prefetchHome prefetches the index slots where a lookup of hash h
// starts (warm's first step, for one key).
func (t *table) prefetchHome(h uint64) {
	prefetch(uintptr(unsafe.Pointer(&t.idx[home(h, t.shift)])))
	if t.old != nil { // a key not moved yet is found there
		prefetch(uintptr(unsafe.Pointer(&t.old[home(h, t.oldShift)])))
	}
}

// prefetchCandidate prefetches the entry a lookup of hash h most likely
// compares first (warm's second step, for one key; not a key kept in the
// arena, which only reading the entry would find).
func (t *table) prefetchCandidate(h uint64) {
	c := t.candidate(t.idx, t.shift, h)
	if c < 0 && t.old != nil {
		c = t.candidate(t.old, t.oldShift, h)
	}
	if c >= 0 {
		prefetch(uintptr(unsafe.Pointer(t.at(uint32(c)))))
	}
}

// candidate returns the entry index of the first slot from h's home in idx
// whose tag matches h, or -1: the entry probe will most likely compare
// first, found from the index alone. warm prefetches it: at the index's
// load factors (3/8 to 3/4) a fifth to three eighths of keys sit past
// their home slot, and prefetching the home slot's entry would miss theirs.
// For an absent key it walks to an empty slot, as the lookup then does.
func (t *table) candidate(idx []uint64, shift uint, h uint64) int64 {
	_, ei := nextTagged(idx, home(h, shift), uint64(len(idx)-1), h>>32)
	return ei
}

// nextTagged walks idx from slot i to the first slot whose value carries
// tag, returning it and its entry index, or the empty slot that ends the
// walk and -1.
func nextTagged(idx []uint64, i, mask, tag uint64) (uint64, int64) {
	for ; ; i = (i + 1) & mask {
		v := idx[i]
		if v == idxEmpty {
			return i, -1
		}
		if v != idxTomb && v>>32 == tag {
			return i, int64(uint32(v) - 2)
		}
	}
}

// insert adds key, which must not be present, and returns its entry index.
func (t *table) insert(key []byte) uint32 { return t.insertHash(key, t.hash(key)) }

// insertHash is insert with the key's hash already computed.
func (t *table) insertHash(key []byte, h uint64) uint32 { return t.insertEntry(key, h, false) }

// insertFor is insertHash for a key about to hold a state of kind k: a
// wide entry if k's states are kept inline.
func (t *table) insertFor(key []byte, h uint64, k limit.Kind) uint32 {
	return t.insertEntry(key, h, wideKind(k))
}

// insertEntry is insertHash, of a wide entry if wide.
func (t *table) insertEntry(key []byte, h uint64, wide bool) uint32 {
	if t.old != nil {
		t.migrate(t.migStep)
	}
	if (t.used+1)*4 >= len(t.idx)*3 {
		t.rehash()
	}
	var ei uint32
	if wide || pairLen(len(key)) {
		ei = t.allocPair()
	} else {
		ei = t.allocOne()
	}
	e := t.at(ei)
	e.meta = 0
	if wide {
		e.meta = metaWide
	}
	e.tat = 0
	e.setExp(noExpiry)
	t.setKey(e, key, &t.arena)
	t.place(h>>32<<32 | uint64(ei+2))
	t.live++
	return ei
}

// allocOne hands out a free entry: a freed one, half of a free pair, or a
// new one. Split pairs and freed singles are not merged back into pairs,
// so a keyspace that turns from short keys to pair-sized ones keeps its
// old entries besides new pairs (at most the peak of short keys plus
// twice the peak of pair keys, never more) until FLUSHALL.
func (t *table) allocOne() uint32 {
	if n := len(t.freeL); n > 0 {
		ei := t.freeL[n-1]
		t.freeL = t.freeL[:n-1]
		return ei
	}
	if n := len(t.freeP); n > 0 {
		ei := t.freeP[n-1]
		t.freeP = t.freeP[:n-1]
		t.freeL = append(t.freeL, ei+1) // free since allocPair marked it
		return ei
	}
	return t.grow(1)
}

// allocPair hands out a free pair (its first, even, index): a freed one or
// a new one. The second entry is marked free for whatever walks the
// entries; the key runs over all but its flags, so it stays marked until
// the pair is split (allocOne).
func (t *table) allocPair() uint32 {
	var ei uint32
	if n := len(t.freeP); n > 0 {
		ei = t.freeP[n-1]
		t.freeP = t.freeP[:n-1]
	} else {
		if t.nent%2 == 1 { // the odd entry before it stays free
			pad := t.grow(1)
			*t.at(pad) = entry{meta: metaFree}
			t.freeL = append(t.freeL, pad)
		}
		ei = t.grow(2)
	}
	*t.at(ei + 1) = entry{meta: metaFree}
	return ei
}

// grow hands out the next n (1, or 2 from an even index) never-used
// entries, adding a page when needed (a page holds an even number, so a
// pair never straddles two).
func (t *table) grow(n uint32) uint32 {
	ei := t.nent
	if ei>>entryPageBits == uint32(len(t.pages)) {
		t.pages = append(t.pages, flatAlloc[entry](entryPageSize))
	}
	t.nent += n
	return ei
}

// place puts index value v (tag and entry) into idx at its first free slot
// from home; the tag gives the home.
func (t *table) place(v uint64) {
	mask := uint64(len(t.idx) - 1)
	for i := home(v&^(1<<32-1), t.shift); ; i = (i + 1) & mask {
		if t.idx[i] <= idxTomb {
			if t.idx[i] == idxEmpty {
				t.used++
			}
			t.idx[i] = v
			return
		}
	}
}

// remove deletes the entry at index ei.
func (t *table) remove(ei uint32) { t.removeHash(ei, t.hashAt(ei)) }

// hashAt is the hash of entry ei's key.
func (t *table) hashAt(ei uint32) uint64 { return t.hash(t.keyOf(t.at(ei))) }

// removeHash is remove with the key's hash already computed.
func (t *table) removeHash(ei uint32, h uint64) {
	e := t.at(ei)
	want := h>>32<<32 | uint64(ei+2)
	if !t.unindex(t.idx, t.shift, h, want, true) && (t.old == nil || !t.unindex(t.old, t.oldShift, h, want, false)) {
		panic("store: table entry missing from index")
	}
	t.clearState(e)
	switch {
	case e.isPair() || e.isWide(): // the second entry reads as free already (allocPair)
		if e.inArena() {
			t.arena.forget(uint32(e.keyLen()))
		}
		t.freeP = append(t.freeP, ei)
	case e.inArena():
		t.arena.forget(uint32(e.keyLen()))
		fallthrough
	default:
		t.freeL = append(t.freeL, ei)
	}
	*e = entry{meta: metaFree}
	t.live--
	t.maybeCompact()
}

// unindex clears index value want from idx (counted by t.used if cur);
// false if it is not there.
func (t *table) unindex(idx []uint64, shift uint, h, want uint64, cur bool) bool {
	mask := uint64(len(idx) - 1)
	for i := home(h, shift); ; i = (i + 1) & mask {
		switch idx[i] {
		case want:
			// A tombstone is only needed if a probe chain runs through here.
			if idx[(i+1)&mask] == idxEmpty {
				idx[i] = idxEmpty
				if cur {
					t.used--
				}
			} else {
				idx[i] = idxTomb
			}
			return true
		case idxEmpty:
			return false
		}
	}
}

// maybeCompact rewrites the arena once removed keys are most of it.
func (t *table) maybeCompact() {
	if t.arena.garbage > arenaPageSize && t.arena.garbage > t.arena.liveBytes() {
		t.compact()
	}
}

// rehash starts rebuilding the index at a size that keeps the load under
// 3/4 after this insert (growing, or shrinking away tombstones); inserts
// move the old index's slots over (migrate).
//
// The move must end before the new index needs rebuilding in turn. It
// starts at most half full (n >= 2*(live+1)) and is rebuilt at three
// quarters; the slots it fills are keys moved or inserted since, each live
// at some point, so at least n/4 inserts come first. Each insert therefore
// moves 8*len(old)/n slots or more, ending the move within n/8 inserts: a
// shrinking rebuild (many keys deleted, a big old index, a small new one)
// moves many slots per insert, a growing one (len(old) <= n/2) the minimum.
func (t *table) rehash() {
	n, bits := minIdxSize, uint(4)
	for n < (t.live+1)*2 { // load at most 1/2 after a rebuild, 3/4 before the next
		n *= 2
		bits++
	}
	if t.old != nil {
		// Not reached, by the bound above. Were it, moving the rest of the
		// old index into the current one could overfill it, so both go
		// into the new index, at once.
		cur := t.idx
		t.idx, t.shift, t.used = flatAlloc[uint64](n), 64-bits, 0
		for _, part := range [][]uint64{cur, t.old[t.oldPos:]} {
			for _, v := range part {
				if v > idxTomb {
					t.place(v)
				}
			}
		}
		flatFree(cur)
		flatFree(t.old)
		t.old, t.oldPos = nil, 0
		return
	}
	t.old, t.oldShift, t.oldPos = t.idx, t.shift, 0
	t.idx, t.shift, t.used = flatAlloc[uint64](n), 64-bits, 0
	t.migStep = max(migrateStep, 8*len(t.old)/n)
}

// migrate moves the next k slots of the old index into idx, and drops the
// old index once it is all moved.
func (t *table) migrate(k int) {
	end := min(t.oldPos+k, len(t.old))
	for i := t.oldPos; i < end; i++ {
		if v := t.old[i]; v > idxTomb {
			t.place(v)
			t.old[i] = idxTomb
		}
	}
	t.oldPos = end
	if end == len(t.old) {
		flatFree(t.old)
		t.old, t.oldPos = nil, 0
	}
}

// compact copies live keys into a fresh arena so deleted keys' bytes are freed.
func (t *table) compact() {
	var a arena
	for i := uint32(0); i < t.nent; i++ {
		e := t.at(i)
		if e.isFree() {
			continue
		}
		if e.inArena() {
			t.setKey(e, t.keyOf(e), &a)
		}
		if e.outKind() != 0 && !e.inlineState() {
			e.tat = a.putState(t.arena.getState(e.tat))
		}
	}
	t.arena.release()
	t.arena = a
}

// state returns e's encoded state (limit.Encode's bytes). A GCRA TAT or an
// inline state is encoded into buf, or with a nil buf into a buffer of the
// table's; any other state aliases the table. Either way, use it before the
// next change to the table.
func (t *table) state(e *entry, buf []byte) []byte {
	if buf == nil {
		buf = t.scratch[:0]
	}
	switch {
	case e.outKind() == 0:
		b, _ := limit.GCRAState{TAT: e.tat}.AppendBinary(buf[:0])
		return b
	case e.inlineState():
		return t.appendInline(buf[:0], e)
	}
	return t.arena.getState(e.tat)
}

// setState stores an encoded state in e, replacing whatever it held: a GCRA
// state inline (its TAT), an FW or SWC state in e's wide room if it has one
// and the state fits, any other in the arena. Slices taken from the table
// before are invalid after.
func (t *table) setState(e *entry, enc []byte) {
	k := limit.KindOf(enc)
	if e.isWide() && wideKind(k) && t.setInline(e, enc) {
		return
	}
	if e.outKind() == k && k != 0 && !e.inlineState() {
		// A state of the same size (FW, SWC, an SWL log of as many
		// entries) is rewritten in place: no garbage for the arena.
		if old := t.arena.getState(e.tat); len(old) == len(enc) {
			copy(old, enc)
			return
		}
	}
	t.clearState(e)
	if k == limit.KindGCRA && len(enc) == gcraStateLen {
		e.tat = binary.BigEndian.Uint64(enc[2:])
		return
	}
	e.tat = t.arena.putState(enc)
	e.meta |= uint64(k&metaKindMask) << metaKindShift
	t.maybeCompact()
}

// setTAT stores a GCRA TAT in e, replacing whatever it held.
func (t *table) setTAT(e *entry, tat uint64) {
	if e.outKind() != 0 {
		t.clearState(e)
	}
	e.tat = tat
}

// clearState forgets e's state other than a GCRA TAT, if any; e then holds
// TAT 0.
func (t *table) clearState(e *entry) {
	if e.outKind() == 0 {
		return
	}
	if !e.inlineState() {
		t.arena.forget(uint32(len(t.arena.getState(e.tat)) + stateLenSize))
	}
	e.meta &^= metaKindMask<<metaKindShift | metaInline
	e.tat = 0
}

// The wide room of an entry is 24 bytes: its own tat and the k of the next
// entry. (The next entry's first 15 bytes may hold the rest of a pair-sized
// key; its 16th, the top byte of its meta, says "free" to whatever walks
// the entries, as a pair's does.) An inline state is stored as its fields,
// little-endian, so that encoding it again gives the same bytes:
//
//	FW:  tat WindowMS | k[0:8] StartMS | k[8:16] Count
//	SWC: tat WindowMS | k[0:8] StartMS | k[8:12] Prev | k[12:16] Cur
//
// An SWC state whose counts do not fit 32 bits (only merged states can:
// an admitted charge never takes a count past the limit) goes to the
// arena instead.

// wideRoom returns the second entry of e's pair, whose k is part of e's
// room. e must be wide: the two are one run of memory (allocPair).
func wideRoom(e *entry) *entry {
	return (*entry)(unsafe.Add(unsafe.Pointer(e), unsafe.Sizeof(entry{})))
}

// setInline stores an FW or SWC state in e's wide room, replacing whatever
// e held, and reports whether it did: false (and e unchanged) for a state
// that does not decode or does not fit.
func (t *table) setInline(e *entry, enc []byte) bool {
	switch limit.KindOf(enc) {
	case limit.KindFW:
		s, ok := limit.DecodeFW(enc)
		if ok {
			t.putFW(e, s)
		}
		return ok
	case limit.KindSWC:
		s, ok := limit.DecodeSWC(enc)
		return ok && t.putSWC(e, s)
	}
	return false
}

// putFW stores s in e's wide room (e must be wide), replacing whatever e
// held: the same fields setInline stores for its encoding.
func (t *table) putFW(e *entry, s limit.FWState) {
	r := t.room(e, limit.KindFW, s.WindowMS, s.StartMS)
	binary.LittleEndian.PutUint64(r.k[8:], s.Count)
}

// putSWC is putFW for an SWC state; false (and e unchanged) for counts
// that do not fit the room.
func (t *table) putSWC(e *entry, s limit.SWCState) bool {
	if s.Prev > math.MaxUint32 || s.Cur > math.MaxUint32 {
		return false
	}
	r := t.room(e, limit.KindSWC, s.WindowMS, s.StartMS)
	binary.LittleEndian.PutUint32(r.k[8:], uint32(s.Prev))
	binary.LittleEndian.PutUint32(r.k[12:], uint32(s.Cur))
	return true
}

// room makes e's wide room hold an inline state of kind k with window and
// start, dropping whatever state e held before, and returns the room's
// entry for the caller to fill in the counts.
func (t *table) room(e *entry, k limit.Kind, window, start int64) *entry {
	if !e.inlineState() {
		t.clearState(e)
	}
	r := wideRoom(e)
	e.tat = uint64(window)
	binary.LittleEndian.PutUint64(r.k[:8], uint64(start))
	e.meta = e.meta&^(metaKindMask<<metaKindShift) | uint64(k)<<metaKindShift | metaInline
	return r
}

// inlineFW returns e's inline FW state (e.outKind() must be limit.KindFW
// and e.inlineState() true).
func inlineFW(e *entry) limit.FWState {
	r := wideRoom(e)
	return limit.FWState{WindowMS: int64(e.tat), StartMS: int64(binary.LittleEndian.Uint64(r.k[:8])),
		Count: binary.LittleEndian.Uint64(r.k[8:])}
}

// inlineSWC is inlineFW for an inline SWC state.
func inlineSWC(e *entry) limit.SWCState {
	r := wideRoom(e)
	return limit.SWCState{WindowMS: int64(e.tat), StartMS: int64(binary.LittleEndian.Uint64(r.k[:8])),
		Prev: uint64(binary.LittleEndian.Uint32(r.k[8:])), Cur: uint64(binary.LittleEndian.Uint32(r.k[12:]))}
}

// appendInline appends the encoding of e's inline state to dst.
func (t *table) appendInline(dst []byte, e *entry) []byte {
	if e.outKind() == limit.KindFW {
		b, _ := inlineFW(e).AppendBinary(dst)
		return b
	}
	b, _ := inlineSWC(e).AppendBinary(dst)
	return b
}

// gcraStateLen is the length of an encoded GCRA state: kind, version, TAT.
const gcraStateLen = 10

// reset drops every key.
func (t *table) reset() {
	t.release()
	*t = *newTable(t.seed)
}

// release gives back the index and entry pages; t must not be used after
// (except through reset).
func (t *table) release() {
	flatFree(t.idx)
	flatFree(t.old)
	for _, p := range t.pages {
		flatFree(p)
	}
	t.arena.release()
	t.idx, t.old, t.pages = nil, nil, nil
}

// arena stores key bytes in 2 MiB pages (a longer key gets a page of its
// own), so it grows without copying and holds no per-key pointers. Its pages
// come from flatAlloc, like the entry pages: outside the Go heap, and on
// huge pages, so confirming a long key does not cost a TLB miss of its own.
// A key slice taken from it (keyOf) must not be kept past the next change
// to the table: compact and release unmap the pages.
type arena struct {
	pages   [][]byte
	total   int // bytes handed out
	garbage int // bytes of released keys
}

func (a *arena) liveBytes() int { return a.total - a.garbage }

func (a *arena) put(b []byte) uint64 {
	n := len(a.pages)
	if n == 0 || len(a.pages[n-1])+len(b) > cap(a.pages[n-1]) {
		size := arenaPageSize
		if len(b) > size {
			size = len(b)
		}
		a.pages = append(a.pages, flatAlloc[byte](size)[:0])
		n++
	}
	p := a.pages[n-1]
	off := len(p)
	a.pages[n-1] = append(p, b...)
	a.total += len(b)
	return uint64(n-1)<<32 | uint64(off)
}

// stateLenSize is the length prefix of a state in the arena.
const stateLenSize = 4

// putState stores an encoded state, prefixed with its length.
func (a *arena) putState(b []byte) uint64 {
	var pre [stateLenSize]byte
	binary.LittleEndian.PutUint32(pre[:], uint32(len(b)))
	n, need := len(a.pages), stateLenSize+len(b)
	if n == 0 || len(a.pages[n-1])+need > cap(a.pages[n-1]) {
		a.pages = append(a.pages, flatAlloc[byte](max(arenaPageSize, need))[:0])
		n++
	}
	p := a.pages[n-1]
	off := len(p)
	a.pages[n-1] = append(append(p, pre[:]...), b...)
	a.total += need
	return uint64(n-1)<<32 | uint64(off)
}

// getState returns the state stored at loc by putState.
func (a *arena) getState(loc uint64) []byte {
	p := a.pages[loc>>32]
	off := uint32(loc)
	n := binary.LittleEndian.Uint32(p[off:])
	return a.get(loc+stateLenSize, n)
}

func (a *arena) get(loc uint64, n uint32) []byte {
	p := a.pages[loc>>32]
	off := uint32(loc)
	return p[off : off+n : off+n]
}

// forget counts n bytes of a removed key as garbage.
func (a *arena) forget(n uint32) { a.garbage += int(n) }

// release gives back every page; a must not be used after.
func (a *arena) release() {
	for _, p := range a.pages {
		flatFree(p)
	}
	*a = arena{}
}
