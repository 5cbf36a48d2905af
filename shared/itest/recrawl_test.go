package itest

import (
	"fmt"
	"log/slog"
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
