package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestGCPercent(t *testing.T) {
	const mb = 1 << 20
	assert.Equal(t, 25, gcPercent(0, 25, 32*mb), "no live heap measured yet")
	assert.Equal(t, 80, gcPercent(40*mb, 25, 32*mb), "40 MB live: 32 MB of headroom")
	assert.Equal(t, 320, gcPercent(10*mb, 25, 32*mb))
	assert.Equal(t, 25, gcPercent(128*mb, 25, 32*mb), "at 128 MB the base gives the floor")
	assert.Equal(t, 25, gcPercent(1000*mb, 25, 32*mb), "a big heap keeps the base")
}
