package itest

import (
	"net/http"
	"sync"
	"testing"

	"github.com/trawl/trawl/services/fetcher/internal/fetch"
	"github.com/trawl/trawl/shared/crawlmsg"
)

// Each kind of URL is asked for with its own Accept header: a page requisite takes
// anything, as a browser's request for an image or a style sheet does (a server that
// chooses by Accept would otherwise send an HTML page about the image), a sitemap asks for
// XML, a page for HTML.
func TestAcceptByKind(t *testing.T) {
	t.Parallel()
	st := newStack(t)
	var mu sync.Mutex
	got := map[string]string{}
	record := func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got[r.URL.Path] = r.Header.Get("Accept")
		mu.Unlock()
		w.Header().Set("Content-Type", "text/plain")
		_, _ = w.Write([]byte("ok"))
	}
	s := newSite(t, map[string]http.HandlerFunc{"/robots.txt": text(robotsTxt), "/page": record, "/img.png": record, "/sitemap.xml": record})
	st.start(st.config(nil), "a")
	// robots.txt first, so that each task below makes its own request.
	warm := task(s.URL + "/page")
	st.publishTask(warm)
	st.outcome(warm.Lease)
	for _, tc := range []struct {
		path string
		kind crawlmsg.Kind
		want string
	}{
		{"/page", crawlmsg.KindPage, fetch.AcceptPage},
		{"/img.png", crawlmsg.KindEmbed, fetch.AcceptAny},
		{"/sitemap.xml", crawlmsg.KindSitemap, fetch.AcceptSitemap},
	} {
		t.Run(string(tc.kind)+tc.path, func(t *testing.T) {
			tk := task(s.URL + tc.path)
			tk.Kind = tc.kind
			st.publishTask(tk)
			if o := st.outcome(tk.Lease); !o.Requested {
				t.Fatalf("outcome %s: no request made", o.Kind)
			}
			mu.Lock()
			defer mu.Unlock()
			if got[tc.path] != tc.want {
				t.Errorf("Accept %q, want %q", got[tc.path], tc.want)
			}
		})
	}
}
