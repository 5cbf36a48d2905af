package inspect

import (
	"strconv"
	"strings"
	"time"

	"github.com/trawl/trawl/shared/policy"
	"github.com/trawl/trawl/shared/politeness"
	"github.com/trawl/trawl/shared/recrawl"
)

// Limits are the process-wide settings a site policy's rule can override: what decides a
// limit no rule sets.
type Limits struct {
	Politeness      politeness.Rules
	MaxPagesPerHost int64 // 0 = unlimited
	MaxDepth        int
	Include         string // TRAWL_INCLUDE as written ("" = all)
	Exclude         string // TRAWL_EXCLUDE as written ("" = none)
	Recrawl         recrawl.Settings
	UserAgent       string
}

// PolicyReport is the URL's live site policy: each limit, its value and what decided it,
// and whether its host is blocked and its URLs parked.
type PolicyReport struct {
	// Version and Rules are the store's version and its number of rules; Note says why
	// they could not be read.
	Version int64   `json:"version"`
	Rules   int     `json:"rules"`
	Note    string  `json:"note,omitempty"`
	Limits  []Limit `json:"limits"`
	// Blocked names the rule that blocks the URL ("" when not blocked).
	Blocked string `json:"blocked,omitempty"`
	// Admitted is the rules' scope verdict for the URL (Resolved.Admit) at its queued
	// depth, or at depth 0 when the depth is unknown; Why names the refusing rule.
	Admitted bool   `json:"admitted"`
	Why      string `json:"why,omitempty"`
	// Parked is the host's park list in its shard (Shard.Park, Shard.Parked); nil when
	// none of its URLs are parked.
	Parked *ParkReport `json:"parked,omitempty"`
}

// ParkReport is a host's parked URLs.
type ParkReport struct {
	Reason  string `json:"reason"`
	Entries int64  `json:"entries"` // as the shard's parked hash counts them
	Queued  int64  `json:"queued"`  // the park list's length now
	Key     string `json:"key"`
}

// Limit is one limit that applies to the URL.
type Limit struct {
	Field policy.Field `json:"field"`
	Value string       `json:"value"`
	// Rule is the scope of the rule that decided it, and Origin where that rule came
	// from (its file line, or the change that set it); both empty when the process-wide
	// setting decides, which Setting names.
	Rule    string `json:"rule,omitempty"`
	Origin  string `json:"origin,omitempty"`
	Setting string `json:"setting,omitempty"`
}

// DecidedBy is what decided the limit, as explain prints it.
func (l Limit) DecidedBy() string {
	if l.Rule != "" {
		return "rule " + l.Rule + " (" + l.Origin + ")"
	}
	return l.Setting
}

// OriginText says where a rule came from: "rules.yaml:12, change v3 by ops at …", or
// "change v3 by ops at …" for one set by trawlctl policy set.
func OriginText(o policy.Origin) string {
	ch := "change v" + strconv.FormatInt(o.Version, 10)
	if o.By != "" {
		ch += " by " + o.By
	}
	if !o.At.IsZero() {
		ch += " at " + o.At.UTC().Format(time.RFC3339)
	}
	if o.Source != "" {
		return o.Source + ", " + ch
	}
	return ch
}

