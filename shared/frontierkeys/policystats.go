package frontierkeys

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// RuleStats are one rule's counters (Shard.PolicyStats), summed over the shards.
type RuleStats struct {
	Scope    string `json:"scope"`
	Hosts    int64  `json:"hosts"`
	Requests int64  `json:"requests"`
	Blocked  int64  `json:"blocked"`
	Parked   int64  `json:"parked"`
	Excluded int64  `json:"excluded"`
}

// Activity orders rules by what they did: URLs they hold back first (parked, blocked,
// excluded: what an operator most needs to see), then the requests made under them.
func (r RuleStats) Activity() int64 { return r.Parked + r.Blocked + r.Excluded + r.Requests }

// add reads one "<scope>\t<counter>" field; an unknown counter or an unreadable count is
// left out.
func addPolicyStat(sum map[string]*RuleStats, field, value string) {
	scope, counter, ok := strings.Cut(field, "\t")
	if !ok {
		return
	}
	n, err := strconv.ParseInt(value, 10, 64)
	if err != nil {
		return
	}
	r := sum[scope]
	if r == nil {
		r = &RuleStats{Scope: scope}
		sum[scope] = r
	}
	switch counter {
	case PolicyStatHosts:
		r.Hosts += n
	case PolicyStatRequests:
		r.Requests += n
	case PolicyStatBlocked:
		r.Blocked += n
	case PolicyStatParked:
		r.Parked += n
	case PolicyStatExcluded:
		r.Excluded += n
	}
}

// ReadPolicyStats sums every shard's per-rule counters, by scope: one HGETALL per shard,
// in one pipeline (each shard's hash has its own hash tag).
func ReadPolicyStats(ctx context.Context, rdb redis.UniversalClient, prefix string, shards int) (map[string]*RuleStats, error) {
	cmds := make([]*redis.MapStringStringCmd, shards)
	_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i := range cmds {
			cmds[i] = p.HGetAll(ctx, ForShard(prefix, i).PolicyStats())
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read per-rule counters: %w", err)
	}
	sum := map[string]*RuleStats{}
	for _, c := range cmds {
		for f, v := range c.Val() {
			addPolicyStat(sum, f, v)
		}
	}
	return sum, nil
}

// ActiveRules is the rules in force with their counters, the most active first, at most
// top of them: a crawl of 10,000 rules shows its busiest, and says how many there are.
type ActiveRules struct {
	Version int64       `json:"version"`
	Total   int         `json:"total"` // rules in force
	Shown   []RuleStats `json:"shown"`
}

// TopRules orders the rules in force (scopes, each with its counters or none) by
// Activity, then by hosts matched, then by scope, and keeps the first top. Counters of
// scopes no longer in force (a removed rule) are left out.
func TopRules(stats map[string]*RuleStats, scopes []string, version int64, top int) ActiveRules {
	rows := make([]RuleStats, 0, len(scopes))
	for _, s := range scopes {
		r := RuleStats{Scope: s}
		if st := stats[s]; st != nil {
			r = *st
		}
		rows = append(rows, r)
	}
	slices.SortFunc(rows, func(a, b RuleStats) int {
		return cmp.Or(cmp.Compare(b.Activity(), a.Activity()), cmp.Compare(b.Hosts, a.Hosts), cmp.Compare(a.Scope, b.Scope))
	})
	return ActiveRules{Version: version, Total: len(scopes), Shown: rows[:min(len(rows), max(top, 0))]}
}
