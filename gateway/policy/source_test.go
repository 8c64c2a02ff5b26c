package policy

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// syncBuffer is a log sink the watcher goroutine and the test share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) lines() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Split(strings.TrimSpace(s.b.String()), "\n")
}

func policyDoc(rpu string) string {
	return "domain: d\ndescriptors:\n- key: k\n  rate_limit: {unit: minute, requests_per_unit: " + rpu + "}\n"
}

// watched opens a Source on a temp file with a fast poll; reloads
// receives every OnReload.
func watched(t *testing.T, contents string) (s *Source, path string, reloads chan error, log *syncBuffer) {
	t.Helper()
	path = filepath.Join(t.TempDir(), "policy.yaml")
	require.NoError(t, os.WriteFile(path, []byte(contents), 0o644))
	reloads = make(chan error, 16)
	log = &syncBuffer{}
	s, err := Open(path, SourceOptions{
		Poll:     5 * time.Millisecond,
		Logger:   slog.New(slog.NewTextHandler(log, nil)),
		OnReload: func(err error) { reloads <- err },
	})
	require.NoError(t, err)
	t.Cleanup(s.Close)
	return s, path, reloads, log
}

func next(t *testing.T, reloads chan error) error {
	t.Helper()
	select {
	case err := <-reloads:
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("no reload seen")
		return nil
	}
}

func rpuOf(s *Source) uint32 {
	return s.Current().Match("d", desc("k=v")).Limit.RequestsPerUnit
}

// replace writes a new version of path the way editors and ConfigMaps do:
// a temp file renamed over it.
func replace(t *testing.T, path, contents string) {
	t.Helper()
	tmp := path + ".tmp"
	require.NoError(t, os.WriteFile(tmp, []byte(contents), 0o644))
	require.NoError(t, os.Rename(tmp, path))
}

func TestHotReload(t *testing.T) {
	s, path, reloads, log := watched(t, policyDoc("1"))
	assert.Equal(t, uint32(1), rpuOf(s))

	// Written in place.
	require.NoError(t, os.WriteFile(path, []byte(policyDoc("2")), 0o644))
	require.NoError(t, next(t, reloads))
	assert.Equal(t, uint32(2), rpuOf(s))

	// Renamed over.
	replace(t, path, policyDoc("3"))
	require.NoError(t, next(t, reloads))
	assert.Equal(t, uint32(3), rpuOf(s))

	// A bad file is refused, the previous policy stays, once per version.
	before := s.Current()
	replace(t, path, policyDoc("3")+"  foo: bar\n")
	err := next(t, reloads)
	require.Error(t, err)
	assert.Contains(t, err.Error(), `unknown key "foo"`)
	assert.Same(t, before, s.Current())
	st := s.Stats()
	assert.Equal(t, int64(2), st.Reloads)
	assert.Equal(t, int64(1), st.Failures)
	assert.Equal(t, err.Error(), st.LastError)
	refused := 0
	for _, l := range log.lines() {
		if strings.Contains(l, "keeping the previous policy") && strings.Contains(l, "level=ERROR") {
			refused++
			assert.Contains(t, l, "file="+path)
			assert.Contains(t, l, `unknown key \"foo\"`)
		}
	}
	assert.Equal(t, 1, refused, "one line per refused version")

	// Fixed: loads again.
	replace(t, path, policyDoc("4"))
	require.NoError(t, next(t, reloads))
	assert.Equal(t, uint32(4), rpuOf(s))
	assert.Equal(t, int64(3), s.Stats().Reloads)
	assert.Equal(t, int64(1), s.Stats().Failures)
}

