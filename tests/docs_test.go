package tests

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The documentation's own checks: its links lead to files of the
// repository.

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
