// Package service wires the dedup service: it consumes DiscoveredBatch messages from
// CRAWL_DISCOVERED in batches, normalises their URLs (TRAWL_STRIP_SESSION_IDS,
// TRAWL_SORT_QUERY), runs the seen test for each batch (the in-process cache, then one
// Redis call for the rest), and publishes the new URLs to crawl.frontier.<shard> as one
// FrontierBatch per (input message, shard).
package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/trawl/trawl/services/dedup/internal/bloom"
	"github.com/trawl/trawl/services/dedup/internal/cache"
	"github.com/trawl/trawl/services/dedup/internal/config"
	"github.com/trawl/trawl/services/dedup/internal/seen"
	"github.com/trawl/trawl/shared/natsx"
	"github.com/trawl/trawl/shared/obs"
	"github.com/trawl/trawl/shared/redisx"
	"github.com/trawl/trawl/shared/seed"
	"github.com/trawl/trawl/shared/topology"
)

// Run runs the service until ctx ends, then stops pulling, finishes the batch in hand
// (publish, ack) and returns. It returns early only on a start-up failure or an error the
// consume loop cannot recover from.
func Run(ctx context.Context, cfg config.Config, log *slog.Logger) error {
	filter, err := bloom.New(cfg.RedisPrefix, cfg.Bloom)
	if err != nil {
		return fmt.Errorf("dedup: %w", err)
	}
	nc, js, err := natsx.Connect(ctx, cfg.NATSURL, "trawl-dedup", log)
	if err != nil {
		return fmt.Errorf("dedup: %w", err)
	}
	defer func() {
		// Acks are buffered writes; flush them so a clean stop does not leave the last
		// batch to be redelivered.
		_ = nc.FlushTimeout(2 * time.Second)
		nc.Close()
	}()
	if err := natsx.Ensure(ctx, js, cfg.Topology(), cfg.Timings(), log); err != nil {
		return fmt.Errorf("dedup: %w", err)
	}
	rdb, err := redisx.Connect(ctx, cfg.RedisURL, log)
	if err != nil {
		return fmt.Errorf("dedup: %w", err)
	}
	defer rdb.Close()
	if err := filter.Init(ctx, rdb); err != nil {
		return fmt.Errorf("dedup: %w", err)
	}
	log.Info("bloom filter ready", "capacity", filter.Capacity, "fp_rate", filter.FPRate,
		"bits", filter.M, "hashes", filter.K, "keys", filter.Keys, "bytes", filter.Bytes(), "meta", filter.MetaKey())

	reg := obs.NewRegistry()
	m := newMetrics(reg)
	m.filterBits.Set(float64(filter.M))
	srv, err := obs.NewServer(cfg.HTTPAddr, reg, map[string]obs.Check{
		"nats": func(context.Context) error {
			if s := nc.Status(); s != nats.CONNECTED {
				return fmt.Errorf("nats: %s", s)
			}
			return nil
		},
		"redis": func(ctx context.Context) error { return redisx.Ping(ctx, rdb) },
	})
	if err != nil {
		return fmt.Errorf("dedup: %w", err)
	}
	if len(cfg.Seeds) > 0 {
		// Seeds given to the deployment (compose's TRAWL_SEEDS) enter like any discovered
		// URL; on a restart they are published again and dropped as already seen.
		n, err := seed.Publish(ctx, js, cfg.Seeds, 0)
		if err != nil {
			return fmt.Errorf("dedup: %w", err)
		}
		log.Info("published seeds", "count", n)
	}
	cons, err := js.Consumer(ctx, topology.StreamDiscovered, topology.ConsumerDedup)
	if err != nil {
		return fmt.Errorf("dedup: consumer %s/%s: %w", topology.StreamDiscovered, topology.ConsumerDedup, err)
	}

	checker := &seen.Cached{Store: seen.New(rdb, filter, cfg.RedisPrefix)}
	h := &handler{
		seen:     checker,
		publish:  func(ctx context.Context, msgs []*nats.Msg) error { return natsx.PublishBatch(ctx, js, msgs) },
		norm:     cfg.Norm,
		maxDepth: cfg.MaxDepth,
		shards:   cfg.Shards,
		m:        m,
		log:      log,
	}
	if cfg.CacheSize > 0 {
		// Empty at start: it fills from the test-and-set results, so a restart costs only
		// a few extra Redis lookups.
		checker.Cache = cache.New(cfg.CacheSize)
		h.entries = checker.Cache.Len
	}
	opts := natsx.ConsumeOptions{
		Batch:      cfg.Batch,
		MaxDeliver: cfg.MaxDeliver,
		Gate:       func(ctx context.Context) error { return redisx.Ping(ctx, rdb) },
		OnTerm:     func(reason string) { m.terminated.WithLabelValues(reason).Inc() },
		Log:        log,
	}

	// One failing part (say the HTTP server) stops the others, so the process exits and is
	// restarted instead of running half-alive.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	goRun := func(name string, fn func(context.Context) error) {
		wg.Go(func() {
			if err := fn(ctx); err != nil && ctx.Err() == nil {
				mu.Lock()
				errs = append(errs, fmt.Errorf("dedup: %s: %w", name, err))
				mu.Unlock()
				cancel()
			}
		})
	}
	goRun("http", srv.Run)
	goRun("consume", func(ctx context.Context) error {
		err := natsx.ConsumeBatches(ctx, cons, opts, h.handle)
		if err == nil && ctx.Err() == nil {
			err = errors.New("consume loop ended")
		}
		return err
	})
	if cfg.FillInterval > 0 {
		goRun("fill ratio", func(ctx context.Context) error {
			measureFill(ctx, filter, rdb, cfg.FillInterval, m, log)
			return nil
		})
	}
	log.Info("dedup running", "http", srv.Addr(), "batch", cfg.Batch, "max_depth", cfg.MaxDepth, "shards", cfg.Shards,
		"cache_size", cfg.CacheSize, "strip_session_ids", cfg.Norm.StripSessionIDs, "sort_query", cfg.Norm.SortQuery)
	wg.Wait()
	log.Info("dedup stopped")
	return errors.Join(errs...)
}

// measureFill updates the fill-ratio gauge now and every interval. BITCOUNT reads the
// whole filter, which is why this is periodic and not per batch.
func measureFill(ctx context.Context, f *bloom.Filter, rdb bloom.Pipeliner, every time.Duration, m *metrics, log *slog.Logger) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		if r, err := f.FillRatio(ctx, rdb); err != nil {
			if ctx.Err() != nil {
				return
			}
			m.failures.WithLabelValues(stageFillRatio).Inc()
			log.Warn("measuring bloom fill ratio", "err", err)
		} else {
			m.fillRatio.Set(r)
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
