package store

import "unsafe"

// The key table's index and entry pages are the bulk of cellserver's memory
// and hold no Go pointers. Large ones live outside the Go heap (anonymous
// mmap, see flatmem_linux.go): the collector's heap goal then covers only
// the small rest, so GOGC's headroom is not 25% of the whole keyspace, and
// the kernel may back them with huge pages, which saves TLB misses on
// lookups in a big keyspace. Memory is committed as it is touched.

// flatMin is the smallest allocation taken from mmap; smaller ones come
// from the Go heap (a test store with a few keys needs no mapping).
const flatMin = 64 << 10

// flatAlloc returns n zeroed Ts. T must hold no Go pointers.
func flatAlloc[T any](n int) []T {
	var zero T
	size := n * int(unsafe.Sizeof(zero))
	if size < flatMin {
		return make([]T, n)
	}
	b := mapAnon(size)
	if b == nil {
		return make([]T, n)
	}
	return unsafe.Slice((*T)(unsafe.Pointer(unsafe.SliceData(b))), n)
}

// flatFree releases s, which flatAlloc returned; s must not be used after.
func flatFree[T any](s []T) {
	var zero T
	size := cap(s) * int(unsafe.Sizeof(zero))
	if size < flatMin || cap(s) == 0 {
		return // Go heap (or nothing): the collector frees it
	}
	unmapAnon(unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), size))
}
