package itest

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/trawl/trawl/devstack/redisproc"
	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/testwait"
	"github.com/trawl/trawl/shared/topology"
)

// Every outcome that ends its URL unarchived is logged on CRAWL_SKIPPED with its reason,
// named as the frontier names it; a fetched URL is never logged, and no entry is empty
// (a batch without a skip publishes nothing).
func TestSkippedURLsLoggedWithReason(t *testing.T) {
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
		return st.Accepted == int64(len(batch.URLs)) && st.Terminal() == st.Accepted && st.Inflight == 0
	})

	got := map[string]string{}
	testwait.Eventually(t, 10*time.Second, "every skip on "+topology.StreamSkipped, func() bool {
		for u, r := range readSkipLog(t, s.js) {
			got[u] = r
		}
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
// test: a batch without a skip must publish nothing.
func readSkipLog(t *testing.T, js jetstream.JetStream) map[string]string {
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
		if m.Subject != topology.SkippedSubject(0) || m.Header.Get("Nats-Msg-Id") == "" {
			t.Errorf("skip log entry %d on %s, id %q", seq, m.Subject, m.Header.Get("Nats-Msg-Id"))
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
		return st.Fetched == 1 && st.Inflight == 0
	})
	// The host's budget is spent: what it links to now is refused by the add script.
	s.publish(topology.FrontierSubject(0), &crawlmsg.FrontierBatch{URLs: []crawlmsg.Discovered{
		{URL: "http://h.example/a", Depth: 1},
		{URL: "http://h.example/b", Depth: 1},
	}})
	want := map[string]string{
		"http://deep.example/x": crawlmsg.ReasonTooDeep,
		"http://h.example/a":    crawlmsg.ReasonOverBudget,
		"http://h.example/b":    crawlmsg.ReasonOverBudget,
	}
	var got map[string]string
	testwait.Eventually(t, 10*time.Second, "every refused URL on "+topology.StreamSkipped, func() bool {
		got = readSkipLog(t, s.js)
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
	if st := s.stats(); st.OverBudget != 2 || st.OutOfScope != 1 {
		t.Errorf("counted %d over budget and %d out of scope, want 2 and 1 (the log's)", st.OverBudget, st.OutOfScope)
	}
}
