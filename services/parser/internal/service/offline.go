package service

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/trawl/trawl/services/parser/internal/config"
	"github.com/trawl/trawl/services/parser/internal/contentdup"
	"github.com/trawl/trawl/services/parser/internal/render"
	"github.com/trawl/trawl/shared/natsx"
	"github.com/trawl/trawl/shared/obs"
	"github.com/trawl/trawl/shared/policy"
	"github.com/trawl/trawl/shared/topology"
)

// Offline is the parser without its message transport: it runs a batch of page messages
// through the very steps HandleBatch runs (parseBatch, then settle) and returns the
// messages HandleBatch would publish, instead of publishing them and acking the pages.
// It measures the per-page cost apart from NATS, whose share is counted separately.
type Offline struct {
	s *Service
}

// NewOffline builds the parser of cfg without a consumer. With rdb set, content dedup runs
// against the index there (initialised as the service does), links are held to the site
// policies stored there (TRAWL_PARSER_POLICY, loaded once: a measurement holds them still)
// and render decisions are kept there for trawlctl explain. With js set, the reads the
// service makes of NATS work too (bodies sent by reference, recrawl schedules a sitemap
// brings forward); without it a page that needs one fails. Its metrics go to a registry
// of its own.
func NewOffline(ctx context.Context, cfg config.Config, rdb redis.UniversalClient, js jetstream.JetStream, log *slog.Logger) (*Offline, error) {
	proc, err := newProcessorOf(cfg, log)
	if err != nil {
		return nil, err
	}
	s := &Service{cfg: cfg, log: log, proc: proc, js: js, m: newMetrics(obs.NewMetrics(prometheus.NewRegistry(), "parser"))}
	if js != nil {
		if s.bodies, err = natsx.ObjectStore(ctx, js, topology.Bodies(cfg.Common.Topology())); err != nil {
			return nil, fmt.Errorf("parser: bodies store: %w", err)
		}
	}
	if s.proc.render, err = render.New(cfg.Render, s.policyRule()); err != nil {
		return nil, err
	}
	if rdb == nil {
		return &Offline{s: s}, nil
	}
	s.rdb = rdb
	if cfg.Policy {
		w, err := policy.NewWatcher(ctx, policy.NewStore(rdb, cfg.Common.RedisPrefix), cfg.Rules.Poll, policyFields)
		if err != nil {
			return nil, fmt.Errorf("parser: site policies: %w", err)
		}
		s.proc.rules = w.Current
	}
	if cfg.ContentDedup {
		idx, err := contentdup.New(rdb, cfg.Common.RedisPrefix, cfg.ContentDedupOptions())
		if err != nil {
			return nil, err
		}
		if err := idx.Init(ctx); err != nil {
			return nil, err
		}
		s.contentDups = idx
	}
	return &Offline{s: s}, nil
}

// Batch handles one batch of page messages (as crawlmsg.PageMsg builds them), ids[i]
// standing for the id natsx.MsgID gives msgs[i] once delivered. It returns the messages
// HandleBatch would publish, in its order, and HandleBatch's result for each page.
func (o *Offline) Batch(ctx context.Context, ids []string, msgs []*nats.Msg) ([]*nats.Msg, []error) {
	if len(ids) != len(msgs) {
		errs := make([]error, len(msgs))
		for i := range errs {
			errs[i] = fmt.Errorf("parser: offline batch of %d messages with %d ids", len(msgs), len(ids))
		}
		return nil, errs
	}
	in := make([]pageIn, len(msgs))
	for i, m := range msgs {
		in[i] = pageIn{id: ids[i], header: m.Header, data: m.Data}
	}
	b := o.s.parseBatch(ctx, in)
	o.s.settle(ctx, b)
	return b.pub, b.errs
}
