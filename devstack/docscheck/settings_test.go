package docscheck

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestSettingsReadOneWay: every TRAWL_* variable is read through shared/envconfig's Reader,
// which records it for the tests that hold README.md's tables to the code
// (shared/envconfig/envdoc); a direct os.Getenv would be a setting no test sees.
func TestSettingsReadOneWay(t *testing.T) {
	direct := regexp.MustCompile(`os\.(Getenv|LookupEnv)\("TRAWL_`)
	envDir := filepath.Join(repoRoot, "shared", "envconfig")
	err := filepath.WalkDir(repoRoot, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			if path == envDir || (path != repoRoot && (name == "testdata" || name == "node_modules" || strings.HasPrefix(name, "."))) {
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
		for _, loc := range direct.FindAllIndex(b, -1) {
			line := 1 + strings.Count(string(b[:loc[0]]), "\n")
			t.Errorf("%s:%d reads a TRAWL_ variable directly; read it with an envconfig.Reader (envconfig.Overlay for a program that starts services)", path, line)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
