package itest

import (
	"net"
	"net/http"
	"slices"
	"testing"

	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/policy"
)

// TestNarrowedScopeEndsTasksWithoutRequest: a rule that narrows the scope (an exclude, a
// lower max_depth) set after a URL was queued keeps the fetcher from requesting it: the
// task ends out of scope, naming the rule, and the host sees no request for it. URLs the
// rule still admits are fetched.
func TestNarrowedScopeEndsTasksWithoutRequest(t *testing.T) {
	t.Parallel()
	st := newStack(t)
	s := newSiteOn(t, "127.0.0.1", map[string]http.HandlerFunc{
		"/robots.txt": text("User-agent: *\nAllow: /\n"),
		"/docs/a":     html(pageHTML), "/private/b": html(pageHTML), "/deep/c": html(pageHTML),
	})
	_, port, _ := net.SplitHostPort(s.Listener.Addr().String())
	in := st.start(st.config(map[string]string{
		"TRAWL_POLICY_POLL":  "100ms",
		"TRAWL_RESOLVE":      "b.test=127.0.0.1",
		"TRAWL_MIN_DELAY":    "0s",
		"TRAWL_DELAY_FACTOR": "0",
	}), "a")
	url := func(p string) string { return "http://b.test:" + port + p }
	depth := 3
	v := st.setRules(map[string]policy.Rule{"host:b.test": {Exclude: []string{"/private/"}, MaxDepth: &depth}})
	in.waitMetric(t, "trawl_fetcher_policy_version", float64(v))

	tests := []struct {
		name  string
		path  string
		depth int
		want  crawlmsg.OutcomeKind
	}{
		{"admitted", "/docs/a", 1, crawlmsg.OutcomeFetched},
		{"excluded", "/private/b", 1, crawlmsg.OutcomeOutOfScope},
		{"too deep", "/deep/c", 4, crawlmsg.OutcomeOutOfScope},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tk := task(url(tc.path))
			tk.Depth = tc.depth
			st.publishTask(tk)
			o := st.outcome(tk.Lease)
			if o.Kind == crawlmsg.OutcomeRobots {
				// The origin's robots.txt came first; the task comes back for its URL.
				tk = task(url(tc.path))
				tk.Depth = tc.depth
				st.publishTask(tk)
				o = st.outcome(tk.Lease)
			}
			if o.Kind != tc.want {
				t.Fatalf("outcome %+v, want %s", o, tc.want)
			}
			if tc.want == crawlmsg.OutcomeOutOfScope && (o.Requested || o.Error == "") {
				t.Errorf("outcome %+v, want no request and the rule named", o)
			}
			// The scheduler checks the answer again should its rules be newer.
			if tc.want == crawlmsg.OutcomeOutOfScope && (o.PolicyVersion != v || o.Depth != tc.depth) {
				t.Errorf("outcome names rules v%d and depth %d, want v%d and %d", o.PolicyVersion, o.Depth, v, tc.depth)
			}
		})
	}
	got := s.requests()
	if slices.Contains(got, "/private/b") || slices.Contains(got, "/deep/c") {
		t.Fatalf("the host saw %v, want no request for a URL out of the rule's scope", got)
	}
	if n := in.metric(t, "trawl_fetcher_policy_out_of_scope_total"); n != 2 {
		t.Errorf("trawl_fetcher_policy_out_of_scope_total = %v, want 2", n)
	}
}
