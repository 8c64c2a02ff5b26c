package tests

import (
	"bufio"
	"bytes"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestProtocolReplies: requests and their exact reply bytes, as Redis 7
// sends them; the connection stays open after each.
func TestProtocolReplies(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	long := strings.Repeat("x", 200)
	for _, tc := range []struct {
		name string
		req  string
		want string
	}{
		{"unknown command", "*3\r\n$3\r\nfoo\r\n$1\r\na\r\n$1\r\nb\r\n",
			"-ERR unknown command 'foo', with args beginning with: 'a' 'b' \r\n"},
		{"unknown command no args", "*1\r\n$3\r\nfoo\r\n",
			"-ERR unknown command 'foo', with args beginning with: \r\n"},
		{"unknown command CRLF arg", "*2\r\n$3\r\nfoo\r\n$4\r\na\r\nb\r\n",
			"-ERR unknown command 'foo', with args beginning with: 'a  b' \r\n"},
		{"unknown command long args truncated", "*2\r\n$3\r\nfoo\r\n$200\r\n" + long + "\r\n",
			"-ERR unknown command 'foo', with args beginning with: '" + long[:128] + "' \r\n"},
		{"unknown command long name", "*1\r\n$200\r\n" + long + "\r\n",
			"-ERR unknown command '" + long[:128] + "', with args beginning with: \r\n"},
		{"unknown command args budget", "*4\r\n$3\r\nfoo\r\n$60\r\n" + long[:60] + "\r\n$60\r\n" + long[:60] + "\r\n$60\r\n" + long[:60] + "\r\n",
			"-ERR unknown command 'foo', with args beginning with: '" + long[:60] + "' '" + long[:60] + "' 'xx' \r\n"},
		{"wrong arity get", "*1\r\n$3\r\nGET\r\n", "-ERR wrong number of arguments for 'get' command\r\n"},
		{"wrong arity get 3", "*3\r\n$3\r\nget\r\n$1\r\na\r\n$1\r\nb\r\n", "-ERR wrong number of arguments for 'get' command\r\n"},
		{"wrong arity echo", "*1\r\n$4\r\nEcHo\r\n", "-ERR wrong number of arguments for 'echo' command\r\n"},
		{"wrong arity subcommand", "*2\r\n$6\r\nCLIENT\r\n$7\r\nSETNAME\r\n", "-ERR wrong number of arguments for 'client|setname' command\r\n"},
		{"unknown subcommand", "*2\r\n$6\r\nCLIENT\r\n$3\r\nFOO\r\n", "-ERR unknown subcommand 'FOO'. Try CLIENT HELP.\r\n"},
		{"unknown COMMAND subcommand", "*2\r\n$7\r\nCOMMAND\r\n$3\r\nFOO\r\n", "-ERR unknown subcommand 'FOO'. Try COMMAND HELP.\r\n"},
		{"COMMAND GETKEYS arity", "*2\r\n$7\r\nCOMMAND\r\n$7\r\nGETKEYS\r\n", "-ERR wrong number of arguments for 'command|getkeys' command\r\n"},
		{"COMMAND COUNT arity", "*3\r\n$7\r\nCOMMAND\r\n$5\r\nCOUNT\r\n$1\r\nx\r\n", "-ERR wrong number of arguments for 'command|count' command\r\n"},
		{"COMMAND GETKEYS without arguments", "COMMAND GETKEYS get\r\n", "-ERR wrong number of arguments for 'command|getkeys' command\r\n"},
		{"COMMAND GETKEYS no keys", "COMMAND GETKEYS ping x\r\n", "-ERR The command has no key arguments\r\n"},
		{"COMMAND GETKEYS bad arity", "COMMAND GETKEYS get a b\r\n", "-ERR Invalid number of arguments specified for command\r\n"},
		{"COMMAND GETKEYS unknown", "COMMAND GETKEYS foo a\r\n", "-ERR Invalid command specified\r\n"},
		// Redis parses integers with string2ll: no '+', no leading zeros.
		{"SELECT 0", "SELECT 0\r\n", "+OK\r\n"},
		{"SELECT 00", "SELECT 00\r\n", "-ERR value is not an integer or out of range\r\n"},
		{"SELECT +0", "SELECT +0\r\n", "-ERR value is not an integer or out of range\r\n"},
		{"SELECT -0", "SELECT -0\r\n", "-ERR value is not an integer or out of range\r\n"},
		{"SELECT 1", "SELECT 1\r\n", "-ERR DB index is out of range\r\n"},
		{"SCAN COUNT +5", "SCAN 0 COUNT +5\r\n", "-ERR value is not an integer or out of range\r\n"},
		{"DEL same key twice", "CL.THROTTLE twice 1 1 60\r\nDEL twice twice\r\n", "*5\r\n:0\r\n:2\r\n:1\r\n:-1\r\n:60\r\n:1\r\n"},
		{"throttle usage", "*2\r\n$11\r\nCL.THROTTLE\r\n$1\r\nk\r\n",
			"-Cell error: Store error: Usage: cl.throttle <key> <max_burst> <count per period> <period> [<quantity>]\r\n"},
		{"empty multibulk ignored", "*0\r\n*-1\r\n*1\r\n$4\r\nPING\r\n", "+PONG\r\n"},
		{"empty inline lines ignored", "\r\n\n   \r\nPING\r\n", "+PONG\r\n"},
		{"inline ping", "PING\r\n", "+PONG\r\n"},
		{"inline LF only", "PING\n", "+PONG\r\n"},
		{"inline throttle", "CL.THROTTLE inl 1 1 1\r\n", "*5\r\n:0\r\n:2\r\n:1\r\n:-1\r\n:1\r\n"},
		{"inline double quotes", "ECHO \"a b\"\r\n", "$3\r\na b\r\n"},
		{"inline escapes", "ECHO \"\\x41\\n\\t\\\\\"\r\n", "$4\r\nA\n\t\\\r\n"},
		{"inline single quotes", "ECHO 'it\\'s'\r\n", "$4\r\nit's\r\n"},
		{"inline extra spaces", "  ECHO    x   \r\n", "$1\r\nx\r\n"},
		{"inline unknown", "foo a b\r\n", "-ERR unknown command 'foo', with args beginning with: 'a' 'b' \r\n"},
		{"ping with arg", "*2\r\n$4\r\nPING\r\n$2\r\nhi\r\n", "$2\r\nhi\r\n"},
		{"zero-length arg", "*2\r\n$4\r\nECHO\r\n$0\r\n\r\n", "$0\r\n\r\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := s.Raw(t)
			// A PING after the request: a missing reply shows up as a
			// mismatch at once instead of a read timeout.
			c.Send([]byte(tc.req + "PING\r\n"))
			for i, want := range splitReplies(t, tc.want+"+PONG\r\n") {
				require.Equal(t, want, string(c.ReadReply()), "reply %d", i)
			}
		})
	}
}

