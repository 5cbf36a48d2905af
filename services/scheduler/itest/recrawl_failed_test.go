package itest

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/trawl/trawl/devstack/redisproc"
	"github.com/trawl/trawl/services/scheduler/internal/frontier"
	"github.com/trawl/trawl/services/scheduler/internal/service"
	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/natsx"
	"github.com/trawl/trawl/shared/recrawl"
	"github.com/trawl/trawl/shared/testwait"
	"github.com/trawl/trawl/shared/topology"
)

// schedule waits for url's schedule message whose state passes ok, and returns it.
func (s *stack) schedule(ctx context.Context, shard int, url, what string, ok func(crawlmsg.RecrawlEntry) bool) crawlmsg.RecrawlEntry {
	s.t.Helper()
	str, err := s.js.Stream(ctx, topology.StreamRecrawl)
	if err != nil {
		s.t.Fatal(err)
	}
	var e crawlmsg.RecrawlEntry
	testwait.Eventually(s.t, 20*time.Second, what, func() bool {
		raw, err := str.GetLastMsgForSubject(ctx, topology.ScheduleSubject(shard, url))
		if err != nil {
			return false
		}
		e, err = crawlmsg.DecodeRecrawl(raw.Data)
		return err == nil && ok(e)
	})
	return e
}

// A retired host's recrawled URLs keep their schedules: the URL whose failure retired the
// host is scheduled from its outcome, one queued behind it when the host was retired and
// one that came due afterwards (failed on admission) are postponed by their interval, with
// their state, so they come back when the host does.
func TestRecrawlRetiredHostKeepsSchedules(t *testing.T) {
	t.Parallel()
	s := startStack(t, redisproc.Options{}, map[string]string{"TRAWL_RECRAWL": "adaptive", "TRAWL_MAX_RETRIES": "0",
		"TRAWL_RETIRE_AFTER": "1", "TRAWL_RECRAWL_MIN": "10s", "TRAWL_RECRAWL_DEFAULT": "30s"})
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

	const host = "down.test"
	shard := topology.ShardOf(host, s.cfg.Common.Shards)
	us := []string{"http://down.test/a", "http://down.test/b", "http://down.test/later"}
	now := time.Now()
	var msgs []*nats.Msg
	for i, u := range us {
		due := now
		if i == 2 {
			due = now.Add(3 * time.Second)
		}
		e := &crawlmsg.RecrawlEntry{URL: u, Depth: 1, State: crawlmsg.Recrawl{ETag: `"x"`, Interval: 60_000, Fetches: 4, LastFetch: now.Add(-time.Minute).UnixMilli(), Due: due.UnixMilli()}}
		m, err := recrawl.Schedule(shard, e, "s"+u)
		if err != nil {
			t.Fatal(err)
		}
		msgs = append(msgs, m)
	}
	if err := natsx.PublishBatch(ctx, s.js, msgs); err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, 20*time.Second, "all three URLs ended failed", func() bool { return s.stats().Failed == 3 })
	if st := s.stats(); st.Retired != 1 || st.Dispatched != 1 {
		t.Fatalf("stats %+v: want the host retired after its one request", st)
	}
	fetchedFrom := 0
	for _, u := range us {
		e := s.schedule(ctx, shard, u, "a new schedule for "+u, func(e crawlmsg.RecrawlEntry) bool { return e.State.Due > now.Add(30*time.Second).UnixMilli() })
		if e.State.Interval != 60_000 || e.State.ETag != `"x"` || e.Depth != 1 {
			t.Errorf("%s: next schedule %+v: want the interval and validators kept", u, e)
		}
		switch e.State.Fetches {
		case 5:
			fetchedFrom++ // the URL that was requested
		case 4:
		default:
			t.Errorf("%s: %d fetches counted, want 4 (never requested) or 5", u, e.State.Fetches)
		}
	}
	if fetchedFrom != 1 {
		t.Errorf("%d URLs counted a fetch; want the one that was requested", fetchedFrom)
	}
}

