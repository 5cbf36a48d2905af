package itest

import (
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/trawl/trawl/shared/crawlmsg"
)

// TestRobotsThenURL: a task whose origin has no robots.txt in the cache fetches it, and goes
// on to its own URL in the same task only when the politeness rule already allows the
// host's next request (no minimum delay, no Crawl-delay, and a delay factor whose multiple
// of robots.txt's response time has passed). Otherwise the URL is left to a later task, as
// before, and the site sees robots.txt alone.
func TestRobotsThenURL(t *testing.T) {
	noDelay := map[string]string{"TRAWL_MIN_DELAY": "0s", "TRAWL_DELAY_FACTOR": "0"}
	slowRobots := func(body string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			// A response time whose multiple (the delay factor) outlasts what the fetcher
			// does between the two requests.
			time.Sleep(40 * time.Millisecond)
			text(body)(w, r)
		}
	}
	for _, tc := range []struct {
		name   string
		env    map[string]string
		robots http.HandlerFunc
		path   string
		want   crawlmsg.OutcomeKind
		// wantSeen is what the site sees, in order.
		wantSeen []string
		// wantRobots: the outcome says robots.txt was fetched first (Outcome.Robots).
		wantRobots     bool
		wantCrawlDelay float64
	}{
		{name: "no delay: the page follows", env: noDelay, robots: text("User-agent: *\nDisallow: /private\n"),
			path: "/page", want: crawlmsg.OutcomeFetched, wantSeen: []string{"/robots.txt", "/page"}, wantRobots: true},
		{name: "no delay: a disallowed URL is decided without a request", env: noDelay, robots: text("User-agent: *\nDisallow: /private\n"),
			path: "/private/x", want: crawlmsg.OutcomeDisallowed, wantSeen: []string{"/robots.txt"}, wantRobots: true},
		{name: "minimum delay: the page waits for its own task", env: map[string]string{"TRAWL_MIN_DELAY": "100ms", "TRAWL_DELAY_FACTOR": "0"},
			robots: text("User-agent: *\n"), path: "/page", want: crawlmsg.OutcomeRobots, wantSeen: []string{"/robots.txt"}},
		{name: "Crawl-delay: the page waits for its own task", env: noDelay, robots: text("User-agent: *\nCrawl-delay: 1\n"),
			path: "/page", want: crawlmsg.OutcomeRobots, wantSeen: []string{"/robots.txt"}, wantCrawlDelay: 1},
		{name: "delay factor: the page waits for its own task", env: map[string]string{"TRAWL_MIN_DELAY": "0s", "TRAWL_DELAY_FACTOR": "5"},
			robots: slowRobots("User-agent: *\n"), path: "/page", want: crawlmsg.OutcomeRobots, wantSeen: []string{"/robots.txt"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := newStack(t)
			s := newSite(t, map[string]http.HandlerFunc{"/robots.txt": tc.robots, "/page": html(pageHTML)})
			in := st.start(st.config(tc.env), "a")
			tk := task(s.URL + tc.path)
			st.publishTask(tk)
			o := st.outcome(tk.Lease)
			if o.Kind != tc.want || o.Robots != tc.wantRobots || !o.Requested || o.StartedAt == 0 || o.CrawlDelay != tc.wantCrawlDelay {
				t.Fatalf("outcome %+v, want %s with robots=%v, requested, crawl-delay %v", o, tc.want, tc.wantRobots, tc.wantCrawlDelay)
			}
			if got := s.requests(); !slices.Equal(got, tc.wantSeen) {
				t.Fatalf("site saw %v, want %v", got, tc.wantSeen)
			}
			if tc.want == crawlmsg.OutcomeFetched {
				if p := st.page(tk.Lease); string(p.Body) != pageHTML || p.Meta.URL != tk.URL {
					t.Errorf("page %+v body %q", p.Meta, p.Body)
				}
			}
			want := 0.0
			if tc.wantRobots {
				want = 1
			}
			in.waitMetric(t, `trawl_fetcher_robots_then_url_total`, want)
		})
	}
}
