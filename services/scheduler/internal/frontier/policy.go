package frontier

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
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
// PolicyDomainField) → encoded limits, for every host and domain rule. A rule that sets no
// per-host limit (only a header, an exclude, …) has an entry too, with every limit unset:
// the scripts count the hosts and requests under a rule from the entries a host's lookup
// matched, so without one the status page would show such a rule matching no host.
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
		t[field] = HostLimits(st.Rule).Encode()
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
// a restart of Redis, and when several processes serve the shard. Every change gives the
// table a new generation (frontierkeys.PolicyGenField), and a table without rules has
// none, so the limits active hosts keep with them (politeness.PolicyModule) are looked up
// again: a change is in force from the next step on.
func (f *Frontier) SyncPolicy(ctx context.Context, s *policy.Set) (PolicyChange, error) {
	want := PolicyTable(s)
	have, err := f.rdb.HGetAll(ctx, f.k.Policy()).Result()
	if err != nil {
		return PolicyChange{}, fmt.Errorf("frontier: shard %d: read the policy table: %w", f.o.Shard, err)
	}
	_, hasGen := have[frontierkeys.PolicyGenField]
	delete(have, frontierkeys.PolicyGenField)
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
	if ch.Empty() && hasGen == (len(want) > 0) {
		return ch, nil
	}
	_, err = f.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		if len(want) == 0 {
			p.Del(ctx, f.k.Policy())
			return nil
		}
		for i := 0; i < len(set); i += 2000 {
			p.HSet(ctx, f.k.Policy(), set[i:min(i+2000, len(set))]...)
		}
		for i := 0; i < len(ch.Deleted); i += 1000 {
			p.HDel(ctx, f.k.Policy(), ch.Deleted[i:min(i+1000, len(ch.Deleted))]...)
		}
		p.HSet(ctx, f.k.Policy(), frontierkeys.PolicyGenField, policyGen(s))
		// The scripts count per rule in the counters' hash at every dispatch.
		p.HSet(ctx, f.k.PolicyStats(), frontierkeys.Wide, frontierkeys.WideValue)
		return nil
	})
	if err != nil {
		return PolicyChange{}, fmt.Errorf("frontier: shard %d: write the policy table: %w", f.o.Shard, err)
	}
	return ch, nil
}

// policyGen is a fresh generation for the policy table: the rule set's version, for a
// reader, and random bits, so that no two writes share one even when Redis lost the last
// (its AOF syncs once a second) and a scheduler writes the same version again over
// different entries.
func policyGen(s *policy.Set) string {
	return strconv.FormatInt(s.Version(), 10) + "-" + strconv.FormatUint(rand.Uint64(), 36)
}

// PolicyApplied is what ApplyPolicy did.
type PolicyApplied struct {
	PolicyChange
	// Parked URLs of hosts the change blocks; Resumed URLs of hosts it unblocked.
	Parked, Resumed int64
}

// resumeChunk bounds the entries one resume call moves, and so its run time.
const resumeChunk = 1000

// ApplyPolicy brings the shard in line with a rule set: it syncs the policy table
// (SyncPolicy); when that changed anything it parks the queues of the active hosts the
// rules now block (a blocked host would be parked when next due anyway; this does it at
// once), and resumes every park list whose host is no longer blocked; with the table
// unchanged it resumes the park lists of the hosts the rules do not block
// (resumeUnblocked). Run it at start, on every change, once more a little after a change
// and periodically: those passes find URLs a fetcher parked under the old rules while the
// change spread.
func (f *Frontier) ApplyPolicy(ctx context.Context, s *policy.Set) (PolicyApplied, error) {
	ch, err := f.SyncPolicy(ctx, s)
	if err != nil {
		return PolicyApplied{}, err
	}
	a := PolicyApplied{PolicyChange: ch}
	if ch.Empty() {
		a.Resumed, err = f.resumeUnblocked(ctx, s)
		return a, err
	}
	if a.Parked, err = f.ParkBlocked(ctx); err != nil {
		return a, err
	}
	a.Resumed, err = f.ResumeParked(ctx)
	return a, err
}

