package itest

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/trawl/trawl/devstack/natsembed"
	"github.com/trawl/trawl/devstack/redisproc"
	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/frontierkeys"
	"github.com/trawl/trawl/shared/testwait"
	"github.com/trawl/trawl/shared/topology"
)

// When NATS comes back older than Redis (an OS crash at TRAWL_FSYNC=1s), a page published
// in NATS's lost seconds is gone while Redis kept the outcome that ended its URL fetched.
// The scheduler keeps each such URL in the shard's page log until the parser acknowledges
// its page, and at start puts back in the queues those whose pages CRAWL_PAGES lost. The
// rollback is made here by making the stream again: its sequence starts over, so some
// logged pages' sequences are held by other messages and the rest lie beyond its last.
//
// Pages alone and pages in bundles (a message of several pages, crawlmsg.Bundle) are
// judged alike: a bundle the stream holds holds its pages.
func TestPageLogReadmitsPagesNATSLost(t *testing.T) {
	for _, tc := range []struct {
		name    string
		fillers int // other pages in each page's message: 0, alone
	}{
		{"pages alone", 0},
		{"pages in bundles", 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			testPageLogReadmits(t, tc.fillers)
		})
	}
}

func testPageLogReadmits(t *testing.T, fillers int) {
	s := startStack(t, redisproc.Options{}, nil)
	ctx, cancel := context.WithCancel(testwait.Context(t))
	defer cancel()
	// The fetcher stores a page per task, as the real one does, and names its sequence in
	// the outcome.
	fx := s.runFetcher(ctx, s.storingPagesWith(ctx, fillers))
	const n = 6
	var batch crawlmsg.FrontierBatch
	for i := range n {
		batch.URLs = append(batch.URLs, crawlmsg.Discovered{URL: fmt.Sprintf("http://lost%d.example/", i)})
	}
	s.publish(topology.FrontierSubject(0), &batch)
	requests := func() map[string]int {
		c := map[string]int{}
		for _, tk := range fx.snapshot() {
			c[tk.URL]++
		}
		return c
	}
	crawled := func(times int) func() bool {
		return func() bool {
			st := s.stats()
			if st.Fetched != n || st.Queued != 0 || st.InFlight != 0 {
				return false
			}
			for _, c := range requests() {
				if c != times {
					return false
				}
			}
			return len(requests()) == n
		}
	}
	testwait.Eventually(t, 30*time.Second, "every URL fetched once", crawled(1))

	// A restart that lost nothing: every logged page is in the stream, left alone.
	s.restart(t)
	if got := s.metric("trawl_scheduler_pages_readmitted_total", map[string]string{"shard": "0"}); got != 0 {
		t.Fatalf("%v URLs re-admitted after a restart that lost nothing, want 0", got)
	}
	if st := s.stats(); st.Fetched != n || st.Queued != 0 {
		t.Fatalf("after a restart that lost nothing: %+v, want %d fetched, none queued", st, n)
	}

	// NATS loses the pages: the stream is made again while the scheduler is down, and two
	// other pages take the first sequences. The first was logged too (its outcome applied
	// while the shard ran on) and parsed already: its sequence, logged twice and no longer
	// held, tells of a loss without telling which page was parsed, so both go back.
	s.stopService(t)
	recreatePages(t, s, 2)
	pagelog := s.f.Keyspace().Key("pagelog")
	top, err := s.rdb.ZRevRange(ctx, pagelog, 0, 0).Result()
	if err != nil || len(top) != 1 {
		t.Fatalf("page log top: %v %v", top, err)
	}
	if err := s.rdb.ZAddXX(ctx, pagelog, redis.Z{Score: 1, Member: top[0]}).Err(); err != nil {
		t.Fatal(err)
	}
	str, err := s.js.Stream(ctx, topology.StreamPages)
	if err != nil {
		t.Fatal(err)
	}
	if err := str.DeleteMsg(ctx, 1); err != nil {
		t.Fatal(err)
	}
	s.restart(t)
	testwait.Eventually(t, 30*time.Second, "every URL fetched again, once", crawled(2))
	if got := s.metric("trawl_scheduler_pages_readmitted_total", map[string]string{"shard": "0"}); got != n {
		t.Fatalf("%v URLs re-admitted, want %d", got, n)
	}

	// The pages fetched again are in the stream: another restart re-admits nothing.
	s.restart(t)
	if got := s.metric("trawl_scheduler_pages_readmitted_total", map[string]string{"shard": "0"}); got != 0 {
		t.Fatalf("%v URLs re-admitted by the next restart, want 0", got)
	}
	if !crawled(2)() {
		t.Fatalf("after the next restart: %+v, requests %v; want each URL requested twice in all", s.stats(), requests())
	}

	// The log holds the pages fetched again, the lost ones' entries gone with their
	// re-admission; the parser acknowledges the pages and the log is trimmed to nothing.
	logged := func() int64 { return s.rdb.ZCard(ctx, s.f.Keyspace().Key("pagelog")).Val() }
	if got := logged(); got != n {
		t.Fatalf("page log holds %d URLs with no parser running, want %d", got, n)
	}
	cons, err := s.js.Consumer(ctx, topology.StreamPages, topology.ConsumerParser)
	if err != nil {
		t.Fatal(err)
	}
	cc, err := cons.Consume(func(m jetstream.Msg) { _ = m.Ack() })
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Stop()
	// Two trim rounds: the first reads the ack floor, the next trims to it.
	testwait.Eventually(t, 4*trimEvery, "page log trimmed", func() bool { return logged() == 0 })
}

