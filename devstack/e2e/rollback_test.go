package e2e

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/trawl/trawl/devstack/stack"
	"github.com/trawl/trawl/devstack/storecopy"
	"github.com/trawl/trawl/devstack/synthweb"
	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/durability"
)

// An OS crash at the default TRAWL_FSYNC=1s rolls each store back to its own last fsync,
// so NATS and Redis come back from different instants. Here each store's files are copied
// from the running crawl at two instants apart (as the OS would have them: every write
// made, none lost but what came later), the whole stack is killed, and started again on
// the copies, in both orders; then NATS alone is rolled back under the other processes,
// which keep running. A URL is fetched twice only if its first request came within the
// stores' window of the earlier copy. Every page with links is parsed: with NATS older, a
// page NATS lost while Redis kept its URL's outcome is fetched again from the scheduler's
// page log, and the new URLs of a discovered message NATS lost after dedup marked them
// seen are published again from dedup's memo (at start, or at the reconnect). Every URL
// of the web is fetched (shared/durability/README.md "Durability").
func TestCrawlSurvivesStoresRolledBackApart(t *testing.T) {
	t.Parallel()
	level := durability.Default
	if level.Window() == 0 {
		t.Fatalf("the default level %s fsyncs every write: nothing to roll back apart", level)
	}
	// Apart by less than the window, as two stores that each fsync once a second are.
	const apart = 1500 * time.Millisecond
	natsBin := buildNATS(t) // so that NATS is SIGKILLed like every other process
	for _, first := range []string{"redis", "nats"} {
		t.Run(first+" older", func(t *testing.T) {
			env := testEnv()
			ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
			defer cancel()
			c := startCrashTest(t, ctx, natsBin, env, level)
			waitFetched(t, c.st, 60)
			second := map[string]string{"redis": "nats", "nats": "redis"}[first]
			snaps := t.TempDir()
			older := time.Now()
			copyDir(t, filepath.Join(c.opts.Dir, first), filepath.Join(snaps, first))
			time.Sleep(apart) // the crawl goes on between the two stores' instants
			copyDir(t, filepath.Join(c.opts.Dir, second), filepath.Join(snaps, second))
			if err := c.st.Crash(); err != nil {
				t.Fatal(err)
			}
			// The stack comes back within the leases: the rolled-back Redis no longer
			// knows the fetch tasks it dispatched after its instant, which NATS may still
			// hold, and the fetcher must answer each without a request rather than run it
			// beside the task dispatched again for its host.
			time.Sleep(time.Second)
			for _, d := range []string{first, second} {
				if err := os.RemoveAll(filepath.Join(c.opts.Dir, d)); err != nil {
					t.Fatal(err)
				}
				if err := os.Rename(filepath.Join(snaps, d), filepath.Join(c.opts.Dir, d)); err != nil {
					t.Fatal(err)
				}
			}
			r := c.resume(t, ctx)
			procMetric(t, ctx, r.stack, "fetcher", "trawl_fetcher_tasks_stale_total")
			judgeRollback(t, c.web, r, env, level, older)
		})
	}
	// One store alone comes back older (its machine crashed, not the others'): every other
	// process keeps running and only reconnects, so what the services check at start
	// against a rollback they must check again when the store is back.
	for _, tc := range []struct {
		store string
		down  time.Duration // how long the store's machine takes to come back
		dir   func(*stack.Stack) string
		kill  func(*stack.Stack) error
		start func(context.Context, *stack.Stack) error
		check func(*testing.T, context.Context, *stack.Stack)
	}{
		{
			store: "nats",
			down:  crashLeaseTTL, // after the leases
			dir:   (*stack.Stack).NATSDir,
			kill:  func(st *stack.Stack) error { return st.NATSProc().Kill() },
			start: func(_ context.Context, st *stack.Stack) error { return st.NATSProc().Start() },
			check: func(t *testing.T, ctx context.Context, st *stack.Stack) {
				if v := procMetric(t, ctx, st, "scheduler", "trawl_scheduler_page_log_checks_total"); v < 2 {
					t.Errorf("trawl_scheduler_page_log_checks_total = %v: the scheduler did not check its page log again on the reconnect", v)
				}
				procMetric(t, ctx, st, "dedup", "trawl_dedup_recovered_total")
				procMetric(t, ctx, st, "scheduler", "trawl_scheduler_pages_readmitted_total")
			},
		},
		{
			store: "redis",
			// Back within the leases of the tasks Redis dispatched in its lost seconds and
			// NATS still holds: the fetcher must check each against Redis rather than make
			// its request beside the task dispatched again for its host.
			down:  2 * time.Second,
			dir:   func(st *stack.Stack) string { return st.Redis().Dir() },
			kill:  func(st *stack.Stack) error { return st.Redis().Kill() },
			start: func(ctx context.Context, st *stack.Stack) error { return st.Redis().Restart(ctx) },
			check: func(t *testing.T, ctx context.Context, st *stack.Stack) {
				procMetric(t, ctx, st, "fetcher", "trawl_fetcher_tasks_stale_total")
				back := 0.0
				for _, proc := range []string{"scheduler", "dedup", "parser"} {
					back += procMetric(t, ctx, st, proc, "trawl_settle_handed_back_total")
				}
				if back == 0 {
					t.Error("no handled message was handed back: the acks of what Redis lost were sent")
				}
			},
		},
	} {
		t.Run(tc.store+" alone older", func(t *testing.T) {
			env := testEnv()
			ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
			defer cancel()
			c := startCrashTest(t, ctx, natsBin, env, level)
			waitFetched(t, c.st, 60)
			snap := filepath.Join(t.TempDir(), tc.store)
			older := time.Now()
			copyDir(t, tc.dir(c.st), snap)
			time.Sleep(apart) // the crawl goes on: what the store will have lost
			if err := tc.kill(c.st); err != nil {
				t.Fatal(err)
			}
			time.Sleep(tc.down)
			if err := os.RemoveAll(tc.dir(c.st)); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(snap, tc.dir(c.st)); err != nil {
				t.Fatal(err)
			}
			if err := tc.start(ctx, c.st); err != nil {
				t.Fatal(err)
			}
			p, err := c.st.WaitIdle(ctx, 250*time.Millisecond, nil)
			if err != nil {
				t.Fatalf("crawl did not finish after %s came back older: %v\n%s", tc.store, err, c.st.Logs(20))
			}
			tc.check(t, ctx, c.st)
			judgeRollback(t, c.web, crawlResult{stack: c.st, web: c.web, progress: p, took: time.Since(c.start), reqs: c.web.Requests()}, env, level, older)
		})
	}
}