// resumeUnblocked resumes, with the table unchanged, the park lists of the hosts no rule
// blocks: lists a fetcher still on older rules filled after the change that unblocked
// them. A host a URL-prefix block covers keeps its list (its entries may be blocked URLs,
// which a fetcher would only park again); so does a blocked host. It costs one HKEYS
// when nothing is parked.
func (f *Frontier) resumeUnblocked(ctx context.Context, s *policy.Set) (int64, error) {
	hosts, err := f.rdb.HKeys(ctx, f.k.Parked()).Result()
	if err != nil {
		return 0, fmt.Errorf("frontier: shard %d: parked hosts: %w", f.o.Shard, err)
	}
	if len(hosts) == 0 {
		return 0, nil
	}
	if s == nil {
		s = policy.Empty()
	}
	prefixBlocked := map[string]bool{}
	for _, st := range s.Rules() {
		if st.Scope.Kind == policy.KindPrefix && st.Rule.Block != nil && *st.Rule.Block {
			for _, h := range hosts {
				if s.Covers(st.Scope, h) {
					prefixBlocked[h] = true
				}
			}
		}
	}
	var n int64
	for _, h := range hosts {
		if prefixBlocked[h] || s.Host(h).Blocked() {
			continue
		}
		m, err := f.resumeHost(ctx, h)
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// ParkBlocked parks the queues of the active hosts that the policy table blocks, in
// chunks of hosts, and returns how many URLs it parked.
func (f *Frontier) ParkBlocked(ctx context.Context) (int64, error) {
	fields, err := f.rdb.HKeys(ctx, f.k.Hosts()).Result()
	if err != nil {
		return 0, fmt.Errorf("frontier: shard %d: active hosts: %w", f.o.Shard, err)
	}
	hosts := frontierkeys.ActiveHosts(fields)
	var n int64
	for i := 0; i < len(hosts); i += resumeChunk {
		chunk := hosts[i:min(i+resumeChunk, len(hosts))]
		args := f.args(len(chunk))
		for _, h := range chunk {
			args = append(args, h)
		}
		v, err := f.run(ctx, scriptPark, args)
		if err != nil {
			return n, err
		}
		m, _ := v.(int64)
		n += m
	}
	return n, nil
}

// ResumeParked moves the park lists of the hosts the policy table no longer blocks back
// to the head of front queue 0, in their order, a chunk per script call so that dispatch
// for other hosts goes on in between. It returns how many URLs it moved.
func (f *Frontier) ResumeParked(ctx context.Context) (int64, error) {
	hosts, err := f.rdb.HKeys(ctx, f.k.Parked()).Result()
	if err != nil {
		return 0, fmt.Errorf("frontier: shard %d: parked hosts: %w", f.o.Shard, err)
	}
	var n int64
	for _, h := range hosts {
		m, err := f.resumeHost(ctx, h)
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// resumeHost moves host h's park list back, a chunk per call, unless the table blocks it.
func (f *Frontier) resumeHost(ctx context.Context, h string) (int64, error) {
	var n int64
	for {
		v, err := f.run(ctx, scriptResume, append(f.args(2), h, strconv.Itoa(resumeChunk)))
		if err != nil {
			return n, err
		}
		m, _ := v.(int64)
		if m <= 0 {
			return n, nil
		}
		n += m
		if m < resumeChunk {
			return n, nil
		}
	}
}

// Parked is the shard's park lists: host → why and how many URLs.
func (f *Frontier) Parked(ctx context.Context) ([]frontierkeys.ParkedHost, error) {
	h, err := f.rdb.HGetAll(ctx, f.k.Parked()).Result()
	if err != nil {
		return nil, fmt.Errorf("frontier: shard %d: parked hosts: %w", f.o.Shard, err)
	}
	out := make([]frontierkeys.ParkedHost, 0, len(h))
	for host, v := range h {
		if p, ok := frontierkeys.ParseParked(host, v); ok {
			out = append(out, p)
		}
	}
	return out, nil
}
