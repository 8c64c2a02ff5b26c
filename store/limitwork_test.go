package store

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/cellserver/cellserver/limit"
)

// Calls of several limits decided concurrently on a hosted
// store, in every way a call reaches a shard (its first key's shard's batch,
// a held call from a loop whose first key is on the other loop, a held
// call from no home, a call inside a Hold), must each charge exactly once.
func TestLimitWorkSharedStress(t *testing.T) {
	st, ls := hostedStore(t, 4, 2, Config{})
	keyOn := func(shard, n int) []string {
		var ks []string
		for i := 0; len(ks) < n; i++ {
			if k := fmt.Sprint("rk", i); st.ShardOf([]byte(k)) == shard {
				ks = append(ks, k)
			}
		}
		return ks
	}
	s0, s1 := keyOn(0, 2), keyOn(1, 2) // shard 0: loop 0's; shard 1: loop 1's
	mk := func(parts ...string) limit.Call {
		argv := [][]byte{[]byte("CL.LIMIT")}
		for i, k := range parts {
			if i > 0 {
				argv = append(argv, []byte("AND"))
			}
			fields := strings.Fields(k)
			for _, f := range fields {
				argv = append(argv, []byte(f))
			}
		}
		c, err := limit.ParseLimit(argv)
		require.NoError(t, err)
		return c
	}
	big := " FW 1000000000 3600"
	cal := " CAL 1000000000 DAY"
	calls := []limit.Call{
		mk(s1[0]+big, s0[0]+big), // held, first key on loop 1
		mk(s0[0]+big, s1[0]+big), // held, first key on loop 0
		mk(s0[0]+big, s0[1]+cal), // one shard (0), decideEach (CAL)
		mk(s1[0]+big, s1[1]+cal), // one shard (1)
		mk(s1[1]+cal, s0[1]+cal), // held, decideEach
	}
	const rounds = 300
	var wg sync.WaitGroup
	var mu sync.Mutex
	charged := map[string]int{}
	count := func(c limit.Call, r *LimitReq) {
		if r.Status() != nil || r.Err != nil || r.Decision.Limited {
			t.Errorf("call failed: %v %v %+v", r.Status(), r.Err, r.Decision)
			return
		}
		mu.Lock()
		for _, s := range c.Limits {
			charged[string(s.Key)]++
		}
		mu.Unlock()
	}
	// Sessions on each loop.
	for _, l := range ls {
		for g := 0; g < 2; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				sess := onLoop(st, l)
				reqs := make([]LimitReq, len(calls))
				for i := 0; i < rounds; i++ {
					l.do(func() {
						queueCalls(st, sess, reqs, calls)
						sess.Run()
					})
					for j, c := range calls {
						count(c, &reqs[j])
					}
				}
			}()
		}
	}
	// No home: held calls, and calls under a Hold.
	for g := 0; g < 2; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sess := st.NewSession()
			reqs := make([]LimitReq, len(calls))
			for i := 0; i < rounds; i++ {
				hold := i%2 == 0
				if hold {
					sess.Hold([]int{0, 1})
				}
				queueCalls(st, sess, reqs, calls)
				sess.Run()
				if hold {
					sess.Release()
				}
				for j, c := range calls {
					count(c, &reqs[j])
				}
			}
		}()
	}
	wg.Wait()
	// Each key's state counts its charges.
	for k, n := range charged {
		r := &LimitReq{}
		kind := big
		if strings.Contains(k, s0[1]) && k == s0[1] || k == s1[1] {
			kind = cal
		}
		c := mk(k + kind + " COST 0")
		r.SetCall(c)
		sess := st.NewSession()
		sess.Add(r)
		sess.Run()
		require.NoError(t, r.Err)
		got := 1000000000 - r.Decision.Remaining
		require.EqualValues(t, n, got, "key %s: charged %d times, state says %d", k, n, got)
	}
}

// queueCalls queues reqs[i] for calls[i] on sess, as the service does: a
// call of one shard by its first key, one of several held.
func queueCalls(st *Store, sess *Session, reqs []LimitReq, calls []limit.Call) {
	for j, c := range calls {
		r := &reqs[j]
		r.SetCall(c)
		if r.OneShard(st) {
			sess.Add(r)
		} else {
			sess.AddHeld(r)
		}
	}
}
