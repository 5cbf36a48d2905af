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

func failing(kind crawlmsg.OutcomeKind, status int, permanent bool) func(crawlmsg.FetchTask) crawlmsg.Outcome {
	return func(tk crawlmsg.FetchTask) crawlmsg.Outcome {
		o := outcome(tk, kind, status)
		o.Requested = true
		o.Permanent = permanent
		return o
	}
}

var (
	fail503        = failing(crawlmsg.OutcomeFetched, 503, false)
	failErr        = failing(crawlmsg.OutcomeError, 0, false)
	failPermanent  = failing(crawlmsg.OutcomeError, 0, true)
	failNoSuchHost = func(tk crawlmsg.FetchTask) crawlmsg.Outcome {
		o := failPermanent(tk)
		o.Error = "dns: no such host: " + tk.Host
		return o
	}
	failRobotsUnav  = failing(crawlmsg.OutcomeRobotsUnavailable, 503, false)
	answer429       = failing(crawlmsg.OutcomeFetched, 429, false)
	answer200       = failing(crawlmsg.OutcomeFetched, 200, false)
	answerRobots    = failing(crawlmsg.OutcomeRobots, 200, false)
	neutralDisallow = func(tk crawlmsg.FetchTask) crawlmsg.Outcome { return outcome(tk, crawlmsg.OutcomeDisallowed, 0) }
)

// step dispatches the host's next task when it is due and applies answer's outcome.
func (f *tf) step(now time.Time, answer func(crawlmsg.FetchTask) crawlmsg.Outcome) frontier.Applied {
	f.t.Helper()
	tasks := f.dispatch(now, 10)
	if len(tasks) != 1 {
		f.t.Fatalf("at t0+%s dispatched %d tasks, want 1", now.Sub(t0), len(tasks))
	}
	return f.complete(now, answer(tasks[0]))[0]
}

