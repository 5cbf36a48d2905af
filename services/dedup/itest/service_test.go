package itest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/trawl/trawl/devstack/inproc"
	"github.com/trawl/trawl/devstack/natsembed"
	"github.com/trawl/trawl/devstack/redisproc"
	"github.com/trawl/trawl/devstack/scrape"
	"github.com/trawl/trawl/services/dedup/internal/bloom"
	"github.com/trawl/trawl/services/dedup/internal/config"
	"github.com/trawl/trawl/services/dedup/internal/seen"
	"github.com/trawl/trawl/services/dedup/internal/service"
	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/natsx"
	"github.com/trawl/trawl/shared/testwait"
	"github.com/trawl/trawl/shared/topology"
)

// stack is an embedded NATS, a real redis-server and the dedup service running in-process.
type stack struct {
	cfg   config.Config
	js    jetstream.JetStream
	nats  *natsembed.Server
	redis *redisproc.Server
	// svc is the service last started; addr its HTTP address.
	svc  *inproc.Running[*service.Service]
	addr string
}

func startStack(t *testing.T, redisOpts redisproc.Options, env map[string]string) *stack {
	t.Helper()
	ns := natsembed.StartT(t)
	rs := redisproc.StartT(t, redisOpts)
	vars := map[string]string{
		"TRAWL_NATS_URL":  ns.URL(),
		"TRAWL_REDIS_URL": rs.URL(),
		"TRAWL_SHARDS":    "2",
		// The service binds a port of the kernel's choosing and start asks it which: a
		// port probed free and bound later may be another test's by then, whose service
		// would answer this one's probes.
		"TRAWL_HTTP_ADDR":           "127.0.0.1:0",
		"TRAWL_MAX_DEPTH":           "3",
		"TRAWL_BLOOM_CAPACITY":      "100000",
		"TRAWL_BLOOM_KEY_BITS":      "65536",
		"TRAWL_BLOOM_FILL_INTERVAL": "1s",
		"TRAWL_ACK_WAIT":            "5s",
		"TRAWL_LOG_LEVEL":           "warn",
	}
	cfg := inproc.Config(t, config.Load, vars, env)

	ctx := testwait.Context(t)
	quiet := slog.New(slog.DiscardHandler)
	nc, js, err := natsx.Connect(ctx, ns.URL(), "itest", quiet)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	// The streams must exist before the test publishes; the service declares the same.
	if err := natsx.Ensure(ctx, js, cfg.Common.Topology(), cfg.Common.Timings(), quiet); err != nil {
		t.Fatal(err)
	}

	s := &stack{cfg: cfg, js: js, nats: ns, redis: rs}
	s.start(t)
	return s
}

// start runs the service in-process until s.svc.Stop (or the test's end) and waits until
// it answers /readyz.
func (s *stack) start(t *testing.T) {
	t.Helper()
	log := inproc.Logger(t, slog.LevelWarn, nil)
	s.svc = inproc.Start(t, log, func(ctx context.Context) (*service.Service, error) { return service.New(ctx, s.cfg, log) })
	s.addr = s.svc.Svc.Addr()
	s.svc.WaitReady(t, s.addr)
}

func (s *stack) publishDiscovered(t *testing.T, urls ...crawlmsg.Discovered) {
	t.Helper()
	data, err := crawlmsg.Marshal(&crawlmsg.DiscoveredBatch{Source: "http://itest/", URLs: urls})
	if err != nil {
		t.Fatal(err)
	}
	s.publishRaw(t, data)
}

func (s *stack) publishRaw(t *testing.T, data []byte) {
	t.Helper()
	// Right after one of the tests' NATS restarts the client fails a publish at once
	// rather than keep it (natsx.Connect): sent again until the connection takes it.
	testwait.EventuallyState(t, 20*time.Second, "a publish to "+topology.SubjectDiscovered, func() (bool, string) {
		_, err := s.js.Publish(testwait.Context(t), topology.SubjectDiscovered, data)
		if err != nil && !errors.Is(err, nats.ErrReconnectBufExceeded) {
			t.Fatal(err)
		}
		return err == nil, fmt.Sprint(err)
	})
}

