package polite

import (
	"net/netip"
	"time"

	"github.com/trawl/trawl/shared/policy"
	"github.com/trawl/trawl/shared/politeness"
)

// Fields are the live site policies' fields a process making requests reads: block, the
// scope a URL is held to, what its requests carry, and under per-server politeness the
// limits its claims on a server address apply (ServerLimits). A host's own politeness
// limits and budget are the frontier's and the claim scripts', read from Redis. A process's
// policy.Watcher holds only the rules that set one of these (policy.OnlyFields), so a crawl
// whose rules are mostly per-host politeness leaves it a small set.
func Fields(per politeness.Per) []policy.Field {
	fs := append(policy.ScopeFields(), policy.FBlock,
		policy.FUserAgent, policy.FHeaders, policy.FHeaderSecrets, policy.FCookies, policy.FCredentials)
	if per == politeness.PerIP {
		fs = append(fs, policy.FMinDelay, policy.FDelayFactor, policy.FCrawlDelay, policy.FConnections)
	}
	return fs
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
