package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/panjf2000/gnet/v2"
	"github.com/tidwall/redcon"
)

// Canned is a RESP server that answers every command with a reply fixed in
// advance for the command's name, and does nothing else: no parsing of
// arguments, no state, no persistence. Against it, redis-benchmark shows
// what the load generator and the wire alone allow on the machine, reply
// shape by reply shape: the ceiling of a ratio such as CL.LIMIT's rate over
// CL.THROTTLE's, which no server can beat with the same load generator on
// the same cores. It runs on gnet with one event loop, as cellserver's
// wire does, so its I/O costs what cellserver's does; like cellserver's
// (resp/writer.go), it writes each connection's replies once per round of
// the loop, after the round's reads.
type Canned struct {
	gnet.BuiltinEventEngine
	replies map[string][]byte // by lower-case command name
	booted  chan gnet.Engine
	// The connections whose replies wait for the round's write-out, and
	// that write-out, queued on the loop (one event loop: no lock).
	listed  []gnet.Conn
	spare   []gnet.Conn
	writing gnet.Runnable
}

// cannedConn is a connection's replies not written yet.
type cannedConn struct{ out []byte }

// NewCanned returns a server answering each command named in replies with
// its bytes, PING with +PONG unless given, and any other command with an
// error. A name may be followed by a space and a key prefix up to its first
// colon ("cl.limit fw:"): that reply is for the command's calls whose first
// argument starts so, and takes precedence over the plain name's.
func NewCanned(replies map[string][]byte) *Canned {
	r := map[string][]byte{"ping": []byte("+PONG\r\n")}
	for k, v := range replies {
		r[strings.ToLower(k)] = v
	}
	s := &Canned{replies: r, booted: make(chan gnet.Engine, 1)}
	s.writing = gnet.RunnableFunc(func(context.Context) error {
		s.writeOut()
		return nil
	})
	return s
}

// OnOpen gives the connection its reply buffer.
func (s *Canned) OnOpen(c gnet.Conn) ([]byte, gnet.Action) {
	c.SetContext(&cannedConn{})
	return nil, gnet.None
}

// OnClose drops it (a listed connection is then skipped).
func (s *Canned) OnClose(c gnet.Conn, _ error) gnet.Action {
	c.SetContext(nil)
	return gnet.None
}

// writeOut writes every listed connection's replies.
func (s *Canned) writeOut() {
	q := s.listed
	s.listed, s.spare = s.spare[:0], nil
	for _, c := range q {
		if cc, ok := c.Context().(*cannedConn); ok && len(cc.out) > 0 {
			_, _ = c.Write(cc.out)
			cc.out = cc.out[:0]
		}
	}
	clear(q)
	s.spare = q[:0]
}

// OnBoot hands the engine to ServeCanned, which stops it.
func (s *Canned) OnBoot(eng gnet.Engine) gnet.Action {
	s.booted <- eng
	return gnet.None
}

var errUnknownCanned = []byte("-ERR unknown command\r\n")

// OnTraffic answers every whole command received, in one write at the
// end of the loop's round.
func (s *Canned) OnTraffic(c gnet.Conn) gnet.Action {
	cc, ok := c.Context().(*cannedConn)
	if !ok {
		return gnet.Close
	}
	in, _ := c.Peek(-1)
	out := cc.out
	was := len(out)
	used := 0
	var name [64]byte
	for used < len(in) {
		cmd, key, n, err := firstArgs(in[used:])
		if err != nil {
			return gnet.Close
		}
		if n == 0 {
			break // incomplete: the rest comes with the next read
		}
		used += n
		// The lookups' keys are built lower-case in name, on the stack: a
		// map index by string(bytes) allocates nothing, as a server doing
		// nothing must not.
		nm := asciiLower(append(name[:0], cmd...))
		r, ok := []byte(nil), false
		if i := bytes.IndexByte(key, ':'); i >= 0 {
			r, ok = s.replies[string(asciiLower(append(append(nm, ' '), key[:i+1]...)))]
		}
		if !ok {
			if r, ok = s.replies[string(nm)]; !ok {
				r = errUnknownCanned
			}
		}
		out = append(out, r...)
	}
	if used > 0 { // gnet's Discard(0) discards everything
		_, _ = c.Discard(used)
	}
	cc.out = out
	if was == 0 && len(out) > 0 {
		if len(s.listed) == 0 {
			if err := c.EventLoop().Execute(context.Background(), s.writing); err != nil {
				return gnet.Close // the engine is stopping
			}
		}
		s.listed = append(s.listed, c)
	}
	return gnet.None
}

