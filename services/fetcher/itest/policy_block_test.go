package itest

import (
	"net"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/policy"
)

// TestBlockStopsQueuedTasks: a block set after tasks were dispatched stops their
// requests: the task already on a worker (fetching robots.txt, its page to follow) and
// the tasks queued behind it are answered parked, and the host sees no request after the
// block; lifting the block lets the next task through.
func TestBlockStopsQueuedTasks(t *testing.T) {
	st := newStack(t)
	hold := make(chan struct{})
	arrived := make(chan struct{}, 1)
	s := newSiteOn(t, "127.0.0.1", map[string]http.HandlerFunc{
		"/robots.txt": func(w http.ResponseWriter, r *http.Request) {
			select {
			case arrived <- struct{}{}:
				<-hold // the first robots.txt request waits for the test
			default:
			}
			text("User-agent: *\nAllow: /\n")(w, r)
		},
		"/page1": html(pageHTML), "/page2": html(pageHTML), "/page3": html(pageHTML), "/page4": html(pageHTML),
	})
	_, port, _ := net.SplitHostPort(s.Listener.Addr().String())
	const poll = 100 * time.Millisecond
	in := st.start(st.config(map[string]string{
		"TRAWL_POLICY_POLL": poll.String(),
		"TRAWL_RESOLVE":     "b.test=127.0.0.1",
		// No gap after robots.txt, so the first task goes on to its page at once; one
		// worker, so the other tasks wait in the queue behind it.
		"TRAWL_MIN_DELAY":         "0s",
		"TRAWL_DELAY_FACTOR":      "0",
		"TRAWL_FETCH_CONCURRENCY": "1",
		"TRAWL_TASK_BATCH":        "1",
	}), "a")
	url := func(p string) string { return "http://b.test:" + port + p }

	first := task(url("/page1"))
	st.publishTask(first)
	<-arrived // the first task is on the worker, its robots.txt request at the server
	queued := []crawlmsg.FetchTask{task(url("/page2")), task(url("/page3"))}
	for _, tk := range queued {
		st.publishTask(tk)
	}
	// The block, set as an operator sets it, is in force in the fetcher within one poll
	// and a load: only then is the task on the worker let go on to its page.
	set := time.Now()
	v := st.setRules(map[string]policy.Rule{"host:b.test": {Block: ptrTo(true)}})
	in.waitMetric(t, "trawl_fetcher_policy_version", float64(v))
	if took := time.Since(set); took > poll+time.Second {
		t.Errorf("the block took %s to reach the fetcher, want within one poll (%s) and a load", took, poll)
	}
	close(hold)

	// Each names the rules it was decided by, which the scheduler checks against its own.
	if o := st.outcome(first.Lease); o.Kind != crawlmsg.OutcomeParked || !o.Requested || o.PolicyVersion != v {
		t.Errorf("the task on the worker: %+v, want parked by rules v%d, its robots.txt request reported", o, v)
	}
	for _, tk := range queued {
		if o := st.outcome(tk.Lease); o.Kind != crawlmsg.OutcomeParked || o.Requested || o.PolicyVersion != v {
			t.Errorf("a queued task: %+v, want parked by rules v%d without a request", o, v)
		}
	}
	if got := s.requests(); !slices.Equal(got, []string{"/robots.txt"}) {
		t.Fatalf("the host saw %v after the block, want only the robots.txt request made before it", got)
	}
	if got := in.metric(t, `trawl_fetcher_policy_parked_total{what="page"}`); got != 3 {
		t.Errorf(`trawl_fetcher_policy_parked_total{what="page"} = %v, want 3`, got)
	}

	v = st.setRules(nil, "host:b.test")
	in.waitMetric(t, "trawl_fetcher_policy_version", float64(v))
	last := task(url("/page4"))
	st.publishTask(last)
	if o := st.outcome(last.Lease); o.Kind != crawlmsg.OutcomeFetched {
		t.Errorf("after the block was lifted: %+v, want fetched", o)
	}
}

// TestRobotsHopToBlockedHost: robots.txt redirecting to a host a site policy blocks ends
// the chain without a request there: the origin's robots.txt counts unreachable (the
// task's own URL is not blocked, so it is not parked).
func TestRobotsHopToBlockedHost(t *testing.T) {
	t.Parallel()
	st := newStack(t)
	var port string
	s := newSiteOn(t, "127.0.0.1", map[string]http.HandlerFunc{
		"/robots.txt": func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, "http://blocked.test:"+port+"/rules.txt", http.StatusFound)
		},
		"/rules.txt": text("User-agent: *\nAllow: /\n"),
	})
	_, port, _ = net.SplitHostPort(s.Listener.Addr().String())
	st.setRules(map[string]policy.Rule{"host:blocked.test": {Block: ptrTo(true)}})
	in := st.start(st.config(map[string]string{"TRAWL_RESOLVE": "open.test=127.0.0.1,blocked.test=127.0.0.1"}), "a")

	tk := task("http://open.test:" + port + "/page")
	st.publishTask(tk)
	if o := st.outcome(tk.Lease); o.Kind != crawlmsg.OutcomeRobotsUnavailable || !o.Requested {
		t.Errorf("outcome %+v, want robots-unavailable after the origin's own request", o)
	}
	if got := s.requests(); !slices.Equal(got, []string{"/robots.txt"}) {
		t.Errorf("the server saw %v, want only open.test's robots.txt", got)
	}
	if got := in.metric(t, "trawl_fetcher_policy_robots_hop_blocked_total"); got != 1 {
		t.Errorf("trawl_fetcher_policy_robots_hop_blocked_total = %v, want 1", got)
	}
}
