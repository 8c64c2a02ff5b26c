//go:build amd64 || arm64

package store

// prefetch asks the CPU to bring the cache line at addr into its caches
// without waiting for it (PREFETCHT0 on amd64, PRFM PLDL1KEEP on arm64). A
// plain load that misses holds up every later instruction's retirement once
// the CPU's reorder window fills, so a pass of loads over a batch overlaps
// only a few misses; prefetches retire at once, so all of them overlap. It
// never faults, whatever addr is.
//
//go:noescape
func prefetch(addr uintptr)
