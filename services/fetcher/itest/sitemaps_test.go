package itest

import (
	"bytes"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/topology"
)

// waitDiscovered waits for the crawl.discovered message of id.
func (st *stack) waitDiscovered(t *testing.T, id string) (crawlmsg.DiscoveredBatch, bool) {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	for st.discovered[id].msgID == "" && time.Now().Before(deadline) {
		st.pollDiscovered()
	}
	d, ok := st.discovered[id]
	return d.v, ok
}

// With TRAWL_SITEMAPS=on a robots.txt fetch publishes the origin's sitemaps, before the
// task's outcome: the Sitemap lines (another host's included), or /sitemap.xml when there
// are none, as URLs of kind sitemap at depth 0 that may list the origin's URLs. With the
// default (auto, in a one-shot crawl) it publishes nothing. A sitemap fetched as a task
// keeps its kind and origin on its page, and a gzip file reaches the parser as the
// compressed octets the server sent.
func TestSitemapsFromRobots(t *testing.T) {
	t.Parallel()
	st := newStack(t)
	xml := []byte(`<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"><url><loc>http://x/</loc></url></urlset>`)
	gz := gzipOf(t, xml)
	maps := newSiteOn(t, "127.0.0.3", map[string]http.HandlerFunc{
		"/robots.txt": text("User-agent: *\nDisallow:\n"),
		"/a.xml.gz": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/gzip")
			w.Write(gz)
		},
	})
	named := newSiteOn(t, "127.0.0.2", map[string]http.HandlerFunc{
		"/robots.txt": text("User-agent: *\nDisallow: /x\nSitemap: /index.xml\nSitemap: " + maps.URL + "/a.xml.gz\n"),
	})
	none := newSite(t, map[string]http.HandlerFunc{})
	sm := func(u, under string) crawlmsg.Discovered {
		return crawlmsg.Discovered{URL: u, Via: crawlmsg.ViaSitemap, Kind: crawlmsg.KindSitemap, Under: under}
	}

	off := st.start(st.config(nil), "default")
	quiet := task(none.URL + "/deep/page")
	st.publishTask(quiet)
	if o := st.outcome(quiet.Lease); o.Kind != crawlmsg.OutcomeRobots {
		t.Fatalf("outcome %+v, want robots", o)
	}
	// Published before the outcome, so by now it would be stored.
	st.pollDiscovered()
	if d, ok := st.discovered[topology.SitemapsID(quiet.Lease)]; ok {
		t.Errorf("TRAWL_SITEMAPS=auto in a one-shot crawl published %+v", d.v)
	}
	off.stop(t)
	if _, err := st.rdb.Del(t.Context(), "itest:robots:"+none.URL).Result(); err != nil {
		t.Fatal(err)
	}
	st.start(st.config(map[string]string{"TRAWL_SITEMAPS": "on"}), "on")

	for _, tc := range []struct {
		name string
		s    *site
		want []crawlmsg.Discovered
	}{
		{"named by robots.txt", named, []crawlmsg.Discovered{sm(named.URL+"/index.xml", named.URL+"/"), sm(maps.URL+"/a.xml.gz", named.URL+"/")}},
		{"robots.txt names none", none, []crawlmsg.Discovered{sm(none.URL+"/sitemap.xml", none.URL+"/")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tk := task(tc.s.URL + "/deep/page")
			tk.Depth = 7
			st.publishTask(tk)
			if o := st.outcome(tk.Lease); o.Kind != crawlmsg.OutcomeRobots {
				t.Fatalf("outcome %+v, want robots", o)
			}
			d, ok := st.waitDiscovered(t, topology.SitemapsID(tk.Lease))
			if !ok || d.Source != tc.s.URL+"/robots.txt" || !reflect.DeepEqual(d.URLs, tc.want) {
				t.Fatalf("discovered %+v (found %v), want %+v", d, ok, tc.want)
			}
		})
	}

	// The gzipped sitemap on another host, as the frontier hands it out.
	tk := task(maps.URL + "/a.xml.gz")
	tk.Kind, tk.Under = crawlmsg.KindSitemap, named.URL+"/"
	st.publishTask(tk)
	if o := st.outcome(tk.Lease); o.Kind != crawlmsg.OutcomeRobots {
		t.Fatalf("outcome %+v, want robots", o)
	}
	tk.Lease = newLease()
	st.publishTask(tk)
	if o := st.outcome(tk.Lease); o.Kind != crawlmsg.OutcomeFetched || o.Status != 200 {
		t.Fatalf("outcome %+v, want fetched 200", o)
	}
	p := st.page(tk.Lease)
	if p.Meta.Kind != crawlmsg.KindSitemap || p.Meta.Under != named.URL+"/" || p.Meta.ContentType != "application/gzip" || !bytes.Equal(p.Body, gz) {
		t.Errorf("sitemap page kind %q under %q type %q body %d octets (gzip %v); want the task's kind and origin and the gzip octets",
			p.Meta.Kind, p.Meta.Under, p.Meta.ContentType, len(p.Body), bytes.HasPrefix(p.Body, []byte{0x1f, 0x8b}))
	}
	if got := maps.requests(); strings.Join(got, " ") != "/robots.txt /a.xml.gz" {
		t.Errorf("requests to the sitemap host %v", got)
	}
}
