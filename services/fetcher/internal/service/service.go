// Package service wires the fetcher: it consumes fetch tasks from the shared `fetcher`
// durable, checks each task's deadline and its origin's robots.txt (shared Redis cache),
// makes the task's one request (the page, or robots.txt on a cache miss) under a deadline
// that ends before the task's lease, stores the page (a large body by reference) and any
// redirect target, then publishes the outcome (gathered with other tasks' outcomes into
// one message per shard) and, once it is stored, acks the task.
package service

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/trawl/trawl/services/fetcher/internal/config"
	"github.com/trawl/trawl/services/fetcher/internal/fetch"
	"github.com/trawl/trawl/shared/crawlid"
	"github.com/trawl/trawl/shared/natsx"
	"github.com/trawl/trawl/shared/obs"
	"github.com/trawl/trawl/shared/policy"
	"github.com/trawl/trawl/shared/polite"
	"github.com/trawl/trawl/shared/politeness"
	"github.com/trawl/trawl/shared/runner"
	"github.com/trawl/trawl/shared/safedial"
	"github.com/trawl/trawl/shared/topology"
)

// Service is a running fetcher's dependencies.
type Service struct {
	cfg config.Config
	log *slog.Logger
	nc  *nats.Conn
	js  jetstream.JetStream
	rdb redis.UniversalClient
	obs *obs.Server
	// robots are the robots.txt caches, TRAWL_ROBOTS_AGENT's and those of the agents site
	// policies name (robotsFor).
	robots *polite.RobotsStores
	// policies are the live site policies, read right before every request; requests
	// resolves them into what a request carries (the renderer's browser requests alike).
	policies policySource
	requests *polite.Requests
	watcher  *policy.Watcher // the store's rules, kept current by Run
	// claims reserve another host for a robots.txt redirect hop, under its own gap.
	claims *politeness.Claimer
	// servers space the requests per server address (TRAWL_POLITENESS=ip; nil otherwise);
	// pick resolves a host to the address its dial would use.
	servers *politeness.Servers
	// resolver answers name lookups instead of the system resolver (WithResolver).
	resolver safedial.Resolver
	pick     pickFunc
	// work runs tasks on long-lived goroutines (set by Run).
	work   *workers
	client *fetch.Client
	m      *metrics
	now    func() time.Time
	// lease places the tasks' lease deadlines (Redis's clock) on this process's clock.
	lease *leaseClock
	// session is when this process's NATS session began, at start or its last reconnect
	// (unix ns): a task dispatched before it may be one JetStream hands out again as new,
	// having lost its delivery state with a restart of its own (mayBeRedelivered).
	session atomic.Int64
	bodies  jetstream.ObjectStore // page bodies too large to travel inline
	run     *runner.Runner
	cons    jetstream.Consumer
	// outcomes gathers outcomes into one crawl.fetched message per shard and flush, after
	// their pages, bundled (storePages).
	outcomes *outcomeBatcher
	maxMsg   int32 // the pages stream's largest message

	crawl *crawlid.Guard

	// archive says whether the archiver's consumer of crawl.pages exists: pages carry what
	// an archive needs (attachCapture) only then.
	archive *natsx.ConsumerWatch
}

