package store

import (
	"hash/maphash"
	"log/slog"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// reopenRig is a committer driven by hand (no loop goroutine) over a Pebble
// DB in memory, with one shard that builds batches as the real ones do.
type reopenRig struct {
	p    *persister
	sh   *shard
	open func() (*pebble.DB, error)
}

func newReopenRig(t *testing.T) *reopenRig {
	mem := vfs.NewMem()
	open := func() (*pebble.DB, error) { return pebble.Open("db", &pebble.Options{FS: mem}) }
	db, err := open()
	require.NoError(t, err)
	p := newPersister(db, FsyncEverySec, slog.New(slog.DiscardHandler))
	p.reopen = open
	p.resync = func() {} // the test plays the shard's part itself
	sh := newShard(0, maphash.MakeSeed(), Config{Shards: 1, Clock: &Clock{}}, p)
	p.shards = []*shard{sh}
	t.Cleanup(func() { _ = guardAll(p.db().Close) })
	return &reopenRig{p: p, sh: sh, open: open}
}

// change has the shard build one change on the DB it sees now and send it.
func (r *reopenRig) change(key string) {
	r.sh.addRecord(appendSet(nil, 0, []byte(key), 1, noExpiry), 1)
	r.sh.sendChanges(nil)
}

// snap has the shard rewrite itself and send it.
func (r *reopenRig) snap() {
	r.sh.snapshot()
	r.sh.sendChanges(nil)
}

// received is what the committer has been sent so far.
func (r *reopenRig) received() []commitReq {
	var reqs []commitReq
	for {
		select {
		case q := <-r.p.in:
			reqs = append(reqs, q)
		default:
			return reqs
		}
	}
}

// TestStaleSnapDoesNotUngateShard (path a): a shard's rewrite built on the
// DB that broke must not let its next changes through: those are built on
// the closed DB too, and applying them to the reopened one panics ("pebble:
// batch db mismatch") on the committer, which took the process down.
func TestStaleSnapDoesNotUngateShard(t *testing.T) {
	for _, when := range []string{"while broken", "after reopen"} {
		t.Run(when, func(t *testing.T) {
			r := newReopenRig(t)
			p := r.p
			old := p.db()
			p.breakDB(old, errPebbleFatal{msg: "injected"})
			require.True(t, p.needSnap[r.sh])
			// The shard has not seen the reopen: it rewrites itself and
			// changes a key on the old DB.
			r.snap()
			if when == "while broken" {
				p.drop(p.accept(r.received()))
			}
			r.change("k")
			p.tryReopen(true)
			require.False(t, p.broken)
			require.NotSame(t, old, p.db())
			todo := p.accept(r.received())
			assert.Empty(t, todo, "nothing built on the closed DB reaches the reopened one")
			assert.True(t, p.needSnap[r.sh], "the shard still waits for a rewrite made on the reopened DB")
			assert.NotPanics(t, func() { p.commit(todo) })
			assert.False(t, p.broken)

			// Its rewrite on the reopened DB lets its changes through again.
			r.snap()
			r.change("k2")
			todo = p.accept(r.received())
			assert.Len(t, todo, 2)
			assert.Empty(t, p.needSnap)
			assert.NotPanics(t, func() { assert.True(t, p.commit(todo)) })
			assert.False(t, p.broken)
		})
	}
}

// TestBreakDropsHeldChanges (path b): a fatal error while changes are held
// for a retry (a sync failing after a failed commit) closes the DB: the held
// changes, made by it, must go too, or the next attempt applies them to the
// reopened DB and panics.
func TestBreakDropsHeldChanges(t *testing.T) {
	r := newReopenRig(t)
	p := r.p
	r.change("k")
	todo := p.accept(r.received())
	require.Len(t, todo, 1)
	p.hold(todo) // a failed commit holds them for the retry
	old := p.db()
	p.breakDB(old, errPebbleFatal{msg: "injected: sync failed"}) // as sync does
	assert.Empty(t, p.failed)
	assert.Zero(t, p.failedBytes)
	p.tryReopen(true)
	require.False(t, p.broken)
	todo = p.accept(nil)
	assert.Empty(t, todo)
	assert.NotPanics(t, func() { p.commit(todo) })
	assert.False(t, p.broken)
}

// TestCommitterSurvivesPebblePanic: any panic of a Pebble call on the
// committer (here a batch of another DB) breaks the DB, to be reopened,
// instead of ending the process.
func TestCommitterSurvivesPebblePanic(t *testing.T) {
	r := newReopenRig(t)
	p := r.p
	other, err := pebble.Open("other", &pebble.Options{FS: vfs.NewMem()})
	require.NoError(t, err)
	defer other.Close()
	var committed bool
	assert.NotPanics(t, func() { committed = p.commit([]logBatch{{b: other.NewBatch()}}) })
	assert.False(t, committed)
	assert.True(t, p.broken, "the DB is given up, to be reopened")
	assert.Contains(t, p.errText(), "batch db mismatch")
	p.tryReopen(true)
	assert.False(t, p.broken)
}

// TestCloseReopensBrokenDB: Close, finding the DB broken and no reopen done
// yet, reopens it once and has the shards rewrite their keys, so that their
// changes since the failure are written with the final commit.
func TestCloseReopensBrokenDB(t *testing.T) {
	r := newReopenRig(t)
	p := r.p
	p.breakDB(p.db(), errPebbleFatal{msg: "injected"})
	assert.Equal(t, []int{0}, p.prepareClose(), "the shard must rewrite its keys")
	assert.False(t, p.broken, "reopened")
	r.snap()
	todo := p.accept(r.received())
	assert.Len(t, todo, 1)
	assert.True(t, p.commit(todo))
}

// TestReopenCountsOnFromTheLog: a commit Pebble took but lost with the DB
// that broke (its WAL write failed) is not in the reopened log: the count
// goes on from the last commit the log holds, so that the log's counts
// stay contiguous (countGaps would see the lost commit's records as cut
// from a WAL).
func TestReopenCountsOnFromTheLog(t *testing.T) {
	r := newReopenRig(t)
	p := r.p
	r.change("a")
	require.True(t, p.commit(p.accept(r.received())))
	require.Equal(t, uint64(1), p.recs)
	p.recs += 3 // a commit of 3 records whose WAL write then failed
	p.breakDB(p.db(), errPebbleFatal{msg: "injected: WAL write failed"})
	p.tryReopen(false)
	require.False(t, p.broken)
	assert.Equal(t, uint64(1), p.recs, "counting on from the log's last commit")

	r.snap()
	require.True(t, p.commit(p.accept(r.received())))
	afterSnap := p.recs
	r.change("b")
	require.True(t, p.commit(p.accept(r.received())))
	n, ok, err := lastCount(p.db())
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, p.recs, n)
	assert.Equal(t, afterSnap+1, n)
	assert.Less(t, n, uint64(1+3), "the lost commit's 3 records are not counted")
}
