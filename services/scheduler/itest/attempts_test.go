package itest

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/trawl/trawl/services/scheduler/internal/frontier"
	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/frontierkeys"
	"github.com/trawl/trawl/shared/testwait"
)

// A URL has a bounded number of attempts across lease expiries, whatever ends them (a
// fetcher that dies, hangs, or cannot store the page): each reap counts one, the last
// fails the URL "attempts exhausted" with the error its fetcher last reported, and the host
// goes on with its next URL. The fetcher's error is kept only while its lease holds.
func TestAttemptsAcrossLeaseExpiries(t *testing.T) {
	t.Parallel()
	rdb := startRedis(t)
	o := testOptions(0)
	o.LeaseTTL = time.Minute
	o.MaxRetries = 2
	f := newTF(t, rdb, o)
	f.add("m", urls(0, "http://a.example/stuck", "http://a.example/next")...)
	ctx := testwait.Context(t)
	ks := frontierkeys.ForShard(o.KeyPrefix, 0, o.Shards)
	lastErr := func() string {
		t.Helper()
		v, err := rdb.HGet(ctx, ks.LastErr(), "a.example").Result()
		if err != nil && err.Error() != "redis: nil" {
			t.Fatal(err)
		}
		return v
	}
	newestError := func() frontierkeys.ErrorRecord {
		t.Helper()
		st, err := f.Status(ctx, *f.now, 0, 1)
		if err != nil || len(st.Errors) == 0 {
			t.Fatalf("status: %v, %d error lines", err, len(st.Errors))
		}
		return st.Errors[0]
	}
	const cause = "natsx: publish crawl.pages: nats: API error: code=400 err_code=10097 description=header size exceeds maximum allowed of 64k"

	now := t0
	for attempt := 0; attempt <= o.MaxRetries; attempt++ {
		tasks := f.dispatch(now, 10)
		if len(tasks) != 1 || tasks[0].URL != "http://a.example/stuck" || tasks[0].Attempt != attempt {
			t.Fatalf("attempt %d: dispatched %+v, want /stuck with attempt %d", attempt, tasks, attempt)
		}
		tk := tasks[0]
		// A stale token (an earlier lease) writes nothing.
		if ok, err := frontierkeys.NoteLeaseError(ctx, rdb, o.KeyPrefix, 0, o.Shards, "a.example", "0-1-stale", errors.New("old")); err != nil || ok {
			t.Fatalf("note under a stale token: %v, %v; want refused", ok, err)
		}
		for range 2 {
			if ok, err := frontierkeys.NoteLeaseError(ctx, rdb, o.KeyPrefix, 0, o.Shards, "a.example", tk.Lease, errors.New(cause)); err != nil || !ok {
				t.Fatalf("note: %v, %v", ok, err)
			}
		}
		le, ok := frontierkeys.ParseLeaseError(lastErr())
		if !ok || le.Token != tk.Lease || le.Tries != 2 || le.Error != cause {
			t.Fatalf("last error %+v, want 2 tries of %q under %s", le, cause, tk.Lease)
		}
		leases, _, err := frontierkeys.OpenReadOnly(rdb, o.KeyPrefix, 1).Stuck(ctx, o.LeaseTTL, 10)
		if err != nil || len(leases) != 1 || leases[0].URL != tk.URL || leases[0].LastError == nil || leases[0].LastError.Error != cause {
			t.Fatalf("stall view %+v (%v), want /stuck with its last error", leases, err)
		}
		now = now.Add(o.LeaseTTL)
		if n := f.reap(now); n != 1 {
			t.Fatalf("attempt %d: reaped %d, want 1", attempt, n)
		}
		if v := lastErr(); v != "" {
			t.Fatalf("last error %q left after the reap", v)
		}
		rec := newestError()
		want := "no outcome before the lease deadline; last error: " + cause
		if attempt == o.MaxRetries {
			want = "attempts exhausted after 3 attempts: " + want
			if rec.Result != "failed" {
				t.Fatalf("last attempt logged %q, want failed", rec.Result)
			}
		}
		if rec.Kind != "lease-expired" || rec.URL != tk.URL || rec.Error != want {
			t.Fatalf("attempt %d: error log %+v, want lease-expired %s: %q", attempt, rec, tk.URL, want)
		}
		now = now.Add(time.Hour) // past any delay
	}
	if s := f.stats(); s.Failed != 1 || s.Expired != int64(o.MaxRetries+1) {
		t.Fatalf("stats %+v, want 1 failed and %d leases expired", s, o.MaxRetries+1)
	}
	// The host goes on with its next URL.
	tasks := f.dispatch(now, 10)
	if len(tasks) != 1 || tasks[0].URL != "http://a.example/next" || tasks[0].Attempt != 0 {
		t.Fatalf("after the failure dispatched %+v, want /next", tasks)
	}
	// An outcome ends the lease and its last error with it.
	if _, err := frontierkeys.NoteLeaseError(ctx, rdb, o.KeyPrefix, 0, o.Shards, "a.example", tasks[0].Lease, errors.New("once")); err != nil {
		t.Fatal(err)
	}
	f.complete(now, ok200(tasks[0]))
	if v := lastErr(); v != "" {
		t.Fatalf("last error %q left after the outcome", v)
	}
}

