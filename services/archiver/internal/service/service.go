// Package service wires the archiver: it consumes crawl.pages with its own durable
// consumer, writes each page as WARC records (request, and response or revisit) to the
// current file, fsyncs once per batch and only then lets the batch be acked.
package service

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync/atomic"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/trawl/trawl/services/archiver/internal/config"
	"github.com/trawl/trawl/services/archiver/internal/upload"
	"github.com/trawl/trawl/services/archiver/internal/warc"
	"github.com/trawl/trawl/shared/digestindex"
	"github.com/trawl/trawl/shared/natsx"
	"github.com/trawl/trawl/shared/runner"
	"github.com/trawl/trawl/shared/topology"
)

// Software names the writer in every warcinfo record.
const Software = "trawl-archiver/0.1"

// Service is a running archiver.
type Service struct {
	cfg    config.Config
	log    *slog.Logger
	run    *runner.Runner
	nc     *nats.Conn
	js     jetstream.JetStream
	index  *digestindex.Index // nil when TRAWL_ARCHIVE_REVISITS is off
	bodies jetstream.ObjectStore
	cons   jetstream.Consumer
	m      *metrics

	w       *warc.Writer
	written *recent
	up      *upload.Queue // nil without object storage
	saved   atomic.Int64  // payload octets revisits saved since start
}

// New recovers the files a stopped archiver left open, then connects to NATS (and Redis
// when revisits are on), declares the topology and the archiver's own consumer, and opens
// the HTTP listener. The caller must call Run (which seals the file and closes everything
// when it returns) or Close.
func New(ctx context.Context, cfg config.Config, log *slog.Logger) (_ *Service, err error) {
	s := &Service{cfg: cfg, log: log, written: newRecent(1 << 16)}
	if err = os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("archiver: %w", err)
	}
	rec, err := warc.Recover(cfg.Dir, cfg.ID)
	if err != nil {
		return nil, err
	}
	for id := range rec.Records {
		s.written.add(id)
	}
	opts := []runner.Option{runner.WithBodies()}
	if cfg.Revisits {
		opts = append(opts, runner.WithRedis())
	}
	if s.run, err = runner.Start(ctx, "archiver", cfg.Common, log, opts...); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	s.nc, s.js, s.bodies = s.run.NC, s.run.JS, s.run.Bodies
	s.m = newMetrics(s.run.Metrics)
	if len(rec.Files) > 0 {
		s.m.recovered.Add(float64(len(rec.Files)))
		log.Warn("sealed files left open by a stopped archiver", "files", rec.Files, "cut_octets", rec.Cut, "records", len(rec.Records))
	}
	if cfg.Revisits {
		if _, err = dropLegacyDigests(ctx, s.run.Redis, cfg.Common.RedisPrefix, log); err != nil {
			return nil, err
		}
		s.index = digestindex.New(s.run.Redis, cfg.DedupIndex())
	}
	if s.up, err = s.newUploads(); err != nil {
		return nil, err
	}
	if s.cons, err = s.js.CreateOrUpdateConsumer(ctx, topology.StreamPages, topology.ArchiverConsumer(cfg.Common.Timings())); err != nil {
		return nil, fmt.Errorf("archiver: consumer %s/%s: %w", topology.StreamPages, topology.ConsumerArchiver, err)
	}
	s.w, err = warc.NewWriter(warc.Options{
		Dir: cfg.Dir, ID: cfg.ID, MaxSize: cfg.MaxSize, Info: s.warcinfo(),
		OnSeal: func(name string) {
			s.m.files.Inc()
			log.Info("sealed", "file", name, "dedup_saved_bytes", s.saved.Load())
			if s.up != nil {
				s.up.Notify()
			}
		},
		BeforeSeal: func() error { return s.nc.FlushTimeout(cfg.Common.AckWait) },
	})
	if err != nil {
		return nil, err
	}
	return s, nil
}

// warcinfo is the body of each file's warcinfo record.
func (s *Service) warcinfo() []warc.Field {
	host, _ := os.Hostname()
	return []warc.Field{
		{Name: "software", Value: Software},
		{Name: "format", Value: "WARC File Format 1.1"},
		{Name: "conformsTo", Value: "https://iipc.github.io/warc-specifications/specifications/warc-format/warc-1.1/"},
		{Name: "hostname", Value: host},
		{Name: "operator", Value: s.cfg.Operator},
		{Name: "robots", Value: s.cfg.Robots},
		{Name: "description", Value: s.cfg.Description},
		{Name: "isPartOf", Value: s.cfg.Common.RedisPrefix},
	}
}

// Addr is the address of the /metrics, /healthz and /readyz listener.
func (s *Service) Addr() string { return s.run.Addr() }

// Run archives pages until ctx ends, then finishes the batch in hand and seals the
// current file (after the batch's acks reach the server) before NATS is closed.
func (s *Service) Run(ctx context.Context) error {
	s.runUploads() // its closer runs after the seal's: the last registered runs first
	s.run.OnClose(func() {
		if err := s.w.Seal(); err != nil {
			s.log.Error("seal on stop; the next start recovers the file", "err", err)
		}
	})
	s.run.Go("consume", s.consume)
	return s.run.RunLoops(ctx)
}

func (s *Service) consume(ctx context.Context) error {
	s.log.Info("archiver consuming", "stream", topology.StreamPages, "consumer", topology.ConsumerArchiver,
		"dir", s.cfg.Dir, "id", s.cfg.ID, "max_size", s.cfg.MaxSize, "revisits", s.cfg.Revisits, "dedup_index", s.cfg.DedupIndex(), "http", s.Addr())
	// With revisits on, the loop waits while Redis is away (every batch would fail its
	// digest lookup).
	opts := s.run.ConsumeOptions(s.m.terminated)
	opts.Batch = s.cfg.Batch
	// One batch at a time (InFlight 1): the file is one sequence, and a batch is acked
	// only after its records are synced. Its acks need no settling (the runner is started
	// without WithSettling): the records are on disk by then, and nothing a later stage
	// depends on was stored for them (a digest Redis loses only makes a later capture
	// whole instead of a revisit). Settled, a killed archiver would be handed again what
	// it archived in the window.
	return natsx.ConsumeBatches(ctx, s.cons, opts, s.HandleBatch)
}

// Close releases the connections without serving and without sealing (for a Service from
// New that is not Run; Run closes them itself).
func (s *Service) Close() {
	if s.run != nil {
		s.run.Close()
	}
}

// recent remembers the capture record ids written lately (two generations of up to n
// each), so a redelivered page whose records are already whole in a file is not written
// again.
type recent struct {
	n         int
	cur, prev map[string]struct{}
}

func newRecent(n int) *recent { return &recent{n: n, cur: map[string]struct{}{}} }

func (r *recent) add(id string) {
	if len(r.cur) >= r.n {
		r.prev, r.cur = r.cur, make(map[string]struct{}, r.n)
	}
	r.cur[id] = struct{}{}
}

func (r *recent) has(id string) bool {
	if _, ok := r.cur[id]; ok {
		return true
	}
	_, ok := r.prev[id]
	return ok
}