// asciiLower lower-cases b's ASCII letters in place.
func asciiLower(b []byte) []byte {
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return b
}

// firstArgs reads one RESP array of bulk strings at the start of b and
// returns its first two elements (the second nil if there is none) and the
// bytes the array takes; n is 0 when the array is not whole yet.
func firstArgs(b []byte) (first, second []byte, n int, err error) {
	count, at, ok := lenLine(b, 0, '*')
	if !ok {
		return nil, nil, 0, nil
	}
	if count < 1 || count > 1024 {
		return nil, nil, 0, errors.New("canned: bad array length")
	}
	for i := 0; i < count; i++ {
		size, next, ok := lenLine(b, at, '$')
		if !ok {
			return nil, nil, 0, nil
		}
		if size < 0 || size > 1<<20 {
			return nil, nil, 0, errors.New("canned: bad bulk length")
		}
		if next+size+2 > len(b) {
			return nil, nil, 0, nil
		}
		switch i {
		case 0:
			first = b[next : next+size]
		case 1:
			second = b[next : next+size]
		}
		at = next + size + 2
	}
	return first, second, at, nil
}

// lenLine reads "<kind><integer>\r\n" at b[at:], returning the integer and
// where the line ends; ok is false when the line is not whole yet. A line of
// another kind gives -1.
func lenLine(b []byte, at int, kind byte) (v, end int, ok bool) {
	i := bytes.IndexByte(b[at:], '\n')
	if i < 0 {
		return 0, 0, false
	}
	line := b[at : at+i+1]
	if len(line) < 3 || line[0] != kind || line[len(line)-2] != '\r' {
		return -1, at + i + 1, true
	}
	v, err := strconv.Atoi(string(line[1 : len(line)-2]))
	if err != nil {
		return -1, at + i + 1, true
	}
	return v, at + i + 1, true
}

// ServeCanned serves s on addr (loopback only) until ctx ends.
func ServeCanned(ctx context.Context, addr string, s *Canned) error {
	if err := CheckLoopback(addr); err != nil {
		return err
	}
	errc := make(chan error, 1)
	go func() {
		errc <- gnet.Run(s, "tcp://"+addr, gnet.WithNumEventLoop(1), gnet.WithTCPNoDelay(gnet.TCPNoDelay))
	}()
	var eng gnet.Engine
	select {
	case err := <-errc:
		return fmt.Errorf("canned server: %w", err)
	case eng = <-s.booted:
	}
	select {
	case err := <-errc:
		return fmt.Errorf("canned server: %w", err)
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return eng.Stop(sctx)
	}
}

// AppendRESP appends v encoded as RESP2 to b: the bytes a server sent for
// it (simple strings, errors, integers, bulk strings and arrays), written
// with redcon's appenders, as cellserver writes its replies.
func (v Value) AppendRESP(b []byte) []byte {
	switch v.Kind {
	case '+':
		return redcon.AppendString(b, v.Str)
	case '-':
		return redcon.AppendError(b, v.Str)
	case ':':
		return redcon.AppendInt(b, v.Int)
	case '$':
		if v.Null {
			return redcon.AppendNull(b)
		}
		return redcon.AppendBulkString(b, v.Str)
	case '*':
		if v.Null {
			return append(b, "*-1\r\n"...)
		}
		b = redcon.AppendArray(b, len(v.Array))
		for _, e := range v.Array {
			b = e.AppendRESP(b)
		}
	}
	return b
}
