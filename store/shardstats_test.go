package store

import (
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestShardStatsSumToStats: each key counts on the shard that owns it, and
// the shards' figures sum to Stats's.
func TestShardStatsSumToStats(t *testing.T) {
	st, clk := newTestStore(t, 4)
	want := make([]int64, 4)
	for i := 0; i < 40; i++ {
		key := "k" + strconv.Itoa(i)
		run(st, throttleOp(key, 1, 1, 1, 1))
		want[st.ShardOf([]byte(key))]++
	}
	per := st.ShardStats()
	require.Len(t, per, 4)
	var sum Stats
	for i, s := range per {
		assert.Equal(t, want[i], s.Keys, "shard %d", i)
		sum.Keys += s.Keys
		sum.Expires += s.Expires
		sum.ExpiredKeys += s.ExpiredKeys
		sum.TableBytes += s.TableBytes
	}
	assert.Equal(t, st.Stats(), sum)

	// Expiry moves keys to ExpiredKeys on their own shard.
	clk.Set(t0 + 10e9)
	run(st, &GetReq{Key: []byte("k0")})
	shard := st.ShardOf([]byte("k0"))
	assert.Equal(t, int64(1), st.ShardStats()[shard].ExpiredKeys)
	assert.Equal(t, int64(1), st.Stats().ExpiredKeys)
}
