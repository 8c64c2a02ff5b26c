package resp

import (
	"bytes"
	"errors"
	"slices"
)

// Protocol limits and error texts, as Redis 7 (networking.c).
const (
	inlineMaxSize        = 64 * 1024   // PROTO_INLINE_MAX_SIZE
	unauthMaxMultibulk   = 10          // multibulk length before AUTH
	unauthMaxBulk        = 16384       // bulk length before AUTH
	maxMultibulk         = 1<<31 - 1   // INT_MAX
	defaultProtoMaxBulk  = 512 << 20   // proto-max-bulk-len
	defaultMaxQueryBytes = 1024 << 20  // client-query-buffer-limit
	initialReadBuffer    = 16 * 1024   // first read buffer
	maxKeptOutBuffer     = 1024 * 1024 // larger reply buffers are dropped after use
)

// ProtocolError is a malformed request. The connection answers it with
// "-ERR Protocol error: <msg>" and closes, as Redis does.
type ProtocolError struct{ msg string }

func (e *ProtocolError) Error() string { return "Protocol error: " + e.msg }

var (
	errTooBigMbulk    = &ProtocolError{"too big mbulk count string"}
	errInvalidMbulk   = &ProtocolError{"invalid multibulk length"}
	errUnauthMbulk    = &ProtocolError{"unauthenticated multibulk length"}
	errTooBigBulk     = &ProtocolError{"too big bulk count string"}
	errInvalidBulk    = &ProtocolError{"invalid bulk length"}
	errUnauthBulk     = &ProtocolError{"unauthenticated bulk length"}
	errTooBigInline   = &ProtocolError{"too big inline request"}
	errUnbalanced     = &ProtocolError{"unbalanced quotes in request"}
	errIncomplete     = errors.New("resp: incomplete")
	errQueryBufferMax = errors.New("resp: query buffer limit reached")
)

// parser splits a read buffer into commands without copying: args point into
// the buffer and stay valid until the buffer is compacted.
//
// A multibulk that has not fully arrived is not parsed again on the next
// read: the parser keeps the arguments parsed so far as offsets from the
// request's first byte, and where the next one starts. The caller must hand
// the next call a buffer that starts with the same request (the unfinished
// request may have moved, but not changed), so parsing costs one pass over
// the request however many reads it arrives in.
type parser struct {
	protoMaxBulk int64
	args         [][]byte // every parsed arg, commands back to back
	ends         []int    // end index in args of each command
	spare        [][]byte // room for args while a pending pipeline keeps the last (hand)

	// The unfinished multibulk, if part: left arguments still to come, the
	// next one at offset pos; offs holds start and end offsets of those
	// parsed. need is how many bytes from the request's start the argument
	// being read needs (0 until its length is known): the caller may size
	// its buffer once for a large argument instead of growing it per read.
	part bool
	left int64
	pos  int
	offs []uint32 // requests are below MaxQueryBuffer (1 GiB by default, < 4 GiB)
	need int
}

