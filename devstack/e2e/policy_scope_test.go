package e2e

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/trawl/trawl/devstack/stack"
	"github.com/trawl/trawl/devstack/synthweb"
	"github.com/trawl/trawl/shared/frontierkeys"
	"github.com/trawl/trawl/shared/policy"
	"github.com/trawl/trawl/shared/testwait"
)

// Mid-crawl, with URLs of a path prefix already queued for a host, a rule narrows the
// host's scope to exclude that prefix. The queued URLs of the prefix leave the frontier,
// counted under the rule; from the web's own log none of the prefix is requested later than
// 2 s after the change returned; the rest of the host and the other hosts are crawled whole.
func TestPolicyScopeNarrowedMidCrawl(t *testing.T) {
	t.Parallel()
	env := crawlEnv{MinDelay: 150 * time.Millisecond, DelayFactor: 0, MaxDepth: 5, MaxRetries: 2}
	wcfg := synthweb.DefaultConfig()
	wcfg.Special = false
	wcfg.Hosts, wcfg.PagesPerHost = 3, 40
	wcfg.BaseIP = "127.0.29.1"
	pc := startPolicyCrawl(t, wcfg, env, stack.Options{}, nil)
	host := pc.web.Hosts()[0]
	// The deepest pages of the host (level 3 of 40 pages is /p/16 … /p/39).
	const exclude = `/p/(1[6-9]|[23][0-9])$`
	excluded := regexp.MustCompile(exclude)

	ctx := testwait.Context(t)
	bq := frontierkeys.ForShard(policyPrefix, 0, 1).BackQueue(host.Name)
	testwait.EventuallyState(t, time.Minute, fmt.Sprintf("URLs matching %s queued for %s", exclude, host.Name), func() (bool, string) {
		entries, err := pc.rdb.LRange(ctx, bq, 0, -1).Result()
		if err != nil {
			return false, err.Error()
		}
		n := 0
		for _, e := range entries {
			if excluded.MatchString(e) {
				n++
			}
		}
		return n >= 3, fmt.Sprintf("%d of %d queued entries match", n, len(entries))
	})
	rule := hostRule(host.Name, policy.Rule{Exclude: []string{exclude}, Note: "owner: not the archive"})
	setAt := pc.apply(t, rule)
	p := pc.wait(t)
	reqs := pc.web.Requests()

	exp := pc.web.Expected(env.MaxDepth)
	counts := synthweb.CountByURL(reqs, pc.web.Origin)
	var skipped int
	var probs problems
	for _, q := range pagesOf(reqs, host.Name) {
		if excluded.MatchString(q.Path) && q.Start.After(setAt.Add(2*time.Second)) {
			probs.add("an excluded page requested later than 2 s after the change", "%s, %s after", reqString(q), q.Start.Sub(setAt).Round(time.Millisecond))
		}
	}
	probs.report(t)
	for u := range exp.Fetch {
		c := counts[u]
		switch {
		case strings.HasPrefix(u, host.Origin+"/") && excluded.MatchString(u):
			if c == 0 {
				skipped++
			}
			if c > 1 {
				t.Errorf("%s requested %d times", u, c)
			}
		case c > 1:
			t.Errorf("%s (in scope) requested %d times, want once", u, c)
		case c == 0 && !(strings.HasPrefix(u, host.Origin+"/files/") && excluded.MatchString(strings.TrimSuffix(strings.Replace(u, "/files/", "/p/", 1), ".txt"))):
			// Only a text file whose one linking page is excluded may go unrequested.
			t.Errorf("%s (in scope) never requested", u)
		}
	}
	n := policyStat(t, pc.rdb, 1, rule.Rule.Scope, frontierkeys.PolicyStatExcluded)
	t.Logf("%d pages of the excluded prefix never requested; %d queued URLs excluded by the recheck (%s)", skipped, n, rule.Rule.Scope)
	if skipped == 0 {
		t.Errorf("every page of the excluded prefix was requested: the change reached no queued URL")
	}
	if n == 0 || n > int64(skipped) {
		t.Errorf("the rule counts %d queued URLs excluded, want 1 … %d (the prefix's pages not requested)", n, skipped)
	}
	if p.Accepted != p.Terminal() {
		t.Errorf("accounting: %d URLs accepted, %d terminal (%+v)", p.Accepted, p.Terminal(), p)
	}
}