// A URL whose retryable failures (5xx, errors) use up its attempts fails with the same
// reason in front of its last failure; a late expired outcome (the redelivery of a task
// whose fetcher died) is logged like a reap.
func TestAttemptsExhaustedByOutcomes(t *testing.T) {
	t.Parallel()
	rdb := startRedis(t)
	o := testOptions(0)
	o.LeaseTTL = time.Minute
	o.MaxRetries = 1
	f := newTF(t, rdb, o)
	f.add("m", urls(0, "http://a.example/1", "http://b.example/1")...)
	ctx := testwait.Context(t)
	now := t0
	tasks := f.dispatch(now, 10)
	var a, b crawlmsg.FetchTask
	for _, tk := range tasks {
		if tk.Host == "a.example" {
			a = tk
		} else {
			b = tk
		}
	}
	fail := outcome(a, crawlmsg.OutcomeError, 0)
	fail.Error = "connection reset by peer"
	f.complete(now, fail)
	now = now.Add(time.Hour)
	a = f.dispatch(now, 10)[0]
	fail = outcome(a, crawlmsg.OutcomeError, 0)
	fail.Error = "connection reset by peer"
	if ap := f.complete(now, fail)[0]; ap.Result != frontier.ResultFailed {
		t.Fatalf("second failure: %s, want failed", ap.Result)
	}
	// b's task was redelivered after its fetcher died: expired, past its deadline, twice.
	if ap := f.complete(now, outcome(b, crawlmsg.OutcomeExpired, 0))[0]; ap.Result != frontier.ResultRetry {
		t.Fatalf("late expiry: %s, want retry", ap.Result)
	}
	b = f.dispatch(now.Add(time.Hour), 10)[0]
	now = now.Add(3 * time.Hour)
	if ap := f.complete(now, outcome(b, crawlmsg.OutcomeExpired, 0))[0]; ap.Result != frontier.ResultFailed {
		t.Fatalf("second late expiry: %s, want failed", ap.Result)
	}
	st, err := f.Status(ctx, now, 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, e := range st.Errors {
		if e.Result == "failed" {
			got[e.URL] = e.Kind + ": " + e.Error
		}
	}
	for u, want := range map[string]string{
		"http://a.example/1": "error: attempts exhausted after 2 attempts: connection reset by peer",
		"http://b.example/1": "lease-expired: attempts exhausted after 2 attempts: no outcome before the lease deadline",
	} {
		if !strings.EqualFold(got[u], want) {
			t.Errorf("%s failed as %q, want %q", u, got[u], want)
		}
	}
}
