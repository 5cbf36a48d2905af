package e2e

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/trawl/trawl/devstack/stack"
	"github.com/trawl/trawl/devstack/synthweb"
)

// serverWeb is many host names on one loopback address (name-based virtual hosts, which
// the fetchers resolve through TRAWL_RESOLVE) beside hosts with addresses of their own.
func serverWeb() synthweb.Config {
	c := synthweb.DefaultConfig()
	c.Hosts, c.VirtualHosts, c.PagesPerHost, c.Special = 9, 6, 6, false
	c.BaseIP = "127.0.7.1"
	c.Seed = 11
	return c
}

// TestPolitenessPerServer crawls serverWeb under TRAWL_POLITENESS=ip with three fetchers.
// From the web's own request log, per server address: never two requests in flight, and
// never a gap below the rule (min delay, k × the previous response time), whichever hosts
// the requests were for; every page fetched once; and the shared address kept busy, so
// the crawl runs at close to one request per gap on it.
func TestPolitenessPerServer(t *testing.T) {
	t.Parallel()
	env := crawlEnv{MinDelay: 150 * time.Millisecond, DelayFactor: 2, MaxDepth: 5, MaxRetries: 2}
	wcfg := serverWeb()
	resolve, err := wcfg.Resolve()
	if err != nil {
		t.Fatal(err)
	}
	r := crawl(t, wcfg, env, stack.Options{
		Env: map[string]string{
			"TRAWL_POLITENESS": "ip",
			"TRAWL_RESOLVE":    strings.Join(resolve, ","),
		},
		Replicas: map[string]int{"fetcher": 3},
	}, nil)

	for _, p := range r.web.Expected(env.MaxDepth).Check(r.reqs, r.web.Origin, env.MaxRetries) {
		t.Errorf("request log: %s", p)
	}
	for _, v := range synthweb.Overlaps(r.reqs) {
		t.Errorf("politeness: two requests in flight to a host: %s", v)
	}
	for _, v := range synthweb.OverlapsByAddr(r.reqs) {
		t.Errorf("politeness per server: two requests in flight to an address: %s", v)
	}
	gap := func(prev, _ synthweb.Request) time.Duration {
		return max(env.MinDelay, time.Duration(env.DelayFactor*float64(prev.End.Sub(prev.Start))))
	}
	for _, v := range synthweb.GapsByAddr(r.reqs, gap) {
		t.Errorf("politeness per server: requests too close: %s", v)
	}

	// The shared address sets the pace: its requests, one gap apart at best.
	shared := r.web.Hosts()[0].Addr
	var on []synthweb.Request
	for _, q := range r.reqs {
		if q.Addr == shared {
			on = append(on, q)
		}
	}
	hosts := map[string]bool{}
	for _, q := range on {
		hosts[q.Host] = true
	}
	if len(hosts) != wcfg.VirtualHosts {
		t.Fatalf("%d hosts requested at %s, want the %d virtual hosts", len(hosts), shared, wcfg.VirtualHosts)
	}
	slices.SortFunc(on, func(a, b synthweb.Request) int { return a.Start.Compare(b.Start) })
	span := on[len(on)-1].End.Sub(on[0].Start)
	ideal := time.Duration(len(on)-1) * env.MinDelay
	t.Logf("%d requests at %s over %s (%.2f/s; one per gap would be %s, %.2f/s); whole crawl %d requests in %s",
		len(on), shared, span.Round(time.Millisecond), float64(len(on))/span.Seconds(), ideal,
		1/env.MinDelay.Seconds(), len(r.reqs), r.took.Round(time.Millisecond))
	if limit := ideal*3/2 + time.Second; span > limit {
		t.Errorf("the shared address took %s for %d requests, want at most %s (one per %s gap, with slack)", span, len(on), limit, env.MinDelay)
	}
}
