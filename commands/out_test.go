package commands

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/tidwall/redcon"
)

// TestOutWriters: each writer of a RESP3 type, in both protocols (RESP2 is
// also what the zero Out writes).
func TestOutWriters(t *testing.T) {
	cases := []struct {
		name         string
		write        func(*Out)
		resp2, resp3 string
	}{
		{"map", func(o *Out) { o.WriteMap(3) }, "*6\r\n", "%3\r\n"},
		{"empty map", func(o *Out) { o.WriteMap(0) }, "*0\r\n", "%0\r\n"},
		{"set", func(o *Out) { o.WriteSet(12) }, "*12\r\n", "~12\r\n"},
		{"null", func(o *Out) { o.WriteNull() }, "$-1\r\n", "_\r\n"},
		{"null array", func(o *Out) { o.WriteNullArray() }, "*-1\r\n", "_\r\n"},
		{"verbatim", func(o *Out) { o.WriteVerbatim("a:1\r\n") }, "$5\r\na:1\r\n\r\n", "=9\r\ntxt:a:1\r\n\r\n"},
		{"empty verbatim", func(o *Out) { o.WriteVerbatim("") }, "$0\r\n\r\n", "=4\r\ntxt:\r\n"},
		{"true", func(o *Out) { o.WriteBool(true) }, ":1\r\n", "#t\r\n"},
		{"false", func(o *Out) { o.WriteBool(false) }, ":0\r\n", "#f\r\n"},
		{"double", func(o *Out) { o.WriteDouble(1.5) }, "$3\r\n1.5\r\n", ",1.5\r\n"},
		{"integral double", func(o *Out) { o.WriteDouble(-42) }, "$3\r\n-42\r\n", ",-42\r\n"},
		{"shortest double", func(o *Out) { o.WriteDouble(0.1) }, "$3\r\n0.1\r\n", ",0.1\r\n"},
		{"small double", func(o *Out) { o.WriteDouble(1.5e-7) }, "$7\r\n1.5e-07\r\n", ",1.5e-07\r\n"},
		{"huge double", func(o *Out) { o.WriteDouble(1e300) }, "$6\r\n1e+300\r\n", ",1e+300\r\n"},
		{"inf", func(o *Out) { o.WriteDouble(math.Inf(1)) }, "$3\r\ninf\r\n", ",inf\r\n"},
		{"-inf", func(o *Out) { o.WriteDouble(math.Inf(-1)) }, "$4\r\n-inf\r\n", ",-inf\r\n"},
		{"nan", func(o *Out) { o.WriteDouble(math.NaN()) }, "$3\r\nnan\r\n", ",nan\r\n"},
		{"-0", func(o *Out) { o.WriteDouble(math.Copysign(0, -1)) }, "$2\r\n-0\r\n", ",-0\r\n"},
		// Unchanged by the protocol.
		{"array", func(o *Out) { o.WriteArray(5) }, "*5\r\n", "*5\r\n"},
		{"bulk", func(o *Out) { o.WriteBulkString("x") }, "$1\r\nx\r\n", "$1\r\nx\r\n"},
		{"error", func(o *Out) { o.WriteError("ERR x") }, "-ERR x\r\n", "-ERR x\r\n"},
	}
	for _, c := range cases {
		var zero, o2, o3 Out
		o2.Proto, o3.Proto = 2, 3
		c.write(&zero)
		c.write(&o2)
		c.write(&o3)
		assert.Equal(t, c.resp2, string(zero.B), "%s, zero Out", c.name)
		assert.Equal(t, c.resp2, string(o2.B), "%s, RESP2", c.name)
		assert.Equal(t, c.resp3, string(o3.B), "%s, RESP3", c.name)
	}
}

// TestOutWriteInt: every integer is written as redcon writes it, whether it
// comes from the table of small ones or not, into a full buffer or one
// with room, and the copy's padding never shows.
func TestOutWriteInt(t *testing.T) {
	vals := []int64{math.MinInt64, math.MaxInt64, -1 << 40, 1 << 40, smallInts - 1, smallInts, smallInts + 1}
	for v := int64(-20); v < smallInts+20; v++ {
		vals = append(vals, v)
	}
	for _, v := range vals {
		want := string(redcon.AppendInt([]byte("x"), v))
		var full Out
		full.B = []byte("x")[:1:1] // no room: append
		full.WriteInt(v)
		roomy := Out{B: append(make([]byte, 0, 64), 'x')}
		roomy.WriteInt(v)
		roomy.WriteInt(v)
		if !assert.Equal(t, want, string(full.B), v) ||
			!assert.Equal(t, want+want[1:], string(roomy.B), v) {
			return
		}
	}
}
