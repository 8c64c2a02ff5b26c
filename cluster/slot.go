// Package cluster owns Redis Cluster hash slots: which of the 16384 slots a key
// belongs to. Keys that share a {hash tag} share a slot, so cellserver keeps them
// on one shard owner and later on one node.
package cluster

import "bytes"

// SlotCount is the number of hash slots in a Redis Cluster.
const SlotCount = 16384

// KeySlot returns the Redis Cluster hash slot of key: CRC16 (XMODEM) of the
// hash tag if the key has a non-empty one ("{...}"), else of the whole key,
// modulo 16384. It allocates nothing.
func KeySlot(key []byte) int {
	if s := bytes.IndexByte(key, '{'); s >= 0 {
		if e := bytes.IndexByte(key[s+1:], '}'); e > 0 {
			key = key[s+1 : s+1+e]
		}
	}
	return int(crc16(key) & (SlotCount - 1))
}

// crc16 is CRC-16/XMODEM (poly 0x1021, init 0), the variant Redis Cluster
// uses, eight bytes per step ("slicing-by-8": crc16tab[k][b] is the CRC of
// byte b followed by k zero bytes, and the CRC is linear), then the rest
// four, two and one bytes at a time with the same tables. Every command
// routes its key through it, so it is on the hot path: a 16-byte key takes
// a third of the bytewise loop's time, and a 15-byte key's tail three steps
// instead of seven dependent ones.
func crc16(b []byte) uint16 {
	var crc uint16
	t := &crc16tab
	for ; len(b) >= 8; b = b[8:] {
		crc = t[7][byte(crc>>8)^b[0]] ^ t[6][byte(crc)^b[1]] ^
			t[5][b[2]] ^ t[4][b[3]] ^ t[3][b[4]] ^ t[2][b[5]] ^ t[1][b[6]] ^ t[0][b[7]]
	}
	if len(b) >= 4 {
		crc = t[3][byte(crc>>8)^b[0]] ^ t[2][byte(crc)^b[1]] ^ t[1][b[2]] ^ t[0][b[3]]
		b = b[4:]
	}
	if len(b) >= 2 {
		crc = t[1][byte(crc>>8)^b[0]] ^ t[0][byte(crc)^b[1]]
		b = b[2:]
	}
	if len(b) == 1 {
		crc = crc<<8 ^ t[0][byte(crc>>8)^b[0]]
	}
	return crc
}

var crc16tab = func() (t [8][256]uint16) {
	for i := range t[0] {
		c := uint16(i) << 8
		for j := 0; j < 8; j++ {
			if c&0x8000 != 0 {
				c = c<<1 ^ 0x1021
			} else {
				c <<= 1
			}
		}
		t[0][i] = c
	}
	for k := 1; k < len(t); k++ {
		for i := range t[k] {
			p := t[k-1][i] // then one more zero byte
			t[k][i] = p<<8 ^ t[0][byte(p>>8)]
		}
	}
	return t
}()
