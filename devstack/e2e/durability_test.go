package e2e

import (
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/trawl/trawl/devstack/natsembed"
	"github.com/trawl/trawl/devstack/stack"
	"github.com/trawl/trawl/devstack/synthweb"
	"github.com/trawl/trawl/shared/crawlid"
	"github.com/trawl/trawl/shared/durability"
	"github.com/trawl/trawl/shared/topology"
)

// oomErrors is how many commands Redis has refused for lack of memory.
func oomErrors(ctx context.Context, rdb redis.UniversalClient) (int, error) {
	info, err := rdb.Info(ctx, "errorstats").Result()
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(info, "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "errorstat_OOM:count="); ok {
			return strconv.Atoi(strings.SplitN(rest, ",", 2)[0])
		}
	}
	return 0, nil
}

// Redis reaches maxmemory mid-crawl (noeviction: PING answers, every write is refused).
// The crawl stalls; messages are retried past TRAWL_LOG_ERROR_AFTER and never terminated,
// so once Redis has memory again every expected URL is fetched.
func TestCrawlStallsWithoutLossAtMaxmemory(t *testing.T) {
	t.Parallel()
	env := testEnv()
	opts := stack.Options{Env: map[string]string{"TRAWL_LOG_ERROR_AFTER": "2"}}
	r := crawl(t, testWeb(), env, opts, func(st *stack.Stack) {
		waitFetched(t, st, 40)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		rdb := st.RedisClient()
		if err := rdb.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err(); err != nil {
			t.Fatal(err)
		}
		if err := rdb.ConfigSet(ctx, "maxmemory", "1").Err(); err != nil {
			t.Fatal(err)
		}
		// Writes are refused from here on; wait until the services have run into it.
		for {
			n, err := oomErrors(ctx, rdb)
			if err != nil {
				t.Fatal(err)
			}
			if n >= 10 {
				break
			}
			select {
			case <-ctx.Done():
				t.Fatalf("no OOM errors at maxmemory=1 (%d)", n)
			case <-time.After(20 * time.Millisecond):
			}
		}
		before, err := st.Progress(ctx)
		if err != nil {
			t.Fatal(err)
		}
		// The stall: several times what TRAWL_LOG_ERROR_AFTER=2 with a 250ms backoff needs.
		time.Sleep(3 * time.Second)
		during, err := st.Progress(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if during.Fetched != before.Fetched || during.Accepted != before.Accepted {
			t.Errorf("frontier moved while Redis refused writes: %s → %s", before, during)
		}
		for _, p := range st.Procs() {
			if !p.Ready(ctx) {
				continue
			}
			t.Errorf("%s reports ready while Redis refuses writes", p.ID())
		}
		if err := rdb.ConfigSet(ctx, "maxmemory", "0").Err(); err != nil {
			t.Fatal(err)
		}
	})
	checkInvariants(t, r, env, 0)
}

// Redis loses the crawl's state mid-crawl (FLUSHALL): every service says so (log, metric,
// readiness) and stops consuming, and the progress loop behind `make run` ends with the
// reason instead of waiting at 0 pages/s.
func TestServicesStopWhenRedisLosesTheCrawl(t *testing.T) {
	t.Parallel()
	env := testEnv()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	web, err := synthweb.Start(ctx, testWeb())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { web.Close() })
	st := startStack(t, ctx, stack.Options{Dir: t.TempDir(), Env: env.vars()})
	if err := st.Seed(ctx, web.Seeds()); err != nil {
		t.Fatal(err)
	}
	waitFetched(t, st, 30)
	if err := st.RedisClient().FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}

	_, err = st.WaitIdle(ctx, 100*time.Millisecond, nil)
	if !errors.Is(err, crawlid.ErrLost) {
		t.Fatalf("WaitIdle after FLUSHALL = %v, want crawlid.ErrLost", err)
	}
	for _, p := range st.Procs() {
		for {
			v, ok, err := p.Metric(ctx, "trawl_crawl_state_lost")
			if err != nil || !ok {
				t.Fatalf("%s: trawl_crawl_state_lost missing (%v)", p.ID(), err)
			}
			if v == 1 {
				break
			}
			select {
			case <-ctx.Done():
				t.Fatalf("%s never reported the lost state", p.ID())
			case <-time.After(50 * time.Millisecond):
			}
		}
		if p.Ready(ctx) {
			t.Errorf("%s ready without the crawl's state", p.ID())
		}
		if !strings.Contains(st.LogTail(p, 200), "REDIS LOST THE CRAWL STATE") {
			t.Errorf("%s did not log the lost state:\n%s", p.ID(), st.LogTail(p, 10))
		}
	}

	// New work is left where it is (a work queue keeps a message until it is acked): dedup
	// would otherwise mark it seen in an empty filter and the scheduler would queue it in
	// an empty frontier.
	discovered, err := st.JetStream().Stream(ctx, topology.StreamDiscovered)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Seed(ctx, []string{web.Seeds()[0] + "after-the-loss"}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second) // the window in which a running consumer would handle it
	info, err := discovered.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs == 0 {
		t.Errorf("dedup handled new URLs after the loss (%s is empty)", topology.StreamDiscovered)
	}
	for _, p := range st.Procs() {
		if exited, err := p.Exited(); exited {
			t.Errorf("%s exited (%v); it should stay up and report", p.ID(), err)
		}
	}
}

