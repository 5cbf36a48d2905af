package docscheck

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// forbidInCode fails the test for each match of pattern in the repository's non-test Go
// files outside the directory allowed (relative to the root), naming the file and line
// and what to do instead.
func forbidInCode(t *testing.T, pattern *regexp.Regexp, allowed, instead string) {
	t.Helper()
	forbidInFiles(t, ".go", pattern, allowed, instead)
}

// forbidInFiles is forbidInCode for the non-test files whose names end in suffix; allowed
// "" allows no directory.
func forbidInFiles(t *testing.T, suffix string, pattern *regexp.Regexp, allowed, instead string) {
	t.Helper()
	allowedDir := ""
	if allowed != "" {
		allowedDir = filepath.Join(repoRoot, filepath.FromSlash(allowed))
	}
	err := filepath.WalkDir(repoRoot, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			if path == allowedDir || (path != repoRoot && (name == "testdata" || name == "node_modules" || strings.HasPrefix(name, "."))) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, suffix) || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, loc := range pattern.FindAllIndex(b, -1) {
			line := 1 + strings.Count(string(b[:loc[0]]), "\n")
			t.Errorf("%s:%d: %s", path, line, instead)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
