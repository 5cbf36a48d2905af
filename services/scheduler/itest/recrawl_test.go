package itest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/trawl/trawl/devstack/redisproc"
	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/natsx"
	"github.com/trawl/trawl/shared/recrawl"
	"github.com/trawl/trawl/shared/testwait"
	"github.com/trawl/trawl/shared/topology"
)

// TestRecrawlScheduleToTask: a URL's schedule message waits in CRAWL_RECRAWL until its
// time, a newer schedule replaces an older one, and when due the scheduler queues the URL
// (without a seen test) so that its task carries the state, validators included. Nothing
// of it is left in the stream afterwards.
func TestRecrawlScheduleToTask(t *testing.T) {
	t.Parallel()
	s := startStack(t, redisproc.Options{}, map[string]string{"TRAWL_RECRAWL": "adaptive"})
	ctx, cancel := context.WithCancel(testwait.Context(t))
	defer cancel()
	fx := s.runFetcher(ctx, fetched200)

	const u = "http://recrawl.test/page"
	due := time.Now().Add(2 * time.Second).Truncate(time.Second).Add(time.Second)
	schedule := func(etag string, id string) {
		t.Helper()
		e := &crawlmsg.RecrawlEntry{URL: u, Depth: 3, State: crawlmsg.Recrawl{ETag: etag, LastModified: "Mon, 02 Jan 2006 15:04:05 GMT",
			Digest: "d", Interval: 5000, Due: due.UnixMilli()}}
		m, err := recrawl.Schedule(topology.ShardOf("recrawl.test", s.cfg.Common.Shards), e, id)
		if err != nil {
			t.Fatal(err)
		}
		if err := natsx.PublishBatch(ctx, s.js, []*nats.Msg{m}); err != nil {
			t.Fatal(err)
		}
	}
	schedule(`"old"`, "s1")
	schedule(`"new"`, "s2") // a later fetch's schedule replaces the earlier one
	if n := s.streamMsgs(topology.StreamRecrawl); n != 1 {
		t.Fatalf("CRAWL_RECRAWL holds %d messages, want the URL's one schedule", n)
	}
	// The status page shows the schedule waiting.
	resp, err := http.Get("http://" + s.cfg.Common.HTTPAddr + "/status.json")
	if err != nil {
		t.Fatal(err)
	}
	var page struct {
		Recrawl *recrawl.Backlog `json:"recrawl"`
	}
	err = json.NewDecoder(resp.Body).Decode(&page)
	resp.Body.Close()
	if err != nil || page.Recrawl == nil || page.Recrawl.Scheduled != 1 || page.Recrawl.MedianInterval != 5*time.Second {
		t.Fatalf("status page recrawl %+v, %v; want one schedule of 5s", page.Recrawl, err)
	}

	var got []crawlmsg.FetchTask
	testwait.Eventually(t, 20*time.Second, "the due URL dispatched", func() bool {
		got = nil
		for _, tk := range fx.snapshot() {
			if tk.URL == u {
				got = append(got, tk)
			}
		}
		return len(got) > 0
	})
	if seen := time.Now(); seen.Before(due.Add(-500 * time.Millisecond)) {
		t.Fatalf("dispatched at %s, before the URL was due at %s", seen, due)
	}
	tk := got[0]
	if tk.Recrawl == nil || tk.Recrawl.ETag != `"new"` || tk.Recrawl.LastModified == "" || tk.Depth != 3 {
		t.Fatalf("task %+v recrawl %+v: want the newer schedule's state and depth", tk, tk.Recrawl)
	}
	testwait.Eventually(t, 10*time.Second, "due message acked, schedule purged", func() bool {
		return s.streamMsgs(topology.StreamRecrawl) == 0
	})
	testwait.Eventually(t, 10*time.Second, "the frontier settled", func() bool {
		st := s.stats()
		return st.Fetched == 1 && st.Queued == 0 && st.InFlight == 0
	})
	n := 0
	for _, tk := range fx.snapshot() {
		if tk.URL == u {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("the URL was dispatched %d times, want once", n)
	}
}

// streamMsgs is how many messages stream holds.
func (s *stack) streamMsgs(stream string) uint64 {
	s.t.Helper()
	st, err := s.js.Stream(testwait.Context(s.t), stream)
	if err != nil {
		s.t.Fatal(err)
	}
	info, err := st.Info(testwait.Context(s.t))
	if err != nil {
		s.t.Fatal(err)
	}
	return info.State.Msgs
}

// TestRecrawlFailedRescheduled: a recrawled URL that ends failed without a page (here its
// server is unreachable) is scheduled again at its interval rather than forgotten.
func TestRecrawlFailedRescheduled(t *testing.T) {
	t.Parallel()
	s := startStack(t, redisproc.Options{}, map[string]string{"TRAWL_RECRAWL": "adaptive", "TRAWL_MAX_RETRIES": "0", "TRAWL_RECRAWL_MIN": "10s", "TRAWL_RECRAWL_DEFAULT": "30s"})
	ctx, cancel := context.WithCancel(testwait.Context(t))
	defer cancel()
	// The fetcher's answer to an unreachable server, carrying the task's state as it does.
	s.runFetcher(ctx, func(tk crawlmsg.FetchTask) crawlmsg.Outcome {
		o := fetched200(tk)
		o.Kind, o.Status, o.Error, o.StartedAt = crawlmsg.OutcomeError, 0, "connection refused", time.Now().UnixMilli()
		if tk.Recrawl != nil {
			o.Recrawl = &crawlmsg.RecrawlEntry{V: crawlmsg.Version, URL: tk.URL, Depth: tk.Depth, Kind: tk.Kind, State: *tk.Recrawl}
		}
		return o
	})

	const u = "http://down.test/page"
	shard := topology.ShardOf("down.test", s.cfg.Common.Shards)
	e := &crawlmsg.RecrawlEntry{URL: u, Depth: 1, State: crawlmsg.Recrawl{ETag: `"x"`, Interval: 60_000, Fetches: 4, Due: time.Now().UnixMilli()}}
	m, err := recrawl.Schedule(shard, e, "s1")
	if err != nil {
		t.Fatal(err)
	}
	if err := natsx.PublishBatch(ctx, s.js, []*nats.Msg{m}); err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, 20*time.Second, "the URL ended failed", func() bool { return s.stats().Failed == 1 })
	str, err := s.js.Stream(ctx, topology.StreamRecrawl)
	if err != nil {
		t.Fatal(err)
	}
	var next crawlmsg.RecrawlEntry
	testwait.Eventually(t, 10*time.Second, "the failed URL scheduled again", func() bool {
		raw, err := str.GetLastMsgForSubject(ctx, topology.ScheduleSubject(shard, u))
		if err != nil {
			return false
		}
		next, err = crawlmsg.DecodeRecrawl(raw.Data)
		return err == nil && next.State.Fetches == 5
	})
	if next.State.Interval != 60_000 || next.State.ETag != `"x"` || next.Depth != 1 || next.State.Due < time.Now().Add(50*time.Second).UnixMilli() {
		t.Fatalf("next schedule %+v: want the same interval and validators, due a minute on", next)
	}
}

