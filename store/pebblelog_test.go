package store

import (
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestPebbleErrorLinesThrottledByKind: Pebble logs unrelated errors with one
// generic format; throttling by format hid all but the first. The same
// error about another file is still the same kind.
func TestPebbleErrorLinesThrottledByKind(t *testing.T) {
	var log lockedLog
	e := newPebbleEvents(log.logger(), nil)
	for i := 0; i < 5; i++ {
		e.Errorf("%s", fmt.Sprintf("write 0000%d.sst: no space left on device", 10+i))
	}
	e.Errorf("%s", "open MANIFEST-000005: input/output error")
	e.Errorf("%v", errors.New("cannot delete obsolete file 000007.log: permission denied"))
	assert.Equal(t, 1, log.lines(".sst: no space left"), "one kind")
	assert.Equal(t, 1, log.lines("open MANIFEST-000005"), "another kind, logged although of the same format")
	assert.Equal(t, 1, log.lines("cannot delete obsolete file"))
}

// TestInfoDoesNotWaitForPebble: while a flush fails and is retried, Pebble
// holds its DB mutex through each pause of backgroundError; INFO's
// disk_bytes (Metrics, which takes that mutex) must not wait for it, on an
// event loop.
func TestInfoDoesNotWaitForPebble(t *testing.T) {
	mem := vfs.NewMem()
	var failing atomic.Bool
	fs := errorfs.Wrap(mem, errorfs.InjectorFunc(func(op errorfs.Op) error {
		if failing.Load() && strings.HasSuffix(op.Path, ".sst") && op.Kind.ReadOrWrite() == errorfs.OpIsWrite {
			return errors.New("injected: input/output error")
		}
		return nil
	}))
	var log lockedLog
	cfg := failCfg(fs, &log)
	st, err := New(cfg)
	require.NoError(t, err)
	run(st, throttleOp("k", 5, 1, 3600, 1))
	require.Positive(t, st.PersistStats().DiskBytes)
	failing.Store(true)
	_, err = st.p.db().AsyncFlush()
	require.NoError(t, err)
	ev := st.p.dd.events
	require.Eventually(t, func() bool {
		ev.mu.Lock()
		defer ev.mu.Unlock()
		return ev.bgPause >= 400*time.Millisecond
	}, 10*time.Second, time.Millisecond, "the flush fails, over and over")
	var slowest time.Duration
	for i := 0; i < 20; i++ {
		start := time.Now()
		_ = st.PersistStats()
		slowest = max(slowest, time.Since(start))
		time.Sleep(20 * time.Millisecond)
	}
	assert.Less(t, slowest, 50*time.Millisecond, "INFO does not wait for Pebble's mutex")
	failing.Store(false)
	require.NoError(t, st.Close())
}

// TestBackgroundErrorIsAPersistenceError: while Pebble's flushes fail (no
// inode left for a table, say) commits can stall inside Pebble without one
// of ours failing; the background error is then what INFO and MISCONF
// report, until background work succeeds again.
func TestBackgroundErrorIsAPersistenceError(t *testing.T) {
	var log lockedLog
	e := newPebbleEvents(log.logger(), nil)
	assert.Empty(t, e.bgErr())
	e.backgroundError(errors.New("write 000019.sst: no space left on device\nstack"))
	assert.Equal(t, "pebble background work (flush, compaction) failing: write 000019.sst: no space left on device", e.bgErr())
	e.backgroundOK() // the retry right after succeeds: no longer an error, not logged yet
	assert.Empty(t, e.bgErr())
	assert.Zero(t, log.lines("background work succeeds again"))
	e.backgroundError(errors.New("write 000020.sst: no space left on device"))
	assert.NotEmpty(t, e.bgErr())
	e.mu.Lock()
	e.bgLast = time.Now().Add(-2 * time.Second) // the retry's success comes a second later
	e.mu.Unlock()
	e.backgroundOK()
	assert.Empty(t, e.bgErr())
	assert.Equal(t, 1, log.lines("background work succeeds again"))
}
