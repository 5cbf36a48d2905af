package frontier

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/trawl/trawl/shared/frontierkeys"
	"github.com/trawl/trawl/shared/policy"
)

// HostLimits is a rule's per-host limits as the shard's policy table holds them: the
// fields the scripts apply per host (politeness, connections, host budget, block). Only
// host and domain rules have them; a URL-prefix rule's fields are per URL.
func HostLimits(r policy.Rule) frontierkeys.HostLimits {
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
// PolicyDomainField) → encoded limits, for every host and domain rule that sets any.
func PolicyTable(s *policy.Set) map[string]string {
	t := map[string]string{}
	if s == nil {
		return t
	}
	for _, st := range s.Rules() {
		var field string
		switch st.Scope.Kind {
		case policy.KindHost:
			field = frontierkeys.PolicyHostField(st.Scope.Value)
		case policy.KindDomain:
			field = frontierkeys.PolicyDomainField(st.Scope.Value)
		default:
			continue
		}
		if enc, empty := HostLimits(st.Rule).Encode(); !empty {
			t[field] = enc
		}
	}
	return t
}

// PolicyChange is what SyncPolicy changed in the shard's table: the fields written and the
// fields deleted.
type PolicyChange struct {
	Set, Deleted []string
}

// Empty says nothing changed.
func (c PolicyChange) Empty() bool { return len(c.Set) == 0 && len(c.Deleted) == 0 }

// SyncPolicy makes the shard's policy table hold what the rule set implies (PolicyTable),
// writing only the entries that differ: it reads the table, so it is right at start, after
// a restart of Redis, and when several processes serve the shard. The scripts read the
// table on every step, so a change is in force from the next step on.
func (f *Frontier) SyncPolicy(ctx context.Context, s *policy.Set) (PolicyChange, error) {
	want := PolicyTable(s)
	have, err := f.rdb.HGetAll(ctx, f.k.Policy()).Result()
	if err != nil {
		return PolicyChange{}, fmt.Errorf("frontier: shard %d: read the policy table: %w", f.o.Shard, err)
	}
	var ch PolicyChange
	var set []any
	for k, v := range want {
		if have[k] != v {
			ch.Set = append(ch.Set, k)
			set = append(set, k, v)
		}
	}
	for k := range have {
		if _, ok := want[k]; !ok {
			ch.Deleted = append(ch.Deleted, k)
		}
	}
	if ch.Empty() {
		return ch, nil
	}
	_, err = f.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		for i := 0; i < len(set); i += 2000 {
			p.HSet(ctx, f.k.Policy(), set[i:min(i+2000, len(set))]...)
		}
		for i := 0; i < len(ch.Deleted); i += 1000 {
			p.HDel(ctx, f.k.Policy(), ch.Deleted[i:min(i+1000, len(ch.Deleted))]...)
		}
		return nil
	})
	if err != nil {
		return PolicyChange{}, fmt.Errorf("frontier: shard %d: write the policy table: %w", f.o.Shard, err)
	}
	return ch, nil
}
