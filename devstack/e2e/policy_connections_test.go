package e2e

import (
	"slices"
	"testing"
	"time"

	"github.com/trawl/trawl/devstack/stack"
	"github.com/trawl/trawl/devstack/synthweb"
	"github.com/trawl/trawl/shared/policy"
)

// A rule allows one host two connections. Its responses take longer than its gap, so with
// a backlog a crawler that uses both has two requests in flight at once. From the web's
// own log: never more than two in flight to it, two at some moment, each request starting
// at least half the host's gap after the previous one started (two starts share one
// connection's cycle, the response time and the gap after it), and its requests starting
// about twice as often as those of a host with one connection (the median time from one
// start to the next about half); every other host one request at a time, its gap after
// the previous response. The crawl is whole.
// startJitter is how much less than the gap two starts may be apart as the server sees them:
// the crawler keeps the gap between the moments it sends, and a request reaches the server
// a little later when it has to open a connection first (each connection of the two is
// opened when first used) — a millisecond or two on loopback. A gap measured from the
// previous response's end needs no such slack: the crawler has that response whole before
// it counts.
const startJitter = 10 * time.Millisecond

func TestPolicyConnections(t *testing.T) {
	t.Parallel()
	env := crawlEnv{MinDelay: 150 * time.Millisecond, DelayFactor: 0, MaxDepth: 5, MaxRetries: 2}
	wcfg := synthweb.DefaultConfig()
	wcfg.Special = false
	wcfg.Hosts, wcfg.PagesPerHost = 3, 20
	wcfg.Latency = 300 * time.Millisecond
	wcfg.Seed = 23
	var two string
	pc := startPolicyCrawl(t, wcfg, env, stack.Options{}, func(web *synthweb.Web) []policy.Change {
		two = web.Hosts()[0].Name
		return []policy.Change{hostRule(two, policy.Rule{Connections: ptr(2)})}
	})
	p := pc.wait(t)
	reqs := pc.web.Requests()

	for _, prob := range pc.web.Expected(env.MaxDepth).Check(reqs, pc.web.Origin, env.MaxRetries) {
		t.Errorf("request log: %s", prob)
	}
	if p.Accepted != p.Terminal() {
		t.Errorf("accounting: %d URLs accepted, %d terminal (%+v)", p.Accepted, p.Terminal(), p)
	}
	for _, h := range pc.web.Hosts() {
		hr := of(reqs, h.Name)
		n, at := maxInFlight(hr)
		if h.Name != two {
			if n > 1 {
				t.Errorf("host %s (no rule): %d requests in flight at %s, want one at a time", h.Name, n, at.Format("15:04:05.000"))
			}
			continue
		}
		switch {
		case n > 2:
			t.Errorf("host %s (connections 2): %d requests in flight at %s", h.Name, n, at.Format("15:04:05.000"))
		case n < 2:
			t.Errorf("host %s (connections 2) had a backlog of %d pages taking %s each, yet never two requests in flight", h.Name, len(hr), wcfg.Latency)
		}
		for i := 1; i < len(hr); i++ {
			if gap := hr[i].Start.Sub(hr[i-1].Start); gap < env.MinDelay/2-startJitter {
				t.Errorf("host %s (connections 2): %s started %s after %s started, want ≥ %s (less %s)", h.Name, reqString(hr[i]), gap, reqString(hr[i-1]), env.MinDelay/2, startJitter)
			}
		}
		t.Logf("host %s (connections 2): %d requests in %s, most in flight %d", h.Name, len(hr), hr[len(hr)-1].End.Sub(hr[0].Start).Round(time.Millisecond), n)
	}
	var oneGaps []time.Duration
	for _, h := range pc.web.Hosts() {
		if h.Name != two {
			oneGaps = append(oneGaps, startGaps(of(reqs, h.Name))...)
		}
	}
	twoMed, oneMed := median(startGaps(of(reqs, two))), median(oneGaps)
	t.Logf("median start to start: %s with two connections, %s with one", twoMed, oneMed)
	if r := float64(twoMed) / float64(oneMed); r < 0.4 || r > 0.65 {
		t.Errorf("median start to start %s with two connections, %s with one: %.2f of it, want about half", twoMed, oneMed, r)
	}
	others := reqs[:0:0]
	for _, q := range reqs {
		if q.Host != two {
			others = append(others, q)
		}
	}
	for _, v := range synthweb.Gaps(others, func(string) time.Duration { return env.MinDelay }) {
		t.Errorf("politeness (no rule): requests too close: %s", v)
	}
}

// startGaps are the times from each request's start to the next one's.
func startGaps(hr []synthweb.Request) []time.Duration {
	var out []time.Duration
	for i := 1; i < len(hr); i++ {
		out = append(out, hr[i].Start.Sub(hr[i-1].Start))
	}
	return out
}

func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}
