// Package service wires the scheduler: per shard, a frontier consumer and an outcome
// consumer feeding the Redis frontier, a dispatcher publishing fetch tasks, a lease reaper
// and a stats refresher; plus /metrics, /healthz, /readyz and the status page (/,
// /status, /status.json) on the same HTTP server.
package service

import (
	"context"
	"errors"
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
	"github.com/trawl/trawl/shared/natsx"
	"github.com/trawl/trawl/shared/obs"
	"github.com/trawl/trawl/shared/redisx"
	"github.com/trawl/trawl/shared/topology"
)

const (
	// maxIdle bounds the dispatcher's sleep: other processes serving the shard, or a
	// Resume, can make hosts due without waking this one.
	maxIdle        = 50 * time.Millisecond
	reapEvery      = time.Second
	statsEvery     = 2 * time.Second
	errorPause     = 250 * time.Millisecond
	publishTimeout = 10 * time.Second
	probeTimeout   = 2 * time.Second
)

// Run serves cfg.SchedulerShards until ctx ends, then stops taking work, finishes what it
// holds and returns. It returns an error only if start-up fails or a loop cannot go on.
func Run(ctx context.Context, cfg config.Config, log *slog.Logger) error {
	err := run(ctx, cfg, log)
	if err != nil && ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		// Stopped during start-up: not a failure.
		return nil
	}
	return err
}

func run(ctx context.Context, cfg config.Config, log *slog.Logger) error {
	log.Info("scheduler starting; connecting to NATS and Redis", "shards", cfg.SchedulerShards)
	nc, js, err := natsx.Connect(ctx, cfg.NATSURL, "trawl-scheduler", log)
	if err != nil {
		return err
	}
	defer nc.Close()
	if err := natsx.Ensure(ctx, js, cfg.Topology(), cfg.Timings(), log); err != nil {
		return err
	}
	rdb, err := redisx.Connect(ctx, cfg.RedisURL, log)
	if err != nil {
		return err
	}
	defer rdb.Close()

	reg := obs.NewRegistry()
	m := newMetrics(reg)
	srv, err := obs.NewServer(cfg.HTTPAddr, reg, map[string]obs.Check{
		"nats": func(context.Context) error {
			if !nc.IsConnected() {
				return fmt.Errorf("nats: %s", nc.Status())
			}
			return nil
		},
		"redis": func(ctx context.Context) error { return redisx.Ping(ctx, rdb) },
	})
	if err != nil {
		return err
	}

	page := newStatusPage(cfg, rdb, m, log)
	page.Register(srv)

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	g := &group{cancel: cancel}
	g.Go("http", func() error { return srv.Run(ctx) })
	g.Go("status page sampler", func() error { page.Run(ctx); return nil })
	for _, shard := range cfg.SchedulerShards {
		s, err := newShard(ctx, cfg, shard, js, rdb, m, log)
		if err != nil {
			cancel()
			g.Wait()
			return err
		}
		s.start(ctx, g)
	}
	log.Info("scheduler running", "shards", cfg.SchedulerShards, "http", srv.Addr())
	<-ctx.Done()
	err = g.Wait()
	log.Info("scheduler stopped")
	return err
}

// newStatusPage shows every shard of the crawl, not only those this process serves: the
// state is all in Redis, so any scheduler can show the whole crawl.
func newStatusPage(cfg config.Config, rdb redis.UniversalClient, m *metrics, log *slog.Logger) *statuspage.Page {
	served := map[int]bool{}
	for _, s := range cfg.SchedulerShards {
		served[s] = true
	}
	shards := make([]statuspage.Shard, cfg.Shards)
	for i := range shards {
		shards[i] = statuspage.Shard{ID: i, Served: served[i],
			Source: frontier.New(rdb, FrontierOptions(cfg, i), Prioritizer(cfg))}
	}
	var mu sync.Mutex
	var lastLog time.Time
	return statuspage.New(shards, statuspage.Options{
		OnError: func(shard int, err error) {
			m.redisErrors.WithLabelValues(strconv.Itoa(shard), "status").Inc()
			// Sampled every second: during an outage once a minute is enough.
			mu.Lock()
			defer mu.Unlock()
			if time.Since(lastLog) >= time.Minute {
				lastLog = time.Now()
				log.Warn("status page: shard unreadable", "shard", shard, "err", err)
			}
		},
	})
}

// group runs loops and cancels them all when one fails.
type group struct {
	wg     sync.WaitGroup
	once   sync.Once
	err    error
	cancel context.CancelFunc
}

func (g *group) Go(name string, fn func() error) {
	g.wg.Go(func() {
		if err := fn(); err != nil {
			g.once.Do(func() {
				g.err = fmt.Errorf("%s: %w", name, err)
				g.cancel()
			})
		}
	})
}

