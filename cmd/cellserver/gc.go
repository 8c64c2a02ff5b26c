package main

import (
	"runtime/debug"
	"runtime/metrics"
	"time"
)

// GC tuning. Nearly all of cellserver's memory is long-lived, pointer-free
// key tables that the collector marks without scanning, so collecting often
// costs little and keeps RSS close to the live heap: GOGC is 25. But with
// few keys the heap is mostly Pebble's memtable and buffers (about 40 MB at
// 100k keys), a quarter of which is a few MB, so under load the collector
// ran about once a second, each cycle with two stop-the-world pauses of up
// to 2-3 ms on the 2-core VM. So the headroom is at least gcFloor: the
// percentage rises while the live heap is below gcFloor*100/gcBase (128 MB).
const (
	gcBase  = 25
	gcFloor = 32 << 20
)

// gcPercent returns the GOGC that gives a heap of live bytes at least
// floor bytes of headroom, and never less than base.
func gcPercent(live, base, floor uint64) int {
	if live == 0 || floor*100/live <= base {
		return int(base)
	}
	return int(floor * 100 / live)
}

// tuneGC sets GOGC from the live heap once a second until stop is closed.
// It changes it only when the new value differs by more than a tenth.
func tuneGC(stop <-chan struct{}) {
	sample := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	last := gcBase // main set it
	tk := time.NewTicker(time.Second)
	defer tk.Stop()
	for {
		metrics.Read(sample)
		if sample[0].Value.Kind() == metrics.KindUint64 {
			p := gcPercent(sample[0].Value.Uint64(), gcBase, gcFloor)
			if p*10 > last*11 || p*11 < last*10 {
				debug.SetGCPercent(p)
				last = p
			}
		}
		select {
		case <-tk.C:
		case <-stop:
			return
		}
	}
}
