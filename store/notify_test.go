package store

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cellserver/cellserver/cluster"
	"github.com/cellserver/cellserver/limit"
)

// recorder is a KeyListener that remembers what it was told.
type recorder struct {
	mu    sync.Mutex
	fired []string
	by    []uint64
}

func (r *recorder) KeyChanged(key []byte, by uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.fired = append(r.fired, string(key))
	r.by = append(r.by, by)
}

func (r *recorder) got() ([]string, []uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.fired...), append([]uint64(nil), r.by...)
}

// runAs runs reqs in one session whose ID is id, as run does.
func runAs(st *Store, id uint64, reqs ...Request) {
	s := st.NewSession()
	s.ID = id
	for _, r := range reqs {
		if k, ok := r.(KeyedRequest); ok {
			s.Add(k)
		} else {
			s.AddTo(0, r)
		}
	}
	s.Run()
}

func watch(st *Store, l KeyListener, keys ...string) {
	for _, k := range keys {
		run(st, &InterestReq{Key: []byte(k), Listener: l})
	}
}

func TestListenerLearnsEveryChange(t *testing.T) {
	const by = 7
	cases := []struct {
		name  string
		setup func(st *Store, clk *Clock) // before the registration
		act   func(st *Store, clk *Clock)
		fires bool
		by    uint64
	}{
		{"allowed throttle creates", nil, func(st *Store, _ *Clock) { runAs(st, by, throttleOp("A", 0, 1, 60, 1)) }, true, by},
		{"allowed throttle charges", func(st *Store, _ *Clock) { run(st, throttleOp("A", 5, 1, 60, 1)) },
			func(st *Store, _ *Clock) { runAs(st, by, throttleOp("A", 5, 1, 60, 1)) }, true, by},
		{"denied throttle", func(st *Store, _ *Clock) { run(st, throttleOp("A", 0, 1, 60, 1)) },
			func(st *Store, _ *Clock) { runAs(st, by, throttleOp("A", 0, 1, 60, 1)) }, false, 0},
		{"quantity 0 creates the key", nil, func(st *Store, _ *Clock) { runAs(st, by, throttleOp("A", 5, 1, 60, 0)) }, true, by},
		{"quantity 0 leaves the key as it is", func(st *Store, _ *Clock) { run(st, throttleOp("A", 5, 1, 60, 1)) },
			func(st *Store, _ *Clock) { runAs(st, by, throttleOp("A", 5, 1, 60, 0)) }, false, 0},
		{"read", func(st *Store, _ *Clock) { run(st, throttleOp("A", 5, 1, 60, 1)) },
			func(st *Store, _ *Clock) { runAs(st, by, &GetReq{Key: []byte("A")}, &PTTLReq{Key: []byte("A")}) }, false, 0},
		{"charged limit", nil, func(st *Store, _ *Clock) {
			s := st.NewSession()
			s.ID = by
			s.Add(&LimitReq{Call: parseLimitLine(t, "A FW 5 60")})
			s.Run()
		}, true, by},
		{"import", nil, func(st *Store, _ *Clock) {
			enc, err := limit.Encode(limit.GCRAState{TAT: uint64(t0 + 1e9)})
			require.NoError(t, err)
			s := st.NewSession()
			s.ID = by
			s.AddTo(st.ShardOf([]byte("A")), &ImportReq{Key: []byte("A"), State: enc, Expires: floorMs(t0) + 60000})
			s.Run()
		}, true, by},
		{"del", func(st *Store, _ *Clock) { run(st, throttleOp("A", 5, 1, 60, 1)) },
			func(st *Store, _ *Clock) { runAs(st, by, &DelReq{Key: []byte("A")}) }, true, by},
		{"del of a missing key", nil, func(st *Store, _ *Clock) { runAs(st, by, &DelReq{Key: []byte("A")}) }, false, 0},
		{"lazy expiry", func(st *Store, _ *Clock) { run(st, throttleOp("A", 5, 1, 60, 1)) },
			func(st *Store, clk *Clock) { clk.Advance(3600e9); runAs(st, by, &ExistsReq{Key: []byte("A")}) }, true, 0},
		{"sweep", func(st *Store, _ *Clock) { run(st, throttleOp("A", 5, 1, 60, 1)) },
			func(st *Store, clk *Clock) {
				clk.Advance(3600e9)
				st.onShard(st.ShardOf([]byte("A")), func(sh *shard) { sh.sweep(clk.Now()) })
			}, true, 0},
		{"flush of an existing key", func(st *Store, _ *Clock) { run(st, throttleOp("A", 5, 1, 60, 1)) },
			func(st *Store, _ *Clock) {
				s := st.NewSession()
				s.ID = by
				s.AddTo(st.ShardOf([]byte("A")), &FlushReq{})
				s.Run()
			}, true, by},
		{"flush of a missing key", nil, func(st *Store, _ *Clock) {
			s := st.NewSession()
			s.AddTo(st.ShardOf([]byte("A")), &FlushReq{})
			s.Run()
		}, false, 0},
		{"slot dropped", func(st *Store, _ *Clock) { run(st, throttleOp("A", 5, 1, 60, 1)) },
			func(st *Store, _ *Clock) {
				slot := cluster.KeySlot([]byte("A"))
				s := st.NewSession()
				s.ID = by
				s.AddTo(st.ShardOf([]byte("A")), &DropSlotsReq{Ranges: [][2]int{{slot, slot}}})
				s.Run()
			}, true, 0},
		{"another key", nil, func(st *Store, _ *Clock) { runAs(st, by, throttleOp("B", 5, 1, 60, 1)) }, false, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			st, clk := newTestStore(t, 4)
			if tc.setup != nil {
				tc.setup(st, clk)
			}
			l := &recorder{}
			watch(st, l, "A")
			tc.act(st, clk)
			fired, bys := l.got()
			if !tc.fires {
				assert.Empty(t, fired)
				return
			}
			assert.Equal(t, []string{"A"}, fired)
			assert.Equal(t, []uint64{tc.by}, bys)
		})
	}
}

