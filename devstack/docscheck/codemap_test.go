package docscheck

import (
	"bufio"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// repoRoot is the repository's root: this package is devstack/docscheck.
const repoRoot = "../.."

// codeMap reads the paths of the fenced block under "## Shape" in docs/architecture.md:
// the first word of each line ("shared/policy/", "go.work").
func codeMap(t *testing.T) []string {
	t.Helper()
	f, err := os.Open(filepath.Join(repoRoot, "docs", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var paths []string
	inShape, inBlock := false, false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "## "):
			if inShape && !inBlock {
				inShape = false
			}
			if line == "## Shape" {
				inShape = true
			}
		case inShape && strings.HasPrefix(line, "```"):
			if inBlock {
				return paths
			}
			inBlock = true
		case inBlock:
			if w := strings.Fields(line); len(w) > 0 {
				paths = append(paths, w[0])
			}
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	t.Fatal(`docs/architecture.md has no fenced block under "## Shape"`)
	return nil
}

// packageDirs are the repository's directories that hold a .go file, as "dir/", skipping
// what the go command skips (testdata, dot and underscore directories) and node_modules.
func packageDirs(t *testing.T) []string {
	t.Helper()
	seen := map[string]bool{}
	err := filepath.WalkDir(repoRoot, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != repoRoot && (name == "testdata" || name == "node_modules" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(name, ".go") {
			rel, err := filepath.Rel(repoRoot, filepath.Dir(path))
			if err != nil {
				return err
			}
			seen[filepath.ToSlash(rel)+"/"] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	out := make([]string, 0, len(seen))
	for d := range seen {
		out = append(out, d)
	}
	sort.Strings(out)
	return out
}

func TestCodeMapMatchesTheTree(t *testing.T) {
	listed := map[string]bool{}
	for _, p := range codeMap(t) {
		if listed[p] {
			t.Errorf("docs/architecture.md lists %s twice", p)
		}
		listed[p] = true
		if _, err := os.Stat(filepath.Join(repoRoot, filepath.FromSlash(p))); err != nil {
			t.Errorf("docs/architecture.md lists %s, which is not in the tree", p)
		}
	}
	for _, d := range packageDirs(t) {
		if !listed[d] {
			t.Errorf("%s holds Go code but is not in the map of docs/architecture.md (## Shape)", d)
		}
	}
}
