package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/trawl/trawl/devstack/stack"
	"github.com/trawl/trawl/devstack/synthweb"
	"github.com/trawl/trawl/shared/policy"
	"github.com/trawl/trawl/shared/testwait"
)

// Rules outlive a restart of every service and of Redis: mid-crawl every service is
// stopped and redis-server killed (its AOF fsynced on every write, as the stack runs it),
// then all start again. From the web's own log: the host a rule blocks is never requested,
// before or after; every page of the host a rule gives a header carries it, the ones after
// the restart included. The store still holds both rules at their version, with the audit
// entry that set them.
func TestPolicyRulesSurviveRestart(t *testing.T) {
	t.Parallel()
	env := crawlEnv{MinDelay: 200 * time.Millisecond, DelayFactor: 0, MaxDepth: 5, MaxRetries: 2}
	wcfg := synthweb.DefaultConfig()
	wcfg.Special = false
	wcfg.Hosts, wcfg.PagesPerHost = 3, 20
	wcfg.BaseIP = "127.0.28.1"
	var marked, blocked string
	pc := startPolicyCrawl(t, wcfg, env, stack.Options{}, func(web *synthweb.Web) []policy.Change {
		marked, blocked = web.Hosts()[0].Name, web.Hosts()[1].Name
		return []policy.Change{
			hostRule(marked, policy.Rule{Headers: map[string]string{"X-Policy-Kept": "kept"}}),
			hostRule(blocked, policy.Rule{Block: ptr(true)}),
		}
	})
	ctx := testwait.Context(t)
	set, err := pc.store.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}

	waitRequests(t, pc.web, marked, 4)
	for _, p := range pc.st.Procs() {
		if err := p.Stop(15 * time.Second); err != nil {
			t.Fatal(err)
		}
	}
	if err := pc.redis.Kill(); err != nil {
		t.Fatal(err)
	}
	restart := time.Now()
	if err := pc.redis.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	for _, p := range pc.st.Procs() {
		if err := p.Start(); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range pc.st.Procs() {
		if err := pc.st.WaitReady(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	progress := pc.wait(t)
	reqs := pc.web.Requests()

	after := 0
	var probs problems
	for _, q := range pagesOf(reqs, marked) {
		if q.Start.After(restart) {
			after++
		}
		if got := q.Header.Get("X-Policy-Kept"); got != "kept" {
			probs.add(fmt.Sprintf("a page of %s (header rule) without X-Policy-Kept: kept, %s the restart", marked, map[bool]string{true: "after", false: "before"}[q.Start.After(restart)]),
				"%s carried %q", reqString(q), got)
		}
	}
	if after == 0 {
		t.Errorf("no page of %s requested after the restart: nothing shows the rule held", marked)
	}
	for _, q := range of(reqs, blocked) {
		probs.add(fmt.Sprintf("a request to %s, which a rule blocks, %s the restart", blocked, map[bool]string{true: "after", false: "before"}[q.Start.After(restart)]), "%s", reqString(q))
	}
	probs.report(t)
	// The other hosts are whole.
	exp := pc.web.Expected(env.MaxDepth)
	counts := synthweb.CountByURL(reqs, pc.web.Origin)
	for u := range exp.Fetch {
		if strings.HasPrefix(u, pc.web.Hosts()[2].Origin+"/") && counts[u] != 1 {
			t.Errorf("%s requested %d times, want once", u, counts[u])
		}
	}
	parked, _ := parkedEntries(t, pc.rdb, 1, blocked)
	if progress.Accepted != progress.Terminal()+parked {
		t.Errorf("accounting: %d URLs accepted, %d terminal + %d parked (%+v)", progress.Accepted, progress.Terminal(), parked, progress)
	}

	again, err := pc.store.Load(ctx)
	if err != nil {
		t.Fatalf("rules after the restart: %v", err)
	}
	if again.Version() != set.Version() || len(again.Rules()) != 2 {
		t.Errorf("after the restart the store is at version %d with %d rules, want version %d with 2", again.Version(), len(again.Rules()), set.Version())
	}
	audit, err := pc.store.Audit(ctx, 0)
	if err != nil {
		t.Fatalf("audit after the restart: %v", err)
	}
	if len(audit) != 2 {
		t.Errorf("audit after the restart: %d entries, want the 2 that set the rules: %s", len(audit), fmt.Sprint(audit))
	}
}
