package store

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/cellserver/cellserver/limit"
)

// testLoop is an event loop as the wire layer's: one goroutine running
// tasks one at a time, among them its owner's Serve when Wake asks.
type testLoop struct {
	mu     sync.Mutex
	closed bool
	tasks  chan func()
	o      *Owner
	serve  func()
	wakes  atomic.Int64
	done   chan struct{}
}

func (l *testLoop) Wake() {
	l.wakes.Add(1)
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.closed { // a stopped loop drops the wake, as gnet's
		l.tasks <- l.serve
	}
}

// do runs f on the loop and waits for it.
func (l *testLoop) do(f func()) {
	ch := make(chan struct{})
	l.tasks <- func() { f(); close(ch) }
	<-ch
}

// hostedStore returns a store of shards shards run by loops hosted owners,
// and the loops; the loops stop (and the owners are detached) before the
// store closes at the end of the test.
func hostedStore(t *testing.T, shards, loops int, cfg Config) (*Store, []*testLoop) {
	t.Helper()
	cfg.Shards, cfg.Owners = shards, loops
	if cfg.Clock == nil {
		cfg.Clock = wallClock()
	}
	if cfg.SweepInterval == 0 {
		cfg.SweepInterval = -1
	}
	st, err := New(cfg)
	require.NoError(t, err)
	var ls []*testLoop
	for _, o := range st.Owners() {
		l := &testLoop{tasks: make(chan func(), 1024), o: o, done: make(chan struct{})}
		l.serve = o.Serve
		go func() {
			defer close(l.done)
			for f := range l.tasks {
				f()
			}
		}()
		o.Adopt(l)
		ls = append(ls, l)
	}
	t.Cleanup(func() {
		for _, l := range ls {
			// Stop the loop as gnet does (later wakes are dropped), then
			// hand the owner back to a goroutine.
			l.mu.Lock()
			l.closed = true
			close(l.tasks)
			l.mu.Unlock()
			<-l.done
			l.o.Detach()
		}
		require.NoError(t, st.Close())
	})
	return st, ls
}

// onLoop returns a session whose home is l's owner, to use on l only.
func onLoop(st *Store, l *testLoop) *Session {
	s := st.NewSession()
	s.SetHome(l.o)
	return s
}

func TestHostedOwnersSpreadShards(t *testing.T) {
	st, ls := hostedStore(t, 5, 2, Config{})
	assert.Equal(t, []int{0, 2, 4}, ls[0].o.Shards())
	assert.Equal(t, []int{1, 3}, ls[1].o.Shards())
	_, err := New(Config{Shards: 2, Owners: 3})
	assert.ErrorContains(t, err, "owners must be between 0 and the number of shards")
	_ = st
}

// A session on a loop runs its own owner's shards inline and hands the
// others to their loops; both give the same answers as an unhosted store.
func TestHostedSessionsRunInlineAndAcrossLoops(t *testing.T) {
	st, ls := hostedStore(t, 4, 2, Config{})
	keyOn := func(shard int) string {
		for i := 0; ; i++ {
			if k := fmt.Sprint("k", i); st.ShardOf([]byte(k)) == shard {
				return k
			}
		}
	}
	own, other := keyOn(0), keyOn(1) // shard 0 is loop 0's, shard 1 loop 1's
	sess := onLoop(st, ls[0])
	before := ls[0].wakes.Load()
	var ops []*ThrottleReq
	ls[0].do(func() {
		for range 3 {
			op := throttleOp(own, 1, 1, 60, 1)
			sess.Add(op)
			ops = append(ops, op)
		}
		sess.Run()
	})
	assert.Equal(t, before, ls[0].wakes.Load(), "the loop's own shard ran inline, without a wake")
	assert.False(t, ops[0].Result.Limited)
	assert.False(t, ops[1].Result.Limited)
	assert.True(t, ops[2].Result.Limited, "burst 1 allows two calls")

	var a, b *ThrottleReq
	ls[0].do(func() {
		a, b = throttleOp(other, 0, 1, 60, 1), throttleOp(own, 0, 1, 60, 1)
		sess.Add(a)
		sess.Add(b)
		sess.Run()
	})
	assert.False(t, a.Result.Limited)
	assert.True(t, b.Result.Limited)

	// A goroutine that is no loop's hands every shard over.
	c := throttleOp(other, 0, 1, 60, 1)
	run(st, c)
	assert.True(t, c.Result.Limited)
}

