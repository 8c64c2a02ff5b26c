package resp

import (
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
