// Package service wires the dedup service: it consumes DiscoveredBatch messages from
// CRAWL_DISCOVERED in batches, normalises their URLs (TRAWL_STRIP_SESSION_IDS,
// TRAWL_SORT_QUERY), runs the seen test for each batch (the in-process cache, then one
// Redis call for the rest), and publishes the new URLs to crawl.frontier.<shard> as one
// FrontierBatch per (input message, shard).
package service

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/trawl/trawl/services/dedup/internal/bloom"
	"github.com/trawl/trawl/services/dedup/internal/cache"
	"github.com/trawl/trawl/services/dedup/internal/config"
	"github.com/trawl/trawl/services/dedup/internal/seen"
	"github.com/trawl/trawl/shared/natsx"
	"github.com/trawl/trawl/shared/redisx"
	"github.com/trawl/trawl/shared/runner"
	"github.com/trawl/trawl/shared/seed"
	"github.com/trawl/trawl/shared/topology"
)

// Service is a running dedup.
type Service struct {
	cfg    config.Config
	log    *slog.Logger
	run    *runner.Runner
	cons   jetstream.Consumer
	filter bloom.Parts
	store  *seen.Store
	h      *handler
	m      *metrics
	// recovered are the memos recoverLost published again, forgotten by the trim loop.
	recovered recovered
}

// recovered are memos whose outputs were published again, at start or at a reconnect.
// They go once the copies are on disk (after the window), not by the ack floor: the
// stream may hold other messages at their sequences by then, and the next check would
// take them for lost again. The lost-message check adds to it while the trim loop takes.
type recovered struct {
	mu      sync.Mutex
	batches []recoveredBatch
}

type recoveredBatch struct {
	ids   []string
	after time.Time
}

// add hands ids to be forgotten from after on.
func (r *recovered) add(ids []string, after time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.batches = append(r.batches, recoveredBatch{ids: ids, after: after})
}

// due takes the ids whose time has come; the caller adds back those it failed to forget.
func (r *recovered) due(now time.Time) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var ids []string
	left := r.batches[:0]
	for _, b := range r.batches {
		if now.Before(b.after) {
			left = append(left, b)
		} else {
			ids = append(ids, b.ids...)
		}
	}
	r.batches = left
	return ids
}

// Tries of the lost-message check at a reconnect: few and short, since it must run before
// the acknowledgements of the messages that took the lost sequences (Run).
const (
	lostCheckAttempts = 5
	lostCheckBackoff  = 200 * time.Millisecond
)