// Loops whose sessions wait for each other's shards, holds across them
// (cross-shard CL.LIMIT calls and transactions' Hold) from loops and from
// goroutines, all at once: nothing deadlocks, and every limit stays exact.
func TestHostedLoopsNeverDeadlock(t *testing.T) {
	for _, name := range []string{"memory", "always", "everysec"} {
		cfg := Config{}
		if name != "memory" {
			policy, err := ParseFsync(name)
			require.NoError(t, err)
			cfg.DataDir, cfg.Fsync, cfg.MemTableSize = t.TempDir(), policy, 4<<20
		}
		t.Run(name, func(t *testing.T) {
			const keys, limitN = 24, 30
			st, ls := hostedStore(t, 6, 3, cfg)
			var allowed [keys]atomic.Int64
			call := func(rng *rand.Rand) (limit.Call, []int) {
				n := 1 + rng.IntN(3)
				argv := [][]byte{[]byte("CL.LIMIT")}
				var idx []int
				for j := range n {
					k := rng.IntN(keys)
					dup := false
					for _, j := range idx {
						dup = dup || j == k
					}
					if dup {
						continue
					}
					idx = append(idx, k)
					if j > 0 {
						argv = append(argv, []byte("AND"))
					}
					argv = append(argv, fmt.Appendf(nil, "key%d", k), []byte("FW"), fmt.Appendf(nil, "%d", limitN), []byte("3600"))
				}
				c, err := limit.ParseLimit(argv)
				require.NoError(t, err)
				return c, idx
			}
			runCalls := func(sess *Session, rng *rand.Rand, wrap func(func())) {
				c, idx := call(rng)
				r := &LimitReq{Call: c}
				wrap(func() {
					switch ids := r.Shards(st, nil); {
					case rng.IntN(4) == 0:
						sess.Hold(ids) // as EXEC does
						sess.AddHeld(r)
						sess.Release()
					case len(ids) == 1:
						sess.AddTo(ids[0], r)
						// and a plain request on another shard in the same run
						sess.Add(&PTTLReq{Key: fmt.Appendf(nil, "key%d", rng.IntN(keys))})
						sess.Run()
					default:
						sess.AddHeld(r)
						sess.Run()
					}
				})
				require.NoError(t, r.Status())
				require.NoError(t, r.Err)
				if !r.Decision.Limited {
					for _, k := range idx {
						allowed[k].Add(1)
					}
				}
			}
			var wg sync.WaitGroup
			deadline := time.Now().Add(3 * time.Second)
			for i, l := range ls {
				for c := range 4 { // connections of the loop
					wg.Add(1)
					go func() {
						defer wg.Done()
						rng := rand.New(rand.NewPCG(uint64(i), uint64(c)))
						sess := onLoop(st, l)
						for n := 0; n < 400 && time.Now().Before(deadline); n++ {
							runCalls(sess, rng, l.do)
						}
					}()
				}
			}
			for g := range 3 { // front ends off the loops
				wg.Add(1)
				go func() {
					defer wg.Done()
					rng := rand.New(rand.NewPCG(99, uint64(g)))
					sess := st.NewSession()
					for n := 0; n < 400 && time.Now().Before(deadline); n++ {
						runCalls(sess, rng, func(f func()) { f() })
					}
				}()
			}
			finished := make(chan struct{})
			go func() { wg.Wait(); close(finished) }()
			select {
			case <-finished:
			case <-time.After(60 * time.Second):
				// Not t.Fatal: the cleanup's Close would wait for the
				// stuck sessions forever. The panic prints every stack.
				panic("sessions on hosted owners deadlocked")
			}
			for k := range keys {
				assert.LessOrEqual(t, allowed[k].Load(), int64(limitN), "key%d", k)
			}
			// Every key saw at least limitN calls, so each is exhausted.
			for k := range keys {
				r := &LimitReq{}
				c, err := limit.ParseLimit([][]byte{[]byte("CL.LIMIT"), fmt.Appendf(nil, "key%d", k), []byte("FW"), fmt.Appendf(nil, "%d", limitN), []byte("3600")})
				require.NoError(t, err)
				r.Call = c
				run(st, r)
				if allowed[k].Load() == limitN {
					assert.True(t, r.Decision.Limited, "key%d", k)
				}
			}
		})
	}
}

