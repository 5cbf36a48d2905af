package cli

import (
	"archive/zip"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/trawl/trawl/shared/wacz"
)

// TestArchiveWACZ packages testdata/warc (one sealed file and its index, as the archiver
// writes them; a file still open beside them is left out) and checks the package entry by
// entry; wrong command lines fail with one line.
func TestArchiveWACZ(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"TRAWL-20261128120000000-00001-fixture.warc.gz", "TRAWL-20261128120000000-00001-fixture.cdxj"} {
		b, err := os.ReadFile(filepath.Join("testdata", "warc", f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "TRAWL-20261128130000000-00002-fixture.warc.gz.open"), []byte("partial"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "crawl.wacz")
	r := invocation{}.run(t, "archive", "wacz", "-o", out, "-title", "Fixture crawl", dir)
	if r.code != ExitOK || !strings.Contains(r.stdout, "1 WARC files, 2 index lines, 1 pages") {
		t.Fatalf("exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	if err := wacz.Verify(out); err != nil {
		t.Fatal(err)
	}
	zr, err := zip.OpenReader(out)
	if err != nil {
		t.Fatal(err)
	}
	defer zr.Close()
	var names []string
	var pages string
	for _, f := range zr.File {
		names = append(names, f.Name)
		if f.Name == wacz.PagesPath {
			rc, _ := f.Open()
			b, _ := io.ReadAll(rc)
			rc.Close()
			pages = string(b)
		}
	}
	if got := strings.Join(names, " "); got != "archive/TRAWL-20261128120000000-00001-fixture.warc.gz indexes/index.cdxj pages/pages.jsonl datapackage.json datapackage-digest.json" {
		t.Errorf("entries %s", got)
	}
	if !strings.Contains(pages, `"url":"http://a.test/","ts":"2026-11-28T12:00:00.000Z","title":"Fixture home"`) {
		t.Errorf("pages.jsonl:\n%s", pages)
	}

	t.Run("no sealed file", func(t *testing.T) {
		expectOneLine(t, invocation{}.run(t, "archive", "wacz", "-o", filepath.Join(t.TempDir(), "x.wacz"), t.TempDir()), ExitFailure, "no sealed WARC file")
	})
	t.Run("no output", func(t *testing.T) {
		r := invocation{}.run(t, "archive", "wacz", dir)
		if r.code != ExitUsage {
			t.Errorf("exit %d, want %d (stderr %q)", r.code, ExitUsage, r.stderr)
		}
	})
}
