package itest

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/trawl/trawl/services/scheduler/internal/frontier"
	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/testwait"
)

// drain dispatches and completes (200) until nothing is queued or in flight, advancing the
// clock to the next wake-up, and returns the tasks in dispatch order.
func (f *tf) drain(now time.Time, batch int) []crawlmsg.FetchTask {
	f.t.Helper()
	var all []crawlmsg.FetchTask
	lastQueued := int64(1 << 62)
	for i := 0; ; i++ {
		if i > 100000 {
			f.t.Fatal("frontier does not drain")
		}
		tasks := f.dispatch(now, batch)
		all = append(all, tasks...)
		if len(tasks) > 0 {
			outs := make([]crawlmsg.Outcome, len(tasks))
			for j, tk := range tasks {
				outs[j] = ok200(tk)
			}
			for _, ap := range f.complete(now, outs...) {
				if ap.Result != frontier.ResultFetched {
					f.t.Fatalf("outcome result %s", ap.Result)
				}
			}
			continue
		}
		s := f.stats()
		if s.Queued == 0 && s.InFlight == 0 {
			return all
		}
		wake, ok, err := f.NextWake(testwait.Context(f.t))
		if err != nil {
			f.t.Fatal(err)
		}
		if !ok {
			// The router may have spent its per-call limit on URLs that ended over budget;
			// the next call routes more, but it must make progress.
			if s.Queued >= lastQueued {
				f.t.Fatalf("nothing to wake for and no progress with %d queued: %+v", s.Queued, s)
			}
			lastQueued = s.Queued
			continue
		}
		lastQueued = s.Queued + 1
		// NextWake measures from the frontier's clock, which the last step set to now.
		if wake > 0 {
			now = now.Add(wake)
		}
	}
}

func TestFewerBackQueuesThanHosts(t *testing.T) {
	t.Parallel()
	rdb := startRedis(t)
	o := testOptions(0)
	o.BackQueues = 3
	f := newTF(t, rdb, o)
	var want []crawlmsg.Discovered
	for h := range 10 {
		for p := range 4 {
			want = append(want, crawlmsg.Discovered{URL: fmt.Sprintf("http://h%d.example/%d", h, p), Depth: p % 2})
		}
	}
	f.add("m", want...)

	tasks := f.dispatch(t0, 100)
	if len(tasks) != 3 {
		t.Fatalf("first dispatch gave %d tasks, want B=3", len(tasks))
	}
	all := append(tasks, f.drainFrom(t0, tasks)...)
	seen := map[string]int{}
	for _, tk := range all {
		seen[tk.URL]++
	}
	for _, u := range want {
		if seen[u.URL] != 1 {
			t.Errorf("%s dispatched %d times, want exactly once", u.URL, seen[u.URL])
		}
	}
	if len(all) != len(want) {
		t.Fatalf("dispatched %d tasks for %d URLs", len(all), len(want))
	}
	s := f.stats()
	if s.Fetched != int64(len(want)) || s.Accepted != int64(len(want)) || s.Active != 0 {
		t.Fatalf("final stats %+v", s)
	}
}

// drainFrom completes tasks already out, then drains.
func (f *tf) drainFrom(now time.Time, out []crawlmsg.FetchTask) []crawlmsg.FetchTask {
	outs := make([]crawlmsg.Outcome, len(out))
	for i, tk := range out {
		outs[i] = ok200(tk)
	}
	f.complete(now, outs...)
	return f.drain(now, 100)
}

func TestPriorityFavoursShallowURLs(t *testing.T) {
	t.Parallel()
	rdb := startRedis(t)
	o := testOptions(0)
	o.BackQueues = 4
	f := newTF(t, rdb, o)
	var us []crawlmsg.Discovered
	// Depth-3 URLs are added first: order of arrival must not beat priority.
	for i := range 100 {
		us = append(us, crawlmsg.Discovered{URL: fmt.Sprintf("http://deep%d.example/", i), Depth: 3})
	}
	for i := range 100 {
		us = append(us, crawlmsg.Discovered{URL: fmt.Sprintf("http://shallow%d.example/", i), Depth: 0})
	}
	f.add("m", us...)
	order := f.drain(t0, 4)
	if len(order) != 200 {
		t.Fatalf("dispatched %d", len(order))
	}
	shallowFirst, deepFirst := 0, 0
	for _, tk := range order[:100] {
		if tk.Depth == 0 {
			shallowFirst++
		} else {
			deepFirst++
		}
	}
	// Queue 0 has weight 1 and queue 3 weight 0.125, so ~89% of the first 100 are shallow.
	if shallowFirst < 75 {
		t.Fatalf("only %d of the first 100 dispatches are depth 0", shallowFirst)
	}
	// Weighted, not strict: the low-priority queue is not starved.
	if deepFirst == 0 {
		t.Fatalf("no depth-3 URL among the first 100: the lowest queue is starved")
	}
	if s := f.stats(); s.Front[0] != 0 || s.Front[3] != 0 {
		t.Fatalf("front queues not drained: %v", s.Front)
	}
}

