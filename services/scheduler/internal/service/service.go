// Package service wires the scheduler: per shard, a frontier consumer and an outcome
// consumer feeding the Redis frontier, a dispatcher publishing fetch tasks, a lease reaper
// and a stats refresher; plus /metrics, /healthz, /readyz and the status page (/,
// /status, /status.json) on the same HTTP server.
package service

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/trawl/trawl/services/scheduler/internal/config"
	"github.com/trawl/trawl/services/scheduler/internal/frontier"
	"github.com/trawl/trawl/services/scheduler/internal/prioritize"
	"github.com/trawl/trawl/services/scheduler/internal/statuspage"
	"github.com/trawl/trawl/shared/bloomhash"
	"github.com/trawl/trawl/shared/crawlid"
	"github.com/trawl/trawl/shared/frontierkeys"
	"github.com/trawl/trawl/shared/natsx"
	"github.com/trawl/trawl/shared/policy"
	"github.com/trawl/trawl/shared/redisx"
	"github.com/trawl/trawl/shared/runner"
	"github.com/trawl/trawl/shared/topology"
)

const (
	// maxIdle bounds the dispatcher's sleep: other processes serving the shard, or a
	// Resume, can make hosts due without waking this one.
	maxIdle   = 50 * time.Millisecond
	reapEvery = time.Second
	// trimEvery is how often applied markers are trimmed, to the frontier consumer's ack
	// floor as read one round earlier: an acknowledgement JetStream had not yet made
	// durable when it was read gets one more round.
	trimEvery      = 5 * time.Second
	statsEvery     = 2 * time.Second
	errorPause     = 250 * time.Millisecond
	publishTimeout = 10 * time.Second
	probeTimeout   = 2 * time.Second
)

// Option changes how New builds the service, for tests.
type Option func(*options)

type options struct {
	now func() time.Time
}

// WithClock sets the process's own clock. It times steps, throttles log lines and samples
// rates; no decision about a host's time uses it (they all take the Redis server's clock),
// so schedulers whose clocks disagree still dispatch no host early.
func WithClock(now func() time.Time) Option { return func(o *options) { o.now = now } }

// Service is a scheduler serving cfg.SchedulerShards.
type Service struct {
	run  *runner.Runner
	page *statuspage.Page
	gate *gate
	// pol holds the live site policies and the shards they are applied to.
	pol *policies
}

// New brings up the shared plumbing, the status page, the dispatch gate and every served
// shard, whose queues it brings to the live site policies before any dispatches. It waits
// for NATS and Redis until ctx ends. The caller must call Run (which closes everything
// when it returns) or Close.
func New(ctx context.Context, cfg config.Config, log *slog.Logger, opts ...Option) (_ *Service, err error) {
	o := options{now: time.Now}
	for _, opt := range opts {
		opt(&o)
	}
	log.Info("scheduler starting; connecting to NATS and Redis", "shards", cfg.SchedulerShards)
	r, err := runner.Start(ctx, "scheduler", cfg.Common, log, runner.WithRedis(), runner.WithSettling())
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			r.Close()
		}
	}()
	js, rdb := r.JS, r.Redis
	m := newMetrics(r.Metrics)
	pol, err := newPolicies(ctx, cfg, rdb, log)
	if err != nil {
		return nil, fmt.Errorf("scheduler: %w", err)
	}
	page := newStatusPage(cfg, rdb, redisx.TrackErrors(rdb), js, m, log, o.now, pol.w.Current)
	page.Register(r.HTTP)
	gt := newGate(cfg, js, rdb, m, log)
	for _, shard := range cfg.SchedulerShards {
		s, err := newShard(ctx, cfg, shard, js, rdb, m, log)
		if err != nil {
			return nil, fmt.Errorf("scheduler: %w", err)
		}
		s.gate, s.now = gt, o.now
		s.crawl = r.Crawl
		s.rules = pol.w.Current
		s.f.UsePolicy(pol.w.Current)
		s.f.LogExcluded(s.logExcluded)
		pol.shards = append(pol.shards, s)
	}
	// The tables are right before any shard dispatches: a blocked host is never handed out
	// for want of its entry.
	if !pol.apply(ctx) {
		return nil, fmt.Errorf("scheduler: the live site policies could not be written to the shards")
	}
	for _, s := range pol.shards {
		if err := s.recoverPages(ctx, time.Time{}); err != nil {
			return nil, fmt.Errorf("scheduler: %w", err)
		}
	}
	return &Service{run: r, page: page, gate: gt, pol: pol}, nil
}

