// Package limit is the pure algorithm layer of CL.LIMIT, CL.PEEK, CL.RESET
// and CL.INSPECT (spec/cl-limit.md): the typed limit definitions and
// their argument grammar, the per-key state of every algorithm with its
// binary encoding, each algorithm's decision, the all-or-nothing decision
// over up to 16 limits, and the merge of two states of one key.
//
// It is a package of its own, beside gcra, because gcra is one thing:
// redis-cell's CL.THROTTLE arithmetic, byte for byte, wrap-arounds included.
// The CL.LIMIT family adds four more algorithms with states of their own
// kinds, a grammar with its own error texts, and a stored value that must
// say which algorithm wrote it; none of that belongs in gcra, and none of
// it may know about shards (store) or RESP (commands). Here the GCRA limit
// wraps gcra, so CL.LIMIT ... GCRA and CL.THROTTLE share one arithmetic.
//
// # Quick start
//
//	call, err := limit.ParseLimit(argv)         // argv[0] is the command name
//	if err != nil { reply(err.Error()) }        // the spec's exact text
//	// for each call.Limits[i], read the key's encoded state (nil if missing)
//	res := make([]limit.Result, len(call.Limits))
//	d, buf, err := limit.Decide(call.Limits, states, now, call.Options, res, buf[:0])
//	// err: ErrWrongType (reply it), or a corrupt stored state (see Decide)
//	// reply [d.R5..., d.Index, [res[i].R5...]]; store res[i].State
//	// with expiry res[i].ExpireAt for every res[i].Write
//
// # Time and units
//
// As in golang.org/x/time/rate, time is always a parameter: now is an int64
// count of ns since the Unix epoch, read once per command by the caller.
// Window algorithms work on now_ms = floor(now / 1e6); GCRA on ns. Expiry
// instants (ExpireAt) are Unix ms with Redis's rule: a key is gone once the
// clock's millisecond is past its ExpireAt; at that millisecond it still
// exists (PTTL 0). Reply durations are seconds rounded up, or ms with the
// MS option (GCRA: CL.THROTTLE's secs(), or ns rounded up to ms).
//
// # States
//
// A state is stored encoded (see [Decode] and [State.AppendBinary]): a kind
// byte, a format version byte, then the kind's fields, big-endian and
// fixed-width, so the same state always has the same bytes. The kind byte is
// what makes "a key holds one limiter" checkable: a call naming another
// algorithm than the key's gets [ErrWrongType] (the decision functions check
// it). Limits, bursts and counts are not part of a state: every call
// brings its own (dynamic limits).
//
// # Adding an algorithm
//
// One file holds everything of one algorithm: its Kind constant, its limit
// type (the [Limit] interface), its state type (the [State] interface) with
// encoding, merge and INSPECT fields, and its argument parser. A sixth
// algorithm is that file, its tests, and one row in the algorithms table
// below.
//
// Everything in the package is pure (no clock, no I/O, no locks) except the
// time-zone cache of [LoadZone], which is safe for concurrent use. Values are
// immutable once built and safe to share between goroutines.
package limit

import (
	"math"
	"time"
)

// Kind says which algorithm a limit or a state belongs to. It is the first
// byte of every encoded state. The zero Kind is no algorithm.
type Kind uint8

// algorithm describes one algorithm for the grammar, the decoder and
// INSPECT. Each algorithm's file defines its value.
type algorithm struct {
	kind  Kind
	name  string // type token, upper case ("FW"); matched case-insensitively
	label string // INSPECT's type value, lower case ("fw")
	nargs int    // positional arguments after the type token
	// parse checks the positional arguments, then the cost (via
	// raw.parseCost), then anything else of its own (spec §2.1 step 3).
	// raw is passed by value: a pointer through this func value would
	// make every call's raw limits escape to the heap.
	parse func(raw rawLimit, ms bool) (Limit, uint32, error)
	// decode decodes the fields after the two-byte header.
	decode func(body []byte) (State, error)
}

// algorithms is indexed by Kind; a sixth algorithm adds its row here.
var algorithms = [...]*algorithm{
	KindGCRA: &gcraAlgorithm,
	KindFW:   &fwAlgorithm,
	KindSWC:  &swcAlgorithm,
	KindSWL:  &swlAlgorithm,
	KindCAL:  &calAlgorithm,
}

// Valid reports whether k is one of the algorithms. CL.RESET removes (and
// counts) exactly the keys whose value is a limiter state:
// KindOf(value).Valid().
func (k Kind) Valid() bool { return k.algorithm() != nil }

func (k Kind) algorithm() *algorithm {
	if int(k) < len(algorithms) {
		return algorithms[k]
	}
	return nil
}

// String returns the kind's INSPECT name ("gcra", "fw", "swc", "swl",
// "cal"), or "kind(N)" for an unknown one.
func (k Kind) String() string {
	if a := k.algorithm(); a != nil {
		return a.label
	}
	return "kind(" + itoa(int64(k)) + ")"
}

// TypeName is the name TYPE reports for a key holding a state of this kind:
// "string" for GCRA (its state is CL.THROTTLE's TAT), "cl-limit" for the
// others (spec §3).
func (k Kind) TypeName() string {
	if k == KindGCRA {
		return "string"
	}
	return "cl-limit"
}

