package resp

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func parseAll(t *testing.T, in string, authed bool) ([][]string, int, error) {
	t.Helper()
	p := parser{protoMaxBulk: defaultProtoMaxBulk}
	b := []byte(in)
	pos := 0
	var err error
	for pos < len(b) {
		var n int
		n, err = p.next(b[pos:], authed)
		if err != nil {
			break
		}
		pos += n
	}
	var out [][]string
	for _, argv := range p.commands(nil) {
		var c []string
		for _, a := range argv {
			c = append(c, string(a))
		}
		out = append(out, c)
	}
	return out, pos, err
}

func TestParser(t *testing.T) {
	cases := []struct {
		in   string
		want [][]string
		err  string // "" = none, "incomplete", or the protocol error text
	}{
		{"*1\r\n$4\r\nPING\r\n", [][]string{{"PING"}}, ""},
		{"*2\r\n$4\r\nECHO\r\n$0\r\n\r\n*1\r\n$4\r\nPING\r\n", [][]string{{"ECHO", ""}, {"PING"}}, ""},
		{"*2\r\n$4\r\nECHO\r\n$3\r\na\r\n\r\n", [][]string{{"ECHO", "a\r\n"}}, ""},
		{"*0\r\n*-1\r\n*1\r\n$1\r\nx\r\n", [][]string{{"x"}}, ""},
		{"*1\r\n$4\r\nPI", nil, "incomplete"},
		{"*1\r", nil, "incomplete"},
		{"PING\r\n", [][]string{{"PING"}}, ""},
		{"  \r\n\nECHO \"a b\" 'c d' \"\\x41\\n\"\n", [][]string{{"ECHO", "a b", "c d", "A\n"}}, ""},
		{"ECHO \"a\n", nil, "Protocol error: unbalanced quotes in request"},
		{"ECHO \"a\"b\n", nil, "Protocol error: unbalanced quotes in request"},
		{"*1\r\nx\r\n", nil, "Protocol error: expected '$', got 'x'"},
		{"*1\r\n\xff", nil, "Protocol error: expected '$', got '\xff'"},
		{"*x\r\n", nil, "Protocol error: invalid multibulk length"},
		{"*01\r\n", nil, "Protocol error: invalid multibulk length"},
		{"*1\r\n$-1\r\n", nil, "Protocol error: invalid bulk length"},
		{"*1\r\n$+1\r\n", nil, "Protocol error: invalid bulk length"},
		{"*1\r\n$536870913\r\n", nil, "Protocol error: invalid bulk length"},
		{"*3000000000\r\n", nil, "Protocol error: invalid multibulk length"},
	}
	for _, c := range cases {
		got, _, err := parseAll(t, c.in, true)
		switch c.err {
		case "":
			require.NoError(t, err, "%q", c.in)
		case "incomplete":
			require.ErrorIs(t, err, errIncomplete, "%q", c.in)
		default:
			require.Error(t, err, "%q", c.in)
			assert.Equal(t, c.err, err.Error(), "%q", c.in)
		}
		assert.Equal(t, c.want, got, "%q", c.in)
	}
}

func TestParserUnauthenticatedLimits(t *testing.T) {
	_, _, err := parseAll(t, "*11\r\n", false)
	assert.Equal(t, "Protocol error: unauthenticated multibulk length", err.Error())
	_, _, err = parseAll(t, "*1\r\n$16385\r\n", false)
	assert.Equal(t, "Protocol error: unauthenticated bulk length", err.Error())
	_, _, err = parseAll(t, "*1\r\n$16385\r\n", true)
	assert.ErrorIs(t, err, errIncomplete)
}

func TestParserTooBigLines(t *testing.T) {
	big := make([]byte, inlineMaxSize+1)
	for i := range big {
		big[i] = 'a'
	}
	_, _, err := parseAll(t, string(big), true)
	assert.Equal(t, "Protocol error: too big inline request", err.Error())
	_, _, err = parseAll(t, "*"+string(big), true)
	assert.Equal(t, "Protocol error: too big mbulk count string", err.Error())
	_, _, err = parseAll(t, "*1\r\n$"+string(big), true)
	assert.Equal(t, "Protocol error: too big bulk count string", err.Error())
}