func TestHostRetirement(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		retire  int
		answers []func(crawlmsg.FetchTask) crawlmsg.Outcome
		retired bool
	}{
		// Each failure without an answer sends its URL to the tail of the queue, so the
		// next request asks the host with another URL.
		{"failures without an answer retire", 3, []func(crawlmsg.FetchTask) crawlmsg.Outcome{failErr, failRobotsUnav, failErr}, true},
		{"a URL's retries count once", 3, []func(crawlmsg.FetchTask) crawlmsg.Outcome{fail503, fail503, fail503, fail503, fail503, fail503}, false},
		{"a 5xx after failures without an answer retires", 3, []func(crawlmsg.FetchTask) crawlmsg.Outcome{failErr, failErr, fail503}, true},
		{"a name that does not exist retires at once", 3, []func(crawlmsg.FetchTask) crawlmsg.Outcome{failNoSuchHost}, true},
		{"a URL's own permanent error says nothing of the host", 3, []func(crawlmsg.FetchTask) crawlmsg.Outcome{failPermanent, failPermanent, failPermanent, failPermanent}, false},
		{"a success resets the streak", 3, []func(crawlmsg.FetchTask) crawlmsg.Outcome{fail503, fail503, answer200, fail503, fail503}, false},
		{"robots.txt resets the streak", 3, []func(crawlmsg.FetchTask) crawlmsg.Outcome{fail503, fail503, answerRobots, fail503, fail503}, false},
		{"429 is an answer", 3, []func(crawlmsg.FetchTask) crawlmsg.Outcome{failErr, failErr, answer429, failErr, failErr}, false},
		{"no request neither counts nor resets", 3, []func(crawlmsg.FetchTask) crawlmsg.Outcome{failErr, neutralDisallow, failErr, neutralDisallow, failErr}, true},
		{"zero never retires", 0, []func(crawlmsg.FetchTask) crawlmsg.Outcome{failErr, failErr, failErr, failErr, failErr, failErr, failErr, failErr, failErr, failErr}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rdb := startRedis(t)
			o := testOptions(0)
			o.RetireAfter = tc.retire
			o.MaxRetries = 100
			o.RetryBackoff = time.Second
			o.MaxBackoff = time.Second
			f := newTF(t, rdb, o)
			var us []crawlmsg.Discovered
			for i := range 12 {
				us = append(us, crawlmsg.Discovered{URL: fmt.Sprintf("http://a.example/%d", i)})
			}
			f.add("m", us...)
			now := t0
			for i, answer := range tc.answers {
				queued := f.stats().Queued
				ap := f.step(now, answer)
				last := i == len(tc.answers)-1
				if ap.Retired != (tc.retired && last) {
					t.Fatalf("step %d: Retired = %v", i, ap.Retired)
				}
				if ap.Retired {
					if ap.Result != frontier.ResultFailed {
						t.Fatalf("retiring outcome result %s, want failed", ap.Result)
					}
					// Everything queued but the URL in hand ends with the host.
					if ap.RetiredQueued != int(queued)-1 {
						t.Fatalf("RetiredQueued = %d, want %d", ap.RetiredQueued, queued-1)
					}
				}
				now = ap.Next.Add(time.Millisecond)
			}
			s := f.stats()
			retiredAt := f.hostField("a.example", "retired")
			if !tc.retired {
				if s.Retired != 0 || retiredAt != "" || s.Queued == 0 {
					t.Fatalf("host retired unexpectedly: %+v retired=%q", s, retiredAt)
				}
				return
			}
			if s.Retired != 1 || retiredAt == "" {
				t.Fatalf("host not marked retired: %+v retired=%q", s, retiredAt)
			}
			if s.Queued != 0 || s.InFlight != 0 || s.Active != 0 || s.InHeap != 0 {
				t.Fatalf("retired host still holds work or a back queue: %+v", s)
			}
			if s.Failed+s.Disallowed+s.Fetched != 12 {
				t.Fatalf("every URL must be terminal: %+v", s)
			}
			if n := rdb.Exists(testwait.Context(t), f.Keyspace().Key("bq", "a.example")).Val(); n != 0 {
				t.Fatal("back queue of the retired host still exists")
			}
			// Later URLs of the host end as failed on admission; other hosts are unaffected.
			before := s.Failed
			if n := f.add("later", urls(1, "http://a.example/later", "http://b.example/")...); n != 1 {
				t.Fatalf("queued %d after retirement, want only b.example", n)
			}
			if s := f.stats(); s.Failed != before+1 {
				t.Fatalf("late URL of a retired host: failed %d, want %d", s.Failed, before+1)
			}
			if got := f.dispatch(now, 10); len(got) != 1 || got[0].Host != "b.example" {
				t.Fatalf("after retirement dispatched %v, want only b.example", hostsOf(got))
			}
		})
	}
}

// URLs of a host that wait in a front queue when it is retired (every back queue was
// taken) end as failed when the router reaches them, without taking a back queue.
func TestRetiredHostURLsWaitingInFrontQueues(t *testing.T) {
	t.Parallel()
	rdb := startRedis(t)
	o := testOptions(0)
	o.BackQueues = 1
	o.RetireAfter = 1
	f := newTF(t, rdb, o)
	f.add("m", urls(0, "http://a.example/1", "http://a.example/2", "http://b.example/1", "http://a.example/3", "http://a.example/4", "http://c.example/1")...)
	ap := f.step(t0, failErr)
	if !ap.Retired || ap.RetiredQueued != 1 {
		t.Fatalf("applied %+v, want retired with /2 from its back queue", ap)
	}
	// Freeing a.example's back queue admitted b.example; routing went on past a's waiting
	// URLs (failed) up to c.example, which waits for the one back queue.
	s := f.stats()
	if s.Failed != 4 || s.Active != 1 || s.Queued != 2 {
		t.Fatalf("stats %+v: want a.example's 4 URLs failed, b.example active, c.example waiting", s)
	}
	if got := f.step(t0.Add(time.Second), answer200); got.Result != frontier.ResultFetched {
		t.Fatalf("b.example: %+v", got)
	}
	if got := f.dispatch(t0.Add(2*time.Second), 10); len(got) != 1 || got[0].Host != "c.example" {
		t.Fatalf("dispatched %v, want c.example", hostsOf(got))
	}
}

