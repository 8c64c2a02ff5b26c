package commands

import (
	"strconv"

	"github.com/tidwall/redcon"
)

// Out is a pipeline's reply buffer: handlers append RESP replies to it and
// the wire layer writes it to the socket with one flush. The zero value is
// ready to use.
type Out struct {
	B []byte
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

// Len returns the buffered length.
func (o *Out) Len() int { return len(o.B) }

// Truncate drops everything after n bytes.
func (o *Out) Truncate(n int) { o.B = o.B[:n] }

// writeHelp writes a HELP reply: one simple string per line, as Redis.
func writeHelp(w *Out, lines []string) {
	w.WriteArray(len(lines))
	for _, l := range lines {
		w.WriteString(l)
	}
}
