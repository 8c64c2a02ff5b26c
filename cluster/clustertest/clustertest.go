// Package clustertest has helpers for tests of code that routes keys by
// hash slot.
package clustertest

import (
	"fmt"

	"github.com/cellserver/cellserver/cluster"
)

// KeyInSlot returns the first key prefix+N (N = 0, 1, ...) of slot; it
// panics if none of the first 4M is (every slot has one far sooner).
func KeyInSlot(prefix string, slot int) string {
	for i := range 1 << 22 {
		if k := fmt.Sprintf("%s%d", prefix, i); cluster.KeySlot([]byte(k)) == slot {
			return k
		}
	}
	panic(fmt.Sprintf("clustertest: no key %s<N> of slot %d", prefix, slot))
}