// The schedule of a recrawl that ends failed is written in the step that fails it: a
// scheduler that applied the outcome and died before anything else (or whose outcome
// step's reply was lost, so the redelivered outcome is stale) loses no URL; the next
// scheduler writes the schedule.
func TestFailedRecrawlScheduledAfterSchedulerDeath(t *testing.T) {
	t.Parallel()
	s := startStack(t, redisproc.Options{}, map[string]string{"TRAWL_RECRAWL": "adaptive", "TRAWL_MAX_RETRIES": "0",
		"TRAWL_RECRAWL_MIN": "10s", "TRAWL_RECRAWL_DEFAULT": "30s"})
	ctx := testwait.Context(t)
	s.stopService(t)

	const u = "http://gone.test/page"
	shard := topology.ShardOf("gone.test", s.cfg.Common.Shards)
	f := frontier.New(s.rdb, service.FrontierOptions(s.cfg, shard), service.Prioritizer(s.cfg))
	st := crawlmsg.Recrawl{ETag: `"y"`, Interval: 60_000, Fetches: 2, Due: time.Now().UnixMilli()}
	e := crawlmsg.RecrawlEntry{URL: u, Depth: 2, State: st}
	if _, err := f.AddBatches(ctx, []frontier.Batch{{ID: "due:1", URLs: []crawlmsg.Discovered{e.Discovered()}}}); err != nil {
		t.Fatal(err)
	}
	tasks, err := f.Dispatch(ctx, 10)
	if err != nil || len(tasks) != 1 || tasks[0].Recrawl == nil {
		t.Fatalf("Dispatch = %+v, %v; want the recrawl's task", tasks, err)
	}
	o := fetched200(tasks[0])
	o.Kind, o.Status, o.Permanent, o.Error = crawlmsg.OutcomeError, 0, true, "no such host"
	o.Recrawl = &crawlmsg.RecrawlEntry{V: crawlmsg.Version, URL: u, Depth: 2, State: *tasks[0].Recrawl}
	applied, err := f.Complete(ctx, []crawlmsg.Outcome{o})
	if err != nil || applied[0].Result != frontier.ResultFailed {
		t.Fatalf("Complete = %+v, %v; want failed", applied, err)
	}
	// The scheduler that applied it is gone; another starts.
	s.startService(nil)
	next := s.schedule(ctx, shard, u, "the failed URL scheduled again by the next scheduler", func(e crawlmsg.RecrawlEntry) bool { return e.State.Fetches == 3 })
	if next.State.Interval != 60_000 || next.State.ETag != `"y"` || next.Depth != 2 {
		t.Fatalf("next schedule %+v: want the interval and validators kept", next)
	}
}

// A lease reaped past the retries fails its URL without an outcome: a recrawl's entry
// goes to the outbox with its state, a plain URL's does not, and without
// KeepFailedRecrawls (a one-shot crawl) nothing is kept.
func TestReapedRecrawlKept(t *testing.T) {
	t.Parallel()
	for _, keep := range []bool{true, false} {
		t.Run(map[bool]string{true: "adaptive", false: "one-shot"}[keep], func(t *testing.T) {
			rdb := startRedis(t)
			o := testOptions(0)
			o.MaxRetries = 0
			o.KeepFailedRecrawls = keep
			f := newTF(t, rdb, o)
			st := &crawlmsg.Recrawl{ETag: `"z"`, Interval: 60_000}
			f.add("b1", crawlmsg.Discovered{URL: "http://r.test/x", Depth: 1, Recrawl: st}, crawlmsg.Discovered{URL: "http://plain.test/", Depth: 1})
			if tasks := f.dispatch(t0, 10); len(tasks) != 2 {
				t.Fatalf("dispatched %d tasks, want 2", len(tasks))
			}
			if n := f.reap(t0.Add(o.LeaseTTL + time.Second)); n != 2 {
				t.Fatalf("reaped %d leases, want 2", n)
			}
			kept, bad, err := f.FailedRecrawls(testwait.Context(t), 10)
			if err != nil || len(bad) != 0 {
				t.Fatal(err, bad)
			}
			if !keep {
				if len(kept) != 0 {
					t.Fatalf("one-shot crawl kept %+v", kept)
				}
				return
			}
			if len(kept) != 1 || kept[0].Entry.URL != "http://r.test/x" || kept[0].Requested || !kept[0].At.Equal(t0.Add(o.LeaseTTL+time.Second)) {
				t.Fatalf("kept %+v; want the recrawl alone, not requested, at the reap", kept)
			}
			x, err := crawlmsg.DecodeExtra(kept[0].Entry.Ext)
			if err != nil || x.Recrawl == nil || x.Recrawl.ETag != `"z"` {
				t.Fatalf("kept entry's state %+v, %v", x.Recrawl, err)
			}
			must(t, f.DropFailedRecrawls(testwait.Context(t), []string{kept[0].Raw}))
			if kept, _, _ := f.FailedRecrawls(testwait.Context(t), 10); len(kept) != 0 {
				t.Fatalf("after the drop the outbox holds %+v", kept)
			}
		})
	}
}
