package itest

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/trawl/trawl/devstack/redisproc"
	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/policy"
	"github.com/trawl/trawl/shared/testwait"
	"github.com/trawl/trawl/shared/topology"
)

// Every outcome that ends its URL unarchived is logged on CRAWL_SKIPPED with its reason,
// named as the frontier names it; a fetched URL is never logged, and no entry is empty
// (a batch without a skip publishes nothing).
func TestSkippedURLsLoggedWithReason(t *testing.T) {
	t.Parallel()
	s := startStack(t, redisproc.Options{}, map[string]string{"TRAWL_MAX_RETRIES": "0"})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	want := map[string]string{
		"http://a.example/robots-forbid": crawlmsg.ReasonDisallowed,
		"http://b.example/narrowed":      crawlmsg.ReasonOutOfScope,
		"http://c.example/bad":           crawlmsg.FailedReason(crawlmsg.OutcomeError),
		"http://d.example/always-503":    crawlmsg.FailedReason(crawlmsg.OutcomeFetched),
	}
	answer := map[string]func(crawlmsg.FetchTask) crawlmsg.Outcome{
		"http://a.example/robots-forbid": func(tk crawlmsg.FetchTask) crawlmsg.Outcome {
			return outcome(tk, crawlmsg.OutcomeDisallowed, 0)
		},
		"http://b.example/narrowed": func(tk crawlmsg.FetchTask) crawlmsg.Outcome {
			return outcome(tk, crawlmsg.OutcomeOutOfScope, 0)
		},
		"http://c.example/bad": func(tk crawlmsg.FetchTask) crawlmsg.Outcome {
			o := outcome(tk, crawlmsg.OutcomeError, 0)
			o.Permanent, o.Error = true, "unsupported scheme"
			return o
		},
		// A 5xx is retried; with no retry left it ends failed.
		"http://d.example/always-503": func(tk crawlmsg.FetchTask) crawlmsg.Outcome {
			o := fetched200(tk)
			o.Status = 503
			return o
		},
	}
	s.runFetcher(ctx, func(tk crawlmsg.FetchTask) crawlmsg.Outcome {
		if a := answer[tk.URL]; a != nil {
			return a(tk)
		}
		return fetched200(tk)
	})
	var batch crawlmsg.FrontierBatch
	for u := range want {
		batch.URLs = append(batch.URLs, crawlmsg.Discovered{URL: u})
	}
	for _, u := range []string{"http://e.example/", "http://e.example/two", "http://a.example/fine"} {
		batch.URLs = append(batch.URLs, crawlmsg.Discovered{URL: u})
	}
	s.publish(topology.FrontierSubject(0), &batch)
	testwait.Eventually(t, 30*time.Second, "frontier drained", func() bool {
		st := s.stats()
		return st.Accepted == int64(len(batch.URLs)) && st.Terminal() == st.Accepted && st.InFlight == 0
	})

	waitSkipLog(t, s, "skipped", true, want)
}

// waitSkipLog waits until the skip log lists as many URLs as want, then requires it to list
// exactly want: each URL with its reason, and nothing else.
func waitSkipLog(t *testing.T, s *stack, what string, needID bool, want map[string]string) {
	t.Helper()
	var got map[string]string
	testwait.Eventually(t, 10*time.Second, "every "+what+" URL on "+topology.StreamSkipped, func() bool {
		got = readSkipLog(t, s.js, needID)
		return len(got) >= len(want)
	})
	for u, r := range want {
		if got[u] != r {
			t.Errorf("%s logged as %q, want %q", u, got[u], r)
		}
	}
	if len(got) != len(want) {
		t.Errorf("skip log %v, want only %v", got, want)
	}
}