// TestProtocolPipelineSplitAnywhere: a pipeline arrives byte by byte and
// in odd chunks; replies are the same.
func TestProtocolPipelineSplitAnywhere(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	req := []byte("*2\r\n$4\r\nECHO\r\n$5\r\nhello\r\nPING\r\n*5\r\n$11\r\nCL.THROTTLE\r\n$2\r\nsp\r\n$1\r\n5\r\n$1\r\n1\r\n$2\r\n60\r\n*2\r\n$6\r\nEXISTS\r\n$2\r\nsp\r\n")
	want := "$5\r\nhello\r\n+PONG\r\n*5\r\n:0\r\n:6\r\n:5\r\n:-1\r\n:60\r\n:1\r\n"
	for _, chunk := range []int{1, 2, 3, 7, len(req)} {
		c := s.Raw(t)
		for i := 0; i < len(req); i += chunk {
			c.Send(req[i:min(i+chunk, len(req))])
		}
		var got []byte
		for range 4 {
			got = append(got, c.ReadReply()...)
		}
		require.Equal(t, want, string(got), "chunk size %d", chunk)
		require.Equal(t, ":1\r\n", string(c.DoArgs("DEL", "sp")))
	}
}

// TestProtocolErrorsClose: malformed requests get Redis 7's protocol error
// and the connection is closed; the server keeps serving others.
func TestProtocolErrorsClose(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	for _, tc := range []struct {
		name string
		req  string
		want string // every reply before the close
	}{
		{"expected $", "*1\r\nxPING\r\n", "-ERR Protocol error: expected '$', got 'x'\r\n"},
		// Redis formats the offending byte with %c: the raw byte is sent,
		// CR/LF become spaces like in every error reply.
		{"expected $ got byte 0xff", "*1\r\n\xff", "-ERR Protocol error: expected '$', got '\xff'\r\n"},
		{"expected $ got CR", "*2\r\n$4\r\nECHO\r\n\r\n", "-ERR Protocol error: expected '$', got ' '\r\n"},
		{"expected $ second arg", "*2\r\n$4\r\nECHO\r\n:5\r\n", "-ERR Protocol error: expected '$', got ':'\r\n"},
		{"negative bulk length", "*1\r\n$-5\r\n", "-ERR Protocol error: invalid bulk length\r\n"},
		{"non-numeric bulk length", "*1\r\n$x\r\n", "-ERR Protocol error: invalid bulk length\r\n"},
		{"bulk over proto-max-bulk-len", "*2\r\n$4\r\nECHO\r\n$629145600\r\n", "-ERR Protocol error: invalid bulk length\r\n"},
		{"non-numeric multibulk", "*abc\r\n", "-ERR Protocol error: invalid multibulk length\r\n"},
		{"multibulk leading zero", "*01\r\n", "-ERR Protocol error: invalid multibulk length\r\n"},
		{"multibulk plus sign", "*+1\r\n", "-ERR Protocol error: invalid multibulk length\r\n"},
		{"multibulk trailing space", "*1 \r\n", "-ERR Protocol error: invalid multibulk length\r\n"},
		{"bulk leading zero", "*1\r\n$04\r\nPING\r\n", "-ERR Protocol error: invalid bulk length\r\n"},
		{"bulk one over 512 MiB", "*1\r\n$536870913\r\n", "-ERR Protocol error: invalid bulk length\r\n"},
		{"multibulk over INT_MAX", "*2147483648\r\n", "-ERR Protocol error: invalid multibulk length\r\n"},
		{"unbalanced double quote", "ECHO \"a b\r\n", "-ERR Protocol error: unbalanced quotes in request\r\n"},
		{"unbalanced single quote", "ECHO 'a b\r\n", "-ERR Protocol error: unbalanced quotes in request\r\n"},
		{"closing quote not followed by space", "ECHO \"a\"b\r\n", "-ERR Protocol error: unbalanced quotes in request\r\n"},
		{"too big inline", strings.Repeat("a", 70*1024), "-ERR Protocol error: too big inline request\r\n"},
		{"too big mbulk count", "*" + strings.Repeat("1", 70*1024), "-ERR Protocol error: too big mbulk count string\r\n"},
		{"too big bulk count", "*1\r\n$" + strings.Repeat("1", 70*1024), "-ERR Protocol error: too big bulk count string\r\n"},
		{"replies before the error are sent", "PING\r\nCL.THROTTLE pe 1 1 60\r\n*1\r\n$-5\r\n",
			"+PONG\r\n*5\r\n:0\r\n:2\r\n:1\r\n:-1\r\n:60\r\n-ERR Protocol error: invalid bulk length\r\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := s.Raw(t)
			c.Send([]byte(tc.req))
			for i, want := range splitReplies(t, tc.want) {
				require.Equal(t, want, string(c.ReadReply()), "reply %d", i)
			}
			c.ExpectClosed()
		})
	}
	require.Equal(t, "+PONG\r\n", string(s.Raw(t).DoArgs("PING")), "server must survive protocol errors")
}