// A host whose every outcome is robots-unavailable must not keep its URLs for hours: the
// backoff follows the documented RETRY_BACKOFF·2^(streak-1) capped at MAX_BACKOFF, and the
// streak retires the host after RETIRE_AFTER steps. Without retirement each URL still ends
// as failed after MAX_RETRIES, at the capped backoff each time.
func TestRobotsUnavailableHostEndsInBoundedTime(t *testing.T) {
	t.Parallel()
	const nURLs = 20
	def := frontier.DefaultOptions(0)
	for _, tc := range []struct {
		name      string
		retire    int
		wantSteps int
	}{
		{"retired after the default streak", def.RetireAfter, def.RetireAfter},
		{"without retirement every URL fails after max retries", 0, nURLs * (def.MaxRetries + 1)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rdb := startRedis(t)
			o := testOptions(0) // production defaults: 30s base, 10m cap, 3 retries
			o.RetireAfter = tc.retire
			f := newTF(t, rdb, o)
			var us []crawlmsg.Discovered
			for i := range nURLs {
				us = append(us, crawlmsg.Discovered{URL: fmt.Sprintf("http://dead.example/%d", i)})
			}
			f.add("m", us...)
			now, steps := t0, 0
			var bound time.Duration
			for {
				s := f.stats()
				if s.Queued == 0 && s.InFlight == 0 {
					break
				}
				if steps > 10*tc.wantSteps {
					t.Fatalf("no end after %d steps: %+v", steps, s)
				}
				steps++
				ap := f.step(now, failRobotsUnav)
				// The streak is the number of failures so far, so step k waits base·2^(k-1).
				want := o.RetryBackoff
				for range steps - 1 {
					want = min(2*want, o.MaxBackoff)
				}
				if got := ap.Next.Sub(now); got != want {
					t.Fatalf("step %d waits %s, want %s (streak %d)", steps, got, want, steps)
				}
				if got := f.hostField("dead.example", "err"); got != fmt.Sprint(steps) {
					t.Fatalf("step %d: stored streak %s", steps, got)
				}
				bound += want
				now = ap.Next
			}
			if steps != tc.wantSteps {
				t.Fatalf("ended after %d steps, want %d", steps, tc.wantSteps)
			}
			s := f.stats()
			if s.Failed != nURLs || s.Accepted != nURLs || s.Active != 0 {
				t.Fatalf("stats %+v: want all %d URLs failed and the back queue freed", s, nURLs)
			}
			t.Logf("%d steps, %s of backoff in all", steps, bound)
			if tc.retire > 0 && bound > time.Hour {
				t.Fatalf("a retired host took %s of backoff", bound)
			}
		})
	}
}

// crawlHost runs a.example's tasks one after another, each as soon as it is due, answering
// each with answer, until the host holds no URL; it returns the requests made.
func (f *tf) crawlHost(answer func(crawlmsg.FetchTask) crawlmsg.Outcome) int {
	f.t.Helper()
	now, requests := t0, 0
	for s := f.stats(); s.Queued+s.InFlight > 0; s = f.stats() {
		if requests > 1000 {
			f.t.Fatalf("a.example still holds URLs after %d requests: %+v", requests, s)
		}
		if next, ok := f.heapScore("a.example"); ok && next.After(now) {
			now = next
		}
		tasks := f.dispatch(now, 10)
		if len(tasks) != 1 {
			f.t.Fatalf("at t0+%s dispatched %d tasks, want 1", now.Sub(t0), len(tasks))
		}
		f.complete(now, answer(tasks[0]))
		requests++
	}
	return requests
}