// next parses one command from b. It returns the bytes consumed (0 and
// errIncomplete when b holds no whole command). A command with no arguments
// (empty inline line, "*0") consumes its bytes and appends nothing.
func (p *parser) next(b []byte, authed bool) (int, error) {
	if len(b) == 0 {
		return 0, errIncomplete
	}
	if !p.part {
		if b[0] != '*' {
			return p.inline(b)
		}
		cr := bytes.IndexByte(b, '\r')
		if cr < 0 {
			if len(b) > inlineMaxSize {
				return 0, errTooBigMbulk
			}
			return 0, errIncomplete
		}
		if cr+1 >= len(b) {
			return 0, errIncomplete
		}
		count, ok := string2ll(b[1:cr])
		if !ok || count > maxMultibulk {
			return 0, errInvalidMbulk
		}
		if count > unauthMaxMultibulk && !authed {
			return 0, errUnauthMbulk
		}
		if count <= 0 {
			return cr + 2, nil
		}
		p.part, p.left, p.pos, p.offs = true, count, cr+2, p.offs[:0]
	}
	pos := p.pos
	for ; p.left > 0; p.left-- {
		if pos >= len(b) {
			return p.suspend(pos, 0)
		}
		if b[pos] != '$' {
			p.abandon()
			return 0, &ProtocolError{"expected '$', got '" + string(b[pos:pos+1]) + "'"}
		}
		cr := bytes.IndexByte(b[pos:], '\r')
		if cr < 0 {
			if len(b)-pos > inlineMaxSize {
				p.abandon()
				return 0, errTooBigBulk
			}
			return p.suspend(pos, 0)
		}
		cr += pos
		if cr+1 >= len(b) {
			return p.suspend(pos, 0)
		}
		n, ok := string2ll(b[pos+1 : cr])
		if !ok || n < 0 || n > p.protoMaxBulk {
			p.abandon()
			return 0, errInvalidBulk
		}
		if n > unauthMaxBulk && !authed {
			p.abandon()
			return 0, errUnauthBulk
		}
		start := cr + 2
		if int64(len(b)-start) < n+2 {
			return p.suspend(pos, start+int(n)+2)
		}
		end := start + int(n)
		p.offs = append(p.offs, uint32(start), uint32(end))
		pos = end + 2
	}
	// One allocation for the arguments: growing a slice of pointers step by
	// step copies it under write barriers and gives the collector more to scan.
	p.args = slices.Grow(p.args, len(p.offs)/2)
	for i := 0; i < len(p.offs); i += 2 {
		s, e := p.offs[i], p.offs[i+1]
		p.args = append(p.args, b[s:e:e])
	}
	p.ends = append(p.ends, len(p.args))
	p.abandon()
	return pos, nil
}

// suspend records where the unfinished multibulk stopped.
func (p *parser) suspend(pos, need int) (int, error) {
	p.pos, p.need = pos, need
	return 0, errIncomplete
}

// abandon forgets the unfinished multibulk.
func (p *parser) abandon() {
	p.part, p.left, p.pos, p.need = false, 0, 0, 0
	p.offs = p.offs[:0]
	if cap(p.offs) > 2*maxKeptArgs {
		p.offs = nil
	}
}

// pending reports whether a multibulk is partly parsed, and the least
// length its request needs (0 if not known yet).
func (p *parser) pending() (bool, int) { return p.part, p.need }

// inline parses a telnet-style line: arguments split by spaces, with
// Redis's quoting rules (sdssplitargs).
func (p *parser) inline(b []byte) (int, error) {
	nl := bytes.IndexByte(b, '\n')
	if nl < 0 {
		if len(b) > inlineMaxSize {
			return 0, errTooBigInline
		}
		return 0, errIncomplete
	}
	line := b[:nl]
	if len(line) > 0 && line[len(line)-1] == '\r' {
		line = line[:len(line)-1]
	}
	args, ok := splitArgs(line)
	if !ok {
		return 0, errUnbalanced
	}
	if len(args) > 0 {
		p.args = append(p.args, args...)
		p.ends = append(p.ends, len(p.args))
	}
	return nl + 1, nil
}

// commands returns the parsed commands as argv slices and resets the parser.
func (p *parser) commands(dst [][][]byte) [][][]byte {
	from := 0
	for _, e := range p.ends {
		dst = append(dst, p.args[from:e:e])
		from = e
	}
	p.ends = p.ends[:0]
	return dst
}

// reset drops the parsed commands (not an unfinished one: see next).
func (p *parser) reset() {
	clear(p.args)
	p.args = p.args[:0]
	p.ends = p.ends[:0]
	if cap(p.args) > maxKeptArgs {
		p.args = nil // one huge command's; not kept for the connection's life
	}
	if cap(p.ends) > maxKeptArgs {
		p.ends = nil
	}
}

// hand drops the parsed commands as reset does, but leaves their arguments
// to the caller (a pipeline left pending reads them until it is answered)
// and parses the next into spare room; give them back with giveBack.
func (p *parser) hand() [][]byte {
	held := p.args
	p.args, p.spare = p.spare, nil
	p.ends = p.ends[:0]
	return held
}

