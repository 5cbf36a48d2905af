package itest

import (
	"fmt"
	"testing"
	"time"

	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/frontierkeys"
	"github.com/trawl/trawl/shared/policy"
	"github.com/trawl/trawl/shared/politeness"
	"github.com/trawl/trawl/shared/testwait"
)

// wantLimits fails unless host's stored limits are its entry under set, of set's
// generation, which is the shard's.
func (f *tf) wantLimits(host string, set *policy.Set) {
	f.t.Helper()
	res := politeness.Resolve(set)
	if got := f.hostField(host, frontierkeys.HostLim); got != res.Value(host) {
		f.t.Fatalf("%s's stored limits %q, want %q", host, got, res.Value(host))
	}
	gen := f.rdb.HGet(testwait.Context(f.t), f.Keyspace().Key("policy"), frontierkeys.PolicyGenField).Val()
	if gen != res.Gen() {
		f.t.Fatalf("shard's generation %q, want %q", gen, res.Gen())
	}
}

// A host active when a rule for it is set gets the rule's limits at the change; a host
// whose URLs waited in the front queues meanwhile, with limits stored under the old rules
// when they were added, is activated after the change and gets the rule's limits before
// its first dispatch (the dispatch hands it to Go, which resolves it, and leases it in the
// same call). Both are then spaced by the rule.
func TestPolicyHostsActivatedBeforeAndAfterChange(t *testing.T) {
	t.Parallel()
	rdb := startRedis(t)
	o := testOptions(0)
	o.DelayFactor = 0
	// One back queue: the second host waits in the front queue while the first is active.
	o.BackQueues = 1
	f := newTF(t, rdb, o)
	other := hostRule("other.example", policy.Rule{MinDelay: pdur(time.Hour)})
	s1 := rules(t, 1, other)
	f.syncPolicy(s1)
	f.add("m1", urls(0, "http://a.rule.example/1", "http://b.rule.example/1")...)
	tasks := f.dispatch(at(0), 10)
	if len(tasks) != 1 || tasks[0].Host != "a.rule.example" {
		t.Fatalf("dispatched %v, want a.rule.example's URL", tasks)
	}
	f.wantLimits("a.rule.example", s1)
	f.wantLimits("b.rule.example", s1)

	s2 := rules(t, 2, other, domainRule("rule.example", policy.Rule{MinDelay: pdur(time.Minute)}))
	if a := f.applyPolicy(s2); !a.Changed || a.Hosts != 1 {
		t.Fatalf("applied %+v, want a change written to the one active host", a)
	}
	f.wantLimits("a.rule.example", s2)
	now := at(time.Second)
	f.complete(now, ok200(tasks[0]))
	want := now.Add(time.Minute)
	if got := f.hostField("a.rule.example", frontierkeys.HostNext); got != fmt.Sprint(want.UnixMilli()) {
		t.Fatalf("a.rule.example's next fetch t0+%s, want t0+%s", got, want.Sub(t0))
	}
	// a.rule.example's queue is empty, so b.rule.example takes the back queue, stale.
	tasks = f.dispatch(now, 10)
	if len(tasks) != 1 || tasks[0].Host != "b.rule.example" {
		t.Fatalf("dispatched %v, want b.rule.example's URL in the same call", tasks)
	}
	f.wantLimits("b.rule.example", s2)
	now = now.Add(time.Second)
	f.complete(now, ok200(tasks[0]))
	if got, want := f.hostField("b.rule.example", frontierkeys.HostNext), now.Add(time.Minute); got != fmt.Sprint(want.UnixMilli()) {
		t.Fatalf("b.rule.example's next fetch %s, want t0+%s", got, want.Sub(t0))
	}
}