// frontier drains what is available on each shard's scheduler consumer, acking it.
// It returns per shard the URLs in arrival order and the Nats-Msg-Ids seen.
func (s *stack) frontier(t *testing.T, into map[int][]string, ids map[string]int) {
	t.Helper()
	for shard := range s.cfg.Common.Shards {
		natsembed.TakeAll(t, s.js, topology.StreamFrontier, topology.SchedulerFrontierConsumer(shard), 30*time.Second, func(m jetstream.Msg) {
			if m.Subject() != topology.FrontierSubject(shard) {
				t.Errorf("scheduler-%d got subject %s", shard, m.Subject())
			}
			ids[m.Headers().Get(nats.MsgIdHdr)]++
			var b crawlmsg.FrontierBatch
			if err := crawlmsg.Unmarshal(m.Data(), &b); err != nil {
				t.Errorf("frontier message: %v", err)
			}
			for _, d := range b.URLs {
				into[shard] = append(into[shard], d.URL)
			}
		})
	}
}

// idle reports whether the dedup consumer has nothing pending or unacked.
func (s *stack) idle(t *testing.T) bool {
	t.Helper()
	cons, err := s.js.Consumer(testwait.Context(t), topology.StreamDiscovered, topology.ConsumerDedup)
	if err != nil {
		t.Fatal(err)
	}
	info, err := cons.Info(testwait.Context(t))
	if err != nil {
		t.Fatal(err)
	}
	return info.NumPending == 0 && info.NumAckPending == 0
}

// metric is the sum of the samples series selects ("name{labels}") from /metrics (0 if
// none is exported).
func (s *stack) metric(t *testing.T, series string) float64 {
	t.Helper()
	return scrape.Value(t, s.addr, series)
}

func link(u string, depth int) crawlmsg.Discovered {
	return crawlmsg.Discovered{URL: u, Depth: depth, Via: crawlmsg.ViaLink}
}

func TestServiceRoutesNewURLsOnce(t *testing.T) {
	t.Parallel()
	s := startStack(t, redisproc.Options{}, nil)

	// With 2 shards: a.test and c.test are shard 0, b.test and d.test shard 1.
	s.publishDiscovered(t,
		link("http://a.test/1", 1),
		link("http://b.test/1", 1),
		link("HTTP://A.TEST:80/./1", 1), // the same URL as the first, not yet normalised
		link("ftp://a.test/file", 1),    // invalid
		link("http://a.test/deep", 4),   // too deep (max 3)
		link("http://c.test/", 3),
	)
	s.publishDiscovered(t,
		link("http://b.test/1", 2), // seen in the first message
		link("http://d.test/x?y=1#frag", 2),
		link("http://b.test/2", 2),
	)
	s.publishRaw(t, []byte("this is not JSON"))
	s.publishRaw(t, []byte(`{"v":99,"urls":[{"url":"http://a.test/v99"}]}`))
	s.publishDiscovered(t,
		link("http://a.test/1", 1), // seen two messages ago
		link("http://a.test/2", 2),
		link("http://d.test/x?y=1", 3), // seen
	)

	want := map[int][]string{
		0: {"http://a.test/1", "http://c.test/", "http://a.test/2"},
		1: {"http://b.test/1", "http://d.test/x?y=1", "http://b.test/2"},
	}
	got := map[int][]string{}
	ids := map[string]int{}
	testwait.Eventually(t, 20*time.Second, "all new URLs on the frontier", func() bool {
		s.frontier(t, got, ids)
		return len(got[0]) >= len(want[0]) && len(got[1]) >= len(want[1])
	})
	testwait.Eventually(t, 20*time.Second, "dedup consumer idle", func() bool { return s.idle(t) })
	s.frontier(t, got, ids) // anything late would be a duplicate
	for shard, urls := range want {
		g := slices.Clone(got[shard])
		slices.Sort(g)
		w := slices.Clone(urls)
		slices.Sort(w)
		if !slices.Equal(g, w) {
			t.Errorf("shard %d: got %v, want each of %v exactly once", shard, got[shard], urls)
		}
	}
	for id, n := range ids {
		if n != 1 || !strings.HasPrefix(id, "front:"+topology.StreamDiscovered+":") {
			t.Errorf("frontier message id %q seen %d times", id, n)
		}
	}
	// First message: one batch per shard; second: shard 1 only (d.test, b.test/2); third:
	// shard 0 only (a.test/2).
	if len(ids) != 4 {
		t.Errorf("%d frontier messages (%v), want 4: one per input message and shard with new URLs", len(ids), ids)
	}

	// Both poison messages were terminated, and the service went on to the next message.
	if n := s.metric(t, `trawl_dedup_messages_terminated_total{reason="permanent"}`); n != 2 {
		t.Errorf("terminated permanent = %v, want 2", n)
	}
	for result, want := range map[string]float64{"new": 6, "seen": 4, "invalid": 1, "too_deep": 1} {
		if n := s.metric(t, `trawl_dedup_urls_total{result="`+result+`"}`); n != want {
			t.Errorf("urls_total{result=%q} = %v, want %v", result, n, want)
		}
	}
	if n := s.metric(t, "trawl_dedup_frontier_messages_total"); n != 4 {
		t.Errorf("frontier_messages_total = %v, want 4", n)
	}
	if n := s.metric(t, "trawl_dedup_redis_duration_seconds_count"); n < 1 {
		t.Errorf("redis_duration_seconds_count = %v, want at least one observation", n)
	}
	testwait.Eventually(t, 10*time.Second, "fill ratio measured", func() bool {
		return s.metric(t, "trawl_dedup_bloom_fill_ratio") > 0
	})

	// The memos of published messages are gone.
	c := redisClient(t, s.redis)
	keys, err := c.Keys(testwait.Context(t), "trawl:{dedup}:done:*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 0 {
		t.Errorf("memo keys left after publishing: %v", keys)
	}

	if err := s.svc.Stop(); err != nil {
		t.Errorf("graceful stop: %v", err)
	}
}

