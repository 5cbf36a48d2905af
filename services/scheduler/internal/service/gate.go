package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/trawl/trawl/services/scheduler/internal/config"
	"github.com/trawl/trawl/shared/backlog"
	"github.com/trawl/trawl/shared/frontierkeys"
	"github.com/trawl/trawl/shared/topology"
)

const (
	// gatePoll is how often the gate reads the fetch consumer and the stage backlogs. A
	// dispatcher out of credit asks for a fresh reading of the fetch consumer at most every
	// gateMinPoll, so fast fetches are not held to one credit per poll.
	gatePoll    = 250 * time.Millisecond
	gateMinPoll = 10 * time.Millisecond
	// gateMinBusy is the fetch concurrency assumed while fewer tasks are being fetched:
	// fetches shorter than a poll show few tasks at once whatever the rate.
	gateMinBusy = 4
	// rateWindow is the shortest interval over which the fetchers' take rate is measured.
	rateWindow = 100 * time.Millisecond
	// dispatchStateTTL bounds how long a stopped scheduler's figures stay visible.
	dispatchStateTTL = 10 * time.Second
)

// Figures are what the gate last read: the fetchers' capacity and each stage's backlog.
type Figures struct {
	// FetchQueued are tasks in the fetch stream no fetcher has taken (consumer NumPending),
	// FetchBusy the tasks fetchers hold (NumAckPending), FetchLimit the most FetchQueued may
	// reach: (TRAWL_DISPATCH_AHEAD−1) × max(FetchBusy, 4).
	FetchQueued, FetchBusy, FetchLimit uint64
	// Backlogs: pages not yet parsed, discovered batches not yet deduplicated, frontier
	// messages not yet added; PagesBytes of PagesMaxBytes (0 = unlimited) in CRAWL_PAGES,
	// BodiesBytes of BodiesMaxBytes in the CRAWL_BODIES object store.
	Parser, Dedup, Frontier     uint64
	PagesBytes, PagesMaxBytes   int64
	BodiesBytes, BodiesMaxBytes int64
	// DocsLag is the bytes of CRAWL_DOCS the slowest registered indexer (Indexers of them,
	// topology.RegisteredMeta) has not acked yet, DocsMaxBytes the stream's byte limit:
	// the oldest unacked document is dropped when the lag reaches it.
	DocsLag, DocsMaxBytes int64
	Indexers              int
	// Held names the stages over their threshold while dispatch is held ("" = running).
	Held string
}

// gate decides how many fetch tasks the dispatchers of this process may lease. It keeps the
// tasks waiting for a fetcher at a small multiple of the tasks being fetched (so a task
// starts soon after its lease begins) and holds dispatch while a later stage falls behind
// (backpressure), before any stream limit is reached; it resumes when every backlog is
// below the resume fraction of its threshold.
type gate struct {
	js  jetstream.JetStream
	rdb redis.UniversalClient
	key string
	cfg config.Config
	m   *metrics
	log *slog.Logger

	mu sync.Mutex
	// fig is the last reading; polled when it was taken; sincePoll counts tasks published
	// since, outstanding those taken and not yet published.
	fig                    Figures
	polled                 time.Time
	sincePoll, outstanding int
	read, polling          bool
	// rate is the tasks per second the fetchers take (a moving average of the fetch
	// consumer's delivered count), measured from rateAt and rateSeq.
	rate    float64
	rateAt  time.Time
	rateSeq uint64
	held    map[string]bool
	// tasksPerMsg is the moving average of tasks per crawl.fetch message this process
	// published (TRAWL_TASK_BATCH at most): the fetch consumer counts messages, the gate
	// tasks.
	tasksPerMsg float64
}

func newGate(cfg config.Config, js jetstream.JetStream, rdb redis.UniversalClient, m *metrics, log *slog.Logger) *gate {
	return &gate{js: js, rdb: rdb, key: frontierkeys.Dispatch(cfg.Common.RedisPrefix), cfg: cfg, m: m, log: log.With("loop", "dispatch gate"), held: map[string]bool{}}
}