// Run serves the shards until ctx ends, then stops taking work, finishes what it holds,
// closes everything and returns. It returns an error only if a loop cannot go on.
func (s *Service) Run(ctx context.Context) error {
	s.run.Go("status page sampler", func(ctx context.Context) error { s.page.Run(ctx); return nil })
	s.run.Go("dispatch gate", func(ctx context.Context) error { s.gate.run(ctx); return nil })
	s.run.Go("live policy watcher", s.pol.w.Run)
	s.run.Go("live policy", func(ctx context.Context) error { s.pol.run(ctx); return nil })
	for _, sh := range s.pol.shards {
		sh.goLoops(s.run)
	}
	return s.run.RunLoops(ctx)
}

// Close releases the connections of a Service that is not Run (Run closes them itself).
func (s *Service) Close() { s.run.Close() }

// Addr is the address its HTTP server (status page, metrics, probes) listens on.
func (s *Service) Addr() string { return s.run.Addr() }

// newStatusPage shows every shard of the crawl, not only those this process serves: the
// state is all in Redis, so any scheduler can show the whole crawl. A shard read cut short
// by the page's deadline says why Redis did not answer (why).
func newStatusPage(cfg config.Config, rdb redis.UniversalClient, why *redisx.LastError, js jetstream.JetStream, m *metrics, log *slog.Logger, now func() time.Time, rules func() *policy.Set) *statuspage.Page {
	served := map[int]bool{}
	for _, s := range cfg.SchedulerShards {
		served[s] = true
	}
	shards := make([]statuspage.Shard, cfg.Common.Shards)
	for i := range shards {
		shards[i] = statuspage.Shard{ID: i, Served: served[i],
			Source: explained{frontier.New(rdb, FrontierOptions(cfg, i), Prioritizer(cfg)), why}}
	}
	fr := frontierkeys.OpenReadOnly(rdb, cfg.Common.RedisPrefix, cfg.Common.Shards)
	seen := bloomhash.OpenReadOnly(rdb, cfg.Common.RedisPrefix, 1) // its figures are one hash, whatever the parts
	var mu sync.Mutex
	var lastLog time.Time
	return statuspage.New(shards, statuspage.Options{
		Now: now,
		OnError: func(shard int, err error) {
			m.redisErrors.WithLabelValues(strconv.Itoa(shard), "status").Inc()
			// Sampled every second: during an outage once a minute is enough.
			mu.Lock()
			defer mu.Unlock()
			if now().Sub(lastLog) >= time.Minute {
				lastLog = now()
				log.Warn("status page: shard unreadable", "shard", shard, "err", err)
			}
		},
		Dispatch: func(ctx context.Context) (statuspage.Dispatch, bool, error) {
			st, ok, err := fr.Dispatch(ctx)
			if !ok || err != nil {
				return statuspage.Dispatch{}, ok, err
			}
			return statuspage.Dispatch{Held: st.Held, Holds: st.Holds,
				FetchQueued: uint64(st.FetchQueued), FetchBusy: uint64(st.FetchBusy), FetchQueuedLimit: uint64(st.FetchLimit),
				Parser: uint64(st.Parser), Dedup: uint64(st.Dedup), Frontier: uint64(st.Frontier),
				PagesBytes: st.PagesBytes, PagesMaxBytes: st.PagesMaxBytes}, true, nil
		},
		SeenFilter: func(ctx context.Context) (map[string]string, error) {
			return seen.Stats(ctx)
		},
		Recrawl: recrawlBacklog(cfg, js, now),
		Stuck: func(ctx context.Context) ([]frontierkeys.StuckLease, time.Time, error) {
			return fr.Stuck(ctx, cfg.Common.LeaseTTL, statuspage.MaxStuck)
		},
		Rules: activeRules(fr, rules),
	})
}

// explained is a shard's frontier whose errors say why Redis did not answer.
type explained struct {
	f   *frontier.Frontier
	why *redisx.LastError
}

func (e explained) Stats(ctx context.Context) (frontierkeys.ShardStatus, error) {
	st, err := e.f.Stats(ctx)
	return st, e.why.Explain(err)
}

func (e explained) Status(ctx context.Context, now time.Time, top, errors int) (frontier.Status, error) {
	st, err := e.f.Status(ctx, now, top, errors)
	return st, e.why.Explain(err)
}

