package politeness

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/trawl/trawl/shared/frontierkeys"
	"github.com/trawl/trawl/shared/redisx"
)

// PolicyModule is the Lua module that reads a host's limits from a shard's policy table
// (lua/hostpolicy.lua: host_limits), with the table's field names and entry layout as
// constants from frontierkeys, so the encoding is defined once, in Go. Include it after
// Module; the script must define K_POLICY (nil: no policy applies).
var PolicyModule = redisx.Lua{FS: luaFS, Name: "lua/hostpolicy.lua"}

// PolicyNames are the policy table's field names and entry layout for the scripts that
// include PolicyModule (put them first in the script).
var PolicyNames = redisx.Names(
	"POL_H", frontierkeys.PolicyHostPrefix, "POL_D", frontierkeys.PolicyDomainPrefix,
	"POL_SCOPE_H", frontierkeys.PolicyHostScope, "POL_SCOPE_D", frontierkeys.PolicyDomainScope,
	"LIM_MIND", frontierkeys.LimitMinDelay, "LIM_KF", frontierkeys.LimitDelayFactor,
	"LIM_CD", frontierkeys.LimitCrawlDelay, "LIM_CONN", frontierkeys.LimitConnections,
	"LIM_BUDGET", frontierkeys.LimitHostBudget, "LIM_BLOCK", frontierkeys.LimitBlock,
	"LIM_UNSET", frontierkeys.LimitUnset, "LIM_EXACT", frontierkeys.LimitExact,
	"POL_SLOT_SEP", frontierkeys.LeaseSlotSep, "POL_GEN", frontierkeys.PolicyGenField,
)

// HostNames are the fields of a host's state hash (frontierkeys.Host*) for the scripts
// that read or write it, the frontier's and the claims' (put them first in the script), as
// the table HF (HF.NEXT, HF.CD, …); devstack/docscheck's TestLuaSpellsNoHostField keeps
// the scripts from spelling a field themselves.
var HostNames = redisx.Table("HF",
	"NEXT", frontierkeys.HostNext, "CD", frontierkeys.HostCD, "ERR", frontierkeys.HostErr,
	"FAILS", frontierkeys.HostFails, "RETIRED", frontierkeys.HostRetired,
	"PAGES", frontierkeys.HostPages, "FETCHED", frontierkeys.HostFetched,
	"RT", frontierkeys.HostRT, "RTAVG", frontierkeys.HostRTAvg, "ADDR", frontierkeys.HostAddr,
	"POL", frontierkeys.HostPolicy, "WIN", frontierkeys.HostWindow, "SLOTS", frontierkeys.HostSlots,
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

// ReadHostLimits are host's limits in its shard's policy table, merged as host_limits
// merges them (the host's entry over the domain entries of its name and each suffix,
// field by field, the most specific that sets a field winning); none while the table has
// no generation. It is host_limits for a process outside the frontier's scripts: a
// fetcher deciding, after robots.txt, whether the host's gap lets it go on to the page.
func ReadHostLimits(ctx context.Context, rdb redis.UniversalClient, prefix string, shard int, host string) (frontierkeys.HostLimits, error) {
	cands := frontierkeys.PolicyCandidates(host)
	fields := append([]string{frontierkeys.PolicyGenField}, cands...)
	got, err := rdb.HMGet(ctx, frontierkeys.ForShard(prefix, shard).Policy(), fields...).Result()
	if err != nil {
		return frontierkeys.HostLimits{}, fmt.Errorf("politeness: %s's policy on shard %d: %w", host, shard, err)
	}
	var l frontierkeys.HostLimits
	if got[0] == nil {
		return l, nil
	}
	for i, v := range got[1:] {
		s, ok := v.(string)
		if !ok {
			continue
		}
		e, err := frontierkeys.ParseHostLimits(s)
		if err != nil {
			return frontierkeys.HostLimits{}, fmt.Errorf("politeness: %s's policy on shard %d: entry %q: %w", host, shard, cands[i], err)
		}
		l = l.Over(e)
	}
	return l, nil
}
