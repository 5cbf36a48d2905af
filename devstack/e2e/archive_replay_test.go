//go:build replay

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"golang.org/x/net/html"

	"github.com/trawl/trawl/devstack/chromiumproc"
	"github.com/trawl/trawl/devstack/stack"
	"github.com/trawl/trawl/devstack/warccheck"
	"github.com/trawl/trawl/shared/contentcoding"
	"github.com/trawl/trawl/shared/wacz"
)

// replayWebDir is where `make archive-test` unpacks ReplayWeb.page's npm package.
const replayWebDir = "../replayweb/package"

// TestWACZReplay crawls the synthetic web with the archiver, packages the sealed files as
// WACZ (shared/wacz, as `trawlctl archive wacz` does), checks the package entry by entry,
// and replays it for real: ReplayWeb.page (Webrecorder's player, its npm package served
// here from 127.0.0.1, where a service worker may run) in headless Chromium loads the
// WACZ and must show a crawled page as the web served it: the title, heading and opening
// words of its first paragraph in the archived response, read by warccheck (a reader that
// shares no code with the writer or the packager). It runs under `make archive-test`,
// which installs node, npm, chromium and the package first.
func TestWACZReplay(t *testing.T) {
	ui := filepath.Join(replayWebDir, "ui.js")
	if _, err := os.Stat(ui); err != nil {
		t.Fatalf("ReplayWeb.page is not unpacked in devstack/replayweb: run `make archive-test` (%v)", err)
	}
	env := testEnv()
	dir := filepath.Join(t.TempDir(), "warc")
	web := testWeb()
	web.Hosts = 4
	r := crawl(t, web, env, stack.Options{Env: map[string]string{
		"TRAWL_ARCHIVE_DIR":      dir,
		"TRAWL_ARCHIVE_MAX_SIZE": "128KiB", // several files, so the index is a merge
	}}, nil)
	checkInvariants(t, r, env, 0)
	sealArchive(t, r.stack)

	warcs, err := wacz.SealedWARCs(dir)
	if err != nil || len(warcs) < 2 {
		t.Fatalf("WARC files %v (%v): want several", warcs, err)
	}
	pkg := filepath.Join(t.TempDir(), "crawl.wacz")
	sum, err := wacz.BuildFile(context.Background(), pkg, warcs, wacz.Options{Software: "Trawl test"})
	if err != nil {
		t.Fatal(err)
	}
	if err := wacz.Verify(pkg); err != nil {
		t.Fatalf("the package does not verify:\n%v", err)
	}

	// The page to replay: the first seed, as the archive holds it.
	seed := r.web.Seeds()[0]
	want := archivedPage(t, dir, seed)
	var listed *wacz.Page
	for i, p := range sum.Pages {
		if p.URL == seed {
			listed = &sum.Pages[i]
		}
	}
	if listed == nil || listed.Title != want.title {
		t.Fatalf("pages.jsonl lists %+v for the seed %s; want its title %q", listed, seed, want.title)
	}
	t.Logf("%d WARC files, %d index lines, %d pages; replaying %s (%q)", len(sum.WARCs), sum.Records, len(sum.Pages), seed, want.title)

	base := serveReplay(t, pkg, seed)
	got := replayInChromium(t, base, want)
	t.Logf("replayed %s: title %q, h1 %q", got.Href, got.Title, got.H1)

	// A page archived as an identical-payload revisit of another URL's capture must replay
	// with the original's content: the player resolves the revisit through the index.
	copyURL, orig := htmlRevisit(t, dir)
	want = archivedPage(t, dir, orig)
	got = replayInChromium(t, serveReplay(t, pkg, copyURL), want)
	t.Logf("replayed the revisit %s of %s: title %q", got.Href, orig, got.Title)
}

