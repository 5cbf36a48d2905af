package itest

import (
	"testing"
	"time"

	"github.com/trawl/trawl/services/scheduler/internal/frontier"
	"github.com/trawl/trawl/shared/crawlmsg"
)

const (
	persistent = time.Duration(-1) // PTTL of a key without expiry
	missing    = time.Duration(-2) // PTTL of a missing key
)

// A host's state outlives its back queue for HostStateTTL after its next fetch time, and
// never expires while the host is active.
func TestHostStateTTL(t *testing.T) {
	const ttl = time.Hour
	for _, tc := range []struct {
		name string
		ttl  time.Duration
		opts func(o *frontier.Options)
		run  func(t *testing.T, f *tf, key string)
	}{
		{
			name: "released after a fetch, kept while active, persistent again on admission",
			ttl:  ttl,
			run: func(t *testing.T, f *tf, key string) {
				f.add("m", urls(0, "http://a.example/1", "http://a.example/2")...)
				f.step(t0, answer200)
				if d := f.pttl(key); d != persistent {
					t.Fatalf("active host's state has TTL %s, want none", d)
				}
				out := func(tk crawlmsg.FetchTask) crawlmsg.Outcome {
					o := ok200(tk)
					o.CrawlDelay = 20 // next = now + 20s
					return o
				}
				f.step(t0.Add(time.Second), out) // drains the host: released
				d := f.pttl(key)
				// The TTL runs from the host's next fetch time, not from now.
				if d <= ttl+19*time.Second || d > ttl+20*time.Second {
					t.Fatalf("released host's state TTL %s, want ~%s", d, ttl+20*time.Second)
				}
				f.add("later", urls(1, "http://a.example/3")...)
				f.dispatch(t0.Add(2*time.Second), 10) // routes a.example again (not yet due)
				if s := f.stats(); s.Active != 1 {
					t.Fatalf("host not re-admitted: %+v", s)
				}
				if d := f.pttl(key); d != persistent {
					t.Fatalf("re-admitted host's state has TTL %s, want none", d)
				}
				f.wantHeap("a.example", t0.Add(21*time.Second))
			},
		},
		{
			name: "released by the reaper",
			ttl:  ttl,
			opts: func(o *frontier.Options) { o.MaxRetries = 0 },
			run: func(t *testing.T, f *tf, key string) {
				f.add("m", urls(0, "http://a.example/1")...)
				f.step(t0, answer200) // writes the state and releases the host
				f.add("m2", urls(0, "http://a.example/2")...)
				tasks := f.dispatch(t0.Add(time.Hour), 10)
				if len(tasks) != 1 || f.pttl(key) != persistent {
					t.Fatalf("dispatched %d; state TTL %s while in flight, want none", len(tasks), f.pttl(key))
				}
				if n := f.reap(t0.Add(2 * time.Hour)); n != 1 {
					t.Fatalf("reaped %d", n)
				}
				// No retries left: the URL failed and the host gave up its back queue; its
				// next time is the min delay after the reap.
				if d := f.pttl(key); d <= ttl || d > ttl+time.Second {
					t.Fatalf("state TTL %s after the reaper released the host, want ~%s", d, ttl+time.Second)
				}
			},
		},
		{
			name: "retired host's state expires too",
			ttl:  ttl,
			run: func(t *testing.T, f *tf, key string) {
				// Each failure sends its URL to the tail: eight URLs fail once each.
				f.add("m", urls(0, "http://a.example/1", "http://a.example/2", "http://a.example/3", "http://a.example/4",
					"http://a.example/5", "http://a.example/6", "http://a.example/7", "http://a.example/8")...)
				now := t0
				for range 8 {
					now = f.step(now, failErr).Next
				}
				if f.hostField("a.example", "retired") == "" {
					t.Fatal("host not retired")
				}
				if d := f.pttl(key); d <= 0 || d > ttl+10*time.Minute {
					t.Fatalf("retired host's state TTL %s, want at most %s", d, ttl+10*time.Minute)
				}
			},
		},
		{
			name: "zero keeps state forever",
			ttl:  0,
			run: func(t *testing.T, f *tf, key string) {
				f.add("m", urls(0, "http://a.example/1")...)
				f.step(t0, answer200)
				if s := f.stats(); s.Active != 0 {
					t.Fatalf("host not released: %+v", s)
				}
				if d := f.pttl(key); d != persistent {
					t.Fatalf("state TTL %s with HostStateTTL 0", d)
				}
			},
		},
		{
			name: "budget-exhausted host released by dispatch",
			ttl:  ttl,
			opts: func(o *frontier.Options) { o.MaxPagesPerHost = 1 },
			run: func(t *testing.T, f *tf, key string) {
				f.add("m", urls(0, "http://a.example/1", "http://a.example/2")...)
				f.step(t0, answer200)
				if got := f.dispatch(t0.Add(time.Minute), 10); len(got) != 0 {
					t.Fatalf("dispatched %v over budget", hostsOf(got))
				}
				if s := f.stats(); s.OverBudget != 1 || s.Active != 0 {
					t.Fatalf("stats %+v", s)
				}
				if d := f.pttl(key); d <= 0 || d > ttl {
					t.Fatalf("state TTL %s, want at most %s", d, ttl)
				}
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rdb := startRedis(t)
			o := testOptions(0)
			o.HostStateTTL = tc.ttl
			if tc.opts != nil {
				tc.opts(&o)
			}
			f := newTF(t, rdb, o)
			key := f.Keyspace().Key("host", "a.example")
			if d := f.pttl(key); d != missing {
				t.Fatalf("fresh host has state (PTTL %s)", d)
			}
			tc.run(t, f, key)
		})
	}
}
