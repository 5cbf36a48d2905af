package itest

import (
	"testing"
	"time"

	"github.com/trawl/trawl/devstack/redisproc"
	"github.com/trawl/trawl/services/scheduler/internal/frontier"
	"github.com/trawl/trawl/services/scheduler/internal/service"
	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/policy"
	"github.com/trawl/trawl/shared/testwait"
	"github.com/trawl/trawl/shared/topology"
)

// A failed recrawl is rescheduled within its live rule's recrawl bounds: its 60 s interval
// under TRAWL_RECRAWL_MAX of 30 d is cut to the rule's recrawl_max of 20 s.
func TestFailedRecrawlWithinRuleBounds(t *testing.T) {
	t.Parallel()
	s := startStack(t, redisproc.Options{}, map[string]string{"TRAWL_RECRAWL": "adaptive", "TRAWL_MAX_RETRIES": "0",
		"TRAWL_RECRAWL_MIN": "10s", "TRAWL_RECRAWL_DEFAULT": "30s"})
	ctx := testwait.Context(t)
	s.stopService(t)
	sc, err := policy.ParseScope("host:bounded.test")
	if err != nil {
		t.Fatal(err)
	}
	max := policy.Duration(20 * time.Second)
	if _, _, err := policy.NewStore(s.rdb, s.cfg.Common.RedisPrefix).Apply(ctx, []policy.Change{{Rule: policy.Rule{Scope: sc, RecrawlMax: &max}}}, "test", 0); err != nil {
		t.Fatal(err)
	}

	const u = "http://bounded.test/page"
	shard := topology.ShardOf("bounded.test", s.cfg.Common.Shards)
	f := frontier.New(s.rdb, service.FrontierOptions(s.cfg, shard), service.Prioritizer(s.cfg))
	e := crawlmsg.RecrawlEntry{URL: u, Depth: 2, State: crawlmsg.Recrawl{Interval: 60_000, Fetches: 2, Due: time.Now().UnixMilli()}}
	if _, err := f.AddBatches(ctx, []frontier.Batch{{ID: "due:1", URLs: []crawlmsg.Discovered{e.Discovered()}}}); err != nil {
		t.Fatal(err)
	}
	tasks, err := f.Dispatch(ctx, 10)
	if err != nil || len(tasks) != 1 || tasks[0].Recrawl == nil {
		t.Fatalf("Dispatch = %+v, %v; want the recrawl's task", tasks, err)
	}
	o := fetched200(tasks[0])
	o.Kind, o.Status, o.Permanent, o.Error = crawlmsg.OutcomeError, 0, true, "no such host"
	o.Recrawl = &crawlmsg.RecrawlEntry{V: crawlmsg.Version, URL: u, Depth: 2, State: *tasks[0].Recrawl}
	if applied, err := f.Complete(ctx, []crawlmsg.Outcome{o}); err != nil || applied[0].Result != frontier.ResultFailed {
		t.Fatalf("Complete = %+v, %v; want failed", applied, err)
	}
	s.startService(nil)
	next := s.schedule(ctx, shard, u, "the failed URL scheduled again", func(e crawlmsg.RecrawlEntry) bool { return e.State.Fetches == 3 })
	if next.State.Interval != 20_000 {
		t.Fatalf("next schedule %+v: want the rule's 20 s recrawl_max as its interval", next)
	}
}
