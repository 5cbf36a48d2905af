package itest

import (
	"testing"
	"time"

	"github.com/trawl/trawl/services/scheduler/internal/frontier"
	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/frontierkeys"
)

// A server-busy outcome (the host's server address was busy, no request made) is applied
// as a deferral: the URL back at the head of its queue with no attempt counted and no page
// charged, the host re-armed no earlier than the address's wait. The address an outcome
// names is kept as the host's last address until another outcome names one.
func TestServerBusyOutcome(t *testing.T) {
	t.Parallel()
	rdb := startRedis(t)
	f := newTF(t, rdb, testOptions(0))
	f.add("m", urls(0, "http://a.example/1", "http://a.example/2")...)

	tk := f.dispatch(t0, 10)[0]
	busy := outcome(tk, crawlmsg.OutcomeServerBusy, 0)
	busy.Requested, busy.RetryAfter, busy.Addr = false, 0.75, "192.0.2.7"
	ap := f.complete(t0.Add(100*time.Millisecond), busy)[0]
	if ap.Result != frontier.ResultRequeued {
		t.Fatalf("server-busy: result %s, want requeued", ap.Result)
	}
	f.wantHeap("a.example", t0.Add(850*time.Millisecond))
	if got := f.hostField("a.example", frontierkeys.HostAddr); got != "192.0.2.7" {
		t.Fatalf("host's address %q, want the busy one, 192.0.2.7", got)
	}
	if got := f.dispatch(t0.Add(800*time.Millisecond), 10); len(got) != 0 {
		t.Fatalf("dispatched %v before the address's wait", hostsOf(got))
	}
	again := f.dispatch(t0.Add(850*time.Millisecond), 10)
	if len(again) != 1 || again[0].URL != tk.URL || again[0].Attempt != 0 {
		t.Fatalf("got %+v, want %s again, attempt 0", again, tk.URL)
	}
	if s := f.stats(); s.Pages != 1 {
		t.Fatalf("a server-busy task must not be charged as a page: %+v", s)
	}

	fetched := ok200(again[0])
	fetched.Addr = "192.0.2.8"
	f.complete(t0.Add(time.Second), fetched)
	if got := f.hostField("a.example", frontierkeys.HostAddr); got != "192.0.2.8" {
		t.Fatalf("host's address %q after a fetch at 192.0.2.8", got)
	}
	next := f.dispatch(t0.Add(time.Hour), 10)[0]
	f.complete(t0.Add(time.Hour), outcome(next, crawlmsg.OutcomeExpired, 0))
	if got := f.hostField("a.example", frontierkeys.HostAddr); got != "192.0.2.8" {
		t.Fatalf("host's address %q after an outcome naming none, want 192.0.2.8 kept", got)
	}
}
