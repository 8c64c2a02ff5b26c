package cluster

import (
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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

// BenchmarkKeySlot: keys of 15, 16 and 19 bytes (the benchmark harness's
// "fw:" and "key:" keys, and one with a tail of three bytes).
func BenchmarkKeySlot(b *testing.B) {
	for _, k := range []string{"fw:000000012345", "key:000000012345", "user:1234567890:api"} {
		b.Run(strconv.Itoa(len(k)), func(b *testing.B) {
			key := []byte(k)
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				KeySlot(key)
			}
		})
	}
}

// crc16Bytewise is the textbook one-byte-at-a-time CRC-16/XMODEM, computed
// bit by bit: the reference the sliced crc16 must match.
func crc16Bytewise(b []byte) uint16 {
	var crc uint16
	for _, c := range b {
		crc ^= uint16(c) << 8
		for j := 0; j < 8; j++ {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}

func TestCRC16MatchesBitwise(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	buf := make([]byte, 100)
	for n := 0; n <= len(buf); n++ { // every tail length after the 8-byte steps
		for range 50 {
			for i := range buf[:n] {
				buf[i] = byte(r.Uint32())
			}
			require.Equal(t, crc16Bytewise(buf[:n]), crc16(buf[:n]), "% x", buf[:n])
		}
	}
	assert.Equal(t, uint16(0x31C3), crc16([]byte("123456789")))
}
