package robots

import (
	"errors"
	"fmt"
	"net/url"
	"time"
)

// Reason says which part of RFC 9309 decided a Decision.
type Reason string

const (
	// ReasonRule: a rule of the agent's group matched; Decision.Rule names it.
	ReasonRule Reason = "rule"
	// ReasonNoRule: the file was parsed and no rule matched (or no group applies).
	ReasonNoRule Reason = "no matching rule"
	// ReasonRobotsTxt: /robots.txt itself is always allowed.
	ReasonRobotsTxt Reason = "robots.txt is always allowed"
	// ReasonUnavailable: robots.txt answered 4xx (not 429) or redirected too often, so
	// everything is allowed (RFC 9309 §2.3.1.3).
	ReasonUnavailable Reason = "robots.txt unavailable: allow all"
	// ReasonUnreachable: robots.txt answered 5xx or 429, or did not answer, so everything
	// is disallowed until it can be fetched (RFC 9309 §2.3.1.4).
	ReasonUnreachable Reason = "robots.txt unreachable: disallow all"
)

// Decision is the verdict on one URL, with what a person needs to understand it.
type Decision struct {
	Allowed    bool
	Class      Class         // how the robots.txt fetch went
	Reason     Reason        // which part of the protocol decided
	Rule       string        // the deciding rule as "allow <pattern>" / "disallow <pattern>" (normalised), when Reason is ReasonRule
	CrawlDelay time.Duration // the agent's Crawl-delay, 0 if none
}

// Errors of Decide.
var (
	ErrNoEntry       = errors.New("robots: no entry")
	ErrAgentMismatch = errors.New("robots: entry was reduced for another agent")
	ErrURL           = errors.New("robots: URL has no usable path")
)

// Decide is the fetcher's robots.txt decision for rawURL (an absolute http(s) URL, or a
// path with an optional query) under e, for agent (a product token or a whole User-Agent
// value; "" means the agent the entry was built for). A parsed entry keeps only the group
// of the agent it was built for, so asking it about another agent is ErrAgentMismatch;
// unavailable and unreachable entries answer for every agent.
func Decide(e *Entry, agent, rawURL string) (Decision, error) {
	if e == nil || e.Rules == nil {
		return Decision{}, ErrNoEntry
	}
	if agent == "" {
		agent = e.Agent
	}
	if e.Class == Parsed && AgentKey(agent) != e.Agent {
		return Decision{}, fmt.Errorf("%w: asked for %q, entry is for %q", ErrAgentMismatch, AgentKey(agent), e.Agent)
	}
	u, err := url.Parse(rawURL)
	if err != nil || u.Opaque != "" || (u.Path != "" && u.Path[0] != '/') || (u.Scheme != "" && u.Scheme != "http" && u.Scheme != "https") {
		return Decision{}, fmt.Errorf("%w: %q", ErrURL, rawURL)
	}
	d := e.Rules.decide(e.Agent, u.RequestURI())
	d.Class = e.Class
	return d, nil
}

// Decide is Decide(e, "", "https://host"+pathAndQuery) without parsing a URL: the
// decision for the entry's own agent.
func (e *Entry) Decide(pathAndQuery string) Decision {
	d := e.Rules.decide(e.Agent, pathAndQuery)
	d.Class = e.Class
	return d
}

// decide is Allowed with the reason.
func (r *Rules) decide(agent, pathAndQuery string) Decision {
	d := Decision{CrawlDelay: r.CrawlDelay(agent)}
	switch {
	case isRobotsTxt(pathAndQuery):
		d.Allowed, d.Reason = true, ReasonRobotsTxt
		return d
	case r.mode == modeAllowAll:
		d.Allowed, d.Reason = true, ReasonUnavailable
		return d
	case r.mode == modeDisallowAll:
		d.Allowed, d.Reason = false, ReasonUnreachable
		return d
	}
	ru := r.match(agent, pathAndQuery)
	if ru == nil {
		d.Allowed, d.Reason = true, ReasonNoRule
		return d
	}
	d.Allowed, d.Reason = ru.allow, ReasonRule
	if ru.allow {
		d.Rule = "allow " + ru.pattern
	} else {
		d.Rule = "disallow " + ru.pattern
	}
	return d
}
