package tests

import (
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cellserver/cellserver/gateway/policy"
)

// The documentation's own checks: its links lead to files of the
// repository, and what it gives to copy runs as written. docBlock takes a
// block out of a document, for the tests here and in gateway_http_test.go.

// repoRoot is the repository's top folder, seen from this package.
const repoRoot = ".."

// markdownFiles lists the repository's .md files (not those of installed
// packages: node_modules, nor hidden folders).
func markdownFiles(t *testing.T) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(repoRoot, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && p != repoRoot && (d.Name() == "node_modules" || strings.HasPrefix(d.Name(), ".")) {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(p, ".md") {
			files = append(files, p)
		}
		return nil
	})
	require.NoError(t, err)
	require.NotEmpty(t, files)
	return files
}

var (
	mdLink    = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	mdHeading = regexp.MustCompile(`(?m)^#{1,6}[ \t]+(.+?)[ \t]*$`)
	mdFence   = regexp.MustCompile("(?ms)^[ \t]*```.*?^[ \t]*```")
)

// mdAnchors returns the anchors GitHub gives the headings of a markdown
// text: lower-cased, punctuation other than '-' and '_' dropped, spaces made
// '-', a repeated one suffixed -1, -2, ...
func mdAnchors(text string) map[string]bool {
	seen := map[string]int{}
	anchors := map[string]bool{}
	for _, m := range mdHeading.FindAllStringSubmatch(mdFence.ReplaceAllString(text, ""), -1) {
		var b strings.Builder
		for _, r := range strings.ToLower(m[1]) {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r > 127:
				b.WriteRune(r)
			}
		}
		a := b.String()
		if n := seen[a]; n > 0 {
			anchors[a+"-"+strconv.Itoa(n)] = true
		} else {
			anchors[a] = true
		}
		seen[a]++
	}
	return anchors
}

// Every relative link of every markdown file leads to a file or folder of
// the repository (none outside it, so that a clone has what its documents
// name), and a link's #anchor to a heading of its target.
func TestDocLinks(t *testing.T) {
	root, err := filepath.Abs(repoRoot)
	require.NoError(t, err)
	checked := 0
	for _, f := range markdownFiles(t) {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		text := mdFence.ReplaceAllString(string(b), "")
		for _, m := range mdLink.FindAllStringSubmatch(text, -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			checked++
			file, anchor, _ := strings.Cut(target, "#")
			dest := f
			if file != "" {
				dest = filepath.Join(filepath.Dir(f), filepath.FromSlash(file))
				abs, err := filepath.Abs(dest)
				require.NoError(t, err)
				if !assert.True(t, abs == root || strings.HasPrefix(abs, root+string(filepath.Separator)),
					"%s: link %s leads outside the repository", f, target) {
					continue
				}
				if _, err := os.Stat(dest); !assert.NoError(t, err, "%s: link %s", f, target) {
					continue
				}
			}
			if anchor != "" && strings.HasSuffix(dest, ".md") {
				db, err := os.ReadFile(dest)
				require.NoError(t, err)
				assert.True(t, mdAnchors(string(db))[anchor], "%s: link %s: no such heading in %s", f, target, dest)
			}
		}
	}
	assert.Greater(t, checked, 20, "the links were found")
}

// fenced is a fenced code block of a markdown file.
type fenced struct {
	heading string // the last heading line before it
	lang    string // its info string: nginx, caddyfile, yaml, go, ...
	body    string
}

// fencedBlocks returns the fenced code blocks of the markdown file at path.
func fencedBlocks(t *testing.T, path string) []fenced {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	var (
		found   []fenced
		heading string
		cur     *fenced
		body    strings.Builder
	)
	for _, line := range strings.SplitAfter(string(b), "\n") {
		l := strings.TrimSpace(line)
		switch {
		case cur != nil && l == "```":
			cur.body = body.String()
			found = append(found, *cur)
			cur = nil
		case cur != nil:
			body.WriteString(line)
		case strings.HasPrefix(l, "```"):
			cur = &fenced{heading: heading, lang: strings.TrimSpace(l[3:])}
			body.Reset()
		case strings.HasPrefix(line, "#"):
			heading = strings.TrimRight(line, "\r\n")
		}
	}
	return found
}

// docBlock returns the fenced code block of language lang in the section of
// docs/<doc> that starts at the heading line beginning with heading and ends
// at the next heading of any level. The section must hold exactly one such
// block: the tests run what the documentation shows, so that the two cannot
// drift apart.
func docBlock(t *testing.T, doc, heading, lang string) string {
	t.Helper()
	var found []string
	for _, f := range fencedBlocks(t, filepath.Join(repoRoot, "docs", doc)) {
		if f.lang == lang && strings.HasPrefix(f.heading, heading) {
			found = append(found, f.body)
		}
	}
	require.Len(t, found, 1, "docs/%s: want one ```%s block under %q", doc, lang, heading)
	return found[0]
}

