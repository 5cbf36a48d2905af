package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/trawl/trawl/devstack/stack"
	"github.com/trawl/trawl/devstack/synthweb"
	"github.com/trawl/trawl/shared/frontierkeys"
	"github.com/trawl/trawl/shared/policy"
	"github.com/trawl/trawl/shared/testwait"
)

// blockWithin is how soon after a block is set no new request may reach its host.
const blockWithin = 2 * time.Second

// Three fetchers and two scheduler shards crawl; mid-crawl, with a backlog on one host,
// `trawlctl policy set host:… block=true` blocks it. From the web's own log: no request to it starts later than 2 s after the
// apply returned, while the other hosts are crawled to the end. Its queued URLs are parked
// with the reason "blocked" — as many as it has pages not yet requested, so none is lost —
// and trawlctl explain says so of one of them. Removing the rule (trawlctl policy rm) resumes them: the crawl
// completes with every page of the web requested exactly once.
func TestPolicyBlockAndUnblock(t *testing.T) {
	t.Parallel()
	env := crawlEnv{MinDelay: 150 * time.Millisecond, DelayFactor: 0, MaxDepth: 5, MaxRetries: 2}
	wcfg := synthweb.DefaultConfig()
	wcfg.Special = false
	wcfg.Hosts, wcfg.PagesPerHost = 6, 30
	wcfg.BaseIP = "127.0.27.1"
	const shards = 2
	pc := startPolicyCrawl(t, wcfg, env, stack.Options{
		Env:      map[string]string{"TRAWL_SHARDS": fmt.Sprint(shards)},
		Replicas: map[string]int{"scheduler": shards, "fetcher": 3},
		ProcEnv: map[string]map[string]string{
			"scheduler-0": {"TRAWL_SCHEDULER_SHARDS": "0"},
			"scheduler-1": {"TRAWL_SCHEDULER_SHARDS": "1"},
		},
	}, nil)
	blocked := pc.web.Hosts()[0]
	exp := pc.web.Expected(env.MaxDepth)
	var mine []string // the blocked host's pages
	for u := range exp.Fetch {
		if strings.HasPrefix(u, blocked.Origin+"/") {
			mine = append(mine, u)
		}
	}
	slices.Sort(mine)

	waitRequests(t, pc.web, blocked.Name, 6)
	// As an operator would: trawlctl, whose return is when the 2 s start.
	rule := hostRule(blocked.Name, policy.Rule{Block: ptr(true)})
	scope := rule.Rule.Scope.String()
	trawlctl(t, pc, "policy", "set", scope, "block=true", "-by", "e2e", "-note", "owner asked us to stop")
	setAt := time.Now()

	// Everything else is crawled; the blocked host's URLs wait, parked.
	ctx := testwait.Context(t)
	testwait.EventuallyState(t, time.Minute, "every other host crawled", func() (bool, string) {
		p, err := pc.st.Progress(ctx)
		if err != nil {
			return false, err.Error()
		}
		return p.Quiet(), p.String()
	})
	parked, reasons := parkedEntries(t, pc.rdb, shards, blocked.Name)
	reqs := pc.web.Requests()
	before := pagesOf(reqs, blocked.Name)
	var probs problems
	for _, q := range of(reqs, blocked.Name) {
		if q.Start.After(setAt.Add(blockWithin)) {
			probs.add(fmt.Sprintf("a request to %s later than %s after the block", blocked.Name, blockWithin), "%s, %s after", reqString(q), q.Start.Sub(setAt).Round(time.Millisecond))
		}
	}
	probs.report(t)
	if last := of(reqs, blocked.Name); len(last) > 0 {
		t.Logf("last request to %s started %s after the block was set; %s blocked since (%d of its %d pages requested)",
			blocked.Name, last[len(last)-1].Start.Sub(setAt).Round(time.Millisecond), time.Since(setAt).Round(time.Millisecond), len(before), len(mine))
	}
	if time.Since(setAt) < blockWithin+time.Second {
		t.Fatalf("the rest of the crawl ended %s after the block: too soon to show it holds", time.Since(setAt))
	}
	// Nothing lost: every URL accepted is terminal or parked (the pages that only the
	// blocked host's unrequested pages link to are not known yet; the crawl's end shows
	// they are found once it resumes).
	quiet, err := pc.st.Progress(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if quiet.Accepted != quiet.Terminal()+parked {
		t.Errorf("accounting while blocked: %d URLs accepted, %d terminal + %d parked (%s)", quiet.Accepted, quiet.Terminal(), parked, quiet)
	}
	requested := synthweb.CountByURL(before, pc.web.Origin)
	var waiting []string
	for _, u := range mine {
		if requested[u] == 0 {
			waiting = append(waiting, u)
		}
	}
	if parked == 0 || int(parked) > len(waiting) {
		t.Errorf("%d entries of %s parked, want 1 … %d (its pages not requested)", parked, blocked.Name, len(waiting))
	}
	for _, r := range reasons {
		if want := frontierkeys.ParkBlocked + " " + scope; r != want {
			t.Errorf("parked with reason and rule %q, want %q", r, want)
		}
	}
	if len(waiting) == 0 {
		t.Fatalf("every page of %s was requested before the block: no backlog to park", blocked.Name)
	}
	// A parked URL, as trawlctl explain tells of it.
	entries, err := pc.rdb.LRange(ctx, parkList(pc, shards, blocked.Name), 0, 0).Result()
	if err != nil || len(entries) == 0 {
		t.Fatalf("the park list of %s: %v %v", blocked.Name, entries, err)
	}
	parkedURL := entries[0][strings.LastIndexByte(entries[0], ' ')+1:]
	out := trawlctl(t, pc, "explain", parkedURL)
	if !strings.Contains(out, "parked") || !strings.Contains(out, "blocked") || !strings.Contains(out, rule.Rule.Scope.String()) {
		t.Errorf("trawlctl explain %s does not say it is parked, blocked by %s:\n%s", parkedURL, rule.Rule.Scope, out)
	}

	// Unblock: the parked URLs resume.
	trawlctl(t, pc, "policy", "rm", scope)
	if log := trawlctl(t, pc, "policy", "log"); strings.Count(log, scope) < 2 {
		t.Errorf("trawlctl policy log does not show the block and its removal of %s:\n%s", scope, log)
	}
	testwait.EventuallyState(t, time.Minute, "the parked URLs back in the queue", func() (bool, string) {
		n, _ := parkedEntries(t, pc.rdb, shards, blocked.Name)
		after := len(pagesOf(pc.web.Requests(), blocked.Name))
		left, _ := pc.rdb.LRange(ctx, parkList(pc, shards, blocked.Name), 0, 4).Result()
		return n == 0 && after > len(before), fmt.Sprintf("%d parked %q, %d pages of %s requested", n, left, after, blocked.Name)
	})
	p := pc.wait(t)
	reqs = pc.web.Requests()
	for _, prob := range exp.Check(reqs, pc.web.Origin, env.MaxRetries) {
		t.Errorf("request log: %s", prob)
	}
	for _, v := range synthweb.Overlaps(reqs) {
		t.Errorf("politeness: overlapping requests: %s", v)
	}
	if p.Accepted != p.Terminal() {
		t.Errorf("accounting: %d URLs accepted, %d terminal (%+v)", p.Accepted, p.Terminal(), p)
	}
}

// parkList is the park list of host on whichever shard holds it.
func parkList(pc *policyCrawl, shards int, host string) string {
	for s := range shards {
		k := frontierkeys.ForShard(policyPrefix, s, shards).Park(host)
		if n, _ := pc.rdb.LLen(context.Background(), k).Result(); n > 0 {
			return k
		}
	}
	return frontierkeys.ForShard(policyPrefix, 0, shards).Park(host)
}

// trawlctl runs the operator CLI against the crawl's NATS and Redis and returns its output.
func trawlctl(t *testing.T, pc *policyCrawl, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(testwait.Context(t), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(binDir, "trawlctl"), args...)
	cmd.Env = append(os.Environ(), "TRAWL_NATS_URL="+pc.st.NATSURL(), "TRAWL_REDIS_URL="+pc.redis.URL())
	for k, v := range pc.env.vars() {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	for _, k := range []string{"TRAWL_SHARDS", "TRAWL_SECRETS_DIR"} {
		if v, ok := pc.opts.Env[k]; ok {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Errorf("trawlctl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}