// procMetric reads and logs a metric of a stack's first process of a kind.
func procMetric(t *testing.T, ctx context.Context, st *stack.Stack, proc, metric string) float64 {
	t.Helper()
	v, _, err := st.Proc(proc, 0).Metric(ctx, metric)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: %v", metric, v)
	return v
}

// judgeRollback checks a crawl that went on from stores rolled back to instants from
// older on: the design's bound on requests made again, the invariants, and every page
// with links parsed.
func judgeRollback(t *testing.T, web *synthweb.Web, r crawlResult, env crawlEnv, level durability.Level, older time.Time) {
	t.Helper()
	reqs := r.reqs
	// The design's bound: what either store may have lost is the work of the window
	// before the older copy and since; a URL first requested before that is never
	// requested again.
	cut := older.Add(-level.Window())
	firstReq := map[string]time.Time{}
	count := map[string]int{}
	for _, r := range reqs {
		if r.Path == "/robots.txt" {
			continue
		}
		u := web.Origin(r.Host) + r.Path
		if count[u] == 0 {
			firstReq[u] = r.Start
		}
		count[u]++
	}
	again := 0
	for u, n := range count {
		if n < 2 {
			continue
		}
		again++
		if firstReq[u].Before(cut) {
			t.Errorf("%s requested %d times, first %s before the older copy: before the window the design allows", u, n, older.Sub(firstReq[u]).Round(time.Millisecond))
		}
	}
	t.Logf("%d of %d URLs requested again, all first requested within %s of the older copy", again, len(count), level.Window())
	checkInvariants(t, r, env, max(again, 1))
	// Every page whose links the crawl follows was parsed: one NATS lost while Redis
	// kept its outcome is fetched again, not left unparsed (the web's other links to
	// its links may hide the loss from the request log).
	checkParsed(t, web, reqs, readDocs(t, r.stack.JetStream()), env.MaxDepth)
}

// checkParsed fails t for each HTML page of the web with followable links that answered
// 200 and has no document in crawl.docs.
func checkParsed(t *testing.T, web *synthweb.Web, reqs []synthweb.Request, docs map[string]crawlmsg.Document, maxDepth int) {
	t.Helper()
	ok := map[string]bool{}
	for _, q := range reqs {
		if q.Status == 200 {
			ok[web.Origin(q.Host)+q.Path] = true
		}
	}
	unparsed := 0
	for _, d := range web.Walk(maxDepth) {
		if _, has := docs[d.URL]; len(d.Links) > 0 && ok[d.URL] && !has {
			unparsed++
			if unparsed <= 10 {
				t.Errorf("fetched but never parsed: %s", d.URL)
			}
		}
	}
	if unparsed > 10 {
		t.Errorf("%d pages fetched but never parsed", unparsed)
	}
}

// copyDir copies the files under src to dst as they are at this moment, as an OS crash
// leaves what a store had written.
func copyDir(t *testing.T, src, dst string) {
	t.Helper()
	if err := storecopy.Copy(src, dst); err != nil {
		t.Fatal(err)
	}
}
