package e2e

import (
	"bytes"
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/trawl/trawl/devstack/stack"
	"github.com/trawl/trawl/devstack/synthweb"
	"github.com/trawl/trawl/devstack/warccheck"
)

// codedCrawl crawls a CodedSite (synthweb.CodedPages: gzip bodies of 50 KB to 20 MB as
// sent, chunked ones, a deflate one) with the archiver on, and returns the site and the
// archive's directory once the archive is sealed. TRAWL_MAX_BODY is raised to 32 MiB so the
// 20 MB page (27 MB decoded) is kept whole: what a body cut at the cap keeps is in
// services/archiver/README.md ("Archiving").
func codedCrawl(t *testing.T) (*synthweb.CodedSite, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	site, err := synthweb.StartCodedSite(ctx, "", synthweb.CodedPages())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { site.Close() })
	dir := filepath.Join(t.TempDir(), "warc")
	vars := testEnv().vars()
	vars["TRAWL_ARCHIVE_DIR"] = dir
	vars["TRAWL_MAX_BODY"] = "32MiB"
	// The tests' 5s fetch timeout is too short for a 20 MB body on a loaded 2-core machine: cut
	// there, the page was fetched again after its politeness delay (two runs in six, with two
	// end-to-end suites at once). The default timeout, and a lease to match, hold it.
	vars["TRAWL_FETCH_TIMEOUT"] = "30s"
	vars["TRAWL_LEASE_TTL"] = "60s"
	st := startStack(t, ctx, stack.Options{Dir: t.TempDir(), Env: vars})
	start := time.Now()
	if err := st.Seed(ctx, site.Seeds()); err != nil {
		t.Fatal(err)
	}
	p, err := st.WaitIdle(ctx, 250*time.Millisecond, nil)
	if err != nil {
		t.Fatalf("crawl did not finish: %v (last progress %+v)", err, p)
	}
	t.Logf("crawled %d pages in %s", p.Fetched, time.Since(start).Round(time.Millisecond))
	if want := int64(len(site.Paths()) + 1); p.Fetched != want || p.Failed != 0 || p.Accepted != p.Terminal() {
		t.Errorf("fetched %d, failed %d, accepted %d, terminal %d: want every one of %d pages fetched", p.Fetched, p.Failed, p.Accepted, p.Terminal(), want)
	}
	served := map[string][]synthweb.Request{}
	for _, q := range site.Requests() {
		served[q.Path] = append(served[q.Path], q)
	}
	for _, path := range append(site.Paths(), "/") {
		if qs := served[path]; len(qs) != 1 {
			t.Errorf("%s requested %d times, want once:", path, len(qs))
			for _, q := range qs {
				t.Errorf("  at %s, %d octets written in %s, status %d", q.Start.Format(time.StampMilli), q.Bytes, q.End.Sub(q.Start).Round(time.Millisecond), q.Status)
			}
		}
	}
	sealArchive(t, st)
	return site, dir
}

// An archive crawl of a site whose pages are compressed on the wire — gzip at 50 KB,
// 300 KB, 5 MB and 20 MB as sent, gzip and identity sent chunked, deflate — ends with
// every page fetched once and archived byte for byte: each response record's payload is
// the body as sent (content coding kept, transfer coding removed), under the head as
// received, and every record reads back with warccheck. A gzip body whose base64 passed
// the 64 KiB NATS header limit used to stall the crawl instead.
func TestArchiveCodedPages(t *testing.T) {
	t.Parallel()
	site, dir := codedCrawl(t)
	a, err := warccheck.Check(dir)
	if err != nil {
		t.Fatalf("the archive does not read back:\n%v", err)
	}
	captures := map[string][]*warccheck.Record{}
	for _, c := range a.Captures() {
		captures[c.Get("WARC-Target-URI")] = append(captures[c.Get("WARC-Target-URI")], c)
	}
	for _, path := range site.Paths() {
		t.Run(path[1:], func(t *testing.T) {
			cs := captures[site.Origin()+path]
			if len(cs) != 1 || cs[0].Get("WARC-Type") != "response" {
				t.Fatalf("%d captures, want one response record", len(cs))
			}
			c := cs[0]
			if c.Get("WARC-Truncated") != "" {
				t.Errorf("WARC-Truncated: %s", c.Get("WARC-Truncated"))
			}
			resp, err := c.Response()
			if err != nil {
				t.Fatal(err)
			}
			pg := site.Page(path)
			if got := resp.Header.Get("Content-Encoding"); got != pg.Coding {
				t.Errorf("head says Content-Encoding %q, the site sent %q", got, pg.Coding)
			}
			if chunked := len(resp.TransferEncoding) > 0 && resp.TransferEncoding[0] == "chunked"; chunked != pg.Chunked {
				t.Errorf("head says chunked %v, the site sent chunked %v", chunked, pg.Chunked)
			}
			_, payload, err := c.HTTP()
			if err != nil {
				t.Fatal(err)
			}
			if want := site.Wire(path); !bytes.Equal(payload, want) {
				t.Errorf("payload of %d octets is not the %d the site sent", len(payload), len(want))
			}
			t.Logf("%d octets as sent (%d decoded), archived byte for byte", len(payload), site.DecodedSize(path))
		})
	}
}