func FuzzParser(f *testing.F) {
	f.Add([]byte("*2\r\n$4\r\nECHO\r\n$1\r\nx\r\nPING\r\n"))
	f.Add([]byte("ECHO \"a\\x41\" 'b'\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		p := parser{protoMaxBulk: 1 << 20}
		for len(b) > 0 {
			n, err := p.next(b, true)
			if err != nil {
				return
			}
			if n <= 0 || n > len(b) {
				t.Fatalf("consumed %d of %d", n, len(b))
			}
			b = b[n:]
		}
	})
}

// feed hands in to a parser the way the wire layer does: the unfinished
// request is carried over to the front of the next buffer, which grows by
// step bytes per read. It returns the commands parsed.
func feed(t *testing.T, in string, step int) ([][]string, error) {
	t.Helper()
	p := parser{protoMaxBulk: defaultProtoMaxBulk}
	var buf []byte
	var out [][]string
	for off := 0; off < len(in); {
		end := min(off+step, len(in))
		buf = append(buf, in[off:end]...)
		off = end
		for len(buf) > 0 {
			n, err := p.next(buf, true)
			if err == errIncomplete {
				break
			}
			if err != nil {
				return out, err
			}
			for _, argv := range p.commands(nil) {
				var c []string
				for _, a := range argv {
					c = append(c, string(a))
				}
				out = append(out, c)
			}
			p.reset()
			// Move the rest to a new buffer, as a compaction would.
			buf = append([]byte(nil), buf[n:]...)
		}
	}
	if part, _ := p.pending(); part {
		return out, errIncomplete
	}
	return out, nil
}

func TestParserResumesAcrossReads(t *testing.T) {
	in := "*3\r\n$3\r\nSET\r\n$5\r\nhello\r\n$0\r\n\r\nPING\r\n*2\r\n$4\r\nECHO\r\n$12\r\nab\r\ncd\r\nefgh\r\n*1\r\n$4\r\nPING\r\n"
	want, _, err := parseAll(t, in, true)
	require.NoError(t, err)
	for step := 1; step <= len(in); step++ {
		got, err := feed(t, in, step)
		require.NoError(t, err, "step %d", step)
		require.Equal(t, want, got, "step %d", step)
	}
	// A protocol error found after a resume is still reported.
	_, err = feed(t, "*2\r\n$4\r\nECHO\r\nx\r\n", 3)
	require.EqualError(t, err, "Protocol error: expected '$', got 'x'")
}

// TestParserNeed: once a bulk's length is known, the parser says how long
// the request will be, so the buffer can be sized once.
func TestParserNeed(t *testing.T) {
	p := parser{protoMaxBulk: defaultProtoMaxBulk}
	req := "*2\r\n$4\r\nECHO\r\n$1000\r\n"
	_, err := p.next([]byte(req), true)
	require.ErrorIs(t, err, errIncomplete)
	part, need := p.pending()
	require.True(t, part)
	require.Equal(t, len(req)+1000+2, need)
}

// TestParserLinearWork: parsing a multibulk delivered in many reads looks
// at each byte a bounded number of times.
func TestParserLinearWork(t *testing.T) {
	const n = 100000
	var b []byte
	b = fmt.Appendf(b, "*%d\r\n", n)
	for i := 0; i < n; i++ {
		b = append(b, "$1\r\nk\r\n"...)
	}
	p := parser{protoMaxBulk: defaultProtoMaxBulk}
	calls := 0
	for end := 4096; ; end += 4096 {
		calls++
		used, err := p.next(b[:min(end, len(b))], true)
		if err == errIncomplete {
			require.Less(t, end, len(b))
			// The resume point moves forward: nothing parsed is parsed again.
			require.GreaterOrEqual(t, p.pos, end-4096-16)
			continue
		}
		require.NoError(t, err)
		require.Equal(t, len(b), used)
		break
	}
	require.Len(t, p.commands(nil)[0], n)
}

func FuzzParserChunked(f *testing.F) {
	f.Add([]byte("*2\r\n$4\r\nECHO\r\n$1\r\nx\r\nPING\r\n"), uint8(3))
	f.Add([]byte("*1\r\n$3\r\nabc\r\n*2\r\n$1\r\na\r\n$2\r\nbb\r\n"), uint8(1))
	f.Fuzz(func(t *testing.T, b []byte, step uint8) {
		whole, _, werr := parseAll(t, string(b), true)
		got, err := feed(t, string(b), int(step)+1)
		if werr == nil || werr == errIncomplete {
			if err != nil && err != errIncomplete {
				t.Fatalf("chunked: %v, whole: %v", err, werr)
			}
			require.Equal(t, whole, got)
		}
	})
}
