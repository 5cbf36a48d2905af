//go:build interop

package e2e

import (
	"crypto/sha1"
	"encoding/base32"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/trawl/trawl/devstack/stack"
	"github.com/trawl/trawl/devstack/warccheck"
)

// TestArchiveReadByWarcio crawls the synthetic web with the archiver and reads every WARC
// file back with warcio.js (devstack/warcio/check.mjs): Webrecorder's reader must parse
// every record, find every payload digest right and index every record where Trawl's CDXJ
// says it is. It runs under `make interop`, which installs node, npm and warcio first.
func TestArchiveReadByWarcio(t *testing.T) {
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
	readByWarcio(t, files)
}

// TestArchiveReadByWarcioCoded is the same for the archive of compressed responses
// (TestArchiveCodedPages' crawl: gzip at 50 KB to 20 MB as sent, chunked, deflate):
// warcio.js finds every payload digest right, and each digest is that of the octets the
// site sent, so warcio reads each payload byte for byte as sent.
func TestArchiveReadByWarcioCoded(t *testing.T) {
	site, dir := codedCrawl(t)
	a, err := warccheck.Check(dir)
	if err != nil {
		t.Fatalf("the archive does not read back:\n%v", err)
	}
	digests := map[string]string{}
	for _, c := range a.Captures() {
		digests[c.Get("WARC-Target-URI")] = c.Get("WARC-Payload-Digest")
	}
	for _, path := range site.Paths() {
		sum := sha1.Sum(site.Wire(path))
		if want := "sha1:" + base32.StdEncoding.EncodeToString(sum[:]); digests[site.Origin()+path] != want {
			t.Errorf("%s: payload digest %q, the octets sent are %s", path, digests[site.Origin()+path], want)
		}
	}
	files, err := filepath.Glob(filepath.Join(dir, "*.warc.gz"))
	if err != nil || len(files) == 0 {
		t.Fatalf("WARC files %v (%v)", files, err)
	}
	readByWarcio(t, files)
}

// TestArchiveRenderedReadByWarcio crawls the single-page app with rendering and the
// archiver: every rendered page's DOM is a resource record urn:dom:<URL> and every browser
// request a request/response pair naming it, which warccheck verifies and warcio.js reads
// with no problem, indexing each where Trawl's CDXJ says.
func TestArchiveRenderedReadByWarcio(t *testing.T) {
	env := testEnv()
	dir := filepath.Join(t.TempDir(), "warc")
	opts := renderEnv()
	opts["TRAWL_ARCHIVE_DIR"] = dir
	r := crawl(t, spaWeb(true), env, stack.Options{Env: opts}, nil)
	// With the archiver on, the shells' script is also a page requisite, fetched by a
	// fetcher for the archive; the renderer, whose cache holds only what renderers fetched,
	// asks for it once more.
	checkInvariants(t, r, env, 1)
	sealArchive(t, r.stack)
	a, err := warccheck.Check(dir)
	if err != nil {
		t.Fatalf("the archive does not read back:\n%v", err)
	}
	spa, _ := r.web.SPA()
	doms := 0
	for _, c := range a.Captures() {
		if c.Get("WARC-Type") == "resource" {
			doms++
		}
	}
	if doms != len(spa.Tokens) {
		t.Errorf("%d DOM records, want one per app page (%d)", doms, len(spa.Tokens))
	}
	files, err := filepath.Glob(filepath.Join(dir, "*.warc.gz"))
	if err != nil || len(files) == 0 {
		t.Fatalf("WARC files %v (%v)", files, err)
	}
	readByWarcio(t, files)
}

// readByWarcio runs devstack/warcio/check.mjs on files.
func readByWarcio(t *testing.T, files []string) {
	t.Helper()
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
	out, err := exec.Command(node, append([]string{checker}, files...)...).CombinedOutput()
	t.Logf("%s", out)
	if err != nil {
		t.Fatalf("warcio.js does not read the archive as written: %v", err)
	}
}
