package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/trawl/trawl/devstack/stack"
	"github.com/trawl/trawl/devstack/synthweb"
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

// Three fetchers share the work; one is killed with SIGKILL while the web is answering its
// request to the slow host. Its leases expire back into the frontier, so the crawl
// completes; only the tasks it held may be fetched twice.
func TestCrawlFetcherKilled(t *testing.T) {
	t.Parallel()
	env := testEnv()
	// Slow responses give the kill a request to land on.
	web := testWeb()
	web.SlowDelay = time.Second
	procEnv := map[string]map[string]string{}
	for i := range 3 {
		procEnv[fmt.Sprintf("fetcher-%d", i)] = map[string]string{"TRAWL_USER_AGENT": fetcherAgent(fmt.Sprintf("fetcher-%d", i))}
	}
	var (
		held int64
		cut  synthweb.Request
	)
	r := crawlWeb(t, web, env, stack.Options{
		Replicas: map[string]int{"fetcher": 3},
		Env:      map[string]string{"TRAWL_LEASE_TTL": "12s"},
		ProcEnv:  procEnv,
	}, func(st *stack.Stack, w *synthweb.Web) {
		waitFetched(t, st, 30)
		var victim *stack.Proc
		victim, cut = requestingFetcher(t, st, w, web.SlowDelay/2)
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
	// The web's own log says whether the kill landed mid-request: the request it chose was
	// given up by its client before an answer.
	landed := false
	for _, q := range r.reqs {
		if q.Agent == cut.Agent && q.Path == cut.Path && q.Start.Equal(cut.Start) {
			landed = q.Status == 0
		}
	}
	if !landed {
		t.Errorf("the kill did not cut %s %s (started %s): the web answered it, so the test proved nothing", cut.Agent, cut.Path, cut.Start.Format(time.StampMilli))
	}
	if r.progress.Expired == 0 {
		t.Error("no lease expired: the killed fetcher held no task")
	}
}

// requestingFetcher returns a fetcher that the web is serving a slow request for, begun
// less than younger ago, and that request, as the web sees it in progress. Each fetcher
// sends its own User-Agent (fetcherAgent), which names it.
func requestingFetcher(t *testing.T, st *stack.Stack, w *synthweb.Web, younger time.Duration) (*stack.Proc, synthweb.Request) {
	t.Helper()
	slow := map[string]bool{}
	for _, h := range w.Hosts() {
		slow[h.Name] = h.Kind == synthweb.KindSlow
	}
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		for _, q := range w.InProgress() {
			if !slow[q.Host] || time.Since(q.Start) >= younger {
				continue
			}
			for i := range 3 {
				if p := st.Proc("fetcher", i); q.Agent == fetcherAgent(p.ID()) {
					return p, q
				}
			}
		}
	}
	t.Fatal("the web served no fetcher a slow request in 2 minutes")
	return nil, synthweb.Request{}
}