// Limit is one validated limit definition: an algorithm and its parameters
// (not the key, not the cost). Its implementations are [GCRA], [FW], [SWC],
// [SWL] and [CAL]; the interface is closed. Limits are values, safe to share.
//
// The state arguments are a key's encoded state, nil when the key is
// missing (or expired). A state of another kind is [ErrWrongType]; a state
// of this kind with other parameters (window, unit, zone) is treated as a
// fresh key.
type Limit interface {
	// Kind returns the algorithm.
	Kind() Kind
	// Eval decides a charge of cost at now (Unix ns) without changing
	// anything. The R5 admits (Limited false) iff this limit alone admits
	// the call; it then describes the state after charging. A limited R5
	// describes the state as it is (spec §5). ms selects the unit of
	// RetryAfter and ResetAfter.
	Eval(state []byte, now int64, cost uint32, ms bool) (R5, error)
	// AppendCharged appends to dst the encoded state after charging cost
	// at now, and returns the key's new expiry (Unix ms). Call it only for
	// a cost above 0 that Eval admitted at the same now on the same state:
	// otherwise it returns an error. dst must not overlap state.
	AppendCharged(dst, state []byte, now int64, cost uint32) ([]byte, int64, error)
	// Validate reports whether the parameters are in the spec's ranges,
	// with the error the grammar would give with MS (durations in ms).
	Validate() error

	// charge is Eval and, if write and the R5 admits, AppendCharged in one
	// pass over the state: Decide's step for each limit. It returns the
	// R5, dst with the charged state appended (dst itself when nothing
	// is), and the new expiry.
	charge(dst, state []byte, now int64, cost uint32, ms, write bool) (R5, []byte, int64, error)

	sealed() // only this package's types are limits
}

func (GCRA) sealed() {}
func (FW) sealed()   {}
func (SWC) sealed()  {}
func (SWL) sealed()  {}
func (CAL) sealed()  {}

// Capacity is l's limit as its R5 shows it: the most cost it admits at
// once (GCRA: max_burst+1; the others: their limit). 0 for nil.
func Capacity(l Limit) int64 {
	switch x := l.(type) {
	case GCRA:
		return int64(x.MaxBurst) + 1
	case FW:
		return int64(x.Limit)
	case SWC:
		return int64(x.Limit)
	case SWL:
		return int64(x.Limit)
	case CAL:
		return int64(x.Limit)
	}
	return 0
}

// R5 is one limit's reply, the shape of CL.THROTTLE's:
// [limited, limit, remaining, retry_after, reset_after]. Durations are in the
// call's unit: seconds rounded up, or ms with MS.
type R5 struct {
	Limited    bool  // this limit rejects the call
	Limit      int64 // the limit (GCRA: max_burst+1)
	Remaining  int64 // never below 0
	RetryAfter int64 // -1 when admitted, and when the cost can never fit; else s (rounded up) or ms
	ResetAfter int64 // s (rounded up) or ms until the state has run out; 0 when empty
}

// Options are a call's global options. The zero value charges and replies
// in seconds.
type Options struct {
	Peek bool // decide, charge nothing, write nothing
	MS   bool // every duration in the call, arguments and reply, is in ms
}

// Limits of the grammar (spec §2).
const (
	// MaxLimits is the most limits one call may name.
	MaxLimits = 16
	// MaxValue is the largest max_burst, count, limit and cost.
	MaxValue = math.MaxUint32
	// MaxWindow is the longest period or window: 366 days.
	MaxWindow = 366 * 24 * time.Hour
	// MaxSWLLimit is the largest SWL limit, and so the most entries an SWL
	// state holds (every entry costs at least 1).
	MaxSWLLimit = 10000
	// NoExpiry is the ExpireAt of a key that never expires.
	NoExpiry = math.MaxInt64
)

const (
	nsPerMS     = int64(time.Millisecond)
	maxWindowMS = int64(MaxWindow / time.Millisecond)
)

// floorMS is floor(now / 1e6): the clock's whole milliseconds.
func floorMS(now int64) int64 {
	q := now / nsPerMS
	if now%nsPerMS < 0 {
		q--
	}
	return q
}

// windowStart is floorDiv(at, w) * w, the start of the w-ms window that
// holds at, for a key whose stored window started at start (known; a
// multiple of w, as every stored state's is: decoding checks it, and the
// decisions only store starts they computed). A key called again within
// that window or the next, the usual case under load, costs no division.
func windowStart(at, w, start int64, known bool) int64 {
	if d := at - start; known && d >= 0 { // d < 0: at before start, or the subtraction wrapped
		switch {
		case d < w:
			return start
		case d < 2*w:
			return start + w
		}
	}
	return floorDiv(at, w) * w
}

// floorDiv is floor(a / b) for b > 0.
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b < 0 {
		q--
	}
	return q
}

// reply converts a duration of d >= 0 ms to the reply's unit: ms, or
// seconds rounded up.
func reply(d int64, ms bool) int64 {
	if ms {
		return d
	}
	return (d + 999) / 1000
}

// satAdd is a + b, saturating at MaxUint64: counts of merged states add up
// and must never wrap to look small.
func satAdd(a, b uint64) uint64 {
	if s := a + b; s >= a {
		return s
	}
	return math.MaxUint64
}

// satInt converts a count to a reply integer, saturating at MaxInt64.
func satInt(v uint64) int64 {
	if v > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(v)
}

// itoa formats v in decimal without fmt (error texts are built on paths
// that should not pull fmt's allocations).
func itoa(v int64) string {
	var b [20]byte
	i := len(b)
	u := uint64(v)
	if v < 0 {
		u = -u
	}
	for {
		i--
		b[i] = byte('0' + u%10)
		u /= 10
		if u == 0 {
			break
		}
	}
	if v < 0 {
		i--
		b[i] = '-'
	}
	return string(b[i:])
}