func TestRegistrationFiresOnceAndCanBeWithdrawn(t *testing.T) {
	st, _ := newTestStore(t, 4)
	a, b := &recorder{}, &recorder{}
	watch(st, a, "A", "A") // twice: registered once
	watch(st, b, "A", "B")
	run(st, throttleOp("A", 5, 1, 60, 1), throttleOp("A", 5, 1, 60, 1))
	fa, _ := a.got()
	fb, _ := b.got()
	assert.Equal(t, []string{"A"}, fa, "once, then removed")
	assert.Equal(t, []string{"A"}, fb)

	run(st, &InterestReq{Key: []byte("B"), Listener: b, Remove: true})
	run(st, &InterestReq{Key: []byte("B"), Listener: a, Remove: true}) // never registered
	run(st, throttleOp("B", 5, 1, 60, 1))
	fb, _ = b.got()
	assert.Equal(t, []string{"A"}, fb, "withdrawn")
	st.onShard(st.ShardOf([]byte("B")), func(sh *shard) { assert.Empty(t, sh.interest) })
	st.onShard(st.ShardOf([]byte("A")), func(sh *shard) { assert.Empty(t, sh.interest) })
}

// A key that had expired when it was registered for did not change when
// it is dropped later: the registration drops it first.
func TestRegistrationDropsAnExpiredKeyFirst(t *testing.T) {
	st, clk := newTestStore(t, 1)
	run(st, throttleOp("A", 5, 1, 60, 1))
	clk.Advance(3600e9)
	l := &recorder{}
	watch(st, l, "A")
	ex := &ExistsReq{Key: []byte("A")}
	run(st, ex)
	require.False(t, ex.Exists)
	fired, _ := l.got()
	assert.Empty(t, fired)
}
