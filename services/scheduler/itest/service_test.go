package itest

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/trawl/trawl/devstack/inproc"
	"github.com/trawl/trawl/devstack/natsembed"
	"github.com/trawl/trawl/devstack/redisproc"
	"github.com/trawl/trawl/devstack/scrape"
	"github.com/trawl/trawl/services/scheduler/internal/config"
	"github.com/trawl/trawl/services/scheduler/internal/frontier"
	"github.com/trawl/trawl/services/scheduler/internal/service"
	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/frontierkeys"
	"github.com/trawl/trawl/shared/testwait"
	"github.com/trawl/trawl/shared/topology"
)

// stack is the scheduler running in-process against embedded NATS and a real Redis.
type stack struct {
	t     *testing.T
	cfg   config.Config
	ns    *natsembed.Server
	js    jetstream.JetStream
	rdb   *redis.Client
	redis *redisproc.Server
	f     *frontier.Frontier
	svc   *inproc.Running[*service.Service]
	logs  *logLines
	// env are the settings every scheduler process of the stack starts with.
	env map[string]string
}

// logLines keeps the service's log lines for assertions.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

// Write keeps the lines of p (the service's log, whole lines at a time).
func (l *logLines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, strings.Split(strings.TrimRight(string(p), "\n"), "\n")...)
	return len(p), nil
}

// count returns how many lines contain every one of subs.
func (l *logLines) count(subs ...string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
next:
	for _, line := range l.lines {
		for _, sub := range subs {
			if !strings.Contains(line, sub) {
				continue next
			}
		}
		n++
	}
	return n
}