// storingPages answers a task as the real fetcher does: it stores a page and names its
// sequence in the outcome.
func (s *stack) storingPages(ctx context.Context) func(crawlmsg.FetchTask) crawlmsg.Outcome {
	return s.storingPagesWith(ctx, 0)
}

// storingPagesWith is storingPages with each page in a bundle beside fillers other pages
// (none: the page alone), its outcome saying how many pages the bundle carries.
func (s *stack) storingPagesWith(ctx context.Context, fillers int) func(crawlmsg.FetchTask) crawlmsg.Outcome {
	return func(tk crawlmsg.FetchTask) crawlmsg.Outcome {
		o := fetched200(tk)
		m := nats.NewMsg(topology.SubjectPages)
		m.Header.Set(nats.MsgIdHdr, topology.PageID(tk.Lease))
		m.Data = []byte(tk.URL)
		if fillers > 0 {
			parts := []*nats.Msg{m}
			for i := range fillers {
				f := nats.NewMsg(topology.SubjectPages)
				f.Header.Set(nats.MsgIdHdr, topology.PageID(fmt.Sprintf("%s-filler-%d", tk.Lease, i)))
				parts = append(parts, f)
			}
			var err error
			if m, err = crawlmsg.Bundle(topology.SubjectPages, parts); err != nil {
				s.t.Errorf("bundle: %v", err)
				return o
			}
			o.PageParts = len(parts)
		}
		ack, err := s.js.PublishMsg(ctx, m)
		if err != nil {
			if ctx.Err() == nil {
				s.t.Errorf("publish page: %v", err)
			}
			return o
		}
		o.PageSeq = ack.Sequence
		return o
	}
}

