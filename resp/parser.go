package resp

import (
	"bytes"
	"errors"
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
type parser struct {
	protoMaxBulk int64
	args         [][]byte // every parsed arg, commands back to back
	ends         []int    // end index in args of each command
}

// next parses one command from b. It returns the bytes consumed (0 and
// errIncomplete when b holds no whole command). A command with no arguments
// (empty inline line, "*0") consumes its bytes and appends nothing.
func (p *parser) next(b []byte, authed bool) (int, error) {
	if len(b) == 0 {
		return 0, errIncomplete
	}
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
	pos := cr + 2
	if count <= 0 {
		return pos, nil
	}
	mark := len(p.args)
	for i := int64(0); i < count; i++ {
		if pos >= len(b) {
			p.args = p.args[:mark]
			return 0, errIncomplete
		}
		if b[pos] != '$' {
			p.args = p.args[:mark]
			return 0, &ProtocolError{"expected '$', got '" + string(b[pos:pos+1]) + "'"}
		}
		cr := bytes.IndexByte(b[pos:], '\r')
		if cr < 0 {
			p.args = p.args[:mark]
			if len(b)-pos > inlineMaxSize {
				return 0, errTooBigBulk
			}
			return 0, errIncomplete
		}
		cr += pos
		if cr+1 >= len(b) {
			p.args = p.args[:mark]
			return 0, errIncomplete
		}
		n, ok := string2ll(b[pos+1 : cr])
		if !ok || n < 0 || n > p.protoMaxBulk {
			p.args = p.args[:mark]
			return 0, errInvalidBulk
		}
		if n > unauthMaxBulk && !authed {
			p.args = p.args[:mark]
			return 0, errUnauthBulk
		}
		start := cr + 2
		if int64(len(b)-start) < n+2 {
			p.args = p.args[:mark]
			return 0, errIncomplete
		}
		end := start + int(n)
		p.args = append(p.args, b[start:end:end])
		pos = end + 2
	}
	p.ends = append(p.ends, len(p.args))
	return pos, nil
}

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

func (p *parser) reset() {
	clear(p.args)
	p.args = p.args[:0]
	p.ends = p.ends[:0]
}

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
