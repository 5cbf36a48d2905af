package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/trawl/trawl/devstack/stack"
	"github.com/trawl/trawl/devstack/synthweb"
)

// chaosStep is the progress, in fetched pages, the crawl must make after one restart
// before the next process is killed: each process dies while the crawl runs and after
// its predecessor has demonstrably come back.
const chaosStep = 12

// One crawl on the stack's defaults (Redis with the AOF fsynced on every write, as
// `make run` runs it) with three fetchers, during which every service process and
// redis-server is SIGKILLed in turn and started again as a supervisor would: the same
// binary with the same environment, Redis on the same port, configuration and data dir.
// The crawl must still finish with every invariant holding in the web's own request log.
//
// The duplicate bound asserted is the design's: a killed scheduler, dedup or parser costs
// no request, nor does a SIGKILLed redis-server whose AOF is fsynced on every write; a
// killed fetcher costs at most one extra request per task it held (its leases expire and
// the URLs are requested again). The in-flight count just after a fetcher's kill bounds
// the tasks it held, so the extra requests over the whole crawl are at most the sum of
// those counts, and no URL is requested more than 1 + TRAWL_MAX_RETRIES times.
func TestChaosEveryProcessKilledInTurn(t *testing.T) {
	env := testEnv()
	// A politeness delay twice the other tests' and more pages per host keep the crawl
	// running through seven kills and restarts on a slow machine.
	env.MinDelay = 200 * time.Millisecond
	web := testWeb()
	web.PagesPerHost = 40
	vars := map[string]string{
		// A task held by a killed fetcher comes back when its lease expires (plus the
		// reaper's grace of one outcome AckWait); short values keep that tail short.
		"TRAWL_LEASE_TTL":     "8s",
		"TRAWL_ACK_WAIT":      "4s",
		"TRAWL_FETCH_TIMEOUT": "2s",
	}
	var (
		held int64 // upper bound on the tasks the killed fetchers held
		hits []string
	)
	r := crawl(t, web, env, stack.Options{Env: vars, Replicas: map[string]int{"fetcher": 3}}, func(st *stack.Stack) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		type victim struct {
			id      string
			kill    func() error
			restart func() error
			fetcher *stack.Proc
		}
		var victims []victim
		for _, name := range stack.Services {
			for _, p := range st.Procs() {
				if p.Name != name {
					continue
				}
				v := victim{id: p.ID(), kill: p.Kill, restart: func() error {
					if err := p.Start(); err != nil {
						return err
					}
					return st.WaitReady(ctx, p)
				}}
				if p.Name == "fetcher" {
					v.fetcher = p
				}
				victims = append(victims, v)
			}
		}
		victims = append(victims, victim{id: "redis", kill: st.Redis().Kill, restart: func() error { return st.Redis().Restart(ctx) }})

		last := waitFetched(t, st, 3*chaosStep)
		for _, v := range victims {
			busy := false
			if v.fetcher != nil {
				// Prefer a moment when it holds a task, so that the kill costs a lease;
				// the invariants must hold whether or not one is seen.
				busy = holding(ctx, v.fetcher, 2*time.Second)
			}
			if err := v.kill(); err != nil {
				t.Fatalf("kill %s: %v", v.id, err)
			}
			if v.fetcher != nil {
				p, err := st.Progress(ctx)
				if err != nil {
					t.Fatalf("progress after killing %s: %v", v.id, err)
				}
				held += p.InFlight
				t.Logf("%s killed holding a task: %v; %d leases out just after", v.id, busy, p.InFlight)
			}
			if err := v.restart(); err != nil {
				t.Fatalf("restart %s: %v", v.id, err)
			}
			now := waitFetched(t, st, last.Fetched+chaosStep)
			hits = append(hits, v.id)
			t.Logf("killed and restarted %s at %d fetched; crawl moved on to %d (expired leases so far %d)", v.id, last.Fetched, now.Fetched, now.Expired)
			last = now
		}
	})
	if len(hits) != 7 {
		t.Fatalf("killed %v, want every service process and redis-server", hits)
	}

	checkInvariants(t, r, env, int(held))
	pages := make([]synthweb.Request, 0, len(r.reqs))
	for _, q := range r.reqs {
		if q.Path != "/robots.txt" {
			pages = append(pages, q)
		}
	}
	exp := r.web.Expected(env.MaxDepth)
	extra := 0
	for u, c := range synthweb.CountByURL(pages, r.web.Origin) {
		if c > 1+env.MaxRetries {
			t.Errorf("%s requested %d times, more than 1 + TRAWL_MAX_RETRIES (%d)", u, c, env.MaxRetries)
		}
		if exp.Fetch[u] && c > 1 {
			extra += c - 1
		}
	}
	if int64(extra) > held {
		t.Errorf("%d extra page requests, more than the %d tasks the killed fetchers held", extra, held)
	}
	t.Logf("chaos crawl: %d requests, %d fetched, %d expired leases, %d extra requests (bound %d), %s",
		len(r.reqs), r.progress.Fetched, r.progress.Expired, extra, held, r.took.Round(time.Millisecond))
}

// holding waits up to d for p to report a task in hand.
func holding(ctx context.Context, p *stack.Proc, d time.Duration) bool {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	for {
		if v, ok, err := p.Metric(ctx, "trawl_fetcher_inflight"); err == nil && ok && v > 0 {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(5 * time.Millisecond):
		}
	}
}