// TestServiceWaitsForRedis: while Redis is down the service stops taking messages instead
// of failing them over and over (which would spend their deliveries on the outage); when
// Redis is back the message is handled and nothing is lost.
func TestServiceWaitsForRedis(t *testing.T) {
	t.Parallel()
	s := startStack(t, redisproc.Options{AppendOnly: true, FsyncAlways: true}, nil)
	s.publishDiscovered(t, link("http://a.test/before", 0))
	got, ids := map[int][]string{}, map[string]int{}
	testwait.Eventually(t, 20*time.Second, "first URL on the frontier", func() bool {
		s.frontier(t, got, ids)
		return len(got[0]) == 1
	})

	if err := s.redis.Stop(); err != nil {
		t.Fatal(err)
	}
	const failures = `trawl_dedup_failures_total{stage="redis"}`
	s.publishDiscovered(t, link("http://a.test/before", 0), link("http://b.test/during", 0))
	// The consume loop was already waiting for a message when Redis went away, so this
	// one batch fails; after that the gate must hold the loop.
	testwait.Eventually(t, 20*time.Second, "the in-flight batch to fail", func() bool { return s.metric(t, failures) >= 1 })
	// Without the gate the nak'ed message would come back after 250ms, 500ms, 1s … and
	// fail each time. Watching for the absence of retries needs a fixed window.
	time.Sleep(3 * time.Second)
	if n := s.metric(t, failures); n != 1 {
		t.Fatalf("%s = %v while Redis was down, want 1: the handler kept running", failures, n)
	}

	if err := s.redis.Restart(testwait.Context(t)); err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, 30*time.Second, "URL published after Redis came back", func() bool {
		s.frontier(t, got, ids)
		return len(got[1]) == 1
	})
	testwait.Eventually(t, 20*time.Second, "dedup consumer idle", func() bool { return s.idle(t) })
	s.frontier(t, got, ids)
	// The filter survived the restart (AOF): the URL seen before the outage stays seen.
	if !slices.Equal(got[0], []string{"http://a.test/before"}) || !slices.Equal(got[1], []string{"http://b.test/during"}) {
		t.Errorf("frontier after outage: %v", got)
	}
}

