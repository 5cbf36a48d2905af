package itest

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/trawl/trawl/services/scheduler/internal/frontier"
	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/policy"
	"github.com/trawl/trawl/shared/testwait"
	"github.com/trawl/trawl/shared/urlnorm"
)

func TestDispatchOneTaskPerHost(t *testing.T) {
	t.Parallel()
	rdb := startRedis(t)
	f := newTF(t, rdb, testOptions(0))
	f.add("m1", urls(0, "http://a.example/1", "http://a.example/2", "http://b.example/1", "http://a.example/3", "https://c.example:8443/x")...)

	tasks := f.dispatch(t0, 100)
	if got := hostsOf(tasks); !slices.Equal(got, []string{"a.example", "b.example", "c.example"}) {
		t.Fatalf("dispatched hosts %v, want one task each for a, b, c", got)
	}
	for _, tk := range tasks {
		if tk.Host == "a.example" && tk.URL != "http://a.example/1" {
			t.Errorf("a.example dispatched %s, want its first URL", tk.URL)
		}
		if tk.Deadline != t0.Add(f.Options().LeaseTTL).UnixMilli() || tk.Lease == "" || tk.Shard != 0 || tk.V != crawlmsg.Version {
			t.Errorf("task fields: %+v", tk)
		}
	}
	if again := f.dispatch(t0.Add(time.Hour), 100); len(again) != 0 {
		t.Fatalf("second dispatch before any outcome gave %v; a host must have one task at most", hostsOf(again))
	}
	s := f.stats()
	if s.InFlight != 3 || s.Queued != 2 || s.Dispatched != 3 || s.Active != 3 {
		t.Fatalf("stats after dispatch: %+v", s)
	}
}

func TestTaskHostMatchesURLNorm(t *testing.T) {
	t.Parallel()
	rdb := startRedis(t)
	f := newTF(t, rdb, testOptions(0))
	raw := []string{"http://user:pw@Mixed.Example:8080/a", "http://[2001:db8::1]:81/", "http://bücher.example/", "https://x.example?q=1"}
	var ds []crawlmsg.Discovered
	for _, r := range raw {
		n, err := urlnorm.Normalize(r)
		if err != nil {
			t.Fatal(err)
		}
		ds = append(ds, crawlmsg.Discovered{URL: n})
	}
	f.add("m", ds...)
	tasks := f.dispatch(t0, 100)
	if len(tasks) != len(raw) {
		t.Fatalf("dispatched %d tasks, want %d", len(tasks), len(raw))
	}
	for _, tk := range tasks {
		want, _ := urlnorm.Host(tk.URL)
		if tk.Host != want {
			t.Errorf("task for %s has host %q, urlnorm.Host says %q", tk.URL, tk.Host, want)
		}
	}
}

