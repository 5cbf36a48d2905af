package itest

import (
	"bytes"
	"compress/gzip"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/trawl/trawl/shared/polite"
)

func gzipped(t testing.TB, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// A server that sends gzip whatever it is asked (objects stored gzipped behind S3 or
// CloudFront, nginx's gzip_static always): the renderer asks for no coding (but for
// robots.txt, asked for as every process asks), decodes what
// comes anyway under its body cap, and gives the page, and the shared cache, the decoded
// body; the exchange keeps the octets as received, with the head that describes them.
func TestRenderDecodesGzip(t *testing.T) {
	st := newStack(t)
	script := []byte(`document.getElementById('root').textContent = 'decoded by Trawl';` +
		`fetch('/bomb').then(r => r.arrayBuffer()).then(b => document.body.setAttribute('data-bomb', b.byteLength));`)
	gzScript := gzipped(t, script)
	// 4 MiB of zeros in a few KiB: decoded, it passes the renderer's 1 MiB body cap.
	gzBomb := gzipped(t, make([]byte, 4<<20))
	var mu sync.Mutex
	var asked []string // Accept-Encoding of each request
	always := func(ctype string, body []byte) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			asked = append(asked, r.URL.Path+" Accept-Encoding="+r.Header.Get("Accept-Encoding"))
			mu.Unlock()
			w.Header().Set("Content-Type", ctype)
			w.Header().Set("Content-Encoding", "gzip")
			w.Write(body)
		}
	}
	s := newSite(t, map[string]http.HandlerFunc{
		"a.test/robots.txt": always("text/plain", gzipped(t, []byte("User-agent: *\nDisallow: /private\n"))),
		"a.test/app.js":     always("text/javascript", gzScript),
		"a.test/bomb":       always("application/octet-stream", gzBomb),
	})
	st.start(st.config(map[string]string{"TRAWL_RESOLVE": resolve("a.test"),
		"TRAWL_RENDER_MAX_BODY": "1MiB", "TRAWL_RENDER_CACHE_MAX_ENTRY": "1MiB"}))
	shell := `<html><body><div id="root"></div><script src="/app.js"></script></body></html>`

	p := st.page(st.publishTask(s.url("a.test", "/"), shell))
	if p.Meta.Rendered == nil || p.Meta.Rendered.Failed != "" {
		t.Fatalf("page not rendered: %+v", p.Meta.Rendered)
	}
	dom := string(p.Body)
	for _, want := range []string{"decoded by Trawl", `data-bomb="1048576"`} {
		if !strings.Contains(dom, want) {
			t.Errorf("rendered DOM lacks %q:\n%s", want, dom)
		}
	}
	for _, e := range p.Meta.Rendered.Exchanges {
		switch e.URL {
		case s.url("a.test", "/app.js"):
			if !bytes.Equal(e.Body, gzScript) || !strings.Contains(string(e.Response), "Content-Encoding: gzip") {
				t.Errorf("app.js exchange: body %q under head %q, want the gzip octets as received under their Content-Encoding", e.Body, e.Response)
			}
		case s.url("a.test", "/bomb"):
			if !e.Truncated {
				t.Errorf("bomb exchange: %d octets not marked truncated; it decodes past the body cap", len(e.Body))
			}
		}
	}
	mu.Lock()
	for _, a := range asked {
		// robots.txt is asked for as a fetcher asks for it (polite.RobotsHeader).
		want := "Accept-Encoding=identity"
		if strings.HasPrefix(a, "/robots.txt ") {
			want = "Accept-Encoding=" + polite.AcceptEncoding
		}
		if !strings.HasSuffix(a, want) {
			t.Errorf("request %s: want %s", a, want)
		}
	}
	mu.Unlock()

	// Another page is served the script from the shared cache: the decoded body.
	p2 := st.page(st.publishTask(s.url("a.test", "/other"), shell))
	if !strings.Contains(string(p2.Body), "decoded by Trawl") {
		t.Errorf("second page, script from the cache: DOM lacks the script's text:\n%s", p2.Body)
	}
	if n := strings.Count(strings.Join(s.paths("a.test"), " "), "/app.js"); n != 1 {
		t.Errorf("a.test saw /app.js %d times over two pages, want once (cached): %v", n, s.paths("a.test"))
	}
}

// A 404 is an answer like a 200: remembered in the shared cache, so the pages of a site
// ask for a requisite it lacks (a script gone, its favicon) once, not once per page. Two
// pages render at once (two tabs), then two more on another renderer: the browser asks
// for a site's favicon once in its life, and another renderer's (or the browser
// restarted) asks again.
func TestRenderRemembersA404(t *testing.T) {
	st := newStack(t)
	s := newSite(t, map[string]http.HandlerFunc{
		"a.test/robots.txt": serve("text/plain", ""),
	})
	shell := `<html><head><link rel="icon" href="/favicon.ico"></head>` +
		`<body><p>page</p><script src="/gone.js"></script></body></html>`
	cfg := st.config(map[string]string{"TRAWL_RESOLVE": resolve("a.test"), "TRAWL_RENDER_TABS": "2"})
	for i, paths := range [][]string{{"/1", "/2"}, {"/3", "/4"}} {
		in := st.start(cfg)
		leases := map[string]string{}
		for _, path := range paths {
			leases[path] = st.publishTask(s.url("a.test", path), shell)
		}
		for _, path := range paths {
			p := st.page(leases[path])
			if p.Meta.Rendered == nil || p.Meta.Rendered.Failed != "" {
				t.Fatalf("page %s not rendered: %+v", path, p.Meta.Rendered)
			}
			for _, e := range p.Meta.Rendered.Exchanges {
				if i > 0 && e.Status == http.StatusNotFound && !e.Cached {
					t.Errorf("page %s: %s's 404 was fetched, want it from the cache", path, e.URL)
				}
			}
		}
		if err := in.Stop(); err != nil {
			t.Errorf("renderer Run: %v", err)
		}
	}
	seen := s.paths("a.test")
	for _, path := range []string{"/gone.js", "/favicon.ico"} {
		n := 0
		for _, p := range seen {
			if p == path {
				n++
			}
		}
		if n != 1 {
			t.Errorf("a.test saw %s %d times over four pages and two renderers, want once: %v", path, n, seen)
		}
	}
}
