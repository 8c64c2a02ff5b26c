package limit

import (
	"sync"
	"testing"
	"time"
)

// TestInternKeepsLimitsApart parses many distinct limits (more than the
// table has slots, so slots are replaced) from several goroutines at once:
// every call must get exactly the limit it named.
func TestInternKeepsLimitsApart(t *testing.T) {
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 3 * internSlots {
				lim := uint32(1 + (i+g)%700)
				w := time.Duration(1+i%5) * time.Second
				want := []Limit{
					FW{Limit: lim, Window: w}, SWC{Limit: lim, Window: w},
					SWL{Limit: min(lim, MaxSWLLimit), Window: w},
					GCRA{MaxBurst: lim, Count: lim, Period: w},
				}
				for _, l := range want {
					k := internKey{kind: l.Kind(), w: w}
					switch l := l.(type) {
					case FW:
						k.a = l.Limit
					case SWC:
						k.a = l.Limit
					case SWL:
						k.a = l.Limit
					case GCRA:
						k.a, k.b = l.MaxBurst, l.Count
					}
					if got := intern(k); got != l {
						t.Errorf("intern(%+v) = %#v, want %#v", k, got, l)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
}

// TestParseLimitInterned: a call naming a limit seen before allocates only
// its Limits slice.
func TestParseLimitInterned(t *testing.T) {
	for _, c := range []string{"CL.LIMIT k FW 100 60", "CL.LIMIT k SWC 100 60 COST 3", "CL.LIMIT k GCRA 10 100 1", "CL.LIMIT k SWL 100 60"} {
		args := argv(c)
		if _, err := ParseLimit(args); err != nil {
			t.Fatal(c, err)
		}
		if n := testing.AllocsPerRun(100, func() { sinkCall, _ = ParseLimit(args) }); n != 1 {
			t.Errorf("%s: %v allocations, want 1", c, n)
		}
	}
}
