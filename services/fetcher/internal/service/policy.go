package service

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/obs"
	"github.com/trawl/trawl/shared/policy"
	"github.com/trawl/trawl/shared/robotscache"
)

// policySource is where the fetcher reads the live site policies: a policy.Watcher in
// production. Current is read right before every request, so a change is obeyed by the
// next request made after the watcher loads it, whatever was dispatched or queued before.
type policySource interface {
	Current() *policy.Set
}

// What a parked task was about to request (the label of trawl_fetcher_policy_parked_total).
const (
	parkedPage   = "page"
	parkedRobots = "robots"
)

type policyMetrics struct {
	parked     *prometheus.CounterVec // what: page, robots
	hopBlock   prometheus.Counter
	outOfScope prometheus.Counter
	secretErr  prometheus.Counter
	// applied counts requests by setting (user_agent, headers, cookies, credentials),
	// its children resolved once: a request of a ruled host adds to one or more
	// (polite.New's applied).
	applied map[policy.Field]prometheus.Counter
	// The rules in force, read at scrape time (set by New once the watcher exists).
	version, stale func() float64
}

func newPolicyMetrics(om *obs.Metrics) *policyMetrics {
	m := &policyMetrics{
		parked: om.CounterVec("policy_parked_total",
			"Tasks answered parked without a request because a site policy blocks their URL, checked right before the request: page (the page, requisite or sitemap) or robots (its robots.txt, or a hop of it).", "what"),
		hopBlock: om.Counter("policy_robots_hop_blocked_total",
			"robots.txt redirect chains stopped because a site policy blocks the next hop's URL (the origin's robots.txt counts unreachable)."),
		outOfScope: om.Counter("policy_out_of_scope_total",
			"Page tasks ended out of scope without a request because a site policy narrowed the scope (max_depth, include, exclude) since their URL was queued."),
		secretErr: om.Counter("policy_secret_errors_total",
			"Tasks failed without a request because a secret their site policy names cannot be read (TRAWL_SECRETS_DIR)."),
	}
	applied := om.CounterVec("policy_requests_total",
		"Requests sent with a site policy's request setting: user_agent, headers (plain or secret), cookies, credentials.", "setting")
	om.GaugeFunc("policy_version", "The version of the site policies in force in this fetcher (the store's version when they were loaded).",
		func() float64 { return probe(m.version) })
	om.GaugeFunc("policy_stale_seconds", "How long since the site policies' store last answered a poll (0: the last poll did); the rules loaded last stay in force meanwhile.",
		func() float64 { return probe(m.stale) })
	for _, w := range []string{parkedPage, parkedRobots} {
		m.parked.WithLabelValues(w)
	}
	m.applied = map[policy.Field]prometheus.Counter{}
	for _, f := range []policy.Field{policy.FUserAgent, policy.FHeaders, policy.FCookies, policy.FCredentials} {
		m.applied[f] = applied.WithLabelValues(string(f))
	}
	return m
}

// policyOf is rawURL's policy under the rules in force now.
func (s *Service) policyOf(rawURL string) policy.Resolved {
	return s.policies.Current().URL(rawURL)
}

// errPolicyBlocked: a site policy blocks the URL a request would go to.
var errPolicyBlocked = errors.New("a site policy blocks it")

// parked answers a task whose URL a site policy of rules blocks: no request for it, and
// the scheduler parks the URL (reason blocked) until the block is lifted. Requested stays
// as it was: a task that fetched robots.txt before finding its URL blocked still reports
// that request, whose gap the host is owed. The outcome names the rules' version, so a
// scheduler holding newer ones checks it again.
func (s *Service) parked(out *crawlmsg.Outcome, what string, rules *policy.Set) *crawlmsg.Outcome {
	s.m.policy.parked.WithLabelValues(what).Inc()
	out.Kind = crawlmsg.OutcomeParked
	out.PolicyVersion = rules.Version()
	out.Error = "blocked by a site policy"
	return out
}

// outOfScope answers a page task whose URL a site policy's scope no longer admits at its
// depth (a max_depth lowered, an include it misses, an exclude it matches, set since the
// URL was queued): no request, and the URL ends out of scope. The frontier rechecks its
// back queues when a scope narrows, but not URLs still in its front queues or already
// dispatched; this check is what keeps those from being fetched. Requisites and sitemaps
// follow the parser's own scope rules and are not held to it. pol is the URL's policy
// under rules, whose version the outcome names with the depth, so a scheduler holding
// newer rules checks it again.
func (s *Service) outOfScope(task *crawlmsg.FetchTask, rules *policy.Set, pol policy.Resolved, out *crawlmsg.Outcome) *crawlmsg.Outcome {
	if task.Kind != crawlmsg.KindPage && task.Kind != "" {
		return nil
	}
	ok, why := pol.Admit(task.URL, task.Depth)
	if ok {
		return nil
	}
	s.m.policy.outOfScope.Inc()
	out.Kind = crawlmsg.OutcomeOutOfScope
	out.PolicyVersion, out.Depth = rules.Version(), task.Depth
	out.Error = "out of scope by a site policy: " + why
	return out
}

// secretFailed ends a task whose request needs a secret that cannot be read: an error
// outcome, permanent, with no request made. Trying the task again cannot cure it (the
// same file is read again; a fixed file is read by the next task anyway), and a request
// without the credential would crawl what the site shows a stranger.
func (s *Service) secretFailed(out *crawlmsg.Outcome, err error) *crawlmsg.Outcome {
	s.m.policy.secretErr.Inc()
	s.log.Error("task failed: a secret of its site policy cannot be read", "url", out.URL, "err", err)
	out.Kind, out.Permanent = crawlmsg.OutcomeError, true
	out.Error = err.Error()
	return out
}

// robotsView is the robots.txt cache as one agent sees it: the entries reduced for its
// product token. A policy's User-Agent names its own token, and robots.txt must be read
// for the agent that makes the requests.
type robotsView struct {
	store *robotscache.Store
	agent string // the product token entries are reduced for
}

// robotsFor is the robots.txt view of the agent r's requests are made as
// (polite.Requests.RobotsAgent).
func (s *Service) robotsFor(r policy.Resolved) robotsView {
	agent := s.requests.RobotsAgent(r)
	return robotsView{store: s.robots.For(agent), agent: agent}
}
