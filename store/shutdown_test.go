package store

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestCloseBeforeResyncLosesNothingSilently: once a backlog was dropped
// (past maxFailedBytes on a full disk), every shard's changes wait for a
// rewrite from memory; shutting down before that rewrite ran must still
// write them if the disk allows it, and else say how many keys it could not
// write. (Before, Close ran no rewrite: 0 of 300 keys came back, and
// nothing was logged.)
func TestCloseBeforeResyncLosesNothingSilently(t *testing.T) {
	for _, policy := range []Fsync{FsyncAlways, FsyncEverySec} {
		for _, spaceBack := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/space_back=%v", policy, spaceBack), func(t *testing.T) {
				defer func(v int64) { maxFailedBytes = v }(maxFailedBytes)
				maxFailedBytes = 1
				mem, setAvail := fullDisk()
				var log lockedLog
				cfg := Config{Shards: 2, Clock: wallClock(), SweepInterval: -1, DataDir: "db", Fsync: policy, FS: mem,
					MemTableSize: 1 << 20, PersistInterval: time.Hour, Logger: log.logger()}
				st, err := New(cfg)
				require.NoError(t, err)
				setAvail(1 << 20)
				for i := 0; i < 300; i++ {
					op := throttleOp(fmt.Sprint("k", i), 5, 1, 3600, 1)
					if policy == FsyncAlways {
						go run(st, op) // decided at once, acknowledged once on disk
					} else {
						run(st, op)
					}
				}
				require.Eventually(t, func() bool { return st.Stats().Keys == 300 }, 5*time.Second, 10*time.Millisecond)
				st.persistAll()
				require.Eventually(t, func() bool { return log.lines("dropped them") > 0 }, 5*time.Second, time.Millisecond)
				if spaceBack {
					setAvail(1 << 30) // and Close comes before the next attempt
				}
				require.NoError(t, st.Close())

				setAvail(1 << 30)
				st, err = New(cfg)
				require.NoError(t, err)
				defer st.Close()
				if spaceBack {
					assert.Equal(t, int64(300), st.PersistStats().KeysLoaded, "the rewrite at Close wrote every key")
					assert.Zero(t, log.lines("before shutdown\""))
					return
				}
				assert.Equal(t, 1, log.lines("could not be written before shutdown"), "the loss is logged")
				// 300 keys, and the entry of each of the 2 shards that empties its slots.
				assert.Equal(t, 1, log.lines("changes=302"), "with the count of keys not written: %s", log.b.String())
			})
		}
	}
}
