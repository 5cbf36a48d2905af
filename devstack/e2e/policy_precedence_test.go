package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/trawl/trawl/devstack/stack"
	"github.com/trawl/trawl/devstack/synthweb"
	"github.com/trawl/trawl/shared/policy"
)

// The precedence of rules, from one table and the web's own log: a domain rule, a host rule
// under it, a URL prefix on that host and a longer prefix inside that one each set the
// header X-Rule; the domain rule alone sets the User-Agent, and a prefix on the domain's
// other host blocks. Each request carries the X-Rule of the most specific rule that matches
// its URL, and the domain's User-Agent wherever no more specific rule sets one (precedence
// is field by field); the blocked prefix is never requested; a host outside the domain gets
// neither.
func TestPolicyPrecedence(t *testing.T) {
	t.Parallel()
	env := crawlEnv{MinDelay: 100 * time.Millisecond, DelayFactor: 0, MaxDepth: 5, MaxRetries: 2}
	wcfg := synthweb.DefaultConfig()
	wcfg.Special = false
	wcfg.Hosts, wcfg.VirtualHosts, wcfg.PagesPerHost = 3, 2, 16
	wcfg.BaseIP = "127.0.30.1"
	resolve, err := wcfg.Resolve()
	if err != nil {
		t.Fatal(err)
	}
	const agent = "DomainBot/2.0 (+https://synth.test/bot)"
	var web *synthweb.Web
	// The rules, least specific first: scope, X-Rule, and whether it blocks.
	rules := []struct {
		scope func(*synthweb.Web) string
		xrule string
		block bool
	}{
		{func(*synthweb.Web) string { return "domain:synth.test" }, "domain", false},
		{func(*synthweb.Web) string { return "host:vhost1.synth.test" }, "host", false},
		{func(w *synthweb.Web) string { return w.Origin("vhost1.synth.test") + "/p/" }, "prefix /p/", false},
		{func(w *synthweb.Web) string { return w.Origin("vhost1.synth.test") + "/p/1" }, "prefix /p/1", false},
		{func(w *synthweb.Web) string { return w.Origin("vhost2.synth.test") + "/files/" }, "", true},
	}
	pc := startPolicyCrawl(t, wcfg, env, stack.Options{Env: map[string]string{"TRAWL_RESOLVE": strings.Join(resolve, ",")}},
		func(w *synthweb.Web) []policy.Change {
			web = w
			var cs []policy.Change
			for _, r := range rules {
				sc, err := policy.ParseScope(r.scope(w))
				if err != nil {
					t.Fatal(err)
				}
				rule := policy.Rule{Scope: sc}
				if r.xrule != "" {
					rule.Headers = map[string]string{"X-Rule": r.xrule}
				}
				if r.xrule == "domain" {
					rule.UserAgent = ptr(agent)
				}
				if r.block {
					rule.Block = ptr(true)
				}
				cs = append(cs, policy.Change{Rule: rule})
			}
			return cs
		})
	pc.wait(t)
	reqs := pc.web.Requests()
	other := web.Hosts()[2].Name

	// The table: which requests a row covers, and what they must carry.
	table := []struct {
		name        string
		match       func(q synthweb.Request) bool
		xrule, ua   string // "" = absent (ua: not the domain's)
		never       bool   // no request may match
		wantMatches bool
	}{
		{"domain rule only (other host of the domain)", func(q synthweb.Request) bool {
			return q.Host == "vhost2.synth.test" && !strings.HasPrefix(q.Path, "/files/")
		}, "domain", agent, false, true},
		{"host over domain (not under a prefix)", func(q synthweb.Request) bool {
			return q.Host == "vhost1.synth.test" && !strings.HasPrefix(q.Path, "/p/")
		}, "host", agent, false, true},
		{"prefix over host", func(q synthweb.Request) bool {
			return q.Host == "vhost1.synth.test" && strings.HasPrefix(q.Path, "/p/") && !strings.HasPrefix(q.Path, "/p/1")
		}, "prefix /p/", agent, false, true},
		{"longer prefix over shorter", func(q synthweb.Request) bool {
			return q.Host == "vhost1.synth.test" && strings.HasPrefix(q.Path, "/p/1")
		}, "prefix /p/1", agent, false, true},
		{"blocked prefix", func(q synthweb.Request) bool {
			return q.Host == "vhost2.synth.test" && strings.HasPrefix(q.Path, "/files/")
		}, "", "", true, false},
		{"outside every rule", func(q synthweb.Request) bool { return q.Host == other }, "", "", false, true},
	}
	for _, row := range table {
		t.Run(row.name, func(t *testing.T) {
			var probs problems
			n := 0
			for _, q := range reqs {
				if q.Path == "/robots.txt" || !row.match(q) {
					continue
				}
				n++
				if row.never {
					probs.add("requested", "%s", reqString(q))
					continue
				}
				if got := q.Header.Get("X-Rule"); got != row.xrule {
					probs.add(fmt.Sprintf("X-Rule not %q", row.xrule), "%s carried %q", reqString(q), got)
				}
				if (q.Agent == agent) != (row.ua == agent) {
					probs.add("the domain's User-Agent where it should not be, or not where it should", "%s carried %q", reqString(q), q.Agent)
				}
			}
			probs.report(t)
			if row.wantMatches && n == 0 {
				t.Errorf("no request of the crawl falls in this row")
			}
		})
	}
}