// New brings up the shared plumbing and the seen test and publishes the seeds. It waits
// for NATS and Redis until ctx ends. The caller must call Run (which closes everything
// when it returns) or Close.
func New(ctx context.Context, cfg config.Config, log *slog.Logger) (_ *Service, err error) {
	filter, err := bloom.NewParts(cfg.Common.RedisPrefix, cfg.Bloom)
	if err != nil {
		return nil, fmt.Errorf("dedup: %w", err)
	}
	r, err := runner.Start(ctx, "dedup", cfg.Common, log, runner.WithRedis(), runner.WithSettling())
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			r.Close()
			err = fmt.Errorf("dedup: %w", err)
		}
	}()
	js, rdb := r.JS, r.Redis
	if err := filter.Init(ctx, rdb); err != nil {
		return nil, err
	}
	first := filter[0]
	layers := first.Layers()
	newest := layers[len(layers)-1]
	log.Info("bloom filter ready", "capacity", cfg.Bloom.Capacity, "parts", len(filter), "part_capacity", first.Capacity,
		"fp_rate", first.FPRate, "growth", first.Growth, "tighten", first.Tighten, "layers", filter.Layers(),
		"newest_bits", newest.M, "newest_hashes", newest.K, "bytes", filter.Bytes(), "next_layer_bytes", filter.NextBytes(),
		"meta", first.MetaKey())
	if redisx.IsCluster(cfg.Common.RedisURL) && len(filter) == 1 {
		log.Warn("the seen filter is in one part, so one Redis Cluster master holds it and takes every seen test; "+
			"set TRAWL_BLOOM_PARTS to a few times the masters for a new crawl", "meta", first.MetaKey())
	}

	m := newMetrics(r.Metrics)
	m.setLayers(filter)
	if len(cfg.Seeds) > 0 {
		// Seeds given to the deployment (compose's TRAWL_SEEDS) enter like any discovered
		// URL; on a restart they are published again and dropped as already seen.
		n, err := seed.Publish(ctx, js, cfg.Seeds, 0)
		if err != nil {
			return nil, err
		}
		log.Info("published seeds", "count", n)
	}
	cons, err := js.Consumer(ctx, topology.StreamDiscovered, topology.ConsumerDedup)
	if err != nil {
		return nil, fmt.Errorf("consumer %s/%s: %w", topology.StreamDiscovered, topology.ConsumerDedup, err)
	}

	store := seen.NewParts(rdb, filter)
	store.OnGrow = func(f *bloom.Filter, l bloom.Layer) {
		log.Warn("bloom filter full: added a layer", "part", f.Index(), "layer", l.Index, "layers", l.Index+1, "capacity", l.N,
			"fp_rate", l.P, "bits", l.M, "hashes", l.K, "bytes", l.Bytes(), "total_bytes", filter.Bytes(),
			"next_layer_bytes", f.NextLayer().Bytes())
		m.setLayers(filter)
	}
	checker := &seen.Cached{Store: store}
	h := &handler{
		seen:      checker,
		keepMemos: cfg.Common.Durability.Window() > 0,
		publish:   func(ctx context.Context, msgs []*nats.Msg) error { return natsx.PublishBatch(ctx, js, msgs) },
		norm:      cfg.Norm,
		maxDepth:  cfg.MaxDepth,
		shards:    cfg.Common.Shards,
		m:         m,
		log:       log,
	}
	if cfg.CacheSize > 0 {
		// Empty at start: it fills from the test-and-set results, so a restart costs only
		// a few extra Redis lookups.
		checker.Cache = cache.New(cfg.CacheSize)
		h.entries = checker.Cache.Len
	}
	return &Service{cfg: cfg, log: log, run: r, cons: cons, filter: filter, store: store, h: h, m: m}, nil
}

// Run tests discovered URLs until ctx ends, then stops pulling, finishes the batch in hand
// (publish, ack), closes everything and returns. It returns early only on an error the
// consume loop cannot recover from. At TRAWL_FSYNC=1s it first publishes again what the
// input messages NATS lost had found new (recoverLost), and fails if it cannot tell; it
// checks again each time the NATS connection is back, since NATS may have come back older
// under this running process (its machine's OS crash).
func (s *Service) Run(ctx context.Context) error {
	if s.cfg.Common.Durability.Window() > 0 {
		// Registered first, so that a reconnect during the start's check is checked again.
		// NATS may come back older under this running process (its machine's OS crash
		// alone); the check must run promptly: a new message that took a lost one's
		// sequence is acknowledged a window (TRAWL_FSYNC) after its outputs are stored and
		// then removed, and the lost message's sequence, read as removed, is skipped.
		s.run.GoOnReconnect("lost-message check", lostCheckAttempts, lostCheckBackoff,
			"if NATS came back older than Redis, the new URLs of the messages it lost are held as seen and never crawled",
			func(ctx context.Context, lostAt time.Time) error {
				err := s.checkLost(ctx, lostAt)
				if err != nil && ctx.Err() == nil {
					s.m.failures.WithLabelValues(stageLostCheck).Inc()
				}
				return err
			})
		if err := s.checkLost(ctx, time.Time{}); err != nil {
			s.run.Close()
			return fmt.Errorf("dedup: checking for input messages NATS lost: %w", err)
		}
	}
	opts := s.run.ConsumeOptions(s.m.terminated)
	opts.Batch = s.cfg.Batch
	s.run.Go("consume", func(ctx context.Context) error { return natsx.ConsumeBatches(ctx, s.cons, opts, s.h.handle) })
	if s.cfg.FillInterval > 0 {
		s.run.Go("fill ratio", func(ctx context.Context) error {
			measureFill(ctx, s.filter, s.run.Redis, s.cfg.FillInterval, s.m, s.log)
			return nil
		})
	}
	s.run.Go("memo trim", func(ctx context.Context) error {
		trimMemos(ctx, s.store, &s.recovered, func(ctx context.Context) (uint64, error) {
			info, err := s.cons.Info(ctx)
			if err != nil {
				return 0, err
			}
			return info.AckFloor.Stream, nil
		}, s.cfg.MemoTrimInterval, s.m, s.log)
		return nil
	})
	s.log.Info("dedup starting", "batch", s.cfg.Batch, "max_depth", s.cfg.MaxDepth, "shards", s.cfg.Common.Shards,
		"cache_size", s.cfg.CacheSize, "strip_session_ids", s.cfg.Norm.StripSessionIDs, "sort_query", s.cfg.Norm.SortQuery)
	return s.run.RunLoops(ctx)
}