// New connects to NATS and Redis, declares the topology and opens the metrics listener.
// It waits for NATS and Redis until ctx ends. The caller must call Run (which closes
// everything when it returns) or Close.
func New(ctx context.Context, cfg config.Config, log *slog.Logger, opts ...Option) (*Service, error) {
	r, err := runner.Start(ctx, "fetcher", cfg.Common, log, runner.WithRedis(), runner.WithBodies())
	if err != nil {
		return nil, err
	}
	cons, err := r.JS.Consumer(ctx, topology.StreamFetch, topology.ConsumerFetcher)
	if err != nil {
		r.Close()
		return nil, fmt.Errorf("fetcher: consumer %s/%s: %w", topology.StreamFetch, topology.ConsumerFetcher, err)
	}
	m := newMetrics(r.Metrics)
	s := &Service{
		cfg:    cfg,
		log:    log,
		nc:     r.NC,
		js:     r.JS,
		rdb:    r.Redis,
		obs:    r.HTTP,
		crawl:  r.Crawl,
		robots: polite.NewRobotsStores(r.Redis, cfg.Robots.StoreOptions(cfg.Common.RedisPrefix, cfg.RobotsAgent)),
		m:      m,
		now:    time.Now,
		bodies: r.Bodies,
		maxMsg: r.Topology.MaxMsgSize,
		run:    r,
		cons:   cons,
	}
	s.archive = natsx.WatchConsumer(ctx, r.NC, r.JS, topology.StreamPages, topology.ConsumerArchiver, log, func(on bool) {
		log.Info("capture for the archive turned "+map[bool]string{true: "on: the archiver's consumer exists", false: "off: the archiver's consumer is gone"}[on],
			"stream", topology.StreamPages, "consumer", topology.ConsumerArchiver)
	})
	r.OnClose(s.archive.Close)
	// The rules as they are now; an error stops the fetcher rather than let it crawl
	// against rules it cannot read.
	if s.watcher, err = policy.NewWatcher(ctx, policy.NewStore(r.Redis, cfg.Common.RedisPrefix), cfg.Policy.Poll,
		policy.OnlyFields(polite.Fields()...)); err != nil {
		r.Close()
		return nil, fmt.Errorf("fetcher: site policies: %w", err)
	}
	s.policies = s.watcher
	s.claims = politeness.NewClaimer(r.Redis, cfg.Common.RedisPrefix, cfg.Common.Shards, cfg.Politeness, s.watcher.Current)
	s.requests = polite.New(cfg.Polite(), func(f policy.Field) { s.m.policy.applied[f].Inc() })
	s.m.policy.version = func() float64 { return float64(s.policies.Current().Version()) }
	s.m.policy.stale = func() float64 { return s.watcher.Stale().Seconds() }
	s.lease = &leaseClock{wall: time.Now, redisTime: func(ctx context.Context) (time.Time, error) { return r.Redis.Time(ctx).Result() }, log: log}
	for _, o := range opts {
		o(s)
	}
	var dialer *safedial.Dialer
	s.client, dialer = newClient(cfg, s.resolver, func(result string) { m.dnsLookups.WithLabelValues(result).Inc() }, s.keepRaw)
	if cfg.Politeness.Per == politeness.PerIP {
		s.servers = politeness.NewServers(r.Redis, cfg.Common.RedisPrefix, cfg.Politeness)
		s.pick = dialer.Pick
	}
	r.OnClose(s.client.CloseIdle)
	if err := s.lease.measure(ctx); err != nil {
		r.Close()
		return nil, err
	}
	s.m.clockOffset = func() float64 { return time.Duration(s.lease.offset.Load()).Seconds() }
	s.session.Store(s.now().UnixNano())
	r.OnReconnect(func() { s.session.Store(s.now().UnixNano()) })
	s.outcomes = newOutcomeBatcher(cfg.OutcomeBatch, cfg.OutcomeLinger, s.publishOutcomes, s.storePages)
	s.m.outcomesWaiting = func() float64 { return float64(s.outcomes.waiting()) }
	return s, nil
}

// Option changes how New builds the service.
type Option func(*Service)

// WithWallClock makes the service read the time of day from now instead of time.Now, as a
// machine whose clock is off would (tests of clock skew).
func WithWallClock(now func() time.Time) Option {
	return func(s *Service) { s.lease.wall = now }
}

// WithResolver makes the service resolve names through r instead of the system resolver,
// under the same DNS cache and recheck of a missing name (tests of DNS answers).
func WithResolver(r safedial.Resolver) Option {
	return func(s *Service) { s.resolver = r }
}

