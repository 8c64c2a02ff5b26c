package bench

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestCannedReplies: the canned server answers each whole command with its
// recorded reply, in order, however the commands are cut across reads, and
// an unknown one with an error.
func TestCannedReplies(t *testing.T) {
	port, err := FreePort()
	require.NoError(t, err)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	throttle := Value{Kind: '*', Array: []Value{{Kind: ':'}, {Kind: ':', Int: 101}, {Kind: ':', Int: 100}, {Kind: ':', Int: -1}, {Kind: ':'}}}
	reply := throttle.AppendRESP(nil)
	assert.Equal(t, "*5\r\n:0\r\n:101\r\n:100\r\n:-1\r\n:0\r\n", string(reply))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	fw := []byte("*1\r\n:7\r\n")
	go func() {
		done <- ServeCanned(ctx, addr, NewCanned(map[string][]byte{"CL.THROTTLE": reply, "CL.LIMIT fw:": fw}))
	}()
	defer func() {
		cancel()
		require.NoError(t, <-done)
	}()
	var c net.Conn
	require.Eventually(t, func() bool {
		c, err = net.Dial("tcp", addr)
		return err == nil
	}, 5*time.Second, 20*time.Millisecond)
	defer c.Close()
	var req []byte
	for i := 0; i < 3; i++ {
		req = AppendCommand(req, []byte("cl.throttle"), []byte(fmt.Sprintf("key:%d", i)), []byte("100"), []byte("10"), []byte("1"))
	}
	req = AppendCommand(req, []byte("PING"))
	req = AppendCommand(req, []byte("GET"), []byte("k"))
	req = AppendCommand(req, []byte("CL.LIMIT"), []byte("fw:1"), []byte("FW"), []byte("1"), []byte("1"))
	req = AppendCommand(req, []byte("CL.LIMIT"), []byte("swc:1"), []byte("SWC"), []byte("1"), []byte("1"))
	// One byte at a time for the first command, then the rest at once.
	for i := 0; i < 20; i++ {
		_, err = c.Write(req[i : i+1])
		require.NoError(t, err)
		time.Sleep(time.Millisecond)
	}
	_, err = c.Write(req[20:])
	require.NoError(t, err)
	r := bufio.NewReader(c)
	require.NoError(t, c.SetReadDeadline(time.Now().Add(5*time.Second)))
	for i := 0; i < 3; i++ {
		v, err := readValue(r, 0)
		require.NoError(t, err)
		assert.Equal(t, throttle, v)
	}
	v, err := readValue(r, 0)
	require.NoError(t, err)
	assert.Equal(t, "PONG", v.Str)
	v, err = readValue(r, 0)
	require.NoError(t, err)
	assert.Equal(t, Value{Kind: '-', Str: "ERR unknown command"}, v)
	v, err = readValue(r, 0)
	require.NoError(t, err)
	assert.Equal(t, Value{Kind: '*', Array: []Value{{Kind: ':', Int: 7}}}, v, "by the key's prefix")
	v, err = readValue(r, 0)
	require.NoError(t, err)
	assert.Equal(t, Value{Kind: '-', Str: "ERR unknown command"}, v, "no reply for the name alone")

	// Several connections at once, unpipelined: each reply is written at
	// the end of the loop's round, to its own connection.
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			nc, err := net.Dial("tcp", addr)
			if !assert.NoError(t, err) {
				return
			}
			defer nc.Close()
			_ = nc.SetDeadline(time.Now().Add(10 * time.Second))
			r := bufio.NewReader(nc)
			for j := 0; j < 200; j++ {
				_, err := nc.Write(AppendCommand(nil, []byte("PING")))
				if !assert.NoError(t, err) {
					return
				}
				v, err := readValue(r, 0)
				if !assert.NoError(t, err) || !assert.Equal(t, "PONG", v.Str) {
					return
				}
			}
		}()
	}
	wg.Wait()
}

// TestCannedRefusesGarbage: a request that is not an array of bulk strings
// closes the connection instead of being skipped.
func TestCannedRefusesGarbage(t *testing.T) {
	_, _, _, err := firstArgs([]byte("*1\r\n:5\r\n"))
	assert.Error(t, err)
	_, _, _, err = firstArgs([]byte("*0\r\n"))
	assert.Error(t, err)
	first, second, n, err := firstArgs([]byte("*2\r\n$4\r\nPING\r\n$1\r\nx\r\n*1"))
	require.NoError(t, err)
	assert.Equal(t, "PING", string(first))
	assert.Equal(t, "x", string(second))
	assert.Equal(t, 21, n)
	_, _, n, err = firstArgs([]byte("*2\r\n$4\r\nPING\r\n$1\r\n"))
	require.NoError(t, err)
	assert.Zero(t, n, "incomplete")
}