func (g *group) Wait() error {
	g.wg.Wait()
	return g.err
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
	// wake tells the dispatcher that URLs were added or hosts released.
	wake chan struct{}
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
	return &shard{
		id: id, label: strconv.Itoa(id), cfg: cfg,
		f:  frontier.New(rdb, FrontierOptions(cfg, id), Prioritizer(cfg)),
		js: js, rdb: rdb, m: m, log: log.With("shard", id),
		subject: topology.FetchSubject(id), frontC: fc, outcomeC: oc,
		wake: make(chan struct{}, 1),
	}, nil
}

// FrontierOptions maps the configuration to shard's frontier options.
func FrontierOptions(cfg config.Config, shard int) frontier.Options {
	o := frontier.DefaultOptions(shard)
	o.KeyPrefix = cfg.RedisPrefix
	o.FrontQueues = cfg.FrontQueues
	o.BackQueues = cfg.BackQueues
	o.Bias = cfg.PriorityBias
	o.MinDelay = cfg.MinDelay
	o.DelayFactor = cfg.DelayFactor
	o.MaxCrawlDelay = cfg.MaxCrawlDelay
	o.MaxBackoff = cfg.MaxBackoff
	o.RetryBackoff = cfg.RetryBackoff
	o.MaxRetries = cfg.MaxRetries
	o.LeaseTTL = cfg.LeaseTTL
	o.MaxDepth = cfg.MaxDepth
	o.MaxPagesPerHost = cfg.MaxPagesPerHost
	o.MaxPages = cfg.MaxPages
	o.RetireAfter = cfg.RetireAfter
	o.HostStateTTL = cfg.HostStateTTL
	return o
}

// Prioritizer returns the prioritiser TRAWL_PRIORITIZER selects.
func Prioritizer(cfg config.Config) frontier.Prioritizer {
	if cfg.Prioritizer == prioritize.NamePreference {
		return prioritize.Preference{X: cfg.PriorityX, Y: cfg.PriorityY}
	}
	return prioritize.BreadthFirst{}
}

func (s *shard) start(ctx context.Context, g *group) {
	gate := func(ctx context.Context) error { return redisx.Ping(ctx, s.rdb) }
	consume := func(name string, c jetstream.Consumer, h natsx.BatchHandler) func() error {
		return func() error {
			return natsx.ConsumeBatches(ctx, c, natsx.ConsumeOptions{
				MaxDeliver: s.cfg.MaxDeliver,
				Gate:       gate,
				OnTerm:     func(reason string) { s.m.terminated.WithLabelValues(name, reason).Inc() },
				Log:        s.log.With("consumer", name),
			}, h)
		}
	}
	g.Go(fmt.Sprintf("shard %d frontier consumer", s.id), consume("frontier", s.frontC, s.handleFrontier))
	g.Go(fmt.Sprintf("shard %d outcome consumer", s.id), consume("outcomes", s.outcomeC, s.handleOutcomes))
	g.Go(fmt.Sprintf("shard %d dispatcher", s.id), func() error { s.dispatchLoop(ctx); return nil })
	g.Go(fmt.Sprintf("shard %d reaper", s.id), func() error { s.every(ctx, reapEvery, s.reap); return nil })
	g.Go(fmt.Sprintf("shard %d stats", s.id), func() error { s.every(ctx, statsEvery, s.refreshStats); return nil })
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
	s.m.stepSeconds.WithLabelValues(step).Observe(time.Since(start).Seconds())
	if err != nil {
		s.m.redisErrors.WithLabelValues(s.label, step).Inc()
	}
}

func (s *shard) reap(ctx context.Context) {
	start := time.Now()
	n, err := s.f.Reap(ctx, time.Now())
	s.observe("reap", start, err)
	if err != nil {
		if ctx.Err() == nil {
			s.log.Warn("reap failed", "err", err)
		}
		return
	}
	if n > 0 {
		s.m.leaseExpiries.WithLabelValues(s.label).Add(float64(n))
		s.log.Info("leases expired; URLs requeued", "count", n)
		s.poke()
	}
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
		"accepted": st.Accepted, "queued": st.Queued, "inflight": st.Inflight,
		"fetched": st.Fetched, "failed": st.Failed, "disallowed": st.Disallowed,
		"out_of_scope": st.OutOfScope, "over_budget": st.OverBudget,
	} {
		s.m.urls.WithLabelValues(s.label, state).Set(float64(v))
	}
	for p, n := range st.Waiting {
		s.m.queued.WithLabelValues(s.label, strconv.Itoa(p)).Set(float64(n))
	}
	s.m.activeHosts.WithLabelValues(s.label).Set(float64(st.ActiveHosts))
	s.m.readyHosts.WithLabelValues(s.label).Set(float64(st.ReadyHosts))
	s.m.inflight.WithLabelValues(s.label).Set(float64(st.Inflight))
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