// htmlRevisit is a URL archived as an identical-payload-digest revisit of a page of
// another URL, and that URL.
func htmlRevisit(t *testing.T, dir string) (url, original string) {
	t.Helper()
	a, err := warccheck.Check(dir)
	if err != nil {
		t.Fatalf("the archive does not read back:\n%v", err)
	}
	html := map[string]bool{}
	for _, c := range a.Captures() {
		if c.Get("WARC-Type") != "response" {
			continue
		}
		if resp, err := c.Response(); err == nil && strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
			html[c.Get("WARC-Target-URI")] = true
		}
	}
	for _, c := range a.Captures() {
		ref := c.Get("WARC-Refers-To-Target-URI")
		if c.Get("WARC-Type") == "revisit" && strings.HasSuffix(c.Get("WARC-Profile"), "/identical-payload-digest") &&
			ref != c.Get("WARC-Target-URI") && html[ref] {
			return c.Get("WARC-Target-URI"), ref
		}
	}
	t.Fatalf("no page is archived as a revisit of another URL's page (the duplicates host serves copies)")
	return "", ""
}

type pageText struct{ title, h1, para string }

// archivedPage is the title, first heading and first paragraph's opening words of the
// response archived for url.
func archivedPage(t *testing.T, dir, url string) pageText {
	t.Helper()
	a, err := warccheck.Check(dir)
	if err != nil {
		t.Fatalf("the archive does not read back:\n%v", err)
	}
	for _, c := range a.Captures() {
		if c.Get("WARC-Type") != "response" || c.Get("WARC-Target-URI") != url {
			continue
		}
		resp, err := c.Response()
		if err != nil {
			t.Fatal(err)
		}
		_, payload, err := c.HTTP()
		if err != nil {
			t.Fatal(err)
		}
		body, err := contentcoding.Read(bytes.NewReader(payload), resp.Header.Get("Content-Encoding"), 64<<20)
		if err != nil {
			t.Fatal(err)
		}
		doc, err := html.Parse(bytes.NewReader(body.Content))
		if err != nil {
			t.Fatal(err)
		}
		var p pageText
		var walk func(*html.Node)
		walk = func(n *html.Node) {
			if n.Type == html.ElementNode {
				text := func() string { return strings.Join(strings.Fields(nodeText(n)), " ") }
				switch {
				case n.Data == "title" && p.title == "":
					p.title = text()
				case n.Data == "h1" && p.h1 == "":
					p.h1 = text()
				case n.Data == "p" && p.para == "":
					words := strings.Fields(text())
					p.para = strings.Join(words[:min(8, len(words))], " ")
				}
			}
			for c := n.FirstChild; c != nil; c = c.NextSibling {
				walk(c)
			}
		}
		walk(doc)
		if p.title == "" || p.h1 == "" || p.para == "" {
			t.Fatalf("the archived %s has no title, h1 or paragraph: %+v", url, p)
		}
		return p
	}
	t.Fatalf("no response record for %s", url)
	return pageText{}
}