// checkLost publishes again the outputs of the input messages NATS lost (recoverLost; at a
// reconnect lostAt is when the connection was lost), counts and logs them, and hands them
// to the trim loop.
func (s *Service) checkLost(ctx context.Context, lostAt time.Time) error {
	ids, urls, err := recoverLost(ctx, s.run.JS, s.store, s.h.publish, s.cfg.Common.Shards, lostAt)
	if err != nil || len(ids) == 0 {
		return err
	}
	s.m.recovered.Add(float64(len(ids)))
	s.log.Warn("NATS lost input messages whose URLs Redis holds as seen; their new URLs published again",
		"messages", len(ids), "urls", urls, "first", ids[0], "at_reconnect", !lostAt.IsZero())
	s.recovered.add(ids, time.Now().Add(s.cfg.Common.Durability.Window()))
	return nil
}

// Close releases the connections of a Service that is not Run (Run closes them itself).
func (s *Service) Close() { s.run.Close() }

// Addr is the address its HTTP server (metrics, probes) listens on.
func (s *Service) Addr() string { return s.run.Addr() }

// setLayers updates the gauges that follow the filter's layers.
func (m *metrics) setLayers(f bloom.Parts) {
	m.layers.Set(float64(f.Layers()))
	m.filterBits.Set(float64(f.Bits()))
	m.bloomBytes.Set(float64(f.Bytes()))
	m.nextBytes.Set(float64(f.NextBytes()))
}

// measureFill updates the fill-ratio gauge and the filter's figures in Redis now and
// every interval. BITCOUNT reads the whole newest layer, which is why this is periodic
// and not per batch.
func measureFill(ctx context.Context, f bloom.Parts, rdb redis.UniversalClient, every time.Duration, m *metrics, log *slog.Logger) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		// Another replica may have added a layer.
		err := f.Load(ctx, rdb)
		if err == nil {
			m.setLayers(f)
			var st bloom.Stats
			if st, err = f.ReadStats(ctx, rdb); err == nil {
				m.fillRatio.Set(st.Fill)
				err = f.WriteStats(ctx, rdb, st)
			}
		}
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			m.failures.WithLabelValues(stageFillRatio).Inc()
			log.Warn("measuring bloom fill ratio", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// trimMemos removes, now and every interval, the memos of messages at or below the
// consumer's ack floor: those messages are acked or terminated and never come again.
func trimMemos(ctx context.Context, s *seen.Store, rec *recovered, ackFloor func(context.Context) (uint64, error), every time.Duration, m *metrics, log *slog.Logger) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		now := time.Now()
		if ids := rec.due(now); len(ids) > 0 {
			if err := s.Forget(ctx, ids); err != nil {
				rec.add(ids, now)
				if ctx.Err() == nil {
					m.failures.WithLabelValues(stageForget).Inc()
					log.Warn("forgetting the memos of recovered messages", "err", err)
				}
			}
		}
		floor, err := ackFloor(ctx)
		if err == nil {
			var left int64
			if _, left, err = s.Trim(ctx, floor); err == nil {
				m.memos.Set(float64(left))
			}
		}
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			m.failures.WithLabelValues(stageTrim).Inc()
			log.Warn("trimming seen-test memos", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Compile-time check that the cached Redis-backed store is what the handler expects.
var _ seenTester = (*seen.Cached)(nil)

// Compile-time check of the handler's signature against the consume loop's.
var _ natsx.BatchHandler = (*handler)(nil).handle
