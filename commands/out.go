package commands

import (
	"bytes"
	"math"
	"strconv"

	"github.com/tidwall/redcon"
)

// Out is a pipeline's reply buffer: handlers append RESP replies to it and
// the wire layer writes it to the socket with one flush. The zero value is
// ready to use and writes RESP2.
//
// Proto is the protocol the replies are written in, the connection's
// (HELLO): Exec sets it before the pipeline's first reply. The writers of
// RESP3's own types (WriteMap, WriteSet, WriteNull, WriteVerbatim,
// WriteDouble, WriteBool) write what Redis sends a RESP2 client instead
// when Proto is not 3; every other writer is the same in both.
//
// A large bulk reply that repeats a request's argument (ECHO) is not copied
// into B but referenced (WriteBulkRef): the wire layer writes B and the
// references in order (Segments), so a 100 MB argument is not held twice
// before the socket takes it. References point into the request's buffer
// and are valid until the replies are written.
type Out struct {
	B    []byte
	refs []outRef
	nref int // bytes referenced
	// Limit, if positive, is the most reply bytes the pipeline may build:
	// once B is longer, Exec runs no further command and the wire layer
	// drops the client (Redis's client-output-buffer-limit). A command's own
	// reply may take it past Limit; the next command does not run.
	Limit int
	// Room, if positive, is what the client's hard output limit leaves:
	// replies past it are never written (the wire layer drops the client),
	// so a command that must run on regardless (a transaction's) may drop
	// them instead of holding them (see OverRoom).
	Room int
	// Proto is 3 for RESP3; anything else (2, or 0 in the zero value) is
	// RESP2.
	Proto int
}

// outRef is a referenced bulk body, to be written before B[at:].
type outRef struct {
	at int
	b  []byte
}

// bigRef is the size from which WriteBulkRef references instead of copying.
const bigRef = 64 << 10

// OverRoom reports whether the replies went past Room.
func (o *Out) OverRoom() bool { return o.Room > 0 && o.Len() > o.Room }

// Exceeded reports whether the replies went past Limit.
func (o *Out) Exceeded() bool { return o.Limit > 0 && o.Len() > o.Limit }

// WriteBulkRef appends b as a bulk string, referencing a large b instead of
// copying it: b must stay unchanged until the replies are written.
func (o *Out) WriteBulkRef(b []byte) {
	if len(b) < bigRef {
		o.WriteBulk(b)
		return
	}
	o.B = append(strconv.AppendInt(append(o.B, '$'), int64(len(b)), 10), '\r', '\n')
	o.refs = append(o.refs, outRef{at: len(o.B), b: b})
	o.nref += len(b)
	o.B = append(o.B, '\r', '\n')
}

// Segments appends the replies, in order, to dst: B split around the
// references.
func (o *Out) Segments(dst [][]byte) [][]byte {
	from := 0
	for _, r := range o.refs {
		if r.at > from {
			dst = append(dst, o.B[from:r.at])
		}
		dst = append(dst, r.b)
		from = r.at
	}
	if from < len(o.B) {
		dst = append(dst, o.B[from:])
	}
	return dst
}

// Refs reports whether any reply is referenced rather than held in B.
func (o *Out) Refs() bool { return len(o.refs) > 0 }

// Reset empties the buffer, dropping references; it keeps B's memory
// unless B grew past keep bytes.
func (o *Out) Reset(keep int) {
	clear(o.refs)
	o.refs, o.nref = o.refs[:0], 0
	if cap(o.B) > keep {
		o.B = nil
	} else {
		o.B = o.B[:0]
	}
}

// WriteError appends an error reply; CR and LF in msg become spaces, as in Redis.
func (o *Out) WriteError(msg string) { o.B = redcon.AppendError(o.B, msg) }

// WriteString appends a simple string.
func (o *Out) WriteString(s string) { o.B = redcon.AppendString(o.B, s) }

// WriteOK appends +OK.
func (o *Out) WriteOK() { o.B = redcon.AppendOK(o.B) }

// WriteBulk appends a bulk string.
func (o *Out) WriteBulk(b []byte) { o.B = redcon.AppendBulk(o.B, b) }

// WriteBulkString appends a bulk string.
func (o *Out) WriteBulkString(s string) { o.B = redcon.AppendBulkString(o.B, s) }

// WriteBulkUint appends n in decimal as a bulk string, without allocating.
func (o *Out) WriteBulkUint(n uint64) {
	var tmp [20]byte
	o.B = redcon.AppendBulk(o.B, strconv.AppendUint(tmp[:0], n, 10))
}

// WriteInt appends an integer reply.
//
// Small integers, most of a rate limiter's replies (counts, limits, seconds
// to wait), are copied from redcon's encoding of them, made once: redcon's
// strconv path costs about three times the copy, and a CL.THROTTLE reply
// is five integers.
func (o *Out) WriteInt(n int64) {
	if uint64(n+1) >= smallInts {
		o.B = redcon.AppendInt(o.B, n)
		return
	}
	e := &smallIntRESP[n+1]
	if l := len(o.B); cap(o.B)-l >= len(e.b) {
		// One 8-byte store; the padding past the encoding is cut off.
		*(*[8]byte)(o.B[l : l+8]) = e.b
		o.B = o.B[:l+int(e.n)]
		return
	}
	o.B = append(o.B, e.b[:e.n]...)
}

// smallInts is how many integers, from -1 up, WriteInt copies: the longest,
// ":4095\r\n", fits the 8 bytes of one entry.
const smallInts = 4097

