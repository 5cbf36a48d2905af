package polite

import (
	"net/netip"
	"time"

	"github.com/trawl/trawl/shared/policy"
	"github.com/trawl/trawl/shared/politeness"
)

// Fields are the live site policies' fields a process making requests reads: block, the
// scope a URL is held to, what its requests carry, and the politeness limits its claims
// apply: on a host (politeness.Claimer resolves a host's limits from these rules when its
// stored ones are not current) and, under per-server politeness, on a server address
// (ServerLimits). A host's budget is the frontier's. A process's policy.Watcher holds only
// the rules that set one of these (policy.OnlyFields), whole, so each of them resolves as
// in the whole set: a rule that sets none of them never decides one.
func Fields() []policy.Field {
	return append(policy.ScopeFields(), policy.FBlock,
		policy.FUserAgent, policy.FHeaders, policy.FHeaderSecrets, policy.FCookies, policy.FCredentials,
		policy.FMinDelay, policy.FDelayFactor, policy.FCrawlDelay, policy.FConnections)
}

// exactCrawlDelay is the cap that honours any Crawl-delay a robots.txt can state.
const exactCrawlDelay = 365 * 24 * time.Hour

// ServerLimits are the site policies' limits (set) for a request to host at addr, which
// its claim on the address applies (politeness.Servers.ClaimWith): field by field, the
// host's own rules (host, domain) over the address-block rules that contain addr, over
// the process-wide settings (an unset field). Every process claiming a server address
// claims it under these, so a rule spaces an address alike whoever requests it.
func ServerLimits(set *policy.Set, host string, addr netip.Addr) politeness.ServerLimits {
	h, a := set.Host(host), set.Addr(addr)
	var lim politeness.ServerLimits
	for _, r := range []policy.Resolved{a, h} {
		if r.MinDelay != nil {
			d := time.Duration(*r.MinDelay)
			lim.MinDelay = &d
		}
		if r.DelayFactor != nil {
			f := *r.DelayFactor
			lim.DelayFactor = &f
		}
		if r.CrawlDelay != nil {
			d := r.CrawlDelay.Cap
			if r.CrawlDelay.Exact {
				d = exactCrawlDelay
			}
			lim.MaxCrawlDelay = &d
		}
		if r.Connections != nil {
			lim.Connections = *r.Connections
		}
	}
	return lim
}
