// Package bench holds the pieces of the cellserver benchmark harness: a
// minimal RESP client, the GCRA Lua script used as the Redis reference, process
// management for the servers under test, a redis-benchmark runner and parser,
// and a pipelined key loader. The program that ties them together is
// bench/cmd/compare; see bench/README.md.
//
// Everything here talks to loopback addresses only: Dial refuses anything that
// is not 127.0.0.1.
package bench

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"time"
)

// Value is one decoded RESP2 reply. Exactly one of the fields is meaningful,
// chosen by Kind.
type Value struct {
	Kind  byte   // '+' simple string, '-' error, ':' integer, '$' bulk, '*' array
	Str   string // '+', '-', '$'
	Int   int64  // ':'
	Null  bool   // '$' or '*' with length -1
	Array []Value
}

// Ints returns the elements of an array of integers, or an error describing
// what the reply was instead.
func (v Value) Ints() ([]int64, error) {
	if v.Kind == '-' {
		return nil, errors.New(v.Str)
	}
	if v.Kind != '*' || v.Null {
		return nil, fmt.Errorf("expected an array of integers, got %s", v)
	}
	out := make([]int64, len(v.Array))
	for i, e := range v.Array {
		if e.Kind != ':' {
			return nil, fmt.Errorf("expected an array of integers, got %s", v)
		}
		out[i] = e.Int
	}
	return out, nil
}

// String renders the value compactly for messages.
func (v Value) String() string {
	switch v.Kind {
	case '+':
		return v.Str
	case '-':
		return "(error) " + v.Str
	case ':':
		return strconv.FormatInt(v.Int, 10)
	case '$':
		if v.Null {
			return "(nil)"
		}
		return strconv.Quote(v.Str)
	case '*':
		if v.Null {
			return "(nil array)"
		}
		s := "["
		for i, e := range v.Array {
			if i > 0 {
				s += " "
			}
			s += e.String()
		}
		return s + "]"
	}
	return "(unknown)"
}

// Conn is a RESP2 client connection. It is not safe for concurrent use.
type Conn struct {
	c       net.Conn
	r       *bufio.Reader
	w       *bufio.Writer
	Timeout time.Duration // per Do / Flush+read deadline; 0 means 30 s
}

// Dial connects to addr, which must be a 127.0.0.1 address: the harness never
// sends traffic anywhere else.
func Dial(addr string, timeout time.Duration) (*Conn, error) {
	if err := CheckLoopback(addr); err != nil {
		return nil, err
	}
	c, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return nil, err
	}
	return &Conn{c: c, r: bufio.NewReaderSize(c, 64<<10), w: bufio.NewWriterSize(c, 64<<10)}, nil
}

// CheckLoopback returns an error unless addr is host:port with host 127.0.0.1.
func CheckLoopback(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	if host != "127.0.0.1" {
		return fmt.Errorf("bench: refusing non-loopback address %q", addr)
	}
	return nil
}

// Close closes the connection.
func (c *Conn) Close() error { return c.c.Close() }

func (c *Conn) deadline() {
	t := c.Timeout
	if t == 0 {
		t = 30 * time.Second
	}
	_ = c.c.SetDeadline(time.Now().Add(t))
}

// Send buffers one command; Flush sends everything buffered.
func (c *Conn) Send(args ...string) {
	c.w.WriteByte('*')
	c.w.WriteString(strconv.Itoa(len(args)))
	c.w.WriteString("\r\n")
	for _, a := range args {
		c.w.WriteByte('$')
		c.w.WriteString(strconv.Itoa(len(a)))
		c.w.WriteString("\r\n")
		c.w.WriteString(a)
		c.w.WriteString("\r\n")
	}
}

// SendRaw buffers pre-encoded RESP bytes.
func (c *Conn) SendRaw(b []byte) { c.w.Write(b) }

// Flush writes the buffered commands.
func (c *Conn) Flush() error {
	c.deadline()
	return c.w.Flush()
}

// Receive reads one reply.
func (c *Conn) Receive() (Value, error) {
	c.deadline()
	return readValue(c.r, 0)
}

// Do sends one command and reads its reply. An error reply is returned as a
// Value of Kind '-', not as a Go error.
func (c *Conn) Do(args ...string) (Value, error) {
	c.Send(args...)
	if err := c.Flush(); err != nil {
		return Value{}, err
	}
	return c.Receive()
}

const maxDepth = 16

func readValue(r *bufio.Reader, depth int) (Value, error) {
	if depth > maxDepth {
		return Value{}, errors.New("bench: reply nested too deeply")
	}
	line, err := r.ReadSlice('\n')
	if err != nil {
		return Value{}, err
	}
	if len(line) < 3 || line[len(line)-2] != '\r' {
		return Value{}, fmt.Errorf("bench: malformed reply line %q", line)
	}
	kind, body := line[0], string(line[1:len(line)-2])
	switch kind {
	case '+', '-':
		return Value{Kind: kind, Str: body}, nil
	case ':':
		n, err := strconv.ParseInt(body, 10, 64)
		if err != nil {
			return Value{}, fmt.Errorf("bench: bad integer reply %q", body)
		}
		return Value{Kind: ':', Int: n}, nil
	case '$':
		n, err := strconv.Atoi(body)
		if err != nil || n < -1 || n > 512<<20 {
			return Value{}, fmt.Errorf("bench: bad bulk length %q", body)
		}
		if n == -1 {
			return Value{Kind: '$', Null: true}, nil
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return Value{}, err
		}
		return Value{Kind: '$', Str: string(buf[:n])}, nil
	case '*':
		n, err := strconv.Atoi(body)
		if err != nil || n < -1 || n > 1<<24 {
			return Value{}, fmt.Errorf("bench: bad array length %q", body)
		}
		if n == -1 {
			return Value{Kind: '*', Null: true}, nil
		}
		v := Value{Kind: '*', Array: make([]Value, n)}
		for i := range v.Array {
			if v.Array[i], err = readValue(r, depth+1); err != nil {
				return Value{}, err
			}
		}
		return v, nil
	}
	return Value{}, fmt.Errorf("bench: unknown reply type %q", line)
}

// AppendCommand appends args encoded as a RESP array of bulk strings to b.
func AppendCommand(b []byte, args ...[]byte) []byte {
	b = append(b, '*')
	b = strconv.AppendInt(b, int64(len(args)), 10)
	b = append(b, '\r', '\n')
	for _, a := range args {
		b = append(b, '$')
		b = strconv.AppendInt(b, int64(len(a)), 10)
		b = append(b, '\r', '\n')
		b = append(b, a...)
		b = append(b, '\r', '\n')
	}
	return b
}
