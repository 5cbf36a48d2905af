package itest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/trawl/trawl/devstack/redisproc"
	"github.com/trawl/trawl/shared/topology"

	"github.com/trawl/trawl/services/scheduler/internal/frontier"
	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/frontierkeys"
	"github.com/trawl/trawl/shared/policy"
	"github.com/trawl/trawl/shared/politeness"
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
	f.policed = true
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
	t.Parallel()
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

// SyncPolicy makes the rules' generation the shard's and writes every active host's
// limits (its most specific rule's entry, resolved in Go, or none) into the host's state;
// the same rules again write nothing; a change writes the new generation and the active
// hosts' limits again; a set without host or domain rules leaves no generation. The policy
// hash holds the generation alone: a hash of the layout with one entry per rule is
// rewritten.
func TestSyncPolicyWritesOnlyChanges(t *testing.T) {
	t.Parallel()
	rdb := startRedis(t)
	f := newTF(t, rdb, testOptions(0))
	ctx := testwait.Context(t)
	key := frontierkeys.ForShard("t", 0, 1).Policy()
	gen := func() string { return rdb.HGet(ctx, key, frontierkeys.PolicyGenField).Val() }
	lim := func(h string) string { return f.hostField(h, frontierkeys.HostLim) }
	f.add("m1", urls(0, "http://a.example/1", "http://www.b.example/1", "http://c.example/1", "http://d.example/1")...)
	// Active: one host with its task out, the others in the heap.
	f.dispatch(at(0), 1)
	// The layout that kept one entry per rule.
	if err := rdb.HSet(ctx, key, frontierkeys.PolicyGenField, "1-old", "a.example", "- - - - - -").Err(); err != nil {
		t.Fatal(err)
	}
	a := hostRule("a.example", policy.Rule{MinDelay: pdur(2 * time.Second)})
	b := domainRule("b.example", policy.Rule{Connections: pint(3), HostBudget: pi64(10)})
	ua := "TestBot/1"
	c := hostRule("c.example", policy.Rule{UserAgent: &ua})
	s1 := rules(t, 1, a, b, c)
	ch := f.syncPolicy(s1)
	g1 := gen()
	if !ch.Changed || ch.Hosts != 4 || g1 == "" || g1 != ch.Gen || rdb.HLen(ctx, key).Val() != 1 {
		t.Fatalf("first sync %+v, generation %q, policy hash %v", ch, g1, rdb.HGetAll(ctx, key).Val())
	}
	if v := lim("c.example"); v != frontierkeys.HostLimValue(g1, (frontierkeys.PolicyEntry{Rules: []string{"host:c.example"}}).Encode()) {
		t.Fatalf("limits of a host whose rule sets no per-host field %q, want every limit unset", v)
	}
	if v := lim("d.example"); v != frontierkeys.HostLimValue(g1, "") {
		t.Fatalf("limits of a host no rule matches %q", v)
	}
	if ch := f.syncPolicy(rules(t, 2, a, b, c)); ch.Changed || ch.Hosts != 0 || gen() != g1 {
		t.Fatalf("same rules again changed %+v, generation %q → %q", ch, g1, gen())
	}
	b2 := domainRule("b.example", policy.Rule{Connections: pint(3), HostBudget: pi64(10), Block: pbool(true)})
	ch = f.syncPolicy(rules(t, 3, b2, c))
	if g := gen(); !ch.Changed || g == "" || g == g1 {
		t.Fatalf("change %+v, generation %q, was %q", ch, g, g1)
	}
	_, v, _ := frontierkeys.ParseHostLim(lim("www.b.example"))
	e, err := frontierkeys.ParsePolicyEntry(v)
	l := e.Limits
	if err != nil || *l.Connections != 3 || *l.HostBudget != 10 || !*l.Block || l.MinDelay != nil ||
		e.BlockBy != "domain:b.example" || !slices.Equal(e.Rules, []string{"domain:b.example"}) {
		t.Fatalf("www.b.example's limits %q (%+v, %v)", v, e, err)
	}
	if _, v, _ := frontierkeys.ParseHostLim(lim("a.example")); v != "" {
		t.Fatalf("a.example's limits %q after its rule went", v)
	}
	private, err := policy.ParseScope("http://a.example/private/")
	if err != nil {
		t.Fatal(err)
	}
	f.syncPolicy(rules(t, 4, policy.Rule{Scope: private, Block: pbool(true)}))
	if n := rdb.Exists(ctx, key).Val(); n != 0 {
		t.Fatalf("a set without host or domain rules left a generation: %v", rdb.HGetAll(ctx, key).Val())
	}
}