func TestFrontQueueLengths(t *testing.T) {
	t.Parallel()
	rdb := startRedis(t)
	f := newTF(t, rdb, testOptions(0))
	f.add("m", crawlmsg.Discovered{URL: "http://a.example/", Depth: 0},
		crawlmsg.Discovered{URL: "http://a.example/x", Depth: 2},
		crawlmsg.Discovered{URL: "http://a.example/y", Depth: 15})
	s := f.stats()
	want := []int64{1, 0, 1, 0, 0, 0, 0, 1}
	for i := range want {
		if s.Front[i] != want[i] {
			t.Fatalf("waiting %v, want %v", s.Front, want)
		}
	}
}

func TestPause(t *testing.T) {
	t.Parallel()
	rdb := startRedis(t)
	f := newTF(t, rdb, testOptions(0))
	ctx := testwait.Context(t)
	f.add("m", urls(0, "http://a.example/", "http://b.example/")...)
	must(t, f.Pause(ctx))
	if got := f.dispatch(t0, 10); len(got) != 0 {
		t.Fatalf("paused shard dispatched %v", hostsOf(got))
	}
	if s := f.stats(); !s.Paused {
		t.Fatal("Stats.Paused false while paused")
	}
	if _, ok, err := f.NextWake(ctx); err != nil || ok {
		t.Fatalf("NextWake while paused = %v, %v; want no wake-up", ok, err)
	}
	must(t, f.Resume(ctx))
	if got := f.dispatch(t0, 10); len(got) != 2 {
		t.Fatalf("after resume dispatched %d, want 2", len(got))
	}
}

func TestNextWake(t *testing.T) {
	t.Parallel()
	rdb := startRedis(t)
	f := newTF(t, rdb, testOptions(0))
	ctx := testwait.Context(t)
	if _, ok, err := f.NextWake(ctx); err != nil || ok {
		t.Fatalf("empty frontier NextWake ok=%v err=%v", ok, err)
	}
	f.add("m", urls(0, "http://a.example/1", "http://a.example/2", "http://b.example/1", "http://b.example/2")...)
	tasks := f.dispatch(t0, 10)
	f.complete(t0, ok200(tasks[0]))
	out := ok200(tasks[1])
	out.CrawlDelay = 7
	f.complete(t0, out)
	wake, ok, err := f.NextWake(ctx)
	if err != nil || !ok || wake != time.Second {
		t.Fatalf("NextWake = %v, %v, %v; want 1s after t0", wake, ok, err)
	}
}

func TestAddIdempotentPerMessage(t *testing.T) {
	t.Parallel()
	rdb := startRedis(t)
	f := newTF(t, rdb, testOptions(0))
	ctx := testwait.Context(t)
	b1 := frontier.Batch{ID: "CRAWL_FRONTIER:1", URLs: urls(0, "http://a.example/1", "http://a.example/2")}
	b2 := frontier.Batch{ID: "CRAWL_FRONTIER:2", URLs: urls(0, "http://b.example/1")}
	got, err := f.AddBatches(ctx, []frontier.Batch{b1, b2, b1})
	if err != nil {
		t.Fatal(err)
	}
	if got[0] != 2 || got[1] != 1 || got[2] != frontier.Duplicate {
		t.Fatalf("counts %v, want [2 1 Duplicate]", got)
	}
	got, err = f.AddBatches(ctx, []frontier.Batch{b2, b1})
	if err != nil {
		t.Fatal(err)
	}
	if got[0] != frontier.Duplicate || got[1] != frontier.Duplicate {
		t.Fatalf("redelivery counts %v, want both Duplicate", got)
	}
	if s := f.stats(); s.Accepted != 3 || s.Queued != 3 {
		t.Fatalf("stats %+v, want 3 accepted once", s)
	}
	f.check()
}

func TestOutOfScope(t *testing.T) {
	t.Parallel()
	rdb := startRedis(t)
	o := testOptions(0)
	o.MaxDepth = 2
	f := newTF(t, rdb, o)
	n := f.add("m",
		crawlmsg.Discovered{URL: "http://a.example/ok", Depth: 2},
		crawlmsg.Discovered{URL: "http://a.example/deep", Depth: 3},
		crawlmsg.Discovered{URL: "mailto:x@a.example"},
		crawlmsg.Discovered{URL: "not a url"},
		crawlmsg.Discovered{URL: "http://a.example/neg", Depth: -1},
	)
	if n != 1 {
		t.Fatalf("queued %d, want 1", n)
	}
	if s := f.stats(); s.Accepted != 5 || s.OutOfScope != 4 || s.Queued != 1 {
		t.Fatalf("stats %+v", s)
	}
}

