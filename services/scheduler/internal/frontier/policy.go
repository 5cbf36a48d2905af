package frontier

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/trawl/trawl/shared/frontierkeys"
	"github.com/trawl/trawl/shared/policy"
	"github.com/trawl/trawl/shared/politeness"
	"github.com/trawl/trawl/shared/redisx"
)

// PolicyChange is what SyncPolicy changed on the shard.
type PolicyChange struct {
	// Gen is the shard's generation now ("" while no host or domain rule is in force);
	// Changed says it was another before.
	Gen     string
	Changed bool
	// Hosts is how many active hosts' limits were written.
	Hosts int
}

// Empty says nothing changed.
func (c PolicyChange) Empty() bool { return !c.Changed }

// limitsChunk bounds the hosts one limits.lua call stores, and so its run time.
const limitsChunk = 1000

// SyncPolicy brings the shard in line with a rule set: it resolves every host's limits in
// Go (politeness.Resolve) and, when the set's generation is not the shard's, makes it the
// shard's and writes the limits of every active host into the host's state, the first
// chunk of hosts in the same script as the new generation. It reads the shard's
// generation, so it is right at start, after a restart of Redis, and when several
// processes serve the shard. The cost of a change is one HKEYS of the host table (at most
// TRAWL_BACK_QUEUES hosts) and one script per limitsChunk active hosts, one HSET each; a
// host activated meanwhile under the old generation is stale, and the dispatch hands it
// to Go (ResolvePending) before leasing it. A shard whose policy hash holds more than the
// generation (the layout that kept one entry per rule) is rewritten.
func (f *Frontier) SyncPolicy(ctx context.Context, s *policy.Set) (PolicyChange, error) {
	res := politeness.Resolve(s)
	f.res.Store(res)
	var gen *redis.StringCmd
	var n *redis.IntCmd
	_, err := f.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		gen = p.HGet(ctx, f.k.Policy(), frontierkeys.PolicyGenField)
		n = p.HLen(ctx, f.k.Policy())
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return PolicyChange{}, fmt.Errorf("frontier: shard %d: read the rules' generation: %w", f.o.Shard, err)
	}
	ch := PolicyChange{Gen: res.Gen()}
	if gen.Val() == res.Gen() && n.Val() <= 1 {
		return ch, nil
	}
	ch.Changed = true
	fields, err := f.rdb.HKeys(ctx, f.k.Hosts()).Result()
	if err != nil {
		return ch, fmt.Errorf("frontier: shard %d: active hosts: %w", f.o.Shard, err)
	}
	hosts := frontierkeys.ActiveHosts(fields)
	if res.Gen() == "" {
		hosts = nil
	}
	for i := 0; i == 0 || i < len(hosts); i += limitsChunk {
		m, err := f.storeLimits(ctx, res, i == 0, hosts[i:min(i+limitsChunk, len(hosts))])
		if err != nil {
			return ch, err
		}
		if m < 0 {
			// Another process made other rules the shard's meanwhile; it writes its hosts.
			return ch, nil
		}
		ch.Hosts += m
	}
	return ch, nil
}

// storeLimits stores hosts' limits under res (limits.lua), making res's generation the
// shard's first when change is set. It returns how many it stored, or -1 when res's
// generation is not the shard's.
func (f *Frontier) storeLimits(ctx context.Context, res *politeness.Resolved, change bool, hosts []string) (int, error) {
	args := append(f.args(2+2*len(hosts)), res.Gen(), "0")
	if change {
		args[len(args)-1] = "1"
	}
	for _, h := range hosts {
		args = append(args, h, res.Entry(h))
	}
	v, err := f.run(ctx, scriptLimits, args)
	if err != nil {
		return 0, err
	}
	m, ok := v.(int64)
	if !ok {
		return 0, fmt.Errorf("frontier: shard %d: limits: unexpected reply %v", f.o.Shard, v)
	}
	return int(m), nil
}

// ResolvePending stores the limits of the hosts waiting for them (frontierkeys.Shard.Resolve:
// admitted, or left active, under older rules), which puts them back in the heap. It
// returns how many it stored: none before the first SyncPolicy, or while the shard's
// generation is not the one this process resolved (its rules are about to change; the
// hosts wait for the next call).
func (f *Frontier) ResolvePending(ctx context.Context) (int, error) {
	res := f.res.Load()
	if res == nil || res.Gen() == "" {
		return 0, nil
	}
	hosts, err := f.rdb.HKeys(ctx, f.k.Resolve()).Result()
	if err != nil {
		return 0, fmt.Errorf("frontier: shard %d: hosts to resolve: %w", f.o.Shard, err)
	}
	n := 0
	for i := 0; i < len(hosts); i += limitsChunk {
		m, err := f.storeLimits(ctx, res, false, hosts[i:min(i+limitsChunk, len(hosts))])
		if err != nil || m < 0 {
			return n, err
		}
		n += m
	}
	return n, nil
}

// PolicyApplied is what ApplyPolicy did.
type PolicyApplied struct {
	PolicyChange
	// Parked URLs of hosts the change blocks; Resumed URLs of hosts it unblocked.
	Parked, Resumed int64
}

// resumeChunk bounds the entries one resume call moves, and so its run time.
const resumeChunk = 1000

// ApplyPolicy brings the shard in line with a rule set: it syncs the hosts' limits
// (SyncPolicy) and stores those of the hosts waiting for them (ResolvePending); when the
// rules changed it parks the queues of the active hosts the rules now block (a blocked host would be parked when next due anyway; this does it at
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
	if _, err := f.ResolvePending(ctx); err != nil {
		return a, err
	}
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
// (a host's limits hold no prefix rule, so only the set can tell them apart): it is
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

// ParkBlocked parks the queues of the active hosts whose stored limits block them, in
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
