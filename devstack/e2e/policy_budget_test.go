package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/trawl/trawl/devstack/stack"
	"github.com/trawl/trawl/devstack/synthweb"
	"github.com/trawl/trawl/shared/policy"
)

// A host budget stops its host at its count, a domain budget the domain's hosts together at
// theirs, from the web's own log (robots.txt is not a page); a host no budget names is
// crawled whole. The web: two name-based hosts of one registrable domain (synth.test), and
// two hosts of their own addresses.
func TestPolicyBudgets(t *testing.T) {
	t.Parallel()
	const hostBudget, domainBudget = 5, 7
	env := crawlEnv{MinDelay: 100 * time.Millisecond, DelayFactor: 0, MaxDepth: 5, MaxRetries: 2}
	wcfg := synthweb.DefaultConfig()
	wcfg.Special = false
	wcfg.Hosts, wcfg.VirtualHosts, wcfg.PagesPerHost = 4, 2, 12
	wcfg.BaseIP = "127.0.25.1"
	resolve, err := wcfg.Resolve()
	if err != nil {
		t.Fatal(err)
	}
	var hosts []synthweb.HostInfo
	pc := startPolicyCrawl(t, wcfg, env, stack.Options{Env: map[string]string{"TRAWL_RESOLVE": strings.Join(resolve, ",")}},
		func(web *synthweb.Web) []policy.Change {
			hosts = web.Hosts()
			return []policy.Change{
				{Rule: policy.Rule{Scope: policy.Scope{Kind: policy.KindDomain, Value: "synth.test"}, DomainBudget: ptr[int64](domainBudget)}},
				hostRule(hosts[2].Name, policy.Rule{HostBudget: ptr[int64](hostBudget)}),
			}
		})
	p := pc.wait(t)
	reqs := pc.web.Requests()
	vhosts, budgeted, free := hosts[:2], hosts[2], hosts[3]

	domain := 0
	for _, h := range vhosts {
		n := len(pagesOf(reqs, h.Name))
		t.Logf("%s: %d pages", h.Name, n)
		domain += n
	}
	if domain != domainBudget {
		t.Errorf("domain synth.test (domain budget %d): %d pages requested from %s and %s", domainBudget, domain, vhosts[0].Name, vhosts[1].Name)
	}
	if n := len(pagesOf(reqs, budgeted.Name)); n != hostBudget {
		t.Errorf("host %s (host budget %d): %d pages requested", budgeted.Name, hostBudget, n)
	}
	// The host no rule names: every page it has, once.
	exp := pc.web.Expected(env.MaxDepth)
	counts := synthweb.CountByURL(pagesOf(reqs, free.Name), pc.web.Origin)
	want := 0
	for u := range exp.Fetch {
		if !strings.HasPrefix(u, free.Origin+"/") {
			continue
		}
		want++
		if c := counts[u]; c != 1 {
			t.Errorf("host %s (no budget): %s requested %d times, want once", free.Name, u, c)
		}
	}
	if want == 0 {
		t.Fatalf("the web expects no page of %s", free.Origin)
	}
	for _, v := range synthweb.Overlaps(reqs) {
		t.Errorf("politeness: overlapping requests: %s", v)
	}
	if p.OverBudget == 0 {
		t.Errorf("the frontier counted no URL over budget: %+v", p)
	}
	if p.Accepted != p.Terminal() {
		t.Errorf("accounting: %d URLs accepted, %d terminal (%+v)", p.Accepted, p.Terminal(), p)
	}
}
