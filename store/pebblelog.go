package store

import (
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// pebbleEvents is where Pebble's log lines and event callbacks go. It logs
// a background failure once when it starts and once when it ends, with a
// count, and any other error line at most every errorfEvery: on a full disk
// Pebble retries a failed flush or compaction at once and without end, and
// its default listener logs every attempt (thousands of lines a second).
// Fatalf panics with an errPebbleFatal, which the committer and the open
// path recover into an error; on one of Pebble's own background goroutines
// nothing recovers it and the process ends (see Fatalf).
type pebbleEvents struct {
	log   *slog.Logger
	space *diskSpace
	// serving is set once the store is open: before, a damaged file is the
	// open's one-line refusal and is not logged as well.
	serving atomic.Bool
	// bgMsg is the latest background error, one line, while background
	// work fails (nil once it works): read by PersistErr, which a write
	// command under --stop-writes-on-persist-error calls, so lock-free.
	bgMsg atomic.Pointer[string]

	mu       sync.Mutex
	bgErrs   int64         // background errors since background work last succeeded
	bgLast   time.Time     // the latest of them
	bgPause  time.Duration // how long the next one holds Pebble's background goroutine
	lines    map[string]errorfState
	damaged  map[string]bool // files Pebble reported corrupt
	firstBad string          // the first of them
}

type errorfState struct {
	at         time.Time
	suppressed int
}

// errorfEvery is how often one kind of Pebble error line is logged.
const errorfEvery = 10 * time.Second

// maxLineKinds bounds the kinds of error line whose last time is kept.
const maxLineKinds = 256

// lineKind is what throttles a Pebble error line: its first four words,
// with every run of digits masked, so that the same error about another
// file (000012.sst, 000013.sst) is the same kind.
func lineKind(text string) string {
	words := strings.Fields(text)
	words = words[:min(len(words), 4)]
	var b strings.Builder
	for i, w := range words {
		if i > 0 {
			b.WriteByte(' ')
		}
		digits := false
		for _, c := range w {
			if c >= '0' && c <= '9' {
				if !digits {
					b.WriteByte('#')
				}
				digits = true
				continue
			}
			digits = false
			b.WriteRune(c)
		}
	}
	return b.String()
}

// bgPauseMax bounds the pause after each of a run of background errors.
const bgPauseMax = time.Second

func newPebbleEvents(log *slog.Logger, space *diskSpace) *pebbleEvents {
	return &pebbleEvents{log: log, space: space, lines: map[string]errorfState{}, damaged: map[string]bool{}}
}

func (e *pebbleEvents) Infof(format string, args ...any) {
	e.log.Debug("pebble: " + strings.TrimSpace(fmt.Sprintf(format, args...)))
}

// Errorf logs a line of each kind at most every errorfEvery, saying how
// many were suppressed in between. The kind is the message's first words,
// numbers masked (lineKind): Pebble logs many unrelated errors with one
// generic format ("%s", "%v").
func (e *pebbleEvents) Errorf(format string, args ...any) {
	text := oneLine(strings.TrimSpace(fmt.Sprintf(format, args...)))
	kind := lineKind(text)
	now := time.Now()
	e.mu.Lock()
	st := e.lines[kind]
	if now.Sub(st.at) < errorfEvery {
		st.suppressed++
		e.lines[kind] = st
		e.mu.Unlock()
		return
	}
	if len(e.lines) >= maxLineKinds {
		clear(e.lines) // bounded; at worst a line is logged early
	}
	e.lines[kind] = errorfState{at: now}
	e.mu.Unlock()
	msg := "pebble: " + text
	if st.suppressed > 0 {
		e.log.Error(msg, "similar_lines_suppressed", st.suppressed)
		return
	}
	e.log.Error(msg)
}

// Fatalf panics instead of exiting: on the committer's calls (its commit
// pipeline failing) that panic is recovered, the database is reopened and
// the server goes on; on the open path it becomes the one-line refusal.
//
// It does end the process when Pebble calls it on one of its own
// goroutines, which no recover of ours covers: a failed MANIFEST write or
// sync (version_set.go, from a flush, a compaction or an excise), a
// compaction's failed version update (compaction.go), a table stats error
// (table_stats.go). Parking that goroutine instead, to keep serving, is
// not safe: it holds Pebble's DB mutex or the MANIFEST lock there, so every
// later commit, flush and Close would wait for it forever, and a shutdown
// would hang instead of losing at most the last second. The line is logged
// first, so that the reason is in the log and not only in the panic's
// output; a restart then replays the WAL as after a crash.
func (e *pebbleEvents) Fatalf(format string, args ...any) {
	msg := oneLine(strings.TrimSpace(fmt.Sprintf(format, args...)))
	if e.serving.Load() {
		e.log.Error("pebble: fatal error (the process ends unless it happened in a write of the committer, which reopens the data dir)", "err", msg)
	}
	panic(errPebbleFatal{msg: msg})
}

func (e *pebbleEvents) listener() *pebble.EventListener {
	return &pebble.EventListener{
		BackgroundError: e.backgroundError,
		DataCorruption:  e.dataCorruption,
		FlushEnd: func(info pebble.FlushInfo) {
			if info.Err == nil {
				e.backgroundOK()
			}
		},
		CompactionEnd: func(info pebble.CompactionInfo) {
			if info.Err == nil {
				e.backgroundOK()
			}
		},
	}
}

// backgroundError is called on Pebble's flush or compaction goroutine,
// holding its DB mutex, each time one fails; Pebble then retries at once.
// From the second error of a run on, it pauses (50 ms, doubling to
// bgPauseMax): the only back-off Pebble can be given (no callback of a
// failing flush runs without that mutex), else the retry loop takes a core.
// The pause holds the mutex, so whatever takes it waits up to bgPauseMax:
// a commit that must switch memtables (which needs the failing flush
// anyway), an excise, Close. INFO does not: its disk_bytes is cached and
// refreshed off the event loop (persister.diskBytes). A full disk also
// gives up the ballast.
func (e *pebbleEvents) backgroundError(err error) {
	e.mu.Lock()
	e.bgErrs++
	n, pause := e.bgErrs, e.bgPause
	e.bgLast = time.Now()
	msg := "pebble background work (flush, compaction) failing: " + oneLine(err.Error())
	e.bgMsg.Store(&msg)
	if n >= 2 {
		e.bgPause = min(max(2*e.bgPause, 50*time.Millisecond), bgPauseMax)
	}
	e.mu.Unlock()
	if n == 1 {
		e.log.Error("pebble: background work failed; retrying, further errors are counted until it succeeds", "err", oneLine(err.Error()))
	}
	if isNoSpace(err) && e.space != nil {
		e.space.release()
	}
	if pause > 0 {
		time.Sleep(pause)
	}
}

// backgroundOK clears the background error at once, and ends (and logs the
// end of) a run of background errors once a flush or compaction
// succeeds a second after the last error (a success between two failures of
// a retry loop does not count).
func (e *pebbleEvents) backgroundOK() {
	e.bgMsg.Store(nil) // it works now (a next failure sets it again)
	e.mu.Lock()
	n := e.bgErrs
	if n == 0 || time.Since(e.bgLast) < time.Second {
		e.mu.Unlock()
		return
	}
	e.bgErrs, e.bgPause = 0, 0
	e.mu.Unlock()
	e.log.Info("pebble: background work succeeds again", "errors", n)
}

// bgErr returns the latest background error while background work fails,
// else "": writes may then stall inside Pebble (a memtable it cannot
// flush) without any commit of ours failing, so it counts as a persistence
// error too (INFO, MISCONF).
func (e *pebbleEvents) bgErr() string {
	if e == nil {
		return ""
	}
	if m := e.bgMsg.Load(); m != nil {
		return *m
	}
	return ""
}

// dataCorruption records a file Pebble found damaged; the read that found
// it fails with an error (Pebble's default listener would exit instead).
func (e *pebbleEvents) dataCorruption(info pebble.DataCorruptionInfo) {
	e.mu.Lock()
	seen := e.damaged[info.Path]
	e.damaged[info.Path] = true
	if e.firstBad == "" {
		e.firstBad = info.Path
	}
	e.mu.Unlock()
	if !seen && e.serving.Load() {
		e.log.Error("pebble: damaged file", "file", info.Path, "err", oneLine(fmt.Sprint(info.Details)))
	}
}

// corruptFile is the first file Pebble reported damaged, or "".
func (e *pebbleEvents) corruptFile() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.firstBad
}
