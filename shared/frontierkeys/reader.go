package frontierkeys

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Reader is the frontier's read-only API: every process but the scheduler (trawlctl, the
// status page, devstack) reads the frontier through it and builds no key of its own, so
// the layout can change here and in the scheduler's scripts alone. It never writes.
type Reader struct {
	rdb    redis.UniversalClient
	prefix string
	shards int
}

// OpenReadOnly opens the frontier of a deployment for reading: its Redis, its key prefix
// (TRAWL_REDIS_PREFIX; "" means "trawl") and its shard count (TRAWL_SHARDS).
func OpenReadOnly(rdb redis.UniversalClient, prefix string, shards int) *Reader {
	return &Reader{rdb: rdb, prefix: prefix, shards: shards}
}

// ShardCounters are one shard's `stats` counters with the two host counts a progress
// report needs next to them.
type ShardCounters struct {
	Counters
	InFlight int64 // hosts with a task out
	Active   int64 // hosts holding a back queue (Shard.CountActive)
}

// Counters reads every shard's counters in one round trip, shard 0 first.
func (r *Reader) Counters(ctx context.Context) ([]ShardCounters, error) {
	type cmds struct {
		stats    *redis.MapStringStringCmd
		inflight *redis.IntCmd
		active   func() int64
	}
	cs := make([]cmds, r.shards)
	_, err := r.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for k := range cs {
			ks := ForShard(r.prefix, k, r.shards)
			cs[k] = cmds{p.HGetAll(ctx, ks.Stats()), p.ZCard(ctx, ks.Inflight()), ks.CountActive(ctx, p)}
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("frontier counters: %w", err)
	}
	out := make([]ShardCounters, len(cs))
	for k, c := range cs {
		out[k] = ShardCounters{Counters: ParseStats(c.stats.Val()), InFlight: c.inflight.Val(), Active: c.active()}
	}
	return out, nil
}

// Sum is the whole frontier's counters: every shard's added up.
func Sum(shards []ShardCounters) ShardCounters {
	var sum ShardCounters
	for _, s := range shards {
		sum.Counters.Add(s.Counters)
		sum.InFlight += s.InFlight
		sum.Active += s.Active
	}
	return sum
}

// ShardStats reads one shard's `stats` counters.
func (r *Reader) ShardStats(ctx context.Context, shard int) (Counters, error) {
	key := ForShard(r.prefix, shard, r.shards).Stats()
	h, err := r.rdb.HGetAll(ctx, key).Result()
	if err != nil {
		return Counters{}, fmt.Errorf("read %s: %w", key, err)
	}
	return ParseStats(h), nil
}

// ShardStatus is one shard as `trawlctl status` and the scheduler's status page show it.
type ShardStatus struct {
	Shard  int
	Paused bool
	// Front is the length of each front queue shown (Status.Front of them), 0 first.
	Front    []int64
	Active   int64 // hosts holding a back queue
	InHeap   int64 // idle active hosts
	Ready    int64 // of them, due at the status's time
	InFlight int64 // hosts with a task out, one task each
	Counters
}

// Add adds o to s: a crawl's figures are the sums of its shards', a front queue's length
// the sum of that queue's, and the crawl is paused when a shard is. Shard is left as is.
func (s *ShardStatus) Add(o ShardStatus) {
	s.Paused = s.Paused || o.Paused
	for len(s.Front) < len(o.Front) {
		s.Front = append(s.Front, 0)
	}
	for q, n := range o.Front {
		s.Front[q] += n
	}
	s.Active += o.Active
	s.InHeap += o.InHeap
	s.Ready += o.Ready
	s.InFlight += o.InFlight
	s.Counters.Add(o.Counters)
}

// DispatchFigures are the schedulers' dispatch gate as they last published it (Dispatch);
// the scheduler's gate documents each figure.
type DispatchFigures struct {
	Held                                      string // the stages over their threshold ("" = dispatching)
	Holds, FetchQueued, FetchBusy, FetchLimit int64
	// The later stages' backlogs.
	Parser, Dedup, Frontier     int64
	PagesBytes, PagesMaxBytes   int64
	BodiesBytes, BodiesMaxBytes int64
	DocsLag, DocsMaxBytes       int64
	Indexers                    int64
}

// ParseDispatch decodes the dispatch hash (Dispatch); ok is false when it is empty, no
// scheduler having published its gate lately. A field that is absent or not a number
// reads as 0.
func ParseDispatch(h map[string]string) (d DispatchFigures, ok bool) {
	if len(h) == 0 {
		return DispatchFigures{}, false
	}
	get := func(k string) int64 { n, _ := strconv.ParseInt(h[k], 10, 64); return n }
	return DispatchFigures{Held: h[DispatchHeld], Holds: get(DispatchHolds),
		FetchQueued: get(DispatchFetchQueued), FetchBusy: get(DispatchFetchBusy), FetchLimit: get(DispatchFetchLimit),
		Parser: get(DispatchParser), Dedup: get(DispatchDedup), Frontier: get(DispatchFrontier),
		PagesBytes: get(DispatchPagesBytes), PagesMaxBytes: get(DispatchPagesMaxBytes),
		BodiesBytes: get(DispatchBodiesBytes), BodiesMaxBytes: get(DispatchBodiesMaxBytes),
		DocsLag: get(DispatchDocsLag), DocsMaxBytes: get(DispatchDocsMaxBytes), Indexers: get(DispatchIndexers),
	}, true
}