// Close, while loops keep serving, waits for the sessions in flight, which
// finish; later sessions fail with ErrClosed.
func TestHostedCloseWhileLoopsServe(t *testing.T) {
	st, ls := hostedStore(t, 4, 2, Config{})
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i, l := range ls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sess := onLoop(st, l)
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				var op *ThrottleReq
				l.do(func() {
					op = throttleOp(fmt.Sprint("c", i, n%50), 100, 1, 1, 1)
					sess.Add(op)
					sess.Add(throttleOp(fmt.Sprint("d", n%50), 100, 1, 1, 1))
					sess.Run()
				})
				if op.Status() != nil {
					assert.ErrorIs(t, op.Status(), ErrClosed)
				}
			}
		}()
	}
	time.Sleep(50 * time.Millisecond)
	done := make(chan error, 1)
	go func() { done <- st.Close() }()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		panic("Close never returned")
	}
	close(stop)
	wg.Wait()
}

// gateFS holds every sync of a data dir until the test lets it go.
type gateFS struct {
	vfs.FS
	shut atomic.Bool   // syncs wait while set
	open chan struct{} // closed to let them go
}

type gateFile struct {
	vfs.File
	fs *gateFS
}

func (fs *gateFS) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.Create(name, c)
	if err != nil {
		return nil, err
	}
	return gateFile{f, fs}, nil
}

func (fs *gateFS) ReuseForWrite(old, name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.ReuseForWrite(old, name, c)
	if err != nil {
		return nil, err
	}
	return gateFile{f, fs}, nil
}

func (f gateFile) wait() {
	if f.fs.shut.Load() {
		<-f.fs.open
	}
}

func (f gateFile) Sync() error     { f.wait(); return f.File.Sync() }
func (f gateFile) SyncData() error { f.wait(); return f.File.SyncData() }
func (f gateFile) SyncTo(n int64) (bool, error) {
	f.wait()
	return f.File.SyncTo(n)
}

// Under FsyncAlways a session that defers its syncs (an event loop's) gets
// Run back before the disk has its changes, so its loop serves other
// connections meanwhile; AwaitSync tells it once they are synced, and a
// read of a key changed but not yet synced waits for that sync too.
func TestDeferredSyncLetsTheLoopServe(t *testing.T) {
	fs := &gateFS{FS: vfs.Default, open: make(chan struct{})}
	st, ls := hostedStore(t, 2, 1, Config{DataDir: t.TempDir(), Fsync: FsyncAlways, FS: fs, MemTableSize: 4 << 20})
	l := ls[0]
	a, b := onLoop(st, l), onLoop(st, l)
	a.DeferSync(true)
	b.DeferSync(true)
	fs.shut.Store(true)
	synced := make(chan string, 2)
	var write, other *ThrottleReq
	l.do(func() {
		write = throttleOp("w", 5, 1, 60, 1)
		a.Add(write)
		a.Run()
		require.True(t, a.AwaitSync(func() { synced <- "a" }), "the write waits for its sync")
	})
	require.NoError(t, write.Status())
	assert.Equal(t, int64(5), write.Result.Remaining)
	l.do(func() { // the same loop serves another connection meanwhile
		other = throttleOp("w", 5, 1, 60, 1)
		b.Add(other)
		b.Run()
		require.True(t, b.AwaitSync(func() { synced <- "b" }), "a change not synced yet is not acknowledged")
	})
	assert.Equal(t, int64(4), other.Result.Remaining)
	select {
	case who := <-synced:
		t.Fatalf("%s reported synced while the disk held its sync", who)
	case <-time.After(20 * time.Millisecond):
	}
	// A call across the two shards (a held request, one group commit)
	// does not wait for the disk either.
	var held *LimitReq
	l.do(func() {
		c, err := limit.ParseLimit([][]byte{[]byte("CL.LIMIT"), []byte("{a}x"), []byte("FW"), []byte("5"), []byte("60"),
			[]byte("AND"), []byte("{b}x"), []byte("FW"), []byte("5"), []byte("60")})
		require.NoError(t, err)
		held = &LimitReq{Call: c}
		require.Len(t, held.Shards(st, nil), 2, "the hash tags land on both shards")
		a.AddHeld(held)
		a.Run()
		require.True(t, a.AwaitSync(func() { synced <- "a" }), "the held call waits for its sync")
	})
	require.NoError(t, held.Status())
	assert.False(t, held.Decision.Limited)
	fs.shut.Store(false)
	close(fs.open)
	got := []string{<-synced, <-synced}
	assert.ElementsMatch(t, []string{"a", "b"}, got)
	assert.False(t, a.AwaitSync(func() { t.Error("called with nothing to wait for") }))
}