// TestNextFetchTime checks t_e after an outcome, read from the heap score.
func TestNextFetchTime(t *testing.T) {
	t.Parallel()
	const host = "a.example"
	now := t0.Add(10 * time.Second)
	for _, tc := range []struct {
		name   string
		opts   func(*frontier.Options)
		prep   func(f *tf) // earlier history of the host
		out    func(o *crawlmsg.Outcome)
		now    time.Time     // dispatch time (default t0+10s)
		doneAt time.Time     // when the outcome arrives (default: now)
		want   time.Duration // t_e - doneAt
		capped bool
		result frontier.Result
	}{
		{name: "min delay wins", out: func(o *crawlmsg.Outcome) { o.DurationMs = 100 }, want: time.Second, result: frontier.ResultFetched},
		{name: "k times response time", out: func(o *crawlmsg.Outcome) { o.DurationMs = 400 }, want: 2 * time.Second, result: frontier.ResultFetched},
		{name: "crawl-delay", out: func(o *crawlmsg.Outcome) { o.DurationMs = 100; o.CrawlDelay = 3 }, want: 3 * time.Second, result: frontier.ResultFetched},
		{name: "crawl-delay capped", out: func(o *crawlmsg.Outcome) { o.CrawlDelay = 3600 }, want: 30 * time.Second, capped: true, result: frontier.ResultFetched},
		{name: "fractional crawl-delay", out: func(o *crawlmsg.Outcome) { o.CrawlDelay = 1.5 }, want: 1500 * time.Millisecond, result: frontier.ResultFetched},
		{
			name: "stored crawl-delay applies to later outcomes",
			prep: func(f *tf) { f.cycle(t0, func(o *crawlmsg.Outcome) { o.CrawlDelay = 4 }) },
			want: 4 * time.Second, result: frontier.ResultFetched,
		},
		{
			name: "robots outcome replaces stored crawl-delay",
			prep: func(f *tf) {
				f.cycle(t0, func(o *crawlmsg.Outcome) { o.CrawlDelay = 4 })
				f.cycle(t0.Add(5*time.Second), func(o *crawlmsg.Outcome) { o.Kind = crawlmsg.OutcomeRobots })
			},
			want: time.Second, result: frontier.ResultFetched,
		},
		{name: "min delay zero and fast response", opts: func(o *frontier.Options) { o.MinDelay = 0 }, out: func(o *crawlmsg.Outcome) { o.DurationMs = 0 }, want: 0, result: frontier.ResultFetched},
		{
			name: "no request: never earlier than stored next",
			// The outcome is read on a clock behind the dispatching one (another process).
			prep:   func(f *tf) { f.cycle(t0, func(o *crawlmsg.Outcome) { o.CrawlDelay = 20 }) }, // next = t0+20s
			now:    t0.Add(20 * time.Second),
			doneAt: t0.Add(10 * time.Second),
			out:    func(o *crawlmsg.Outcome) { o.Kind = crawlmsg.OutcomeDisallowed; o.Requested = false },
			want:   10 * time.Second, result: frontier.ResultDisallowed,
		},
		{name: "no request: now", out: func(o *crawlmsg.Outcome) { o.Kind = crawlmsg.OutcomeDisallowed; o.Requested = false }, want: 0, result: frontier.ResultDisallowed},
		{name: "503 first error backs off base", out: func(o *crawlmsg.Outcome) { o.Status = 503 }, want: 30 * time.Second, result: frontier.ResultRetry},
		{name: "429 honours Retry-After", out: func(o *crawlmsg.Outcome) { o.Status = 429; o.RetryAfter = 120 }, want: 120 * time.Second, result: frontier.ResultRetry},
		{name: "Retry-After capped", out: func(o *crawlmsg.Outcome) { o.Status = 503; o.RetryAfter = 86400 }, want: 10 * time.Minute, result: frontier.ResultRetry},
		{
			name: "error streak doubles",
			opts: func(o *frontier.Options) { o.MaxRetries = 10 },
			prep: func(f *tf) {
				f.cycle(t0, func(o *crawlmsg.Outcome) { o.Kind = crawlmsg.OutcomeError })
				f.cycle(t0.Add(time.Hour), func(o *crawlmsg.Outcome) { o.Kind = crawlmsg.OutcomeError })
			},
			now:  t0.Add(2 * time.Hour),
			out:  func(o *crawlmsg.Outcome) { o.Kind = crawlmsg.OutcomeError },
			want: 120 * time.Second, result: frontier.ResultRetry,
		},
		{
			name: "error streak capped",
			opts: func(o *frontier.Options) { o.MaxRetries = 50; o.MaxBackoff = 100 * time.Second },
			prep: func(f *tf) {
				for i := range 5 {
					f.cycle(t0.Add(time.Duration(i)*time.Hour), func(o *crawlmsg.Outcome) { o.Kind = crawlmsg.OutcomeError })
				}
			},
			now:  t0.Add(10 * time.Hour),
			out:  func(o *crawlmsg.Outcome) { o.Kind = crawlmsg.OutcomeError },
			want: 100 * time.Second, result: frontier.ResultRetry,
		},
		{
			name: "success resets the streak",
			opts: func(o *frontier.Options) { o.MaxRetries = 10 },
			prep: func(f *tf) {
				f.cycle(t0, func(o *crawlmsg.Outcome) { o.Kind = crawlmsg.OutcomeError })
				f.cycle(t0.Add(time.Hour), func(o *crawlmsg.Outcome) { o.Kind = crawlmsg.OutcomeError })
				f.cycle(t0.Add(2*time.Hour), func(o *crawlmsg.Outcome) {})
			},
			now:  t0.Add(3 * time.Hour),
			out:  func(o *crawlmsg.Outcome) { o.Kind = crawlmsg.OutcomeError },
			want: 30 * time.Second, result: frontier.ResultRetry,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rdb := startRedis(t)
			o := testOptions(0)
			if tc.opts != nil {
				tc.opts(&o)
			}
			f := newTF(t, rdb, o)
			var paths []crawlmsg.Discovered
			for i := range 10 {
				paths = append(paths, crawlmsg.Discovered{URL: fmt.Sprintf("http://%s/%d", host, i)})
			}
			f.add("m", paths...)
			if tc.prep != nil {
				tc.prep(f)
			}
			when := now
			if !tc.now.IsZero() {
				when = tc.now
			}
			tasks := f.dispatch(when, 10)
			if len(tasks) != 1 {
				t.Fatalf("dispatched %d tasks, want 1", len(tasks))
			}
			out := ok200(tasks[0])
			if tc.out != nil {
				tc.out(&out)
			}
			if !tc.doneAt.IsZero() {
				when = tc.doneAt
			}
			ap := f.complete(when, out)[0]
			if ap.Result != tc.result || ap.CrawlDelayCapped != tc.capped {
				t.Fatalf("applied %+v, want result %s capped %v", ap, tc.result, tc.capped)
			}
			if !ap.Next.Equal(when.Add(tc.want)) {
				t.Fatalf("Applied.Next = when+%s, want when+%s", ap.Next.Sub(when), tc.want)
			}
			f.wantHeap(host, when.Add(tc.want))
			if got := f.hostField(host, "next"); got != fmt.Sprint(when.Add(tc.want).UnixMilli()) {
				t.Fatalf("host:%s next = %s, want %d", host, got, when.Add(tc.want).UnixMilli())
			}
		})
	}
}

