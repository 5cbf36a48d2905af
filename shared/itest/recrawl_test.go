package itest

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/natsx"
	"github.com/trawl/trawl/shared/recrawl"
	"github.com/trawl/trawl/shared/testwait"
	"github.com/trawl/trawl/shared/topology"
)

// TestRecrawlBacklogAndLookup: the recrawl figures an operator sees (scheduled, due, how
// long the oldest due URL waited, the sampled interval and 304 share) and one URL's
// history, read from CRAWL_RECRAWL alone. Without adaptive mode there is no stream and
// nothing to report.
func TestRecrawlBacklogAndLookup(t *testing.T) {
	t.Parallel()
	js := connect(t)
	ctx := testwait.Context(t)
	if b, err := recrawl.ReadBacklog(ctx, js, 1, 10, time.Now()); b != nil || err != nil {
		t.Fatalf("one-shot crawl: backlog %+v, %v; want none", b, err)
	}
	o := topology.DefaultOptions(1)
	o.Recrawl, o.Storage = true, jetstream.MemoryStorage
	if err := natsx.Ensure(ctx, js, o, topology.StageTimings{AckWait: 5 * time.Second, FetchAckWait: 10 * time.Second, MaxDeliver: -1}, slog.Default()); err != nil {
		t.Fatal(err)
	}

	now := time.Now()
	var msgs []*nats.Msg
	for i := range 4 {
		e := &crawlmsg.RecrawlEntry{URL: fmt.Sprintf("http://a.test/%d", i), State: crawlmsg.Recrawl{
			Interval: int64(i+1) * 60_000, Fetches: 4, NotModified: 1, Changes: 2, Due: now.Add(time.Hour).UnixMilli()}}
		if i == 3 {
			e.State.Due = now.UnixMilli() // due at once
		}
		m, err := recrawl.Schedule(0, e, "")
		if err != nil {
			t.Fatal(err)
		}
		msgs = append(msgs, m)
	}
	if err := natsx.PublishBatch(ctx, js, msgs); err != nil {
		t.Fatal(err)
	}
	var b *recrawl.Backlog
	testwait.Eventually(t, 10*time.Second, "one URL due", func() bool {
		var err error
		b, err = recrawl.ReadBacklog(ctx, js, 1, 200, time.Now().Add(time.Minute))
		return err == nil && b.Due == 1
	})
	if b.Scheduled != 3 || b.OldestDue < 59*time.Second || b.Sampled == 0 ||
		b.MedianInterval < time.Minute || b.MedianInterval > 3*time.Minute || b.NotModifiedShare != 0.25 || b.ChangedShare != 0.5 {
		t.Fatalf("backlog %+v", b)
	}
	for _, tc := range []struct{ url, where string }{
		{"http://a.test/0", "scheduled"}, {"http://a.test/3", "due"}, {"http://a.test/never", ""},
	} {
		h, err := recrawl.Lookup(ctx, js, 0, tc.url)
		if err != nil || h.Where != tc.where || (tc.where != "" && h.URL != tc.url) {
			t.Errorf("Lookup(%s) = %+v, %v; want %q", tc.url, h, err, tc.where)
		}
	}
}

// TestRecrawlSplitOverStreams: with TRAWL_RECRAWL_STREAMS=2 the schedules of 4 shards lie in
// two streams (even shards in CRAWL_RECRAWL_0, odd ones in CRAWL_RECRAWL_1), each shard's
// due consumer on its own shard's stream, so the server memory they cost (a per-subject
// index entry and a timer per known URL) can sit on two servers; the operator's figures
// and a URL's lookup find them without being told the split.
func TestRecrawlSplitOverStreams(t *testing.T) {
	t.Parallel()
	js := connect(t)
	ctx := testwait.Context(t)
	o := topology.DefaultOptions(4)
	o.Recrawl, o.RecrawlStreams, o.Storage = true, 2, jetstream.MemoryStorage
	if err := natsx.Ensure(ctx, js, o, topology.StageTimings{AckWait: 5 * time.Second, FetchAckWait: 10 * time.Second, MaxDeliver: -1}, slog.Default()); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Stream(ctx, topology.StreamRecrawl); err == nil {
		t.Fatalf("%s exists beside the split streams", topology.StreamRecrawl)
	}
	now := time.Now()
	var msgs []*nats.Msg
	for s := range 4 {
		for i := range s + 1 {
			e := &crawlmsg.RecrawlEntry{URL: fmt.Sprintf("http://s%d.test/%d", s, i), State: crawlmsg.Recrawl{
				Interval: 60_000, Fetches: 2, Changes: 1, Due: now.Add(time.Hour).UnixMilli()}}
			if i == 0 {
				e.State.Due = now.UnixMilli() // one due at once per shard
			}
			m, err := recrawl.Schedule(s, e, "")
			if err != nil {
				t.Fatal(err)
			}
			msgs = append(msgs, m)
		}
	}
	if err := natsx.PublishBatch(ctx, js, msgs); err != nil {
		t.Fatal(err)
	}
	for g, want := range []uint64{1 + 3, 2 + 4} {
		name := topology.RecrawlStreamName(g, 2)
		str, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		info, err := str.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if info.State.Msgs != want {
			t.Errorf("%s holds %d schedules, want %d (shards %d and %d)", name, info.State.Msgs, want, g, g+2)
		}
		for s := g; s < 4; s += 2 {
			if _, err := str.Consumer(ctx, topology.SchedulerRecrawlConsumer(s)); err != nil {
				t.Errorf("due consumer of shard %d on %s: %v", s, name, err)
			}
		}
	}
	var b *recrawl.Backlog
	testwait.Eventually(t, 10*time.Second, "one URL due per shard", func() bool {
		var err error
		b, err = recrawl.ReadBacklog(ctx, js, 4, 200, time.Now().Add(time.Minute))
		return err == nil && b.Due == 4
	})
	if b.Scheduled != 6 || b.Sampled == 0 || b.MedianInterval != time.Minute || b.ChangedShare != 0.5 {
		t.Fatalf("backlog %+v", b)
	}
	for s := range 4 {
		// URL 0 of each shard is due; its last one, when it has more, is scheduled.
		for _, i := range []int{0, s} {
			where := "scheduled"
			if i == 0 {
				where = "due"
			}
			url := fmt.Sprintf("http://s%d.test/%d", s, i)
			if h, err := recrawl.Lookup(ctx, js, s, url); err != nil || h.Where != where || h.URL != url {
				t.Errorf("Lookup(%s) = %+v, %v; want %q", url, h, err, where)
			}
		}
	}

	// Another split on the same crawl is refused, not a second set of schedules.
	o.RecrawlStreams = 1
	err := natsx.Ensure(ctx, js, o, topology.StageTimings{AckWait: 5 * time.Second, FetchAckWait: 10 * time.Second, MaxDeliver: -1}, slog.Default())
	if !errors.Is(err, natsx.ErrOverlap) || !strings.Contains(err.Error(), topology.StreamRecrawl) {
		t.Fatalf("Ensure with another split: %v, want a refusal naming %s", err, topology.StreamRecrawl)
	}
	t.Logf("another split: %v", err)
}
