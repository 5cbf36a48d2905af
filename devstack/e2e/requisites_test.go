package e2e

import (
	"bytes"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/trawl/trawl/devstack/stack"
	"github.com/trawl/trawl/devstack/synthweb"
	"github.com/trawl/trawl/devstack/warccheck"
)

// requisitesWeb is a small web whose home pages embed requisites (a style sheet importing
// another and loading an image and a font, an icon, a script, an image, and an image
// robots.txt forbids), crawled to depth 0: the seeds and, if the crawler fetches them,
// their requisites.
func requisitesWeb(fetched bool) (synthweb.Config, crawlEnv) {
	c := synthweb.DefaultConfig()
	c.Hosts, c.PagesPerHost, c.Special = 3, 4, false
	c.Requisites, c.FetchRequisites = true, fetched
	env := testEnv()
	env.MaxDepth = 0
	return c, env
}

// With an archiver running, TRAWL_EMBEDS=auto turns requisites on: at TRAWL_MAX_DEPTH=0
// every seed's requisites are fetched once — the style sheet's @import and url() image and
// font too, the image its import loads (a third embed hop) not, nor the one robots.txt
// forbids (checkInvariants reads the web's request log against Expected) — and each is in
// the WARC files with the content type and octets the web served.
func TestArchiveRequisites(t *testing.T) {
	t.Parallel()
	wcfg, env := requisitesWeb(true)
	dir := filepath.Join(t.TempDir(), "warc")
	r := crawl(t, wcfg, env, stack.Options{Env: map[string]string{"TRAWL_ARCHIVE_DIR": dir}}, nil)
	checkInvariants(t, r, env, 0)
	sealArchive(t, r.stack)
	a, err := warccheck.Check(dir)
	if err != nil {
		t.Fatalf("the archive does not read back:\n%v", err)
	}
	captures := map[string]*warccheck.Record{}
	for _, c := range a.Captures() {
		captures[c.Get("WARC-Target-URI")] = c
	}
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	exp := r.web.Expected(env.MaxDepth)
	archived := 0
	for u, hops := range r.web.Requisites() {
		c := captures[u]
		if hops > synthweb.MaxEmbedHops || !exp.Fetch[u] {
			if c != nil {
				t.Errorf("%s archived: it is %d embed hops from its page or forbidden", u, hops)
			}
			continue
		}
		// Every home serves the same assets: all but the first of each are revisits,
		// whose payload is their original's.
		orig := c
		if c != nil && c.Get("WARC-Type") == "revisit" && strings.HasSuffix(c.Get("WARC-Profile"), "/identical-payload-digest") {
			orig = captures[c.Get("WARC-Refers-To-Target-URI")]
		}
		if c == nil || orig == nil || orig.Get("WARC-Type") != "response" {
			t.Errorf("%s (%d embed hops) not archived as a response or a revisit of one", u, hops)
			continue
		}
		resp, err := c.Response()
		if err != nil {
			t.Errorf("%s: %v", u, err)
			continue
		}
		_, payload, err := orig.HTTP()
		if err != nil {
			t.Errorf("%s: %v", u, err)
			continue
		}
		served, err := client.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := readAll(served)
		if ct := resp.Header.Get("Content-Type"); ct != served.Header.Get("Content-Type") || strings.HasPrefix(ct, "text/html") {
			t.Errorf("%s archived as %q, served as %q", u, ct, served.Header.Get("Content-Type"))
		}
		if !bytes.Equal(payload, body) {
			t.Errorf("%s: archived payload differs from what the web serves", u)
		}
		archived++
	}
	// Three homes, each with an icon, a script, an image, two sheets, an image and a font.
	if archived != 3*7 {
		t.Errorf("%d requisites archived, want 21", archived)
	}
}

// Without an archiver, TRAWL_EMBEDS=auto leaves requisites alone: the same crawl requests
// the seeds and nothing they embed (Expected forbids every requisite).
func TestRequisitesNotFetchedWithoutArchiver(t *testing.T) {
	t.Parallel()
	wcfg, env := requisitesWeb(false)
	r := crawl(t, wcfg, env, stack.Options{Env: map[string]string{"TRAWL_ARCHIVE_DIR": ""}}, nil)
	checkInvariants(t, r, env, 0)
	for _, q := range r.reqs {
		if q.Path != "/robots.txt" && q.Path != "/" {
			t.Errorf("requested %s%s with no archiver", q.Host, q.Path)
		}
	}
}

func readAll(resp *http.Response) ([]byte, error) {
	defer resp.Body.Close()
	var b bytes.Buffer
	_, err := b.ReadFrom(resp.Body)
	return b.Bytes(), err
}