// run polls until ctx ends.
func (g *gate) run(ctx context.Context) {
	t := time.NewTicker(gatePoll)
	defer t.Stop()
	for {
		if err := g.poll(ctx); err != nil && ctx.Err() == nil {
			g.log.Debug("dispatch gate: reading JetStream failed", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// take returns how many of want tasks may be leased now (0 while held or out of credit).
// Every task taken must be given back with published.
func (g *gate) take(ctx context.Context, want int) int {
	g.mu.Lock()
	stale := g.credit() <= 0 && time.Since(g.polled) >= gateMinPoll
	g.mu.Unlock()
	if stale {
		_ = g.pollFetch(ctx)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	n := min(want, max(g.credit(), 0))
	g.outstanding += n
	return n
}

// published gives back taken tasks: n were taken, sent of them were published.
func (g *gate) published(n, sent int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.outstanding -= n
	g.sincePoll += sent
}

// perMessage records that tasks went out in msgs messages.
func (g *gate) perMessage(tasks, msgs int) {
	if msgs == 0 {
		return
	}
	r := float64(tasks) / float64(msgs)
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.tasksPerMsg == 0 {
		g.tasksPerMsg = r
	} else {
		g.tasksPerMsg = 0.9*g.tasksPerMsg + 0.1*r
	}
}

// tasks converts a count of crawl.fetch messages to tasks; called with mu held.
func (g *gate) tasks(msgs uint64) uint64 {
	return uint64(math.Ceil(float64(msgs) * max(g.tasksPerMsg, 1)))
}

// credit is what may still be leased; called with mu held.
func (g *gate) credit() int {
	if !g.read || g.fig.Held != "" {
		return 0
	}
	return int(g.fig.FetchLimit) - int(g.fig.FetchQueued) - g.sincePoll - g.outstanding
}

func (g *gate) poll(ctx context.Context) error {
	return errors.Join(g.pollFetch(ctx), g.pollBacklogs(ctx))
}

// holding reports whether dispatch is held for backpressure.
func (g *gate) holding() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.fig.Held != ""
}

// pollFetch reads the fetch consumer: the capacity figures. One reading at a time: the
// tasks counted since the last one are settled against it.
func (g *gate) pollFetch(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	g.mu.Lock()
	if g.polling {
		g.mu.Unlock()
		return nil
	}
	g.polling = true
	base := g.sincePoll
	g.mu.Unlock()
	defer func() {
		g.mu.Lock()
		g.polling = false
		g.mu.Unlock()
	}()
	start := time.Now()
	c, err := g.js.Consumer(ctx, topology.StreamFetch, topology.ConsumerFetcher)
	if err != nil {
		return fmt.Errorf("consumer %s/%s: %w", topology.StreamFetch, topology.ConsumerFetcher, err)
	}
	info := c.CachedInfo()
	g.mu.Lock()
	busy, queued := g.tasks(uint64(max(info.NumAckPending, 0))), g.tasks(info.NumPending)
	rate := g.takeRate(start, info.Delivered.Consumer) * max(g.tasksPerMsg, 1)
	g.mu.Unlock()
	limit := fetchLimit(g.cfg.DispatchAhead, busy, rate)
	g.mu.Lock()
	g.fig.FetchQueued, g.fig.FetchBusy, g.fig.FetchLimit = queued, busy, limit
	// Tasks published while the request was out may or may not be in the reading; counting
	// them again errs on the side of fewer tasks out.
	g.sincePoll -= base
	g.polled = start
	g.read = true
	g.mu.Unlock()
	g.m.fetchQueued.Set(float64(queued))
	g.m.fetchBusy.Set(float64(busy))
	g.m.fetchLimit.Set(float64(limit))
	return nil
}

// fetchLimit is the most tasks that may wait for a fetcher. Two bounds, the larger wins:
// slow fetches hold many tasks at once, so (ahead−1) times the tasks being fetched keeps
// every fetch slot fed; fast fetches hold few at once, so the queue must instead last until
// the next reading at the rate tasks are taken (Little's law: a queue of rate × gatePoll
// waits about one poll). Either way a task waits moments, never a lease.
func fetchLimit(ahead int, busy uint64, rate float64) uint64 {
	return max(uint64(max(ahead-1, 1))*max(busy, gateMinBusy), uint64(rate*gatePoll.Seconds()))
}

// takeRate updates and returns the fetchers' take rate from the fetch consumer's delivered
// count read at now; called with mu held.
func (g *gate) takeRate(now time.Time, delivered uint64) float64 {
	switch {
	case g.rateAt.IsZero() || delivered < g.rateSeq:
		// First reading, or the consumer was made again.
		g.rateAt, g.rateSeq = now, delivered
	case now.Sub(g.rateAt) >= rateWindow:
		r := float64(delivered-g.rateSeq) / now.Sub(g.rateAt).Seconds()
		g.rate = (g.rate + r) / 2
		g.rateAt, g.rateSeq = now, delivered
	}
	return g.rate
}

// pollBacklogs reads the later stages' backlogs, holds or resumes dispatch, and publishes
// the figures in Redis.
func (g *gate) pollBacklogs(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	var errs []error
	g.mu.Lock()
	f := g.fig
	g.mu.Unlock()
	// A reading that fails keeps the last one; the others still count.
	if n, err := backlog.Stage(ctx, g.js, backlog.Parser, 0); err != nil {
		errs = append(errs, err)
	} else {
		f.Parser = n
	}
	// Dedup's consumer's own count: on its work queue, read by it alone, the queue's size.
	if n, err := backlog.Pending(ctx, g.js, topology.StreamDiscovered, topology.ConsumerDedup); err != nil {
		errs = append(errs, err)
	} else {
		f.Dedup = n
	}
	if n, err := backlog.Stage(ctx, g.js, backlog.Scheduler, 0); err != nil {
		errs = append(errs, err)
	} else {
		f.Frontier = n
	}
	if s, err := g.js.Stream(ctx, topology.StreamPages); err != nil {
		errs = append(errs, fmt.Errorf("stream %s: %w", topology.StreamPages, err))
	} else {
		info := s.CachedInfo()
		f.PagesBytes, f.PagesMaxBytes = int64(info.State.Bytes), info.Config.MaxBytes
	}

	if s, err := g.js.Stream(ctx, topology.BodiesStream); err == nil {
		info := s.CachedInfo()
		f.BodiesBytes, f.BodiesMaxBytes = int64(info.State.Bytes), info.Config.MaxBytes
	} else if !errors.Is(err, jetstream.ErrStreamNotFound) {
		errs = append(errs, fmt.Errorf("stream %s: %w", topology.BodiesStream, err))
	}
	if err := readDocsLag(ctx, g.js, &f); err != nil {
		errs = append(errs, err)
	}

	h := g.cfg.Hold
	fill := func(frac float64, limit int64) float64 {
		if limit <= 0 {
			return 0
		}
		return frac * float64(limit)
	}
	stages := []struct {
		name      string
		v, thresh float64
	}{
		{"parser", float64(f.Parser), float64(h.ParserBacklog)},
		{"pages-bytes", float64(f.PagesBytes), fill(h.PagesFill, f.PagesMaxBytes)},
		{"bodies-bytes", float64(f.BodiesBytes), fill(h.PagesFill, f.BodiesMaxBytes)},
		{"docs-lag", float64(f.DocsLag), fill(h.DocsFill, f.DocsMaxBytes)},
		{"dedup", float64(f.Dedup), float64(h.DedupBacklog)},
		{"frontier", float64(f.Frontier), float64(h.FrontierBacklog)},
	}
	g.mu.Lock()
	var reasons []string
	for _, st := range stages {
		was := g.held[st.name]
		now := st.thresh > 0 && (st.v >= st.thresh || (was && st.v >= h.Resume*st.thresh))
		if now && !was {
			g.m.backpressure.WithLabelValues(st.name).Inc()
			g.log.Warn("dispatch held: a later stage is behind", "stage", st.name, "backlog", int64(st.v), "threshold", int64(st.thresh))
		} else if was && !now {
			g.log.Info("dispatch resumed: stage caught up", "stage", st.name, "backlog", int64(st.v))
		}
		g.held[st.name] = now
		g.m.holding.WithLabelValues(st.name).Set(b2f(now))
		if now {
			reasons = append(reasons, st.name)
		}
	}
	newHold := f.Held == "" && len(reasons) > 0
	f.Held = strings.Join(reasons, ",")
	f.FetchQueued, f.FetchBusy, f.FetchLimit = g.fig.FetchQueued, g.fig.FetchBusy, g.fig.FetchLimit
	g.fig = f
	g.mu.Unlock()

	_, err := g.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.HSet(ctx, g.key, frontierkeys.DispatchHeld, f.Held,
			frontierkeys.DispatchFetchQueued, f.FetchQueued, frontierkeys.DispatchFetchBusy, f.FetchBusy,
			frontierkeys.DispatchFetchLimit, f.FetchLimit,
			frontierkeys.DispatchParser, f.Parser, frontierkeys.DispatchDedup, f.Dedup, frontierkeys.DispatchFrontier, f.Frontier,
			frontierkeys.DispatchPagesBytes, f.PagesBytes, frontierkeys.DispatchPagesMaxBytes, f.PagesMaxBytes,
			frontierkeys.DispatchBodiesBytes, f.BodiesBytes, frontierkeys.DispatchBodiesMaxBytes, f.BodiesMaxBytes,
			frontierkeys.DispatchDocsLag, f.DocsLag, frontierkeys.DispatchDocsMaxBytes, f.DocsMaxBytes,
			frontierkeys.DispatchIndexers, f.Indexers)
		if newHold {
			p.HIncrBy(ctx, g.key, frontierkeys.DispatchHolds, 1)
		}
		p.PExpire(ctx, g.key, dispatchStateTTL)
		return nil
	})
	if err != nil {
		errs = append(errs, fmt.Errorf("redis %s: %w", g.key, err))
	}
	return errors.Join(errs...)
}

// readDocsLag reads the lag of the slowest registered indexer on CRAWL_DOCS into f. A
// limits stream drops its oldest messages first, whoever acked them, so what counts is the
// span from a consumer's ack floor to the stream's end, not how many messages it has yet to
// take: the bytes of that span are estimated from the stream's mean message size.
func readDocsLag(ctx context.Context, js jetstream.JetStream, f *Figures) error {
	s, err := js.Stream(ctx, topology.StreamDocs)
	if err != nil {
		return fmt.Errorf("stream %s: %w", topology.StreamDocs, err)
	}
	info := s.CachedInfo()
	st := info.State
	f.DocsMaxBytes = info.Config.MaxBytes
	var lag int64
	n := 0
	l := s.ListConsumers(ctx)
	for ci := range l.Info() {
		if !topology.Registered(ci.Config) {
			continue
		}
		n++
		lag = max(lag, spanBytes(st, ci.AckFloor.Stream))
	}
	if err := l.Err(); err != nil {
		return fmt.Errorf("consumers of %s: %w", topology.StreamDocs, err)
	}
	f.DocsLag, f.Indexers = lag, n
	return nil
}

// spanBytes estimates the bytes a stream keeps after sequence floor.
func spanBytes(st jetstream.StreamState, floor uint64) int64 {
	if st.Msgs == 0 || floor >= st.LastSeq {
		return 0
	}
	span := st.LastSeq - max(floor, st.FirstSeq-1)
	return int64(float64(st.Bytes) * min(float64(span)/float64(st.Msgs), 1))
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