// replaceOnce replaces the one occurrence of old in s (there must be
// exactly one: a test that changes the documented text fails loudly when
// the text it expects is gone).
func replaceOnce(t *testing.T, s, old, new string) string {
	t.Helper()
	require.Equal(t, 1, strings.Count(s, old), "want %q once in:\n%s", old, s)
	return strings.Replace(s, old, new, 1)
}

// replaceBlock replaces, in conf, the brace-delimited block whose first line
// is repl's first line (nginx's "location @x {", Caddy's "handle @x {") by
// repl, indented as the block was.
func replaceBlock(t *testing.T, conf, repl string) string {
	t.Helper()
	replLines := strings.Split(strings.TrimRight(repl, "\n"), "\n")
	head := strings.TrimSpace(replLines[0])
	require.True(t, strings.HasSuffix(head, "{"), "a block starts with a line ending in {: %q", head)
	lines := strings.Split(conf, "\n")
	start := -1
	for i, l := range lines {
		if strings.TrimSpace(l) == head {
			require.Equal(t, -1, start, "%q twice in:\n%s", head, conf)
			start = i
		}
	}
	require.NotEqual(t, -1, start, "no %q in:\n%s", head, conf)
	depth, end := 0, -1
	for i := start; i < len(lines) && end < 0; i++ {
		depth += strings.Count(lines[i], "{") - strings.Count(lines[i], "}")
		if depth == 0 {
			end = i
		}
	}
	require.NotEqual(t, -1, end, "%q has no end in:\n%s", head, conf)
	indent := lines[start][:len(lines[start])-len(strings.TrimLeft(lines[start], " \t"))]
	var out []string
	out = append(out, lines[:start]...)
	for _, l := range replLines {
		out = append(out, indent+l)
	}
	out = append(out, lines[end+1:]...)
	return strings.Join(out, "\n")
}

// The lines docs/http-check.md says nginx's configuration must keep (its
// "Request headers" section) are in its nginx.conf.
func TestDocNginxKeepsHeaderLines(t *testing.T) {
	norm := func(l string) string {
		l, _, _ = strings.Cut(l, "#")
		return strings.Join(strings.Fields(l), " ")
	}
	conf := map[string]bool{}
	for _, l := range strings.Split(docBlock(t, "http-check.md", "## nginx (`auth_request`)", "nginx"), "\n") {
		conf[norm(l)] = true
	}
	n := 0
	for _, l := range strings.Split(docBlock(t, "http-check.md", "## Request headers", "nginx"), "\n") {
		if l = norm(l); l != "" {
			n++
			assert.True(t, conf[l], "%q is not in the nginx.conf", l)
		}
	}
	assert.Equal(t, 5, n)
}

// TestDocMiddlewareQuickStart follows docs/middleware.md as a user would: a
// new module made to depend on this repository by the commands of
// "Depending on it", the quick start's program written into it, built, and
// run against cellserver (its two addresses changed to free ports), where
// it answers with the limits it declares.
func TestDocMiddlewareQuickStart(t *testing.T) {
	root, err := filepath.Abs(repoRoot)
	require.NoError(t, err)
	srv := startServer(t, "--in-memory", "--enable-debug-command", "local")
	require.NoError(t, srv.Client(t).Do(ctxT(t, 5*time.Second), "DEBUG", "CLOCK", "SET", checkClock.UnixNano()).Err())
	listen := "127.0.0.1:" + strconv.Itoa(freePort(t))

	app := t.TempDir()
	prog := docBlock(t, "middleware.md", "## Quick start", "go")
	prog = replaceOnce(t, prog, `"127.0.0.1:6379"`, strconv.Quote(srv.Addr))
	prog = replaceOnce(t, prog, `"127.0.0.1:8080"`, strconv.Quote(listen))
	require.NoError(t, os.WriteFile(filepath.Join(app, "main.go"), []byte(prog), 0o644))

	steps := docBlock(t, "middleware.md", "## Depending on it", "sh")
	steps = replaceOnce(t, steps, "=../cellserver", "="+root)
	env := append(os.Environ(), "GOFLAGS=", "GOWORK=off", "CGO_ENABLED=0")
	run := func(name string, args ...string) {
		t.Helper()
		cmd := exec.Command(name, args...)
		cmd.Dir, cmd.Env = app, env
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s %q:\n%s", name, args, out)
	}
	run("bash", "-e", "-u", "-o", "pipefail", "-c", steps)
	gomod, err := os.ReadFile(filepath.Join(app, "go.mod"))
	require.NoError(t, err)
	assert.Contains(t, string(gomod), "github.com/cellserver/cellserver v0.0.0-00010101000000-000000000000")
	assert.Contains(t, string(gomod), "replace github.com/cellserver/cellserver => "+root)
	run("go", "build", "-o", "app", ".")

	startCheckGateway(t, app, listen, nil, filepath.Join(app, "app"))
	c := &http.Client{Timeout: 10 * time.Second}
	for i := range 60 {
		resp, body := checkGet(t, c, "http://"+listen+"/api/hello")
		require.Equal(t, http.StatusOK, resp.StatusCode, body)
		assert.Equal(t, "hello\n", body)
		assert.Equal(t, fmt.Sprintf(`"minute";r=%d;t=30`, 59-i), resp.Header.Get("RateLimit"))
	}
	resp, body := checkGet(t, c, "http://"+listen+"/api/hello")
	assert.Equal(t, http.StatusTooManyRequests, resp.StatusCode, body)
	assert.Equal(t, "30", resp.Header.Get("Retry-After"))
	assert.Contains(t, resp.Header.Get("RateLimit-Policy"), `"day";q=1000;w=86400`)
}

