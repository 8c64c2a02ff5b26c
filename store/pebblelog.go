package store

import (
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2"
)

// pebbleEvents is where Pebble's log lines and event callbacks go. Nothing
// here exits the process: Fatalf panics with an errPebbleFatal, which the
// committer and the open path recover into an error, and a damaged file is
// an error of the read that found it.
type pebbleEvents struct {
	log *slog.Logger
	// serving is set once the store is open: before, a damaged file is the
	// open's one-line refusal and is not logged as well.
	serving atomic.Bool

	mu       sync.Mutex
	damaged  map[string]bool // files Pebble reported corrupt
	firstBad string          // the first of them
}

func newPebbleEvents(log *slog.Logger) *pebbleEvents {
	return &pebbleEvents{log: log, damaged: map[string]bool{}}
}

func (e *pebbleEvents) Infof(format string, args ...any) {
	e.log.Debug("pebble: " + strings.TrimSpace(fmt.Sprintf(format, args...)))
}

func (e *pebbleEvents) Errorf(format string, args ...any) {
	e.log.Error("pebble: " + oneLine(strings.TrimSpace(fmt.Sprintf(format, args...))))
}

// Fatalf panics instead of exiting: the committer recovers it (a failed
// write must not take the server down) and reopens the database, and the
// open path turns it into its one-line refusal.
func (e *pebbleEvents) Fatalf(format string, args ...any) {
	panic(errPebbleFatal{oneLine(strings.TrimSpace(fmt.Sprintf(format, args...)))})
}

func (e *pebbleEvents) listener() *pebble.EventListener {
	l := &pebble.EventListener{DataCorruption: e.dataCorruption}
	l.EnsureDefaults(e)
	return l
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
