package itest

import (
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/policy"
)

// TestPolicyServerLimits: under TRAWL_POLITENESS=ip, an address-block rule decides the
// server's own limits: its min delay spaces the requests of every host on the address,
// and its connections let that many requests be in flight there at once.
func TestPolicyServerLimits(t *testing.T) {
	st := newStack(t)
	release := make(chan struct{})
	s := newSite(t, map[string]http.HandlerFunc{
		"/robots.txt": text("User-agent: *\nAllow: /\n"),
		"/page":       html(pageHTML),
		"/slow": func(w http.ResponseWriter, r *http.Request) {
			<-release
			html(pageHTML)(w, r)
		},
	})
	ip, port, _ := net.SplitHostPort(s.Listener.Addr().String())
	in := st.start(st.config(map[string]string{
		"TRAWL_POLITENESS":   "ip",
		"TRAWL_RESOLVE":      "a.test=" + ip + ",b.test=" + ip + ",c.test=" + ip,
		"TRAWL_MIN_DELAY":    "100ms",
		"TRAWL_DELAY_FACTOR": "0",
		"TRAWL_POLICY_POLL":  "100ms",
		"TRAWL_TASK_BATCH":   "1",
	}), "a")
	url := func(host, path string) string { return "http://" + host + ":" + port + path }
	run := func(u string) crawlmsg.Outcome {
		t.Helper()
		tk := task(u)
		st.publishTask(tk)
		return st.outcome(tk.Lease)
	}
	wait := func(o crawlmsg.Outcome) time.Duration { return time.Duration(o.RetryAfter * float64(time.Second)) }
	setRule := func(r policy.Rule) {
		t.Helper()
		in.waitMetric(t, "trawl_fetcher_policy_version", float64(st.setRules(map[string]policy.Rule{"cidr:" + ip + "/32": r})))
	}
	d := func(s string) *policy.Duration { v := policy.Duration(mustDuration(t, s)); return &v }

	setRule(policy.Rule{MinDelay: d("1500ms")})
	if o := run(url("a.test", "/page")); o.Kind != crawlmsg.OutcomeRobots || !o.Requested {
		t.Fatalf("a's first task: %+v, want its robots.txt fetched", o)
	}
	if o := run(url("b.test", "/page")); o.Kind != crawlmsg.OutcomeServerBusy || wait(o) < 1200*time.Millisecond {
		t.Fatalf("b right after a, same address: %+v, want server-busy for about the rule's 1.5s (the process-wide min delay is 100ms)", o)
	}

	setRule(policy.Rule{MinDelay: d("100ms"), Connections: ptrTo(2)})
	time.Sleep(1500 * time.Millisecond) // the 1.5s gap set by the earlier rule runs out
	slow := task(url("a.test", "/slow"))
	st.publishTask(slow)
	for len(s.requests()) < 2 || s.requests()[len(s.requests())-1] != "/slow" {
		time.Sleep(5 * time.Millisecond) // polling: until /slow is at the server
	}
	time.Sleep(200 * time.Millisecond) // past the gap from /slow's start
	if o := run(url("c.test", "/page")); o.Kind != crawlmsg.OutcomeRobots || !o.Requested {
		t.Errorf("c while a's request is in flight, two connections allowed: %+v, want its robots.txt fetched", o)
	}
	close(release)
	if o := st.outcome(slow.Lease); o.Kind != crawlmsg.OutcomeFetched {
		t.Errorf("a's slow page: %+v, want fetched", o)
	}
}

func mustDuration(t *testing.T, s string) time.Duration {
	t.Helper()
	d, err := time.ParseDuration(s)
	if err != nil {
		t.Fatal(err)
	}
	return d
}
