package service

import (
	"context"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/trawl/trawl/services/scheduler/internal/config"
	"github.com/trawl/trawl/services/scheduler/internal/frontier"
	"github.com/trawl/trawl/shared/policy"
)

const (
	// policyFollowUp is how long after a change the shards are brought in line once more:
	// past the 2 s in which every fetcher holds the change, so URLs a fetcher parked under
	// the old rules meanwhile are resumed too.
	policyFollowUp = 3 * time.Second
	// policyResync is how often the tables are checked without a change (a Redis restored
	// from an older snapshot, a failed apply).
	policyResync = 30 * time.Second
)

// policies keeps the hosts' limits on the shards this process serves in line with the
// live site policies (frontier.ApplyPolicy): at start, on every change the watcher loads,
// once more policyFollowUp after it, and every policyResync.
type policies struct {
	w       *policy.Watcher
	shards  []*shard
	changed chan struct{}
	log     *slog.Logger
	// checked is the rule set whose scopes the shards' queues were last rechecked against
	// (nil: none yet, so the first apply rechecks every rule's hosts).
	checked *policy.Set
}

// newPolicies loads the rules once; an error stops the scheduler, which would otherwise
// crawl blocked sites.
func newPolicies(ctx context.Context, cfg config.Config, rdb redis.UniversalClient, log *slog.Logger) (*policies, error) {
	w, err := policy.NewWatcher(ctx, policy.NewStore(rdb, cfg.Common.RedisPrefix), cfg.Policy.Poll)
	if err != nil {
		return nil, err
	}
	p := &policies{w: w, changed: make(chan struct{}, 1), log: log}
	w.OnChange(func(_, _ *policy.Set) {
		select {
		case p.changed <- struct{}{}:
		default:
		}
	})
	return p, nil
}

// apply brings every shard in line with the current rules; it reports whether all were.
func (p *policies) apply(ctx context.Context) bool {
	set := p.w.Current()
	ok := true
	changed := frontier.ScopeChanged(p.checked, set)
	for _, s := range p.shards {
		a, err := s.f.ApplyPolicy(ctx, set)
		if err != nil {
			ok = false
			if ctx.Err() == nil {
				s.m.redisErrors.WithLabelValues(s.label, "policy").Inc()
				s.log.Warn("live policy: apply failed; tried again shortly", "version", set.Version(), "err", err)
			}
			continue
		}
		if !a.Empty() || a.Resumed > 0 {
			s.log.Info("live policy applied", "version", set.Version(), "generation", a.Gen,
				"active_hosts_written", a.Hosts, "parked", a.Parked, "resumed", a.Resumed)
			s.poke()
		}
		rc, err := s.f.RecheckScope(ctx, set, changed)
		if err != nil {
			ok = false
			if ctx.Err() == nil {
				s.m.redisErrors.WithLabelValues(s.label, "policy").Inc()
				s.log.Warn("live policy: scope recheck failed; tried again shortly", "version", set.Version(), "err", err)
			}
			continue
		}
		if rc.Excluded > 0 || rc.Parked > 0 {
			s.log.Info("live policy: queued URLs rechecked", "version", set.Version(), "hosts", rc.Hosts,
				"kept", rc.Kept, "out_of_scope", rc.Excluded, "parked", rc.Parked)
		}
	}
	if ok {
		p.checked = set
	}
	return ok
}

// run keeps the shards in line until ctx ends.
func (p *policies) run(ctx context.Context) {
	follow := time.NewTimer(policyFollowUp)
	defer follow.Stop()
	resync := time.NewTicker(policyResync)
	defer resync.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-p.changed:
			p.apply(ctx)
			follow.Reset(policyFollowUp)
		case <-follow.C:
			if !p.apply(ctx) {
				follow.Reset(policyFollowUp)
			}
		case <-resync.C:
			p.apply(ctx)
		}
	}
}