// A removed file keeps the policy in force; one that comes back with new
// contents is loaded.
func TestFileRemoved(t *testing.T) {
	s, path, reloads, log := watched(t, policyDoc("7"))
	require.NoError(t, os.Remove(path))
	require.Eventually(t, func() bool {
		return strings.Contains(strings.Join(log.lines(), "\n"), "policy file is gone, keeping the previous policy")
	}, 10*time.Second, time.Millisecond)
	assert.Equal(t, uint32(7), rpuOf(s))
	assert.Equal(t, int64(0), s.Stats().Failures)

	require.NoError(t, os.WriteFile(path, []byte(policyDoc("8")), 0o644))
	require.NoError(t, next(t, reloads))
	assert.Equal(t, uint32(8), rpuOf(s))
	gone := 0
	for _, l := range log.lines() {
		if strings.Contains(l, "is gone") {
			gone++
		}
	}
	assert.Equal(t, 1, gone, "logged once, not every poll")
}

// A rewrite that keeps the size and the modification time is still seen.
func TestSameSizeSameMtime(t *testing.T) {
	s, path, reloads, _ := watched(t, policyDoc("5"))
	fi, err := os.Stat(path)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(path, []byte(policyDoc("6")), 0o644))
	require.NoError(t, os.Chtimes(path, fi.ModTime(), fi.ModTime()))
	require.NoError(t, next(t, reloads))
	assert.Equal(t, uint32(6), rpuOf(s))
}

// Contents caught half-written (a truncate, then a write) are neither
// loaded nor reported, even when what was written so far parses; the whole
// file loads at the second poll that sees it.
func TestHalfWrittenNotReported(t *testing.T) {
	// No watcher polls on its own here (an hour's poll): load is driven
	// by hand, one call per poll.
	path := filepath.Join(t.TempDir(), "policy.yaml")
	require.NoError(t, os.WriteFile(path, []byte(policyDoc("1")), 0o644))
	s, err := Open(path, SourceOptions{Poll: time.Hour, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	defer s.Close()
	poll := func() (bool, error) { return s.load() }

	// What a poll between a truncate and the write reads: a prefix that
	// does not parse, then one that does (the first rule of two, the one
	// that would drop k's limit).
	whole := "domain: d\ndescriptors:\n- key: other\n  rate_limit: {unit: minute, requests_per_unit: 9}\n" +
		"- key: k\n  rate_limit: {unit: minute, requests_per_unit: 2}\n"
	require.NoError(t, os.WriteFile(path, []byte(whole[:20]), 0o644))
	tried, err := poll()
	assert.False(t, tried)
	require.NoError(t, err)
	half := whole[:strings.Index(whole, "- key: k")]
	_, err = Parse([]byte(half))
	require.NoError(t, err, "the half-written file parses")
	require.NoError(t, os.WriteFile(path, []byte(half), 0o644))
	tried, err = poll()
	assert.False(t, tried, "changed since the last poll: not loaded yet")
	require.NoError(t, err)
	assert.Equal(t, uint32(1), rpuOf(s))
	require.NoError(t, os.WriteFile(path, []byte(whole), 0o644))
	tried, _ = poll()
	assert.False(t, tried)
	assert.Equal(t, uint32(1), rpuOf(s))
	tried, err = poll()
	assert.True(t, tried, "the same at two polls in a row: loaded")
	require.NoError(t, err)
	assert.Equal(t, uint32(2), rpuOf(s))
	assert.Equal(t, int64(1), s.Stats().Reloads)
	assert.Equal(t, int64(0), s.Stats().Failures)
	tried, _ = poll()
	assert.False(t, tried, "loaded once per version")

	// Bad contents that stay are refused at the second look.
	require.NoError(t, os.WriteFile(path, []byte("domain: d\nbogus: 1\n"), 0o644))
	tried, _ = poll()
	assert.False(t, tried)
	tried, err = poll()
	assert.True(t, tried)
	require.Error(t, err)
	assert.Equal(t, int64(1), s.Stats().Failures)
	tried, _ = poll()
	assert.False(t, tried, "refused once per version")
	assert.Equal(t, uint32(2), rpuOf(s))
}

func TestOpenRefusesBadFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "bad.yaml")
	require.NoError(t, os.WriteFile(path, []byte("domain: d\nbogus: 1\n"), 0o644))
	_, err := Open(path, SourceOptions{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), path+": policy: document 1")
	_, err = Open(filepath.Join(dir, "missing.yaml"), SourceOptions{})
	require.Error(t, err)
	_, err = Open(dir, SourceOptions{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "not a regular file")
}

// Close stops the watcher: a later change is not loaded. Idempotent.
func TestCloseStopsWatching(t *testing.T) {
	s, path, reloads, _ := watched(t, policyDoc("1"))
	s.Close()
	s.Close()
	require.NoError(t, os.WriteFile(path, []byte(policyDoc("2")), 0o644))
	// The watcher goroutine has returned (Close waits for a poll in
	// progress, here a short one), so no poll can run any more: a direct
	// look at the channel is enough.
	select {
	case err := <-reloads:
		t.Fatalf("reload after Close: %v", err)
	default:
	}
	assert.Equal(t, uint32(1), rpuOf(s))
}

// A FIFO where the file was is refused as not a regular file, at once: an
// open that waits for a writer stopped reloads and made Close (and the
// server's shutdown) wait forever.
func TestFIFORefused(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	require.NoError(t, syscall.Mkfifo(fifo, 0o644))
	_, err := Open(fifo, SourceOptions{})
	require.ErrorContains(t, err, "not a regular file")

	s, path, reloads, log := watched(t, policyDoc("1"))
	lnk := path + ".lnk"
	require.NoError(t, os.Symlink(fifo, lnk))
	require.NoError(t, os.Rename(lnk, path))
	require.Eventually(t, func() bool {
		return strings.Contains(strings.Join(log.lines(), "\n"), "not a regular file")
	}, 10*time.Second, time.Millisecond)
	replace(t, path, policyDoc("2"))
	require.NoError(t, next(t, reloads))
	assert.Equal(t, uint32(2), rpuOf(s))
	s.Close()
}

// Readers see either Config, never a torn one, while reloads run.
func TestConcurrentReaders(t *testing.T) {
	s, path, reloads, _ := watched(t, policyDoc("1"))
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if l := s.Current().Match("d", desc("k=v")).Limit; l == nil || l.RequestsPerUnit == 0 {
					t.Error("no limit")
					return
				}
			}
		}()
	}
	for i := 2; i < 6; i++ {
		replace(t, path, policyDoc(strings.Repeat("9", i)))
		require.NoError(t, next(t, reloads))
	}
	close(stop)
	wg.Wait()
	assert.Equal(t, uint32(99999), rpuOf(s))
}

