package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/trawl/trawl/devstack/natsembed"
	"github.com/trawl/trawl/devstack/stack"
	"github.com/trawl/trawl/devstack/warccheck"
	"github.com/trawl/trawl/shared/topology"
)

// TestArchiveArchiverKilled crawls the synthetic web with the archiver writing small WARC
// files, SIGKILLs the archiver mid-crawl and starts it again, and then reads every file
// back with warccheck (a reader that shares no code with the writer): every record
// parses, every digest verifies, every CDXJ line points at its record, every page the web
// served is archived once per response with the octets it served, and nothing else is.
func TestArchiveArchiverKilled(t *testing.T) {
	t.Parallel()
	env := testEnv()
	dir := filepath.Join(t.TempDir(), "warc")
	r := crawl(t, testWeb(), env, stack.Options{Env: map[string]string{
		"TRAWL_ARCHIVE_DIR":      dir,
		"TRAWL_ARCHIVE_MAX_SIZE": "64KiB", // many files, so the kill meets rotation too
		"TRAWL_ARCHIVE_BATCH":    "4",
	}}, func(st *stack.Stack) {
		waitFetched(t, st, 60)
		p := st.Proc(stack.Archiver, 0)
		if err := p.Kill(); err != nil {
			t.Fatal(err)
		}
		waitFetched(t, st, 120) // pages wait in CRAWL_PAGES for the archiver's consumer
		if err := p.Start(); err != nil {
			t.Fatal(err)
		}
		if err := st.WaitReady(context.Background(), p); err != nil {
			t.Fatal(err)
		}
	})
	checkInvariants(t, r, env, 0)
	sealArchive(t, r.stack)

	a, err := warccheck.Check(dir)
	if err != nil {
		t.Fatalf("the archive does not read back:\n%v", err)
	}
	if len(a.Files) < 2 {
		t.Errorf("%d files: want rotation at 64 KiB and a new file after the kill", len(a.Files))
	}
	captures := map[string][]*warccheck.Record{}
	for _, c := range a.Captures() {
		captures[c.Get("WARC-Target-URI")] = append(captures[c.Get("WARC-Target-URI")], c)
	}
	// Every response the web gave to a page request is one capture (a URL retried after a
	// 5xx has one per attempt).
	served := map[string][]int{} // URL → body octets of each response
	for _, q := range r.reqs {
		if q.Path == "/robots.txt" || q.Status == 0 {
			continue // robots.txt is the fetcher's, not a page; status 0: no response
		}
		url := r.web.Origin(q.Host) + q.Path
		served[url] = append(served[url], q.Bytes)
	}
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	compared := 0
	for url, sizes := range served {
		cs := captures[url]
		if len(cs) != len(sizes) {
			var where []string
			for _, c := range cs {
				where = append(where, fmt.Sprintf("%s@%d %s %s", c.File, c.Offset, c.Get("WARC-Record-ID"), c.Get("WARC-Date")))
			}
			t.Errorf("%s: %d captures of %d responses served, want one each: %v", url, len(cs), len(sizes), where)
			continue
		}
		if len(cs) != 1 {
			continue // the attempts of a retried URL are told apart by date only
		}
		c, n := cs[0], sizes[0]
		_, payload, err := c.HTTP()
		if err != nil {
			t.Errorf("%s: %v", url, err)
			continue
		}
		if c.Get("WARC-Type") == "response" && len(payload) != n {
			t.Errorf("%s: payload of %d octets, the web served %d", url, len(payload), n)
		}
		resp, err := c.Response()
		if err != nil || resp.StatusCode != http.StatusOK || c.Get("WARC-Type") != "response" {
			continue
		}
		// The synthetic web is deterministic: asked again, it serves the same octets.
		body, status, err := get(client, url)
		if err == nil && status == http.StatusOK {
			compared++
			if !bytes.Equal(payload, body) {
				t.Errorf("%s: archived payload differs from what the web serves", url)
			}
		}
	}
	for url := range captures {
		if _, ok := served[url]; !ok {
			t.Errorf("%s archived but never served", url)
		}
	}
	if compared == 0 {
		t.Error("no payload compared with the web")
	}
	t.Logf("%d files, %d captures, %d payloads compared with the web", len(a.Files), len(a.Captures()), compared)
}

func get(c *http.Client, url string) ([]byte, int, error) {
	resp, err := c.Get(url)
	if err != nil {
		return nil, 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return b, resp.StatusCode, err
}

// sealArchive waits until the archiver has acked every page of CRAWL_PAGES, then stops it,
// which seals the file being written.
func sealArchive(t *testing.T, st *stack.Stack) {
	t.Helper()
	natsembed.WaitSettled(t, st.JetStream(), topology.StreamPages, topology.ConsumerArchiver, time.Minute)
	// SIGTERM seals the file being written.
	if err := st.Proc(stack.Archiver, 0).Stop(15 * time.Second); err != nil {
		t.Fatal(err)
	}
}
