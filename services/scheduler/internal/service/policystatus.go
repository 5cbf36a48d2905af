package service

import (
	"context"
	"sync"
	"time"

	"github.com/trawl/trawl/shared/frontierkeys"
	"github.com/trawl/trawl/shared/policy"
)

// rulesEvery is how often the status page reads the per-rule counters: with 10,000 rules
// a reading is 50,000 hash fields per shard, and the page refreshes every 2 s.
const rulesEvery = 5 * time.Second

// activeRules reads the rules in force (rules: the watcher's Current) with their counters
// summed over the shards, for the status page. The counters are read at most every
// rulesEvery of real time (the cost it bounds is real, whatever clock the frontier
// keeps) and after each change; the rules are always the current ones.
func activeRules(fr *frontierkeys.Reader, rules func() *policy.Set) func(context.Context, int) (frontierkeys.ActiveRules, error) {
	var mu sync.Mutex
	var stats map[string]frontierkeys.PolicyStat
	var at time.Time
	var version int64
	return func(ctx context.Context, top int) (frontierkeys.ActiveRules, error) {
		set := rules()
		mu.Lock()
		defer mu.Unlock()
		// A change's new rules are shown with fresh counters.
		if stats == nil || time.Since(at) >= rulesEvery || set.Version() != version {
			st, err := fr.PolicyStats(ctx)
			if err != nil {
				return frontierkeys.ActiveRules{}, err
			}
			stats, at, version = st, time.Now(), set.Version()
		}
		rs := set.Rules()
		scopes := make([]string, len(rs))
		for i, r := range rs {
			scopes[i] = r.Scope.String()
		}
		return frontierkeys.TopRules(stats, scopes, set.Version(), top), nil
	}
}
