// Package service wires the parser: it consumes crawl.pages with the `parser` durable,
// extracts each HTML page, checks the batch's texts against the content-duplicate index in
// Redis (one script call per batch), and publishes a Document to crawl.docs and the
// followable outlinks as one DiscoveredBatch to crawl.discovered, acking a batch of pages
// only after everything it produced is stored.
package service

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/trawl/trawl/services/parser/internal/config"
	"github.com/trawl/trawl/services/parser/internal/contentdup"
	"github.com/trawl/trawl/services/parser/internal/extract"
	"github.com/trawl/trawl/services/parser/internal/render"
	"github.com/trawl/trawl/services/parser/internal/scope"
	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/natsx"
	"github.com/trawl/trawl/shared/obs"
	"github.com/trawl/trawl/shared/policy"
	"github.com/trawl/trawl/shared/runner"
	"github.com/trawl/trawl/shared/topology"
)

// Service is a running parser.
type Service struct {
	cfg  config.Config
	log  *slog.Logger
	nc   *nats.Conn
	js   jetstream.JetStream
	rdb  redis.UniversalClient // nil when neither content dedup nor the site policies need it
	m    *metrics
	http *obs.Server
	proc *processor
	// contentDups is the index of the crawl's page texts (contentdup); nil when
	// TRAWL_CONTENT_DEDUP is off.
	contentDups contentIndex
	// dropLegacy deletes the content index keys of an earlier layout (nil: no index).
	dropLegacy func(context.Context) (int64, error)
	// bodies holds page bodies sent by reference (crawlmsg.BodyRef).
	bodies jetstream.ObjectStore
	run    *runner.Runner
	cons   jetstream.Consumer
	// rules keeps the live site policies current; nil with TRAWL_PARSER_POLICY=false.
	rules *policy.Watcher
}

// New connects to NATS (and to Redis unless content dedup is off), declares the topology
// and opens the HTTP listener. The caller must call Run (which closes everything when it
// returns) or Close.
func New(ctx context.Context, cfg config.Config, log *slog.Logger) (_ *Service, err error) {
	proc, err := newProcessorOf(cfg, log)
	if err != nil {
		return nil, err
	}
	s := &Service{cfg: cfg, log: log, proc: proc}
	// Its acks settle: a page acked stands for the links and document it published.
	opts := []runner.Option{runner.WithBodies(), runner.WithSettling()}
	// Redis holds the content index, the site policies and the render decisions trawlctl
	// explains.
	if cfg.ContentDedup || cfg.Policy || cfg.Render.On() {
		opts = append(opts, runner.WithRedis())
	}
	if s.run, err = runner.Start(ctx, "parser", cfg.Common, log, opts...); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	s.nc, s.js, s.bodies, s.http = s.run.NC, s.run.JS, s.run.Bodies, s.run.HTTP
	s.rdb = s.run.Redis
	s.proc.render, err = render.New(cfg.Render, s.policyRule())
	if err != nil {
		return nil, err
	}
	if cfg.ContentDedup {
		var idx *contentdup.Index
		if idx, err = contentdup.New(s.rdb, cfg.Common.RedisPrefix, cfg.ContentDedupOptions()); err != nil {
			return nil, err
		}
		if err = idx.Init(ctx); err != nil {
			return nil, err
		}
		s.contentDups, s.dropLegacy = idx, idx.DropLegacy
	}
	if cfg.Policy {
		// Loaded before the first page: links are never held to no rules while rules exist.
		if s.rules, err = policy.NewWatcher(ctx, policy.NewStore(s.rdb, cfg.Common.RedisPrefix), cfg.Rules.Poll, policyFields); err != nil {
			return nil, fmt.Errorf("parser: site policies: %w", err)
		}
		s.proc.rules = s.rules.Current
	}
	if s.cons, err = s.js.Consumer(ctx, topology.StreamPages, topology.ConsumerParser); err != nil {
		return nil, fmt.Errorf("parser: consumer %s/%s: %w", topology.StreamPages, topology.ConsumerParser, err)
	}
	s.m = newMetrics(s.run.Metrics)
	s.m.rules = s.rules
	s.proc.embeds = newEmbedSwitch(ctx, s.cfg.Embeds, s.nc, s.js, log)
	s.run.OnClose(s.proc.embeds.close)
	s.m.embedsOn = s.proc.embeds.On
	return s, nil
}

// newProcessorOf builds the per-page work from the configuration: extraction, scope,
// sitemaps, recrawl and the message sizes the stream allows. Requisites stay off until
// the service sets its switch.
func newProcessorOf(cfg config.Config, log *slog.Logger) (*processor, error) {
	topo := cfg.Common.Topology()
	// Room for any header block: a render task carries the page's Trawl-Meta, which is
	// not measured before its body is sized.
	maxMsg := int(topo.MaxMsgSize) - topology.MaxHeaderBlock
	scfg, err := cfg.ScopeConfig(maxMsg)
	if err != nil {
		return nil, err
	}
	filter, err := scope.New(scfg)
	if err != nil {
		return nil, err
	}
	sitemaps, err := sitemapRulesOf(cfg, scfg)
	if err != nil {
		return nil, err
	}
	decider, err := render.New(cfg.Render, nil)
	if err != nil {
		return nil, err
	}
	return &processor{
		render:  decider,
		extract: extractOptions(cfg),
		filter:  filter,
		maxDoc:  maxMsg,
		// Half a message: the size of a group is an estimate, and JSON escapes some
		// URL characters in more octets than the estimate counts.
		linkBudget:   maxMsg / 2,
		minWords:     cfg.NearDupMinWords,
		maxRedirects: cfg.MaxRedirects,
		sitemaps:     sitemaps,
		log:          log,
		recrawl:      recrawlOf(cfg),
	}, nil
}

