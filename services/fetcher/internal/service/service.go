// Package service wires the fetcher: it consumes fetch tasks from the shared `fetcher`
// durable, checks each task's deadline and its origin's robots.txt (shared Redis cache),
// makes the task's one request (the page, or robots.txt on a cache miss) under a deadline
// that ends before the task's lease, stores the page (a large body by reference) and any
// redirect target, then publishes the outcome (gathered with other tasks' outcomes into
// one message per shard) and, once it is stored, acks the task.
package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/trawl/trawl/services/fetcher/internal/config"
	"github.com/trawl/trawl/services/fetcher/internal/fetch"
	"github.com/trawl/trawl/services/fetcher/internal/robotscache"
	"github.com/trawl/trawl/services/fetcher/internal/safedial"
	"github.com/trawl/trawl/shared/crawlid"
	"github.com/trawl/trawl/shared/natsx"
	"github.com/trawl/trawl/shared/obs"
	"github.com/trawl/trawl/shared/redisx"
	"github.com/trawl/trawl/shared/topology"
)

// Service is a running fetcher's dependencies.
type Service struct {
	cfg    config.Config
	log    *slog.Logger
	nc     *nats.Conn
	js     jetstream.JetStream
	rdb    *redis.Client
	obs    *obs.Server
	robots *robotscache.Store
	client *fetch.Client
	m      *metrics
	now    func() time.Time
	bodies jetstream.ObjectStore // page bodies too large to travel inline
	// outcomes gathers outcomes into one crawl.fetched message per shard and flush.
	outcomes *outcomeBatcher
	maxMsg   int32 // the pages stream's largest message

	crawl *crawlid.Guard
}

// Run builds the service and runs it until ctx ends.
func Run(ctx context.Context, cfg config.Config, log *slog.Logger) error {
	s, err := New(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer s.Close()
	return s.Run(ctx)
}

// New connects to NATS and Redis, declares the topology and opens the metrics listener.
// It waits for NATS and Redis until ctx ends.
func New(ctx context.Context, cfg config.Config, log *slog.Logger) (*Service, error) {
	nc, js, err := natsx.Connect(ctx, cfg.Common.NATSURL, "trawl-fetcher", log)
	if err != nil {
		return nil, err
	}
	topo := cfg.Common.Topology()
	if err := natsx.Ensure(ctx, js, topo, cfg.Common.Timings(), log); err != nil {
		nc.Close()
		return nil, err
	}
	bodies, err := js.CreateOrUpdateObjectStore(ctx, topology.Bodies(topo))
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("fetcher: object store %s: %w", topology.BodiesBucket, err)
	}
	rdb, err := redisx.Connect(ctx, cfg.Common.RedisURL, log)
	if err != nil {
		nc.Close()
		return nil, err
	}
	crawl, err := crawlid.Open(ctx, js, rdb, cfg.Common, log)
	if err != nil {
		rdb.Close()
		nc.Close()
		return nil, err
	}
	reg := obs.NewRegistry()
	_ = crawl.Register(reg)
	srv, err := obs.NewServer(cfg.Common.HTTPAddr, reg, map[string]obs.Check{
		"nats": func(context.Context) error {
			if !nc.IsConnected() {
				return fmt.Errorf("nats: %s", nc.Status())
			}
			return nil
		},
		"redis": crawl.Check,
	})
	if err != nil {
		rdb.Close()
		nc.Close()
		return nil, err
	}
	m := newMetrics(reg)
	s := &Service{
		cfg:   cfg,
		log:   log,
		nc:    nc,
		js:    js,
		rdb:   rdb,
		obs:   srv,
		crawl: crawl,
		robots: robotscache.NewStore(rdb, robotscache.StoreOptions{
			Prefix:   cfg.Common.RedisPrefix,
			Agent:    cfg.RobotsAgent,
			TTL:      cfg.RobotsTTL,
			ErrorTTL: cfg.RobotsErrorTTL,
		}),
		client: newClient(cfg, func(result string) { m.dnsLookups.WithLabelValues(result).Inc() }),
		m:      m,
		now:    time.Now,
		bodies: bodies,
		maxMsg: topo.MaxMsgSize,
	}
	s.outcomes = newOutcomeBatcher(cfg.OutcomeBatch, cfg.OutcomeLinger, s.publishOutcomes)
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "trawl_fetcher_outcomes_waiting", Help: "Outcomes gathered for a crawl.fetched batch and not yet being published.",
	}, func() float64 { return float64(s.outcomes.waiting()) }))
	return s, nil
}

