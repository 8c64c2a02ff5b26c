package store

// The requests on a whole shard. Queue each with Session.AddTo, once per
// shard for a command on the whole keyspace.

// DBSizeReq is DBSIZE on one shard.
type DBSizeReq struct {
	envelope
	Keys int64 // out: keys in the shard, live or expired but not yet removed
}

func (r *DBSizeReq) run(sh *shard, _ int64) { r.Keys = int64(sh.t.len()) }

// FlushReq is FLUSHDB on one shard: every key is removed, from memory and
// from disk.
type FlushReq struct {
	envelope
}

func (r *FlushReq) run(sh *shard, _ int64) {
	if len(sh.interest) != 0 {
		sh.flushed(sh.by)
	}
	sh.t.reset()
	sh.expires = 0
	sh.clearDirty()
	if sh.p != nil {
		sh.writeRecord(appendDrop(sh.recBuf(), sh.slotLo, sh.slotHi), 1)
	}
}

// ScanReq is one step of SCAN on one shard: it looks at up to Count
// entries from Cursor and returns the live keys among them that match
// Pattern.
type ScanReq struct {
	envelope
	Pattern []byte // glob; nil matches every key
	Count   int    // entries to look at; below 1 means 10
	Cursor  uint64 // the entry to start at (0: the shard's first)
	// Type, if set, keeps only keys whose TYPE is this name ("string" for
	// GCRA, "cl-limit" for the other kinds: limit.Kind.TypeName).
	Type string

	Keys     [][]byte // out: copies, safe to keep; reused by the next run
	Examined int64    // out: entries looked at
	Next     uint64   // out: the cursor to go on from; 0 once the shard is done
}

func (r *ScanReq) run(sh *shard, now int64) {
	nowMs := floorMs(now)
	r.Keys = r.Keys[:0]
	pos := uint32(r.Cursor)
	count := r.Count
	if count < 1 {
		count = 10
	}
	start := pos
	for ; pos < sh.t.nent && count > 0; pos++ {
		count--
		if r.Type != "" && !sh.t.at(pos).isFree() && sh.t.at(pos).kind().TypeName() != r.Type {
			continue // counted as examined, as Redis counts a key its filter drops
		}
		r.Keys = sh.collect(r.Keys, r.Pattern, pos, nowMs)
	}
	r.Examined = int64(pos - start)
	r.Next = 0
	if pos < sh.t.nent {
		r.Next = uint64(pos)
	}
}

// KeysReq is KEYS on one shard.
type KeysReq struct {
	envelope
	Pattern []byte   // glob; nil matches every key
	Keys    [][]byte // out: every live key matching Pattern (copies)
}

func (r *KeysReq) run(sh *shard, now int64) {
	nowMs := floorMs(now)
	r.Keys = r.Keys[:0]
	for i := uint32(0); i < sh.t.nent; i++ {
		r.Keys = sh.collect(r.Keys, r.Pattern, i, nowMs)
	}
}

// collect appends a copy of entry i's key to keys if it is live and
// matches pattern (nil: every key).
func (sh *shard) collect(keys [][]byte, pattern []byte, i uint32, nowMs int64) [][]byte {
	e := sh.t.at(i)
	if e.isFree() || e.exp() < nowMs {
		return keys
	}
	k := sh.t.keyOf(e)
	if pattern != nil && !Match(pattern, k, false) {
		return keys
	}
	return append(keys, append([]byte(nil), k...))
}
