package politeness

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/trawl/trawl/shared/frontierkeys"
	"github.com/trawl/trawl/shared/policy"
	"github.com/trawl/trawl/shared/redisx"
)

// PolicyModule is the Lua module that reads a host's limits (lua/hostpolicy.lua:
// host_limits): the entry Resolve gave the host, stored in the host's own state
// (frontierkeys.HostLim) under the shard's generation, taken whole. The field names and
// entry layout are constants from frontierkeys, so the encoding is defined once, in Go.
// Include it after Module; the script must define K_POLICY (the shard's generation; nil:
// no policy applies) and hk(h) (a host's state key).
var PolicyModule = redisx.Lua{FS: luaFS, Name: "lua/hostpolicy.lua"}

// PolicyNames are the entry layout for the scripts that include PolicyModule (put them
// first in the script), as the table POL (POL.MIND, …): one local, not one per name, in
// scripts near Lua's limit of 200.
var PolicyNames = redisx.Table("POL",
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

// Resolved is a rule set's per-host limits, resolved here, once: each host and domain
// rule's limits over those of the domain rules above it (the most specific setting a
// field wins, as policy.Set resolves a host), with the rule that decided block and the
// scopes merged (frontierkeys.PolicyEntry). A host's entry is its most specific rule's,
// taken whole. A rule that sets no per-host limit (only a header, an exclude, …) has an
// entry too: the scripts count the hosts and requests under a rule from the entry a host's
// limits come from, so without one the status page would show such a rule matching no host.
type Resolved struct {
	set            *policy.Set
	gen            string
	hosts, domains map[string]string
}

// Resolve resolves every host and domain rule of s (nil: none).
func Resolve(s *policy.Set) *Resolved {
	r := &Resolved{set: s, hosts: map[string]string{}, domains: map[string]string{}}
	if s == nil {
		return r
	}
	var keys []string
	for _, st := range s.Rules() {
		switch st.Scope.Kind {
		case policy.KindHost:
			r.hosts[st.Scope.Value] = resolveEntry(s, st, st.Scope.Value).Encode()
			keys = append(keys, "h "+st.Scope.Value)
		case policy.KindDomain:
			r.domains[st.Scope.Value] = resolveEntry(s, st, "").Encode()
			keys = append(keys, "d "+st.Scope.Value)
		}
	}
	if len(keys) == 0 {
		return r
	}
	// The generation is a digest of the entries: equal rules give equal generations, so
	// two schedulers on one shard agree, and a generation Redis lost and a scheduler wrote
	// again still names the same limits.
	slices.Sort(keys)
	h := sha256.New()
	for _, k := range keys {
		kind, v, _ := strings.Cut(k, " ")
		e := r.hosts[v]
		if kind == "d" {
			e = r.domains[v]
		}
		fmt.Fprintf(h, "%s\t%s\n", k, e)
	}
	r.gen = hex.EncodeToString(h.Sum(nil)[:12])
	return r
}

// Set is the rule set resolved.
func (r *Resolved) Set() *policy.Set { return r.set }

// Gen is the generation of the resolved rules ("" when no host or domain rule is in force).
func (r *Resolved) Gen() string { return r.gen }

// Entry is host's entry: its host rule's, else the domain rule's for its name or the
// longest suffix that has one; "" when no rule matches it.
func (r *Resolved) Entry(host string) string {
	if e, ok := r.hosts[host]; ok {
		return e
	}
	for s := host; s != ""; {
		if e, ok := r.domains[s]; ok {
			return e
		}
		_, rest, ok := strings.Cut(s, ".")
		if !ok {
			break
		}
		s = rest
	}
	return ""
}

// Value is host's stored limits (frontierkeys.HostLim) under these rules.
func (r *Resolved) Value(host string) string { return frontierkeys.HostLimValue(r.gen, r.Entry(host)) }

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
	"WIN", frontierkeys.HostWindow, "SLOTS", frontierkeys.HostSlots, "LIM", frontierkeys.HostLim,
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

// ReadHostLimits are host's limits as host_limits reads them: the entry stored in its
// state (frontierkeys.HostLim), none while the shard has no generation or the entry is of
// another. It is host_limits for a process outside the frontier's scripts: a fetcher
// deciding, after robots.txt, whether the host's gap lets it go on to the page (the host
// is active then, and an active host's limits are kept current).
func ReadHostLimits(ctx context.Context, rdb redis.UniversalClient, prefix string, shard, shards int, host string) (frontierkeys.HostLimits, error) {
	k := frontierkeys.ForShard(prefix, shard, shards)
	var gen, lim *redis.StringCmd
	_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		gen = p.HGet(ctx, k.Policy(), frontierkeys.PolicyGenField)
		lim = p.HGet(ctx, k.Host(host), frontierkeys.HostLim)
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return frontierkeys.HostLimits{}, fmt.Errorf("politeness: %s's policy on shard %d: %w", host, shard, err)
	}
	g, e, ok := frontierkeys.ParseHostLim(lim.Val())
	if gen.Val() == "" || !ok || g != gen.Val() {
		return frontierkeys.HostLimits{}, nil
	}
	en, err := frontierkeys.ParsePolicyEntry(e)
	if err != nil {
		return frontierkeys.HostLimits{}, fmt.Errorf("politeness: %s's policy on shard %d: entry %q: %w", host, shard, e, err)
	}
	return en.Limits, nil
}