// A change reaches every active host it covers within the half second in which live rules
// are to be obeyed: with every back queue taken (TRAWL_BACK_QUEUES' default, 1024 hosts),
// the step that brings the shard's limits in line with a change (SyncPolicy, which
// ApplyPolicy runs first) stores the new limits of every one of them well within that.
func TestPolicyChangeReachesActiveHostsQuickly(t *testing.T) {
	rdb := startRedis(t)
	o := testOptions(0)
	f := newTF(t, rdb, o)
	ctx := testwait.Context(t)
	other := hostRule("other.example", policy.Rule{MinDelay: pdur(time.Hour)})
	f.syncPolicy(rules(t, 1, other))
	var us []crawlmsg.Discovered
	for i := range o.BackQueues {
		us = append(us, urls(0, fmt.Sprintf("http://h%d.rule.example/", i))...)
	}
	f.add("m1", us...)
	f.dispatch(at(0), 1)
	if n := rdb.HLen(ctx, f.Keyspace().Key("hosts")).Val() - 1; n != int64(o.BackQueues) {
		t.Fatalf("%d active hosts, want %d", n, o.BackQueues)
	}
	s2 := rules(t, 2, other, domainRule("rule.example", policy.Rule{MinDelay: pdur(time.Minute), Connections: pint(2)}))
	start := time.Now()
	a, err := f.SyncPolicy(ctx, s2)
	took := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	if a.Hosts != o.BackQueues {
		t.Fatalf("limits written for %d active hosts, want %d", a.Hosts, o.BackQueues)
	}
	for i := range o.BackQueues {
		f.wantLimits(fmt.Sprintf("h%d.rule.example", i), s2)
	}
	if took > 500*time.Millisecond {
		t.Fatalf("the change took %s to reach %d active hosts, want under 500ms", took, o.BackQueues)
	}
	t.Logf("%d active hosts' limits written in %s", o.BackQueues, took)
}

// Limits resolved under rules that are no longer the shard's are never stored: not by an
// add batch of a process whose rules are behind (the host's limits stay as they were),
// nor by its resolution of a stale host, which leaves the host waiting, undispatched,
// until a process with the shard's rules resolves it.
func TestPolicyStaleGenerationStoresNothing(t *testing.T) {
	t.Parallel()
	rdb := startRedis(t)
	o := testOptions(0)
	o.DelayFactor = 0
	behind := newTF(t, rdb, o)
	current := newTF(t, rdb, o)
	old := rules(t, 1, domainRule("rule.example", policy.Rule{MinDelay: pdur(time.Minute)}))
	now := rules(t, 2, domainRule("rule.example", policy.Rule{MinDelay: pdur(time.Hour)}))
	behind.syncPolicy(old)
	current.syncPolicy(now)

	behind.add("m1", urls(0, "http://a.rule.example/1")...)
	if got := behind.hostField("a.rule.example", frontierkeys.HostLim); got != "" {
		t.Fatalf("an add under older rules stored %q", got)
	}
	// The host is admitted stale; the process behind cannot resolve it.
	if tasks := behind.dispatch(at(0), 10); len(tasks) != 0 {
		t.Fatalf("dispatched %v under limits of older rules", tasks)
	}
	n, err := behind.ResolvePending(testwait.Context(t))
	if err != nil || n != 0 {
		t.Fatalf("resolved %d (%v) under older rules, want none", n, err)
	}
	if got := behind.hostField("a.rule.example", frontierkeys.HostLim); got != "" {
		t.Fatalf("a resolution under older rules stored %q", got)
	}
	tasks := current.dispatch(at(0), 10)
	if len(tasks) != 1 {
		t.Fatalf("the process with the shard's rules dispatched %v, want the host's URL", tasks)
	}
	current.wantLimits("a.rule.example", now)
	current.complete(at(time.Second), ok200(tasks[0]))
	if got, want := current.hostField("a.rule.example", frontierkeys.HostNext), at(time.Second+time.Hour); got != fmt.Sprint(want.UnixMilli()) {
		t.Fatalf("next fetch %s, want t0+%s", got, want.Sub(t0))
	}
}
