package tests

import (
	"bytes"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// TestBinaryKeys: any byte string is a key (spec §9), seen byte-exact by
// every keyspace command.
func TestBinaryKeys(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	rdb := s.Client(t)
	ctx := ctxT(t, 60*time.Second)

	big := bytes.Repeat([]byte("0123456789abcdef"), 1<<12) // 64 KiB: the longest key by default
	big[0], big[len(big)-1] = 0, 0xff
	keys := []string{
		"a\x00b",
		"\x00",
		"\r\n",
		"x\r\ny",
		"\xff\xfe\x80",
		"",
		"with space",
		"*?[", // glob metacharacters as plain bytes
		"\u00e9t\u00e9",
		string(big),
	}
	for _, k := range keys {
		name := fmt.Sprintf("%q", clip([]byte(k)))
		v, err := rdb.Do(ctx, "CL.THROTTLE", k, 5, 1, 60).Int64Slice()
		require.NoError(t, err, name)
		require.Equal(t, []int64{0, 6, 5, -1, 60}, v, name)
		v, err = rdb.Do(ctx, "CL.THROTTLE", k, 5, 1, 60).Int64Slice()
		require.NoError(t, err, name)
		require.Equal(t, []int64{0, 6, 4, -1, 120}, v, name+": second call must see the first")

		tat, err := rdb.Get(ctx, k).Result()
		require.NoError(t, err, name)
		_, err = strconv.ParseUint(tat, 10, 64)
		require.NoError(t, err, name)
		pttl, err := rdb.Do(ctx, "PTTL", k).Int64()
		require.NoError(t, err, name)
		require.True(t, pttl > 110000 && pttl <= 120000, "%s: PTTL %d", name, pttl)
		require.Equal(t, int64(1), rdb.Exists(ctx, k).Val(), name)
		require.Equal(t, "string", rdb.Type(ctx, k).Val(), name)
	}
	require.Equal(t, int64(len(keys)), rdb.DBSize(ctx).Val())

	sorted := append([]string(nil), keys...)
	sort.Strings(sorted)

	got, err := rdb.Keys(ctx, "*").Result()
	require.NoError(t, err)
	sort.Strings(got)
	require.True(t, slices.Equal(sorted, got), "KEYS * must return every key byte-exact, got %d keys: %q", len(got), clipAll(got))

	scanned := map[string]bool{}
	it := rdb.Scan(ctx, 0, "", 3).Iterator()
	for it.Next(ctx) {
		scanned[it.Val()] = true
	}
	require.NoError(t, it.Err())
	require.Len(t, scanned, len(keys))
	for _, k := range keys {
		require.True(t, scanned[k], "SCAN missed %q", clip([]byte(k)))
	}

	// Patterns with binary bytes.
	m, err := rdb.Keys(ctx, "a\x00*").Result()
	require.NoError(t, err)
	require.Equal(t, []string{"a\x00b"}, m)
	m, err = rdb.Keys(ctx, "x\r\n?").Result()
	require.NoError(t, err)
	require.Equal(t, []string{"x\r\ny"}, m)
	m, err = rdb.Keys(ctx, "\xff*").Result()
	require.NoError(t, err)
	require.Equal(t, []string{"\xff\xfe\x80"}, m)
	m, err = rdb.Keys(ctx, `\*\?\[`).Result()
	require.NoError(t, err)
	require.Equal(t, []string{"*?["}, m)
	sm, _, err := rdb.Scan(ctx, 0, "a\x00*", 1000).Result()
	require.NoError(t, err)
	require.Equal(t, []string{"a\x00b"}, sm)

	// The raw reply carries the keys unchanged (length-prefixed).
	raw := s.Raw(t)
	require.Equal(t, "*1\r\n$3\r\na\x00b\r\n", string(raw.DoArgs("KEYS", "a\x00*")))
	require.Equal(t, "*1\r\n$2\r\n\r\n\r\n", string(raw.DoArgs("KEYS", "\r\n")))
	require.Equal(t, ":1\r\n", string(raw.DoArgs("EXISTS", "")))

	for _, k := range keys {
		require.Equal(t, int64(1), rdb.Del(ctx, k).Val(), "DEL %q", clip([]byte(k)))
		require.Equal(t, int64(0), rdb.Exists(ctx, k).Val())
		_, err := rdb.Get(ctx, k).Result()
		require.Equal(t, redis.Nil, err)
	}
	require.Equal(t, int64(0), rdb.DBSize(ctx).Val())
}

func clipAll(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = string(clip([]byte(s)))
	}
	return out
}

// TestNumberArgumentsAreBinarySafe: non-UTF-8 and CR/LF in number
// arguments get the parse error, with CR/LF shown as spaces (spec §1, §9).
func TestNumberArgumentsAreBinarySafe(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	raw := s.Raw(t)
	for _, tc := range []struct {
		arg, shown string
	}{
		{"\xff", "\xff"},
		{"1\r\n2", "1  2"},
	} {
		got := raw.DoArgs("CL.THROTTLE", "k", tc.arg, "1", "1")
		want := respErr("Cell error: Store error: Couldn't parse as integer: " + tc.shown)
		require.Equal(t, string(want), string(got), "argument %q", tc.arg)
	}
	// A NUL inside the argument: redis-cell cannot even build that reply
	// (C string), so only the error itself is pinned down.
	for _, arg := range []string{"\x00", "12\x00"} {
		got := string(raw.DoArgs("CL.THROTTLE", "k", arg, "1", "1"))
		require.True(t, strings.HasPrefix(got, "-Cell error: Store error: Couldn't parse as integer: "), "argument %q: %q", arg, got)
	}
	require.Equal(t, "+PONG\r\n", string(raw.DoArgs("PING")), "server still serving")
	require.True(t, strings.HasPrefix(string(raw.DoArgs("CL.THROTTLE", "\xff\x00", "1", "1", "1")), "*5\r\n:0\r\n"),
		"a non-UTF-8 key must be accepted")
}
