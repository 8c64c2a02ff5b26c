package main

import (
	"runtime/debug"
	"runtime/metrics"
	"time"
)

// GC tuning. Nearly all of cellserver's memory is long-lived, pointer-free
// key tables that the collector marks without scanning, so collecting often
// costs little and keeps RSS close to the live heap: GOGC is 25. But with
// few keys the heap is mostly Pebble's memtable and buffers, a quarter of
// which is a few MB: the collector would run several times a second under
// load, each cycle with its stop-the-world pauses. So the headroom is at
// least gcFloor: the percentage rises while the live heap is below
// gcFloor*100/gcBase (128 MB). docs/performance.md has the measurements.
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