// giveBack takes back arguments hand left, once nothing reads them.
func (p *parser) giveBack(args [][]byte) {
	clear(args)
	if cap(args) <= maxKeptArgs && p.spare == nil {
		p.spare = args[:0]
	}
}

// maxKeptArgs is how many parsed arguments' room a connection keeps between
// pipelines.
const maxKeptArgs = 4096

// string2ll parses a decimal int64 the way Redis's string2ll does: an
// optional '-', no '+', no leading zeros, no spaces.
func string2ll(b []byte) (int64, bool) {
	if len(b) == 0 || len(b) > 20 {
		return 0, false
	}
	if len(b) == 1 && b[0] == '0' {
		return 0, true
	}
	neg := b[0] == '-'
	if neg {
		b = b[1:]
	}
	if len(b) == 0 || b[0] < '1' || b[0] > '9' {
		return 0, false
	}
	var v uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		if v > (1<<64-1)/10 {
			return 0, false
		}
		v = v*10 + uint64(c-'0')
	}
	if neg {
		if v > 1<<63 {
			return 0, false
		}
		return -int64(v), true
	}
	if v > 1<<63-1 {
		return 0, false
	}
	return int64(v), true
}

// splitArgs is Redis's sdssplitargs: space-separated words, "double quoted"
// with \n \r \t \b \a \\ \" and \xHH escapes, or 'single quoted' with \'.
// A closing quote must be followed by a space or the end of the line.
func splitArgs(line []byte) ([][]byte, bool) {
	var args [][]byte
	i := 0
	for {
		for i < len(line) && isSpace(line[i]) {
			i++
		}
		if i >= len(line) {
			return args, true
		}
		var cur []byte
		inq, insq := false, false
		for done := false; !done; {
			if inq {
				if i >= len(line) {
					return nil, false
				}
				c := line[i]
				switch {
				case c == '\\' && i+3 < len(line) && line[i+1] == 'x' && isHex(line[i+2]) && isHex(line[i+3]):
					cur = append(cur, hexVal(line[i+2])<<4|hexVal(line[i+3]))
					i += 3
				case c == '\\' && i+1 < len(line):
					i++
					switch line[i] {
					case 'n':
						cur = append(cur, '\n')
					case 'r':
						cur = append(cur, '\r')
					case 't':
						cur = append(cur, '\t')
					case 'b':
						cur = append(cur, '\b')
					case 'a':
						cur = append(cur, '\a')
					default:
						cur = append(cur, line[i])
					}
				case c == '"':
					if i+1 < len(line) && !isSpace(line[i+1]) {
						return nil, false
					}
					done = true
				default:
					cur = append(cur, c)
				}
			} else if insq {
				if i >= len(line) {
					return nil, false
				}
				c := line[i]
				switch {
				case c == '\\' && i+1 < len(line) && line[i+1] == '\'':
					i++
					cur = append(cur, '\'')
				case c == '\'':
					if i+1 < len(line) && !isSpace(line[i+1]) {
						return nil, false
					}
					done = true
				default:
					cur = append(cur, c)
				}
			} else {
				if i >= len(line) {
					break
				}
				switch c := line[i]; c {
				case ' ', '\n', '\r', '\t', 0:
					done = true
				case '"':
					inq = true
				case '\'':
					insq = true
				default:
					cur = append(cur, c)
				}
			}
			if i < len(line) {
				i++
			}
		}
		if cur == nil {
			cur = []byte{}
		}
		args = append(args, cur)
	}
}

func isSpace(c byte) bool {
	return c == ' ' || c == '\n' || c == '\r' || c == '\t' || c == '\v' || c == '\f'
}

func isHex(c byte) bool {
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')
}

func hexVal(c byte) byte {
	switch {
	case c >= '0' && c <= '9':
		return c - '0'
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10
	}
	return c - 'A' + 10
}
