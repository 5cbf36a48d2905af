package frontier

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/frontierkeys"
	"github.com/trawl/trawl/shared/policy"
)

// A domain_budget covers every host of a registrable domain, and those hosts are spread
// over the shards, so no shard's script can see the whole count. The scheduler keeps it
// in a counter of its own per domain (frontierkeys.DomainPages, its own hash tag) and
// charges it in Go right after each dispatch: INCRBY by the tasks of the domain, and the
// tasks beyond the budget (the last ones of the call) are taken back before they are
// published (SettleOverBudget: over budget, with the rest of their hosts' queues) and
// their charge returned. An outcome that refunds its page charge (no request was made)
// refunds the domain too (RefundDomains). Between the INCRBY and the settlement the
// counter may read above the budget, never the pages fetched: concurrent dispatches of
// two shards each see the other's charge and each takes back its own excess.

// domainOf is the domain whose budget applies to a host, and the budget; ok is false
// when none does (unset or 0).
func domainOf(s *policy.Set, host string) (domain string, budget int64, ok bool) {
	r := s.Host(host)
	if r.DomainBudget == nil || *r.DomainBudget <= 0 || r.Domain == "" {
		return "", 0, false
	}
	return r.Domain, *r.DomainBudget, true
}

// ChargeDomains charges the domain budgets of the tasks a dispatch returned and returns
// the tasks to publish; the ones beyond their domain's budget are settled as over budget
// (settled counts them). On an error every task is returned: an unpublished task would
// wait for the reaper, and a charge that failed lets at most these tasks past the budget.
func (f *Frontier) ChargeDomains(ctx context.Context, s *policy.Set, tasks []crawlmsg.FetchTask) (keep []crawlmsg.FetchTask, settled int, err error) {
	if s == nil || len(tasks) == 0 || !s.DomainBudgets() {
		return tasks, 0, nil
	}
	type dom struct {
		budget int64
		idx    []int
		cmd    *redis.IntCmd
	}
	doms := map[string]*dom{}
	for i, tk := range tasks {
		d, b, ok := domainOf(s, tk.Host)
		if !ok {
			continue
		}
		if doms[d] == nil {
			doms[d] = &dom{budget: b}
		}
		doms[d].idx = append(doms[d].idx, i)
	}
	if len(doms) == 0 {
		return tasks, 0, nil
	}
	_, err = f.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for name, d := range doms {
			d.cmd = p.IncrBy(ctx, frontierkeys.DomainPages(f.o.KeyPrefix, name), int64(len(d.idx)))
		}
		return nil
	})
	if err != nil {
		return tasks, 0, fmt.Errorf("frontier: shard %d: charge domain budgets: %w", f.o.Shard, err)
	}
	over := map[int]bool{}
	var back []any
	giveBack := map[string]int64{}
	for name, d := range doms {
		n := int64(len(d.idx))
		allowed := min(max(d.budget-(d.cmd.Val()-n), 0), n)
		for _, i := range d.idx[allowed:] {
			over[i] = true
			back = append(back, tasks[i].Host, tasks[i].Lease)
		}
		if n > allowed {
			giveBack[name] = n - allowed
		}
	}
	if len(over) == 0 {
		return tasks, 0, nil
	}
	v, err := f.run(ctx, scriptOver, append(f.args(len(back)), back...))
	if err != nil {
		return tasks, 0, err
	}
	for i, tk := range tasks {
		if !over[i] {
			keep = append(keep, tk)
		}
	}
	n, _ := v.(int64)
	return keep, int(n), f.refundDomains(ctx, giveBack)
}

// RefundDomains returns the domain budget charge of outcomes that made no page request
// (Applied.Refunded).
func (f *Frontier) RefundDomains(ctx context.Context, s *policy.Set, applied []Applied) error {
	if s == nil || !s.DomainBudgets() {
		return nil
	}
	give := map[string]int64{}
	for _, a := range applied {
		if !a.Refunded {
			continue
		}
		if d, _, ok := domainOf(s, a.Host); ok {
			give[d]++
		}
	}
	return f.refundDomains(ctx, give)
}

func (f *Frontier) refundDomains(ctx context.Context, give map[string]int64) error {
	if len(give) == 0 {
		return nil
	}
	_, err := f.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for d, n := range give {
			p.DecrBy(ctx, frontierkeys.DomainPages(f.o.KeyPrefix, d), n)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("frontier: shard %d: refund domain budgets: %w", f.o.Shard, err)
	}
	return nil
}
