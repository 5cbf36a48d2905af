package stack

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/trawl/trawl/shared/topology"
)

// Progress is a snapshot of a crawl: the frontier's counters from Redis (summed over
// shards) and the pipeline's backlog from JetStream.
type Progress struct {
	At         time.Time
	Accepted   int64 // URLs accepted into the frontier
	Queued     int64 // waiting in front or back queues (including retries not yet due)
	InFlight   int64 // tasks out with a fetcher
	Dispatched int64
	Expired    int64 // leases that expired (their fetcher died or was too slow)
	Fetched    int64
	Failed     int64
	Disallowed int64
	OutOfScope int64
	OverBudget int64
	Hosts      int64 // active back queues
	// Backlog is messages not yet handled by each pipeline stage, by stage name.
	Backlog map[string]uint64
	// Seqs are the streams' last sequence numbers; unchanged Seqs between two snapshots
	// mean nothing was published in between.
	Seqs  map[string]uint64
	Pages uint64 // responses published to crawl.pages
	Docs  uint64 // documents published to crawl.docs
}

// Terminal is the number of URLs that reached a terminal state.
func (p Progress) Terminal() int64 {
	return p.Fetched + p.Failed + p.Disallowed + p.OutOfScope + p.OverBudget
}

// Quiet reports that nothing is queued, in flight or waiting in any stage.
func (p Progress) Quiet() bool {
	if p.Accepted == 0 || p.Queued != 0 || p.InFlight != 0 {
		return false
	}
	for _, n := range p.Backlog {
		if n != 0 {
			return false
		}
	}
	return true
}

func (p Progress) sameSeqs(q Progress) bool {
	if len(p.Seqs) != len(q.Seqs) {
		return false
	}
	for k, v := range p.Seqs {
		if q.Seqs[k] != v {
			return false
		}
	}
	return true
}

// String is the one-line progress report of `make run`.
func (p Progress) String() string {
	var backlog []string
	for _, k := range []string{"dedup", "scheduler", "fetch", "outcomes", "parser"} {
		if n := p.Backlog[k]; n > 0 {
			backlog = append(backlog, fmt.Sprintf("%s=%d", k, n))
		}
	}
	bl := "none"
	if len(backlog) > 0 {
		bl = strings.Join(backlog, " ")
	}
	return fmt.Sprintf("fetched=%d failed=%d disallowed=%d over-budget=%d | queued=%d in-flight=%d active-hosts=%d | docs=%d | backlog: %s",
		p.Fetched, p.Failed, p.Disallowed, p.OverBudget, p.Queued, p.InFlight, p.Hosts, p.Docs, bl)
}

// Progress reads a snapshot.
func (s *Stack) Progress(ctx context.Context) (Progress, error) {
	return ReadProgress(ctx, s.js, s.rdb, s.prefix, s.shards)
}

// ReadProgress reads a snapshot of any deployment: prefix is TRAWL_REDIS_PREFIX and
// shards TRAWL_SHARDS. It relies only on the documented Redis keys of the scheduler
// (docs/architecture.md) and the stream and consumer names in shared/topology.
func ReadProgress(ctx context.Context, js jetstream.JetStream, rdb redis.UniversalClient, prefix string, shards int) (Progress, error) {
	p := Progress{At: time.Now(), Backlog: map[string]uint64{}, Seqs: map[string]uint64{}}
	for shard := range shards {
		ks := fmt.Sprintf("%s:{s%d}:", prefix, shard)
		pipe := rdb.Pipeline()
		stats := pipe.HGetAll(ctx, ks+"stats")
		inflight := pipe.ZCard(ctx, ks+"inflight")
		hosts := pipe.HLen(ctx, ks+"hosts")
		if _, err := pipe.Exec(ctx); err != nil && err != redis.Nil {
			return p, fmt.Errorf("stack: progress: redis: %w", err)
		}
		m := stats.Val()
		get := func(k string) int64 { n, _ := strconv.ParseInt(m[k], 10, 64); return n }
		p.Accepted += get("accepted")
		p.Queued += get("queued")
		p.Dispatched += get("dispatched")
		p.Expired += get("expired")
		p.Fetched += get("fetched")
		p.Failed += get("failed")
		p.Disallowed += get("disallowed")
		p.OutOfScope += get("out_of_scope")
		p.OverBudget += get("over_budget")
		p.InFlight += inflight.Val()
		p.Hosts += hosts.Val()
	}
	for _, name := range []string{topology.StreamDiscovered, topology.StreamFrontier, topology.StreamFetch, topology.StreamFetched, topology.StreamPages, topology.StreamDocs} {
		st, err := js.Stream(ctx, name)
		if err != nil {
			return p, fmt.Errorf("stack: progress: stream %s: %w", name, err)
		}
		info, err := st.Info(ctx)
		if err != nil {
			return p, fmt.Errorf("stack: progress: stream %s: %w", name, err)
		}
		p.Seqs[name] = info.State.LastSeq
		switch name {
		case topology.StreamDiscovered:
			p.Backlog["dedup"] = info.State.Msgs
		case topology.StreamFrontier:
			p.Backlog["scheduler"] = info.State.Msgs
		case topology.StreamFetch:
			p.Backlog["fetch"] = info.State.Msgs
		case topology.StreamPages:
			p.Pages = info.State.LastSeq
		case topology.StreamDocs:
			p.Docs = info.State.LastSeq
		}
	}
	pending := func(stream, consumer string) (uint64, error) {
		c, err := js.Consumer(ctx, stream, consumer)
		if err != nil {
			return 0, fmt.Errorf("stack: progress: consumer %s: %w", consumer, err)
		}
		info, err := c.Info(ctx)
		if err != nil {
			return 0, fmt.Errorf("stack: progress: consumer %s: %w", consumer, err)
		}
		return info.NumPending + uint64(info.NumAckPending), nil
	}
	n, err := pending(topology.StreamPages, topology.ConsumerParser)
	if err != nil {
		return p, err
	}
	p.Backlog["parser"] = n
	for shard := range shards {
		n, err := pending(topology.StreamFetched, topology.SchedulerFetchedConsumer(shard))
		if err != nil {
			return p, err
		}
		p.Backlog["outcomes"] += n
	}
	return p, nil
}

// WaitIdle polls every interval until the crawl is over: nothing queued, in flight or in
// any stage's backlog, in two consecutive snapshots with no message published between
// them. report, if set, gets every snapshot.
func (s *Stack) WaitIdle(ctx context.Context, every time.Duration, report func(Progress)) (Progress, error) {
	return WaitIdle(ctx, every, func(ctx context.Context) (Progress, error) { return s.Progress(ctx) }, report)
}

// WaitIdle is the polling loop behind Stack.WaitIdle, for any source of snapshots.
func WaitIdle(ctx context.Context, every time.Duration, read func(context.Context) (Progress, error), report func(Progress)) (Progress, error) {
	var prev Progress
	var havePrev bool
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		p, err := read(ctx)
		if err == nil {
			if report != nil {
				report(p)
			}
			if p.Quiet() && havePrev && prev.Quiet() && p.sameSeqs(prev) {
				return p, nil
			}
			prev, havePrev = p, true
		}
		select {
		case <-ctx.Done():
			if err != nil {
				return prev, fmt.Errorf("stack: wait idle: %w (last error: %v)", ctx.Err(), err)
			}
			return prev, fmt.Errorf("stack: wait idle: %w; last progress: %s", ctx.Err(), prev)
		case <-t.C:
		}
	}
}

func probe(ctx context.Context, addr string) bool {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/readyz", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}
