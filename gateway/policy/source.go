package policy

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Source keeps the current Config of a policy file and reloads it when the
// file changes: a file that does not parse is refused (logged, counted),
// and the previous Config stays in force.
type Source struct {
	cur  atomic.Pointer[Config]
	path string
	opt  SourceOptions

	// mu guards stats only: Parse runs outside it (a large file takes
	// seconds), so Stats, which every metrics scrape calls, never waits.
	mu    sync.Mutex
	stats SourceStats

	// The watcher's own, after Open.
	seen stamp // the file as last looked at (loaded or refused)
	gone bool  // the file was missing at the last poll (logged once)
	// pending is the hash of changed contents seen once: tried (loaded or
	// refused) if seen again, unchanged, at the next poll.
	pending [sha256.Size]byte

	stop      chan struct{}
	done      chan struct{}
	closeOnce sync.Once
}

// stamp identifies a version of the file: its size, modification time and
// contents (a rewrite within one mtime tick changes the hash).
type stamp struct {
	size  int64
	mtime time.Time
	sum   [sha256.Size]byte
}

// Current returns the Config in force. Safe for concurrent use.
func (s *Source) Current() *Config { return s.cur.Load() }

// SourceOptions configure Open.
type SourceOptions struct {
	// Poll is how often the file is checked for a change (its size,
	// modification time and contents); default 1 s. Polling, not inotify,
	// so a ConfigMap's symlink swap and an editor's rename are both seen.
	Poll   time.Duration
	Logger *slog.Logger
	// OnReload, if set, is called after every attempt to load a changed
	// file: err nil when the new Config is in force. Changed contents are
	// tried (loaded, or refused and reported) only when seen unchanged at
	// two polls in a row, so that a file read half-written is neither
	// loaded nor reported: a change takes effect within two polls. Called
	// on the watching goroutine, never with the Source's lock held.
	OnReload func(err error)
}

// Open loads path (an error if it does not parse: a server must not start
// on a bad policy) and keeps watching it until Close.
func Open(path string, opt SourceOptions) (*Source, error) {
	if opt.Poll <= 0 {
		opt.Poll = time.Second
	}
	if opt.Logger == nil {
		opt.Logger = slog.Default()
	}
	data, st, err := readFile(path)
	if err != nil {
		return nil, err
	}
	c, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	s := &Source{path: path, opt: opt, seen: st, stop: make(chan struct{}), done: make(chan struct{})}
	s.cur.Store(c)
	s.stats.LoadedAt = time.Now()
	go s.watch()
	return s, nil
}

// readFile reads path, at most MaxFileBytes of it. It opens without
// blocking: a FIFO put in the file's place is refused as not a regular file
// (a plain open waits for a writer, forever, and Close with it).
func readFile(path string) ([]byte, stamp, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, stamp{}, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, stamp{}, err
	}
	if !fi.Mode().IsRegular() {
		return nil, stamp{}, fmt.Errorf("%s: not a regular file", path)
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxFileBytes+1))
	if err != nil {
		return nil, stamp{}, err
	}
	if len(data) > MaxFileBytes {
		return nil, stamp{}, fmt.Errorf("%s: larger than %d bytes", path, MaxFileBytes)
	}
	return data, stamp{size: fi.Size(), mtime: fi.ModTime(), sum: sha256.Sum256(data)}, nil
}

// watch polls the file until Close.
func (s *Source) watch() {
	defer close(s.done)
	t := time.NewTicker(s.opt.Poll)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			s.poll()
		}
	}
}

// poll looks at the file once and loads it if it changed. The contents are
// read every time (the file is small): a size and mtime that did not
// change do not prove the contents did not. Changed contents are tried at
// the second poll in a row that sees them the same, so that a file caught
// half-written by an in-place write (which may well parse: a truncated
// list of rules) is neither loaded nor reported.
func (s *Source) poll() {
	loaded, err := s.load()
	if loaded && s.opt.OnReload != nil {
		s.opt.OnReload(err)
	}
}

// load is poll's work: loaded reports whether a changed file was tried,
// err its refusal.
func (s *Source) load() (loaded bool, _ error) {
	data, st, err := readFile(s.path)
	if err != nil {
		if !s.gone {
			s.gone = true
			if errors.Is(err, fs.ErrNotExist) {
				s.opt.Logger.Warn("policy file is gone, keeping the previous policy", "file", s.path)
			} else {
				s.opt.Logger.Warn("policy file unreadable, keeping the previous policy", "file", s.path, "err", err.Error())
			}
		}
		return false, nil
	}
	if s.gone {
		s.gone = false
		s.opt.Logger.Info("policy file is back", "file", s.path)
	}
	if st.sum == s.seen.sum {
		s.seen = st
		s.pending = [sha256.Size]byte{}
		return false, nil
	}
	// A file written in place can be read half-written, and what was
	// written so far may parse: changed contents count once they are seen
	// the same at two polls in a row.
	if s.pending != st.sum {
		s.pending = st.sum
		return false, nil
	}
	s.pending = [sha256.Size]byte{}
	c, err := Parse(data)
	s.seen = st
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		s.stats.Failures++
		s.stats.LastError = err.Error()
		s.opt.Logger.Error("policy file refused, keeping the previous policy", "file", s.path, "err", err.Error())
		return true, err
	}
	s.cur.Store(c)
	s.stats.Reloads++
	s.stats.LoadedAt = time.Now()
	s.opt.Logger.Info("policy file reloaded", "file", s.path, "domains", len(c.names))
	return true, nil
}

// Static is a Source that never changes: tests and embedded uses.
func Static(c *Config) *Source {
	s := &Source{stop: make(chan struct{}), done: make(chan struct{})}
	close(s.done)
	s.cur.Store(c)
	s.stats.LoadedAt = time.Now()
	return s
}

// SourceStats are a Source's reload counts.
type SourceStats struct {
	Reloads, Failures int64  // changed files loaded, and refused
	LastError         string // the last refusal ("" if none)
	LoadedAt          time.Time
}

// Stats returns the reload counts.
func (s *Source) Stats() SourceStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stats
}

// closeWait bounds Close's wait for a poll in progress.
const closeWait = time.Second

// Close stops watching. Idempotent. A poll in progress (parsing a large
// file takes seconds) is waited for up to closeWait: a shutdown does not
// wait on it; it ends on its own, updating a Source no one reads.
func (s *Source) Close() {
	s.closeOnce.Do(func() { close(s.stop) })
	t := time.NewTimer(closeWait)
	defer t.Stop()
	select {
	case <-s.done:
	case <-t.C:
	}
}
