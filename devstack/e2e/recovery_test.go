package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/trawl/trawl/devstack/stack"
	"github.com/trawl/trawl/shared/durability"
	"github.com/trawl/trawl/shared/testwait"
)

// waitFetched blocks until the crawl has fetched at least n pages, so that a fault is
// injected mid-crawl rather than before or after it.
func waitFetched(t *testing.T, st *stack.Stack, n int64) stack.Progress {
	t.Helper()
	ctx := testwait.Context(t)
	var p stack.Progress
	testwait.EventuallyState(t, 2*time.Minute, fmt.Sprintf("the crawl to reach %d fetched pages", n), func() (bool, string) {
		var err error
		p, err = st.Progress(ctx)
		return err == nil && p.Fetched >= n, fmt.Sprintf("%s, err %v", p, err)
	})
	return p
}

// Two scheduler shards, each served by its own process: hosts are split by the stable
// hash and every invariant holds as with one shard.
func TestCrawlTwoShards(t *testing.T) {
	t.Parallel()
	env := testEnv()
	r := crawl(t, testWeb(), env, stack.Options{
		Env:      map[string]string{"TRAWL_SHARDS": "2"},
		Replicas: map[string]int{"scheduler": 2},
		ProcEnv: map[string]map[string]string{
			"scheduler-0": {"TRAWL_SCHEDULER_SHARDS": "0"},
			"scheduler-1": {"TRAWL_SCHEDULER_SHARDS": "1"},
		},
	}, nil)
	checkInvariants(t, r, env, 0)
}

// Far fewer back queues than hosts: hosts wait in the front queues and are admitted as
// back queues drain, and the crawl still completes politely.
func TestCrawlFewBackQueues(t *testing.T) {
	t.Parallel()
	env := testEnv()
	r := crawl(t, testWeb(), env, stack.Options{Env: map[string]string{"TRAWL_BACK_QUEUES": "3"}}, nil)
	checkInvariants(t, r, env, 0)
}

// The scheduler is killed with SIGKILL mid-crawl and started again: its state is in Redis
// and its inputs in JetStream, so nothing is lost and nothing is fetched twice.
func TestCrawlSchedulerKilled(t *testing.T) {
	t.Parallel()
	env := testEnv()
	r := crawl(t, testWeb(), env, stack.Options{}, func(st *stack.Stack) {
		waitFetched(t, st, 60)
		p := st.Proc("scheduler", 0)
		if err := p.Kill(); err != nil {
			t.Fatal(err)
		}
		if err := p.Start(); err != nil {
			t.Fatal(err)
		}
		if err := st.WaitReady(context.Background(), p); err != nil {
			t.Fatal(err)
		}
	})
	checkInvariants(t, r, env, 0)
}

// Redis is restarted mid-crawl (graceful stop, AOF on): every service pauses consumption
// while it is away and resumes from the persisted frontier.
func TestCrawlRedisRestarted(t *testing.T) {
	t.Parallel()
	env := testEnv()
	r := crawl(t, testWeb(), env, stack.Options{Durability: durability.EverySecond}, func(st *stack.Stack) {
		waitFetched(t, st, 60)
		if err := st.Redis().Stop(); err != nil {
			t.Fatal(err)
		}
		// Long enough for every service to notice and for pending work to pile up.
		time.Sleep(time.Second)
		if err := st.Redis().Restart(context.Background()); err != nil {
			t.Fatal(err)
		}
	})
	checkInvariants(t, r, env, 0)
}

// Redis is killed with SIGKILL mid-crawl and started again with the same settings, under the
// stack's defaults (what `make run` uses: the AOF fsynced on every write, as compose.yaml runs
// it): every acknowledged step survives, so nothing is lost or doubled.
func TestCrawlRedisKilled(t *testing.T) {
	t.Parallel()
	env := testEnv()
	r := crawl(t, testWeb(), env, stack.Options{}, func(st *stack.Stack) {
		waitFetched(t, st, 60)
		if err := st.Redis().Kill(); err != nil {
			t.Fatal(err)
		}
		if err := st.Redis().Restart(context.Background()); err != nil {
			t.Fatal(err)
		}
	})
	checkInvariants(t, r, env, 0)
}

// The NATS server is restarted mid-crawl (file store): streams, consumers and their
// positions survive and every service reconnects.
func TestCrawlNATSRestarted(t *testing.T) {
	t.Parallel()
	env := testEnv()
	r := crawl(t, testWeb(), env, stack.Options{}, func(st *stack.Stack) {
		waitFetched(t, st, 60)
		if err := st.NATS().Restart(); err != nil {
			t.Fatal(err)
		}
	})
	checkInvariants(t, r, env, 0)
}

// Three fetchers share the work; one is killed with SIGKILL while it holds tasks. Its
// leases expire back into the frontier, so the crawl completes; only the tasks it held
// may be fetched twice.
func TestCrawlFetcherKilled(t *testing.T) {
	t.Parallel()
	env := testEnv()
	// Slow responses give the kill a task to land on.
	web := testWeb()
	web.SlowDelay = time.Second
	var held int64
	r := crawl(t, web, env, stack.Options{
		Replicas: map[string]int{"fetcher": 3},
		Env:      map[string]string{"TRAWL_LEASE_TTL": "12s"},
	}, func(st *stack.Stack) {
		waitFetched(t, st, 30)
		victim := busyFetcher(t, st)
		if err := victim.Kill(); err != nil {
			t.Fatal(err)
		}
		// The dead fetcher's leases stay in flight until they expire, so the in-flight
		// count just after the kill bounds the tasks it held.
		p, err := st.Progress(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		held = p.InFlight
	})
	checkInvariants(t, r, env, int(held))
	if r.progress.Expired == 0 {
		t.Error("no lease expired: the killed fetcher held no task, so the test proved nothing")
	}
}

// busyFetcher returns a fetcher in the middle of a slow task: one that reports a task in
// hand in several samples across most of a slow response, which the crawl's many
// millisecond-long tasks almost never do.
func busyFetcher(t *testing.T, st *stack.Stack) *stack.Proc {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	busy := func(p *stack.Proc) bool {
		v, ok, err := p.Metric(ctx, "trawl_fetcher_inflight")
		return err == nil && ok && v > 0
	}
	for ctx.Err() == nil {
		for i := range 3 {
			p := st.Proc("fetcher", i)
			held := true
			for s := 0; held && s < 4; s++ {
				if s > 0 {
					time.Sleep(100 * time.Millisecond)
				}
				held = busy(p)
			}
			if held {
				return p
			}
		}
	}
	t.Fatal("no fetcher was ever seen holding a task")
	return nil
}
