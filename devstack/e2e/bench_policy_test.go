package e2e

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/trawl/trawl/devstack/synthweb"
	"github.com/trawl/trawl/shared/durability"
	"github.com/trawl/trawl/shared/policy"
)

// benchRuleCount is how many live site policies BenchmarkPolicyRules loads.
const benchRuleCount = 10_000

// benchMatching is how many of the web's hosts a rule of the benchmark names: the others
// are for hosts, domains, URL prefixes and address blocks the crawl never meets.
const benchMatching = 100

// BenchmarkPolicyRules measures what live site policies cost a crawl: the plain web
// crawled with no rule and with 10,000 rules loaded (benchMatching of them for hosts of the
// web, setting limits equal to the process-wide ones, a header and the depth; the rest for
// hosts, domains, URL prefixes and address blocks it never meets), in alternating rounds so
// that the machine's drift falls on both alike. Reported: CPU-ms per page per process and
// pages/s of each (the median round's), and how far the rules move them, in percent.
func BenchmarkPolicyRules(b *testing.B) {
	natsBin := buildNATS(b)
	if only := os.Getenv(envBenchOnly); only != "" && !strings.Contains("policy-rules", only) {
		b.Skipf("%s=%s", envBenchOnly, only)
	}
	rounds := benchRounds(b)
	base := benchScenario{name: "plain", hosts: 250, pages: 80, replicas: 1, fsync: durability.EverySecond}
	withRules := base
	withRules.name, withRules.rules = fmt.Sprintf("plain/rules=%d", benchRuleCount), benchRuleCount
	for range b.N {
		var none, rules []benchResult
		for range rounds {
			none = append(none, runPipelineBench(b, base, natsBin))
			rules = append(rules, runPipelineBench(b, withRules, natsBin))
		}
		n, r := medianRound(none), medianRound(rules)
		n.report(b, none)
		r.report(b, rules)
		cpu := 100 * (r.totalCPU() - n.totalCPU()) / n.totalCPU()
		rate := 100 * (r.trawl.pagesPerSec() - n.trawl.pagesPerSec()) / n.trawl.pagesPerSec()
		b.ReportMetric(cpu, "rules-cpu-%")
		b.ReportMetric(rate, "rules-pages/s-%")
		np, _ := n.perPage()
		rp, _ := r.perPage()
		var per []string
		for _, role := range benchRoles {
			per = append(per, fmt.Sprintf("%s %+.1f%%", role, 100*(rp[role]-np[role])/np[role]))
		}
		fmt.Printf("\n%d rules against none (median rounds): total CPU-ms/page %+.1f%% (%s), pages/s %+.1f%% (bound: under 3%%)\n",
			benchRuleCount, cpu, strings.Join(per, ", "), rate)
	}
}

// loadBenchRules applies n rules before the services start: benchMatching for hosts of the
// web, whose limits equal the process-wide ones of the benchmark so that only the rules'
// own cost shows, and the rest for hosts, domains, URL prefixes and address blocks the crawl
// never meets.
func loadBenchRules(ctx context.Context, rdb redis.UniversalClient, web *synthweb.Web, n int) error {
	hosts := web.Hosts()
	var cs []policy.Change
	for i := 0; len(cs) < n; i++ {
		var (
			r     policy.Rule
			scope string
		)
		switch {
		case i < benchMatching && i < len(hosts):
			scope = "host:" + hosts[i].Name
			r = policy.Rule{
				MinDelay:    ptr(policy.Duration(0)),
				Connections: ptr(1),
				MaxDepth:    ptr(benchMaxDepth),
				Headers:     map[string]string{"X-Bench": "rules"},
			}
		case i%4 == 0:
			scope, r = fmt.Sprintf("host:www%d.unmet.example", i), policy.Rule{MinDelay: ptr(policy.Duration(2 * time.Second))}
		case i%4 == 1:
			scope, r = fmt.Sprintf("domain:unmet%d.example", i), policy.Rule{Connections: ptr(2)}
		case i%4 == 2:
			scope, r = fmt.Sprintf("http://unmet%d.example/private/", i), policy.Rule{Block: ptr(true)}
		default:
			scope, r = fmt.Sprintf("cidr:10.%d.%d.0/24", i/256%256, i%256), policy.Rule{MinDelay: ptr(policy.Duration(time.Second))}
		}
		sc, err := policy.ParseScope(scope)
		if err != nil {
			return fmt.Errorf("bench rule %d: %w", i, err)
		}
		r.Scope = sc
		cs = append(cs, policy.Change{Rule: r, Source: "bench"})
	}
	st := policy.NewStore(rdb, policyPrefix)
	// Applied in slices, as an operator's files would be, so that no one script runs long.
	for c := range slices.Chunk(cs, 1000) {
		if _, _, err := st.Apply(ctx, c, "bench", 0); err != nil {
			return fmt.Errorf("load %d bench rules: %w", n, err)
		}
	}
	set, err := st.Load(ctx)
	if err != nil {
		return err
	}
	if len(set.Rules()) != n {
		return fmt.Errorf("load bench rules: the store holds %d rules, want %d", len(set.Rules()), n)
	}
	return nil
}