// TestProtocolLargeArgument: a 20 MiB argument is accepted and echoed.
func TestProtocolLargeArgument(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	c := s.Raw(t)
	big := bytes.Repeat([]byte("abcdefgh"), 20<<20/8)
	big[12345] = 0
	big[len(big)-1] = '\n'
	req := fmt.Appendf(nil, "*2\r\n$4\r\nECHO\r\n$%d\r\n", len(big))
	req = append(append(req, big...), "\r\n"...)
	go func() { _, _ = c.nc.Write(req) }() // reply may start before the write ends
	got := c.ReadReply()
	want := append(fmt.Appendf(nil, "$%d\r\n", len(big)), big...)
	want = append(want, "\r\n"...)
	require.True(t, bytes.Equal(want, got), "20 MiB ECHO: got %d bytes, want %d", len(got), len(want))
	// A key of --max-key-bytes (64 KiB by default) works; a longer one is
	// refused by every keyed command, and the connection is still fine.
	key := string(big[:64<<10])
	require.Equal(t, "*5\r\n:0\r\n:2\r\n:1\r\n:-1\r\n:60\r\n", string(c.DoArgs("CL.THROTTLE", key, "1", "1", "60")))
	require.Equal(t, ":1\r\n", string(c.DoArgs("EXISTS", key)))
	long := string(big[:64<<10+1])
	tooLong := "-ERR key exceeds maximum allowed size (max-key-bytes)\r\n"
	require.Equal(t, tooLong, string(c.DoArgs("CL.THROTTLE", long, "1", "1", "60")))
	require.Equal(t, tooLong, string(c.DoArgs("EXISTS", "a", long)))
	require.Equal(t, tooLong, string(c.DoArgs("DEL", long)))
	require.Equal(t, "+PONG\r\n", string(c.DoArgs("PING")))

	// --max-key-bytes 0 lifts the limit.
	s2 := startServer(t, "--max-key-bytes", "0")
	c2 := s2.Raw(t)
	require.Equal(t, "*5\r\n:0\r\n:2\r\n:1\r\n:-1\r\n:60\r\n", string(c2.DoArgs("CL.THROTTLE", string(big[:1<<20]), "1", "1", "60")))
}

