package itest

import (
	"testing"
	"time"

	"github.com/trawl/trawl/services/scheduler/internal/frontier"
	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/testwait"
)

func TestOutcomes(t *testing.T) {
	t.Parallel()
	two := urls(0, "http://a.example/1", "http://a.example/2")
	for _, tc := range []struct {
		name string
		opts func(*frontier.Options)
		run  func(t *testing.T, f *tf)
	}{
		{
			name: "robots outcome requeues at head without an attempt",
			run: func(t *testing.T, f *tf) {
				tk := f.dispatch(t0, 10)[0]
				out := outcome(tk, crawlmsg.OutcomeRobots, 200)
				out.CrawlDelay = 2
				ap := f.complete(t0, out)[0]
				if ap.Result != frontier.ResultRequeued {
					t.Fatalf("result %s, want requeued", ap.Result)
				}
				if q := f.backQueue("a.example"); len(q) != 2 || q[0] != "0 0 0 http://a.example/1" {
					t.Fatalf("back queue %q, want /1 back at the head with attempt 0", q)
				}
				f.wantHeap("a.example", t0.Add(2*time.Second)) // robots.txt was a request: the delay is owed
				if got := f.dispatch(t0.Add(time.Second), 10); len(got) != 0 {
					t.Fatalf("dispatched %v before the host's delay", hostsOf(got))
				}
				again := f.dispatch(t0.Add(2*time.Second), 10)
				if len(again) != 1 || again[0].URL != tk.URL || again[0].Attempt != 0 || again[0].Lease == tk.Lease {
					t.Fatalf("after robots got %+v, want %s again, attempt 0, new lease", again, tk.URL)
				}
				if s := f.stats(); s.Pages != 1 || s.Dispatched != 2 {
					t.Fatalf("robots fetch must not be charged as a page: %+v", s)
				}
			},
		},
		{
			name: "expired outcome requeues at head without an attempt or a delay",
			run: func(t *testing.T, f *tf) {
				tk := f.dispatch(t0, 10)[0]
				ap := f.complete(t0.Add(500*time.Millisecond), outcome(tk, crawlmsg.OutcomeExpired, 0))[0]
				if ap.Result != frontier.ResultRequeued {
					t.Fatalf("result %s", ap.Result)
				}
				f.wantHeap("a.example", t0.Add(500*time.Millisecond))
				again := f.dispatch(t0.Add(500*time.Millisecond), 10)
				if len(again) != 1 || again[0].URL != tk.URL || again[0].Attempt != 0 {
					t.Fatalf("got %+v, want %s attempt 0", again, tk.URL)
				}
			},
		},
		{
			name: "deferred outcome waits as asked, without an attempt or a charge",
			run: func(t *testing.T, f *tf) {
				tk := f.dispatch(t0, 10)[0]
				out := outcome(tk, crawlmsg.OutcomeDeferred, 0)
				out.RetryAfter = 4
				ap := f.complete(t0.Add(500*time.Millisecond), out)[0]
				if ap.Result != frontier.ResultRequeued {
					t.Fatalf("result %s, want requeued", ap.Result)
				}
				f.wantHeap("a.example", t0.Add(4500*time.Millisecond))
				if got := f.dispatch(t0.Add(4*time.Second), 10); len(got) != 0 {
					t.Fatalf("dispatched %v before the asked wait", hostsOf(got))
				}
				again := f.dispatch(t0.Add(4500*time.Millisecond), 10)
				if len(again) != 1 || again[0].URL != tk.URL || again[0].Attempt != 0 {
					t.Fatalf("got %+v, want %s attempt 0", again, tk.URL)
				}
				if s := f.stats(); s.Pages != 1 || s.Dispatched != 2 {
					t.Fatalf("a deferred task must not be charged as a page: %+v", s)
				}
			},
		},
		{
			name: "retries then failed",
			opts: func(o *frontier.Options) { o.MaxRetries = 2; o.RetryBackoff = time.Second; o.MaxBackoff = time.Second },
			run: func(t *testing.T, f *tf) {
				now := t0
				var attempts []int
				for i := range 3 {
					tasks := f.dispatch(now, 10)
					if len(tasks) != 1 || tasks[0].URL != "http://a.example/1" {
						t.Fatalf("round %d: dispatched %+v, want /1 again (retries go to the head)", i, tasks)
					}
					attempts = append(attempts, tasks[0].Attempt)
					ap := f.complete(now, outcome(tasks[0], crawlmsg.OutcomeFetched, 503))[0]
					want := frontier.ResultRetry
					if i == 2 {
						want = frontier.ResultFailed
					}
					if ap.Result != want {
						t.Fatalf("round %d: result %s, want %s", i, ap.Result, want)
					}
					now = ap.Next
				}
				if attempts[0] != 0 || attempts[1] != 1 || attempts[2] != 2 {
					t.Fatalf("attempts %v, want 0 1 2", attempts)
				}
				if s := f.stats(); s.Failed != 1 || s.Queued != 1 {
					t.Fatalf("stats %+v, want 1 failed, /2 still queued", s)
				}
				if next := f.dispatch(now, 10); len(next) != 1 || next[0].URL != "http://a.example/2" {
					t.Fatalf("after failure got %+v, want /2", next)
				}
			},
		},
		{
			name: "permanent error and blocked fail at once",
			run: func(t *testing.T, f *tf) {
				tk := f.dispatch(t0, 10)[0]
				out := outcome(tk, crawlmsg.OutcomeError, 0)
				out.Permanent = true
				if ap := f.complete(t0, out)[0]; ap.Result != frontier.ResultFailed {
					t.Fatalf("permanent error: %s", ap.Result)
				}
				tk = f.dispatch(t0.Add(time.Second), 10)[0]
				if ap := f.complete(t0.Add(time.Second), outcome(tk, crawlmsg.OutcomeBlocked, 0))[0]; ap.Result != frontier.ResultFailed {
					t.Fatalf("blocked: %s", ap.Result)
				}
				if s := f.stats(); s.Failed != 2 || s.Queued != 0 || s.Active != 0 {
					t.Fatalf("stats %+v", s)
				}
			},
		},
		{
			name: "disallowed is terminal and frees the drained host",
			run: func(t *testing.T, f *tf) {
				for i := range 2 {
					tasks := f.dispatch(t0.Add(time.Duration(i)*time.Minute), 10)
					if len(tasks) != 1 {
						t.Fatalf("round %d: %d tasks", i, len(tasks))
					}
					if ap := f.complete(t0.Add(time.Duration(i)*time.Minute), outcome(tasks[0], crawlmsg.OutcomeDisallowed, 0))[0]; ap.Result != frontier.ResultDisallowed {
						t.Fatalf("result %s", ap.Result)
					}
				}
				s := f.stats()
				if s.Disallowed != 2 || s.Queued != 0 || s.Active != 0 || s.InHeap != 0 {
					t.Fatalf("stats %+v: want 2 disallowed and the back queue freed", s)
				}
			},
		},
		{
			name: "stale and duplicate outcomes are ignored",
			run: func(t *testing.T, f *tf) {
				tk := f.dispatch(t0, 10)[0]
				forged := ok200(tk)
				forged.Lease = tk.Lease + "0"
				if ap := f.complete(t0, forged)[0]; ap.Result != frontier.ResultStale {
					t.Fatalf("wrong token: %s", ap.Result)
				}
				if s := f.stats(); s.InFlight != 1 || s.Fetched != 0 {
					t.Fatalf("a stale outcome changed state: %+v", s)
				}
				res := f.complete(t0, ok200(tk), ok200(tk))
				if res[0].Result != frontier.ResultFetched || res[1].Result != frontier.ResultStale {
					t.Fatalf("same outcome twice in one batch: %s, %s", res[0].Result, res[1].Result)
				}
				if ap := f.complete(t0, ok200(tk))[0]; ap.Result != frontier.ResultStale {
					t.Fatalf("redelivered outcome: %s", ap.Result)
				}
				if s := f.stats(); s.Fetched != 1 {
					t.Fatalf("fetched %d, want 1", s.Fetched)
				}
			},
		},
		{
			name: "unknown kind is invalid and changes nothing",
			run: func(t *testing.T, f *tf) {
				tk := f.dispatch(t0, 10)[0]
				out := ok200(tk)
				out.Kind = "teleported"
				if ap := f.complete(t0, out)[0]; ap.Result != frontier.ResultInvalid {
					t.Fatalf("result %s", ap.Result)
				}
				if s := f.stats(); s.InFlight != 1 {
					t.Fatalf("stats %+v", s)
				}
			},
		},
		{
			name: "lease reap returns the URL to the head and re-arms the host",
			opts: func(o *frontier.Options) { o.LeaseTTL = time.Minute; o.MaxRetries = 1 },
			run: func(t *testing.T, f *tf) {
				tk := f.dispatch(t0, 10)[0]
				// A Crawl-delay stored earlier decides the re-arm delay.
				must(t, f.rdb.HSet(testwait.Context(t), f.Keyspace().Key("host", "a.example"), "cd", 5000).Err())
				if n := f.reap(t0.Add(59 * time.Second)); n != 0 {
					t.Fatalf("reaped %d leases before the deadline", n)
				}
				if n := f.reap(t0.Add(time.Minute)); n != 1 {
					t.Fatalf("reaped %d, want 1", n)
				}
				if q := f.backQueue("a.example"); len(q) != 2 || q[0] != "0 0 1 http://a.example/1" {
					t.Fatalf("back queue %q, want /1 at the head with attempt 1", q)
				}
				f.wantHeap("a.example", t0.Add(time.Minute+5*time.Second))
				if ap := f.complete(t0.Add(61*time.Second), ok200(tk))[0]; ap.Result != frontier.ResultStale {
					t.Fatalf("late outcome after reap: %s, want stale", ap.Result)
				}
				tk2 := f.dispatch(t0.Add(65*time.Second), 10)[0]
				if tk2.URL != tk.URL || tk2.Attempt != 1 {
					t.Fatalf("redispatch %+v", tk2)
				}
				// Past MaxRetries a URL that keeps killing fetchers ends as failed.
				if n := f.reap(t0.Add(10 * time.Minute)); n != 1 {
					t.Fatalf("second reap %d", n)
				}
				if s := f.stats(); s.Failed != 1 || s.Expired != 2 || s.Queued != 1 {
					t.Fatalf("stats %+v", s)
				}
			},
		},
		{
			name: "reap waits for the cutoff and re-arms after k x the last response time",
			opts: func(o *frontier.Options) { o.LeaseTTL = time.Minute; o.DelayFactor = 4 },
			run: func(t *testing.T, f *tf) {
				tk := f.dispatch(t0, 10)[0]
				out := ok200(tk)
				out.DurationMs = 3000
				f.complete(t0.Add(time.Second), out)
				f.dispatch(t0.Add(13*time.Second), 10)
				// The caller's cutoff, not the clock, decides: a grace after the deadline.
				*f.now = t0.Add(2 * time.Minute)
				n, err := f.Reap(testwait.Context(t), t0.Add(72*time.Second))
				if err != nil || n != 0 {
					t.Fatalf("reaped %d (%v) with the cutoff before the deadline", n, err)
				}
				if n := f.reap(t0.Add(73 * time.Second)); n != 1 {
					t.Fatalf("reaped %d, want 1", n)
				}
				// k x 3 s beats the 1 s minimum delay.
				f.wantHeap("a.example", t0.Add(73*time.Second+12*time.Second))
			},
		},
		{
			name: "expired outcome after its deadline is settled as a reap",
			opts: func(o *frontier.Options) { o.LeaseTTL = time.Minute; o.MaxRetries = 1 },
			run: func(t *testing.T, f *tf) {
				tk := f.dispatch(t0, 10)[0]
				// Before the deadline: requeued as it was, no attempt counted.
				if ap := f.complete(t0.Add(30*time.Second), outcome(tk, crawlmsg.OutcomeExpired, 0))[0]; ap.Result != frontier.ResultRequeued {
					t.Fatalf("expired before the deadline: %s, want requeued", ap.Result)
				}
				tk = f.dispatch(t0.Add(31*time.Second), 10)[0]
				if tk.Attempt != 0 {
					t.Fatalf("attempt %d after an early expiry, want 0", tk.Attempt)
				}
				// After it (a redelivered task whose fetcher died): an attempt, the full delay.
				ap := f.complete(t0.Add(92*time.Second), outcome(tk, crawlmsg.OutcomeExpired, 0))[0]
				if ap.Result != frontier.ResultRetry {
					t.Fatalf("expired after the deadline: %s, want retry", ap.Result)
				}
				if q := f.backQueue("a.example"); len(q) != 2 || q[0] != "0 0 1 http://a.example/1" {
					t.Fatalf("back queue %q, want /1 at the head with attempt 1", q)
				}
				f.wantHeap("a.example", t0.Add(93*time.Second))
				tk = f.dispatch(t0.Add(93*time.Second), 10)[0]
				// Past MaxRetries the URL ends: one that kills every fetcher does not loop.
				if ap := f.complete(t0.Add(200*time.Second), outcome(tk, crawlmsg.OutcomeExpired, 0))[0]; ap.Result != frontier.ResultFailed {
					t.Fatalf("second late expiry: %s, want failed", ap.Result)
				}
				if s := f.stats(); s.Failed != 1 || s.Queued != 1 || s.Expired != 2 {
					t.Fatalf("stats %+v, want 1 failed, 1 queued, 2 leases expired", s)
				}
			},
		},
		{
			name: "stored next time survives the back queue being freed",
			run: func(t *testing.T, f *tf) {
				tasks := f.dispatch(t0, 10)
				f.complete(t0, ok200(tasks[0]))
				tasks = f.dispatch(t0.Add(time.Second), 10)
				out := ok200(tasks[0])
				out.CrawlDelay = 10
				f.complete(t0.Add(time.Second), out) // a.example drained: next = t0+11s
				if s := f.stats(); s.Active != 0 {
					t.Fatalf("host not freed: %+v", s)
				}
				f.add("later", urls(1, "http://a.example/3")...)
				if got := f.dispatch(t0.Add(2*time.Second), 10); len(got) != 0 {
					t.Fatalf("re-admitted host dispatched before its stored next time: %+v", got)
				}
				f.wantHeap("a.example", t0.Add(11*time.Second))
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rdb := startRedis(t)
			o := testOptions(0)
			if tc.opts != nil {
				tc.opts(&o)
			}
			f := newTF(t, rdb, o)
			f.add("m", two...)
			tc.run(t, f)
		})
	}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// The frontier reports a Crawl-delay above the cap once per host and value (the outcome
// that stores it), so the service logs it once, while every capped delay is flagged.
func TestCappedCrawlDelayReportedOnce(t *testing.T) {
	t.Parallel()
	rdb := startRedis(t)
	f := newTF(t, rdb, testOptions(0)) // cap 30s
	var us []crawlmsg.Discovered
	for i := range 10 {
		us = append(us, crawlmsg.Discovered{URL: "http://a.example/" + string(rune('a'+i))})
	}
	f.add("m", us...)
	with := func(kind crawlmsg.OutcomeKind, cd float64) func(crawlmsg.FetchTask) crawlmsg.Outcome {
		return func(tk crawlmsg.FetchTask) crawlmsg.Outcome {
			o := outcome(tk, kind, 200)
			o.CrawlDelay = cd
			return o
		}
	}
	// A task that fetched robots.txt and then its URL carries the fresh file's Crawl-delay,
	// none included, as a robots outcome does.
	afterRobots := func(kind crawlmsg.OutcomeKind, cd float64) func(crawlmsg.FetchTask) crawlmsg.Outcome {
		return func(tk crawlmsg.FetchTask) crawlmsg.Outcome {
			o := with(kind, cd)(tk)
			o.Robots, o.Requested = true, true
			return o
		}
	}
	now := t0
	for i, tc := range []struct {
		answer      func(crawlmsg.FetchTask) crawlmsg.Outcome
		capped, new bool
		wait        time.Duration
	}{
		{with(crawlmsg.OutcomeFetched, 3600), true, true, 30 * time.Second},
		{with(crawlmsg.OutcomeFetched, 3600), true, false, 30 * time.Second},
		{with(crawlmsg.OutcomeRobots, 3600), true, false, 30 * time.Second},
		{with(crawlmsg.OutcomeFetched, 7200), true, true, 30 * time.Second},
		{with(crawlmsg.OutcomeRobots, 0), false, false, time.Second},
		{with(crawlmsg.OutcomeFetched, 20), false, false, 20 * time.Second},
		{with(crawlmsg.OutcomeDisallowed, 3600), false, true, 0},
		{with(crawlmsg.OutcomeFetched, 3600), true, false, 30 * time.Second},
		{afterRobots(crawlmsg.OutcomeFetched, 0), false, false, time.Second},
		{with(crawlmsg.OutcomeFetched, 0), false, false, time.Second},
		{afterRobots(crawlmsg.OutcomeDisallowed, 20), false, false, 20 * time.Second},
		{with(crawlmsg.OutcomeFetched, 0), false, false, 20 * time.Second},
	} {
		ap := f.step(now, tc.answer)
		if ap.CrawlDelayCapped != tc.capped || ap.NewCappedCrawlDelay != tc.new {
			t.Fatalf("outcome %d: capped %v new %v, want %v %v", i, ap.CrawlDelayCapped, ap.NewCappedCrawlDelay, tc.capped, tc.new)
		}
		if got := ap.Next.Sub(now); got != tc.wait {
			t.Fatalf("outcome %d: waits %s, want %s", i, got, tc.wait)
		}
		now = ap.Next
	}
}
