package itest

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/trawl/trawl/devstack/redisproc"
	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/natsx"
	"github.com/trawl/trawl/shared/testwait"
	"github.com/trawl/trawl/shared/topology"
)

func (fx *fetcher) tasksFor(host string) int {
	n := 0
	for _, tk := range fx.snapshot() {
		if tk.Host == host {
			n++
		}
	}
	return n
}

// A host whose robots.txt is never available is retired after TRAWL_RETIRE_AFTER
// outcomes: all its URLs end as failed in a bounded number of requests, the retirement is
// logged and counted, and a later URL of the host fails on admission without a request.
func TestServiceRetiresFailingHost(t *testing.T) {
	t.Parallel()
	s := startStack(t, redisproc.Options{}, map[string]string{
		"TRAWL_RETRY_BACKOFF": "5ms",
		"TRAWL_MAX_BACKOFF":   "40ms",
		"TRAWL_RETIRE_AFTER":  "8",
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	fx := s.runFetcher(ctx, func(tk crawlmsg.FetchTask) crawlmsg.Outcome {
		if tk.Host == "dead.example" {
			o := fetched200(tk)
			o.Kind, o.Status, o.Error = crawlmsg.OutcomeRobotsUnavailable, 503, "robots.txt: 503"
			return o
		}
		return fetched200(tk)
	})
	var batch crawlmsg.FrontierBatch
	for i := range 20 {
		batch.URLs = append(batch.URLs, crawlmsg.Discovered{URL: fmt.Sprintf("http://dead.example/%d", i)})
	}
	for i := range 5 {
		batch.URLs = append(batch.URLs, crawlmsg.Discovered{URL: fmt.Sprintf("http://alive.example/%d", i)})
	}
	s.publish(topology.FrontierSubject(0), &batch)
	testwait.Eventually(t, 30*time.Second, "every URL terminal", func() bool {
		st := s.stats()
		return st.Queued == 0 && st.InFlight == 0 && st.Accepted == 25 && st.Terminal() == 25
	})
	st := s.stats()
	if st.Failed != 20 || st.Fetched != 5 || st.Retired != 1 {
		t.Fatalf("stats %+v: want dead.example's 20 URLs failed, alive.example's 5 fetched", st)
	}
	if n := fx.tasksFor("dead.example"); n != 8 {
		t.Fatalf("dead.example got %d requests, want TRAWL_RETIRE_AFTER = 8", n)
	}
	testwait.Eventually(t, 10*time.Second, "retirement counted", func() bool {
		return s.metric("trawl_scheduler_hosts_retired_total", map[string]string{"shard": "0"}) == 1
	})
	// Each unavailable robots.txt sent its URL to the tail of the queue, so the 8 requests
	// were for 8 URLs, the 8th retired the host, and all 20 end with it.
	if n := s.logs.count("host retired", "host=dead.example", "urls_failed=20"); n != 1 {
		t.Fatalf("%d retirement log lines for dead.example, want 1", n)
	}

	s.publish(topology.FrontierSubject(0), &crawlmsg.FrontierBatch{URLs: []crawlmsg.Discovered{
		{URL: "http://dead.example/later"}, {URL: "http://alive.example/later"},
	}})
	testwait.Eventually(t, 30*time.Second, "late URLs terminal", func() bool {
		st := s.stats()
		return st.Terminal() == 27 && st.Queued == 0 && st.InFlight == 0
	})
	if st := s.stats(); st.Failed != 21 || st.Fetched != 6 {
		t.Fatalf("stats %+v: want the late dead.example URL failed on admission", st)
	}
	if n := fx.tasksFor("dead.example"); n != 8 {
		t.Fatalf("a retired host was dispatched again: %d requests", n)
	}
}

// A robots.txt Crawl-delay above TRAWL_MAX_CRAWL_DELAY is logged once for the host and
// counted for every outcome whose delay it capped.
func TestServiceLogsCappedCrawlDelayOnce(t *testing.T) {
	t.Parallel()
	s := startStack(t, redisproc.Options{}, map[string]string{"TRAWL_MAX_CRAWL_DELAY": "30ms"})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s.runFetcher(ctx, func(tk crawlmsg.FetchTask) crawlmsg.Outcome {
		o := fetched200(tk)
		if tk.Host == "slow.example" {
			o.CrawlDelay = 3600
		}
		return o
	})
	var batch crawlmsg.FrontierBatch
	for i := range 5 {
		batch.URLs = append(batch.URLs, crawlmsg.Discovered{URL: fmt.Sprintf("http://slow.example/%d", i)},
			crawlmsg.Discovered{URL: fmt.Sprintf("http://fast.example/%d", i)})
	}
	s.publish(topology.FrontierSubject(0), &batch)
	testwait.Eventually(t, 30*time.Second, "crawled", func() bool { return s.stats().Fetched == 10 })
	testwait.Eventually(t, 10*time.Second, "capped delays counted", func() bool {
		return s.metric("trawl_scheduler_crawl_delay_capped_total", map[string]string{"shard": "0"}) == 5
	})
	if n := s.logs.count("crawl-delay above the cap", "host=slow.example", "crawl_delay=1h0m0s"); n != 1 {
		t.Fatalf("%d crawl-delay log lines for slow.example, want exactly 1", n)
	}
	if n := s.logs.count("crawl-delay above the cap"); n != 1 {
		t.Fatalf("%d crawl-delay log lines in all, want 1", n)
	}
}

// With TRAWL_PRIORITIZER=preference the service passes each link group's source page to
// the frontier, which counts it as a backlink of the other hosts: one group per message
// (version 1) or several in one (version 2) count the same.
func TestServicePreferenceCountsBacklinks(t *testing.T) {
	t.Parallel()
	group := func(i int) crawlmsg.LinkGroup {
		return crawlmsg.LinkGroup{
			Source: fmt.Sprintf("http://hub%d.example/", i),
			URLs:   []crawlmsg.Discovered{{URL: fmt.Sprintf("http://a.example/%d", i), Depth: 1}, {URL: fmt.Sprintf("http://hub%d.example/x", i), Depth: 1}},
		}
	}
	tests := []struct {
		name string
		msgs []*crawlmsg.FrontierBatch
	}{
		{"a message per page", []*crawlmsg.FrontierBatch{{Groups: []crawlmsg.LinkGroup{group(0)}}, {Groups: []crawlmsg.LinkGroup{group(1)}}, {Groups: []crawlmsg.LinkGroup{group(2)}}}},
		{"one message of three pages", []*crawlmsg.FrontierBatch{{Groups: []crawlmsg.LinkGroup{group(0), group(1), group(2)}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := startStack(t, redisproc.Options{}, map[string]string{"TRAWL_PRIORITIZER": "preference"})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			s.runFetcher(ctx, fetched200)
			for _, m := range tt.msgs {
				s.publish(topology.FrontierSubject(0), m)
			}
			testwait.Eventually(t, 30*time.Second, "crawled", func() bool { return s.stats().Fetched == 6 })
			in := s.rdb.ZRangeWithScores(context.Background(), s.f.Keyspace().Key("backlinks"), 0, -1).Val()
			if len(in) != 1 || in[0].Member != "a.example" || in[0].Score != 3 {
				t.Fatalf("backlinks %v, want a.example: 3 and no self-links", in)
			}
		})
	}
}

// While JetStream cannot take fetch tasks the dispatcher leases nothing: the one batch whose
// publish failed comes back through the reaper at the cost of one attempt, and no further
// attempts are spent however many lease TTLs the outage lasts.
func TestServiceHoldsDispatchWhileJetStreamUnavailable(t *testing.T) {
	t.Parallel()
	s := startStack(t, redisproc.Options{}, map[string]string{"TRAWL_LEASE_TTL": "2s", "TRAWL_ACK_WAIT": "1s", "TRAWL_FSYNC": "always", "TRAWL_MAX_RETRIES": "2"})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// The gate leases nothing before it has read the fetchers' capacity once; read while the
	// stream is still there, it lets the batch below out, whose publish then fails.
	testwait.Eventually(t, 30*time.Second, "the dispatch gate's first reading of the fetchers", func() bool {
		return s.metric("trawl_scheduler_fetch_tasks_queued_limit", nil) > 0
	})
	if err := s.js.DeleteStream(ctx, topology.StreamFetch); err != nil {
		t.Fatal(err)
	}
	// As many hosts as the dispatch gate lets out while no fetcher is busy
	// ((TRAWL_DISPATCH_AHEAD-1) x 4), so they go in one batch.
	var batch crawlmsg.FrontierBatch
	for i := range 8 {
		batch.URLs = append(batch.URLs, crawlmsg.Discovered{URL: fmt.Sprintf("http://h%d.example/", i)})
	}
	s.publish(topology.FrontierSubject(0), &batch)
	testwait.Eventually(t, 30*time.Second, "the failed batch reaped", func() bool {
		st := s.stats()
		return st.Dispatched == 8 && st.Expired == 8 && st.Queued == 8
	})
	// Every host is due again; several lease TTLs pass without a lease.
	held := s.metric("trawl_scheduler_dispatch_held_total", map[string]string{"shard": "0"})
	testwait.Eventually(t, 30*time.Second, "dispatch held for three lease TTLs", func() bool {
		return s.metric("trawl_scheduler_dispatch_held_total", map[string]string{"shard": "0"}) >= held+24
	})
	if st := s.stats(); st.Dispatched != 8 || st.InFlight != 0 || st.Failed != 0 {
		t.Fatalf("stats %+v: leases were taken while JetStream could not take the tasks", st)
	}
	if n := s.metric("trawl_scheduler_publish_failures_total", map[string]string{"shard": "0"}); n != 8 {
		t.Fatalf("publish_failures_total %v, want the one batch of 8", n)
	}

	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if err := natsx.Ensure(ctx, s.js, s.cfg.Common.Topology(), s.cfg.Common.Timings(), log); err != nil {
		t.Fatal(err)
	}
	fx := s.runFetcher(ctx, fetched200)
	testwait.Eventually(t, 30*time.Second, "crawled after JetStream returned", func() bool { return s.stats().Fetched == 8 })
	for _, tk := range fx.snapshot() {
		if tk.Attempt != 1 {
			t.Errorf("%s dispatched with attempt %d, want 1 (only the failed publish counts)", tk.URL, tk.Attempt)
		}
	}
	if n := s.logs.count("dispatch resumed"); n != 1 {
		t.Fatalf("%d 'dispatch resumed' log lines, want 1", n)
	}
}
