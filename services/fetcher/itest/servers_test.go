package itest

import (
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/trawl/trawl/shared/crawlmsg"
)

// TestServerBusyPerAddress: two host names on one server address, under per-server
// politeness. A task whose address is inside its gap, or has a request in flight (for the
// other host), makes no request and ends server-busy at once, saying when to try again;
// from the server's own log, requests to the address never overlap and keep the gap.
func TestServerBusyPerAddress(t *testing.T) {
	const minDelay = 400 * time.Millisecond
	type span struct {
		host, path string
		start, end time.Time
	}
	var (
		mu      sync.Mutex
		spans   []span
		release = make(chan struct{})
	)
	logged := func(h http.HandlerFunc) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			start := time.Now()
			h(w, r)
			mu.Lock()
			spans = append(spans, span{r.Host, r.URL.Path, start, time.Now()})
			mu.Unlock()
		}
	}
	st := newStack(t)
	s := newSite(t, map[string]http.HandlerFunc{
		"/robots.txt": logged(text("User-agent: *\nAllow: /\n")),
		"/page":       logged(html(pageHTML)),
		"/slow": logged(func(w http.ResponseWriter, r *http.Request) {
			<-release
			html(pageHTML)(w, r)
		}),
	})
	ip, port, _ := net.SplitHostPort(s.Listener.Addr().String())
	st.start(st.config(map[string]string{
		"TRAWL_POLITENESS":   "ip",
		"TRAWL_RESOLVE":      "a.test=" + ip + ",b.test=" + ip,
		"TRAWL_MIN_DELAY":    minDelay.String(),
		"TRAWL_DELAY_FACTOR": "0",
		// One task per message, so that a slot is free for b while a's request hangs.
		"TRAWL_TASK_BATCH": "1",
	}), "a")
	url := func(host, path string) string { return "http://" + host + ":" + port + path }
	run := func(u string) crawlmsg.Outcome {
		tk := task(u)
		st.publishTask(tk)
		return st.outcome(tk.Lease)
	}
	busy := func(o crawlmsg.Outcome, what string, most time.Duration) {
		t.Helper()
		wait := time.Duration(o.RetryAfter * float64(time.Second))
		if o.Kind != crawlmsg.OutcomeServerBusy || o.Requested || wait <= 0 || wait > most || o.Addr != ip {
			t.Fatalf("%s: %+v, want server-busy at %s, no request, retry within %s", what, o, ip, most)
		}
	}
	// after waits out a server-busy outcome, as the scheduler re-arms the host.
	after := func(o crawlmsg.Outcome) {
		time.Sleep(time.Duration(o.RetryAfter*float64(time.Second)) + 20*time.Millisecond)
	}

	if o := run(url("a.test", "/page")); o.Kind != crawlmsg.OutcomeRobots || !o.Requested {
		t.Fatalf("a's first task: %+v, want its robots.txt fetched", o)
	}
	// b is another host, but the same server, right after a's request.
	o := run(url("b.test", "/page"))
	busy(o, "b inside the address's gap", minDelay)
	after(o)
	if o := run(url("b.test", "/page")); o.Kind != crawlmsg.OutcomeRobots || !o.Requested {
		t.Fatalf("b after the gap: %+v, want its robots.txt fetched", o)
	}
	time.Sleep(minDelay) // the address's gap after b's request

	// a's request hangs on the server; b's task meanwhile ends at once, without a request
	// and without waiting for a's.
	slow := task(url("a.test", "/slow"))
	st.publishTask(slow)
	for {
		mu.Lock()
		n := len(spans)
		mu.Unlock()
		if n >= 2 && len(s.requests()) > n {
			break // /slow has arrived at the server
		}
		time.Sleep(5 * time.Millisecond)
	}
	busy(run(url("b.test", "/page")), "b while a's request is in flight", 5*time.Second)
	close(release)
	if o := st.outcome(slow.Lease); o.Kind != crawlmsg.OutcomeFetched || o.Addr != ip {
		t.Fatalf("a's slow page: %+v, want fetched at %s", o, ip)
	}
	time.Sleep(minDelay)
	if o := run(url("b.test", "/page")); o.Kind != crawlmsg.OutcomeFetched || o.Addr != ip {
		t.Fatalf("b after a's request and the gap: %+v, want fetched at %s", o, ip)
	}

	mu.Lock()
	defer mu.Unlock()
	if len(spans) != 4 {
		t.Fatalf("the server saw %d requests, want 4 (two robots.txt, two pages): %+v", len(spans), spans)
	}
	for i := 1; i < len(spans); i++ {
		prev, cur := spans[i-1], spans[i]
		if gap := cur.start.Sub(prev.end); gap < minDelay {
			t.Errorf("%s%s started %s after %s%s ended, want at least %s", cur.host, cur.path, gap, prev.host, prev.path, minDelay)
		}
	}
}