// TestProtocolInlineBinaryKey: an inline \xHH key is the same key as the
// bytes sent in RESP.
func TestProtocolInlineBinaryKey(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	c := s.Raw(t)
	require.Equal(t, "*5\r\n:0\r\n:6\r\n:5\r\n:-1\r\n:60\r\n", string(c.Do([]byte("CL.THROTTLE \"\\x00\\xff k\" 5 1 60\r\n"))))
	require.Equal(t, ":1\r\n", string(c.DoArgs("EXISTS", "\x00\xff k")))
	require.Equal(t, "*5\r\n:0\r\n:6\r\n:4\r\n:-1\r\n:120\r\n", string(c.DoArgs("CL.THROTTLE", "\x00\xff k", "5", "1", "60")))
}

// TestProtocolServerSurvivesAbuse: after a storm of bad input on many
// connections the server still answers.
func TestProtocolServerSurvivesAbuse(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	bad := []string{
		"*1\r\n$-5\r\n", "*abc\r\n", "*1\r\nx", "\"unbalanced\r\n", "*2\r\n$3\r\nGET\r\n",
		"*1\r\n$3\r\nfoo", "\x00\x01\x02\xff\r\n", "*-99999999999999999999\r\n",
		"*3\r\n$11\r\nCL.THROTTLE\r\n$1\r\nk\r\n$99999999999\r\n",
	}
	for i := 0; i < 20; i++ {
		for _, b := range bad {
			c := s.Raw(t)
			c.Send([]byte(b))
			_ = c.nc.Close()
		}
	}
	c := s.Raw(t)
	require.Equal(t, "+PONG\r\n", string(c.DoArgs("PING")))
	require.Equal(t, "*5\r\n:0\r\n:2\r\n:1\r\n:-1\r\n:1\r\n", string(c.DoArgs("CL.THROTTLE", "after-abuse", "1", "1", "1")))
}

// splitReplies splits b into its RESP replies.
func splitReplies(t *testing.T, b string) []string {
	r := bufio.NewReader(strings.NewReader(b))
	var out []string
	for {
		if _, err := r.Peek(1); err != nil {
			return out
		}
		var buf bytes.Buffer
		require.NoError(t, readRESP(r, &buf))
		out = append(out, buf.String())
	}
}

// TestCommandDocsConcurrently: COMMAND DOCS from many connections at once
// gives the same answer (and, with CELLSERVER_E2E_RACE=1, no data race).
func TestCommandDocsConcurrently(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	first := s.Raw(t).DoArgs("COMMAND", "DOCS")
	require.True(t, bytes.HasPrefix(first, []byte("*")), "%q", clip(first))
	var wg sync.WaitGroup
	errs := make(chan string, 8)
	for i := 0; i < 8; i++ {
		c := s.Raw(t)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 30; j++ {
				c.Send(encodeCommand("COMMAND", "DOCS"))
			}
			for j := 0; j < 30; j++ {
				var buf bytes.Buffer
				_ = c.nc.SetReadDeadline(time.Now().Add(20 * time.Second))
				if err := readRESP(c.r, &buf); err != nil {
					errs <- err.Error()
					return
				}
				if !bytes.Equal(buf.Bytes(), first) {
					errs <- "COMMAND DOCS reply changed"
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}