// newClient builds the HTTP client: the address policy in the dialer, the DNS cache in
// front of the system resolver (up, when not nil: WithResolver) with a name the DNS says
// does not exist asked once more (fetch.RecheckResolver), and the proxy from the
// environment (HTTP_PROXY, HTTPS_PROXY, NO_PROXY). onDNS is told how each name lookup was
// answered. The dialer is returned too, to resolve hosts exactly as the client's dials do.
func newClient(cfg config.Config, up safedial.Resolver, onDNS func(result string), keepRaw func() bool) (*fetch.Client, *safedial.Dialer) {
	if up == nil {
		up = net.DefaultResolver
	}
	lookupTimeout := min(cfg.DialTimeout, cfg.FetchTimeout)
	recheck := &fetch.RecheckResolver{Up: up, Delay: min(fetch.NoSuchHostRecheck, lookupTimeout/2)}
	dialer := &safedial.Dialer{Policy: safedial.NewPolicy(cfg.AllowCIDRs...), Timeout: lookupTimeout, Resolver: recheck}
	if cfg.DNSTTL > 0 {
		// The cache holds raw answers; the dialer applies the address policy to every
		// address on every dial, cached or not. A missing name is cached once confirmed.
		dialer.Resolver = safedial.NewCachingResolver(recheck, safedial.CacheOptions{
			TTL:           cfg.DNSTTL,
			NegativeTTL:   cfg.DNSNegativeTTL,
			MaxEntries:    cfg.DNSCacheSize,
			LookupTimeout: lookupTimeout,
			OnLookup:      onDNS,
		})
	}
	if len(cfg.Resolve) > 0 {
		// In front of the cache: a listed name needs no caching.
		dialer.Resolver = &safedial.StaticResolver{Names: cfg.Resolve, Next: dialer.Resolver}
	}
	return fetch.New(fetch.Config{
		UserAgent:       cfg.UserAgent,
		Timeout:         cfg.FetchTimeout,
		TLSTimeout:      min(config.TLSHandshakeTimeout, cfg.FetchTimeout),
		HeaderTimeout:   min(cfg.HeaderTimeout, cfg.FetchTimeout),
		MaxBody:         cfg.MaxBody,
		MaxHeaderBytes:  cfg.MaxHeaderBytes,
		MaxConnsPerHost: cfg.MaxConnsPerHost,
		MaxIdleConns:    cfg.MaxIdleConns,
		Dial:            dialer.DialContext,
		Proxy:           http.ProxyFromEnvironment,
		KeepRaw:         keepRaw,
	}), dialer
}

// Addr is the address /metrics, /healthz and /readyz are served on.
func (s *Service) Addr() string { return s.obs.Addr() }

// Run consumes fetch tasks until ctx ends, then finishes the tasks in hand (up to the
// fetch timeout plus publishing), closes everything and returns.
func (s *Service) Run(ctx context.Context) error {
	s.run.Go("clock", s.lease.keep)
	s.run.Go("archive watch", s.archive.Loop)
	s.run.Go("policy watch", s.watcher.Run)
	s.run.Go("consume", func(ctx context.Context) error {
		// On shutdown the batches waiting are published at once, not after their linger, so
		// the tasks in hand finish (and are acked) well inside the drain.
		stopFlush := context.AfterFunc(ctx, s.outcomes.close)
		defer stopFlush()
		s.work = startWorkers(s.cfg.Concurrency, s.handleTask)
		defer s.work.stop()
		// Slots count tasks: a message takes one per task it holds.
		opts := s.run.ConsumeOptions(s.m.terminated)
		opts.Batch, opts.Weight = s.cfg.Concurrency, taskCount
		opts.Ready = s.ready
		opts.DrainTimeout = s.taskBudget()
		return natsx.ConsumeEach(ctx, s.cons, opts, s.handle)
	})
	s.log.Info("fetcher consuming", "concurrency", s.cfg.Concurrency, "metrics", s.Addr(), "allow_cidrs", s.cfg.AllowCIDRs)
	return s.run.RunLoops(ctx)
}

// Close releases the connections of a Service that is not Run (Run closes them itself).
func (s *Service) Close() { s.run.Close() }

// ready pauses consumption while Redis is down or lost the crawl, so an outage does not
// spend deliveries; crawl.Ready keeps the check off the path of every pull.
func (s *Service) ready(ctx context.Context) error {
	if err := s.crawl.Ready(ctx); err != nil {
		s.m.paused.Set(1)
		return err
	}
	s.m.paused.Set(0)
	return nil
}
