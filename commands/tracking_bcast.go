package commands

import (
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
)

// broadcasts is the server's BCAST table: the tracking clients by prefix.
// Writers (CLIENT TRACKING) build a new table under mu; the store reads the
// current one on every key change through an atomic pointer, set only
// while some client is in BCAST mode, so a server without one pays nothing.
type broadcasts struct {
	mu      sync.Mutex
	clients map[*tracker]struct{}
	cur     atomic.Pointer[bcastTable]
}

// bcastTable is one immutable BCAST table.
type bcastTable struct {
	lens     []int                 // the distinct prefix lengths, ascending
	byPrefix map[string][]*tracker // the clients of each prefix
}

// maxPrefixLens bounds the distinct lengths of the BCAST prefixes of all
// clients together: every write looks its key's prefix of each length up.
const maxPrefixLens = 32

var errTooManyPrefixLens = "ERR too many distinct tracking prefix lengths on the server (at most " + strconv.Itoa(maxPrefixLens) + ")"

// fits reports whether prefixes, added to the table's, keep the distinct
// prefix lengths within maxPrefixLens.
func (b *broadcasts) fits(prefixes []string) bool {
	lens := map[int]bool{}
	if tb := b.cur.Load(); tb != nil {
		for _, n := range tb.lens {
			lens[n] = true
		}
	}
	for _, p := range prefixes {
		lens[len(p)] = true
	}
	return len(lens) <= maxPrefixLens
}

func (b *broadcasts) add(s *Server, t *tracker) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.clients == nil {
		b.clients = map[*tracker]struct{}{}
	}
	b.clients[t] = struct{}{}
	b.rebuild(s)
}

func (b *broadcasts) remove(t *tracker) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.clients[t]; !ok {
		return
	}
	delete(b.clients, t)
	b.rebuild(t.c.srv)
}

// rebuild makes the table from clients and hands it to the store. Call
// with mu held.
func (b *broadcasts) rebuild(s *Server) {
	if len(b.clients) == 0 {
		b.cur.Store(nil)
		s.st.SetBroadcast(nil)
		return
	}
	tb := &bcastTable{byPrefix: map[string][]*tracker{}}
	seen := map[int]bool{}
	for t := range b.clients {
		t.mu.Lock()
		for _, p := range t.prefixes {
			tb.byPrefix[p] = append(tb.byPrefix[p], t)
			if !seen[len(p)] {
				seen[len(p)] = true
				tb.lens = append(tb.lens, len(p))
			}
		}
		t.mu.Unlock()
	}
	sort.Ints(tb.lens)
	b.cur.Store(tb)
	s.st.SetBroadcast(b)
}

// KeyChanged is store.KeyListener for every key change while a BCAST client
// exists: each client with a prefix of key is told, but not of its own
// changes under NOLOOP.
func (b *broadcasts) KeyChanged(key []byte, by uint64) {
	tb := b.cur.Load()
	if tb == nil {
		return
	}
	for _, n := range tb.lens {
		if n > len(key) {
			break
		}
		for _, t := range tb.byPrefix[string(key[:n])] {
			t.mu.Lock()
			skip := !t.on || !t.bcast || (t.noloop && by == uint64(t.c.ID))
			t.mu.Unlock()
			if !skip {
				t.invalidate(key, false)
			}
		}
	}
}
