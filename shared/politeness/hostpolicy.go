package politeness

import (
	"fmt"
	"io/fs"
	"math"
	"time"

	"github.com/trawl/trawl/shared/frontierkeys"
	"github.com/trawl/trawl/shared/redisx"
)

// PolicyModule is the Lua module that reads a host's limits from a shard's policy table
// (lua/hostpolicy.lua: host_limits), with the table's field names and entry layout as
// constants from frontierkeys, so the encoding is defined once, in Go. Include it after
// Module; the script must define K_POLICY (nil: no policy applies).
var PolicyModule = redisx.Lua{Name: "lua/hostpolicy.lua", Source: policySource()}

func policySource() string {
	src, err := fs.ReadFile(luaFS, "lua/hostpolicy.lua")
	if err != nil {
		panic("politeness: " + err.Error())
	}
	names := fmt.Sprintf("local POL_H, POL_D = %q, %q\n"+
		"local LIM_MIND, LIM_KF, LIM_CD, LIM_CONN, LIM_BUDGET, LIM_BLOCK = %d, %d, %d, %d, %d, %d\n"+
		"local LIM_UNSET, LIM_EXACT = %q, %q\n",
		frontierkeys.PolicyHostPrefix, frontierkeys.PolicyDomainPrefix,
		frontierkeys.LimitMinDelay, frontierkeys.LimitDelayFactor, frontierkeys.LimitCrawlDelay,
		frontierkeys.LimitConnections, frontierkeys.LimitHostBudget, frontierkeys.LimitBlock,
		frontierkeys.LimitUnset, frontierkeys.LimitExact)
	return names + string(src)
}

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
