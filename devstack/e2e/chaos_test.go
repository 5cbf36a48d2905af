package e2e

import (
	"context"
	"fmt"
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
// The duplicate bound asserted is the design's, per kill: a killed scheduler, dedup or
// parser costs no request, nor does a SIGKILLed redis-server whose AOF is fsynced on every
// write; a killed fetcher costs at most one extra request per task it held (its leases
// expire and the URLs are requested again). Each fetcher sends its own User-Agent, so the
// web's log tells which fetcher made each request: every repeated request must follow one
// by a fetcher that was killed after it began, and each kill is charged no more repeats
// than the tasks its fetcher held (its in-flight count read just before the kill, plus the
// requests it began between that read and the kill). No URL is requested more than 1 +
// TRAWL_MAX_RETRIES times.
func TestChaosEveryProcessKilledInTurn(t *testing.T) {
	t.Parallel()
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
		kills []fetcherKill
		hits  []string
	)
	procEnv := map[string]map[string]string{}
	for i := range 3 {
		procEnv[fmt.Sprintf("fetcher-%d", i)] = map[string]string{"TRAWL_USER_AGENT": fetcherAgent(fmt.Sprintf("fetcher-%d", i))}
	}
	r := crawl(t, web, env, stack.Options{Env: vars, Replicas: map[string]int{"fetcher": 3}, ProcEnv: procEnv}, func(st *stack.Stack) {
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
			var k fetcherKill
			if v.fetcher != nil {
				// Prefer a moment when it holds a task, so that the kill costs a lease;
				// the invariants must hold whether or not one is seen.
				holding(ctx, v.fetcher, 2*time.Second)
				k = fetcherKill{agent: fetcherAgent(v.id), read: time.Now()}
				n, _, err := v.fetcher.Metric(ctx, "trawl_fetcher_inflight")
				if err != nil {
					t.Fatalf("%s: in-flight tasks before its kill: %v", v.id, err)
				}
				k.held = int(n)
			}
			if err := v.kill(); err != nil {
				t.Fatalf("kill %s: %v", v.id, err)
			}
			if v.fetcher != nil {
				k.at = time.Now()
				kills = append(kills, k)
				t.Logf("%s killed holding %d task(s)", v.id, k.held)
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

	// Requests a killed fetcher began after its in-flight count was read were tasks it
	// took meanwhile: each may be repeated too.
	held := 0
	for i := range kills {
		for _, q := range r.reqs {
			if q.Agent == kills[i].agent && q.Start.After(kills[i].read) && !q.Start.After(kills[i].at) {
				kills[i].held++
			}
		}
		held += kills[i].held
	}
	checkInvariants(t, r, env, held)
	exp := r.web.Expected(env.MaxDepth)
	byURL := map[string][]synthweb.Request{}
	for _, q := range r.reqs {
		if q.Path != "/robots.txt" {
			u := r.web.Origin(q.Host) + q.Path
			byURL[u] = append(byURL[u], q)
		}
	}
	extra := 0
	charged := make([]int, len(kills))
	for u, qs := range byURL {
		if len(qs) > 1+env.MaxRetries {
			t.Errorf("%s requested %d times, more than 1 + TRAWL_MAX_RETRIES (%d)", u, len(qs), env.MaxRetries)
		}
		if !exp.Fetch[u] {
			continue // error pages are retried by design
		}
		// The log is in order of start, so each URL's requests are too.
		for i := 1; i < len(qs); i++ {
			extra++
			k := killAfter(kills, qs[i-1])
			if k < 0 {
				t.Errorf("%s requested again at %s by %q after a request by %q at %s that no kill of its fetcher followed",
					u, qs[i].Start.Format(time.StampMilli), qs[i].Agent, qs[i-1].Agent, qs[i-1].Start.Format(time.StampMilli))
				continue
			}
			charged[k]++
		}
	}
	for i, k := range kills {
		if charged[i] > k.held {
			t.Errorf("the kill of %s at %s cost %d repeated requests, more than the %d task(s) it held", k.agent, k.at.Format(time.StampMilli), charged[i], k.held)
		}
	}
	t.Logf("chaos crawl: %d requests, %d fetched, %d expired leases, %d extra requests (bound %d), %s",
		len(r.reqs), r.progress.Fetched, r.progress.Expired, extra, held, r.took.Round(time.Millisecond))
}

// fetcherKill is one fetcher's SIGKILL during the chaos crawl.
type fetcherKill struct {
	agent string    // its User-Agent
	read  time.Time // when its in-flight count was asked for
	at    time.Time // the kill was done by then
	held  int       // the tasks it may have held: that count, plus requests it began after read
}

// fetcherAgent is the User-Agent of the fetcher process with this id, where a test gives
// each its own.
func fetcherAgent(id string) string { return "trawl-fetcher/" + id }

// killAfter is the first kill of the fetcher that made q at or after q's start (its
// request in flight, or its outcome not yet stored, when the fetcher died); -1 if none.
func killAfter(kills []fetcherKill, q synthweb.Request) int {
	for i, k := range kills {
		if k.agent == q.Agent && !k.at.Before(q.Start) {
			return i
		}
	}
	return -1
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
