package upload

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSealed: only files never written again are uploaded, each WARC file before its
// index (a reader of the bucket never finds an index whose file is missing), packages last.
func TestSealed(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files []string
		want  string
	}{
		{"file before its index", []string{"T-2.cdxj", "T-2.warc.gz", "T-1.cdxj", "T-1.warc.gz"}, "T-1.warc.gz T-1.cdxj T-2.warc.gz T-2.cdxj"},
		{"open file and its early index left", []string{"T-1.warc.gz.open", "T-1.cdxj", "T-0.warc.gz"}, "T-0.warc.gz"},
		{"records and temporaries left", []string{"T-1.warc.gz", "T-1.warc.gz.upload", "T-1.warc.gz.upload.tmp", "T-1.cdxj.tmp", "c.wacz.tmp"}, "T-1.warc.gz"},
		{"kept after upload left", []string{"T-1.warc.gz", "T-1.warc.gz.uploaded", "T-1.cdxj"}, "T-1.cdxj"},
		{"packages last", []string{"a.wacz", "T-1.warc.gz"}, "T-1.warc.gz a.wacz"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			for _, f := range tc.files {
				if err := os.WriteFile(filepath.Join(dir, f), nil, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			got, err := Sealed(dir)
			if err != nil {
				t.Fatal(err)
			}
			for i := range got {
				got[i] = filepath.Base(got[i])
			}
			if strings.Join(got, " ") != tc.want {
				t.Errorf("Sealed = %v, want %s", got, tc.want)
			}
		})
	}
}
