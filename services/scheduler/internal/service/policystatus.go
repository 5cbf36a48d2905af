package service

import (
	"context"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/trawl/trawl/shared/frontierkeys"
	"github.com/trawl/trawl/shared/policy"
)

// rulesEvery is how often the status page reads the per-rule counters: with 10,000 rules
// a reading is 50,000 hash fields per shard, and the page refreshes every 2 s.
const rulesEvery = 5 * time.Second

// activeRules reads the rules in force (rules: the watcher's Current) with their counters
// summed over the shards, for the status page. The counters are read at most every
// rulesEvery; the rules are always the current ones.
func activeRules(rdb redis.UniversalClient, prefix string, shards int, rules func() *policy.Set, now func() time.Time) func(context.Context, int) (frontierkeys.ActiveRules, error) {
	var mu sync.Mutex
	var stats map[string]*frontierkeys.RuleStats
	var at time.Time
	return func(ctx context.Context, top int) (frontierkeys.ActiveRules, error) {
		set := rules()
		mu.Lock()
		defer mu.Unlock()
		if stats == nil || now().Sub(at) >= rulesEvery {
			st, err := frontierkeys.ReadPolicyStats(ctx, rdb, prefix, shards)
			if err != nil {
				return frontierkeys.ActiveRules{}, err
			}
			stats, at = st, now()
		}
		rs := set.Rules()
		scopes := make([]string, len(rs))
		for i, r := range rs {
			scopes[i] = r.Scope.String()
		}
		return frontierkeys.TopRules(stats, scopes, set.Version(), top), nil
	}
}