// shard is one shard's loops around its frontier.
type shard struct {
	id       int
	label    string
	cfg      config.Config
	f        *frontier.Frontier
	js       jetstream.JetStream
	rdb      redis.UniversalClient
	m        *metrics
	log      *slog.Logger
	subject  string
	frontC   jetstream.Consumer
	outcomeC jetstream.Consumer
	dueC     jetstream.Consumer // due recrawls; nil unless TRAWL_RECRAWL=adaptive
	// wake tells the dispatcher that URLs were added or hosts released.
	wake chan struct{}
	gate *gate
	now  func() time.Time
	// crawl gates consumption: Redis takes writes and still holds the crawl's state.
	crawl *crawlid.Guard
	// reapAt is the reaper's pending round (nil: none); trimFloor the frontier consumer's
	// ack floor read at the previous trim.
	reapAt    *reapRound
	trimFloor uint64
	// parserC is the parser's consumer on CRAWL_PAGES and pageFloor its ack floor read at
	// the previous page log trim (trimPageLog).
	parserC   jetstream.Consumer
	pageFloor uint64
	// replicated makes the adds and leases of the shard reach a Redis replica before
	// their message is acked or their tasks published (TRAWL_REDIS_WAIT).
	replicated *redisx.Waiter
	// resched tells the loop that schedules failed recrawls that outcomes failed URLs.
	resched chan struct{}
	// rules are the live site policies as last loaded (domain budgets, recrawlFor); nil:
	// none, the process-wide settings apply.
	rules func() *policy.Set
}

func newShard(ctx context.Context, cfg config.Config, id int, js jetstream.JetStream, rdb redis.UniversalClient, m *metrics, log *slog.Logger) (*shard, error) {
	fc, err := js.Consumer(ctx, topology.StreamFrontier, topology.SchedulerFrontierConsumer(id))
	if err != nil {
		return nil, fmt.Errorf("shard %d: frontier consumer: %w", id, err)
	}
	oc, err := js.Consumer(ctx, topology.StreamFetched, topology.SchedulerFetchedConsumer(id))
	if err != nil {
		return nil, fmt.Errorf("shard %d: outcome consumer: %w", id, err)
	}
	moved, err := frontierkeys.MoveUnspreadShard(ctx, rdb, cfg.Common.RedisPrefix, id, cfg.Common.Shards)
	if err != nil {
		return nil, err
	}
	if moved > 0 {
		log.Info("moved the shard's keys to its spread hash tag", "shard", id, "keys", moved)
	}
	var dc jetstream.Consumer
	if o := cfg.Common.Topology(); o.Recrawl {
		if dc, err = js.Consumer(ctx, topology.RecrawlStreamOf(id, o), topology.SchedulerRecrawlConsumer(id)); err != nil {
			return nil, fmt.Errorf("shard %d: recrawl consumer: %w", id, err)
		}
	}
	return &shard{
		id: id, label: strconv.Itoa(id), cfg: cfg,
		f:  frontier.New(rdb, FrontierOptions(cfg, id), Prioritizer(cfg)),
		js: js, rdb: rdb, m: m, log: log.With("shard", id),
		subject: topology.FetchSubject(id), frontC: fc, outcomeC: oc, dueC: dc,
		wake: make(chan struct{}, 1), resched: make(chan struct{}, 1), now: time.Now,
		replicated: redisx.NewWaiter(rdb, cfg.Common.RedisWait),
	}, nil
}

// waitReplicated waits, when TRAWL_REDIS_WAIT is set, until a replica has the shard's
// writes so far (redisx.Waiter).
func (s *shard) waitReplicated(ctx context.Context) error {
	_, err := s.replicated.Replicated(ctx, s.f.Keyspace().Key("replicated"))
	return err
}

// FrontierOptions maps the configuration to shard's frontier options.
func FrontierOptions(cfg config.Config, shard int) frontier.Options {
	o := frontier.DefaultOptions(shard)
	o.Shards = cfg.Common.Shards
	o.KeyPrefix = cfg.Common.RedisPrefix
	o.Settings = cfg.Settings
	o.Rules = cfg.Rules
	o.LeaseTTL = cfg.Common.LeaseTTL
	o.KeepFailedRecrawls = cfg.Common.Topology().Recrawl
	return o
}