func startStack(t *testing.T, redisOpts redisproc.Options, env map[string]string, opts ...service.Option) *stack {
	t.Helper()
	ns := natsembed.StartT(t)
	rs := redisproc.StartT(t, redisOpts)
	vars := map[string]string{
		"TRAWL_NATS_URL":      ns.URL(),
		"TRAWL_REDIS_URL":     rs.URL(),
		"TRAWL_MIN_DELAY":     "20ms",
		"TRAWL_DELAY_FACTOR":  "0",
		"TRAWL_STREAM_MEMORY": "true",
		"TRAWL_LOG_LEVEL":     "debug",
	}
	for k, v := range env {
		vars[k] = v
	}
	s := &stack{t: t, ns: ns, redis: rs, logs: &logLines{}, env: vars}
	s.cfg, s.svc = s.startService(nil, opts...)

	nc, err := nats.Connect(ns.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	if s.js, err = jetstream.New(nc); err != nil {
		t.Fatal(err)
	}
	s.rdb = redis.NewClient(&redis.Options{Addr: rs.Addr(), Password: redisOpts.Password})
	t.Cleanup(func() { _ = s.rdb.Close() })
	s.f = frontier.New(s.rdb, service.FrontierOptions(s.cfg, 0), service.Prioritizer(s.cfg))
	return s
}

// startService runs one more scheduler process against the stack's servers, with env on
// top of the stack's settings and its own HTTP address, and waits until it is ready.
func (s *stack) startService(env map[string]string, opts ...service.Option) (config.Config, *inproc.Running[*service.Service]) {
	t := s.t
	t.Helper()
	// The service binds a port of the kernel's choosing and the test asks it which: a port
	// probed free and bound later may be another test's by then, whose service would
	// answer this one's probes.
	cfg := inproc.Config(t, config.Load, map[string]string{"TRAWL_HTTP_ADDR": "127.0.0.1:0"}, s.env, env)
	log := inproc.Logger(t, slog.LevelInfo, s.logs)
	r := inproc.Start(t, log, func(ctx context.Context) (*service.Service, error) {
		return service.New(ctx, cfg, log, opts...)
	})
	cfg.Common.HTTPAddr = r.Svc.Addr()
	r.WaitReady(t, cfg.Common.HTTPAddr)
	return cfg, r
}

// stopService stops the stack's scheduler and waits for it; Run must return cleanly.
func (s *stack) stopService(t *testing.T) {
	t.Helper()
	if err := s.svc.Stop(); err != nil {
		t.Fatalf("scheduler Run: %v", err)
	}
}

// restart stops the stack's scheduler, if it runs, and starts another.
func (s *stack) restart(t *testing.T) {
	t.Helper()
	s.stopService(t)
	s.cfg, s.svc = s.startService(nil)
}

func (s *stack) publish(subject string, v any) {
	s.t.Helper()
	var data []byte
	switch x := v.(type) {
	case []byte:
		data = x
	default:
		var err error
		if data, err = crawlmsg.Marshal(v); err != nil {
			s.t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := s.js.Publish(ctx, subject, data); err != nil {
		s.t.Fatal(err)
	}
}

// metric is the sum of the samples of name whose labels include labels, from /metrics (0
// if none is exported).
func (s *stack) metric(name string, labels map[string]string) float64 {
	s.t.Helper()
	return scrape.Value(s.t, s.cfg.Common.HTTPAddr, scrape.Selector{Name: name, Labels: labels}.String())
}

// fetcher acts as the fetcher fleet: it consumes the shared `fetcher` durable, answers
// every task with the outcome made by answer and, as the real fetcher does, publishes the
// outcomes of each pulled set of tasks as one OutcomeBatch before acking the tasks.
type fetcher struct {
	mu       sync.Mutex
	tasks    []crawlmsg.FetchTask
	inflight map[string]bool
	overlap  []string
}

func (s *stack) runFetcher(ctx context.Context, answer func(crawlmsg.FetchTask) crawlmsg.Outcome) *fetcher {
	return s.runFetcherWith(ctx, answer, nil)
}

// runFetcherWith is runFetcher adding the outcomes made by extra to every batch (entries a
// reader must skip without losing the batch's others).
func (s *stack) runFetcherWith(ctx context.Context, answer func(crawlmsg.FetchTask) crawlmsg.Outcome, extra func() []crawlmsg.Outcome) *fetcher {
	s.t.Helper()
	cons, err := s.js.Consumer(ctx, topology.StreamFetch, topology.ConsumerFetcher)
	if err != nil {
		s.t.Fatal(err)
	}
	fx := &fetcher{inflight: map[string]bool{}}
	go func() {
		for ctx.Err() == nil {
			batch, err := cons.Fetch(64, jetstream.FetchMaxWait(200*time.Millisecond))
			if err != nil {
				continue
			}
			var ob crawlmsg.OutcomeBatch
			var msgs []jetstream.Msg
			for m := range batch.Messages() {
				tks, err := crawlmsg.DecodeTasks(m.Data())
				if err != nil {
					s.t.Errorf("bad fetch task: %v", err)
					_ = m.Term()
					continue
				}
				for _, tk := range tks {
					fx.mu.Lock()
					if fx.inflight[tk.Host] {
						fx.overlap = append(fx.overlap, tk.Host)
					}
					fx.inflight[tk.Host] = true
					fx.tasks = append(fx.tasks, tk)
					fx.mu.Unlock()
					ob.Outcomes = append(ob.Outcomes, answer(tk))
				}
				msgs = append(msgs, m)
			}
			if len(msgs) == 0 {
				continue
			}
			fx.mu.Lock()
			for _, o := range ob.Outcomes {
				delete(fx.inflight, o.Host)
			}
			fx.mu.Unlock()
			byShard := map[int]*crawlmsg.OutcomeBatch{}
			for _, o := range ob.Outcomes {
				if byShard[o.Shard] == nil {
					byShard[o.Shard] = &crawlmsg.OutcomeBatch{}
				}
				byShard[o.Shard].Outcomes = append(byShard[o.Shard].Outcomes, o)
			}
			for shard, b := range byShard {
				if extra != nil {
					b.Outcomes = append(b.Outcomes, extra()...)
				}
				data, err := crawlmsg.Marshal(b)
				if err != nil {
					s.t.Error(err)
					continue
				}
				pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				_, err = s.js.Publish(pctx, topology.FetchedSubject(shard), data)
				cancel()
				if err != nil && ctx.Err() == nil {
					s.t.Errorf("publish outcomes: %v", err)
				}
			}
			for _, m := range msgs {
				_ = m.Ack()
			}
		}
	}()
	return fx
}

func (fx *fetcher) snapshot() []crawlmsg.FetchTask {
	fx.mu.Lock()
	defer fx.mu.Unlock()
	return append([]crawlmsg.FetchTask(nil), fx.tasks...)
}

func fetched200(tk crawlmsg.FetchTask) crawlmsg.Outcome {
	return crawlmsg.Outcome{Shard: tk.Shard, Host: tk.Host, URL: tk.URL, Lease: tk.Lease, Attempt: tk.Attempt,
		Kind: crawlmsg.OutcomeFetched, Status: 200, Requested: true, DurationMs: 1}
}

func (s *stack) stats() frontierkeys.ShardStatus {
	s.t.Helper()
	st, err := s.f.Stats(testwait.Context(s.t))
	if err != nil {
		s.t.Fatal(err)
	}
	return st
}

func TestServiceCrawlsFrontierAndSurvivesBadInput(t *testing.T) {
	t.Parallel()
	s := startStack(t, redisproc.Options{}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// Every batch also carries an outcome without a lease and one of an unknown kind: they
	// are skipped and counted, and the batch's real outcomes are applied.
	fx := s.runFetcherWith(ctx, fetched200, func() []crawlmsg.Outcome {
		return []crawlmsg.Outcome{
			{Shard: 0, Host: "x.example", URL: "http://x.example/", Kind: crawlmsg.OutcomeFetched},
			{Shard: 0, Host: "x.example", URL: "http://x.example/", Lease: "0-999", Kind: "teleported"},
		}
	})

	var want []string
	var batch crawlmsg.FrontierBatch
	for h := range 6 {
		for p := range 5 {
			u := fmt.Sprintf("http://host%d.example/page%d", h, p)
			want = append(want, u)
			batch.URLs = append(batch.URLs, crawlmsg.Discovered{URL: u, Depth: p % 3})
		}
	}
	s.publish(topology.FrontierSubject(0), &batch)

	// Poison and wrong-version messages are terminated, and the service goes on.
	s.publish(topology.FrontierSubject(0), []byte("not json"))
	s.publish(topology.FrontierSubject(0), []byte(`{"v":2,"urls":[{"url":"http://x.example/"}]}`))
	s.publish(topology.FetchedSubject(0), []byte(`{"v":1,"host":"x.example"}`))
	s.publish(topology.FetchedSubject(0), []byte(`{"v":3,"outcomes":[{"host":"x.example","lease":"0-999","kind":"fetched"}]}`))
	s.publish(topology.FetchedSubject(0), []byte(`{"v":2,"outcomes":[]}`))
	s.publish(topology.FetchedSubject(0), []byte(`{"v":2,"outcomes":{}}`))

	testwait.Eventually(t, 30*time.Second, "frontier drained", func() bool {
		st := s.stats()
		return st.Fetched == int64(len(want)) && st.Queued == 0 && st.InFlight == 0
	})
	got := map[string]int{}
	for _, tk := range fx.snapshot() {
		got[tk.URL]++
		if tk.Shard != 0 || tk.Lease == "" || tk.Deadline <= time.Now().Add(-time.Minute).UnixMilli() {
			t.Errorf("task fields: %+v", tk)
		}
	}
	for _, u := range want {
		if got[u] != 1 {
			t.Errorf("%s fetched %d times, want once", u, got[u])
		}
	}
	if len(fx.overlap) > 0 {
		t.Errorf("hosts with two tasks out at once: %v", fx.overlap)
	}
	st := s.stats()
	if st.Accepted != int64(len(want)) || st.Terminal() != st.Accepted || st.Active != 0 {
		t.Fatalf("stats %+v", st)
	}

	testwait.Eventually(t, 10*time.Second, "bad frontier messages terminated", func() bool {
		return s.metric("trawl_scheduler_messages_terminated_total", map[string]string{"consumer": "frontier", "reason": "permanent"}) == 2
	})
	testwait.Eventually(t, 10*time.Second, "bad outcome messages terminated", func() bool {
		return s.metric("trawl_scheduler_messages_terminated_total", map[string]string{"consumer": "outcomes", "reason": "permanent"}) == 4
	})
	if n := s.metric("trawl_scheduler_outcome_results_total", map[string]string{"shard": "0", "result": "malformed"}); n < 1 {
		t.Errorf("outcome_results_total{result=malformed} %v, want the skipped entries counted", n)
	}
	if n := s.metric("trawl_scheduler_outcome_results_total", map[string]string{"shard": "0", "result": "invalid"}); n < 1 {
		t.Errorf("outcome_results_total{result=invalid} %v, want the unknown kinds counted", n)
	}
	if n := s.metric("trawl_scheduler_dispatched_total", map[string]string{"shard": "0"}); n != float64(len(want)) {
		t.Errorf("dispatched_total %v, want %d", n, len(want))
	}
	if n := s.metric("trawl_scheduler_outcomes_total", map[string]string{"shard": "0", "kind": "fetched"}); n != float64(len(want)) {
		t.Errorf("outcomes_total{kind=fetched} %v, want %d", n, len(want))
	}
	testwait.Eventually(t, 10*time.Second, "terminal-state gauge", func() bool {
		return s.metric("trawl_scheduler_frontier_urls", map[string]string{"shard": "0", "state": "fetched"}) == float64(len(want))
	})

	// Still serving after the poison: a later batch is crawled too.
	s.publish(topology.FrontierSubject(0), &crawlmsg.FrontierBatch{URLs: []crawlmsg.Discovered{{URL: "http://late.example/"}}})
	testwait.Eventually(t, 30*time.Second, "late batch crawled", func() bool { return s.stats().Fetched == int64(len(want))+1 })

	// Nothing left unacknowledged on the scheduler's consumers.
	for _, c := range []struct{ stream, name string }{
		{topology.StreamFrontier, topology.SchedulerFrontierConsumer(0)},
		{topology.StreamFetched, topology.SchedulerFetchedConsumer(0)},
	} {
		testwait.Eventually(t, 10*time.Second, c.name+" settled", func() bool {
			cons, err := s.js.Consumer(ctx, c.stream, c.name)
			if err != nil {
				return false
			}
			info, err := cons.Info(ctx)
			return err == nil && info.NumAckPending == 0 && info.NumPending == 0
		})
	}

	// Graceful stop.
	s.stopService(t)
}

// A Redis outage is a passing failure: frontier messages are held back or nak'ed, never
// terminated, and are applied exactly once when Redis returns.
func TestServiceRetriesThroughRedisOutage(t *testing.T) {
	t.Parallel()
	s := startStack(t, redisproc.Options{AppendOnly: true, FsyncAlways: true}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	fx := s.runFetcher(ctx, fetched200)

	s.publish(topology.FrontierSubject(0), &crawlmsg.FrontierBatch{URLs: []crawlmsg.Discovered{{URL: "http://a.example/1"}}})
	testwait.Eventually(t, 30*time.Second, "first URL fetched", func() bool { return s.stats().Fetched == 1 })

	if err := s.redis.Stop(); err != nil {
		t.Fatal(err)
	}
	// While Redis is down the consumer gate holds messages back instead of spending deliveries.
	s.publish(topology.FrontierSubject(0), &crawlmsg.FrontierBatch{URLs: []crawlmsg.Discovered{{URL: "http://a.example/2"}, {URL: "http://b.example/1"}}})
	testwait.Eventually(t, 10*time.Second, "readiness reports redis down", func() bool {
		resp, err := http.Get("http://" + s.cfg.Common.HTTPAddr + "/readyz")
		if err != nil {
			return false
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode == http.StatusServiceUnavailable && strings.Contains(string(body), "redis")
	})
	rctx, rcancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer rcancel()
	if err := s.redis.Restart(rctx); err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, 60*time.Second, "URLs queued during the outage fetched", func() bool { return s.stats().Fetched == 3 })
	if n := s.metric("trawl_scheduler_messages_terminated_total", map[string]string{"consumer": "frontier"}); n != 0 {
		t.Fatalf("%v frontier messages terminated during a Redis outage; they must be retried", n)
	}
	seen := map[string]int{}
	for _, tk := range fx.snapshot() {
		seen[tk.URL]++
	}
	for _, u := range []string{"http://a.example/1", "http://a.example/2", "http://b.example/1"} {
		if seen[u] != 1 {
			t.Errorf("%s fetched %d times", u, seen[u])
		}
	}
	st := s.stats()
	if st.Accepted != 3 || st.Terminal() != 3 {
		t.Fatalf("stats %+v", st)
	}
}

// taskCount is how many tasks a crawl.fetch message holds (its header; 1 without one).
func taskCount(m jetstream.Msg) int {
	if n, err := strconv.Atoi(m.Headers().Get(crawlmsg.TasksHeader)); err == nil && n > 0 {
		return n
	}
	return 1
}

// capStream sets a stream's byte limit, as a small disk would, so a test reaches it with
// a few hundred messages, and returns the stream.
func (s *stack) capStream(ctx context.Context, t *testing.T, name string, maxBytes int64) jetstream.Stream {
	t.Helper()
	str, err := s.js.Stream(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	sc := str.CachedInfo().Config
	sc.MaxBytes = maxBytes
	if _, err := s.js.UpdateStream(ctx, sc); err != nil {
		t.Fatal(err)
	}
	return str
}
