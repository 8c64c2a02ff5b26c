package store

import (
	"sync/atomic"
	"time"
)

// Clock is the server clock that both GCRA and key expiry read (spec §9): the
// wall clock in Unix nanoseconds, or a frozen instant set with DEBUG CLOCK.
// The zero value is the wall clock. It is safe for concurrent use.
type Clock struct {
	frozen atomic.Bool
	at     atomic.Int64
}

// Now returns the current Unix time in nanoseconds.
func (c *Clock) Now() int64 {
	if c.frozen.Load() {
		return c.at.Load()
	}
	return time.Now().UnixNano()
}

// Set freezes the clock at ns.
func (c *Clock) Set(ns int64) {
	c.at.Store(ns)
	c.frozen.Store(true)
}

// Advance moves a frozen clock by d nanoseconds (negative moves it back). On
// the wall clock it freezes at now+d.
func (c *Clock) Advance(d int64) {
	if !c.frozen.Load() {
		c.Set(time.Now().UnixNano() + d)
		return
	}
	c.at.Add(d)
}

// Real returns the clock to the wall clock.
func (c *Clock) Real() { c.frozen.Store(false) }

// Frozen reports whether the clock is frozen.
func (c *Clock) Frozen() bool { return c.frozen.Load() }
