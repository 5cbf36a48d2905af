package itest

import (
	"context"
	"maps"
	"net"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/frontierkeys"
	"github.com/trawl/trawl/shared/policy"
	"github.com/trawl/trawl/shared/politeness"
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

// TestRobotsThenURLUnderHostPolicy: whether a task goes on from robots.txt to its URL is
// decided by the host's own gap, as the frontier computes it: the process-wide settings
// under the limits the host's site policy sets in its shard's policy table (written here
// as the scheduler writes it). A rule's minimum delay keeps the page for its own task even
// with TRAWL_MIN_DELAY=0, and a rule may as well shorten the gap (a minimum delay of 0, a
// Crawl-delay capped at 0). Judged from the site's request log.
func TestRobotsThenURLUnderHostPolicy(t *testing.T) {
	t.Parallel()
	noDelay := map[string]string{"TRAWL_MIN_DELAY": "0s", "TRAWL_DELAY_FACTOR": "0"}
	dur := func(d time.Duration) *policy.Duration { p := policy.Duration(d); return &p }
	host := func(h string, r policy.Rule) []policy.Rule {
		r.Scope = policy.Scope{Kind: policy.KindHost, Value: h}
		return []policy.Rule{r}
	}
	for _, tc := range []struct {
		name   string
		env    map[string]string
		robots string
		// The rules the table is resolved from.
		table    []policy.Rule
		wantSeen []string
	}{
		{name: "host rule min_delay 10s: the page waits", env: noDelay, robots: "User-agent: *\n",
			table:    host("b.test", policy.Rule{MinDelay: dur(10 * time.Second)}),
			wantSeen: []string{"/robots.txt"}},
		{name: "domain rule min_delay 10s: the page waits", env: noDelay, robots: "User-agent: *\n",
			table:    []policy.Rule{{Scope: policy.Scope{Kind: policy.KindDomain, Value: "b.test"}, MinDelay: dur(10 * time.Second)}},
			wantSeen: []string{"/robots.txt"}},
		{name: "a rule of another host: the page follows", env: noDelay, robots: "User-agent: *\n",
			table:    host("c.test", policy.Rule{MinDelay: dur(10 * time.Second)}),
			wantSeen: []string{"/robots.txt", "/page"}},
		{name: "host rule min_delay 0 under TRAWL_MIN_DELAY=10s: the page follows",
			env: map[string]string{"TRAWL_MIN_DELAY": "10s", "TRAWL_DELAY_FACTOR": "0"}, robots: "User-agent: *\n",
			table:    host("b.test", policy.Rule{MinDelay: dur(0)}),
			wantSeen: []string{"/robots.txt", "/page"}},
		{name: "host rule caps Crawl-delay at 0: the page follows", env: noDelay, robots: "User-agent: *\nCrawl-delay: 10\n",
			table:    host("b.test", policy.Rule{CrawlDelay: &policy.CrawlDelay{}}),
			wantSeen: []string{"/robots.txt", "/page"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			st := newStack(t)
			s := newSite(t, map[string]http.HandlerFunc{"/robots.txt": text(tc.robots), "/page": html(pageHTML)})
			_, port, _ := net.SplitHostPort(s.Listener.Addr().String())
			env := map[string]string{"TRAWL_RESOLVE": "b.test=127.0.0.1"}
			maps.Copy(env, tc.env)
			st.start(st.config(env), "a")
			ctx, cancel := context.WithTimeout(context.Background(), waitFor)
			defer cancel()
			stored := make([]policy.Stored, len(tc.table))
			for i, r := range tc.table {
				stored[i] = policy.Stored{Rule: r}
			}
			set, err := policy.Compile(stored, 1)
			if err != nil {
				t.Fatal(err)
			}
			// The host's limits as the scheduler stores them for an active host.
			if res := politeness.Resolve(set); res.Gen() != "" {
				k := frontierkeys.ForShard(st.common.RedisPrefix, 0, st.common.Shards)
				if err := st.rdb.HSet(ctx, k.Policy(), frontierkeys.PolicyGenField, res.Gen()).Err(); err != nil {
					t.Fatal(err)
				}
				if err := st.rdb.HSet(ctx, k.Host("b.test"), frontierkeys.HostLim, res.Value("b.test")).Err(); err != nil {
					t.Fatal(err)
				}
			}
			tk := task("http://b.test:" + port + "/page")
			st.publishTask(tk)
			st.outcome(tk.Lease)
			if got := s.requests(); !slices.Equal(got, tc.wantSeen) {
				t.Fatalf("site saw %v, want %v", got, tc.wantSeen)
			}
		})
	}
}
