//go:build interop

package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/trawl/trawl/devstack/stack"
)

// TestArchiveReadByWarcio crawls the synthetic web with the archiver and reads every WARC
// file back with warcio.js (devstack/warcio/check.mjs): Webrecorder's reader must parse
// every record, find every payload digest right and index every record where Trawl's CDXJ
// says it is. It runs under `make interop`, which installs node, npm and warcio first.
func TestArchiveReadByWarcio(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("node is not installed: run `make interop`, which installs it (%v)", err)
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	checker := filepath.Join(root, "warcio", "check.mjs")
	if _, err := os.Stat(filepath.Join(root, "warcio", "node_modules", "warcio")); err != nil {
		t.Fatalf("warcio.js is not installed in devstack/warcio: run `make interop` (%v)", err)
	}
	env := testEnv()
	dir := filepath.Join(t.TempDir(), "warc")
	r := crawl(t, testWeb(), env, stack.Options{Env: map[string]string{
		"TRAWL_ARCHIVE_DIR":      dir,
		"TRAWL_ARCHIVE_MAX_SIZE": "256KiB", // several files
	}}, nil)
	checkInvariants(t, r, env, 0)
	sealArchive(t, r.stack)
	files, err := filepath.Glob(filepath.Join(dir, "*.warc.gz"))
	if err != nil || len(files) < 2 {
		t.Fatalf("WARC files %v (%v): want several", files, err)
	}
	out, err := exec.Command(node, append([]string{checker}, files...)...).CombinedOutput()
	t.Logf("%s", out)
	if err != nil {
		t.Fatalf("warcio.js does not read the archive as written: %v", err)
	}
}