// The whole stack dies at once (every process SIGKILLed, NATS included) and is started
// again on the same directory, as `make run DIR=…` run twice would: the crawl resumes and
// every expected URL is fetched. Only a request whose outcome was not yet stored may be
// made again, at most one per host.
// At each level: at always the services publish atomic batches, some in flight at the
// crash.
func TestCrawlResumesAfterWholeStackCrash(t *testing.T) {
	t.Parallel()
	natsBin := buildNATS(t)
	for _, level := range durability.Levels {
		t.Run(string(level), func(t *testing.T) {
			env := testEnv()
			ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
			defer cancel()
			c := startCrashTest(t, ctx, natsBin, env, level)
			waitFetched(t, c.st, 60)
			if err := c.st.Crash(); err != nil {
				t.Fatal(err)
			}
			checkInvariants(t, c.resume(t, ctx), env, len(c.web.Hosts()))
		})
	}
}

// crashTest is a crawl made to be crashed and started again on its directory.
type crashTest struct {
	web   *synthweb.Web
	opts  stack.Options
	st    *stack.Stack
	start time.Time
}

// crashLeaseTTL is a crash test's lease: a task out at the crash comes back when its lease
// expires, so it is kept short.
const crashLeaseTTL = 8 * time.Second

// startCrashTest starts the test web and a stack whose NATS runs in a process of its own
// (natsBin), so that a crash SIGKILLs it like every other process, and seeds the crawl.
func startCrashTest(t *testing.T, ctx context.Context, natsBin string, env crawlEnv, level durability.Level) *crashTest {
	t.Helper()
	web, err := synthweb.Start(ctx, testWeb())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { web.Close() })
	vars := env.vars()
	vars["TRAWL_LEASE_TTL"] = crashLeaseTTL.String()
	vars["TRAWL_ACK_WAIT"] = "4s"
	vars["TRAWL_FETCH_TIMEOUT"] = "2s"
	c := &crashTest{web: web, opts: stack.Options{Dir: t.TempDir(), Env: vars, NATSBin: natsBin, Durability: level}, start: time.Now()}
	c.st = startStack(t, ctx, c.opts)
	if err := c.st.Seed(ctx, web.Seeds()); err != nil {
		t.Fatal(err)
	}
	return c
}