// policy fills the report's policy section from the rules and the process-wide limits.
// depth is the URL's queued depth, nil when unknown.
func (r *Report) policy(set *policy.Set, d Limits, depth *int) {
	p := &r.Policy
	p.Version, p.Rules = set.Version(), len(set.Rules())
	res := set.URL(r.URL)
	add := func(f policy.Field, set bool, value, setting string) {
		l := Limit{Field: f, Value: value, Setting: setting}
		if from, ok := res.From[f]; ok && set {
			l.Rule, l.Origin, l.Setting = from.Scope.String(), OriginText(from.Origin), ""
		}
		p.Limits = append(p.Limits, l)
	}
	dur := func(v *policy.Duration, def time.Duration) string {
		if v != nil {
			return time.Duration(*v).String()
		}
		return def.String()
	}
	pw := d.Politeness
	add(policy.FMinDelay, res.MinDelay != nil, dur(res.MinDelay, pw.MinDelay), "process-wide TRAWL_MIN_DELAY")
	factor := pw.DelayFactor
	if res.DelayFactor != nil {
		factor = *res.DelayFactor
	}
	add(policy.FDelayFactor, res.DelayFactor != nil, strconv.FormatFloat(factor, 'g', -1, 64)+" × the last response time", "process-wide TRAWL_DELAY_FACTOR")
	cd := "capped at " + pw.MaxCrawlDelay.String()
	if c := res.CrawlDelay; c != nil {
		cd = "capped at " + c.Cap.String()
		if c.Exact {
			cd = "honoured exactly, however long"
		}
	}
	add(policy.FCrawlDelay, res.CrawlDelay != nil, "robots.txt Crawl-delay "+cd, "process-wide TRAWL_MAX_CRAWL_DELAY")
	conns := "1"
	if res.Connections != nil {
		conns = strconv.Itoa(*res.Connections)
	}
	add(policy.FConnections, res.Connections != nil, conns+" in flight per host", "default (one request in flight per host)")
	budget := "unlimited"
	if d.MaxPagesPerHost > 0 {
		budget = strconv.FormatInt(d.MaxPagesPerHost, 10) + " pages"
	}
	if res.HostBudget != nil {
		budget = strconv.FormatInt(*res.HostBudget, 10) + " pages"
	}
	add(policy.FHostBudget, res.HostBudget != nil, budget+" per host", "process-wide TRAWL_MAX_PAGES_PER_HOST")
	if res.DomainBudget != nil {
		add(policy.FDomainBudget, true, strconv.FormatInt(*res.DomainBudget, 10)+" pages for all of "+res.Domain, "")
	} else {
		add(policy.FDomainBudget, false, "none", "default (no budget per domain)")
	}
	depthV := d.MaxDepth
	if res.MaxDepth != nil {
		depthV = *res.MaxDepth
	}
	add(policy.FMaxDepth, res.MaxDepth != nil, strconv.Itoa(depthV), "process-wide TRAWL_MAX_DEPTH")
	patterns := func(ps []string, def, none string) string {
		if len(ps) > 0 {
			return strings.Join(ps, " | ")
		}
		if def != "" {
			return def
		}
		return none
	}
	add(policy.FInclude, len(res.Include) > 0, patterns(res.Include, d.Include, "all URLs"), "process-wide TRAWL_INCLUDE")
	add(policy.FExclude, len(res.Exclude) > 0, patterns(res.Exclude, d.Exclude, "none"), "process-wide TRAWL_EXCLUDE")
	rs := d.Recrawl.For(res)
	add(policy.FRecrawlMin, res.RecrawlMin != nil, rs.Min.String(), "process-wide TRAWL_RECRAWL_MIN")
	add(policy.FRecrawlMax, res.RecrawlMax != nil, rs.Max.String(), "process-wide TRAWL_RECRAWL_MAX")
	ua := d.UserAgent
	if res.UserAgent != nil {
		ua = *res.UserAgent
	}
	add(policy.FUserAgent, res.UserAgent != nil, ua, "process-wide TRAWL_USER_AGENT")
	// Header names and plain values; secrets by name only, never their values.
	var hs []string
	for _, k := range sortedKeys(res.Headers) {
		hs = append(hs, k+": "+res.Headers[k])
	}
	add(policy.FHeaders, len(res.Headers) > 0, orNone(hs), "default (none)")
	hs = nil
	for _, k := range sortedKeys(res.HeaderSecrets) {
		hs = append(hs, k+": secret "+strconv.Quote(res.HeaderSecrets[k]))
	}
	add(policy.FHeaderSecrets, len(res.HeaderSecrets) > 0, orNone(hs), "default (none)")
	secret := func(name *string) string {
		if name == nil {
			return "none"
		}
		return "secret " + strconv.Quote(*name)
	}
	add(policy.FCookies, res.Cookies != nil, secret(res.Cookies), "default (none)")
	add(policy.FCredentials, res.Credentials != nil, secret(res.Credentials), "default (none)")
	render := "as TRAWL_RENDER says"
	if res.Render != nil {
		render = *res.Render
	}
	add(policy.FRender, res.Render != nil, render, "process-wide TRAWL_RENDER")
	block := "no"
	if res.Blocked() {
		block = "yes: no request is made, queued URLs are parked"
	}
	add(policy.FBlock, res.Block != nil, block, "default (not blocked)")
	if res.Blocked() {
		from := res.From[policy.FBlock]
		p.Blocked = from.Scope.String() + " (" + OriginText(from.Origin) + ")"
	}
	at := 0
	if depth != nil {
		at = *depth
	}
	p.Admitted, p.Why = res.Admit(r.URL, at)
}

func orNone(xs []string) string {
	if len(xs) == 0 {
		return "none"
	}
	return strings.Join(xs, "; ")
}

// parked reads a shard's parked hash entry: "<reason> <entries>".
func parseParked(v string) (reason string, n int64, ok bool) {
	reason, count, found := strings.Cut(v, " ")
	if !found {
		return "", 0, false
	}
	n, err := strconv.ParseInt(strings.TrimSpace(count), 10, 64)
	return reason, n, err == nil
}
