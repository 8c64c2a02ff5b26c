package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// goTestJSON writes files (path: contents) as a module in a temporary folder
// and returns what `go test -json ./...` prints there, whatever its exit
// status: the events of the Go release that runs these tests.
func goTestJSON(t *testing.T, files map[string]string) []byte {
	t.Helper()
	dir := t.TempDir()
	files["go.mod"] = "module sample\n\ngo 1.22\n"
	for name, body := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte(body), 0o644))
	}
	cmd := exec.Command("go", "test", "-json", "-count=1", "./...")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=", "GOWORK=off", "GOTOOLCHAIN=local")
	var out bytes.Buffer
	cmd.Stdout = &out
	_ = cmd.Run() // fails when a sample test does; the events say why
	require.Contains(t, out.String(), `"Action":"start"`, "go test -json ran")
	return out.Bytes()
}

func TestSummaryOfFailuresAndSkips(t *testing.T) {
	in := goTestJSON(t, map[string]string{
		"a/a_test.go": `package a
import "testing"
func TestSkip(t *testing.T) { t.Log("setting up"); t.Skip("SKIPPED: the tool is missing") }
func TestFail(t *testing.T) {
	t.Run("sub", func(t *testing.T) { t.Error("boom") })
	t.Run("ok", func(t *testing.T) { t.Log("quiet") })
}
func TestPass(t *testing.T) { t.Log("noise of a passing test") }
func TestSubSkip(t *testing.T) { t.Run("x", func(t *testing.T) { t.Skipf("no %s", "x") }) }
func TestSkipLines(t *testing.T) { t.Skip("first line\nsecond line") }
`,
		"b/b_test.go": `package b
import "testing"
func TestPanic(t *testing.T) { t.Log("about to"); panic("kaboom") }
`,
		"c/c_test.go": `package c
import "testing"
func TestX(t *testing.T) { undefinedName() }
`,
		"d/d_test.go": `package d
import "testing"
func TestFine(t *testing.T) {}
`,
	})
	var out bytes.Buffer
	failed, err := summarize(bytes.NewReader(in), &out)
	require.NoError(t, err)
	assert.True(t, failed)
	s := out.String()

	// The failures, readably: the messages, the panic, the build error.
	for _, want := range []string{
		"a_test.go:5: boom\n", "--- FAIL: TestFail/sub", "--- FAIL: TestFail ", "FAIL\tsample/a\t",
		"b_test.go:3: about to\n", "panic: kaboom", "FAIL\tsample/b\t",
		"undefined: undefinedName", "FAIL\tsample/c [build failed]",
		"ok  \tsample/d\t",
	} {
		assert.Contains(t, s, want)
	}
	// A passing test's output and the -v framing are left out, as go test
	// without -v does.
	for _, unwanted := range []string{"noise of a passing test", "quiet", "=== RUN", "--- PASS", "\nPASS\n"} {
		assert.NotContains(t, s, unwanted)
	}

	// The lists, after everything else.
	i := strings.LastIndex(s, "\n3 skipped:\n")
	require.GreaterOrEqual(t, i, 0, s)
	tail := s[i:]
	assert.Equal(t, `
3 skipped:
SKIP sample/a TestSkip: a_test.go:3: SKIPPED: the tool is missing
SKIP sample/a TestSubSkip/x: a_test.go:9: no x
SKIP sample/a TestSkipLines: a_test.go:10: first line / second line
4 failed:
FAIL sample/a TestFail/sub
FAIL sample/a TestFail
FAIL sample/b TestPanic
FAIL sample/c (build failed: sample/c [sample/c.test])
`, tail)
}

func TestSummaryAllPassed(t *testing.T) {
	in := goTestJSON(t, map[string]string{
		"a/a_test.go": "package a\nimport \"testing\"\nfunc TestA(t *testing.T) { t.Log(\"fine\") }\n",
		"b/b.go":      "package b\n",
	})
	var out bytes.Buffer
	failed, err := summarize(bytes.NewReader(in), &out)
	require.NoError(t, err)
	assert.False(t, failed, out.String())
	assert.Contains(t, out.String(), "ok  \tsample/a\t")
	assert.Contains(t, out.String(), "?   \tsample/b\t[no test files]")
	assert.True(t, strings.HasSuffix(out.String(), "\n0 skipped:\nno failures\n"), out.String())
}

// Input that stops in the middle of a package (go test killed) or holds no
// events at all is a failure, not a clean run.
func TestSummaryCutShort(t *testing.T) {
	var out bytes.Buffer
	failed, err := summarize(strings.NewReader(`{"Action":"start","Package":"p"}
{"Action":"run","Package":"p","Test":"TestA"}
`), &out)
	require.NoError(t, err)
	assert.True(t, failed)
	assert.Contains(t, out.String(), "FAIL p (no result (go test stopped before the package ended))")

	failed, err = summarize(strings.NewReader("go: cannot find main module\n"), &out)
	assert.Error(t, err)
	assert.True(t, failed)
	assert.Contains(t, out.String(), "go: cannot find main module\n", "a line that is no event is passed on")
}