// takeAsCrashed plays an instance that pulled the next message of the dedup consumer, ran
// its seen test (bits set, memo stored) and died before publishing or acking: the message
// is redelivered to the service after the consumer's AckWait. The service must be stopped.
// It returns the message's id and stream sequence.
func (s *stack) takeAsCrashed(t *testing.T, c *redis.Client, urls []string) (string, uint64) {
	t.Helper()
	ctx := testwait.Context(t)
	cons, err := s.js.Consumer(ctx, topology.StreamDiscovered, topology.ConsumerDedup)
	if err != nil {
		t.Fatal(err)
	}
	batch, err := cons.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var m jetstream.Msg
	for msg := range batch.Messages() {
		m = msg
	}
	if m == nil {
		t.Fatal("no message to take")
	}
	md, err := m.Metadata()
	if err != nil {
		t.Fatal(err)
	}
	f, err := bloom.New(s.cfg.Common.RedisPrefix, s.cfg.Bloom)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Init(ctx, c); err != nil {
		t.Fatal(err)
	}
	msg := seen.Message{ID: natsx.MsgID(m), Seq: md.Sequence.Stream}
	for i, u := range urls {
		msg.URLs = append(msg.URLs, seen.URL{Index: i, URL: u})
	}
	if _, err := seen.New(c, f, s.cfg.Common.RedisPrefix).TestAndSet(ctx, []seen.Message{msg}); err != nil {
		t.Fatal(err)
	}
	return msg.ID, msg.Seq
}

// TestServiceRedeliveryAfterCrash replays the crash window: an earlier instance ran the
// seen test for a message (bits set, memo stored) and died before publishing. The
// redelivered message must still produce its URLs, although their bits are now set.
func TestServiceRedeliveryAfterCrash(t *testing.T) {
	t.Parallel()
	s := startStack(t, redisproc.Options{}, nil)
	c := redisClient(t, s.redis)
	if err := s.svc.Stop(); err != nil {
		t.Fatal(err)
	}
	s.publishDiscovered(t, link("http://a.test/lost", 1), link("http://a.test/lost", 1), link("http://b.test/lost", 1))
	// Index 1 (the duplicate) was not new.
	id, _ := s.takeAsCrashed(t, c, []string{"http://a.test/lost", "http://a.test/lost", "http://b.test/lost"})
	s.start(t)
	// The message is still in the stream: nothing was lost, the redelivery uses the memo.
	if n := s.metric(t, "trawl_dedup_recovered_total"); n != 0 {
		t.Errorf("trawl_dedup_recovered_total = %v, want 0", n)
	}

	got, ids := map[int][]string{}, map[string]int{}
	testwait.Eventually(t, 20*time.Second, "the memoised URLs on the frontier", func() bool {
		s.frontier(t, got, ids)
		return len(got[0]) == 1 && len(got[1]) == 1
	})
	testwait.Eventually(t, 20*time.Second, "dedup consumer idle", func() bool { return s.idle(t) })
	s.frontier(t, got, ids)
	if !slices.Equal(got[0], []string{"http://a.test/lost"}) || !slices.Equal(got[1], []string{"http://b.test/lost"}) {
		t.Errorf("frontier = %v, want each URL once", got)
	}
	if ids[topology.FrontierID(id, 0)] != 1 || ids[topology.FrontierID(id, 1)] != 1 {
		t.Errorf("frontier message ids %v", ids)
	}
	// A second copy of the message (redelivered after the publish) adds nothing.
	s.publishDiscovered(t, link("http://a.test/lost", 1), link("http://b.test/lost", 1))
	testwait.Eventually(t, 20*time.Second, "second message handled", func() bool {
		return s.metric(t, `trawl_dedup_urls_total{result="seen"}`) == 3
	})
	s.frontier(t, got, ids)
	if len(got[0])+len(got[1]) != 2 {
		t.Errorf("frontier after a second copy = %v, want no more URLs", got)
	}
}