// A Kubernetes ConfigMap volume: the file is a symlink through "..data",
// itself a symlink swapped (renamed over) to a new directory on update.
func TestConfigMapSymlinkSwap(t *testing.T) {
	dir := t.TempDir()
	version := func(name, rpu string) {
		require.NoError(t, os.Mkdir(filepath.Join(dir, name), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(dir, name, "policy.yaml"), []byte(policyDoc(rpu)), 0o644))
		tmp := filepath.Join(dir, "..data_tmp")
		require.NoError(t, os.Symlink(name, tmp))
		require.NoError(t, os.Rename(tmp, filepath.Join(dir, "..data")))
	}
	version("..v1", "11")
	path := filepath.Join(dir, "policy.yaml")
	require.NoError(t, os.Symlink(filepath.Join("..data", "policy.yaml"), path))
	reloads := make(chan error, 4)
	s, err := Open(path, SourceOptions{Poll: 5 * time.Millisecond, Logger: slog.New(slog.DiscardHandler),
		OnReload: func(err error) { reloads <- err }})
	require.NoError(t, err)
	defer s.Close()
	assert.Equal(t, uint32(11), rpuOf(s))
	version("..v2", "12")
	require.NoError(t, next(t, reloads))
	assert.Equal(t, uint32(12), rpuOf(s))
}
