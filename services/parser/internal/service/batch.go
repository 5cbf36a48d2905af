package service

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/natsx"
	"github.com/trawl/trawl/shared/topology"
)

// pageIn is one page message of a batch: its id (natsx.MsgID of the delivered message,
// from which the ids of its outputs derive) and its content.
type pageIn struct {
	id     string
	header nats.Header
	data   []byte
	// msg is the delivered message (nil for Offline): its delivery count tells a body
	// missing because this consumer already parsed the page.
	msg jetstream.Msg
}

// parsedBatch is a batch's work up to its publish: one outcome and one result per page
// (as HandleBatch returns them), and every message the batch publishes, in publish order.
type parsedBatch struct {
	outs []*outcome
	errs []error
	pub  []*nats.Msg
}

// parseBatch is everything HandleBatch does before it publishes: it decodes and parses
// msgs (up to TRAWL_PARSE_CONCURRENCY at a time), judges their recrawl, checks their texts
// for duplicates in one Redis call, encodes the documents and builds every message the
// batch produces (documents, render tasks, schedules brought forward, schedules, packed
// discovered links). Offline runs the same, so that what the parser's benchmark measures
// is what the service runs.
func (s *Service) parseBatch(ctx context.Context, msgs []pageIn) *parsedBatch {
	b := &parsedBatch{
		outs: make([]*outcome, len(msgs)),
		errs: make([]error, len(msgs)),
	}
	errs, outs := b.errs, b.outs
	s.proc.embeds.refresh(ctx)
	parallel(len(msgs), s.cfg.ParseConcurrency, func(i int) {
		page, err := crawlmsg.DecodePage(msgs[i].header, msgs[i].data)
		if err != nil {
			errs[i] = fmt.Errorf("parser: decode page: %w", err)
			return
		}
		if ref := page.Meta.BodyRef; ref != nil {
			if page.Body, err = s.resolveBody(ctx, page.Meta.URL, ref, msgs[i].msg); err != nil {
				if errors.Is(err, errParsedBefore) {
					// Nothing to publish again: the delivery that released the body did.
					err = nil
				}
				errs[i] = err
				return
			}
		}
		o, err := s.proc.process(page)
		if err != nil {
			// Only encoding our own output fails here, and a retry would fail the same way.
			errs[i] = natsx.Permanent(err)
			return
		}
		if o.task == nil {
			s.proc.judgeRecrawl(page, o)
		}
		if w, ok := o.why(&page.Meta, time.Now()); ok {
			o.whyRec = &w
		}
		outs[i] = o
	})

	if s.contentDups != nil {
		start := time.Now()
		dctx, cancel := context.WithTimeout(ctx, s.cfg.Common.AckWait)
		full, err := s.proc.markDuplicates(dctx, s.contentDups, outs)
		cancel()
		s.m.dupCheckDuration.Observe(time.Since(start).Seconds())
		if err != nil {
			s.m.dupCheckFailures.Inc()
			s.log.Warn("content dedup check failed; pages will be redelivered", "pages", len(msgs), "err", err)
			for i, o := range outs {
				if o != nil && !o.skipped {
					errs[i] = fmt.Errorf("parser: content dedup: %w", err)
					outs[i] = nil
				}
			}
		}
		s.m.bucketsFull.Add(float64(full))
	}
	parallel(len(msgs), s.cfg.ParseConcurrency, func(i int) {
		if outs[i] == nil {
			return
		}
		if err := s.proc.encode(outs[i]); err != nil {
			errs[i] = natsx.Permanent(err)
			outs[i] = nil
		}
	})

	var links []linkSource
	for i, o := range outs {
		if o == nil {
			continue
		}
		id := msgs[i].id
		if o.doc != nil {
			b.pub = append(b.pub, natsx.NewMsg(topology.SubjectDocs, topology.DocID(id), o.doc))
		}
		if o.task != nil {
			tm, err := s.renderTaskMsg(ctx, o)
			if err != nil {
				errs[i], outs[i] = err, nil
				continue
			}
			b.pub = append(b.pub, tm)
		}
		if len(o.changed) > 0 {
			nudges, err := s.bringForward(ctx, o, id)
			if err != nil {
				errs[i], outs[i] = err, nil
				continue
			}
			b.pub = append(b.pub, nudges...)
		}
		if sm, err := s.proc.scheduleMsg(o, topology.ScheduleID(id)); err != nil {
			errs[i], outs[i] = natsx.Permanent(err), nil
			continue
		} else if sm != nil {
			b.pub = append(b.pub, sm)
		}
		switch {
		case len(o.follows) > 0:
			// Several groups of one page need ids of their own, or the duplicate window
			// would drop all but the first message.
			for n, g := range o.follows {
				pid := id
				if n > 0 {
					pid += "#" + strconv.Itoa(n)
				}
				links = append(links, linkSource{pageID: pid, group: g})
			}
		case o.follow != nil:
			links = append(links, linkSource{pageID: id, group: o.follow})
		}
	}
	disc, err := discoveredMsgs(links, s.proc.linkBudget)
	if err != nil {
		// Encoding our own struct: no input can make it fail, so it is retried.
		for i, o := range outs {
			if o != nil && o.follow != nil {
				errs[i] = err
			}
		}
	}
	b.pub = append(b.pub, disc...)
	return b
}

// publishFailed marks the pages whose outputs a failed publish lost for redelivery.
func (b *parsedBatch) publishFailed(err error) {
	for i, o := range b.outs {
		if o != nil && (!o.skipped || o.schedule != nil || o.follow != nil) {
			b.errs[i] = fmt.Errorf("parser: publish: %w", err)
		}
	}
}

// settle is what follows a batch's publish: the counts of the pages it settled and their
// render decisions, kept for trawlctl explain. Their bodies go once they are acked
// (releaseAcked).
func (s *Service) settle(ctx context.Context, b *parsedBatch) {
	for i, o := range b.outs {
		if o != nil && b.errs[i] == nil {
			s.m.record(o, s.contentDups != nil)
		}
	}
	s.recordWhys(ctx, b.outs, b.errs)
}
