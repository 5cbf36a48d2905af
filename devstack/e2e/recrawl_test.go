package e2e

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/trawl/trawl/devstack/stack"
	"github.com/trawl/trawl/devstack/synthweb"
	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/testwait"
	"github.com/trawl/trawl/shared/topology"
)

// recrawlMin is the adaptive mode's floor in this test: the changing page, which changes
// faster, is refetched this often once its interval has shrunk.
const recrawlMin = time.Second

// In adaptive mode the pipeline keeps fetching a site: its changing page more often than
// its static ones, with validators that the site's 304s answer, a page that ignores them
// judged by its text, and no page fetched sooner than TRAWL_RECRAWL_MIN after its last
// fetch or closer to another request than the host's gap. Sitemaps are on in adaptive
// mode by default: the one robots.txt names is fetched, and fetched again, and the page
// only it lists is crawled.
func TestRecrawlAdaptive(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	site, err := synthweb.StartRecrawlSite(ctx, synthweb.RecrawlConfig{Change: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { site.Close() })
	env := testEnv()
	vars := env.vars()
	vars["TRAWL_RECRAWL"] = "adaptive"
	vars["TRAWL_RECRAWL_MIN"] = recrawlMin.String()
	vars["TRAWL_RECRAWL_DEFAULT"] = "4s"
	vars["TRAWL_RECRAWL_MAX"] = "30s"
	st := startStack(t, ctx, stack.Options{Dir: t.TempDir(), Env: vars})
	if err := st.Seed(ctx, site.Seeds()); err != nil {
		t.Fatal(err)
	}

	// With a first interval of 4s the static pages are fetched again after 4, 6 and 9 s
	// more (×1.5 while unchanged): 4 fetches take about 20 s, and by then the changing
	// page, at 4, 2, 1, 1, … s (halved on every change, down to the floor), has been
	// fetched over a dozen times.
	fetches := func(reqs []synthweb.RecrawlRequest) map[string][]synthweb.RecrawlRequest {
		by := map[string][]synthweb.RecrawlRequest{}
		for _, q := range reqs {
			by[q.Path] = append(by[q.Path], q)
		}
		return by
	}
	testwait.Eventually(t, 60*time.Second, "static pages fetched 4 times", func() bool {
		return len(fetches(site.Requests())[synthweb.RecrawlStatic]) >= 4
	})
	reqs := site.Requests()
	by := fetches(reqs)
	counts := map[string]int{}
	for _, p := range synthweb.RecrawlPaths {
		counts[p] = len(by[p])
	}
	t.Logf("fetches by path: %v", counts)

	if n := len(by[synthweb.RecrawlListed]); n < 1 {
		t.Errorf("%s, listed only in the sitemap robots.txt names, fetched %d times, want at least once", synthweb.RecrawlListed, n)
	}
	if n := len(by[synthweb.RecrawlSitemap]); n < 2 {
		t.Errorf("the sitemap was fetched %d times, want it recrawled like a page", n)
	}
	if c, s := counts[synthweb.RecrawlChanging], counts[synthweb.RecrawlStatic]; c < s+3 {
		t.Errorf("the changing page was fetched %d times, the static one %d: want the changing page clearly more often", c, s)
	}
	if c, s := counts[synthweb.RecrawlChanging], counts[synthweb.RecrawlIgnores]; c < s+3 {
		t.Errorf("the page that ignores validators (its text the same but for a stamp) was fetched %d times, the changing one %d: its text must count as unchanged", s, c)
	}
	for _, tc := range []struct {
		path string
		sent func(synthweb.RecrawlRequest) bool
	}{
		{synthweb.RecrawlETag, func(q synthweb.RecrawlRequest) bool { return q.IfNoneMatch == `"etag-1"` }},
		{synthweb.RecrawlLastModified, func(q synthweb.RecrawlRequest) bool { return q.IfModifiedSince != "" }},
	} {
		qs := by[tc.path]
		if len(qs) < 2 {
			t.Errorf("%s fetched %d times, want a recrawl", tc.path, len(qs))
			continue
		}
		if q := qs[0]; q.Status != http.StatusOK || q.IfNoneMatch != "" || q.IfModifiedSince != "" {
			t.Errorf("%s first fetch: %+v, want a plain 200", tc.path, q)
		}
		for _, q := range qs[1:] {
			if !tc.sent(q) || q.Status != http.StatusNotModified {
				t.Errorf("%s recrawl at %s: If-None-Match %q If-Modified-Since %q status %d, want the validator sent and a 304", tc.path, q.Start.Format(time.TimeOnly), q.IfNoneMatch, q.IfModifiedSince, q.Status)
			}
		}
	}
	for _, q := range by[synthweb.RecrawlIgnores][1:] {
		if q.IfNoneMatch == "" || q.Status != http.StatusOK {
			t.Errorf("%s recrawl: If-None-Match %q status %d, want the ETag sent and ignored", q.Path, q.IfNoneMatch, q.Status)
		}
	}

	// Politeness holds as in a one-shot crawl, and no URL comes back before the floor.
	plain := make([]synthweb.Request, len(reqs))
	for i, q := range reqs {
		plain[i] = q.Request
	}
	for _, v := range synthweb.Overlaps(plain) {
		t.Errorf("politeness: overlapping requests: %s", v)
	}
	for _, v := range synthweb.Gaps(plain, func(string) time.Duration { return env.MinDelay }) {
		t.Errorf("politeness: requests too close: %s", v)
	}
	for path, qs := range by {
		for i := 1; i < len(qs); i++ {
			if gap := qs[i].Start.Sub(qs[i-1].Start); gap < recrawlMin && path != "/robots.txt" {
				t.Errorf("%s fetched %s after its last fetch, below TRAWL_RECRAWL_MIN (%s)", path, gap, recrawlMin)
			}
		}
	}

	// Every 304 reached crawl.docs as an unchanged event.
	unchanged := countUnchanged(t, ctx, st.JetStream())
	want := counts[synthweb.RecrawlETag] - 1 + counts[synthweb.RecrawlLastModified] - 1
	if unchanged[http.StatusNotModified] < want {
		t.Errorf("crawl.docs holds %d unchanged events for 304s, want at least %d (%v)", unchanged[http.StatusNotModified], want, unchanged)
	}
}

// countUnchanged counts the unchanged events in crawl.docs by status.
func countUnchanged(t *testing.T, ctx context.Context, js jetstream.JetStream) map[int]int {
	t.Helper()
	s, err := js.Stream(ctx, topology.StreamDocs)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cons, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[int]int{}
	for n := uint64(0); n < info.State.Msgs; {
		mb, err := cons.Fetch(500, jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		got := 0
		for m := range mb.Messages() {
			got++
			var d crawlmsg.Document
			if err := crawlmsg.Unmarshal(m.Data(), &d); err != nil {
				t.Fatal(fmt.Errorf("crawl.docs: %w", err))
			}
			if d.Unchanged {
				out[d.Status]++
			}
		}
		if got == 0 {
			t.Fatalf("read %d of %d documents", n, info.State.Msgs)
		}
		n += uint64(got)
	}
	return out
}