// Dispatch reads the dispatch gate's figures; ok is false when no scheduler published
// them lately.
func (r *Reader) Dispatch(ctx context.Context) (d DispatchFigures, ok bool, err error) {
	key := Dispatch(r.prefix)
	h, err := r.rdb.HGetAll(ctx, key).Result()
	if err != nil {
		return DispatchFigures{}, false, fmt.Errorf("read %s: %w", key, err)
	}
	d, ok = ParseDispatch(h)
	return d, ok, nil
}

// Status is every shard's queues and counters, and the dispatch gate.
type Status struct {
	Shards []ShardStatus
	// Front is how many front queues each ShardStatus shows.
	Front int
	// Dispatch is nil when no scheduler published its gate lately.
	Dispatch *DispatchFigures
}

// Status reads every shard in one round trip, hosts counted ready when due at now.
// frontQueues is F; 0 probes every queue a scheduler may have (MaxFrontQueues) and shows
// DefaultFrontQueues or up to the last that holds anything.
func (r *Reader) Status(ctx context.Context, now time.Time, frontQueues int) (Status, error) {
	nq := frontQueues
	if nq <= 0 {
		nq = MaxFrontQueues
	}
	reads := make([]*StatusReads, r.shards)
	var gate *redis.MapStringStringCmd
	// One round trip for every shard: the status of a 1024-shard crawl is still one call.
	_, err := r.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		gate = p.HGetAll(ctx, Dispatch(r.prefix))
		for k := range reads {
			reads[k] = ForShard(r.prefix, k, r.shards).QueueStatus(ctx, p, now, nq)
		}
		return nil
	})
	if err != nil {
		// As Redis said it: `trawlctl status` prints it after its own words.
		return Status{}, err
	}
	st := Status{Front: frontQueues}
	if st.Front <= 0 {
		lens := make([][]*redis.IntCmd, len(reads))
		for k, rd := range reads {
			lens[k] = rd.front
		}
		st.Front = probedFront(lens)
	}
	for k, rd := range reads {
		st.Shards = append(st.Shards, rd.Status(k, st.Front))
	}
	if d, ok := ParseDispatch(gate.Val()); ok {
		st.Dispatch = &d
	}
	return st, nil
}

// probedFront is how many front queues to show when F is unknown: the scheduler's default
// (DefaultFrontQueues), or up to the last queue of any shard that holds anything.
func probedFront(lens [][]*redis.IntCmd) int {
	shown := DefaultFrontQueues
	for _, fq := range lens {
		for q, c := range fq {
			if c.Val() > 0 {
				shown = max(shown, q+1)
			}
		}
	}
	return shown
}

// StatusReads are the reads of one shard's status queued on a pipeline (QueueStatus): the
// one list of what makes a shard's status, for the scheduler and for every reader.
type StatusReads struct {
	stats                 *redis.MapStringStringCmd
	heap, ready, inflight *redis.IntCmd
	active                func() int64
	paused                *redis.IntCmd
	front                 []*redis.IntCmd
}

// QueueStatus queues on p the reads of the shard's status: hosts counted ready when due
// at now, and the lengths of its first frontQueues front queues.
func (k Shard) QueueStatus(ctx context.Context, p redis.Pipeliner, now time.Time, frontQueues int) *StatusReads {
	rd := &StatusReads{
		stats:    p.HGetAll(ctx, k.Stats()),
		active:   k.CountActive(ctx, p),
		heap:     p.ZCard(ctx, k.Heap()),
		ready:    p.ZCount(ctx, k.Heap(), "-inf", strconv.FormatInt(now.UnixMilli(), 10)),
		inflight: p.ZCard(ctx, k.Inflight()),
		paused:   p.Exists(ctx, k.Paused()),
		front:    make([]*redis.IntCmd, frontQueues),
	}
	for q := range rd.front {
		rd.front[q] = p.LLen(ctx, k.FrontQueue(q))
	}
	return rd
}

// Status is what the reads found, once the pipeline ran, as shard's status showing its
// first front front queues (at most those queued).
func (rd *StatusReads) Status(shard, front int) ShardStatus {
	sh := ShardStatus{Shard: shard, Paused: rd.paused.Val() > 0, Front: make([]int64, min(front, len(rd.front))),
		Active: rd.active(), InHeap: rd.heap.Val(), Ready: rd.ready.Val(), InFlight: rd.inflight.Val(),
		Counters: ParseStats(rd.stats.Val())}
	for q := range sh.Front {
		sh.Front[q] = rd.front[q].Val()
	}
	return sh
}

