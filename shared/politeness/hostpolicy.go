package politeness

import (
	"context"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/trawl/trawl/shared/frontierkeys"
	"github.com/trawl/trawl/shared/policy"
	"github.com/trawl/trawl/shared/redisx"
)

// PolicyModule is the Lua module that reads a host's limits from a shard's policy table
// (lua/hostpolicy.lua: host_limits): the entry PolicyTable resolved for the host's most
// specific rule, taken whole. The table's field names and entry layout are constants from
// frontierkeys, so the encoding is defined once, in Go. Include it after Module; the
// script must define K_POLICY (nil: no policy applies).
var PolicyModule = redisx.Lua{FS: luaFS, Name: "lua/hostpolicy.lua"}

// PolicyNames are the policy table's field names and entry layout for the scripts that
// include PolicyModule (put them first in the script), as the table POL (POL.H, POL.MIND,
// …): one local, not one per name, in scripts near Lua's limit of 200.
var PolicyNames = redisx.Table("POL",
	"H", frontierkeys.PolicyHostPrefix, "D", frontierkeys.PolicyDomainPrefix,
	"MIND", frontierkeys.LimitMinDelay, "KF", frontierkeys.LimitDelayFactor,
	"CD", frontierkeys.LimitCrawlDelay, "CONN", frontierkeys.LimitConnections,
	"BUDGET", frontierkeys.LimitHostBudget, "BLOCK", frontierkeys.LimitBlock,
	"UNSET", frontierkeys.LimitUnset, "EXACT", frontierkeys.LimitExact,
	"SLOT_SEP", frontierkeys.LeaseSlotSep, "GEN", frontierkeys.PolicyGenField,
)

// PolicyLimits is a rule's per-host limits as the policy table holds them: the fields the
// scripts apply per host (politeness, connections, host budget, block). Only host and
// domain rules have them; a URL-prefix rule's fields are per URL.
func PolicyLimits(r policy.Rule) frontierkeys.HostLimits {
	var l frontierkeys.HostLimits
	if r.MinDelay != nil {
		d := time.Duration(*r.MinDelay)
		l.MinDelay = &d
	}
	l.DelayFactor = r.DelayFactor
	if r.CrawlDelay != nil {
		l.CrawlDelay = &frontierkeys.CrawlDelayRule{Exact: r.CrawlDelay.Exact, Cap: r.CrawlDelay.Cap}
	}
	l.Connections = r.Connections
	l.HostBudget = r.HostBudget
	l.Block = r.Block
	return l
}

// PolicyTable is the policy table a rule set implies: field (frontierkeys.PolicyHostField,
// PolicyDomainField) → entry (frontierkeys.PolicyEntry), for every host and domain rule,
// each resolved here, once: the rule's limits over those of the domain rules above it
// (the most specific setting a field wins, as policy.Set resolves a host), with the rule
// that decided block and the scopes merged. A reader of a host's limits takes its most
// specific rule's entry whole. A rule that sets no per-host limit (only a header, an
// exclude, …) has an entry too: the scripts count the hosts and requests under a rule from
// the entry a host's limits come from, so without one the status page would show such a
// rule matching no host.
func PolicyTable(s *policy.Set) map[string]string {
	t := map[string]string{}
	if s == nil {
		return t
	}
	for _, st := range s.Rules() {
		switch st.Scope.Kind {
		case policy.KindHost:
			t[frontierkeys.PolicyHostField(st.Scope.Value)] = resolveEntry(s, st, st.Scope.Value).Encode()
		case policy.KindDomain:
			t[frontierkeys.PolicyDomainField(st.Scope.Value)] = resolveEntry(s, st, "").Encode()
		}
	}
	return t
}

