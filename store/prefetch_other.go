//go:build !amd64 && !arm64

package store

// prefetch does nothing where cellserver has no prefetch instruction for
// the CPU: the warm passes' loads then stand in for it.
func prefetch(addr uintptr) {}
