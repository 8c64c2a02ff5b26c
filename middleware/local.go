package middleware

import (
	"sync"

	"github.com/cellserver/cellserver/limit"
)

// localLimiter decides limits in process while cellserver cannot: the same
// algorithms (package limit's pure decisions, the arithmetic cellserver
// runs) on states kept in a map with expiry, bounded in keys and bytes.
// One mutex: it only runs while cellserver is away, and a decision under
// it is pure arithmetic on a few short states, no I/O.
type localLimiter struct {
	maxKeys, maxBytes int

	mu     sync.Mutex
	m      map[string]*localEntry
	bytes  int // sum of entry sizes
	buf    []byte
	states [limit.MaxLimits][]byte
	res    [limit.MaxLimits]limit.Result
}

type localEntry struct {
	state    []byte
	expireAt int64 // Unix ms; gone once now_ms > expireAt (Redis's rule)
}

// entryOverhead approximates an entry's memory beyond its key and state
// bytes (map slot, entry struct, slice headers).
const entryOverhead = 96

func (e *localEntry) size(key string) int { return len(key) + len(e.state) + entryOverhead }

func newLocalLimiter(maxKeys, maxBytes int) *localLimiter {
	return &localLimiter{maxKeys: maxKeys, maxBytes: maxBytes, m: map[string]*localEntry{}}
}

// decide runs one all-or-nothing decision of specs at now (Unix ns), in ms,
// and stores the charged states. It returns the deciding limit's 0-based
// index and every limit's R5.
func (l *localLimiter) decide(specs []limit.Spec, now int64) (int, []limit.R5, error) {
	nowMS := now / 1e6
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, s := range specs {
		l.states[i] = nil
		if e := l.m[string(s.Key)]; e != nil {
			if nowMS > e.expireAt {
				l.remove(string(s.Key), e)
			} else {
				l.states[i] = e.state
			}
		}
	}
	d, buf, err := limit.Decide(specs, l.states[:len(specs)], now, limit.Options{MS: true}, l.res[:len(specs)], l.buf[:0])
	l.buf = buf
	if err != nil {
		return 0, nil, err
	}
	r5s := make([]limit.R5, len(specs))
	for i, s := range specs {
		r := &l.res[i]
		r5s[i] = r.R5
		if r.Write {
			// State aliases buf, reused by the next call: keep a copy.
			l.store(string(s.Key), &localEntry{state: append([]byte(nil), r.State...), expireAt: r.ExpireAt})
		}
	}
	clear(l.states[:len(specs)])
	return d.Index - 1, r5s, nil
}

// store sets key's entry, evicting others to stay within the bounds.
func (l *localLimiter) store(key string, e *localEntry) {
	if old := l.m[key]; old != nil {
		l.remove(key, old)
	}
	need := e.size(key)
	for len(l.m) > 0 && (len(l.m)+1 > l.maxKeys || l.bytes+need > l.maxBytes) {
		l.evict()
	}
	l.m[key] = e
	l.bytes += need
}

func (l *localLimiter) remove(key string, e *localEntry) {
	delete(l.m, key)
	l.bytes -= e.size(key)
}

// evictSample is how many entries one eviction looks at.
const evictSample = 16

// evict removes, among a sample (Go's map iteration starts at a random
// place), the entry that expires soonest: an expired one if any, else the
// one whose loss lets the least through again.
func (l *localLimiter) evict() {
	var (
		victim string
		soon   *localEntry
		n      int
	)
	for k, e := range l.m {
		if soon == nil || e.expireAt < soon.expireAt {
			victim, soon = k, e
		}
		if n++; n == evictSample {
			break
		}
	}
	if soon != nil {
		l.remove(victim, soon)
	}
}

// len is the number of entries (tests).
func (l *localLimiter) len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.m)
}
