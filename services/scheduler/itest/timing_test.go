package itest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/trawl/trawl/devstack/redisproc"
	"github.com/trawl/trawl/services/scheduler/internal/service"
	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/frontierkeys"
	"github.com/trawl/trawl/shared/natsx"
	"github.com/trawl/trawl/shared/testwait"
	"github.com/trawl/trawl/shared/topology"
)

// timedFetcher is a fetcher fleet of a given concurrency, consuming as the real one does
// (natsx.ConsumeEach: no more tasks taken than idle slots). It records when each host's
// tasks arrived and when their outcomes were sent, by the test's clock.
type timedFetcher struct {
	mu   sync.Mutex
	got  map[string][]time.Time // host → task arrivals
	sent map[string][]time.Time // host → outcome publishes
	n    int
}

func (s *stack) runTimedFetcher(ctx context.Context, concurrency int, work time.Duration, answer func(crawlmsg.FetchTask) crawlmsg.Outcome) *timedFetcher {
	s.t.Helper()
	cons, err := s.js.Consumer(ctx, topology.StreamFetch, topology.ConsumerFetcher)
	if err != nil {
		s.t.Fatal(err)
	}
	tf := &timedFetcher{got: map[string][]time.Time{}, sent: map[string][]time.Time{}}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	go func() {
		// As the real fetcher: slots count tasks, and a batch's tasks run at once.
		_ = natsx.ConsumeEach(ctx, cons, natsx.ConsumeOptions{Batch: concurrency, Log: quiet, Weight: taskCount}, func(ctx context.Context, m jetstream.Msg) error {
			tasks, err := crawlmsg.DecodeTasks(m.Data())
			if err != nil {
				return natsx.Permanent(err)
			}
			errs := make([]error, len(tasks))
			var wg sync.WaitGroup
			for i, tk := range tasks {
				wg.Go(func() {
					tf.mu.Lock()
					tf.got[tk.Host] = append(tf.got[tk.Host], time.Now())
					tf.n++
					tf.mu.Unlock()
					// The request's own time: this is the work being modelled, not a wait for state.
					time.Sleep(work)
					out := answer(tk)
					data, err := crawlmsg.Marshal(&out)
					if err != nil {
						errs[i] = natsx.Permanent(err)
						return
					}
					tf.mu.Lock()
					tf.sent[tk.Host] = append(tf.sent[tk.Host], time.Now())
					tf.mu.Unlock()
					_, errs[i] = s.js.Publish(ctx, topology.FetchedSubject(tk.Shard), data)
				})
			}
			wg.Wait()
			return errors.Join(errs...)
		})
	}()
	return tf
}

// gaps returns, per host, the time from each outcome to the host's next task.
func (tf *timedFetcher) gaps() map[string][]time.Duration {
	tf.mu.Lock()
	defer tf.mu.Unlock()
	out := map[string][]time.Duration{}
	for h, got := range tf.got {
		sent := tf.sent[h]
		for i := 1; i < len(got) && i-1 < len(sent); i++ {
			out[h] = append(out[h], got[i].Sub(sent[i-1]))
		}
	}
	return out
}

// Two schedulers serve one shard with clocks an hour apart either way. Every decision
// about time takes the Redis server's clock, so no host is dispatched before its delay
// after the previous outcome.
func TestSkewedSchedulersNeverDispatchEarly(t *testing.T) {
	t.Parallel()
	const minDelay = 300 * time.Millisecond
	s := startStack(t, redisproc.Options{}, map[string]string{"TRAWL_MIN_DELAY": minDelay.String()},
		service.WithClock(func() time.Time { return time.Now().Add(time.Hour) }))
	s.startService(nil, service.WithClock(func() time.Time { return time.Now().Add(-time.Hour) }))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	fx := s.runTimedFetcher(ctx, 8, 0, fetched200)
	var batch crawlmsg.FrontierBatch
	for h := range 4 {
		for p := range 4 {
			batch.URLs = append(batch.URLs, crawlmsg.Discovered{URL: fmt.Sprintf("http://skew%d.example/%d", h, p)})
		}
	}
	s.publish(topology.FrontierSubject(0), &batch)
	testwait.Eventually(t, 30*time.Second, "crawled", func() bool { return s.stats().Fetched == 16 })
	n := 0
	for h, gs := range fx.gaps() {
		for _, g := range gs {
			n++
			// Redis stores milliseconds: allow the truncation, nothing more.
			if g < minDelay-2*time.Millisecond {
				t.Errorf("host %s dispatched %s after its previous outcome, want at least %s", h, g, minDelay)
			}
		}
	}
	if n != 12 {
		t.Fatalf("%d gaps measured, want 12 (4 hosts x 3)", n)
	}
}

