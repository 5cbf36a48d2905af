package report

import (
	"os"
	"path/filepath"
	"testing"
)

// The reports' directory (trawlctl report -out) is made when missing, as a user who names a
// new directory for them expects, rather than failing on its first file.
func TestWriteMakesItsDirectory(t *testing.T) {
	for _, tc := range []struct {
		name string
		dir  string
	}{
		{"existing", ""},
		{"missing", "reports/2026-11"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), tc.dir)
			b := New(Crawl{Prefix: "trawl"})
			if err := b.Write(dir); err != nil {
				t.Fatal(err)
			}
			for _, f := range b.Files() {
				if _, err := os.Stat(filepath.Join(dir, f.Name)); err != nil {
					t.Errorf("%s: %v", f.Name, err)
				}
			}
		})
	}
}
