package itest

import (
	"testing"
	"time"

	"github.com/trawl/trawl/services/scheduler/internal/frontier"
	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/policy"
)

// A fetcher answers parked or out of scope by the rules it holds, which may be older than
// the scheduler's (a scope narrowed and reverted, a block lifted, and the fetcher not yet
// polled). The scheduler checks such an answer against the rules in force: a URL they
// admit and do not block goes back to its queue counting an attempt, again and again while
// the fetcher stays behind, until its attempts are spent and the fetcher's answer stands;
// an answer by the scheduler's own rules or newer ones stands at once, and so does one the
// rules in force agree with.
func TestPolicyOutcomeByOlderRules(t *testing.T) {
	t.Parallel()
	narrow := hostRule("a.example", policy.Rule{Exclude: []string{"/x/"}, MaxDepth: pint(1)})
	tests := []struct {
		name string
		kind crawlmsg.OutcomeKind
		// The rules in force at the scheduler (version 2); the fetcher answers by version by.
		now   []policy.Rule
		by    int64
		depth int
		// The result of each answer while attempts last, and the one after.
		want, last frontier.Result
	}{
		{"scope reverted", crawlmsg.OutcomeOutOfScope, nil, 1, 0, frontier.ResultRequeued, frontier.ResultOutOfScope},
		{"scope still narrow", crawlmsg.OutcomeOutOfScope, []policy.Rule{narrow}, 1, 0, frontier.ResultOutOfScope, frontier.ResultOutOfScope},
		{"depth beyond the rule in force", crawlmsg.OutcomeOutOfScope, []policy.Rule{hostRule("a.example", policy.Rule{MaxDepth: pint(1)})}, 1, 2, frontier.ResultOutOfScope, frontier.ResultOutOfScope},
		{"depth within the rule in force", crawlmsg.OutcomeOutOfScope, []policy.Rule{hostRule("a.example", policy.Rule{MaxDepth: pint(3)})}, 1, 2, frontier.ResultRequeued, frontier.ResultOutOfScope},
		{"decided by the rules in force", crawlmsg.OutcomeOutOfScope, nil, 2, 0, frontier.ResultOutOfScope, frontier.ResultOutOfScope},
		{"decided by newer rules", crawlmsg.OutcomeOutOfScope, nil, 3, 0, frontier.ResultOutOfScope, frontier.ResultOutOfScope},
		{"block lifted", crawlmsg.OutcomeParked, nil, 1, 0, frontier.ResultRequeued, frontier.ResultParked},
		{"blocked by newer rules", crawlmsg.OutcomeParked, nil, 3, 0, frontier.ResultParked, frontier.ResultParked},
		{"out of scope, now blocked", crawlmsg.OutcomeOutOfScope, []policy.Rule{prefixBlock(t, "http://a.example/x/")}, 1, 0, frontier.ResultParked, frontier.ResultParked},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rdb := startRedis(t)
			o := testOptions(0)
			f := newTF(t, rdb, o)
			f.policed = true
			// Queued before the rules in force, which may no longer admit it.
			f.add("m1", crawlmsg.Discovered{URL: "http://a.example/x/1", Depth: tt.depth})
			set := rules(t, 2, tt.now...)
			f.UsePolicy(func() *policy.Set { return set })
			for i := 0; ; i++ {
				now := at(time.Duration(i) * time.Minute)
				tasks := f.dispatch(now, 10)
				if len(tasks) != 1 || tasks[0].Attempt != i {
					t.Fatalf("answer %d: dispatched %v, want the URL at attempt %d", i, tasks, i)
				}
				out := outcome(tasks[0], tt.kind, 0)
				out.Requested, out.PolicyVersion, out.Depth = false, tt.by, tt.depth
				res := f.complete(now.Add(time.Second), out)[0]
				want := tt.want
				if i == o.MaxRetries {
					want = tt.last
				}
				if res.Result != want {
					t.Fatalf("answer %d by rules v%d under v2: result %s, want %s", i, tt.by, res.Result, want)
				}
				if res.Result != frontier.ResultRequeued {
					break
				}
				if i >= o.MaxRetries {
					t.Fatalf("requeued %d times", i+1)
				}
			}
			if s := f.stats(); s.Queued != 0 || s.InFlight != 0 {
				t.Fatalf("at the end: %+v", s)
			}
		})
	}
}
