package frontier

import (
	"context"
	"fmt"
	"reflect"
	"strconv"
	"strings"

	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/frontierkeys"
	"github.com/trawl/trawl/shared/policy"
)

// recheckChunk bounds the entries one recheck call takes, and so how long it holds Redis
// from the other steps.
const recheckChunk = 500

// Rechecked is what a scope recheck did.
type Rechecked struct {
	Hosts                  int
	Kept, Excluded, Parked int64
}

// ScopeChanged are the scopes whose rules changed between two sets in a field that
// decides which URLs are crawled (max depth, include, exclude, block).
func ScopeChanged(old, new *policy.Set) []policy.Scope {
	if old == new {
		// The periodic passes apply the set already rechecked: with 10,000 rules, comparing
		// it with itself would cost milliseconds each time.
		return nil
	}
	rules := func(s *policy.Set) map[string]policy.Stored {
		m := map[string]policy.Stored{}
		if s != nil {
			for _, st := range s.Rules() {
				m[st.Scope.String()] = st
			}
		}
		return m
	}
	o, n := rules(old), rules(new)
	scopeOf := func(r policy.Rule) [4]any { return [4]any{r.MaxDepth, r.Include, r.Exclude, r.Block} }
	var out []policy.Scope
	for k, nr := range n {
		or, ok := o[k]
		if !ok || !reflect.DeepEqual(scopeOf(or.Rule), scopeOf(nr.Rule)) {
			out = append(out, nr.Scope)
		}
	}
	for k, or := range o {
		if _, ok := n[k]; !ok {
			out = append(out, or.Scope)
		}
	}
	return out
}

// RecheckScope re-checks the queued URLs of the shard's active hosts that a change of the
// given scopes covers against the new rules: a URL the rules no longer admit
// (Resolved.Admit) ends out of scope, counted excluded for the rule that refused it; one a
// rule blocks is parked. It goes a chunk of each queue per script call, so dispatch for
// the other hosts goes on in between, and a queue's kept URLs end in their order.
func (f *Frontier) RecheckScope(ctx context.Context, s *policy.Set, changed []policy.Scope) (Rechecked, error) {
	var r Rechecked
	if len(changed) == 0 || s == nil {
		return r, nil
	}
	fields, err := f.rdb.HKeys(ctx, f.k.Hosts()).Result()
	if err != nil {
		return r, fmt.Errorf("frontier: shard %d: active hosts: %w", f.o.Shard, err)
	}
	hosts := frontierkeys.ActiveHosts(fields)
	for _, h := range hosts {
		covered := false
		for _, sc := range changed {
			if s.Covers(sc, h) {
				covered = true
				break
			}
		}
		if !covered {
			continue
		}
		r.Hosts++
		if err := f.recheckHost(ctx, s, h, &r); err != nil {
			return r, err
		}
	}
	return r, nil
}

// recheckHost passes once over the host's back queue as it was when it started.
func (f *Frontier) recheckHost(ctx context.Context, s *policy.Set, host string, r *Rechecked) error {
	total, err := f.rdb.LLen(ctx, f.k.BackQueue(host)).Result()
	if err != nil {
		return fmt.Errorf("frontier: shard %d: recheck %s: %w", f.o.Shard, host, err)
	}
	for done, tries := int64(0), 0; done < total; {
		n := min(total-done, recheckChunk)
		es, err := f.rdb.LRange(ctx, f.k.BackQueue(host), 0, n-1).Result()
		if err != nil {
			return fmt.Errorf("frontier: shard %d: recheck %s: %w", f.o.Shard, host, err)
		}
		if len(es) == 0 {
			return nil
		}
		args := append(f.args(2+3*len(es)), host, strconv.Itoa(len(es)))
		var refused []Refused
		for _, e := range es {
			act, scope := "k", ""
			if en, err := ParseEntry(e); err == nil {
				res := s.URL(en.URL)
				if ok, why := res.Admit(en.URL, en.Depth); !ok {
					act = "x"
					_, scope, _ = strings.Cut(why, " of ")
					if f.excluded != nil {
						refused = append(refused, Refused{URL: en.URL, Host: host, Reason: crawlmsg.ReasonOutOfScope, Detail: why})
					}
				} else if res.Blocked() {
					act, scope = "p", res.DecidedBy(policy.FBlock)
				}
			}
			args = append(args, e, act, scope)
		}
		v, err := f.run(ctx, scriptRecheck, args)
		if err != nil {
			return err
		}
		out, ok := v.([]any)
		if !ok || len(out) != 3 {
			return fmt.Errorf("frontier: shard %d: recheck %s: unexpected reply %v", f.o.Shard, host, v)
		}
		kept, _ := out[0].(int64)
		if kept < 0 {
			// The queue's head moved (a dispatch, an outcome): read it again.
			if tries++; tries > 100 {
				return fmt.Errorf("frontier: shard %d: recheck %s: the queue kept moving", f.o.Shard, host)
			}
			continue
		}
		x, _ := out[1].(int64)
		p, _ := out[2].(int64)
		r.Kept, r.Excluded, r.Parked = r.Kept+kept, r.Excluded+x, r.Parked+p
		done += int64(len(es))
		if len(refused) > 0 {
			f.excluded(ctx, refused)
		}
	}
	return nil
}
