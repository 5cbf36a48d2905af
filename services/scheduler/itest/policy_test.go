package itest

import (
	"testing"
	"time"

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
	c := hostRule("c.example", policy.Rule{UserAgent: new(string)})
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
