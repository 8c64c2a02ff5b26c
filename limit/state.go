package limit

import "encoding/binary"

// formatVersion is the second byte of every encoded state. A decoder that
// meets another version refuses the state (ErrCorrupt) rather than guess;
// a later format gets a new version and a decoder for both.
const formatVersion = 1

// headerSize is the kind byte and the version byte.
const headerSize = 2

// State is one key's decoded limiter state. Its implementations are
// [GCRAState], [FWState], [SWCState], [SWLState] and [CALState]; the
// interface is closed. A State is a value: methods never modify it.
type State interface {
	// Kind returns the algorithm that wrote the state.
	Kind() Kind
	// AppendBinary appends the state's encoding to dst: the kind byte, the
	// format version, then the kind's fields (deterministic: equal states
	// have equal bytes). The error is never non-nil for a state that
	// Decode returned or an algorithm wrote; it reports fields out of range
	// (an SWL log above MaxSWLLimit entries, a CAL zone name above 255
	// bytes).
	AppendBinary(dst []byte) ([]byte, error)

	// fields is the state part of CL.INSPECT's reply.
	fields() []Field
	// merge combines two states of the same kind (see Merge).
	merge(other State, now int64) (State, int64)
}

// KindOf returns the kind of an encoded state, 0 for an empty one. It does
// not validate the rest: Decode does.
func KindOf(b []byte) Kind {
	if len(b) == 0 {
		return 0
	}
	return Kind(b[0])
}

// Decode decodes an encoded state. It never panics: anything that is not a
// state this version wrote is ErrCorrupt.
func Decode(b []byte) (State, error) {
	if len(b) < headerSize || b[1] != formatVersion {
		return nil, ErrCorrupt
	}
	a := Kind(b[0]).algorithm()
	if a == nil {
		return nil, ErrCorrupt
	}
	return a.decode(b[headerSize:])
}

// Encode returns the encoding of s (AppendBinary to a new slice).
func Encode(s State) ([]byte, error) { return s.AppendBinary(nil) }

// appendHeader appends the kind byte and the version.
func appendHeader(dst []byte, k Kind) []byte { return append(dst, byte(k), formatVersion) }

var be = binary.BigEndian

// checkState returns the body of an encoded state of kind k, nil for a
// missing key, or ErrWrongType / ErrCorrupt.
func checkState(b []byte, k Kind) ([]byte, error) {
	if b == nil {
		return nil, nil
	}
	if KindOf(b) != k {
		if !KindOf(b).Valid() {
			return nil, ErrCorrupt
		}
		return nil, ErrWrongType
	}
	if len(b) < headerSize || b[1] != formatVersion {
		return nil, ErrCorrupt
	}
	return b[headerSize:], nil
}

// Field is one field, value pair of CL.INSPECT's flat reply. Value is an
// int64, a string, or a [][2]int64 (SWL's entries as [ts_ms, cost]).
type Field struct {
	Name  string
	Value any
}

// Inspect returns CL.INSPECT's fields for an encoded state: "type" first,
// then the stored state (spec §6). The caller appends "pttl", which is the
// key's and not the state's.
func Inspect(b []byte) ([]Field, error) {
	s, err := Decode(b)
	if err != nil {
		return nil, err
	}
	return append([]Field{{"type", s.Kind().String()}}, s.fields()...), nil
}

// Merge combines two states of one key, for example the two sides of a slot
// move that both charged it, into one that charges what both allowed; it is
// never "the larger wins". now (Unix ns) is the clock of the merge. It
// returns the merged state and its expiry (Unix ms, as after a charge).
//
// The rules, per kind (each state file documents its own):
//   - GCRA: the TAT debt above now adds up: now + (a-now)+ + (b-now)+.
//   - FW, CAL: counts of the same window add up; of two windows the later
//     one is kept (the earlier's counts are out of their window).
//   - SWC: counts are aligned to the later window index and added.
//   - SWL: the logs unite (costs at the same ms add up).
//   - States with other parameters (window, unit, zone) cannot be combined:
//     the one with the later window (then the longer window, then the
//     larger encoding) is kept, so that Merge is commutative.
//
// Two states of different kinds are ErrKindMismatch: that is a WRONGTYPE
// conflict the caller must resolve.
func Merge(a, b State, now int64) (State, int64, error) {
	if a.Kind() != b.Kind() {
		return nil, 0, ErrKindMismatch
	}
	s, exp := a.merge(b, now)
	return s, exp, nil
}

// MergeEncoded is Merge on encoded states; it appends the result to dst.
func MergeEncoded(dst, a, b []byte, now int64) ([]byte, int64, error) {
	sa, err := Decode(a)
	if err != nil {
		return dst, 0, err
	}
	sb, err := Decode(b)
	if err != nil {
		return dst, 0, err
	}
	s, exp, err := Merge(sa, sb, now)
	if err != nil {
		return dst, 0, err
	}
	dst, err = s.AppendBinary(dst)
	return dst, exp, err
}

// pickLater is the merge of two states that cannot be combined: it keeps the
// one whose window starts later, then the longer window, then the one with
// the larger encoding (so that the result does not depend on the order).
func pickLater(a, b State, startA, startB, lenA, lenB int64) State {
	switch {
	case startA != startB:
		if startA > startB {
			return a
		}
		return b
	case lenA != lenB:
		if lenA > lenB {
			return a
		}
		return b
	}
	ea, _ := a.AppendBinary(nil)
	eb, _ := b.AppendBinary(nil)
	if string(ea) >= string(eb) {
		return a
	}
	return b
}

// DecodeFW decodes an encoded FW state as Decode does, without the
// allocation of Decode's interface: for a store that keeps a state's fields
// rather than its bytes. ok is false for anything Decode would not return
// as an FWState.
func DecodeFW(b []byte) (s FWState, ok bool) {
	body, err := checkState(b, KindFW)
	if err != nil || body == nil {
		return FWState{}, false
	}
	s, err = fwState(body)
	return s, err == nil
}

// DecodeSWC is DecodeFW for an SWC state.
func DecodeSWC(b []byte) (s SWCState, ok bool) {
	body, err := checkState(b, KindSWC)
	if err != nil || body == nil {
		return SWCState{}, false
	}
	s, err = swcState(body)
	return s, err == nil
}

// Encoded lengths of the fixed-size states.
const (
	FWStateLen  = headerSize + fwBody
	SWCStateLen = headerSize + swcBody
)
