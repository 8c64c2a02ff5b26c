package tests

import (
	"strconv"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// rueidisClient connects rueidis with its default options (RESP3, CLIENT
// TRACKING ON OPTIN, its client-side cache on) to addrs.
func rueidisClient(t *testing.T, addrs ...string) rueidis.Client {
	t.Helper()
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: addrs})
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c
}

// checkRueidisCache runs rueidis's whole client-side caching path against
// key: CL.THROTTLE replies as redis-cell's five integers; a DoCache GET of
// the limiter key (sent as CLIENT CACHING YES, MULTI, PTTL, GET, EXEC) is
// then served from the cache, and a CL.THROTTLE of the key by another
// client invalidates it, so the next DoCache reads the new state.
func checkRueidisCache(t *testing.T, c, writer rueidis.Client, key string) {
	t.Helper()
	ctx := ctxT(t, 30*time.Second)
	throttle := func(cl rueidis.Client) []int64 {
		t.Helper()
		v, err := cl.Do(ctx, cl.B().Arbitrary("CL.THROTTLE").Keys(key).Args("100", "100", "60", "1").Build()).AsIntSlice()
		require.NoError(t, err)
		return v
	}
	first := throttle(c)
	require.Len(t, first, 5)
	assert.Equal(t, []int64{0, 101, 100, -1}, first[:4], "allowed, limit, remaining, retry after")

	get := func() (string, bool) {
		t.Helper()
		r := c.DoCache(ctx, c.B().Get().Key(key).Cache(), time.Minute)
		v, err := r.ToString()
		require.NoError(t, err)
		return v, r.IsCacheHit()
	}
	tat, hit := get()
	require.False(t, hit, "the first read goes to the server")
	_, err := strconv.ParseUint(tat, 10, 64)
	require.NoError(t, err, "GET of a limiter key answers its TAT: %q", tat)
	again, hit := get()
	require.True(t, hit, "the second read is served from rueidis's cache")
	require.Equal(t, tat, again)

	second := throttle(writer)
	require.Len(t, second, 5)
	assert.Equal(t, []int64{0, 101, 99, -1}, second[:4])

	// The invalidation arrives on its own: poll until the cache lets go.
	deadline := time.Now().Add(10 * time.Second)
	for {
		v, hit := get()
		if !hit {
			assert.NotEqual(t, tat, v, "after the invalidation the new TAT is read")
			break
		}
		require.Equal(t, tat, v, "a cached read still has the old state")
		require.True(t, time.Now().Before(deadline), "the cached GET was never invalidated")
		time.Sleep(5 * time.Millisecond)
	}
	v, hit := get()
	assert.True(t, hit, "the new state is cached again")
	_, err = strconv.ParseUint(v, 10, 64)
	assert.NoError(t, err)
}

// TestRueidisSingleNode: rueidis with default options against one node.
func TestRueidisSingleNode(t *testing.T) {
	t.Parallel()
	s := startServer(t, "--in-memory")
	c, writer := rueidisClient(t, s.Addr), rueidisClient(t, s.Addr)
	checkRueidisCache(t, c, writer, "rl:single")

	// The connection's tracking state is what rueidis asked for.
	ctx := ctxT(t, 10*time.Second)
	info, err := c.Do(ctx, c.B().ClientTrackinginfo().Build()).ToMap()
	require.NoError(t, err)
	fm := info["flags"]
	flags, err := fm.AsStrSlice()
	require.NoError(t, err)
	assert.ElementsMatch(t, []string{"on", "optin"}, flags)
}

// TestRueidisFsyncAlways: under --fsync always writes and EXEC run off
// the event loop (detached), and DoCache's EXEC with them: the cache works
// the same, invalidations included.
func TestRueidisFsyncAlways(t *testing.T) {
	t.Parallel()
	s := startServer(t, "--data-dir", t.TempDir(), "--fsync", "always")
	c, writer := rueidisClient(t, s.Addr), rueidisClient(t, s.Addr)
	checkRueidisCache(t, c, writer, "rl:fsync")
}

// TestRueidisCluster: rueidis with default options against a 3-node
// cluster, on a key of each node.
func TestRueidisCluster(t *testing.T) {
	t.Parallel()
	nodes, doc := clCluster(t)
	var addrs []string
	for _, n := range nodes {
		addrs = append(addrs, n.Addr)
	}
	c, writer := rueidisClient(t, addrs...), rueidisClient(t, addrs...)
	require.Len(t, c.Nodes(), 3)
	seen := map[int]bool{}
	for i := 0; len(seen) < 3; i++ {
		key := "rl:cluster:" + strconv.Itoa(i)
		owner := doc.owner(clSlot(key))
		if seen[owner] {
			continue
		}
		seen[owner] = true
		checkRueidisCache(t, c, writer, key)
	}
}
