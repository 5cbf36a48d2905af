package frontierkeys

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// A host's live-policy limits live in its own state hash (Shard.Host), field HostLim:
// "<generation>\t<PolicyEntry.Encode>", the entry of the host's most specific host or
// domain rule resolved in Go over the domain rules above it (politeness.Resolve), empty
// when no rule matches the host. The scheduler writes it when the host becomes active
// (the add batch's limits, or a host admitted under an older generation resolved before
// it is dispatched) and, on every change of the rules, for every active host; the scripts
// read that one field and never look a rule up. The shard's policy hash (Shard.Policy)
// holds only the rules' generation (PolicyGenField): a value is in force while its
// generation is the shard's.

// PolicyGenField is the field of Shard.Policy holding the rules' generation: a digest of
// the resolved rules (equal rules, equal generation), absent while no host or domain
// rule is in force. Limits are stored under a generation only while it is the shard's.
const PolicyGenField = "#gen"

// HostLimValue is a host's HostLim value: its entry (PolicyEntry.Encode; "" when no rule
// matches the host) under generation gen.
func HostLimValue(gen, entry string) string { return gen + "\t" + entry }

// ParseHostLim splits a HostLim value into its generation and entry.
func ParseHostLim(v string) (gen, entry string, ok bool) { return strings.Cut(v, "\t") }

// PolicyStatField is the field of a rule's counter in Shard.PolicyStats:
// "<scope>\t<counter>" (PolicyStat*).
func PolicyStatField(scope, counter string) string { return scope + "\t" + counter }

// CrawlDelayRule is how a host's robots.txt Crawl-delay is honoured: exactly, however long,
// or capped at Cap.
type CrawlDelayRule struct {
	Exact bool
	Cap   time.Duration
}

// HostLimits are per-host limits as a policy table entry holds them. A nil field is unset:
// the process-wide setting decides it.
type HostLimits struct {
	MinDelay    *time.Duration
	DelayFactor *float64
	CrawlDelay  *CrawlDelayRule
	// Connections is the most tasks of the host out at once.
	Connections *int
	// HostBudget is the most pages fetched from the host (0: no limit).
	HostBudget *int64
	Block      *bool
}

// Positions of the fields in an encoded entry (1-based, as Lua indexes them), and the
// token of an unset field and of an exact Crawl-delay.
const (
	LimitMinDelay    = 1
	LimitDelayFactor = 2
	LimitCrawlDelay  = 3
	LimitConnections = 4
	LimitHostBudget  = 5
	LimitBlock       = 6
	limitFields      = 6

	LimitUnset = "-"
	LimitExact = "x"
)

// Encode is the entry "<min delay ms> <delay factor> <crawl delay: x or cap ms>
// <connections> <host budget> <block 0|1>", each "-" when unset.
func (l HostLimits) Encode() string {
	tok := make([]string, limitFields)
	for i := range tok {
		tok[i] = LimitUnset
	}
	set := func(pos int, v string) { tok[pos-1] = v }
	if l.MinDelay != nil {
		set(LimitMinDelay, strconv.FormatInt(max(l.MinDelay.Milliseconds(), 0), 10))
	}
	if l.DelayFactor != nil {
		set(LimitDelayFactor, strconv.FormatFloat(max(*l.DelayFactor, 0), 'g', -1, 64))
	}
	if l.CrawlDelay != nil {
		if l.CrawlDelay.Exact {
			set(LimitCrawlDelay, LimitExact)
		} else {
			set(LimitCrawlDelay, strconv.FormatInt(max(l.CrawlDelay.Cap.Milliseconds(), 0), 10))
		}
	}
	if l.Connections != nil {
		set(LimitConnections, strconv.Itoa(max(*l.Connections, 1)))
	}
	if l.HostBudget != nil {
		set(LimitHostBudget, strconv.FormatInt(max(*l.HostBudget, 0), 10))
	}
	if l.Block != nil {
		b := "0"
		if *l.Block {
			b = "1"
		}
		set(LimitBlock, b)
	}
	return strings.Join(tok, " ")
}

