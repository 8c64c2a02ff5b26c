// Package cluster owns Redis Cluster hash slots: which of the 16384 slots a key
// belongs to. Keys that share a {hash tag} share a slot, so cellserver keeps them
// on one shard owner and later on one node.
package cluster

// SlotCount is the number of hash slots in a Redis Cluster.
const SlotCount = 16384

// KeySlot returns the Redis Cluster hash slot of key: CRC16 (XMODEM) of the
// hash tag if the key has a non-empty one ("{...}"), else of the whole key,
// modulo 16384. It allocates nothing.
func KeySlot(key []byte) int {
	s := -1
	for i, b := range key {
		if b == '{' {
			s = i
			break
		}
	}
	if s >= 0 {
		for e := s + 1; e < len(key); e++ {
			if key[e] == '}' {
				if e > s+1 {
					key = key[s+1 : e]
				}
				break
			}
		}
	}
	return int(crc16(key) & (SlotCount - 1))
}

// crc16 is CRC-16/XMODEM (poly 0x1021, init 0), the variant Redis Cluster uses.
func crc16(b []byte) uint16 {
	var crc uint16
	for _, c := range b {
		crc = crc<<8 ^ crc16tab[byte(crc>>8)^c]
	}
	return crc
}

var crc16tab = func() (t [256]uint16) {
	for i := range t {
		c := uint16(i) << 8
		for j := 0; j < 8; j++ {
			if c&0x8000 != 0 {
				c = c<<1 ^ 0x1021
			} else {
				c <<= 1
			}
		}
		t[i] = c
	}
	return t
}()
