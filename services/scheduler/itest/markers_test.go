package itest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/trawl/trawl/devstack/redisproc"
	"github.com/trawl/trawl/services/scheduler/internal/frontier"
	"github.com/trawl/trawl/services/scheduler/internal/prioritize"
	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/testwait"
	"github.com/trawl/trawl/shared/topology"
)

// A frontier message's marker is kept under its stream sequence until the consumer's ack
// floor passes it: markers below the floor go, and a redelivery of a message above it (not
// yet acknowledged) is still recognised.
func TestAppliedMarkersTrimmedBelowAckFloor(t *testing.T) {
	t.Parallel()
	rdb := startRedis(t)
	f := newTF(t, rdb, testOptions(0))
	ctx := testwait.Context(t)
	var bs []frontier.Batch
	for seq := uint64(1); seq <= 5; seq++ {
		bs = append(bs, frontier.Batch{ID: fmt.Sprintf("CRAWL_FRONTIER:%d", seq), Seq: seq,
			URLs: urls(0, fmt.Sprintf("http://h%d.example/", seq))})
	}
	if _, err := f.AddBatches(ctx, bs); err != nil {
		t.Fatal(err)
	}
	markers := func() int64 { return rdb.ZCard(ctx, f.Keyspace().Key("applied")).Val() }
	if n := markers(); n != 5 {
		t.Fatalf("%d markers after 5 messages, want 5", n)
	}
	n, err := f.TrimApplied(ctx, 3)
	if err != nil || n != 3 || markers() != 2 {
		t.Fatalf("TrimApplied(3) = %d, %v; %d markers left, want 3 trimmed and 2 left", n, err, markers())
	}
	// Messages 4 and 5 were not acknowledged: their redelivery must not queue them again.
	got, err := f.AddBatches(ctx, bs[3:])
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range got {
		if c != frontier.Duplicate {
			t.Fatalf("redelivered batch %d queued %d URLs, want Duplicate", i+4, c)
		}
	}
	if st := f.stats(); st.Accepted != 5 || st.Queued != 5 {
		t.Fatalf("stats %+v, want each URL accepted once", st)
	}
	if n := len(rdb.Keys(ctx, f.Keyspace().Key("applied:*")).Val()); n != 0 {
		t.Fatalf("%d per-message marker keys, want none (markers live in one zset)", n)
	}
	f.check()
}

// The service trims the markers of acknowledged frontier messages by itself.
func TestServiceTrimsAppliedMarkers(t *testing.T) {
	t.Parallel()
	s := startStack(t, redisproc.Options{}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s.runFetcher(ctx, fetched200)
	for i := range 4 {
		s.publish(topology.FrontierSubject(0), &crawlmsg.FrontierBatch{URLs: []crawlmsg.Discovered{{URL: fmt.Sprintf("http://m%d.example/", i)}}})
	}
	testwait.Eventually(t, 30*time.Second, "crawled", func() bool { return s.stats().Fetched == 4 })
	// Two trim rounds: the first reads the ack floor, the next trims to it.
	testwait.Eventually(t, 3*trimEvery, "markers trimmed", func() bool {
		return s.rdb.ZCard(ctx, s.f.Keyspace().Key("applied")).Val() == 0
	})
	if keys := s.rdb.Keys(ctx, s.f.Keyspace().Key("applied:*")).Val(); len(keys) != 0 {
		t.Fatalf("per-message marker keys %v, want none", keys)
	}
	// Counted just after the trim.
	testwait.Eventually(t, 5*time.Second, "trimmed markers counted", func() bool {
		return s.metric("trawl_scheduler_applied_markers_trimmed_total", map[string]string{"shard": "0"}) == 4
	})
}

// trimEvery mirrors the service's marker trim period.
const trimEvery = 5 * time.Second

// backlinks holds at most BacklinkHosts hosts; a host linked from many pages survives a
// stream of hosts linked once (Space-Saving keeps every host with more than N/k of the N
// backlinks counted, k the bound), and counts never fall below the truth.
func TestBacklinksBounded(t *testing.T) {
	t.Parallel()
	rdb := startRedis(t)
	o := testOptions(0)
	o.BacklinkHosts = 4
	f := newTFWith(t, rdb, o, prioritize.Preference{X: 1, Y: 1})
	ctx := testwait.Context(t)
	src := 0
	link := func(host string) {
		src++
		f.addBatch(frontier.Batch{ID: fmt.Sprint("m", src), Source: fmt.Sprintf("http://src%d.example/", src),
			URLs: urls(1, fmt.Sprintf("http://%s/%d", host, src))})
	}
	for range 10 {
		link("popular.example")
	}
	for i := range 12 {
		link(fmt.Sprintf("once%d.example", i))
	}
	key := f.Keyspace().Key("backlinks")
	if n := rdb.ZCard(ctx, key).Val(); n != 4 {
		t.Fatalf("backlinks holds %d hosts, want the bound, 4", n)
	}
	sc, err := rdb.ZScore(ctx, key, "popular.example").Result()
	if err == redis.Nil || sc < 10 {
		t.Fatalf("popular.example backlinks %v (%v), want kept with at least its 10", sc, err)
	}
	last, err := rdb.ZScore(ctx, key, "once11.example").Result()
	if err != nil || last < 1 {
		t.Fatalf("newest host backlinks %v (%v), want counted", last, err)
	}
}