// With the schedules split over two streams (TRAWL_RECRAWL_STREAMS=2), each shard's
// scheduler takes its due URLs from its own shard's stream.
func TestRecrawlSplitDueReachesItsShard(t *testing.T) {
	t.Parallel()
	s := startStack(t, redisproc.Options{}, map[string]string{"TRAWL_RECRAWL": "adaptive", "TRAWL_SHARDS": "2", "TRAWL_RECRAWL_STREAMS": "2"})
	ctx, cancel := context.WithCancel(testwait.Context(t))
	defer cancel()
	fx := s.runFetcher(ctx, fetched200)
	want := map[int]string{}
	for h := 0; len(want) < 2; h++ {
		host := fmt.Sprintf("split%d.test", h)
		if sh := topology.ShardOf(host, 2); want[sh] == "" {
			want[sh] = "http://" + host + "/page"
		}
	}
	for sh, u := range want {
		e := &crawlmsg.RecrawlEntry{URL: u, State: crawlmsg.Recrawl{Digest: "d", Interval: 5000, Due: time.Now().UnixMilli()}}
		m, err := recrawl.Schedule(sh, e, "")
		if err != nil {
			t.Fatal(err)
		}
		if err := natsx.PublishBatch(ctx, s.js, []*nats.Msg{m}); err != nil {
			t.Fatal(err)
		}
	}
	testwait.EventuallyState(t, 20*time.Second, "both shards' due URLs dispatched", func() (bool, string) {
		seen := map[string]bool{}
		for _, tk := range fx.snapshot() {
			seen[tk.URL] = true
		}
		return seen[want[0]] && seen[want[1]], fmt.Sprintf("dispatched %v of %v", seen, want)
	})
	for g := range 2 {
		testwait.Eventually(t, 10*time.Second, "due messages acked in "+topology.RecrawlStreamName(g, 2), func() bool {
			return s.streamMsgs(topology.RecrawlStreamName(g, 2)) == 0
		})
	}
}