// extractOptions maps the configuration onto extraction limits.
func extractOptions(cfg config.Config) extract.Options {
	limits := extract.DefaultLimits()
	// The fetcher already capped the body; the parser reads all of it, so a link in the
	// last kilobyte of a page of many megabytes is found.
	limits.MaxBytes = crawlmsg.MaxBody
	// The token cap guards against pathological markup, not size; keep it from cutting a
	// large ordinary page (about one token per 16 octets at the body ceiling).
	limits.MaxTokens = max(limits.MaxTokens, crawlmsg.MaxBody/16)
	limits.MaxTextBytes = int(cfg.MaxTextBytes)
	if limits.MaxTextBytes == 0 {
		limits.MaxTextBytes = -1 // TRAWL_MAX_TEXT_BYTES=0 keeps no text; extract reads 0 as "default"
	}
	// Extraction keeps more links than are emitted: the document lists them all, and
	// scope rejects some before the outlink cap applies.
	limits.MaxLinks = max(limits.MaxLinks, 2*cfg.MaxOutlinks)
	return extract.Options{Limits: limits, RobotsAgent: strings.ToLower(cfg.RobotsAgent)}
}

// Addr is the address of the /metrics, /healthz and /readyz listener.
func (s *Service) Addr() string { return s.http.Addr() }

// Run serves HTTP and consumes pages until ctx ends, then finishes and acks the pages it
// holds (natsx drain), flushes, and closes the connection.
func (s *Service) Run(ctx context.Context) error {
	s.run.Go("body sweep", func(ctx context.Context) error { s.sweepLoop(ctx); return nil })
	if s.rules != nil {
		s.run.Go("policy watch", s.rules.Run)
	}
	if s.dropLegacy != nil {
		s.run.Go("legacy content keys", s.dropLegacyContent)
	}
	s.run.Go("consume", s.consume)
	return s.run.RunLoops(ctx)
}

// dropLegacyContent deletes, beside the crawl, the content index keys of an earlier
// release's layout (contentdup.DropLegacy), then idles: a loop that returns would stop
// the service. A sweep cut short is logged and made again at the next start.
func (s *Service) dropLegacyContent(ctx context.Context) error {
	start := time.Now()
	n, err := s.dropLegacy(ctx)
	switch {
	case err != nil && ctx.Err() == nil:
		s.log.Warn("content index: the earlier layout's keys not all deleted; the next start sweeps again", "deleted", n, "err", err)
	case n > 0:
		s.log.Info("content index: the earlier layout's exact keys deleted", "keys", n, "took", time.Since(start).Round(time.Millisecond))
	}
	<-ctx.Done()
	return nil
}

func (s *Service) consume(ctx context.Context) error {
	s.log.Info("parser consuming", "stream", topology.StreamPages, "consumer", topology.ConsumerParser,
		"concurrency", s.cfg.ParseConcurrency, "batch", s.cfg.ParseBatch, "inflight", s.cfg.ParseInFlight, "http", s.Addr(),
		"content_dedup", s.cfg.ContentDedup, "near_dup_distance", s.cfg.NearDupDistance,
		"embeds", s.cfg.Embeds, "embeds_on", s.proc.embeds.On())
	// With Redis, the loop waits while Redis is away (every batch would fail its duplicate
	// check).
	opts := s.run.ConsumeOptions(s.m.terminated)
	opts.Batch, opts.InFlight = s.cfg.ParseBatch, s.cfg.ParseInFlight
	opts.Acked = s.releaseAcked
	return natsx.ConsumeBatches(ctx, s.cons, opts, s.HandleBatch)
}

// Close releases the connections without serving (for a Service from New that is not
// Run; Run closes them itself).
func (s *Service) Close() {
	if s.run != nil {
		s.run.Close()
	}
}

// HandleBatch parses msgs (up to TRAWL_PARSE_CONCURRENCY at a time), checks their texts
// for duplicates in one Redis call, publishes every output of the batch in one wave, and
// returns one result per message for natsx to settle: nil (ack), a permanent error
// (terminate: malformed or unknown version), or a retryable one (nak: the duplicate check
// or the publish failed; the retry gives the same verdicts, and the outputs' Nats-Msg-Id
// makes a second publish harmless).
func (s *Service) HandleBatch(ctx context.Context, msgs []jetstream.Msg) []error {
	in := make([]pageIn, len(msgs))
	for i, m := range msgs {
		in[i] = pageIn{id: natsx.MsgID(m), header: m.Headers(), data: m.Data(), msg: m}
	}
	b := s.parseBatch(ctx, in)
	pctx, cancel := context.WithTimeout(ctx, s.cfg.Common.AckWait)
	defer cancel()
	if err := natsx.PublishBatch(pctx, s.js, b.pub); err != nil {
		s.m.publishFailures.Inc()
		s.log.Warn("publish failed; pages will be redelivered", "pages", len(msgs), "err", err)
		b.publishFailed(err)
	}
	s.settle(ctx, b)
	return b.errs
}

// parallel runs fn(0..n-1) on up to workers goroutines.
func parallel(n, workers int, fn func(i int)) {
	workers = min(workers, n)
	if workers <= 1 {
		for i := range n {
			fn(i)
		}
		return
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				fn(i)
			}
		})
	}
	wg.Wait()
}
