package bench

import (
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/redcon"
)

// recorder is a RESP server that answers CL.THROTTLE with its five
// integers, FAIL with an error, HELLO with a RESP3 map, and counts every
// command and key it sees.
type recorder struct {
	mu    sync.Mutex
	calls int
	hello int
	keys  map[string]int
}

func startRecorder(t *testing.T) (*recorder, string) {
	t.Helper()
	r := &recorder{keys: map[string]int{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := redcon.NewServer("", func(conn redcon.Conn, cmd redcon.Command) {
		r.mu.Lock()
		defer r.mu.Unlock()
		switch strings.ToUpper(string(cmd.Args[0])) {
		case "HELLO":
			r.hello++
			conn.WriteRaw([]byte("%1\r\n+proto\r\n:3\r\n"))
		case "FAIL":
			conn.WriteError("ERR told to fail")
		default:
			r.calls++
			for _, a := range cmd.Args[1:] {
				if strings.HasPrefix(string(a), "k:") {
					r.keys[string(a)]++
				}
			}
			// A nested reply, split across lines the generator must skip.
			conn.WriteRaw([]byte("*3\r\n:0\r\n*2\r\n$5\r\nhello\r\n$-1\r\n_\r\n"))
		}
	}, nil, nil)
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return r, ln.Addr().String()
}

// TestPipeloadSendsEveryRequest: every request is sent and answered once,
// in pipelines of the depth asked for (the last one shorter), each
// placeholder replaced by 12 digits under the keyspace, independently.
func TestPipeloadSendsEveryRequest(t *testing.T) {
	r, addr := startRecorder(t)
	res, err := Pipeload(BenchSpec{Addr: addr, Clients: 3, Pipeline: 16, Requests: 1003, Keyspace: 50,
		Command: []string{"CL.THROTTLE", "k:__rand_int__", "1", "k:__rand_int__:x"}, Timeout: 10 * time.Second})
	require.NoError(t, err)
	assert.Equal(t, 1003, res.Requests)
	assert.Greater(t, res.RPS, 0.0)
	assert.LessOrEqual(t, res.P50MS, res.MaxMS)
	r.mu.Lock()
	defer r.mu.Unlock()
	assert.Equal(t, 1003, r.calls)
	assert.Zero(t, r.hello)
	seen := 0
	for k, n := range r.keys {
		seen += n
		d := strings.TrimSuffix(strings.TrimPrefix(k, "k:"), ":x")
		require.Len(t, d, 12, k)
		v, err := strconv.Atoi(d)
		require.NoError(t, err, k)
		assert.Less(t, v, 50, k)
	}
	assert.Equal(t, 2006, seen)
	assert.Greater(t, len(r.keys), 60, "two placeholders of one command get independent values")
}

// TestPipeloadFailsOnErrorReply: an error reply ends the run with its text.
func TestPipeloadFailsOnErrorReply(t *testing.T) {
	_, addr := startRecorder(t)
	_, err := Pipeload(BenchSpec{Addr: addr, Clients: 2, Pipeline: 4, Requests: 100, Command: []string{"FAIL"}, Timeout: 10 * time.Second})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "ERR told to fail")
}

// TestPipeloadRESP3 says HELLO 3 on every connection first.
func TestPipeloadRESP3(t *testing.T) {
	r, addr := startRecorder(t)
	_, err := Pipeload(BenchSpec{Addr: addr, Clients: 4, Pipeline: 1, Requests: 40, RESP3: true,
		Command: []string{"CL.THROTTLE", "k:1"}, Timeout: 10 * time.Second})
	require.NoError(t, err)
	r.mu.Lock()
	defer r.mu.Unlock()
	assert.Equal(t, 4, r.hello)
	assert.Equal(t, 40, r.calls)
}

// TestPipeloadRefusesRemote: like every harness tool, loopback only.
func TestPipeloadRefusesRemote(t *testing.T) {
	_, err := Pipeload(BenchSpec{Addr: "192.0.2.1:6379", Clients: 1, Requests: 1, Command: []string{"PING"}})
	require.Error(t, err)
}

// TestSkipReply: a stream of replies of every kind is cut where each ends,
// and no prefix of one counts as whole.
func TestSkipReply(t *testing.T) {
	replies := []string{
		"+OK\r\n", "-ERR x\r\n", ":-12\r\n", "$5\r\nhe\r\no\r\n", "$-1\r\n", "*-1\r\n", "*0\r\n",
		"*5\r\n:0\r\n:101\r\n:100\r\n:-1\r\n:0\r\n",
		"*2\r\n*2\r\n:1\r\n$3\r\nabc\r\n*1\r\n*1\r\n+x\r\n",
		"%2\r\n+a\r\n:1\r\n+b\r\n*1\r\n_\r\n", "~1\r\n,1.5\r\n", ">2\r\n+invalidate\r\n*1\r\n$1\r\nk\r\n",
		"=7\r\ntxt:abc\r\n", "|1\r\n+ttl\r\n:3\r\n:42\r\n", "#t\r\n", "(123\r\n",
	}
	stream := []byte(strings.Join(replies, ""))
	at := 0
	for _, want := range replies {
		for cut := at; cut < at+len(want); cut++ {
			_, ok := skipReply(stream[:cut], at, 0)
			require.False(t, ok, "%q cut at %d", want, cut-at)
		}
		end, ok := skipReply(stream, at, 0)
		require.True(t, ok, want)
		require.Equal(t, want, string(stream[at:end]))
		at = end
	}
}

func TestEncodeTemplate(t *testing.T) {
	b, holes := encodeTemplate([]string{"CL.LIMIT", "{a}k:__rand_int__", "FW", "1", "AND", "__rand_int__"}, true)
	assert.Equal(t, "*6\r\n$8\r\nCL.LIMIT\r\n$17\r\n{a}k:__rand_int__\r\n$2\r\nFW\r\n$1\r\n1\r\n$3\r\nAND\r\n$12\r\n__rand_int__\r\n", string(b))
	require.Len(t, holes, 2)
	for _, h := range holes {
		assert.Equal(t, "__rand_int__", string(b[h:h+12]))
	}
	_, holes = encodeTemplate([]string{"GET", "__rand_int__"}, false)
	assert.Empty(t, holes)
	d := make([]byte, 12)
	putDigits(d, 42)
	assert.Equal(t, "000000000042", string(d))
	assert.Equal(t, string(KeyName(nil, "", 42)), fmt.Sprint(string(d)))
}
