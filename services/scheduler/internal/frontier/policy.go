package frontier

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/trawl/trawl/shared/frontierkeys"
	"github.com/trawl/trawl/shared/policy"
	"github.com/trawl/trawl/shared/politeness"
	"github.com/trawl/trawl/shared/redisx"
)

// PolicyChange is what SyncPolicy changed in the shard's table: the fields written and the
// fields deleted.
type PolicyChange struct {
	Set, Deleted []string
}

// Empty says nothing changed.
func (c PolicyChange) Empty() bool { return len(c.Set) == 0 && len(c.Deleted) == 0 }

// SyncPolicy makes the shard's policy table hold what the rule set implies
// (politeness.PolicyTable: each host and domain rule's limits resolved in Go), writing only
// the entries that differ: it reads the table, so it is right at start, after a restart of
// Redis, and when several processes serve the shard. Every change gives the table a new
// generation (frontierkeys.PolicyGenField), and a table without rules has none. The
// scripts read a host's entry at each step, so a change is in force from the next step on.
func (f *Frontier) SyncPolicy(ctx context.Context, s *policy.Set) (PolicyChange, error) {
	want := politeness.PolicyTable(s)
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
// once). Either way it then resumes the park lists of the hosts the rules do not block
// (resumeUnblocked). Run it at start, on every change, once more a little after a change
// and periodically: those passes find URLs a fetcher parked under the old rules while the
// change spread.
func (f *Frontier) ApplyPolicy(ctx context.Context, s *policy.Set) (PolicyApplied, error) {
	ch, err := f.SyncPolicy(ctx, s)
	if err != nil {
		return PolicyApplied{}, err
	}
	a := PolicyApplied{PolicyChange: ch}
	if !ch.Empty() {
		if a.Parked, err = f.ParkBlocked(ctx); err != nil {
			return a, err
		}
	}
	a.Resumed, err = f.resumeUnblocked(ctx, s)
	return a, err
}

// resumeUnblocked resumes the park lists of the hosts no host or domain rule blocks: after
// a change that lifted a block, and on the passes with the table unchanged, the lists a
// fetcher still on older rules filled after it. The list of a host a URL-prefix block
// covers holds URLs that are still blocked and URLs whose block was removed or narrowed
// (the policy table holds no prefix rule, so only the set can tell them apart): it is
// sifted, each URL resumed unless the set blocks it (siftParked). It costs one HKEYS when
// nothing is parked.
func (f *Frontier) resumeUnblocked(ctx context.Context, s *policy.Set) (int64, error) {
	hosts, err := f.rdb.HKeys(ctx, f.k.Parked()).Result()
	if err != nil {
		return 0, fmt.Errorf("frontier: shard %d: parked hosts: %w", f.o.Shard, err)
	}
	if s == nil {
		s = policy.Empty()
	}
	var whole, sift []string
	for _, h := range hosts {
		switch {
		case s.Host(h).Blocked():
		case s.PrefixBlocks(h):
			sift = append(sift, h)
		default:
			whole = append(whole, h)
		}
	}
	// Only the lists sifted now are remembered, so the memo holds no older set.
	f.sifted.keep(sift)
	var n int64
	for _, h := range whole {
		m, err := f.resumeHost(ctx, h)
		n += m
		if err != nil {
			return n, err
		}
	}
	for _, h := range sift {
		m, err := f.siftParked(ctx, s, h)
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// siftMemo remembers, per host, the set its park list was last sifted against and the
// list's length after it: a list that has not grown since, under the same set, holds only
// URLs that set blocks, so the passes every 30 s do not read it again. Only a sift removes
// entries other than a whole-list resume, and parking appends, so an unchanged length under
// one set is an unchanged list.
type siftMemo struct {
	mu sync.Mutex
	m  map[string]siftMark
}

type siftMark struct {
	set *policy.Set
	n   int64
}

func (m *siftMemo) get(h string) (siftMark, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	k, ok := m.m[h]
	return k, ok
}

func (m *siftMemo) put(h string, k siftMark) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.m == nil {
		m.m = map[string]siftMark{}
	}
	m.m[h] = k
}

// keep forgets every host but these.
func (m *siftMemo) keep(hosts []string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	in := make(map[string]bool, len(hosts))
	for _, h := range hosts {
		in[h] = true
	}
	for h := range m.m {
		if !in[h] {
			delete(m.m, h)
		}
	}
}

// siftParked resumes the entries of host h's park list whose URL the set no longer blocks
// and keeps the others parked, in their order: Go reads a chunk from the list's end and
// decides each entry, and sift.lua applies it only if the chunk is still there (else Go
// reads again). It returns how many entries it resumed.
func (f *Frontier) siftParked(ctx context.Context, s *policy.Set, h string) (int64, error) {
	key := f.k.Park(h)
	total, err := f.rdb.LLen(ctx, key).Result()
	if err != nil {
		return 0, fmt.Errorf("frontier: shard %d: sift %s: %w", f.o.Shard, h, err)
	}
	if k, ok := f.sifted.get(h); ok && k.set == s && k.n == total {
		return 0, nil
	}
	var n int64
	tries, left := 0, total
	for done := int64(0); done < total; {
		c := min(total-done, resumeChunk)
		es, err := f.rdb.LRange(ctx, key, -c, -1).Result()
		if err != nil {
			return n, fmt.Errorf("frontier: shard %d: sift %s: %w", f.o.Shard, h, err)
		}
		if len(es) == 0 {
			break
		}
		args := append(f.args(2+2*len(es)), h, strconv.Itoa(len(es)))
		for _, e := range es {
			act := "k"
			if en, err := ParseEntry(e); err == nil && !s.URL(en.URL).Blocked() {
				act = "r"
			}
			args = append(args, e, act)
		}
		v, err := f.run(ctx, scriptSift, args)
		if err != nil {
			return n, err
		}
		r, err := redisx.Int64s(v)
		if err != nil || len(r) != 2 {
			return n, fmt.Errorf("frontier: shard %d: sift %s: unexpected reply %v: %w", f.o.Shard, h, v, err)
		}
		m := r[0]
		switch {
		case m == -2:
			// The shard's table blocks the host after all (another process wrote it).
			return n, nil
		case m < 0:
			// Parking appended to the list meanwhile: read its end again.
			if tries++; tries > 100 {
				return n, fmt.Errorf("frontier: shard %d: sift %s: the park list kept moving", f.o.Shard, h)
			}
			continue
		}
		n += m
		left = r[1]
		done += int64(len(es))
	}
	if tries > 0 {
		// Entries appended meanwhile took the place of some the pass did not reach: the
		// next pass reads the whole list again.
		return n, nil
	}
	f.sifted.put(h, siftMark{set: s, n: left})
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
