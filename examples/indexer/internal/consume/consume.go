// Package consume feeds the index from crawl.docs through a durable JetStream consumer of
// the indexer's own: the crawler's streams are not work queues for taps, so the indexer
// takes nothing from anyone, and its durable consumer remembers how far it got, so a
// restart resumes instead of starting over. The consumer is registered
// (topology.RegisteredDocsConsumer): the crawl holds while the indexer lags rather than let
// CRAWL_DOCS's byte limit drop documents it has not read. What the stream's limits dropped
// anyway (its age limit, while the indexer was stopped longer than that) shows as a jump in
// the stream sequence, which is logged and counted.
package consume

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/trawl/trawl/examples/indexer/internal/index"
	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/ctxsleep"
	"github.com/trawl/trawl/shared/natsx"
	"github.com/trawl/trawl/shared/topology"
)

// Store is what the consumer writes to.
type Store interface {
	Apply(ctx context.Context, docs []crawlmsg.Document) (index.Counts, error)
}

// Options configure Run.
type Options struct {
	Durable string        // consumer name (default "indexer")
	Batch   int           // documents per transaction (default 256)
	AckWait time.Duration // redelivery timeout of the consumer (default 1m)
	Log     *slog.Logger
	// OnBatch, if set, is called after each batch is written and acked (tests, progress).
	OnBatch func(Stats)
}

// Stats count what a Run did.
type Stats struct {
	Messages  int // documents received
	Upserted  int
	Removed   int
	Malformed int // terminated: not a Document this code reads
	Missed    int // dropped by the stream's limits before the indexer read them
}

// Run consumes until ctx ends. A batch is written in one transaction and acked only after
// the commit, so a crash re-delivers (and idempotently re-writes) at most one batch; the
// batch in hand when ctx ends is finished before Run returns.
func Run(ctx context.Context, js jetstream.JetStream, store Store, o Options) (Stats, error) {
	if o.Durable == "" {
		o.Durable = "indexer"
	}
	if o.Batch <= 0 {
		o.Batch = 256
	}
	if o.AckWait <= 0 {
		o.AckWait = time.Minute
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	var st Stats
	cons, err := consumer(ctx, js, o)
	if err != nil {
		return st, err
	}
	var gaps natsx.SeqGaps
	gaps.Resume(cons.CachedInfo().AckFloor.Stream)
	pulls := natsx.PullPacer{Log: o.Log}
	for ctx.Err() == nil {
		// The pull ends when the server ends it (natsx.PullMaxWait), not at a deadline of
		// the client's, which a late request outlives: the server would deliver into a
		// closed pull, and those documents would wait out AckWait while the crawl holds for
		// this registered consumer. What arrives after ctx ends is still written below.
		mb, err := cons.Fetch(o.Batch, jetstream.FetchMaxWait(natsx.PullMaxWait))
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			if err := pulls.Failed(ctx, cons, err); err != nil {
				return st, fmt.Errorf("consume: %w", err)
			}
			continue
		}
		var msgs []jetstream.Msg
		for m := range mb.Messages() {
			msgs = append(msgs, m)
		}
		if err := natsx.PullError(mb); err != nil && ctx.Err() == nil {
			if err := pulls.Failed(ctx, cons, err); err != nil {
				return st, fmt.Errorf("consume: %w", err)
			}
		} else if err == nil {
			pulls.OK()
		}
		if len(msgs) == 0 {
			continue
		}
		// What was fetched is finished even when ctx ended meanwhile, so a shutdown does
		// not leave messages to wait out AckWait.
		work, wcancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		err = handle(work, store, msgs, &gaps, &st, o)
		wcancel()
		if err != nil {
			return st, err
		}
		if o.OnBatch != nil {
			o.OnBatch(st)
		}
	}
	return st, nil
}

func consumer(ctx context.Context, js jetstream.JetStream, o Options) (jetstream.Consumer, error) {
	for i := 0; ; i++ {
		// CreateOrUpdate keeps an existing consumer's position; DeliverAll only decides
		// where a new one starts: at the oldest document the stream still keeps.
		cons, err := js.CreateOrUpdateConsumer(ctx, topology.StreamDocs,
			topology.RegisteredDocsConsumer(o.Durable, "trawl example indexer", o.AckWait, 4*o.Batch))
		if err == nil {
			return cons, nil
		}
		if !errors.Is(err, jetstream.ErrStreamNotFound) {
			return nil, fmt.Errorf("consume: consumer %s on %s: %w", o.Durable, topology.StreamDocs, err)
		}
		// The crawl's services create the stream; an indexer started first waits for it.
		if i%30 == 0 {
			o.Log.Info("waiting for stream " + topology.StreamDocs + " (start the crawl)")
		}
		if !ctxsleep.Sleep(ctx, time.Second) {
			return nil, fmt.Errorf("consume: stream %s: %w", topology.StreamDocs, ctx.Err())
		}
	}
}

func handle(ctx context.Context, store Store, msgs []jetstream.Msg, gaps *natsx.SeqGaps, st *Stats, o Options) error {
	docs := make([]crawlmsg.Document, 0, len(msgs))
	keep := msgs[:0:0]
	for _, m := range msgs {
		st.Messages++
		if md, err := m.Metadata(); err == nil {
			if n := gaps.Next(md.Sequence.Stream); n > 0 {
				st.Missed += int(n)
				o.Log.Warn("documents missed: the stream dropped them under its limits before they were read",
					"missed", n, "first_seq", md.Sequence.Stream-n, "last_seq", md.Sequence.Stream-1)
			}
		}
		var d crawlmsg.Document
		if err := crawlmsg.Unmarshal(m.Data(), &d); err != nil || d.URL == "" {
			// Redelivering a document this code cannot read would never help.
			st.Malformed++
			o.Log.Error("terminating unreadable document", "err", err)
			_ = m.TermWithReason("indexer: unreadable document")
			continue
		}
		docs = append(docs, d)
		keep = append(keep, m)
	}
	if len(docs) > 0 {
		c, err := store.Apply(ctx, docs)
		if err != nil {
			// Not acked: the batch comes back after AckWait; say so and stop rather than
			// spin on a broken database.
			for _, m := range keep {
				_ = m.Nak()
			}
			return fmt.Errorf("consume: write %d documents: %w", len(docs), err)
		}
		st.Upserted += c.Upserted
		st.Removed += c.Removed
	}
	// Acks are processed in order, so confirming the last one confirms the batch: a
	// restart right after resumes behind it instead of re-indexing it.
	for i, m := range keep {
		var err error
		if i == len(keep)-1 {
			err = m.DoubleAck(ctx)
		} else {
			err = m.Ack()
		}
		if err != nil {
			return fmt.Errorf("consume: ack: %w", err)
		}
	}
	return nil
}