// smallIntRESP[i] is redcon's encoding of the integer i-1.
var smallIntRESP = func() (t [smallInts]struct {
	b [8]byte
	n uint8
}) {
	for i := range t {
		e := redcon.AppendInt(nil, int64(i)-1)
		t[i].n = uint8(copy(t[i].b[:], e))
	}
	return t
}()

// WriteArray appends an array header of n elements.
func (o *Out) WriteArray(n int) { o.B = redcon.AppendArray(o.B, n) }

// WriteNull appends a null as Redis's addReplyNull: _ in RESP3, the null
// bulk string ($-1) in RESP2.
func (o *Out) WriteNull() {
	if o.Proto == 3 {
		o.B = append(o.B, "_\r\n"...)
		return
	}
	o.B = redcon.AppendNull(o.B)
}

// WriteNullArray appends a null as Redis's addReplyNullArray: _ in RESP3,
// the null array (*-1) in RESP2.
func (o *Out) WriteNullArray() {
	if o.Proto == 3 {
		o.B = append(o.B, "_\r\n"...)
		return
	}
	o.B = append(o.B, "*-1\r\n"...)
}

// WriteMap appends a map header of n key-value pairs, which the caller
// writes next, key then value: %n in RESP3, an array of 2n in RESP2.
func (o *Out) WriteMap(n int) {
	if o.Proto == 3 {
		o.B = appendHeader(o.B, '%', n)
		return
	}
	o.B = redcon.AppendArray(o.B, 2*n)
}

// WriteSet appends a set header of n elements: ~n in RESP3, an array of n
// in RESP2.
func (o *Out) WriteSet(n int) {
	if o.Proto == 3 {
		o.B = appendHeader(o.B, '~', n)
		return
	}
	o.B = redcon.AppendArray(o.B, n)
}

// WriteVerbatim appends s as Redis's addReplyVerbatim with format "txt":
// a verbatim string (=) in RESP3, a bulk string of s in RESP2.
func (o *Out) WriteVerbatim(s string) {
	if o.Proto != 3 {
		o.B = redcon.AppendBulkString(o.B, s)
		return
	}
	o.B = appendHeader(o.B, '=', len(s)+4)
	o.B = append(append(append(o.B, "txt:"...), s...), '\r', '\n')
}

// WriteDouble appends f as Redis 7.2's addReplyDouble: a double (,) in
// RESP3, a bulk string in RESP2. No command sends one yet; the text is
// Redis's for integral values (as an integer), inf, -inf, nan and -0, and
// otherwise the shortest decimal that reads back as f, in %g's layout
// (an exponent below -4 or from 17 on), which is what Redis's fpconv
// writes for the usual magnitudes.
func (o *Out) WriteDouble(f float64) {
	var tmp [32]byte
	d := appendDouble(tmp[:0], f)
	if o.Proto != 3 {
		o.B = redcon.AppendBulk(o.B, d)
		return
	}
	o.B = append(append(append(o.B, ','), d...), '\r', '\n')
}

// appendDouble appends f's text for WriteDouble.
func appendDouble(b []byte, f float64) []byte {
	switch {
	case math.IsNaN(f):
		return append(b, "nan"...)
	case math.IsInf(f, 1):
		return append(b, "inf"...)
	case math.IsInf(f, -1):
		return append(b, "-inf"...)
	case f == 0 && math.Signbit(f):
		return append(b, "-0"...)
	case f == math.Trunc(f) && math.Abs(f) <= 1<<62: // Redis's double2ll range
		return strconv.AppendInt(b, int64(f), 10)
	}
	// The shortest digits in e form tell the decimal exponent exactly.
	from := len(b)
	b = strconv.AppendFloat(b, f, 'e', -1, 64)
	e := bytes.LastIndexByte(b[from:], 'e')
	exp, _ := strconv.Atoi(string(b[from+e+1:]))
	if exp < -4 || exp >= 17 {
		return b
	}
	return strconv.AppendFloat(b[:from], f, 'f', -1, 64)
}

// WriteBool appends a boolean: #t or #f in RESP3, the integer 1 or 0 in
// RESP2.
func (o *Out) WriteBool(v bool) {
	switch {
	case o.Proto == 3 && v:
		o.B = append(o.B, "#t\r\n"...)
	case o.Proto == 3:
		o.B = append(o.B, "#f\r\n"...)
	case v:
		o.WriteInt(1)
	default:
		o.WriteInt(0)
	}
}

// appendHeader appends a RESP type byte, n in decimal and CRLF; redcon has
// no writers for RESP3's types.
func appendHeader(b []byte, typ byte, n int) []byte {
	return append(strconv.AppendInt(append(b, typ), int64(n), 10), '\r', '\n')
}

// Len returns the length of the replies, referenced bodies included.
func (o *Out) Len() int { return len(o.B) + o.nref }

// Truncate drops everything after the first n bytes (n from Len).
func (o *Out) Truncate(n int) {
	for len(o.refs) > 0 {
		r := o.refs[len(o.refs)-1]
		// Where r's body starts in the whole reply stream.
		if r.at+o.nref-len(r.b) < n {
			break
		}
		o.refs = o.refs[:len(o.refs)-1]
		o.nref -= len(r.b)
	}
	o.B = o.B[:n-o.nref]
}

// writeHelp writes a HELP reply: one simple string per line, as Redis.
func writeHelp(w *Out, lines []string) {
	w.WriteArray(len(lines))
	for _, l := range lines {
		w.WriteString(l)
	}
}