// resume starts the stack again on the crawl's directory, seeds again as `make run` does
// on every start (the seeds are dropped as already seen), and waits for the crawl to end.
func (c *crashTest) resume(t *testing.T, ctx context.Context) crawlResult {
	t.Helper()
	c.st = startStack(t, ctx, c.opts)
	if err := c.st.Seed(ctx, c.web.Seeds()); err != nil {
		t.Fatal(err)
	}
	p, err := c.st.WaitIdle(ctx, 250*time.Millisecond, nil)
	if err != nil {
		t.Fatalf("resumed crawl did not finish: %v", err)
	}
	return crawlResult{stack: c.st, web: c.web, progress: p, took: time.Since(c.start), reqs: c.web.Requests()}
}

func startStack(t *testing.T, ctx context.Context, opts stack.Options) *stack.Stack {
	t.Helper()
	opts.BinDir = binDir
	if opts.NATSMaxStore == 0 {
		// The services set aside their stream caps out of a logical limit, not the free
		// disk, which tests running at once (and a busy machine) would decide; NATS in a
		// process of its own (a crash test's) as much as the embedded one.
		opts.NATSMaxStore = natsembed.TestMaxStore
	}
	st, err := stack.Start(ctx, opts)
	if err != nil {
		t.Fatalf("start stack: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("service logs (tail):\n%s", st.Logs(40))
		}
		cctx, ccancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer ccancel()
		if err := st.Close(cctx); err != nil {
			t.Errorf("stop stack: %v", err)
		}
	})
	return st
}

// A local stack starts where NATS may set aside 4 GiB only, three quarters of a small
// disk's free space, which the production stream caps (18 GiB) would not fit; a service
// given those caps there stops and names the settings.
func TestLocalStackFitsASmallDisk(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	st := startStack(t, ctx, stack.Options{NATSMaxStore: 4 << 30, Env: testEnv().vars()})
	if err := st.Seed(ctx, []string{"http://127.0.0.1:1/"}); err != nil {
		t.Fatalf("seed: %v", err)
	}

	prod := map[string]string{"TRAWL_PAGES_MAX_BYTES": "8GiB", "TRAWL_DOCS_MAX_BYTES": "2GiB"}
	for k, v := range testEnv().vars() {
		prod[k] = v
	}
	opts := stack.Options{BinDir: binDir, NATSMaxStore: 4 << 30, Env: prod}
	_, err := stack.Start(ctx, opts)
	if err == nil || !strings.Contains(err.Error(), "TRAWL_PAGES_MAX_BYTES") {
		t.Fatalf("a stack with the production caps on 4 GiB: %v, want a service stopping with the settings to change", err)
	}
}

// A service started with another TRAWL_SHARDS than the crawl's refuses to start, saying
// why: hosts would move between shards mid-crawl.
func TestServicesRefuseAnotherShardCount(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	st := startStack(t, ctx, stack.Options{Dir: t.TempDir(), Env: testEnv().vars()})
	for _, name := range stack.Services {
		t.Run(name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			addr := ln.Addr().String()
			ln.Close()
			cctx, ccancel := context.WithTimeout(ctx, 30*time.Second)
			defer ccancel()
			cmd := exec.CommandContext(cctx, filepath.Join(binDir, name))
			cmd.Env = append(os.Environ(),
				"TRAWL_NATS_URL="+st.NATS().URL(), "TRAWL_REDIS_URL="+st.Redis().URL(),
				"TRAWL_SHARDS=2", "TRAWL_SCHEDULER_SHARDS=0", "TRAWL_HTTP_ADDR="+addr,
				"TRAWL_LEASE_TTL=20s", "TRAWL_ACK_WAIT=5s", "TRAWL_FETCH_TIMEOUT=5s")
			out, err := cmd.CombinedOutput()
			if cctx.Err() != nil {
				t.Fatalf("%s kept running with TRAWL_SHARDS=2 in a one-shard crawl:\n%s", name, tail(out))
			}
			if err == nil || !strings.Contains(string(out), "TRAWL_SHARDS=2 but crawl") {
				t.Fatalf("%s: exit %v, want a refusal naming TRAWL_SHARDS:\n%s", name, err, tail(out))
			}
		})
	}
}

func tail(b []byte) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return strings.Join(lines[max(0, len(lines)-5):], "\n")
}
