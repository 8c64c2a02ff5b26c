package commands

import (
	"strconv"

	"github.com/tidwall/redcon"
)

// Out is a pipeline's reply buffer: handlers append RESP replies to it and
// the wire layer writes it to the socket with one flush. The zero value is
// ready to use.
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
}

// outRef is a referenced bulk body, to be written before B[at:].
type outRef struct {
	at int
	b  []byte
}

// bigRef is the size from which WriteBulkRef references instead of copying.
const bigRef = 64 << 10

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
func (o *Out) WriteInt(n int64) { o.B = redcon.AppendInt(o.B, n) }

// WriteArray appends an array header of n elements.
func (o *Out) WriteArray(n int) { o.B = redcon.AppendArray(o.B, n) }

// WriteNull appends the RESP2 null bulk string.
func (o *Out) WriteNull() { o.B = redcon.AppendNull(o.B) }

// WriteNullArray appends the RESP2 null array (*-1).
func (o *Out) WriteNullArray() { o.B = append(o.B, "*-1\r\n"...) }

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