// cycle dispatches the host's next task at now and completes it with a 200 changed by mod.
func (f *tf) cycle(now time.Time, mod func(o *crawlmsg.Outcome)) frontier.Applied {
	f.t.Helper()
	tasks := f.dispatch(now, 1)
	if len(tasks) != 1 {
		f.t.Fatalf("cycle at t0+%s: dispatched %d tasks, want 1", now.Sub(t0), len(tasks))
	}
	out := ok200(tasks[0])
	mod(&out)
	return f.complete(now, out)[0]
}

// Lease tokens are "<shard>-<seq>-<nonce>": unique even when Redis loses its last writes
// and the seq counter issues a number again, so JetStream's duplicate window (task:,
// page:<token>; outcome batches have ids of their own) never drops a new task as a copy
// of a lost one.
func TestLeaseTokensSurviveCounterRollback(t *testing.T) {
	t.Parallel()
	rdb := startRedis(t)
	f := newTF(t, rdb, testOptions(3))
	f.add("m", urls(0, "http://a.example/1", "http://a.example/2")...)
	first := f.dispatch(t0, 10)[0]
	if parts := strings.Split(first.Lease, "-"); len(parts) != 3 || parts[0] != "3" || parts[1] != "1" || parts[2] == "" {
		t.Fatalf("token %q, want 3-1-<nonce>", first.Lease)
	}
	f.complete(t0, ok200(first))
	must(t, rdb.Set(testwait.Context(t), f.Keyspace().Key("seq"), 0, 0).Err()) // the counter's write was lost
	again := f.dispatch(t0.Add(time.Second), 10)[0]
	if !strings.HasPrefix(again.Lease, "3-1-") || again.Lease == first.Lease {
		t.Fatalf("after a counter rollback token %q, first was %q: want the same seq, a different token", again.Lease, first.Lease)
	}
}

