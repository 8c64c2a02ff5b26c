package cluster

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestKeySlot(t *testing.T) {
	// Values from the Redis Cluster specification and redis-cli CLUSTER KEYSLOT.
	cases := []struct {
		key  string
		slot int
	}{
		{"123456789", 12739}, // CRC16/XMODEM check value 0x31C3
		{"foo", 12182},
		{"bar", 5061},
		{"user123", 13438},
		{"{user1000}.following", 3443},
		{"{user1000}.followers", 3443},
		{"user1000", 3443},
		{"foo{}{bar}", 8363}, // empty tag: whole key hashed
		{"foo{{bar}}zap", 4015},
		{"foo{bar}{zap}", 5061}, // first tag only
		{"", 0},
	}
	for _, c := range cases {
		assert.Equal(t, c.slot, KeySlot([]byte(c.key)), c.key)
	}
}

func BenchmarkKeySlot(b *testing.B) {
	k := []byte("user:1234567890:api")
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		KeySlot(k)
	}
}
