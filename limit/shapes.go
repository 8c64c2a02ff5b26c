package limit

import (
	"bytes"
	"encoding/binary"
	"sync/atomic"
)

// A server's CL.LIMIT calls come in few shapes: the same types, numbers,
// costs and options, with other keys (the limits come from its clients'
// configuration, as interning assumes). Parsing one costs more than the
// rest of a call's work in package limit, so ParseLimitInto remembers
// recent shapes and answers a call of a known shape by comparing its
// arguments with the shape's, byte for byte, instead of parsing them.
//
// That is exact: the parser never looks at a key's bytes except to find
// repeated keys (spec §2.1 step 3), so a call whose every other argument
// is the same, at the same position, as one that parsed parses the same
// way, to the same limits, costs and options; only the repeated-key check
// is done again. Only calls that parsed without error are remembered.

const (
	shapeBits  = 8
	shapeSlots = 1 << shapeBits
	// A shape is remembered only if its call has at most shapeMaxArgs
	// arguments and shapeMaxBytes bytes besides its keys: that is every
	// call of a few limits, and the table stays under a megabyte.
	shapeMaxArgs  = 64
	shapeMaxBytes = 512
)

// shape is a call that parsed: its arguments other than the keys, and the
// result with the keys left out. Immutable once published.
type shape struct {
	argc  int
	keyAt uint64   // bit i: argv[i] is a key
	args  []string // argv[i] for every i >= 2 not a key ("" at a key)
	keys  []int    // the argument index of each limit's key
	specs []Spec   // each limit's Limit and Cost; Key nil
	opt   Options
}

// shapes holds one shape per slot, the last one remembered there, as
// internTable does; seenShape the hash of the last call that missed in
// each slot. A shape is remembered the second time in a row a slot sees
// it, so traffic whose every call has a new shape (dynamic limits) costs
// a hash and a comparison, never an allocation.
var (
	shapes    [shapeSlots]atomic.Pointer[shape]
	seenShape [shapeSlots]atomic.Uint64
)

// shapeHash hashes the arguments of a call that are not keys, as far as
// it can tell: argv[1], and each argument after an AND. (An AND that is
// itself a key changes only the hash; parsed shapes say where the keys
// are.) An argument of 8 bytes or more is hashed by its length and its
// first and last 8: a hash that misses bytes costs only a collision, and
// match compares every byte. ok is false for a call too long to remember.
func shapeHash(argv [][]byte) (h uint64, ok bool) {
	if len(argv) > shapeMaxArgs {
		return 0, false
	}
	const prime = 0x100000001b3
	h = 0xcbf29ce484222325 ^ uint64(len(argv))
	n := 0
	key := false
	for _, a := range argv[2:] {
		if key {
			key = false
			continue
		}
		n += len(a)
		h = (h ^ uint64(len(a))) * prime
		if len(a) >= 8 {
			h = (h ^ le.Uint64(a)) * prime
			h = (h ^ le.Uint64(a[len(a)-8:])) * prime
		} else {
			for _, c := range a {
				h = (h ^ uint64(c)) * prime
			}
		}
		key = len(a) == 3 && keyword(a, "AND")
	}
	return h, n <= shapeMaxBytes
}

var le = binary.LittleEndian

// slot is the table slot of hash h.
func shapeSlot(h uint64) uint64 { return (h * 0x9e3779b97f4a7c15) >> (64 - shapeBits) }

// match reports whether argv has shape s: as many arguments, each that is
// not a key the same bytes.
func (s *shape) match(argv [][]byte) bool {
	if len(argv) != s.argc {
		return false
	}
	for i := 2; i < len(argv); i++ {
		if s.keyAt&(1<<i) == 0 && string(argv[i]) != s.args[i] {
			return false
		}
	}
	return true
}

// fill is ParseLimitInto's result for argv of shape s: its limits with
// argv's keys, in buf's array when it has room; a repeated key is the
// error the parser gives.
func (s *shape) fill(buf []Spec, argv [][]byte) (Call, error) {
	n := len(s.specs)
	if cap(buf) < n {
		buf = make([]Spec, n)
	}
	c := Call{Limits: buf[:n], Options: s.opt}
	for j := range n {
		key := argv[s.keys[j]]
		for i := range j {
			if bytes.Equal(c.Limits[i].Key, key) {
				return Call{}, &RepeatedKeyError{Limit: j + 1, Earlier: i + 1}
			}
		}
		c.Limits[j] = Spec{Key: key, Limit: s.specs[j].Limit, Cost: s.specs[j].Cost}
	}
	return c, nil
}

// remember records that argv parsed to c, whose keys are at the argument
// indexes keys, if its slot saw the same hash h last.
func remember(h uint64, argv [][]byte, c Call, keys []int) {
	slot := shapeSlot(h)
	if seenShape[slot].Swap(h) != h {
		return
	}
	s := &shape{argc: len(argv), args: make([]string, len(argv)), keys: append([]int(nil), keys...),
		specs: make([]Spec, len(c.Limits)), opt: c.Options}
	for _, k := range keys {
		s.keyAt |= 1 << k
	}
	for i := 2; i < len(argv); i++ {
		if s.keyAt&(1<<i) == 0 {
			s.args[i] = string(argv[i])
		}
	}
	for j, sp := range c.Limits {
		s.specs[j] = Spec{Limit: sp.Limit, Cost: sp.Cost}
	}
	shapes[slot].Store(s)
}
