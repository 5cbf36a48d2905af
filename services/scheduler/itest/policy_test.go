package itest

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/trawl/trawl/devstack/redisproc"
	"github.com/trawl/trawl/shared/topology"

	"github.com/trawl/trawl/services/scheduler/internal/frontier"
	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/frontierkeys"
	"github.com/trawl/trawl/shared/policy"
	"github.com/trawl/trawl/shared/testwait"
)

func pdur(d time.Duration) *policy.Duration { x := policy.Duration(d); return &x }
func pf(k float64) *float64                 { return &k }
func pint(n int) *int                       { return &n }
func pbool(b bool) *bool                    { return &b }
func pi64(n int64) *int64                   { return &n }

// rules compiles a rule set at version v.
func rules(t testing.TB, v int64, rs ...policy.Rule) *policy.Set {
	t.Helper()
	st := make([]policy.Stored, len(rs))
	for i, r := range rs {
		st[i] = policy.Stored{Rule: r, Origin: policy.Origin{Version: v}}
	}
	s, err := policy.Compile(st, v)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func hostRule(h string, r policy.Rule) policy.Rule {
	r.Scope = policy.Scope{Kind: policy.KindHost, Value: h}
	return r
}

func domainRule(d string, r policy.Rule) policy.Rule {
	r.Scope = policy.Scope{Kind: policy.KindDomain, Value: d}
	return r
}

func (f *tf) syncPolicy(s *policy.Set) frontier.PolicyChange {
	f.t.Helper()
	ch, err := f.SyncPolicy(testwait.Context(f.t), s)
	if err != nil {
		f.t.Fatal(err)
	}
	f.check()
	return ch
}

// A host's live policy replaces the process-wide politeness settings for that host only:
// its minimum delay, delay factor, and Crawl-delay honoured exactly or capped at its own
// bound, in complete (a request's outcome) and reap (an expired lease) alike.
func TestPolicyPolitenessPerHost(t *testing.T) {
	rdb := startRedis(t)
	f := newTF(t, rdb, testOptions(0))
	f.syncPolicy(rules(t, 1,
		hostRule("exact.example", policy.Rule{CrawlDelay: &policy.CrawlDelay{Exact: true}}),
		hostRule("cap.example", policy.Rule{CrawlDelay: &policy.CrawlDelay{Cap: 2 * time.Minute}}),
		domainRule("slow.example", policy.Rule{MinDelay: pdur(7 * time.Second)}),
		hostRule("www.slow.example", policy.Rule{DelayFactor: pf(20)}),
	))
	hosts := []string{"exact.example", "cap.example", "plain.example", "www.slow.example", "other.slow.example", "reaped.slow.example"}
	var us []crawlmsg.Discovered
	for _, h := range hosts {
		us = append(us, urls(0, "http://"+h+"/a", "http://"+h+"/b")...)
	}
	f.add("m1", us...)
	tasks := f.dispatch(at(0), 10)
	if len(tasks) != len(hosts) {
		t.Fatalf("dispatched %v, want one task of each host", hostsOf(tasks))
	}
	tests := map[string]struct {
		cd, took time.Duration
		want     time.Duration
	}{
		"exact.example":      {cd: time.Hour, took: 10 * time.Millisecond, want: time.Hour},
		"cap.example":        {cd: time.Hour, took: 10 * time.Millisecond, want: 2 * time.Minute},
		"plain.example":      {cd: time.Hour, took: 10 * time.Millisecond, want: 30 * time.Second},
		"www.slow.example":   {took: 500 * time.Millisecond, want: 10 * time.Second},
		"other.slow.example": {took: 500 * time.Millisecond, want: 7 * time.Second},
	}
	for _, tk := range tasks {
		tt, ok := tests[tk.Host]
		if !ok {
			continue
		}
		o := ok200(tk)
		o.CrawlDelay, o.DurationMs = tt.cd.Seconds(), tt.took.Milliseconds()
		f.complete(at(time.Second), o)
		if got, _ := f.heapScore(tk.Host); !got.Equal(at(time.Second + tt.want)) {
			t.Errorf("%s: next fetch t0+%s, want t0+%s", tk.Host, got.Sub(t0), time.Second+tt.want)
		}
	}
	if n := f.reap(at(time.Hour)); n != 1 {
		t.Fatalf("reaped %d, want 1", n)
	}
	if got, _ := f.heapScore("reaped.slow.example"); !got.Equal(at(time.Hour + 7*time.Second)) {
		t.Errorf("reaped.slow.example: next fetch t0+%s, want t0+%s", got.Sub(t0), time.Hour+7*time.Second)
	}
}

// SyncPolicy writes the table a rule set implies and, on a change, only the entries that
// differ; rules with no per-host field and URL-prefix rules have no entry.
func TestSyncPolicyWritesOnlyChanges(t *testing.T) {
	rdb := startRedis(t)
	f := newTF(t, rdb, testOptions(0))
	a := hostRule("a.example", policy.Rule{MinDelay: pdur(2 * time.Second)})
	b := domainRule("b.example", policy.Rule{Connections: pint(3), HostBudget: pi64(10)})
	ua := "TestBot/1"
	c := hostRule("c.example", policy.Rule{UserAgent: &ua})
	ch := f.syncPolicy(rules(t, 1, a, b, c))
	if len(ch.Set) != 2 || len(ch.Deleted) != 0 {
		t.Fatalf("first sync %+v, want 2 entries set", ch)
	}
	if ch := f.syncPolicy(rules(t, 1, a, b, c)); !ch.Empty() {
		t.Fatalf("same rules again changed %+v", ch)
	}
	b2 := domainRule("b.example", policy.Rule{Connections: pint(3), HostBudget: pi64(10), Block: pbool(true)})
	ch = f.syncPolicy(rules(t, 2, b2, c))
	if len(ch.Set) != 1 || ch.Set[0] != frontierkeys.PolicyDomainField("b.example") ||
		len(ch.Deleted) != 1 || ch.Deleted[0] != frontierkeys.PolicyHostField("a.example") {
		t.Fatalf("change %+v, want b.example set and a.example deleted", ch)
	}
	got := rdb.HGetAll(testwait.Context(t), frontierkeys.ForShard("t", 0).Policy()).Val()
	l, err := frontierkeys.ParseHostLimits(got[frontierkeys.PolicyDomainField("b.example")])
	if err != nil || len(got) != 1 || *l.Connections != 3 || *l.HostBudget != 10 || !*l.Block || l.MinDelay != nil {
		t.Fatalf("table %v (%+v, %v)", got, l, err)
	}
}

func (f *tf) applyPolicy(s *policy.Set) frontier.PolicyApplied {
	f.t.Helper()
	a, err := f.ApplyPolicy(testwait.Context(f.t), s)
	if err != nil {
		f.t.Fatal(err)
	}
	f.check()
	return a
}

func (f *tf) parkList(host string) []string {
	f.t.Helper()
	l, err := f.rdb.LRange(testwait.Context(f.t), f.Keyspace().Key("park", host), 0, -1).Result()
	if err != nil {
		f.t.Fatal(err)
	}
	return l
}

func urlsOf(entries []string) []string {
	out := make([]string, len(entries))
	for i, e := range entries {
		en, _ := frontier.ParseEntry(e)
		out[i] = en.URL
	}
	return out
}

// Block parks a host's queue (in order, counted, its back queue freed), the router parks
// its new URLs, its task out finishes normally, a fetcher's parked outcome parks that URL
// with the same attempt, nothing of it is dispatched while blocked, and lifting the block
// resumes the park list in order.
func TestPolicyBlockParksAndResumes(t *testing.T) {
	rdb := startRedis(t)
	f := newTF(t, rdb, testOptions(0))
	var us []crawlmsg.Discovered
	for i := range 5 {
		us = append(us, urls(0, fmt.Sprintf("http://blocked.example/%d", i))...)
	}
	us = append(us, urls(0, "http://free.example/0", "http://free.example/1", "http://free.example/2")...)
	f.add("m1", us...)
	tasks := f.dispatch(at(0), 10)
	if got := hostsOf(tasks); len(got) != 2 {
		t.Fatalf("dispatched %v", got)
	}
	block := rules(t, 1, domainRule("blocked.example", policy.Rule{Block: pbool(true)}))
	a := f.applyPolicy(block)
	if a.Parked != 4 {
		t.Fatalf("parked %d at the change, want the 4 queued", a.Parked)
	}
	if s := f.stats(); s.Parked != 4 || s.Inflight != 2 {
		t.Fatalf("after block: %+v", s)
	}
	for _, tk := range tasks {
		o := ok200(tk)
		if tk.Host == "free.example" {
			o = outcome(tk, crawlmsg.OutcomeParked, 0)
		}
		res := f.complete(at(time.Second), o)
		want := frontier.ResultFetched
		if tk.Host == "free.example" {
			want = frontier.ResultParked
		}
		if res[0].Result != want {
			t.Fatalf("%s: result %s, want %s", tk.Host, res[0].Result, want)
		}
	}
	if n := f.rdb.HExists(testwait.Context(t), f.Keyspace().Key("hosts"), "blocked.example").Val(); n {
		t.Fatal("blocked host still holds a back queue after its task ended")
	}
	f.add("m2", urls(1, "http://blocked.example/5", "http://blocked.example/6")...)
	for step := 2; step < 10; step++ {
		for _, tk := range f.dispatch(at(time.Duration(step)*time.Minute), 10) {
			if tk.Host == "blocked.example" {
				t.Fatalf("dispatched %s while blocked", tk.URL)
			}
			f.complete(at(time.Duration(step)*time.Minute+time.Second), ok200(tk))
		}
	}
	want := []string{"http://blocked.example/1", "http://blocked.example/2", "http://blocked.example/3",
		"http://blocked.example/4", "http://blocked.example/5", "http://blocked.example/6"}
	if got := urlsOf(f.parkList("blocked.example")); !slices.Equal(got, want) {
		t.Fatalf("park list %v, want %v", got, want)
	}
	if got := urlsOf(f.parkList("free.example")); !slices.Equal(got, []string{tasksURL(tasks, "free.example")}) {
		t.Fatalf("free.example park list %v", got)
	}
	ph, err := f.Parked(testwait.Context(t))
	if err != nil || len(ph) != 2 {
		t.Fatalf("Parked = %+v, %v", ph, err)
	}
	a = f.applyPolicy(rules(t, 2))
	if a.Resumed != 7 {
		t.Fatalf("resumed %d, want 7", a.Resumed)
	}
	var got []string
	for step := 20; step < 40 && len(got) < 6; step++ {
		for _, tk := range f.dispatch(at(time.Duration(step)*time.Minute), 10) {
			if tk.Host == "blocked.example" {
				got = append(got, tk.URL)
			}
			if tk.Attempt != 0 {
				t.Errorf("%s resumed with attempt %d", tk.URL, tk.Attempt)
			}
			f.complete(at(time.Duration(step)*time.Minute+time.Second), ok200(tk))
		}
	}
	if !slices.Equal(got, want) {
		t.Fatalf("resumed in order %v, want %v", got, want)
	}
	if s := f.stats(); s.Parked != 0 || s.Queued != 0 || s.Fetched != s.Accepted {
		t.Fatalf("at the end: %+v", s)
	}
}

func tasksURL(tasks []crawlmsg.FetchTask, host string) string {
	for _, tk := range tasks {
		if tk.Host == host {
			return tk.URL
		}
	}
	return ""
}

// A host blocked in the table is never dispatched even before the park pass runs: the
// dispatch parks it when it comes due.
func TestPolicyBlockedHostParkedAtDispatch(t *testing.T) {
	rdb := startRedis(t)
	f := newTF(t, rdb, testOptions(0))
	f.add("m1", urls(0, "http://a.example/0", "http://a.example/1", "http://b.example/0")...)
	f.syncPolicy(rules(t, 1, hostRule("a.example", policy.Rule{Block: pbool(true)})))
	tasks := f.dispatch(at(0), 10)
	if got := hostsOf(tasks); !slices.Equal(got, []string{"b.example"}) {
		t.Fatalf("dispatched %v, want only b.example", got)
	}
	if s := f.stats(); s.Parked != 2 || s.ActiveHosts != 1 {
		t.Fatalf("after dispatch: %+v", s)
	}
}

// A block set through the store reaches the running scheduler: within 2 s no task of the
// host is handed out, its queued URLs are parked (not lost), and removing the rule resumes
// them until every URL is fetched.
func TestServiceLivePolicyBlockAndUnblock(t *testing.T) {
	s := startStack(t, redisproc.Options{}, map[string]string{"TRAWL_MIN_DELAY": "100ms"})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mu sync.Mutex
	var aTimes []time.Time
	fx := s.runFetcher(ctx, func(tk crawlmsg.FetchTask) crawlmsg.Outcome {
		if tk.Host == "a.example" {
			mu.Lock()
			aTimes = append(aTimes, time.Now())
			mu.Unlock()
		}
		return fetched200(tk)
	})
	var batch crawlmsg.FrontierBatch
	for i := range 40 {
		batch.URLs = append(batch.URLs, crawlmsg.Discovered{URL: fmt.Sprintf("http://a.example/%d", i)})
	}
	for i := range 3 {
		batch.URLs = append(batch.URLs, crawlmsg.Discovered{URL: fmt.Sprintf("http://b.example/%d", i)})
	}
	s.publish(topology.FrontierSubject(0), &batch)
	testwait.Eventually(t, 10*time.Second, "a.example fetched a few times", func() bool { return fx.tasksFor("a.example") >= 3 })

	store := policy.NewStore(s.rdb, s.cfg.RedisPrefix)
	changed := time.Now()
	if _, _, err := store.Apply(ctx, []policy.Change{{Rule: hostRule("a.example", policy.Rule{Block: pbool(true)})}}, "test", 0); err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, 5*time.Second, "a.example's queue parked", func() bool {
		st := s.stats()
		return st.Inflight == 0 && st.Parked > 0 && st.Parked == 40-int64(fx.tasksFor("a.example"))
	})
	mu.Lock()
	last := aTimes[len(aTimes)-1]
	mu.Unlock()
	if d := last.Sub(changed); d > 2*time.Second {
		t.Fatalf("a.example got a task %s after the block", d)
	}
	if ph, ok, err := frontierkeys.ReadParkedHost(ctx, s.rdb, s.cfg.RedisPrefix, 0, "a.example"); err != nil || !ok || ph.Reason != frontierkeys.ParkBlocked {
		t.Fatalf("ReadParkedHost = %+v, %v, %v", ph, ok, err)
	}
	before := fx.tasksFor("a.example")

	if _, _, err := store.Apply(ctx, []policy.Change{{Remove: true, Rule: hostRule("a.example", policy.Rule{})}}, "test", 0); err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, 20*time.Second, "every URL fetched after the unblock", func() bool {
		st := s.stats()
		return st.Fetched == 43 && st.Parked == 0 && st.Queued == 0
	})
	if got := fx.tasksFor("a.example"); got != 40 || before >= 40 {
		t.Fatalf("a.example: %d tasks before the unblock, %d in all; want 40 in all", before, got)
	}
}