// A URL's kind (a page requisite, a sitemap) and its embed hops live in the queue entry's
// extension: they must reach the fetch task, and survive the scripts' requeues (a retry
// after an error, a lease that expired), which rebuild the entry with a new attempt.
func TestQueuedKindSurvivesRequeues(t *testing.T) {
	t.Parallel()
	rdb := startRedis(t)
	f := newTF(t, rdb, testOptions(0))
	css := crawlmsg.Discovered{URL: "http://a.example/site.css", Depth: 2, Kind: crawlmsg.KindEmbed, Embeds: 1}
	sm := crawlmsg.Discovered{URL: "http://b.example/sitemap.xml", Kind: crawlmsg.KindSitemap, Under: "http://a.example/"}
	page := crawlmsg.Discovered{URL: "http://c.example/", Depth: 1}
	f.add("m1", css, sm, page)

	want := func(tk crawlmsg.FetchTask, attempt int) {
		t.Helper()
		var d crawlmsg.Discovered
		for _, u := range []crawlmsg.Discovered{css, sm, page} {
			if u.URL == tk.URL {
				d = u
			}
		}
		if tk.Kind != d.Kind || tk.Embeds != d.Embeds || tk.Under != d.Under || tk.Depth != d.Depth || tk.Attempt != attempt {
			t.Fatalf("task %+v, want kind %q embeds %d under %q depth %d attempt %d", tk, d.Kind, d.Embeds, d.Under, d.Depth, attempt)
		}
	}
	tasks := f.dispatch(t0, 10)
	if len(tasks) != 3 {
		t.Fatalf("dispatched %d tasks, want 3", len(tasks))
	}
	for _, tk := range tasks {
		want(tk, 0)
	}
	// An error requeues with attempt+1; a plain page's entry must stay extension-free.
	for _, tk := range tasks {
		f.complete(t0, outcome(tk, crawlmsg.OutcomeError, 0))
	}
	if q := f.backQueue("c.example"); len(q) != 1 || q[0] != "1 0 1 http://c.example/" {
		t.Fatalf("plain page requeued as %q, want no extension", q)
	}
	later := t0.Add(time.Hour)
	retried := f.dispatch(later, 10)
	if len(retried) != 3 {
		t.Fatalf("dispatched %d retries, want 3", len(retried))
	}
	for _, tk := range retried {
		want(tk, 1)
	}
	// Leases that run out are requeued by the reaper, again rebuilding the entry.
	if n := f.reap(later.Add(f.Options().LeaseTTL + time.Second)); n != 3 {
		t.Fatalf("reaped %d leases, want 3", n)
	}
	for _, tk := range f.dispatch(later.Add(2*time.Hour), 10) {
		want(tk, 2)
	}
	f.check()
}

// The host table is a Redis hash table, not a listpack that each lookup would search from
// its start, and the field that keeps it so (frontierkeys.Wide) counts as no host: not
// against the back queues (B), not in the stats, not to ParkBlocked. The per-rule counters
// are kept a hash table the same way.
func TestHostTableIsAHashTable(t *testing.T) {
	t.Parallel()
	rdb := startRedis(t)
	o := testOptions(0)
	o.BackQueues = 2
	f := newTF(t, rdb, o)
	ctx := testwait.Context(t)
	encoding := func(key string) string {
		t.Helper()
		e, err := rdb.ObjectEncoding(ctx, key).Result()
		if err != nil {
			t.Fatalf("OBJECT ENCODING %s: %v", key, err)
		}
		return e
	}
	f.add("m1", urls(0, "http://a.example/1", "http://b.example/1", "http://c.example/1", "http://d.example/1")...)
	tasks := f.dispatch(t0, 10)
	if got := hostsOf(tasks); !slices.Equal(got, []string{"a.example", "b.example"}) {
		t.Fatalf("dispatched %v with 2 back queues, want a.example and b.example", got)
	}
	if e := encoding(f.Keyspace().Key("hosts")); e != "hashtable" {
		t.Fatalf("host table encoded %s, want hashtable", e)
	}
	if s := f.stats(); s.Active != 2 {
		t.Fatalf("active hosts %d, want 2", s.Active)
	}
	now := t0.Add(time.Second)
	for _, tk := range tasks {
		f.complete(now, ok200(tk))
	}
	if got := hostsOf(f.dispatch(now.Add(time.Hour), 10)); !slices.Equal(got, []string{"c.example", "d.example"}) {
		t.Fatalf("dispatched %v once both back queues were free, want c.example and d.example", got)
	}
	if s := f.stats(); s.Active != 2 {
		t.Fatalf("active hosts %d, want 2", s.Active)
	}
	f.check()
	f.syncPolicy(rules(t, 1, hostRule("c.example", policy.Rule{Block: pbool(true)})))
	if n, err := f.ParkBlocked(ctx); err != nil || n != 0 {
		t.Fatalf("ParkBlocked = %d, %v; want 0 (c.example's one URL is out), nil", n, err)
	}
	if e := encoding(f.Keyspace().Key("policy-stats")); e != "hashtable" {
		t.Fatalf("per-rule counters encoded %s, want hashtable", e)
	}
}