// Prioritizer returns the prioritiser TRAWL_PRIORITIZER selects.
func Prioritizer(cfg config.Config) frontier.Prioritizer {
	if cfg.Prioritizer == prioritize.NamePreference {
		return prioritize.Preference{X: cfg.PriorityX, Y: cfg.PriorityY}
	}
	return prioritize.BreadthFirst{}
}

// goLoops registers the shard's loops with r.
func (s *shard) goLoops(r *runner.Runner) {
	consume := func(name string, c jetstream.Consumer, h natsx.BatchHandler) func(context.Context) error {
		opts := r.ConsumeOptions(s.m.terminated, name)
		opts.Log = s.log.With("consumer", name)
		return func(ctx context.Context) error { return natsx.ConsumeBatches(ctx, c, opts, h) }
	}
	r.Go(fmt.Sprintf("shard %d frontier consumer", s.id), consume("frontier", s.frontC, s.handleFrontier))
	r.Go(fmt.Sprintf("shard %d outcome consumer", s.id), consume("outcomes", s.outcomeC, s.handleOutcomes))
	r.Go(fmt.Sprintf("shard %d dispatcher", s.id), func(ctx context.Context) error { s.dispatchLoop(ctx); return nil })
	r.Go(fmt.Sprintf("shard %d reaper", s.id), func(ctx context.Context) error { s.every(ctx, reapEvery, s.reap); return nil })
	r.Go(fmt.Sprintf("shard %d marker trim", s.id), func(ctx context.Context) error { s.every(ctx, trimEvery, s.trimMarkers); return nil })
	r.Go(fmt.Sprintf("shard %d page log trim", s.id), func(ctx context.Context) error { s.every(ctx, trimEvery, s.trimPageLog); return nil })
	// NATS may come back older under this running process (its machine's OS crash alone).
	r.GoOnReconnect(fmt.Sprintf("shard %d page log check", s.id), recheckAttempts, recheckBackoff,
		"pages NATS lost, if it came back older, stay counted fetched",
		func(ctx context.Context, lostAt time.Time) error { return s.recoverPages(ctx, lostAt) })
	r.Go(fmt.Sprintf("shard %d stats", s.id), func(ctx context.Context) error { s.every(ctx, statsEvery, s.refreshStats); return nil })
	r.Go(fmt.Sprintf("shard %d skip spool", s.id), func(ctx context.Context) error { s.spoolLoop(ctx); return nil })
	if s.dueC != nil {
		r.Go(fmt.Sprintf("shard %d recrawl intake", s.id), func(ctx context.Context) error {
			s.dueLoop(ctx, r.ConsumeOptions(s.m.terminated, "recrawl"))
			return nil
		})
		r.Go(fmt.Sprintf("shard %d failed recrawls", s.id), func(ctx context.Context) error { s.rescheduleLoop(ctx); return nil })
	}
}

