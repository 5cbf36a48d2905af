package docscheck

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestMetricsDeclaredOneWay: every series is declared through shared/obs's Metrics, which
// records it for the docs/metrics.md test; a collector built directly with client_golang
// would be served without ever being checked against the page.
func TestMetricsDeclaredOneWay(t *testing.T) {
	direct := regexp.MustCompile(`prometheus\.New(Counter|Gauge|Histogram|Summary|Untyped)`)
	obsDir := filepath.Join(repoRoot, "shared", "obs")
	err := filepath.WalkDir(repoRoot, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			if path == obsDir || (path != repoRoot && (name == "testdata" || name == "node_modules" || strings.HasPrefix(name, "."))) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if loc := direct.FindIndex(b); loc != nil {
			line := 1 + strings.Count(string(b[:loc[0]]), "\n")
			t.Errorf("%s:%d builds a collector directly; declare it with obs.Metrics so docs/metrics.md is checked against it", path, line)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
