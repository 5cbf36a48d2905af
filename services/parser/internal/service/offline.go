package service

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"

	"github.com/nats-io/nats.go"
	"github.com/redis/go-redis/v9"

	"github.com/trawl/trawl/services/parser/internal/config"
	"github.com/trawl/trawl/services/parser/internal/contentdup"
	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/policy"
)

// Offline is the parser's work on a batch of page messages without the message
// transport: decoding each page, extraction, the duplicate check of the batch against
// Redis, encoding the documents and packing the batch's links, by the same steps as
// HandleBatch. It measures the per-page cost apart from NATS, whose share is counted
// separately.
type Offline struct {
	proc    *processor
	dups    contentIndex // nil without Redis
	workers int
}

// NewOffline builds the per-page work of cfg; with rdb set, content dedup runs against
// the index there (initialised as the service does), and links are held to the site
// policies stored there (TRAWL_PARSER_POLICY).
func NewOffline(ctx context.Context, cfg config.Config, rdb redis.UniversalClient, log *slog.Logger) (*Offline, error) {
	proc, err := newProcessorOf(cfg, log)
	if err != nil {
		return nil, err
	}
	o := &Offline{proc: proc, workers: max(cfg.ParseConcurrency, 1)}
	if rdb != nil && cfg.Policy {
		// The rules as loaded now: a measurement holds them still.
		w, err := policy.NewWatcher(ctx, policy.NewStore(rdb, cfg.Common.RedisPrefix), cfg.Rules.Poll)
		if err != nil {
			return nil, fmt.Errorf("parser: site policies: %w", err)
		}
		proc.rules = w.Current
	}
	if rdb != nil && cfg.ContentDedup {
		idx, err := contentdup.New(rdb, cfg.Common.RedisPrefix, cfg.ContentDedupOptions())
		if err != nil {
			return nil, err
		}
		if err := idx.Init(ctx); err != nil {
			return nil, err
		}
		o.dups = idx
	}
	return o, nil
}

// Batch handles one batch of page messages (as crawlmsg.PageMsg builds them) and returns
// the documents and the crawl.discovered messages it would publish. A page that fails to
// decode fails the batch.
func (o *Offline) Batch(ctx context.Context, msgs []*nats.Msg) (docs [][]byte, discovered []*nats.Msg, err error) {
	outs := make([]*outcome, len(msgs))
	errs := make([]error, len(msgs))
	parallel(len(msgs), o.workers, func(i int) {
		page, err := crawlmsg.DecodePage(msgs[i].Header, msgs[i].Data)
		if err != nil {
			errs[i] = err
			return
		}
		out, err := o.proc.process(page)
		if err != nil {
			errs[i] = err
			return
		}
		o.proc.judgeRecrawl(page, out)
		outs[i] = out
	})
	for _, err := range errs {
		if err != nil {
			return nil, nil, fmt.Errorf("parser: offline batch: %w", err)
		}
	}
	if o.dups != nil {
		if _, err := o.proc.markDuplicates(ctx, o.dups, outs); err != nil {
			return nil, nil, err
		}
	}
	parallel(len(msgs), o.workers, func(i int) { errs[i] = o.proc.encode(outs[i]) })
	var links []linkSource
	for i, out := range outs {
		if errs[i] != nil {
			return nil, nil, errs[i]
		}
		if out.doc != nil {
			docs = append(docs, out.doc)
		}
		if out.follow != nil {
			links = append(links, linkSource{pageID: "offline:" + strconv.Itoa(i), group: out.follow})
		}
	}
	discovered, err = discoveredMsgs(links, o.proc.linkBudget)
	if err != nil {
		return nil, nil, err
	}
	return docs, discovered, nil
}
