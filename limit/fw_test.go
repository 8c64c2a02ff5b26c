package limit

import (
	"testing"
	"time"
)

func TestFWSteps(t *testing.T) {
	fw := FW{Limit: 5, Window: time.Minute} // t0 is a whole minute
	runSteps(t, fw, false, []step{
		{at: sec(10), cost: 1, want: r5(0, 5, 4, -1, 50), pttl: pt(50000)},
		{at: sec(10), cost: 3, want: r5(0, 5, 1, -1, 50)},
		{at: sec(20), cost: 2, want: r5(1, 5, 1, 40, 40), pttl: pt(40000), note: "limited: nothing written"},
		{at: sec(20), cost: 0, want: r5(0, 5, 1, -1, 40)},
		{at: sec(20), cost: 6, want: r5(1, 5, 1, -1, 40), note: "can never fit"},
		{at: sec(20.5), cost: 1, want: r5(0, 5, 0, -1, 40), note: "39.5 s rounds up"},
		{at: sec(20.5), cost: 0, want: r5(0, 5, 0, -1, 40)},
		{at: sec(59.999), cost: 1, want: r5(1, 5, 0, 1, 1), pttl: pt(1)},
		// At the window's end the key still exists (PTTL 0) but its count
		// is out of its window.
		{at: sec(60), cost: 0, want: r5(0, 5, 5, -1, 0), pttl: pt(0)},
		{at: sec(60), cost: 1, want: r5(0, 5, 4, -1, 60), pttl: pt(60000)},
		// The clock goes back into the previous window: evaluated at the
		// stored window's start, durations from the real now.
		{at: sec(59), cost: 1, want: r5(0, 5, 3, -1, 61), pttl: pt(61000)},
		// Limits are the call's own: lowered under the count.
		{at: sec(61), cost: 1, lim: FW{Limit: 2, Window: time.Minute}, want: r5(1, 2, 0, 59, 59)},
		{at: sec(61), cost: 0, lim: FW{Limit: 2, Window: time.Minute}, want: r5(0, 2, 0, -1, 59)},
		{at: sec(61), cost: 0, lim: FW{Limit: 1, Window: time.Minute}, want: r5(1, 1, 0, 59, 59)},
		// Another window: a fresh key, replaced when charged.
		{at: sec(61), cost: 0, lim: FW{Limit: 5, Window: 10 * time.Second}, want: r5(0, 5, 5, -1, 0), pttl: pt(59000)},
		{at: sec(61), cost: 1, lim: FW{Limit: 5, Window: 10 * time.Second}, want: r5(0, 5, 4, -1, 9), pttl: pt(9000)},
		{at: sec(62), cost: 1, want: r5(0, 5, 4, -1, 58), pttl: pt(58000), note: "the minute window is fresh again"},
	})
}

func TestFWStepsMS(t *testing.T) {
	fw := FW{Limit: 3, Window: time.Second}
	runSteps(t, fw, true, []step{
		{at: msec(250), cost: 1, want: r5(0, 3, 2, -1, 750), pttl: pt(750)},
		{at: msec(999), cost: 2, want: r5(0, 3, 0, -1, 1), pttl: pt(1)},
		{at: msec(999), cost: 1, want: r5(1, 3, 0, 1, 1)},
		{at: msec(1000), cost: 3, want: r5(0, 3, 0, -1, 1000), pttl: pt(1000)},
		{at: msec(1000) + 999_999, cost: 0, want: r5(0, 3, 0, -1, 1000), note: "ms are floored"},
	})
}