// The scheduler is down for longer than a lease while the fetchers finish their tasks.
// On restart the waiting outcomes are applied before any lease is reaped: nothing is
// fetched again, and a late outcome sets the host's delay from its response time.
func TestRestartAppliesWaitingOutcomesBeforeReaping(t *testing.T) {
	t.Parallel()
	s := startStack(t, redisproc.Options{}, map[string]string{
		"TRAWL_LEASE_TTL": "2s", "TRAWL_ACK_WAIT": "1s", "TRAWL_FSYNC": "always", "TRAWL_DELAY_FACTOR": "2"})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const hosts = 6
	var batch crawlmsg.FrontierBatch
	for h := range hosts {
		// Two URLs per host, so the host stays active and its next fetch time is kept.
		batch.URLs = append(batch.URLs, crawlmsg.Discovered{URL: fmt.Sprintf("http://out%d.example/1", h)},
			crawlmsg.Discovered{URL: fmt.Sprintf("http://out%d.example/2", h)})
	}
	s.publish(topology.FrontierSubject(0), &batch)

	// The fetchers take one task per host; the scheduler stops.
	cons, err := s.js.Consumer(ctx, topology.StreamFetch, topology.ConsumerFetcher)
	if err != nil {
		t.Fatal(err)
	}
	var tasks []crawlmsg.FetchTask
	testwait.Eventually(t, 30*time.Second, "a task per host", func() bool {
		mb, err := cons.Fetch(hosts, jetstream.FetchMaxWait(200*time.Millisecond))
		if err != nil {
			return false
		}
		for m := range mb.Messages() {
			tks, err := crawlmsg.DecodeTasks(m.Data())
			if err != nil {
				t.Fatal(err)
			}
			tasks = append(tasks, tks...)
			_ = m.Ack()
		}
		return len(tasks) == hosts
	})
	s.stopService(t)

	// They finish while it is down; the outcomes wait in the stream past every deadline
	// and the grace (TRAWL_ACK_WAIT).
	const took = 1500 * time.Millisecond
	var last int64
	for _, tk := range tasks {
		out := fetched200(tk)
		out.DurationMs = took.Milliseconds()
		s.publish(topology.FetchedSubject(0), &out)
		last = max(last, tk.Deadline)
	}
	testwait.Eventually(t, 30*time.Second, "deadlines and grace past by the Redis clock", func() bool {
		now, err := s.rdb.Time(ctx).Result()
		return err == nil && now.UnixMilli() > last+s.cfg.Common.AckWait.Milliseconds()+500
	})

	s.startService(nil)
	outcomes, err := s.js.Consumer(ctx, topology.StreamFetched, topology.SchedulerFetchedConsumer(0))
	if err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, 30*time.Second, "waiting outcomes applied", func() bool {
		info, err := outcomes.Info(ctx)
		return err == nil && info.NumPending == 0 && info.NumAckPending == 0
	})
	applied := time.Now()
	st := s.stats()
	if st.Expired != 0 || st.Fetched != hosts || st.Dispatched > 2*hosts {
		t.Fatalf("stats %+v: leases reaped whose outcomes were waiting", st)
	}
	// A late outcome is applied as any other: the host waits k x its response time.
	for _, tk := range tasks {
		next, err := strconv.ParseInt(s.rdb.HGet(ctx, s.f.Keyspace().Key("host", tk.Host), "next").Val(), 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		if min := applied.Add(-5*time.Second).UnixMilli() + 2*took.Milliseconds(); next < min {
			t.Errorf("host %s next fetch at %d, want at least %d (k x response time after the outcome)", tk.Host, next, min)
		}
	}
	// The second URL of each host is dispatched once, after its delay; the first never again.
	seen := map[string]int{}
	testwait.Eventually(t, 30*time.Second, "second URLs dispatched", func() bool {
		mb, err := cons.Fetch(hosts, jetstream.FetchMaxWait(200*time.Millisecond))
		if err == nil {
			for m := range mb.Messages() {
				tks, _ := crawlmsg.DecodeTasks(m.Data())
				for _, tk := range tks {
					seen[tk.URL]++
				}
				_ = m.Ack()
			}
		}
		return len(seen) == hosts
	})
	for _, tk := range tasks {
		if seen[tk.URL] != 0 {
			t.Errorf("%s fetched again after its outcome was waiting", tk.URL)
		}
	}
}