// TestPageLogReadmitsPagesNATSLostWhileRunning is the rollback of
// TestPageLogReadmitsPagesNATSLost under a scheduler that keeps running: NATS alone comes
// back older (its machine crashed, not the scheduler's), and the scheduler only
// reconnects. The rollback is real: the server is stopped, its store put back as it was
// at an earlier instant, and started again.
func TestPageLogReadmitsPagesNATSLostWhileRunning(t *testing.T) {
	t.Parallel()
	// File streams, as a deployed NATS keeps them: a restart keeps what the server stored.
	s := startStack(t, redisproc.Options{}, map[string]string{"TRAWL_STREAM_MEMORY": "false"})
	ctx, cancel := context.WithCancel(testwait.Context(t))
	defer cancel()
	fx := s.runFetcher(ctx, s.storingPages(ctx))
	shard0 := map[string]string{"shard": "0"}
	batch := func(prefix string) []string {
		var b crawlmsg.FrontierBatch
		for i := range 3 {
			b.URLs = append(b.URLs, crawlmsg.Discovered{URL: fmt.Sprintf("http://%s%d.example/", prefix, i)})
		}
		s.publish(topology.FrontierSubject(0), &b)
		var urls []string
		for _, d := range b.URLs {
			urls = append(urls, d.URL)
		}
		return urls
	}
	// want is how many times each URL must have been requested.
	want := map[string]int{}
	crawled := func() (bool, string) {
		got := map[string]int{}
		for _, tk := range fx.snapshot() {
			got[tk.URL]++
		}
		st := s.stats()
		state := fmt.Sprintf("requests %v, want %v; frontier %+v", got, want, st)
		if len(got) != len(want) || st.Fetched != int64(len(want)) || st.Queued != 0 || st.InFlight != 0 {
			return false, state
		}
		for u, n := range want {
			if got[u] != n {
				return false, state
			}
		}
		return true, state
	}
	// settled: every task, outcome and frontier message acknowledged, so that nothing is
	// in flight when NATS stops and its store holds the acknowledgements.
	settled := func() {
		t.Helper()
		natsembed.WaitSettled(t, s.js, topology.StreamFetch, topology.ConsumerFetcher, 30*time.Second)
		natsembed.WaitSettled(t, s.js, topology.StreamFetched, topology.SchedulerFetchedConsumer(0), 30*time.Second)
		natsembed.WaitSettled(t, s.js, topology.StreamFrontier, topology.SchedulerFrontierConsumer(0), 30*time.Second)
	}
	checks := func(n float64) func() (bool, string) {
		return func() (bool, string) {
			got := s.metric("trawl_scheduler_page_log_checks_total", shard0)
			return got == n, fmt.Sprintf("%v checks, want %v", got, n)
		}
	}

	for _, u := range batch("a") {
		want[u] = 1
	}
	testwait.EventuallyState(t, 30*time.Second, "the first URLs fetched once", crawled)
	settled()
	// A restart that lost nothing: the scheduler checks again on its reconnect, and puts
	// nothing back.
	rollBack := s.ns.SnapshotT(t)
	testwait.EventuallyState(t, 30*time.Second, "the page log checked at start and on the reconnect", checks(2))
	for _, u := range batch("b") {
		want[u] = 1
	}
	testwait.EventuallyState(t, 30*time.Second, "the next URLs fetched once", crawled)
	if got := s.metric("trawl_scheduler_pages_readmitted_total", shard0); got != 0 {
		t.Fatalf("%v URLs re-admitted after a reconnect that lost nothing, want 0", got)
	}
	settled()

	// NATS comes back as it was before the b URLs: their pages are gone, while Redis
	// counted them fetched. Each is fetched again, once; the a URLs are not.
	rollBack()
	for u := range want {
		if u[len("http://")] == 'b' {
			want[u] = 2
		}
	}
	testwait.EventuallyState(t, 30*time.Second, "the URLs whose pages NATS lost fetched again, once", crawled)
	if got := s.metric("trawl_scheduler_pages_readmitted_total", shard0); got != 3 {
		t.Fatalf("%v URLs re-admitted, want 3", got)
	}
}