// ParseHostLimits decodes an entry. Missing trailing fields are unset, so an entry written
// before a field was added still reads.
func ParseHostLimits(s string) (HostLimits, error) {
	var l HostLimits
	tok := strings.Fields(s)
	if len(tok) > limitFields {
		return l, fmt.Errorf("frontier: policy entry %q: %d fields, want %d", s, len(tok), limitFields)
	}
	bad := func(name string) error { return fmt.Errorf("frontier: policy entry %q: bad %s", s, name) }
	for i, t := range tok {
		if t == LimitUnset {
			continue
		}
		switch i + 1 {
		case LimitMinDelay:
			ms, err := strconv.ParseInt(t, 10, 64)
			if err != nil {
				return l, bad("min delay")
			}
			d := time.Duration(ms) * time.Millisecond
			l.MinDelay = &d
		case LimitDelayFactor:
			k, err := strconv.ParseFloat(t, 64)
			if err != nil {
				return l, bad("delay factor")
			}
			l.DelayFactor = &k
		case LimitCrawlDelay:
			if t == LimitExact {
				l.CrawlDelay = &CrawlDelayRule{Exact: true}
				continue
			}
			ms, err := strconv.ParseInt(t, 10, 64)
			if err != nil {
				return l, bad("crawl delay")
			}
			l.CrawlDelay = &CrawlDelayRule{Cap: time.Duration(ms) * time.Millisecond}
		case LimitConnections:
			n, err := strconv.Atoi(t)
			if err != nil {
				return l, bad("connections")
			}
			l.Connections = &n
		case LimitHostBudget:
			n, err := strconv.ParseInt(t, 10, 64)
			if err != nil {
				return l, bad("host budget")
			}
			l.HostBudget = &n
		case LimitBlock:
			b := t == "1"
			l.Block = &b
		}
	}
	return l, nil
}

// Over merges l over base field by field: l's set fields win.
func (l HostLimits) Over(base HostLimits) HostLimits {
	if l.MinDelay == nil {
		l.MinDelay = base.MinDelay
	}
	if l.DelayFactor == nil {
		l.DelayFactor = base.DelayFactor
	}
	if l.CrawlDelay == nil {
		l.CrawlDelay = base.CrawlDelay
	}
	if l.Connections == nil {
		l.Connections = base.Connections
	}
	if l.HostBudget == nil {
		l.HostBudget = base.HostBudget
	}
	if l.Block == nil {
		l.Block = base.Block
	}
	return l
}

// PolicyEntry is a policy table entry: a host or domain rule's limits resolved over the
// domain rules above it, the scope of the rule that decided Block (none: ""), and the
// scopes of every rule merged into it ("host:…", "domain:…"), which the scripts count a
// host's requests under (Shard.PolicyStats), so a rule that sets no limit is counted too.
type PolicyEntry struct {
	Limits  HostLimits
	BlockBy string
	Rules   []string
}

// Encode is "<HostLimits.Encode> <block by, or -> <rule> <rule>…".
func (e PolicyEntry) Encode() string {
	by := e.BlockBy
	if by == "" {
		by = LimitUnset
	}
	return strings.Join(append([]string{e.Limits.Encode(), by}, e.Rules...), " ")
}

// ParsePolicyEntry decodes an entry (PolicyEntry.Encode).
func ParsePolicyEntry(s string) (PolicyEntry, error) {
	tok := strings.Fields(s)
	n := min(len(tok), limitFields)
	l, err := ParseHostLimits(strings.Join(tok[:n], " "))
	if err != nil {
		return PolicyEntry{}, err
	}
	e := PolicyEntry{Limits: l}
	if len(tok) > n {
		if tok[n] != LimitUnset {
			e.BlockBy = tok[n]
		}
		e.Rules = tok[n+1:]
	}
	return e, nil
}

// ParkBlocked is the reason of a park list whose host, or whose URLs, a live policy blocks.
const ParkBlocked = "blocked"

