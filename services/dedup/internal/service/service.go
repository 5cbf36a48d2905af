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
	"github.com/redis/go-redis/v9"

	"github.com/trawl/trawl/services/dedup/internal/bloom"
	"github.com/trawl/trawl/services/dedup/internal/cache"
	"github.com/trawl/trawl/services/dedup/internal/config"
	"github.com/trawl/trawl/services/dedup/internal/seen"
	"github.com/trawl/trawl/shared/crawlid"
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
	crawl, err := crawlid.Open(ctx, js, rdb, cfg.Common, log)
	if err != nil {
		return fmt.Errorf("dedup: %w", err)
	}
	if err := filter.Init(ctx, rdb); err != nil {
		return fmt.Errorf("dedup: %w", err)
	}
	layers := filter.Layers()
	newest := layers[len(layers)-1]
	log.Info("bloom filter ready", "capacity", filter.Capacity, "fp_rate", filter.FPRate, "growth", filter.Growth,
		"tighten", filter.Tighten, "layers", len(layers), "newest_bits", newest.M, "newest_hashes", newest.K,
		"bytes", filter.Bytes(), "next_layer_bytes", filter.NextLayer().Bytes(), "meta", filter.MetaKey())

	reg := obs.NewRegistry()
	m := newMetrics(reg)
	_ = crawl.Register(reg)
	m.setLayers(filter)
	srv, err := obs.NewServer(cfg.HTTPAddr, reg, map[string]obs.Check{
		"nats": func(context.Context) error {
			if s := nc.Status(); s != nats.CONNECTED {
				return fmt.Errorf("nats: %s", s)
			}
			return nil
		},
		"redis": crawl.Check,
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

	store := seen.New(rdb, filter, cfg.RedisPrefix)
	store.OnGrow = func(l bloom.Layer) {
		log.Warn("bloom filter full: added a layer", "layer", l.Index, "layers", l.Index+1, "capacity", l.N,
			"fp_rate", l.P, "bits", l.M, "hashes", l.K, "bytes", l.Bytes(), "total_bytes", filter.Bytes(),
			"next_layer_bytes", filter.NextLayer().Bytes())
		m.setLayers(filter)
	}
	checker := &seen.Cached{Store: store}
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
		Gate:       crawl.Gate,
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
	goRun("crawl watch", func(ctx context.Context) error { crawl.Watch(ctx); return nil })
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
	goRun("memo trim", func(ctx context.Context) error {
		trimMemos(ctx, store, func(ctx context.Context) (uint64, error) {
			info, err := cons.Info(ctx)
			if err != nil {
				return 0, err
			}
			return info.AckFloor.Stream, nil
		}, cfg.MemoTrimInterval, m, log)
		return nil
	})
	log.Info("dedup running", "http", srv.Addr(), "batch", cfg.Batch, "max_depth", cfg.MaxDepth, "shards", cfg.Shards,
		"cache_size", cfg.CacheSize, "strip_session_ids", cfg.Norm.StripSessionIDs, "sort_query", cfg.Norm.SortQuery)
	wg.Wait()
	log.Info("dedup stopped")
	return errors.Join(errs...)
}

// setLayers updates the gauges that follow the filter's layers.
func (m *metrics) setLayers(f *bloom.Filter) {
	layers := f.Layers()
	var bits uint64
	for _, l := range layers {
		bits += l.M
	}
	m.layers.Set(float64(len(layers)))
	m.filterBits.Set(float64(bits))
	m.bloomBytes.Set(float64(f.Bytes()))
	m.nextBytes.Set(float64(f.NextLayer().Bytes()))
}

// measureFill updates the fill-ratio gauge and the filter's figures in Redis now and
// every interval. BITCOUNT reads the whole newest layer, which is why this is periodic
// and not per batch.
func measureFill(ctx context.Context, f *bloom.Filter, rdb *redis.Client, every time.Duration, m *metrics, log *slog.Logger) {
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
func trimMemos(ctx context.Context, s *seen.Store, ackFloor func(context.Context) (uint64, error), every time.Duration, m *metrics, log *slog.Logger) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
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