// The policy of docs/policy.md's "Limiting a path" puts the variants of
// /login an application may answer alike into one bucket per client, and,
// as it says, leaves /LOGIN to another rule.
func TestDocPolicyPathLimit(t *testing.T) {
	pol := filepath.Join(t.TempDir(), "policy.yaml")
	require.NoError(t, os.WriteFile(pol, []byte(docBlock(t, "policy.md", "## Limiting a path", "yaml")), 0o644))
	httpAddr := "127.0.0.1:" + strconv.Itoa(freePort(t))
	srv := startServer(t, "--in-memory", "--enable-debug-command", "local", "--policy-file", pol, "--http-addr", httpAddr)
	require.NoError(t, srv.Client(t).Do(ctxT(t, 5*time.Second), "DEBUG", "CLOCK", "SET", checkClock.UnixNano()).Err())
	check := func(client, path string) *http.Response {
		t.Helper()
		resp, body := checkGet(t, http.DefaultClient, "http://"+httpAddr+"/check/web?d=remote_address,path",
			"X-Real-IP", client, "X-Forwarded-Uri", path)
		require.Contains(t, []int{200, 429}, resp.StatusCode, body)
		return resp
	}
	variants := []string{"/login", "/login/", "/login;jsessionid=1", "/login.json", "/a/../login",
		"//login", "/%6Cogin", "/login/sso?next=/"}
	for i, p := range variants {
		resp := check("192.0.2.1", p)
		if i < 5 {
			assert.Equal(t, http.StatusOK, resp.StatusCode, p)
			assert.Equal(t, fmt.Sprintf(`"login";r=%d;t=30`, 4-i), resp.Header.Get("RateLimit"), p)
		} else {
			assert.Equal(t, http.StatusTooManyRequests, resp.StatusCode, "%s shares the bucket", p)
		}
	}
	for _, p := range []string{"/LOGIN", "/other"} {
		resp := check("192.0.2.1", p)
		assert.Equal(t, http.StatusOK, resp.StatusCode, p)
		assert.Empty(t, resp.Header.Get("RateLimit"), "%s matches no limit", p)
	}
	resp := check("192.0.2.2", "/login/")
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, `"login";r=4;t=30`, resp.Header.Get("RateLimit"), "another client, another bucket")
}

// Every policy file of the documents (a YAML block whose first line that is
// no comment starts with "domain:") loads as it is written.
func TestDocPolicyFilesLoad(t *testing.T) {
	n := 0
	for _, f := range markdownFiles(t) {
		for _, b := range fencedBlocks(t, f) {
			if b.lang != "yaml" {
				continue
			}
			y := b.body
			first := ""
			for _, l := range strings.Split(y, "\n") {
				if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
					first = l
					break
				}
			}
			if !strings.HasPrefix(first, "domain:") || strings.Contains(y, "domain: <") {
				continue // not a policy file, or the format's outline
			}
			n++
			_, err := policy.Parse([]byte(y))
			assert.NoError(t, err, "%s:\n%s", f, y)
		}
	}
	assert.GreaterOrEqual(t, n, 5, "the policy files of docs/policy.md and docs/envoy.md were found")
}

// docs/metrics.md's Prometheus configuration passes promtool as written.
func TestDocPrometheusConfig(t *testing.T) {
	promtool := "/usr/bin/promtool"
	if _, err := os.Stat(promtool); err != nil {
		t.Skipf("SKIPPED: %s is not installed (Debian's prometheus brings it; test.sh installs it): %v", promtool, err)
	}
	file := filepath.Join(t.TempDir(), "prometheus.yml")
	require.NoError(t, os.WriteFile(file, []byte(docBlock(t, "metrics.md", "# Metrics", "yaml")), 0o644))
	out, err := exec.Command(promtool, "check", "config", file).CombinedOutput()
	require.NoError(t, err, "%s", out)
	assert.Contains(t, string(out), "SUCCESS")
}