// ParkedHost is a host's entry in Shard.Parked: why its URLs are parked, how many, and
// the scope of the rule whose block parked them ("" when only fetchers' parked outcomes
// did, for a URL-prefix rule the scheduler does not hold).
type ParkedHost struct {
	Host    string
	Reason  string
	Entries int64
	Rule    string
}

// ParseParked decodes a Shard.Parked value "<reason> <entries>[ <rule scope>]".
func ParseParked(host, v string) (ParkedHost, bool) {
	r, rest, ok := strings.Cut(v, " ")
	n, rule, _ := strings.Cut(rest, " ")
	c, err := strconv.ParseInt(n, 10, 64)
	if !ok || err != nil {
		return ParkedHost{}, false
	}
	return ParkedHost{Host: host, Reason: r, Entries: c, Rule: rule}, true
}

// ParkedHost is a host's park list entry on its shard: ok is false when none of its URLs
// is parked.
func (r *Reader) ParkedHost(ctx context.Context, shard int, host string) (p ParkedHost, ok bool, err error) {
	v, err := r.rdb.HGet(ctx, ForShard(r.prefix, shard, r.shards).Parked(), host).Result()
	if errors.Is(err, redis.Nil) {
		return ParkedHost{}, false, nil
	}
	if err != nil {
		return ParkedHost{}, false, fmt.Errorf("frontier: shard %d: parked %s: %w", shard, host, err)
	}
	p, ok = ParseParked(host, v)
	return p, ok, nil
}

// DomainPages is the counter of pages charged to a domain_budget: one key per registrable
// domain under its own hash tag, "<prefix>:{dom:<domain>}:pages", because the domain's
// hosts are spread over the shards. The scheduler charges it after each dispatch and
// refunds it when an outcome shows no page request was made.
func DomainPages(prefix, domain string) string {
	if prefix == "" {
		prefix = "trawl"
	}
	return prefix + ":{dom:" + domain + "}:pages"
}

// PolicyStat is one rule's counters (Shard.PolicyStats), summed over shards.
type PolicyStat struct {
	Hosts, Requests, Blocked, Parked, Excluded int64
}

// PolicyStats sums the per-rule counters of the shards by rule scope (the status page's
// and trawlctl status's active-rules table).
func (r *Reader) PolicyStats(ctx context.Context) (map[string]PolicyStat, error) {
	cmds := make([]*redis.MapStringStringCmd, r.shards)
	_, err := r.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for s := range r.shards {
			cmds[s] = p.HGetAll(ctx, ForShard(r.prefix, s, r.shards).PolicyStats())
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("frontier: policy stats: %w", err)
	}
	out := map[string]PolicyStat{}
	for _, c := range cmds {
		for f, v := range c.Val() {
			scope, counter, ok := strings.Cut(f, "\t")
			n, err := strconv.ParseInt(v, 10, 64)
			if !ok || err != nil {
				continue
			}
			st := out[scope]
			switch counter {
			case PolicyStatHosts:
				st.Hosts += n
			case PolicyStatRequests:
				st.Requests += n
			case PolicyStatBlocked:
				st.Blocked += n
			case PolicyStatParked:
				st.Parked += n
			case PolicyStatExcluded:
				st.Excluded += n
			default:
				continue
			}
			out[scope] = st
		}
	}
	return out, nil
}

// A host with connections > 1 holds one lease slot per task out: slot 0 is "<host>" (so a
// host with one connection is laid out as before), slot k ≥ 1 is "<host> <k>". The slot is
// the field of lease and lasterr and the member of inflight; a task's lease token ends
// "~<k>" for slot k ≥ 1, so an outcome, which names its host and token, finds its slot.
const (
	LeaseSlotSep  = " "
	LeaseTokenSep = "~"
)

// LeaseSlot is the slot of the task out on host under token.
func LeaseSlot(host, token string) string {
	i := strings.LastIndex(token, LeaseTokenSep)
	if i < 0 {
		return host
	}
	return host + LeaseSlotSep + token[i+len(LeaseTokenSep):]
}

// SlotHost is the host of a lease slot.
func SlotHost(slot string) string {
	h, _, _ := strings.Cut(slot, LeaseSlotSep)
	return h
}
