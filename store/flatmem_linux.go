package store

import "syscall"

const madvHugepage = 14 // MADV_HUGEPAGE

func mapAnon(size int) []byte {
	b, err := syscall.Mmap(-1, 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		return nil
	}
	if size >= 2<<20 {
		_ = syscall.Madvise(b, madvHugepage) // advice only; fine if refused
	}
	return b
}

// unmapAnon unmaps b, which mapAnon returned. syscall.Munmap knows its own
// mappings by their last byte and refuses anything else (EINVAL), such as
// the heap slice flatAlloc falls back to when mmap fails.
func unmapAnon(b []byte) { _ = syscall.Munmap(b) }