// Dispatch keeps the tasks waiting for a fetcher at a small multiple of the tasks being
// fetched, so with a slow fetcher of concurrency 2 and many hosts no task waits out its
// lease.
func TestDispatchFollowsFetchCapacity(t *testing.T) {
	s := startStack(t, redisproc.Options{}, map[string]string{"TRAWL_LEASE_TTL": "3s", "TRAWL_ACK_WAIT": "1s", "TRAWL_FSYNC": "always"})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const hosts = 120
	var batch crawlmsg.FrontierBatch
	for h := range hosts {
		batch.URLs = append(batch.URLs, crawlmsg.Discovered{URL: fmt.Sprintf("http://cap%d.example/", h)})
	}
	s.publish(topology.FrontierSubject(0), &batch)
	// 120 tasks of 50 ms two at a time take 3 s: dispatched all at once, the last would
	// wait out a 3 s lease.
	s.runTimedFetcher(ctx, 2, 50*time.Millisecond, fetched200)
	cons, err := s.js.Consumer(ctx, topology.StreamFetch, topology.ConsumerFetcher)
	if err != nil {
		t.Fatal(err)
	}
	var waiting []uint64
	testwait.Eventually(t, 30*time.Second, "crawled", func() bool {
		if info, err := cons.Info(ctx); err == nil {
			waiting = append(waiting, info.NumPending)
		}
		return s.stats().Fetched == hosts
	})
	sort.Slice(waiting, func(i, j int) bool { return waiting[i] > waiting[j] })
	// (TRAWL_DISPATCH_AHEAD-1) x max(busy 2, 4) = 8, plus one batch taken while a reading
	// was out.
	if len(waiting) == 0 || waiting[0] > 12 {
		t.Fatalf("most tasks waiting for a fetcher %v, want at most 12", waiting[:min(len(waiting), 5)])
	}
	if st := s.stats(); st.Expired != 0 || st.Dispatched != hosts {
		t.Fatalf("stats %+v: want every task fetched within its lease", st)
	}
}

// With the parser stopped, dispatch holds before CRAWL_PAGES reaches its byte limit, the
// hold is counted and published, and the crawl completes once the parser is back.
func TestDispatchHoldsWhileParserBehind(t *testing.T) {
	t.Parallel()
	s := startStack(t, redisproc.Options{}, map[string]string{"TRAWL_HOLD_PARSER_BACKLOG": "20"})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const hosts, pageSize, limit = 300, 1024, 200 * 1024
	str := s.capStream(ctx, t, topology.StreamPages, limit)
	body := make([]byte, pageSize)
	// About 100 pages a second: the gate reads the backlog four times a second, so it holds
	// a few dozen pages past the threshold, far below the limit.
	s.runTimedFetcher(ctx, 2, 20*time.Millisecond, func(tk crawlmsg.FetchTask) crawlmsg.Outcome {
		if _, err := s.js.Publish(ctx, topology.SubjectPages, body); err != nil && ctx.Err() == nil {
			t.Errorf("publish page: %v", err)
		}
		return fetched200(tk)
	})
	var batch crawlmsg.FrontierBatch
	for h := range hosts {
		batch.URLs = append(batch.URLs, crawlmsg.Discovered{URL: fmt.Sprintf("http://bp%d.example/", h)})
	}
	s.publish(topology.FrontierSubject(0), &batch)

	testwait.Eventually(t, 30*time.Second, "dispatch held for the parser", func() bool {
		return strings.Contains(s.rdb.HGet(ctx, frontierkeys.Dispatch(s.cfg.Common.RedisPrefix), "held").Val(), "parser") &&
			s.metric("trawl_scheduler_dispatch_backpressure", map[string]string{"stage": "parser"}) == 1
	})
	// Held: the fetchers drain what is out, then nothing more comes.
	testwait.Eventually(t, 30*time.Second, "tasks out drained", func() bool { return s.stats().InFlight == 0 })
	held := s.stats()
	if held.Fetched >= hosts {
		t.Fatalf("stats %+v: the crawl ran to the end with the parser stopped", held)
	}
	info, err := str.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.FirstSeq != 1 || info.State.Msgs != uint64(held.Fetched) {
		t.Fatalf("pages stream first seq %d, %d pages for %d fetched: unparsed pages were dropped", info.State.FirstSeq, info.State.Msgs, held.Fetched)
	}
	if n := s.metric("trawl_scheduler_dispatch_backpressure_total", map[string]string{"stage": "parser"}); n < 1 {
		t.Fatalf("dispatch_backpressure_total{stage=parser} %v, want the hold counted", n)
	}
	if n := s.rdb.HGet(ctx, frontierkeys.Dispatch(s.cfg.Common.RedisPrefix), "holds").Val(); n == "" || n == "0" {
		t.Fatalf("holds %q in the dispatch state, want counted", n)
	}

	// The parser returns: the backlog drains, dispatch resumes and the crawl completes.
	parser, err := s.js.Consumer(ctx, topology.StreamPages, topology.ConsumerParser)
	if err != nil {
		t.Fatal(err)
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	go func() {
		_ = natsx.ConsumeBatches(ctx, parser, natsx.ConsumeOptions{Log: quiet}, func(context.Context, []jetstream.Msg) []error { return nil })
	}()
	testwait.Eventually(t, 60*time.Second, "crawl completed", func() bool { return s.stats().Fetched == hosts })
	info, err = str.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.LastSeq != hosts {
		t.Fatalf("pages stream %+v, want all %d pages stored", info.State, hosts)
	}
}