// A site is not retired because a few of its pages always answer 500, wherever they sit in
// its queue: each of them is retried back to back, but counts once in the host's failure
// streak, and the host's answers are mostly good. Before, two such pages in a row made
// eight failed requests, TRAWL_RETIRE_AFTER, and retired the host with its good pages
// still queued.
func TestBrokenPagesDoNotRetireTheirHost(t *testing.T) {
	t.Parallel()
	const good = 28
	for _, tc := range []struct {
		name string
		bad  []int // positions of the always-500 URLs in the queue of good+len(bad)
	}{
		{"two first", []int{0, 1}},
		{"three first", []int{0, 1, 2}},
		{"three after the good ones", []int{28, 29, 30}},
		{"three in the middle", []int{14, 15, 16}},
		{"three apart", []int{3, 17, 30}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rdb := startRedis(t)
			o := testOptions(0)
			o.RetireAfter = 8
			o.MaxRetries = 3
			f := newTF(t, rdb, o)
			broken := map[string]bool{}
			var us []crawlmsg.Discovered
			for i := range good + len(tc.bad) {
				u := fmt.Sprintf("http://a.example/%d", i)
				if slices.Contains(tc.bad, i) {
					broken[u] = true
				}
				us = append(us, crawlmsg.Discovered{URL: u})
			}
			f.add("m", us...)
			fetched := map[string]bool{}
			requests := f.crawlHost(func(tk crawlmsg.FetchTask) crawlmsg.Outcome {
				if broken[tk.URL] {
					return fail503(tk)
				}
				fetched[tk.URL] = true
				return answer200(tk)
			})
			s := f.stats()
			if s.Retired != 0 || f.hostField("a.example", "retired") != "" {
				t.Fatalf("a.example retired after %d requests: %+v", requests, s)
			}
			if len(fetched) != good || s.Fetched != good || s.Failed != int64(len(tc.bad)) {
				t.Fatalf("requested %d good URLs, stats %+v; want all %d fetched and the %d broken failed", len(fetched), s, good, len(tc.bad))
			}
			if want := good + len(tc.bad)*(o.MaxRetries+1); requests != want {
				t.Fatalf("%d requests, want %d: each broken URL tried %d times", requests, want, o.MaxRetries+1)
			}
		})
	}
}

// A host that fails as a host is still retired: one whose every request fails at the
// connection level after the configured streak of requests (each to another URL), one
// whose every page answers 5xx after the streak of URLs, and one that served pages before
// every answer turned to 5xx once most of its last answers are errors.
func TestFailingHostIsRetired(t *testing.T) {
	t.Parallel()
	const urlsQueued, retireAfter = 60, 8
	always500 := func(tk crawlmsg.FetchTask) crawlmsg.Outcome { return fail503(tk) }
	for _, tc := range []struct {
		name   string
		answer func(i int) func(crawlmsg.FetchTask) crawlmsg.Outcome // by URL number
		// requests before the host is retired, and URLs that ended fetched
		requests, fetched int
	}{
		{"connections refused", func(int) func(crawlmsg.FetchTask) crawlmsg.Outcome { return failErr }, retireAfter, 0},
		{"robots.txt unavailable", func(int) func(crawlmsg.FetchTask) crawlmsg.Outcome { return failRobotsUnav }, retireAfter, 0},
		// Each URL is tried 1+MaxRetries times; the 8th URL's first answer retires the host.
		{"every page 5xx", func(int) func(crawlmsg.FetchTask) crawlmsg.Outcome { return always500 }, (retireAfter-1)*4 + 1, 0},
		// 10 good answers then errors: the 32 answers' window holds more errors than good
		// ones from the 11th error on.
		{"5xx after serving pages", func(i int) func(crawlmsg.FetchTask) crawlmsg.Outcome {
			if i < 10 {
				return answer200
			}
			return always500
		}, 10 + 10*4 + 1, 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rdb := startRedis(t)
			o := testOptions(0)
			o.RetireAfter = retireAfter
			o.MaxRetries = 3
			f := newTF(t, rdb, o)
			var us []crawlmsg.Discovered
			num := map[string]int{}
			for i := range urlsQueued {
				u := fmt.Sprintf("http://a.example/%d", i)
				num[u] = i
				us = append(us, crawlmsg.Discovered{URL: u})
			}
			f.add("m", us...)
			var retiredAt int
			requests := 0
			f.crawlHost(func(tk crawlmsg.FetchTask) crawlmsg.Outcome {
				requests++
				return tc.answer(num[tk.URL])(tk)
			})
			retiredAt = requests
			s := f.stats()
			if s.Retired != 1 || f.hostField("a.example", "retired") == "" {
				t.Fatalf("a.example not retired after %d requests: %+v", requests, s)
			}
			if retiredAt != tc.requests || s.Fetched != int64(tc.fetched) || s.Failed != urlsQueued-int64(tc.fetched) {
				t.Fatalf("retired after %d requests with stats %+v; want %d requests, %d fetched, the rest failed", retiredAt, s, tc.requests, tc.fetched)
			}
		})
	}
}