// newClient builds the HTTP client: the address policy in the dialer, the DNS cache in
// front of the system resolver, and the proxy from the environment (HTTP_PROXY,
// HTTPS_PROXY, NO_PROXY). onDNS is told how each name lookup was answered.
func newClient(cfg config.Config, onDNS func(result string)) *fetch.Client {
	dialer := &safedial.Dialer{Policy: safedial.NewPolicy(cfg.AllowCIDRs...), Timeout: min(cfg.DialTimeout, cfg.FetchTimeout)}
	if cfg.DNSTTL > 0 {
		// The cache holds raw answers; the dialer applies the address policy to every
		// address on every dial, cached or not.
		dialer.Resolver = safedial.NewCachingResolver(nil, safedial.CacheOptions{
			TTL:           cfg.DNSTTL,
			NegativeTTL:   cfg.DNSNegativeTTL,
			MaxEntries:    cfg.DNSCacheSize,
			LookupTimeout: min(cfg.DialTimeout, cfg.FetchTimeout),
			OnLookup:      onDNS,
		})
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
	})
}

// Addr is the address /metrics, /healthz and /readyz are served on.
func (s *Service) Addr() string { return s.obs.Addr() }

// Run consumes fetch tasks until ctx ends, then finishes the tasks in hand (up to the
// fetch timeout plus publishing) and returns.
func (s *Service) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cons, err := s.js.Consumer(ctx, topology.StreamFetch, topology.ConsumerFetcher)
	if err != nil {
		return fmt.Errorf("fetcher: consumer %s/%s: %w", topology.StreamFetch, topology.ConsumerFetcher, err)
	}
	obsDone := make(chan error, 1)
	go func() {
		err := s.obs.Run(ctx)
		if err != nil {
			s.log.Error("metrics server failed; stopping", "err", err)
			cancel()
		}
		obsDone <- err
	}()
	watchDone := make(chan struct{})
	go func() {
		defer close(watchDone)
		s.crawl.Watch(ctx)
	}()
	defer func() { cancel(); <-watchDone }()
	s.log.Info("fetcher consuming", "concurrency", s.cfg.Concurrency, "metrics", s.Addr(), "allow_cidrs", s.cfg.AllowCIDRs)
	// On shutdown the batches waiting are published at once, not after their linger, so
	// the tasks in hand finish (and are acked) well inside the drain.
	stopFlush := context.AfterFunc(ctx, s.outcomes.close)
	defer stopFlush()
	w := startWorkers(s.cfg.Concurrency, s.handle)
	err = natsx.ConsumeEach(ctx, cons, natsx.ConsumeOptions{
		Batch:        s.cfg.Concurrency,
		MaxDeliver:   s.cfg.Common.MaxDeliver,
		Gate:         s.gate,
		DrainTimeout: s.taskBudget(),
		OnTerm:       func(reason string) { s.m.terminated.WithLabelValues(reason).Inc() },
		Log:          s.log,
	}, w.handle)
	w.stop()
	cancel()
	return errors.Join(err, <-obsDone)
}

// Close releases the connections. Call it after Run returned.
func (s *Service) Close() {
	s.client.CloseIdle()
	if err := s.nc.FlushTimeout(2 * time.Second); err != nil {
		s.log.Warn("nats flush on close", "err", err)
	}
	s.nc.Close()
	s.rdb.Close()
}

// gate pauses consumption while Redis is down or lost the crawl, so an outage does not
// spend deliveries; crawl.Gate keeps the check off the path of every pull.
func (s *Service) gate(ctx context.Context) error {
	if err := s.crawl.Gate(ctx); err != nil {
		s.m.paused.Set(1)
		return err
	}
	s.m.paused.Set(0)
	return nil
}