func (s *shard) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// every runs fn at once and then every d until ctx ends.
func (s *shard) every(ctx context.Context, d time.Duration, fn func(ctx context.Context)) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		fn(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (s *shard) observe(step string, start time.Time, err error) {
	s.m.stepSeconds.WithLabelValues(step).Observe(s.now().Sub(start).Seconds())
	if err != nil {
		s.m.redisErrors.WithLabelValues(s.label, step).Inc()
	}
}

// reapRound is a reaping decision waiting for the outcomes that could still release its
// leases: those in the fetched stream up to seq, which was its last sequence when cutoff
// was read.
type reapRound struct {
	cutoff time.Time
	seq    uint64
}

// reapGrace is how long past its deadline a lease is kept for its outcome: at least the
// outcome consumer's AckWait, so an outcome held by a scheduler that died comes back
// (and is applied normally) before its lease is reaped.
func (s *shard) reapGrace() time.Duration { return s.cfg.Common.AckWait }

// reap returns the URLs of leases expired more than the grace ago to their queues, but only
// once every outcome that was waiting when that cutoff was taken has been applied: after a
// scheduler outage the outcomes of finished fetches are waiting, and reaping their leases
// first would fetch those URLs again.
func (s *shard) reap(ctx context.Context) {
	start := s.now()
	n, exhausted, err := s.reapStep(ctx)
	s.observe("reap", start, err)
	if err != nil {
		if ctx.Err() == nil {
			s.log.Warn("reap failed", "err", err)
		}
		return
	}
	if n > 0 {
		s.m.leaseExpiries.WithLabelValues(s.label).Add(float64(n))
		s.log.Info("leases expired; URLs requeued", "count", n, "attempts_exhausted", exhausted)
		s.poke()
	}
	if exhausted > 0 {
		s.m.attemptsExhausted.WithLabelValues(s.label).Add(float64(exhausted))
	}
}

func (s *shard) reapStep(ctx context.Context) (reaped, exhausted int, err error) {
	if s.reapAt == nil {
		now, err := s.f.Now(ctx)
		if err != nil {
			return 0, 0, err
		}
		cutoff := now.Add(-s.reapGrace())
		if n, err := s.f.Overdue(ctx, cutoff); err != nil || n == 0 {
			return 0, 0, err
		}
		str, err := s.js.Stream(ctx, topology.StreamFetched)
		if err != nil {
			return 0, 0, fmt.Errorf("reap: stream %s: %w", topology.StreamFetched, err)
		}
		s.reapAt = &reapRound{cutoff: cutoff, seq: str.CachedInfo().State.LastSeq}
	}
	ci, err := s.outcomeC.Info(ctx)
	if err != nil {
		return 0, 0, fmt.Errorf("reap: outcome consumer: %w", err)
	}
	if !outcomesApplied(ci, s.reapAt.seq) {
		// The outcome consumer is behind or holds unacknowledged outcomes; the next round
		// checks again with the same cutoff.
		return 0, 0, nil
	}
	reaped, exhausted, err = s.f.ReapCounted(ctx, s.reapAt.cutoff)
	if err == nil {
		s.reapAt = nil
	}
	return reaped, exhausted, err
}

// outcomesApplied reports whether every outcome of the consumer's subject up to stream
// sequence seq has been delivered and acknowledged.
func outcomesApplied(ci *jetstream.ConsumerInfo, seq uint64) bool {
	return ci.AckFloor.Stream >= seq || (ci.NumPending == 0 && ci.NumAckPending == 0)
}

// trimMarkers drops applied markers of frontier messages the consumer acknowledged: at or
// below its ack floor as read one round ago.
func (s *shard) trimMarkers(ctx context.Context) {
	floor := s.trimFloor
	ci, err := s.frontC.Info(ctx)
	if err != nil {
		if ctx.Err() == nil {
			s.log.Debug("marker trim: frontier consumer info", "err", err)
		}
		return
	}
	s.trimFloor = ci.AckFloor.Stream
	if floor == 0 || floor > s.trimFloor {
		// First round, or the stream was made again (its sequence started over).
		return
	}
	n, err := s.f.TrimApplied(ctx, floor)
	if err != nil {
		if ctx.Err() == nil {
			s.m.redisErrors.WithLabelValues(s.label, "trim").Inc()
			s.log.Warn("marker trim failed", "err", err)
		}
		return
	}
	s.m.markersTrimmed.WithLabelValues(s.label).Add(float64(n))
}

func (s *shard) refreshStats(ctx context.Context) {
	st, err := s.f.Stats(ctx)
	if err != nil {
		if ctx.Err() == nil {
			s.m.redisErrors.WithLabelValues(s.label, "stats").Inc()
			s.log.Warn("stats failed", "err", err)
		}
		return
	}
	for state, v := range map[string]int64{
		"accepted": st.Accepted, "queued": st.Queued, "inflight": st.InFlight,
		"fetched": st.Fetched, "failed": st.Failed, "disallowed": st.Disallowed,
		"out_of_scope": st.OutOfScope, "over_budget": st.OverBudget, "parked": st.Parked,
	} {
		s.m.urls.WithLabelValues(s.label, state).Set(float64(v))
	}
	for p, n := range st.Front {
		s.m.queued.WithLabelValues(s.label, strconv.Itoa(p)).Set(float64(n))
	}
	s.m.activeHosts.WithLabelValues(s.label).Set(float64(st.Active))
	s.m.readyHosts.WithLabelValues(s.label).Set(float64(st.InHeap))
	s.m.inflight.WithLabelValues(s.label).Set(float64(st.InFlight))
	paused := 0.0
	if st.Paused {
		paused = 1
	}
	s.m.paused.WithLabelValues(s.label).Set(paused)
}

// sleep waits d, a wake-up, or the end of ctx; it reports false when ctx ended.
func (s *shard) sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-s.wake:
		return true
	case <-t.C:
		return true
	}
}