// resolveEntry merges rule st over the domain rules of name and each suffix of it (for a
// host rule, name is its host; for a domain rule, the suffixes of its domain after the
// first label), the most specific first.
func resolveEntry(s *policy.Set, st policy.Stored, name string) frontierkeys.PolicyEntry {
	var e frontierkeys.PolicyEntry
	add := func(st policy.Stored) {
		l := PolicyLimits(st.Rule)
		if e.BlockBy == "" && l.Block != nil {
			e.BlockBy = st.Scope.String()
		}
		e.Limits = e.Limits.Over(l)
		e.Rules = append(e.Rules, st.Scope.String())
	}
	add(st)
	if name == "" {
		_, name, _ = strings.Cut(st.Scope.Value, ".")
	}
	for d := name; d != ""; {
		if r, ok := s.Rule(policy.Scope{Kind: policy.KindDomain, Value: d}); ok {
			add(r)
		}
		_, rest, ok := strings.Cut(d, ".")
		if !ok {
			break
		}
		d = rest
	}
	return e
}

// HostNames are the fields of a host's state hash (frontierkeys.Host*) for the scripts
// that read or write it, the frontier's and the claims' (put them first in the script), as
// the table HF (HF.NEXT, HF.CD, …); devstack/docscheck's TestLuaSpellsNoHostField keeps
// the scripts from spelling a field themselves.
var HostNames = redisx.Table("HF",
	"NEXT", frontierkeys.HostNext, "CD", frontierkeys.HostCD, "ERR", frontierkeys.HostErr,
	"FAILS", frontierkeys.HostFails, "RETIRED", frontierkeys.HostRetired,
	"PAGES", frontierkeys.HostPages, "FETCHED", frontierkeys.HostFetched,
	"RT", frontierkeys.HostRT, "RTAVG", frontierkeys.HostRTAvg, "ADDR", frontierkeys.HostAddr,
	"WIN", frontierkeys.HostWindow, "SLOTS", frontierkeys.HostSlots,
)

// exactCrawlDelay is the cap of a Crawl-delay honoured exactly: none.
const exactCrawlDelay = time.Duration(math.MaxInt64)

// With is the rules for a host whose live policy sets limits l: each politeness field l
// sets replaces the process-wide one; an exact Crawl-delay is honoured however long. The
// Lua module's host_limits applies the same (the table test in shared/itest checks it).
func (r Rules) With(l frontierkeys.HostLimits) Rules {
	if l.MinDelay != nil {
		r.MinDelay = max(*l.MinDelay, 0)
	}
	if l.DelayFactor != nil {
		r.DelayFactor = max(*l.DelayFactor, 0)
	}
	if l.CrawlDelay != nil {
		if l.CrawlDelay.Exact {
			r.MaxCrawlDelay = exactCrawlDelay
		} else {
			r.MaxCrawlDelay = max(l.CrawlDelay.Cap, 0)
		}
	}
	return r
}

// ReadHostLimits are host's limits in its shard's policy table, read as host_limits reads
// them: the entry of its most specific rule (the first of frontierkeys.PolicyCandidates the
// table holds), none while the table has no generation. It is host_limits for a process
// outside the frontier's scripts: a fetcher deciding, after robots.txt, whether the host's
// gap lets it go on to the page.
func ReadHostLimits(ctx context.Context, rdb redis.UniversalClient, prefix string, shard, shards int, host string) (frontierkeys.HostLimits, error) {
	cands := frontierkeys.PolicyCandidates(host)
	fields := append([]string{frontierkeys.PolicyGenField}, cands...)
	got, err := rdb.HMGet(ctx, frontierkeys.ForShard(prefix, shard, shards).Policy(), fields...).Result()
	if err != nil {
		return frontierkeys.HostLimits{}, fmt.Errorf("politeness: %s's policy on shard %d: %w", host, shard, err)
	}
	if got[0] == nil {
		return frontierkeys.HostLimits{}, nil
	}
	for i, v := range got[1:] {
		s, ok := v.(string)
		if !ok {
			continue
		}
		e, err := frontierkeys.ParsePolicyEntry(s)
		if err != nil {
			return frontierkeys.HostLimits{}, fmt.Errorf("politeness: %s's policy on shard %d: entry %q: %w", host, shard, cands[i], err)
		}
		return e.Limits, nil
	}
	return frontierkeys.HostLimits{}, nil
}