func TestBudgets(t *testing.T) {
	t.Parallel()
	t.Run("per host", func(t *testing.T) {
		rdb := startRedis(t)
		o := testOptions(0)
		o.MaxPagesPerHost = 2
		f := newTF(t, rdb, o)
		f.add("m1", urls(0, "http://a.example/1", "http://a.example/2", "http://a.example/3", "http://a.example/4", "http://b.example/1")...)
		// A robots.txt fetch is not a page: it must not eat the budget.
		tk := f.dispatch(t0, 10)
		for _, x := range tk {
			if x.Host == "a.example" {
				f.complete(t0, outcome(x, crawlmsg.OutcomeRobots, 200))
			} else {
				f.complete(t0, ok200(x))
			}
		}
		got := f.drain(t0, 10)
		var aFetched []string
		for _, x := range got {
			if x.Host == "a.example" {
				aFetched = append(aFetched, x.URL)
			}
		}
		if len(aFetched) != 2 || aFetched[0] != "http://a.example/1" || aFetched[1] != "http://a.example/2" {
			t.Fatalf("a.example pages fetched %v, want /1 and /2", aFetched)
		}
		s := f.stats()
		if s.OverBudget != 2 || s.Fetched != 3 {
			t.Fatalf("stats %+v, want 2 over budget, 3 fetched", s)
		}
		// Later URLs of the exhausted host end at once.
		if n := f.add("m2", urls(1, "http://a.example/5", "http://c.example/1")...); n != 1 {
			t.Fatalf("queued %d after budget, want only c.example", n)
		}
		if s := f.stats(); s.OverBudget != 3 {
			t.Fatalf("stats %+v", s)
		}
	})
	t.Run("global", func(t *testing.T) {
		rdb := startRedis(t)
		o := testOptions(0)
		o.MaxPages = 3
		f := newTF(t, rdb, o)
		var us []crawlmsg.Discovered
		for _, h := range manyHosts(5) {
			us = append(us, urls(0, "http://"+h+"/1", "http://"+h+"/2")...)
		}
		f.add("m1", us...)
		got := f.drain(t0, 10)
		if len(got) != 3 {
			t.Fatalf("dispatched %d pages, want the budget of 3", len(got))
		}
		s := f.stats()
		if s.OverBudget != 7 || s.Fetched != 3 || s.Active != 0 {
			t.Fatalf("stats %+v", s)
		}
		if n := f.add("m2", urls(0, "http://new.example/")...); n != 0 {
			t.Fatalf("queued %d after the budget was spent", n)
		}
	})
}

// With every back queue taken, the router stops at the first URL of a new host, which
// waits at the head of its front queue; URLs it popped but did not route go back in order.
func TestRouterWaitsAtNewHost(t *testing.T) {
	t.Parallel()
	rdb := startRedis(t)
	o := testOptions(0)
	o.BackQueues = 1
	f := newTF(t, rdb, o)
	f.add("m", urls(0, "http://a.example/1", "http://a.example/2", "http://b.example/1", "http://a.example/3", "http://c.example/1")...)
	fq0 := func() []string { return rdb.LRange(testwait.Context(t), f.Keyspace().Key("fq", "0"), 0, -1).Val() }

	tasks := f.dispatch(t0, 10)
	if len(tasks) != 1 || tasks[0].URL != "http://a.example/1" {
		t.Fatalf("dispatched %+v, want a.example/1", tasks)
	}
	if q := f.backQueue("a.example"); len(q) != 1 || q[0] != "0 0 0 http://a.example/2" {
		t.Fatalf("a.example back queue %q, want /2 (routed before b.example blocked)", q)
	}
	want := []string{"0 0 0 http://b.example/1", "0 0 0 http://a.example/3", "0 0 0 http://c.example/1"}
	if got := fq0(); !slices.Equal(got, want) {
		t.Fatalf("front queue %q, want %q", got, want)
	}
	f.complete(t0, ok200(tasks[0]))
	tasks = f.dispatch(t0.Add(time.Second), 10)
	if len(tasks) != 1 || tasks[0].URL != "http://a.example/2" {
		t.Fatalf("dispatched %+v, want a.example/2", tasks)
	}
	f.complete(t0.Add(time.Second), ok200(tasks[0])) // a.example drains and frees the back queue
	if got := fq0(); !slices.Equal(got, want[1:]) {
		t.Fatalf("after a.example drained, front queue %q, want %q", got, want[1:])
	}
	if s := f.stats(); s.Active != 1 {
		t.Fatalf("active hosts %d", s.Active)
	}
	if _, ok := f.heapScore("b.example"); !ok {
		t.Fatal("b.example not admitted into the freed back queue")
	}
}