func (f *tf) applyPolicy(s *policy.Set) frontier.PolicyApplied {
	f.t.Helper()
	f.policed = true
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
	t.Parallel()
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
	if s := f.stats(); s.Parked != 4 || s.InFlight != 2 {
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
	t.Parallel()
	rdb := startRedis(t)
	f := newTF(t, rdb, testOptions(0))
	f.add("m1", urls(0, "http://a.example/0", "http://a.example/1", "http://b.example/0")...)
	f.syncPolicy(rules(t, 1, hostRule("a.example", policy.Rule{Block: pbool(true)})))
	tasks := f.dispatch(at(0), 10)
	if got := hostsOf(tasks); !slices.Equal(got, []string{"b.example"}) {
		t.Fatalf("dispatched %v, want only b.example", got)
	}
	if s := f.stats(); s.Parked != 2 || s.Active != 1 {
		t.Fatalf("after dispatch: %+v", s)
	}
}

// A block set through the store reaches the running scheduler: within 2 s no task of the
// host is handed out, its queued URLs are parked (not lost), and removing the rule resumes
// them until every URL is fetched.
func TestServiceLivePolicyBlockAndUnblock(t *testing.T) {
	t.Parallel()
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

	store := policy.NewStore(s.rdb, s.cfg.Common.RedisPrefix)
	changed := time.Now()
	if _, _, err := store.Apply(ctx, []policy.Change{{Rule: hostRule("a.example", policy.Rule{Block: pbool(true)})}}, "test", 0); err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, 5*time.Second, "a.example's queue parked", func() bool {
		st := s.stats()
		return st.InFlight == 0 && st.Parked > 0 && st.Parked == 40-int64(fx.tasksFor("a.example"))
	})
	mu.Lock()
	last := aTimes[len(aTimes)-1]
	mu.Unlock()
	d := last.Sub(changed)
	if d > 2*time.Second {
		t.Fatalf("a.example got a task %s after the block", d)
	}
	t.Logf("a.example's last task before the block came %s after it", d)
	if ph, ok, err := frontierkeys.OpenReadOnly(s.rdb, s.cfg.Common.RedisPrefix, 1).ParkedHost(ctx, 0, "a.example"); err != nil || !ok || ph.Reason != frontierkeys.ParkBlocked {
		t.Fatalf("ParkedHost = %+v, %v, %v", ph, ok, err)
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

// A rule's host_budget replaces TRAWL_MAX_PAGES_PER_HOST for the hosts it matches (0: no
// limit), and a budget set mid-crawl stops the host at its count.
func TestPolicyHostBudget(t *testing.T) {
	t.Parallel()
	rdb := startRedis(t)
	o := testOptions(0)
	o.MaxPagesPerHost = 3
	f := newTF(t, rdb, o)
	f.syncPolicy(rules(t, 1,
		hostRule("two.example", policy.Rule{HostBudget: pi64(2)}),
		domainRule("free.example", policy.Rule{HostBudget: pi64(0)}),
	))
	var us []crawlmsg.Discovered
	for _, h := range []string{"two.example", "www.free.example", "plain.example", "later.example"} {
		for i := range 6 {
			us = append(us, urls(0, fmt.Sprintf("http://%s/%d", h, i))...)
		}
	}
	f.add("m1", us...)
	// later.example fetches one page, then gets a budget of 2.
	got := map[string]int{}
	for step := 0; got["later.example"] == 0; step++ {
		for _, tk := range f.dispatch(at(time.Duration(step)*time.Minute), 10) {
			got[tk.Host]++
			f.complete(at(time.Duration(step)*time.Minute+time.Second), ok200(tk))
		}
	}
	f.syncPolicy(rules(t, 2,
		hostRule("two.example", policy.Rule{HostBudget: pi64(2)}),
		domainRule("free.example", policy.Rule{HostBudget: pi64(0)}),
		hostRule("later.example", policy.Rule{HostBudget: pi64(2)}),
	))
	for _, tk := range f.drain(at(time.Hour), 10) {
		got[tk.Host]++
	}
	for _, tk := range f.dispatch(at(2*time.Hour), 10) {
		got[tk.Host]++
	}
	want := map[string]int{"two.example": 2, "www.free.example": 6, "plain.example": 3, "later.example": 2}
	for h, n := range want {
		if got[h] != n {
			t.Errorf("%s fetched %d pages, want %d", h, got[h], n)
		}
	}
	if s := f.stats(); s.OverBudget != 4+3+4 {
		t.Errorf("over budget %d, want 11", s.OverBudget)
	}
}

// A domain_budget holds for the domain's hosts together although they are on different
// shards: the pages fetched from all of them stop at the budget, the rest end over budget,
// and a task that made no request gives its charge back.
func TestPolicyDomainBudgetAcrossShards(t *testing.T) {
	t.Parallel()
	rdb := startRedis(t)
	set := rules(t, 1, domainRule("example.com", policy.Rule{DomainBudget: pi64(5)}))
	var fs []*tf
	for shard := range 2 {
		f := newTF(t, rdb, testOptions(shard))
		f.syncPolicy(set)
		fs = append(fs, f)
	}
	// Two hosts on each shard (which shard a host is on is the caller's choice here).
	hosts := [][]string{{"a.example.com", "b.example.com"}, {"c.example.com", "www.example.com"}}
	for shard, hs := range hosts {
		var us []crawlmsg.Discovered
		for _, h := range hs {
			for i := range 4 {
				us = append(us, urls(0, fmt.Sprintf("http://%s/%d", h, i))...)
			}
		}
		us = append(us, urls(0, fmt.Sprintf("http://other%d.example/0", shard))...)
		fs[shard].add("m", us...)
	}
	ctx := testwait.Context(t)
	fetched, deferred := 0, false
	for step := range 20 {
		now := at(time.Duration(step) * time.Minute)
		for _, f := range fs {
			tasks := f.dispatch(now, 10)
			kept, _, err := f.ChargeDomains(ctx, set, tasks)
			if err != nil {
				t.Fatal(err)
			}
			f.check()
			var outs []crawlmsg.Outcome
			for _, tk := range kept {
				o := ok200(tk)
				if !deferred && strings.HasSuffix(tk.Host, "example.com") {
					// No request made: its charge comes back.
					o, deferred = outcome(tk, crawlmsg.OutcomeDeferred, 0), true
				} else if strings.HasSuffix(tk.Host, "example.com") {
					fetched++
				}
				outs = append(outs, o)
			}
			if len(outs) > 0 {
				if err := f.RefundDomains(ctx, set, f.complete(now.Add(time.Second), outs...)); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	if fetched != 5 {
		t.Errorf("fetched %d pages of example.com, want the budget 5", fetched)
	}
	var over, others int64
	for _, f := range fs {
		s := f.stats()
		over += s.OverBudget
		others += s.Fetched
		if s.Queued != 0 || s.InFlight != 0 {
			t.Errorf("shard left work: %+v", s)
		}
	}
	if over != 16-5 || others != 5+2 {
		t.Errorf("over budget %d (want 11), fetched %d (want 7)", over, others)
	}
	if n, _ := rdb.Get(ctx, frontierkeys.DomainPages("t", "example.com")).Int64(); n != 5 {
		t.Errorf("domain counter %d, want 5", n)
	}
}

// Each rule counts, in Shard.PolicyStats, the hosts it was admitted under, the tasks
// dispatched under it, the URLs its block parked and how many are parked now, a rule that
// sets no per-host limit (here a User-Agent) too; frontierkeys.Reader.PolicyStats sums them
// over shards.
func TestPolicyStatsPerRule(t *testing.T) {
	t.Parallel()
	rdb := startRedis(t)
	o := testOptions(0)
	o.Shards = 2 // the reader sums over both
	f := newTF(t, rdb, o)
	dom := domainRule("x.example", policy.Rule{MinDelay: pdur(0)})
	blk := hostRule("b.x.example", policy.Rule{Block: pbool(true)})
	ua := "Special/1.0"
	agent := hostRule("c.example", policy.Rule{UserAgent: &ua})
	f.applyPolicy(rules(t, 1, dom, blk, agent))
	f.add("m1", urls(0, "http://a.x.example/0", "http://a.x.example/1", "http://a.x.example/2",
		"http://b.x.example/0", "http://b.x.example/1", "http://c.example/0")...)
	f.drain(at(0), 10)
	ctx := testwait.Context(t)
	stats := func() map[string]frontierkeys.PolicyStat {
		st, err := frontierkeys.OpenReadOnly(rdb, "t", 2).PolicyStats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	got := stats()
	want := map[string]frontierkeys.PolicyStat{
		dom.Scope.String():   {Hosts: 1, Requests: 3},
		blk.Scope.String():   {Blocked: 2, Parked: 2},
		agent.Scope.String(): {Hosts: 1, Requests: 1},
	}
	if !maps.Equal(got, want) {
		t.Fatalf("policy stats %+v, want %+v", got, want)
	}
	f.applyPolicy(rules(t, 2, dom, agent))
	f.drain(at(time.Hour), 10)
	want = map[string]frontierkeys.PolicyStat{
		dom.Scope.String():   {Hosts: 2, Requests: 5},
		blk.Scope.String():   {Blocked: 2, Parked: 0},
		agent.Scope.String(): {Hosts: 1, Requests: 1},
	}
	if got := stats(); !maps.Equal(got, want) {
		t.Fatalf("after the unblock: policy stats %+v, want %+v", got, want)
	}
}

// Narrowing a rule's scope rechecks the queued URLs of the hosts it covers: those now
// beyond its depth, outside its include or inside its exclude end out of scope (counted
// excluded for the rule), those a URL-prefix block covers are parked, the rest stay in
// order; URLs entering the frontier are checked at add time.
func TestPolicyScopeRecheck(t *testing.T) {
	t.Parallel()
	rdb := startRedis(t)
	f := newTF(t, rdb, testOptions(0))
	var us []crawlmsg.Discovered
	for i := range 12 {
		path := []string{"keep", "drop", "private"}[i%3]
		us = append(us, crawlmsg.Discovered{URL: fmt.Sprintf("http://a.example/%s/%d", path, i), Depth: i % 4})
	}
	us = append(us, urls(3, "http://b.example/drop/0")...)
	f.add("m1", us...)
	first := f.dispatch(at(0), 10)
	if len(first) != 2 {
		t.Fatalf("dispatched %v", hostsOf(first))
	}
	private, err := policy.ParseScope("http://a.example/private/")
	if err != nil {
		t.Fatal(err)
	}
	// What the recheck must do with each queued entry (the first dispatch took one URL
	// of the router's drawing): depth first, then the exclude, then the block.
	var wantKept []string
	var wantX, wantP int64
	for _, e := range f.backQueue("a.example") {
		en, _ := frontier.ParseEntry(e)
		switch {
		case en.Depth > 2 || strings.Contains(en.URL, "/drop/"):
			wantX++
		case strings.Contains(en.URL, "/private/"):
			wantP++
		default:
			wantKept = append(wantKept, en.URL)
		}
	}
	narrow := hostRule("a.example", policy.Rule{MaxDepth: pint(2), Exclude: []string{"/drop/"}})
	set := rules(t, 2, narrow, policy.Rule{Scope: private, Block: pbool(true)})
	rc, err := f.RecheckScope(testwait.Context(t), set, frontier.ScopeChanged(nil, set))
	if err != nil {
		t.Fatal(err)
	}
	f.check()
	if rc.Hosts != 1 || rc.Excluded != wantX || rc.Parked != wantP || rc.Kept != int64(len(wantKept)) || wantX < 5 || wantP < 2 {
		t.Fatalf("recheck %+v, want 1 host, %d excluded, %d parked, %d kept", rc, wantX, wantP, len(wantKept))
	}
	if got := urlsOf(f.backQueue("a.example")); !slices.Equal(got, wantKept) {
		t.Fatalf("kept %v, want %v (their order before)", got, wantKept)
	}
	if got := urlsOf(f.parkList("a.example")); int64(len(got)) != wantP || !strings.Contains(got[0], "/private/") {
		t.Fatalf("parked %v", got)
	}
	st, err := frontierkeys.OpenReadOnly(rdb, "t", 1).PolicyStats(testwait.Context(t))
	if err != nil || st[narrow.Scope.String()].Excluded != wantX || st[private.String()].Parked != wantP {
		t.Fatalf("policy stats %+v, %v", st, err)
	}
	if s := f.stats(); s.OutOfScope != wantX {
		t.Fatalf("out of scope %d, want %d", s.OutOfScope, wantX)
	}

	// At add time: the same rule refuses what it does not admit.
	f.UsePolicy(func() *policy.Set { return set })
	if n := f.add("m2", crawlmsg.Discovered{URL: "http://a.example/keep/x", Depth: 3},
		crawlmsg.Discovered{URL: "http://a.example/drop/x"}, crawlmsg.Discovered{URL: "http://a.example/keep/y"}); n != 1 {
		t.Fatalf("queued %d of 3 at add time, want 1", n)
	}
}

// A rule change that rechecks a host holding 100,000 queued URLs does not stall dispatch
// for the other hosts: the recheck goes a chunk per script. The longest dispatch call
// during the recheck is logged (and bounded, generously for a shared machine).
func TestPolicyRecheckDoesNotStallDispatch(t *testing.T) {
	rdb := startRedis(t)
	o := testOptions(0)
	o.RouteLimit = 200_000
	o.MinDelay = 0
	f := newTF(t, rdb, o)
	ctx := testwait.Context(t)
	const big = 100_000
	for c := 0; c < big; c += 10_000 {
		var us []crawlmsg.Discovered
		for i := c; i < c+10_000; i++ {
			us = append(us, crawlmsg.Discovered{URL: fmt.Sprintf("http://big.example/p/%d", i), Depth: 1 + i%2})
		}
		if _, err := f.AddBatches(ctx, []frontier.Batch{{URLs: us}}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := f.Dispatch(ctx, 1); err != nil { // routes big.example's URLs to its back queue
		t.Fatal(err)
	}
	queued := rdb.LRange(ctx, f.Keyspace().Key("bq", "big.example"), 0, -1).Val()
	if len(queued) < big-1 {
		t.Fatalf("big.example holds %d queued URLs", len(queued))
	}
	var deep int64
	for _, e := range queued {
		if strings.HasPrefix(e, "2 ") {
			deep++
		}
	}
	other := 0
	// dispatchOther adds a URL of a new host and dispatches and completes what is due,
	// returning how long the dispatch call took.
	dispatchOther := func() time.Duration {
		other++
		if _, err := f.AddBatches(ctx, []frontier.Batch{{URLs: urls(0, fmt.Sprintf("http://o%d.example/", other))}}); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		tasks, err := f.Dispatch(ctx, 10)
		d := time.Since(start)
		if err != nil {
			t.Fatal(err)
		}
		var outs []crawlmsg.Outcome
		for _, tk := range tasks {
			if tk.Host != "big.example" {
				outs = append(outs, ok200(tk))
			}
		}
		if _, err := f.Complete(ctx, outs); err != nil {
			t.Fatal(err)
		}
		return d
	}
	var baseline time.Duration
	for range 200 {
		baseline = max(baseline, dispatchOther())
	}
	set := rules(t, 2, hostRule("big.example", policy.Rule{MaxDepth: pint(1)}))
	// Redis's own timing of each script (the slow log, every command): what the recheck
	// holds the server for, free of this machine's scheduling noise.
	must(t, rdb.ConfigSet(ctx, "slowlog-max-len", "100000").Err())
	must(t, rdb.ConfigSet(ctx, "slowlog-log-slower-than", "0").Err())
	must(t, rdb.Do(ctx, "SLOWLOG", "RESET").Err())
	done := make(chan Rechecked, 1)
	go func() {
		rc, err := f.RecheckScope(ctx, set, frontier.ScopeChanged(nil, set))
		if err != nil {
			t.Error(err)
		}
		done <- Rechecked(rc)
	}()
	var longest time.Duration
	calls := 0
	for {
		select {
		case rc := <-done:
			logs, err := rdb.SlowLogGet(ctx, -1).Result()
			must(t, err)
			// Every script of the window: the recheck's chunks, and the dispatches, adds and
			// outcomes between them (the slow log keeps too few arguments to tell them apart).
			var script, other time.Duration
			scripts := 0
			for _, l := range logs {
				if len(l.Args) == 0 {
					continue
				}
				if strings.HasPrefix(strings.ToUpper(l.Args[0]), "EVAL") {
					script = max(script, l.Duration)
					scripts++
				} else {
					other = max(other, l.Duration)
				}
			}
			t.Logf("recheck of %d queued URLs: %+v; the longest of the %d scripts that ran meanwhile held Redis %s "+
				"(other commands at most %s); %d dispatch calls meanwhile, the longest %s end to end (%s over 200 calls before it)",
				len(queued), rc, scripts, script, other, calls, longest, baseline)
			// A chunk holds Redis about 4 ms; the slow log counts wall time, which a loaded
			// machine stretches (56.7 ms seen beside two race suites). The whole recheck in
			// one script would hold it for the 200 chunks, about 800 ms.
			if script > 150*time.Millisecond {
				t.Fatalf("a recheck script held Redis %s", script)
			}
			if rc.Excluded != deep {
				t.Fatalf("excluded %d, want the %d at depth 2", rc.Excluded, deep)
			}
			if calls < 5 {
				t.Fatalf("only %d dispatch calls ran during the recheck", calls)
			}
			if longest > 250*time.Millisecond {
				t.Fatalf("a dispatch call took %s during the recheck", longest)
			}
			return
		default:
		}
		longest = max(longest, dispatchOther())
		calls++
	}
}

type Rechecked = frontier.Rechecked

// connections: 2 lets two tasks of the host out at once, each dispatch at least half of
// one connection's cycle (the last response time and the host's gap) after the previous
// one's start; an outcome frees its slot, and the readers (leases, stuck report, lease
// errors) name the host of either slot.
func TestPolicyTwoConnections(t *testing.T) {
	t.Parallel()
	rdb := startRedis(t)
	o := testOptions(0)
	o.DelayFactor = 0
	f := newTF(t, rdb, o)
	f.syncPolicy(rules(t, 1, hostRule("multi.example", policy.Rule{Connections: pint(2), MinDelay: pdur(time.Second)})))
	var us []crawlmsg.Discovered
	for i := range 8 {
		us = append(us, urls(0, fmt.Sprintf("http://multi.example/%d", i))...)
	}
	f.add("m1", us...)
	multi := func(tasks []crawlmsg.FetchTask) []crawlmsg.FetchTask {
		var out []crawlmsg.FetchTask
		for _, tk := range tasks {
			if tk.Host == "multi.example" {
				out = append(out, tk)
			}
		}
		return out
	}
	first := multi(f.dispatch(at(0), 10))
	if len(first) != 1 {
		t.Fatalf("at 0: %d tasks, want 1 (the second waits half the gap from the first's start)", len(first))
	}
	// No response time yet: half of the 1 s minimum delay.
	f.wantHeap("multi.example", at(500*time.Millisecond))
	if got := multi(f.dispatch(at(499*time.Millisecond), 10)); len(got) != 0 {
		t.Fatalf("a second task %s before half the gap from the first start", got[0].URL)
	}
	second := multi(f.dispatch(at(500*time.Millisecond), 10))
	if len(second) != 1 || !strings.HasSuffix(second[0].Lease, "~1") {
		t.Fatalf("at 0.5s: %+v, want one task in slot 1", second)
	}
	if got := multi(f.dispatch(at(10*time.Second), 10)); len(got) != 0 {
		t.Fatalf("a third task out with two connections: %s", got[0].URL)
	}
	ctx := testwait.Context(t)
	if ok, err := frontierkeys.NoteLeaseError(ctx, rdb, "t", 0, 1, "multi.example", second[0].Lease, errors.New("slow")); !ok || err != nil {
		t.Fatalf("NoteLeaseError on slot 1: %v, %v", ok, err)
	}
	leases, _, err := frontierkeys.OpenReadOnly(rdb, "t", 1).Leases(ctx, 0, 10)
	if err != nil || len(leases) != 2 || leases[0].Host != "multi.example" || leases[1].Host != "multi.example" ||
		leases[1].LastError == nil {
		t.Fatalf("Leases = %+v, %v", leases, err)
	}
	// The first ends at 10.5 s: its slot is free, and the host is due at once (its last
	// start was 10 s ago).
	f.complete(at(10500*time.Millisecond), ok200(first[0]))
	f.wantHeap("multi.example", at(10500*time.Millisecond))
	third := multi(f.dispatch(at(10500*time.Millisecond), 10))
	if len(third) != 1 || strings.Contains(third[0].Lease, "~") {
		t.Fatalf("at 10.5s: %+v, want one task in slot 0", third)
	}
	// Both out again: the reaper ends both; then the rest drains, never more than two out.
	if n := f.reap(at(time.Hour)); n != 2 {
		t.Fatalf("reaped %d, want 2", n)
	}
	maxOut, both := 0, false
	now := at(2 * time.Hour)
	var out []crawlmsg.FetchTask
	for step := 0; step < 100 && (f.stats().Queued > 0 || len(out) > 0); step++ {
		now = now.Add(500 * time.Millisecond)
		out = append(out, multi(f.dispatch(now, 10))...)
		maxOut = max(maxOut, len(out))
		both = both || len(out) == 2
		if step%3 == 2 && len(out) > 0 {
			f.complete(now, ok200(out[0]))
			out = out[1:]
		}
	}
	if maxOut != 2 || !both {
		t.Fatalf("at most %d out at once, want 2", maxOut)
	}
	if s := f.stats(); s.Fetched != 8 || s.Queued != 0 || s.InFlight != 0 {
		t.Fatalf("at the end: %+v", s)
	}
}

// The race of an unblock: a fetcher still on the old rules (it polls them) takes a task
// dispatched right after the resume and answers parked by them. The scheduler's rules in
// force, newer, no longer block the URL, so the outcome puts it back at the head of its
// host's queue counting an attempt (so that a fetcher stuck on old rules cannot send it
// round forever: TestPolicyOutcomeByOlderRules), and it is fetched without waiting for any
// further policy pass.
func TestPolicyParkedOutcomeAfterUnblock(t *testing.T) {
	t.Parallel()
	rdb := startRedis(t)
	f := newTF(t, rdb, testOptions(0))
	var set atomic.Pointer[policy.Set]
	set.Store(rules(t, 1, hostRule("race.example", policy.Rule{Block: pbool(true)})))
	f.UsePolicy(set.Load)
	f.add("m1", urls(0, "http://race.example/0", "http://race.example/1")...)
	f.applyPolicy(set.Load())
	if tasks := f.dispatch(at(0), 10); len(tasks) != 0 {
		t.Fatalf("dispatched %v while blocked", tasks)
	}
	if s := f.stats(); s.Parked != 2 {
		t.Fatalf("after block: %+v", s)
	}
	set.Store(rules(t, 2))
	if a := f.applyPolicy(set.Load()); a.Resumed != 2 {
		t.Fatalf("resumed %d, want 2", a.Resumed)
	}
	tasks := f.dispatch(at(time.Second), 10)
	if len(tasks) != 1 || tasks[0].URL != "http://race.example/0" {
		t.Fatalf("dispatched %v after the unblock", tasks)
	}
	// The fetcher still holds the block: no request.
	po := outcome(tasks[0], crawlmsg.OutcomeParked, 0)
	po.Requested, po.PolicyVersion = false, 1
	res := f.complete(at(2*time.Second), po)
	if res[0].Result != frontier.ResultRequeued {
		t.Fatalf("parked outcome of an unblocked URL: result %s, want %s", res[0].Result, frontier.ResultRequeued)
	}
	if l := f.parkList("race.example"); len(l) != 0 {
		t.Fatalf("park list %v after the unblock", urlsOf(l))
	}
	var got []string
	for step := 3; step < 20 && len(got) < 2; step++ {
		for _, tk := range f.dispatch(at(time.Duration(step)*time.Minute), 10) {
			if want := map[string]int{"http://race.example/0": 1}[tk.URL]; tk.Attempt != want {
				t.Errorf("%s dispatched with attempt %d, want %d", tk.URL, tk.Attempt, want)
			}
			got = append(got, tk.URL)
			f.complete(at(time.Duration(step)*time.Minute+time.Second), ok200(tk))
		}
	}
	if want := []string{"http://race.example/0", "http://race.example/1"}; !slices.Equal(got, want) {
		t.Fatalf("fetched %v, want %v", got, want)
	}
	if s := f.stats(); s.Parked != 0 || s.Queued != 0 || s.Fetched != 2 {
		t.Fatalf("at the end: %+v", s)
	}
	// A fetcher's parked outcome for a URL the rules in force do block is parked.
	set.Store(rules(t, 3, hostRule("race.example", policy.Rule{Block: pbool(true)})))
	f.add("m2", urls(1, "http://race.example/2")...)
	tasks = f.dispatch(at(30*time.Minute), 10)
	if len(tasks) != 1 {
		t.Fatalf("dispatched %v before the table holds the block", tasks)
	}
	f.applyPolicy(set.Load())
	po = outcome(tasks[0], crawlmsg.OutcomeParked, 0)
	po.Requested = false
	if res := f.complete(at(31*time.Minute), po); res[0].Result != frontier.ResultParked {
		t.Fatalf("parked outcome of a blocked URL: result %s", res[0].Result)
	}
	if l := urlsOf(f.parkList("race.example")); !slices.Equal(l, []string{"http://race.example/2"}) {
		t.Fatalf("park list %v", l)
	}
}

// A pass with the table unchanged (the follow-up after a change, the periodic one)
// resumes the park list of a host no rule blocks, which a fetcher on older rules filled,
// and leaves the lists of a blocked host and of a host a URL-prefix block covers.
func TestPolicyPassResumesUnblockedParkLists(t *testing.T) {
	t.Parallel()
	rdb := startRedis(t)
	f := newTF(t, rdb, testOptions(0))
	f.add("m1", urls(0, "http://free.example/0", "http://host.example/0", "http://pfx.example/private/0")...)
	tasks := f.dispatch(at(0), 10)
	if len(tasks) != 3 {
		t.Fatalf("dispatched %v", tasks)
	}
	set := rules(t, 1, hostRule("host.example", policy.Rule{Block: pbool(true)}),
		policy.Rule{Scope: policy.Scope{Kind: policy.KindPrefix, Value: "http://(example,pfx,)/private/"}, Block: pbool(true)})
	f.applyPolicy(set)
	// The scheduler's frontier here has no rules of its own (UsePolicy), so every parked
	// outcome parks, as a fetcher answered.
	for _, tk := range tasks {
		po := outcome(tk, crawlmsg.OutcomeParked, 0)
		po.Requested = false
		if res := f.complete(at(time.Second), po); res[0].Result != frontier.ResultParked {
			t.Fatalf("%s: %s", tk.URL, res[0].Result)
		}
	}
	if a := f.applyPolicy(set); !a.Empty() || a.Resumed != 1 {
		t.Fatalf("pass with the table unchanged: %+v, want free.example's URL resumed", a)
	}
	for h, n := range map[string]int{"free.example": 0, "host.example": 1, "pfx.example": 1} {
		if l := f.parkList(h); len(l) != n {
			t.Errorf("%s park list %v, want %d entries", h, urlsOf(l), n)
		}
	}
	got := f.dispatch(at(time.Minute), 10)
	if len(got) != 1 || got[0].URL != "http://free.example/0" {
		t.Fatalf("dispatched %v, want free.example's URL", got)
	}
}

// An active host's limits are stored in its state (politeness.PolicyModule): a change of
// the rules must reach it at its next step, whether the change sets a rule for it, changes
// it, or removes every rule, and also when the change comes while its task is out, so that
// the outcome is the first step to meet it.
func TestPolicyChangeReachesActiveHost(t *testing.T) {
	t.Parallel()
	rdb := startRedis(t)
	o := testOptions(0)
	o.DelayFactor = 0
	f := newTF(t, rdb, o)
	other := hostRule("other.example", policy.Rule{MinDelay: pdur(time.Hour)})
	f.syncPolicy(rules(t, 1, other))
	// One URL more than the steps, so that the host stays in the heap after the last.
	var us []crawlmsg.Discovered
	for i := range 6 {
		us = append(us, urls(0, fmt.Sprintf("http://a.example/%d", i))...)
	}
	f.add("m1", us...)
	steps := []struct {
		name     string
		set      *policy.Set
		whileOut bool          // the change comes between the dispatch and the outcome
		want     time.Duration // the gap after the next outcome
	}{
		{"no rule for the host", nil, false, o.MinDelay},
		{"a rule set for it", rules(t, 2, other, hostRule("a.example", policy.Rule{MinDelay: pdur(time.Minute)})), false, time.Minute},
		{"its rule changed", rules(t, 3, other, domainRule("a.example", policy.Rule{MinDelay: pdur(2 * time.Minute)})), false, 2 * time.Minute},
		{"its rule changed while its task is out", rules(t, 4, other, hostRule("a.example", policy.Rule{MinDelay: pdur(3 * time.Minute)})), true, 3 * time.Minute},
		{"every rule removed", rules(t, 5), false, o.MinDelay},
	}
	now := at(0)
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			if st.set != nil && !st.whileOut {
				f.syncPolicy(st.set)
			}
			tasks := f.dispatch(now, 10)
			if len(tasks) != 1 {
				t.Fatalf("dispatched %d, want 1", len(tasks))
			}
			if st.whileOut {
				f.syncPolicy(st.set)
			}
			now = now.Add(time.Second)
			f.complete(now, ok200(tasks[0]))
			f.wantHeap("a.example", now.Add(st.want))
			now = now.Add(st.want)
		})
	}
}

// A host activated anew (its queue emptied in between) takes the rules in force then: the
// limits stored in its state are rewritten when it is added again under other rules.
func TestPolicyChangeReachesIdleHost(t *testing.T) {
	t.Parallel()
	rdb := startRedis(t)
	o := testOptions(0)
	o.DelayFactor = 0
	f := newTF(t, rdb, o)
	other := hostRule("other.example", policy.Rule{MinDelay: pdur(time.Hour)})
	minute := rules(t, 2, other, hostRule("a.example", policy.Rule{MinDelay: pdur(time.Minute)}))
	steps := []struct {
		name string
		set  *policy.Set
		want time.Duration // the gap after the outcome
	}{
		{name: "no rule for the host", set: rules(t, 1, other), want: o.MinDelay},
		{name: "a rule set for it", set: minute, want: time.Minute},
		{name: "activated again under the same generation", want: time.Minute},
		{name: "its rule changed", set: rules(t, 4, other, domainRule("a.example", policy.Rule{MinDelay: pdur(2 * time.Minute)})), want: 2 * time.Minute},
		{name: "every rule removed", set: rules(t, 5), want: o.MinDelay},
	}
	now := at(0)
	for i, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			if st.set != nil {
				f.syncPolicy(st.set)
			}
			f.add(fmt.Sprintf("m%d", i), urls(0, fmt.Sprintf("http://a.example/%d", i))...)
			tasks := f.dispatch(now, 10)
			if len(tasks) != 1 {
				t.Fatalf("dispatched %d, want 1", len(tasks))
			}
			now = now.Add(time.Second)
			f.complete(now, ok200(tasks[0]))
			if _, ok := f.heapScore("a.example"); ok {
				t.Fatal("a.example still in the heap with an empty queue")
			}
			want := now.Add(st.want)
			if got := f.hostField("a.example", frontierkeys.HostNext); got != strconv.FormatInt(want.UnixMilli(), 10) {
				t.Fatalf("next fetch time %s, want t0+%s", got, want.Sub(t0))
			}
			f.check()
			now = want
		})
	}
}

// A host whose connections are lowered while it has tasks out in several lease slots gets
// no further task until fewer are out than it now may have, even when no rule is left at
// all (the count of tasks out beyond a host's first slot, stats slots_out, says its slots
// must be read), and cannot be claimed while any is out. Up to 64 connections may be
// allowed, so tasks may be out on any of the first 64 slots: with 32, the ones out on
// slots 8 to 31 count as much as the first eight.
func TestPolicyConnectionsLoweredWithTasksOut(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name     string
		from, to int // connections before and after the change (1: no rule left)
		after    *policy.Set
		reverse  bool // the later slots' tasks end first
	}{
		{"lowered to one", 3, 1, rules(t, 2, hostRule("multi.example", policy.Rule{Connections: pint(1), MinDelay: pdur(0)})), false},
		{"every rule removed", 3, 1, rules(t, 2), false},
		{"lowered to one, later slots ending first", 3, 1, rules(t, 2, hostRule("multi.example", policy.Rule{Connections: pint(1), MinDelay: pdur(0)})), true},
		{"every rule removed, later slots ending first", 3, 1, rules(t, 2), true},
		{"32 lowered to four", 32, 4, rules(t, 2, hostRule("multi.example", policy.Rule{Connections: pint(4), MinDelay: pdur(0)})), false},
		{"32 lowered to one", 32, 1, rules(t, 2, hostRule("multi.example", policy.Rule{Connections: pint(1), MinDelay: pdur(0)})), false},
		{"32, every rule removed", 32, 1, rules(t, 2), false},
		{"32 lowered to four, later slots ending first", 32, 4, rules(t, 2, hostRule("multi.example", policy.Rule{Connections: pint(4), MinDelay: pdur(0)})), true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rdb := startRedis(t)
			ctx := testwait.Context(t)
			o := testOptions(0)
			o.MinDelay, o.DelayFactor = 0, 0
			f := newTF(t, rdb, o)
			claims := politeness.NewClaimer(rdb, o.KeyPrefix, 1, o.Rules, nil)
			f.syncPolicy(rules(t, 1, hostRule("multi.example", policy.Rule{Connections: pint(tt.from), MinDelay: pdur(0)})))
			var us []crawlmsg.Discovered
			for i := range tt.from + 3 {
				us = append(us, urls(0, fmt.Sprintf("http://multi.example/%d", i))...)
			}
			f.add("m1", us...)
			// One task per dispatch: the host is due again at once (no gap), after it.
			var out []crawlmsg.FetchTask
			for i := 0; i < 2*tt.from && len(out) < tt.from; i++ {
				out = append(out, f.dispatch(at(time.Duration(i)*time.Millisecond), 10)...)
			}
			if len(out) != tt.from {
				t.Fatalf("%d tasks out with %d connections, want %d", len(out), tt.from, tt.from)
			}
			f.syncPolicy(tt.after)
			if tt.reverse {
				slices.Reverse(out)
			}
			now := at(time.Second)
			for len(out) >= tt.to {
				f.complete(now, ok200(out[0]))
				out = out[1:]
				if len(out) > 0 {
					if cl, err := claims.Claim(ctx, "multi.example", time.Second); err != nil || cl.OK {
						t.Fatalf("claim with %d tasks out (lease %s …): %+v, %v; want busy", len(out), out[0].Lease, cl, err)
					}
				}
				got := f.dispatch(now, 10)
				if len(out) >= tt.to && len(got) != 0 {
					t.Fatalf("a task dispatched with %d still out on %d connections: %s (lease %s)", len(out), tt.to, got[0].URL, got[0].Lease)
				}
				if len(out) < tt.to && len(got) != 1 {
					t.Fatalf("%d tasks once %d were out on %d connections, want 1", len(got), len(out), tt.to)
				}
				now = now.Add(time.Second)
			}
		})
	}
}
