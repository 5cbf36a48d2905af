package itest

import (
	"testing"
	"time"

	"github.com/trawl/trawl/services/scheduler/internal/frontier"
	"github.com/trawl/trawl/shared/crawlmsg"
)

// A fetcher answers out-of-scope for a task whose URL a site policy's narrowed scope no
// longer admits (a URL the frontier's recheck did not reach: still in a front queue, or
// already dispatched). The URL ends out of scope, no attempt counted and the page charge
// refunded, and the host goes on with its next URL at its stored next time: no request
// was made, so no gap is owed.
func TestOutcomeOutOfScopeEndsTheURL(t *testing.T) {
	t.Parallel()
	rdb := startRedis(t)
	f := newTF(t, rdb, testOptions(0))
	f.add("m1", urls(0, "http://a.example/excluded", "http://a.example/kept")...)
	tasks := f.dispatch(at(0), 10)
	if len(tasks) != 1 || tasks[0].URL != "http://a.example/excluded" {
		t.Fatalf("dispatched %v", tasks)
	}
	before := f.stats()
	res := f.complete(at(time.Second), outcome(tasks[0], crawlmsg.OutcomeOutOfScope, 0))
	if res[0].Result != frontier.ResultOutOfScope || !res[0].Refunded {
		t.Fatalf("result %s refunded %v, want out_of_scope, refunded", res[0].Result, res[0].Refunded)
	}
	s := f.stats()
	if s.OutOfScope != before.OutOfScope+1 || s.Failed != before.Failed || s.InFlight != 0 || s.Queued != 1 {
		t.Fatalf("stats %+v, want one more out of scope, the other URL still queued", s)
	}
	f.check()
	next := f.dispatch(at(2*time.Second), 10)
	if len(next) != 1 || next[0].URL != "http://a.example/kept" || next[0].Attempt != 0 {
		t.Fatalf("next dispatch %v, want the kept URL at attempt 0", next)
	}
}