func nodeText(n *html.Node) string {
	var b strings.Builder
	var walk func(*html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.TextNode {
			b.WriteString(n.Data)
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(n)
	return b.String()
}

// serveReplay serves ReplayWeb.page's embedding as its documentation lays it out — the
// page with <replay-web-page> and ui.js, the service worker at replay/sw.js (its scope is
// replay/) — and the package, with range requests (http.ServeFile), which is how the
// player reads a WACZ: central directory first, then each record by its offset.
func serveReplay(t *testing.T, pkg, url string) string {
	t.Helper()
	mux := http.NewServeMux()
	page := fmt.Sprintf(`<!doctype html><html><head><script src="/ui.js"></script></head><body>`+
		`<replay-web-page style="height:800px;display:block" source="/crawl.wacz" url="%s" embed="replayonly"></replay-web-page></body></html>`,
		html.EscapeString(url))
	mux.HandleFunc("/{$}", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprint(w, page)
	})
	mux.HandleFunc("/ui.js", func(w http.ResponseWriter, r *http.Request) {
		http.ServeFile(w, r, filepath.Join(replayWebDir, "ui.js"))
	})
	mux.HandleFunc("/replay/sw.js", func(w http.ResponseWriter, r *http.Request) {
		http.ServeFile(w, r, filepath.Join(replayWebDir, "sw.js"))
	})
	mux.HandleFunc("/crawl.wacz", func(w http.ResponseWriter, r *http.Request) {
		http.ServeFile(w, r, pkg)
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return "http://" + ln.Addr().String() + "/"
}

// missedWorker reports whether a document under the player is the server's own answer to
// /replay/, which only the player's service worker can serve.
func missedWorker(docs []replayedDoc) bool {
	for _, d := range docs {
		if strings.Contains(d.Href, "/replay/") && strings.TrimSpace(d.Text) == "404 page not found" {
			return true
		}
	}
	return false
}

// replayedDoc is one document found under the player.
type replayedDoc struct {
	Href  string `json:"href"`
	Title string `json:"title"`
	H1    string `json:"h1"`
	Text  string `json:"text"`
}

// findDocs walks from the page into every shadow root and same-origin iframe (the player
// nests the replayed page in iframes inside its components' shadow roots) and lists the
// documents found.
const findDocs = `(() => {
  const out = [];
  const seen = new Set();
  const visitDoc = (doc) => {
    if (!doc || seen.has(doc)) return;
    seen.add(doc);
    try {
      const h1 = doc.querySelector("h1");
      out.push({href: String(doc.location && doc.location.href), title: doc.title || "",
        h1: h1 ? h1.textContent : "", text: doc.body ? doc.body.innerText || doc.body.textContent || "" : ""});
    } catch (e) { return; }
    visitRoot(doc);
  };
  const visitRoot = (root) => {
    for (const el of root.querySelectorAll("*")) {
      if (el.shadowRoot) visitRoot(el.shadowRoot);
      if (el.tagName === "IFRAME") {
        try { visitDoc(el.contentDocument); } catch (e) {}
      }
    }
  };
  visitDoc(document);
  return JSON.stringify(out);
})()`

// replayInChromium loads base in headless Chromium and polls the documents under the
// player until one is the replayed page (its URL names the page's, under replay/) with
// the archived title, heading and paragraph; it fails naming what it saw last.
func replayInChromium(t *testing.T, base string, want pageText) replayedDoc {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	bctx, stop := chromiumproc.Start(t, ctx)
	defer stop()
	if err := chromedp.Do(bctx, chromedp.Navigate(base)); err != nil {
		t.Fatalf("chromium: load %s: %v", base, err)
	}
	var last []replayedDoc
	deadline := time.Now().Add(2 * time.Minute)
	reloads := 0
	for {
		raw, err := chromedp.Run(bctx, chromedp.Evaluate[string](findDocs))
		if err != nil {
			t.Fatalf("chromium: walk the player's documents: %v", err)
		}
		last = nil
		if err := json.Unmarshal([]byte(raw), &last); err != nil {
			t.Fatalf("the documents walked: %v (%s)", err, raw)
		}
		for _, d := range last {
			if strings.Contains(d.Href, "/replay/") && strings.TrimSpace(d.Title) == want.title &&
				strings.Join(strings.Fields(d.H1), " ") == want.h1 &&
				strings.Contains(strings.Join(strings.Fields(d.Text), " "), want.para) {
				return d
			}
		}
		if time.Now().After(deadline) {
			break
		}
		// The player's frame asked this server for /replay/ before its service worker
		// controlled the page (a browser starting on a new profile can be that slow): the
		// frame stays on the server's 404 until the page is loaded again, as a user would.
		if missedWorker(last) && reloads < 3 {
			reloads++
			t.Logf("the player's frame reached the server, not its service worker; loading %s again", base)
			if err := chromedp.Do(bctx, chromedp.Navigate(base)); err != nil {
				t.Fatalf("chromium: load %s again: %v", base, err)
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("chromium: %v", ctx.Err())
		case <-time.After(500 * time.Millisecond): // polling the browser's DOM; nothing to wait on
		}
	}
	var b strings.Builder
	for _, d := range last {
		fmt.Fprintf(&b, "\n  %s title %q h1 %q text %.200q", d.Href, d.Title, d.H1, d.Text)
	}
	t.Fatalf("ReplayWeb.page did not show the archived page (title %q, h1 %q, %q) within 2 minutes; documents under the player:%s",
		want.title, want.h1, want.para, b.String())
	return replayedDoc{}
}