// TestServiceGracefulStopAndRestart stops the service while it has work and starts it
// again on the same Redis and NATS: the restarted instance accepts the existing filter and
// every URL reaches the frontier exactly once. That the stop finishes and acks what the
// service holds is TestConsumeBatchesStopSettlesWhatItPulled's (shared/itest): here the
// stop comes with a pull request open, so the server may have sent a few messages as the
// service unsubscribed, which come back after AckWait (5s here) to the restarted instance.
func TestServiceGracefulStopAndRestart(t *testing.T) {
	t.Parallel()
	s := startStack(t, redisproc.Options{}, map[string]string{"TRAWL_DEDUP_BATCH": "8"})
	const msgs, per = 200, 10
	want := map[string]bool{}
	for i := range msgs {
		var us []crawlmsg.Discovered
		for j := range per {
			u := fmt.Sprintf("http://h%d.test/p%d", i%7, i*per+j)
			us = append(us, link(u, 1))
			want[u] = true
		}
		// Every message also repeats a URL of the previous one.
		if i > 0 {
			us = append(us, link(fmt.Sprintf("http://h%d.test/p%d", (i-1)%7, (i-1)*per), 1))
		}
		s.publishDiscovered(t, us...)
	}
	testwait.Eventually(t, 20*time.Second, "some frontier output", func() bool {
		return s.metric(t, "trawl_dedup_frontier_messages_total") > 0
	})
	if err := s.svc.Stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}
	cons, err := s.js.Consumer(testwait.Context(t), topology.StreamDiscovered, topology.ConsumerDedup)
	if err != nil {
		t.Fatal(err)
	}
	info, err := cons.Info(testwait.Context(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("stopped with %d of %d messages not yet delivered, %d delivered and not yet acked", info.NumPending, msgs, info.NumAckPending)

	s.start(t)
	got, ids := map[int][]string{}, map[string]int{}
	testwait.Eventually(t, 30*time.Second, "every URL on the frontier", func() bool {
		s.frontier(t, got, ids)
		return len(got[0])+len(got[1]) >= len(want)
	})
	testwait.Eventually(t, 20*time.Second, "dedup consumer idle", func() bool { return s.idle(t) })
	s.frontier(t, got, ids)
	seen := map[string]int{}
	for _, urls := range got {
		for _, u := range urls {
			seen[u]++
		}
	}
	for u := range want {
		if seen[u] != 1 {
			t.Errorf("%s reached the frontier %d times, want once", u, seen[u])
		}
	}
	if len(seen) != len(want) {
		t.Errorf("%d distinct URLs on the frontier, want %d", len(seen), len(want))
	}
}

// handleFirst has the recovery tests' first discovered message handled, its one URL on
// the frontier (read into got and ids).
func (s *stack) handleFirst(t *testing.T, got map[int][]string, ids map[string]int) {
	t.Helper()
	s.publishDiscovered(t, link("http://a.test/old", 1))
	testwait.Eventually(t, 20*time.Second, "the first message's URL on the frontier", func() bool {
		s.frontier(t, got, ids)
		return len(got[0])+len(got[1]) == 1
	})
}

// remakeStreams deletes streams and makes them again, empty, as a NATS that lost them.
func (s *stack) remakeStreams(t *testing.T, names ...string) {
	t.Helper()
	ctx := testwait.Context(t)
	for _, name := range names {
		if err := s.js.DeleteStream(ctx, name); err != nil {
			t.Fatal(err)
		}
	}
	if err := natsx.Ensure(ctx, s.js, s.cfg.Common.Topology(), s.cfg.Common.Timings(), slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
}

// frontierAgain waits for as many URLs on the frontier as want, which they must be, and
// returns them and their messages' ids, as frontier does.
func (s *stack) frontierAgain(t *testing.T, want ...string) (map[int][]string, map[string]int) {
	t.Helper()
	again, ids := map[int][]string{}, map[string]int{}
	var all []string
	testwait.Eventually(t, 20*time.Second, fmt.Sprintf("%d URLs published again on the frontier", len(want)), func() bool {
		s.frontier(t, again, ids)
		all = slices.Concat(slices.Collect(maps.Values(again))...)
		return len(all) >= len(want)
	})
	slices.Sort(all)
	if !slices.Equal(all, want) {
		t.Errorf("published again %v, want %v", all, want)
	}
	return again, ids
}

// TestServiceRecoversInputsNATSLost replays an OS crash at TRAWL_FSYNC=1s that brings NATS
// back older than Redis: a discovered message was handled (its URLs set in the filter,
// its frontier message stored), then NATS lost both while Redis kept the bits and the
// memo. The page it came from, parsed again, finds its URLs seen, so only the memo can
// bring them back: at start dedup publishes its new URLs again, once. A restart after
// that publishes nothing (TestServiceRedeliveryAfterCrash: nor does one that finds the
// memoised message still in the stream).
func TestServiceRecoversInputsNATSLost(t *testing.T) {
	t.Parallel()
	s := startStack(t, redisproc.Options{}, map[string]string{"TRAWL_DEDUP_MEMO_TRIM_INTERVAL": "1s"})
	c := redisClient(t, s.redis)
	ctx := testwait.Context(t)
	store := seen.New(c, nil, s.cfg.Common.RedisPrefix)
	got, ids := map[int][]string{}, map[string]int{}

	// Acked and trimmed before the instant NATS comes back to.
	s.handleFirst(t, got, ids)
	testwait.Eventually(t, 20*time.Second, "its memo trimmed", func() bool {
		n, err := c.ZCard(ctx, store.MemoSeqKey()).Result()
		return err == nil && n == 0 && s.idle(t)
	})

	// Handled within NATS's lost seconds: on the frontier, memo kept.
	s.publishDiscovered(t, link("http://a.test/old", 1), link("http://b.test/new", 2), link("http://c.test/new", 2))
	testwait.Eventually(t, 20*time.Second, "the second message's URLs on the frontier", func() bool {
		s.frontier(t, got, ids)
		return len(got[0])+len(got[1]) == 3
	})
	lostID, err := c.ZRange(ctx, store.MemoSeqKey(), 0, -1).Result()
	if err != nil || len(lostID) != 1 {
		t.Fatalf("memos after the second message: %v, %v; want one", lostID, err)
	}
	if err := s.svc.Stop(); err != nil {
		t.Fatal(err)
	}
	// NATS comes back older: both streams as they were before the second message (here
	// made again, so its sequence lies beyond the stream's last).
	s.remakeStreams(t, topology.StreamDiscovered, topology.StreamFrontier)
	s.start(t)
	again, againIDs := s.frontierAgain(t, "http://b.test/new", "http://c.test/new")
	for id := range againIDs {
		if ids[id] != 1 {
			t.Errorf("published again as %s, not under an id of the first time (%v)", id, ids)
		}
	}
	if n := s.metric(t, "trawl_dedup_recovered_total"); n != 1 {
		t.Errorf("trawl_dedup_recovered_total = %v, want 1", n)
	}
	// The page parsed again: its links are seen now, and go nowhere.
	s.publishDiscovered(t, link("http://a.test/old", 1), link("http://b.test/new", 2), link("http://c.test/new", 2))
	testwait.Eventually(t, 20*time.Second, "the copy handled", func() bool { return s.idle(t) })
	// The memo goes a window after the start, and the next start publishes nothing.
	testwait.Eventually(t, 20*time.Second, "the recovered memo forgotten", func() bool {
		n, err := c.ZCard(ctx, store.MemoSeqKey()).Result()
		return err == nil && n == 0
	})
	if err := s.svc.Stop(); err != nil {
		t.Fatal(err)
	}
	s.start(t)
	s.frontier(t, again, againIDs)
	if len(again[0])+len(again[1]) != 2 {
		t.Errorf("frontier after the copy and a restart: %v, want nothing more", again)
	}
}

// TestServiceRecoversBothOfASequenceGivenTwice: a rolled-back NATS gave the sequence of a
// message it lost to a newer one, and dedup handled and acknowledged the newer one before
// its walk read the sequence (a reconnect walk runs beside the consumer), so two memos
// share a sequence the stream no longer holds. Which one NATS lost cannot be told from the
// stream: both are published again (natsx.Verdict). The state is made by hand, as the
// scheduler's page log test does: the first message's memo moved onto the second's
// sequence, and the frontier stream made again, as NATS would have lost it.
func TestServiceRecoversBothOfASequenceGivenTwice(t *testing.T) {
	t.Parallel()
	s := startStack(t, redisproc.Options{}, map[string]string{"TRAWL_DEDUP_MEMO_TRIM_INTERVAL": "1h"})
	c := redisClient(t, s.redis)
	ctx := testwait.Context(t)
	store := seen.New(c, nil, s.cfg.Common.RedisPrefix)
	got, ids := map[int][]string{}, map[string]int{}
	s.publishDiscovered(t, link("http://a.test/lost", 1))
	s.publishDiscovered(t, link("http://b.test/taken", 1))
	testwait.Eventually(t, 20*time.Second, "both messages' URLs on the frontier, both acknowledged", func() bool {
		s.frontier(t, got, ids)
		return len(got[0])+len(got[1]) == 2 && s.idle(t)
	})
	memos, err := c.ZRangeWithScores(ctx, store.MemoSeqKey(), 0, -1).Result()
	if err != nil || len(memos) != 2 {
		t.Fatalf("memos: %v, %v; want two", memos, err)
	}
	if err := s.svc.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := c.ZAddXX(ctx, store.MemoSeqKey(), redis.Z{Score: memos[1].Score, Member: memos[0].Member}).Err(); err != nil {
		t.Fatal(err)
	}
	s.remakeStreams(t, topology.StreamFrontier)
	s.start(t)
	s.frontierAgain(t, "http://a.test/lost", "http://b.test/taken")
	if n := s.metric(t, "trawl_dedup_recovered_total"); n != 2 {
		t.Errorf("trawl_dedup_recovered_total = %v, want 2", n)
	}
}

// TestServiceRecoversInputsNATSLostWhileRunning replays the OS crash of NATS's machine
// alone (another node of a Kubernetes cluster) at TRAWL_FSYNC=1s: NATS comes back older
// than Redis under a dedup that keeps running and only reconnects. A discovered message
// handled in NATS's lost seconds is gone with its frontier messages while Redis kept its
// bits and memo, and the crawl goes on: the next discovered message takes its sequence.
// At the reconnect dedup publishes the lost message's new URLs again, once; a reconnect
// that lost nothing publishes nothing.
func TestServiceRecoversInputsNATSLostWhileRunning(t *testing.T) {
	t.Parallel()
	// No trim while the test runs: the lost message's memo must outlive its ack, as it
	// does when NATS loses its last second (the trim runs every 30s by default).
	s := startStack(t, redisproc.Options{}, map[string]string{"TRAWL_DEDUP_MEMO_TRIM_INTERVAL": "1h"})
	c := redisClient(t, s.redis)
	ctx := testwait.Context(t)
	store := seen.New(c, nil, s.cfg.Common.RedisPrefix)
	got, ids := map[int][]string{}, map[string]int{}

	// Handled and acknowledged before the instant NATS comes back to (a message whose ack
	// the snapshot does not hold is handled again after the rollback, as designed).
	s.handleFirst(t, got, ids)
	testwait.Eventually(t, 20*time.Second, "the first message acknowledged", func() bool { return s.idle(t) })

	// A reconnect that lost nothing: NATS stopped and started on its store (snapshot A).
	rollBack := s.nats.SnapshotT(t)

	// Handled within NATS's lost seconds, after the reconnect: on the frontier, memo kept.
	s.publishDiscovered(t, link("http://a.test/old", 1), link("http://b.test/new", 2), link("http://c.test/new", 2))
	testwait.Eventually(t, 20*time.Second, "the second message's URLs on the frontier", func() bool {
		s.frontier(t, got, ids)
		return len(got[0])+len(got[1]) == 3
	})
	testwait.Eventually(t, 20*time.Second, "the second message's memo", func() bool {
		n, err := c.ZCard(ctx, store.MemoSeqKey()).Result()
		return err == nil && n == 2
	})
	if n := s.metric(t, "trawl_dedup_recovered_total"); n != 0 {
		t.Fatalf("trawl_dedup_recovered_total = %v after a reconnect that lost nothing, want 0", n)
	}

	// NATS's machine crashes: it comes back from snapshot A, older than Redis, and the
	// crawl goes on at once, a new message taking the lost one's sequence.
	rollBack()
	s.publishDiscovered(t, link("http://b.test/new", 2), link("http://d.test/new", 2))

	again, againIDs := map[int][]string{}, map[string]int{}
	want := []string{"http://b.test/new", "http://c.test/new", "http://d.test/new"}
	var all []string
	testwait.EventuallyState(t, 20*time.Second, "the lost message's new URLs and the third message's on the frontier", func() (bool, string) {
		s.frontier(t, again, againIDs)
		all = append(slices.Clone(again[0]), again[1]...)
		slices.Sort(all)
		return slices.Equal(all, want), fmt.Sprintf("frontier %v, trawl_dedup_recovered_total %v", all, s.metric(t, "trawl_dedup_recovered_total"))
	})
	if n := s.metric(t, "trawl_dedup_recovered_total"); n != 1 {
		t.Errorf("trawl_dedup_recovered_total = %v, want 1", n)
	}
	// The copies go under the frontier ids of the first time; the third message's under its own.
	fresh := 0
	for id := range againIDs {
		if ids[id] == 0 {
			fresh++
		}
	}
	if fresh != 1 {
		t.Errorf("frontier ids after the rollback %v: %d not of the first time (%v), want 1 (the third message's)", againIDs, fresh, ids)
	}
	// Nothing more comes: the copy is published once.
	testwait.Eventually(t, 20*time.Second, "the third message handled", func() bool { return s.idle(t) })
	s.frontier(t, again, againIDs)
	all = append(slices.Clone(again[0]), again[1]...)
	slices.Sort(all)
	if !slices.Equal(all, want) {
		t.Errorf("frontier after the rollback: %v, want %v", all, want)
	}
}

// A message replayed from CRAWL_DEAD may have had its URLs marked seen by the deliveries
// that failed, under an identity (and memo) it no longer has: all its URLs pass. A copy
// that is no replay gets the seen test.
func TestServiceReplayedMessagePasses(t *testing.T) {
	t.Parallel()
	s := startStack(t, redisproc.Options{}, nil)
	s.publishDiscovered(t, link("http://a.test/r", 1), link("http://b.test/r", 1))
	got, ids := map[int][]string{}, map[string]int{}
	testwait.Eventually(t, 20*time.Second, "the first copy's URLs on the frontier", func() bool {
		s.frontier(t, got, ids)
		return len(got[0])+len(got[1]) == 2
	})
	data, err := crawlmsg.Marshal(&crawlmsg.DiscoveredBatch{Source: "http://itest/", URLs: []crawlmsg.Discovered{link("http://a.test/r", 1), link("http://b.test/r", 1)}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		replay bool
		want   int // URLs on the frontier after it
	}{
		{"copy", false, 0},
		{"replay", true, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := natsx.NewMsg(topology.SubjectDiscovered, "", data)
			if tc.replay {
				m.Header.Set(natsx.ReplayOfHdr, "CRAWL_DEAD:1:x")
			}
			seenBefore := s.metric(t, `trawl_dedup_urls_total{result="seen"}`)
			newBefore := s.metric(t, `trawl_dedup_urls_total{result="new"}`)
			if _, err := s.js.PublishMsg(testwait.Context(t), m); err != nil {
				t.Fatal(err)
			}
			testwait.Eventually(t, 20*time.Second, "the copy handled", func() bool {
				return s.metric(t, `trawl_dedup_urls_total{result="seen"}`)+s.metric(t, `trawl_dedup_urls_total{result="new"}`) == seenBefore+newBefore+2 && s.idle(t)
			})
			got := map[int][]string{}
			s.frontier(t, got, ids)
			if n := len(got[0]) + len(got[1]); n != tc.want {
				t.Errorf("%d URLs on the frontier after the %s, want %d: %v", n, tc.name, tc.want, got)
			}
		})
	}
}