// QueuedHosts reads each shard's active and parked hosts, once each (HKEYS of the host
// table and the parked table: no SCAN), shard 0 first.
func (r *Reader) QueuedHosts(ctx context.Context) ([][]string, error) {
	out := make([][]string, 0, r.shards)
	for k := range r.shards {
		sh := ForShard(r.prefix, k, r.shards)
		var active, parked *redis.StringSliceCmd
		if _, err := r.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			active = p.HKeys(ctx, sh.Hosts())
			parked = p.HKeys(ctx, sh.Parked())
			return nil
		}); err != nil {
			return nil, fmt.Errorf("read the hosts of shard %d: %w", k, err)
		}
		seen := map[string]bool{}
		var hs []string
		for _, h := range append(ActiveHosts(active.Val()), parked.Val()...) {
			if !seen[h] {
				seen[h] = true
				hs = append(hs, h)
			}
		}
		out = append(out, hs)
	}
	return out, nil
}

// CountQueued counts the URLs in the back queues and park lists of hosts on shard: every
// entry when covers is nil (their lengths, one round trip), else the entries whose URL
// covers accepts (each list read whole).
func (r *Reader) CountQueued(ctx context.Context, shard int, hosts []string, covers func(url string) bool) (int64, error) {
	sh := ForShard(r.prefix, shard, r.shards)
	var urls int64
	if covers == nil {
		cmds := make([]*redis.IntCmd, 0, 2*len(hosts))
		if _, err := r.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, h := range hosts {
				cmds = append(cmds, p.LLen(ctx, sh.BackQueue(h)), p.LLen(ctx, sh.Park(h)))
			}
			return nil
		}); err != nil {
			return 0, err
		}
		for _, c := range cmds {
			urls += c.Val()
		}
		return urls, nil
	}
	for _, h := range hosts {
		for _, key := range []string{sh.BackQueue(h), sh.Park(h)} {
			entries, err := r.rdb.LRange(ctx, key, 0, -1).Result()
			if err != nil {
				return 0, fmt.Errorf("read %s: %w", key, err)
			}
			for _, ent := range entries {
				// A malformed entry names no URL a rule could cover.
				if e, err := ParseEntry(ent); err == nil && covers(e.URL) {
					urls++
				}
			}
		}
	}
	return urls, nil
}

// QueueHead is a host's back queue: its length and its first entries, next to go first.
type QueueHead struct {
	Len  int64
	Head []Entry
}

// BackQueues reads the back queue of each host (its shard and name, as HostWait gives
// them), at most n entries of each (at least one), in one round trip.
func (r *Reader) BackQueues(ctx context.Context, hosts []HostWait, n int) ([]QueueHead, error) {
	lens := make([]*redis.IntCmd, len(hosts))
	heads := make([]*redis.StringSliceCmd, len(hosts))
	n = max(n, 1) // LRANGE 0 -1 would read a whole queue
	_, err := r.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, h := range hosts {
			bq := ForShard(r.prefix, h.Shard, r.shards).BackQueue(h.Host)
			lens[i] = p.LLen(ctx, bq)
			heads[i] = p.LRange(ctx, bq, 0, int64(n-1))
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("frontier back queues: %w", err)
	}
	out := make([]QueueHead, len(hosts))
	for i := range hosts {
		out[i].Len = lens[i].Val()
		for _, v := range heads[i].Val() {
			if e, err := ParseEntry(v); err == nil {
				out[i].Head = append(out[i].Head, e)
			}
		}
	}
	return out, nil
}

// SetPaused pauses (pause true) or resumes the given shards of the deployment's n, and reads
// back each one's resulting state as Redis has it, in one round trip: an operator's switch,
// which the scheduler only reads.
func SetPaused(ctx context.Context, rdb redis.UniversalClient, prefix string, n int, shards []int, pause bool) ([]bool, error) {
	key := func(k int) string { return ForShard(prefix, k, n).Paused() }
	states := make([]*redis.IntCmd, len(shards))
	_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, k := range shards {
			if pause {
				p.Set(ctx, key(k), "1", 0)
			} else {
				p.Del(ctx, key(k))
			}
		}
		for i, k := range shards {
			states[i] = p.Exists(ctx, key(k))
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("redis: %w", err)
	}
	out := make([]bool, len(shards))
	for i, c := range states {
		out[i] = c.Val() > 0
	}
	return out, nil
}

// ErrorLog reads every shard's error log (Shard.Errors: the last outcomes retried or
// failed, newest first, as many as the scheduler keeps), in one round trip, shard 0 first.
// Lines it cannot read are left out.
func (r *Reader) ErrorLog(ctx context.Context) ([]ErrorRecord, error) {
	cmds := make([]*redis.StringSliceCmd, r.shards)
	_, err := r.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for k := range cmds {
			cmds[k] = p.LRange(ctx, ForShard(r.prefix, k, r.shards).Errors(), 0, -1)
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("frontier error log: %w", err)
	}
	var out []ErrorRecord
	for _, c := range cmds {
		for _, l := range c.Val() {
			if rec, ok := ParseErrorRecord(l); ok {
				out = append(out, rec)
			}
		}
	}
	return out, nil
}
