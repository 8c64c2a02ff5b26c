package store

import (
	"sync"
	"syscall"
	"unsafe"
)

const madvHugepage = 14 // MADV_HUGEPAGE

// mapped remembers which regions came from mmap (a heap fallback after a
// failed mmap must not be unmapped).
var mapped sync.Map // uintptr -> int (length)

func mapAnon(size int) []byte {
	b, err := syscall.Mmap(-1, 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		return nil
	}
	if size >= 2<<20 {
		_ = syscall.Madvise(b, madvHugepage) // advice only; fine if refused
	}
	mapped.Store(uintptr(unsafe.Pointer(unsafe.SliceData(b))), len(b))
	return b
}

func unmapAnon(b []byte) {
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	n, ok := mapped.LoadAndDelete(p)
	if !ok {
		return
	}
	_ = syscall.Munmap(unsafe.Slice(unsafe.SliceData(b), n.(int)))
}