// recreatePages deletes CRAWL_PAGES and makes it again, its sequence starting over, with
// fill other messages stored in it.
func recreatePages(t *testing.T, s *stack, fill int) {
	t.Helper()
	ctx := testwait.Context(t)
	var cfg jetstream.StreamConfig
	for _, c := range topology.Streams(s.cfg.Common.Topology()) {
		if c.Name == topology.StreamPages {
			cfg = c
		}
	}
	if err := s.js.DeleteStream(ctx, topology.StreamPages); err != nil {
		t.Fatal(err)
	}
	if _, err := s.js.CreateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	// Kept until a consumer acknowledges them: the parser's, made again by the scheduler's
	// start.
	if _, err := s.js.CreateOrUpdateConsumer(ctx, topology.StreamPages, jetstream.ConsumerConfig{Durable: "hold", AckPolicy: jetstream.AckExplicitPolicy}); err != nil {
		t.Fatal(err)
	}
	for i := range fill {
		m := nats.NewMsg(topology.SubjectPages)
		m.Header.Set(nats.MsgIdHdr, fmt.Sprintf("other-page-%d", i))
		if _, err := s.js.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
}

// TestPageLogReadmitsASequenceGivenToTwoShards: a rolled-back NATS gave a lost page's
// sequence to a new page whose URL belongs to another shard, and the parser acknowledged
// the new page before either shard's walk read the sequence. Each shard's log then holds
// one page at a sequence the stream removed, which alone would read as parsed: each walk
// judges the other shard's page there with its own, and the first to walk re-admits both.
// The state is made by hand, as TestPageLogReadmitsPagesNATSLost does.
func TestPageLogReadmitsASequenceGivenToTwoShards(t *testing.T) {
	t.Parallel()
	const shards = 2
	s := startStack(t, redisproc.Options{}, map[string]string{"TRAWL_SHARDS": strconv.Itoa(shards)})
	ctx, cancel := context.WithCancel(testwait.Context(t))
	defer cancel()
	fx := s.runFetcher(ctx, s.storingPages(ctx))
	// One URL on each shard.
	urls := make([]string, shards)
	for i := 0; slices.Contains(urls, ""); i++ {
		host := fmt.Sprintf("twice%d.example", i)
		if sh := topology.ShardOf(host, shards); urls[sh] == "" {
			urls[sh] = "http://" + host + "/"
			s.publish(topology.FrontierSubject(sh), &crawlmsg.FrontierBatch{URLs: []crawlmsg.Discovered{{URL: urls[sh]}}})
		}
	}
	requests := func() map[string]int {
		c := map[string]int{}
		for _, tk := range fx.snapshot() {
			c[tk.URL]++
		}
		return c
	}
	logs := make([]string, shards)
	for sh := range shards {
		logs[sh] = frontierkeys.ForShard(s.cfg.Common.RedisPrefix, sh, shards).PageLog()
	}
	logged := func(sh int) []redis.Z {
		zs, err := s.rdb.ZRangeWithScores(ctx, logs[sh], 0, -1).Result()
		if err != nil {
			t.Fatal(err)
		}
		return zs
	}
	testwait.Eventually(t, 30*time.Second, "both URLs fetched once and logged", func() bool {
		r := requests()
		return r[urls[0]] == 1 && r[urls[1]] == 1 && len(logged(0)) == 1 && len(logged(1)) == 1
	})
	s.stopService(t)
	// Shard 1's page moves onto shard 0's sequence, which the stream no longer holds.
	seq := logged(0)[0].Score
	if err := s.rdb.ZAddXX(ctx, logs[1], redis.Z{Score: seq, Member: logged(1)[0].Member}).Err(); err != nil {
		t.Fatal(err)
	}
	str, err := s.js.Stream(ctx, topology.StreamPages)
	if err != nil {
		t.Fatal(err)
	}
	if err := str.DeleteMsg(ctx, uint64(seq)); err != nil {
		t.Fatal(err)
	}
	s.restart(t)
	testwait.Eventually(t, 30*time.Second, "both URLs fetched again", func() bool {
		r := requests()
		return r[urls[0]] == 2 && r[urls[1]] == 2
	})
	readmitted := 0.0
	for sh := range shards {
		readmitted += s.metric("trawl_scheduler_pages_readmitted_total", map[string]string{"shard": strconv.Itoa(sh)})
	}
	if readmitted != 2 {
		t.Errorf("%v URLs re-admitted by the two shards' walks, want 2", readmitted)
	}
}