// readSkipLog reads every entry of CRAWL_SKIPPED: URL → reason. An empty entry fails the
// test: a batch without a skip must publish nothing; so does one without its message's
// id when needID (a redelivery's copy must be dropped).
func readSkipLog(t *testing.T, js jetstream.JetStream, needID bool) map[string]string {
	t.Helper()
	ctx := testwait.Context(t)
	st, err := js.Stream(ctx, topology.StreamSkipped)
	if err != nil {
		t.Fatalf("skip log: %v", err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for seq := info.State.FirstSeq; info.State.Msgs > 0 && seq <= info.State.LastSeq; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if err != nil {
			t.Fatalf("skip log entry %d: %v", seq, err)
		}
		if id := m.Header.Get("Nats-Msg-Id"); m.Subject != topology.SkippedSubject(0) || !strings.HasPrefix(id, "skip:") && (needID || id != "") {
			t.Errorf("skip log entry %d on %s, id %q", seq, m.Subject, id)
		}
		var b crawlmsg.SkippedBatch
		if err := crawlmsg.Unmarshal(m.Data, &b); err != nil {
			t.Fatalf("skip log entry %d: %v", seq, err)
		}
		if len(b.URLs) == 0 {
			t.Errorf("skip log entry %d lists no URL", seq)
		}
		for _, u := range b.URLs {
			if u.At == 0 || u.Host == "" {
				t.Errorf("skip log entry %d: %+v lacks its time or host", seq, u)
			}
			out[u.URL] = u.Reason
		}
	}
	return out
}

// The URLs the frontier refuses at admission — deeper than TRAWL_MAX_DEPTH (in Go), over
// their host's page budget (in the add script) — are logged with their reason too; the
// admitted ones are not.
func TestRefusedURLsLoggedWithReason(t *testing.T) {
	t.Parallel()
	s := startStack(t, redisproc.Options{}, map[string]string{"TRAWL_MAX_PAGES_PER_HOST": "1", "TRAWL_MAX_DEPTH": "2"})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s.runFetcher(ctx, fetched200)
	s.publish(topology.FrontierSubject(0), &crawlmsg.FrontierBatch{URLs: []crawlmsg.Discovered{
		{URL: "http://h.example/"},
		{URL: "http://deep.example/x", Depth: 3},
	}})
	testwait.Eventually(t, 30*time.Second, "the budgeted host's first page fetched", func() bool {
		st := s.stats()
		return st.Fetched == 1 && st.InFlight == 0
	})
	// The host's budget is spent: what it links to now is refused by the add script, which
	// names them by their place among the URLs Go sent it (the too-deep one was not).
	s.publish(topology.FrontierSubject(0), &crawlmsg.FrontierBatch{URLs: []crawlmsg.Discovered{
		{URL: "http://deep.example/y", Depth: 3},
		{URL: "http://h.example/a", Depth: 1},
		{URL: "http://other.example/", Depth: 1},
		{URL: "http://h.example/b", Depth: 1},
	}})
	want := map[string]string{
		"http://deep.example/x": crawlmsg.ReasonTooDeep,
		"http://deep.example/y": crawlmsg.ReasonTooDeep,
		"http://h.example/a":    crawlmsg.ReasonOverBudget,
		"http://h.example/b":    crawlmsg.ReasonOverBudget,
	}
	waitSkipLog(t, s, "refused", true, want)
	testwait.Eventually(t, 30*time.Second, "the admitted URL fetched", func() bool {
		st := s.stats()
		return st.Fetched == 2 && st.InFlight == 0
	})
	if st := s.stats(); st.OverBudget != 2 || st.OutOfScope != 2 {
		t.Errorf("counted %d over budget and %d out of scope, want 2 and 2 (the log's)", st.OverBudget, st.OutOfScope)
	}
}

// A rule that narrows the scope mid-crawl ends the host's queued URLs it no longer admits
// (Heritrix's out of scope upon re-examination): each is logged out-of-scope with the rule
// that refused it, and only those.
func TestExcludedByRecheckLogged(t *testing.T) {
	t.Parallel()
	s := startStack(t, redisproc.Options{}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// The host's first task is held until the rule is applied, so the rest stay queued.
	release := make(chan struct{})
	s.runFetcher(ctx, func(tk crawlmsg.FetchTask) crawlmsg.Outcome {
		if tk.URL == "http://a.example/0" {
			select {
			case <-release:
			case <-ctx.Done():
			}
		}
		return fetched200(tk)
	})
	batch := crawlmsg.FrontierBatch{URLs: []crawlmsg.Discovered{{URL: "http://a.example/0"}}}
	want := map[string]string{}
	for i := range 5 {
		u := fmt.Sprintf("http://a.example/x/%d", i)
		want[u] = crawlmsg.ReasonOutOfScope
		batch.URLs = append(batch.URLs, crawlmsg.Discovered{URL: u}, crawlmsg.Discovered{URL: fmt.Sprintf("http://a.example/y/%d", i)})
	}
	s.publish(topology.FrontierSubject(0), &batch)
	testwait.Eventually(t, 10*time.Second, "a.example's other URLs queued behind its first", func() bool {
		st := s.stats()
		return st.InFlight == 1 && st.Queued == 10
	})
	store := policy.NewStore(s.rdb, s.cfg.Common.RedisPrefix)
	if _, _, err := store.Apply(ctx, []policy.Change{{Rule: hostRule("a.example", policy.Rule{Exclude: []string{"/x/"}})}}, "test", 0); err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, 10*time.Second, "the recheck ends /x/ out of scope", func() bool { return s.stats().OutOfScope == 5 })
	close(release)
	testwait.Eventually(t, 20*time.Second, "the rest fetched", func() bool {
		st := s.stats()
		return st.Fetched == 6 && st.Queued == 0 && st.InFlight == 0
	})
	waitSkipLog(t, s, "excluded", false, want)
}

// URLs already queued when their host's page budget runs out are dropped by the dispatch
// script, not refused at admission: each one of them is listed on the skip log as
// over-budget too, as many as the frontier counts, and the fetched ones are not.
func TestQueuedOverBudgetURLsLogged(t *testing.T) {
	t.Parallel()
	const budget, queued = 2, 10
	s := startStack(t, redisproc.Options{}, map[string]string{"TRAWL_MAX_PAGES_PER_HOST": strconv.Itoa(budget)})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mu sync.Mutex
	done := map[string]bool{}
	s.runFetcher(ctx, func(tk crawlmsg.FetchTask) crawlmsg.Outcome {
		mu.Lock()
		done[tk.URL] = true
		mu.Unlock()
		return fetched200(tk)
	})
	// One batch: every URL is admitted (the budget is not spent yet) and waits in the
	// host's queue.
	var batch crawlmsg.FrontierBatch
	for i := range queued {
		batch.URLs = append(batch.URLs, crawlmsg.Discovered{URL: fmt.Sprintf("http://h.example/%d", i)})
	}
	s.publish(topology.FrontierSubject(0), &batch)
	testwait.Eventually(t, 30*time.Second, "frontier drained", func() bool {
		st := s.stats()
		return st.Accepted == queued && st.Terminal() == st.Accepted && st.InFlight == 0
	})
	if st := s.stats(); st.Fetched != budget || st.OverBudget != queued-budget {
		t.Fatalf("fetched %d and over budget %d, want %d and %d", st.Fetched, st.OverBudget, budget, queued-budget)
	}
	want := map[string]string{}
	mu.Lock()
	defer mu.Unlock()
	for _, d := range batch.URLs {
		if !done[d.URL] {
			want[d.URL] = crawlmsg.ReasonOverBudget
		}
	}
	waitSkipLog(t, s, "over-budget", true, want)
}

// A host retired while URLs wait in its queue ends them failed without a request; each is
// listed on the skip log as failed(retired), beside the URL whose failure retired it.
func TestRetiredHostsQueueLogged(t *testing.T) {
	t.Parallel()
	const queued = 10
	s := startStack(t, redisproc.Options{}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mu sync.Mutex
	var asked []string
	s.runFetcher(ctx, func(tk crawlmsg.FetchTask) crawlmsg.Outcome {
		mu.Lock()
		asked = append(asked, tk.URL)
		mu.Unlock()
		return failNoSuchHost(tk) // retires the host at once
	})
	var batch crawlmsg.FrontierBatch
	for i := range queued {
		batch.URLs = append(batch.URLs, crawlmsg.Discovered{URL: fmt.Sprintf("http://gone.example/%d", i)})
	}
	s.publish(topology.FrontierSubject(0), &batch)
	testwait.Eventually(t, 30*time.Second, "frontier drained", func() bool {
		st := s.stats()
		return st.Accepted == queued && st.Terminal() == st.Accepted && st.InFlight == 0
	})
	if st := s.stats(); st.Failed != queued {
		t.Fatalf("%d URLs failed, want all %d", st.Failed, queued)
	}
	mu.Lock()
	defer mu.Unlock()
	want := map[string]string{}
	for _, d := range batch.URLs {
		want[d.URL] = crawlmsg.ReasonRetired
	}
	for _, u := range asked {
		want[u] = crawlmsg.FailedReason(crawlmsg.OutcomeError)
	}
	waitSkipLog(t, s, "failed", true, want)
	if len(asked) != 1 {
		t.Errorf("%d requests, want the one that retired the host: %v", len(asked), asked)
	}
}
