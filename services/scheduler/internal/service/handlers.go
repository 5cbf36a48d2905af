package service

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/trawl/trawl/services/scheduler/internal/frontier"
	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/natsx"
)

// appliedID is the id a frontier message is applied under at most once: its Nats-Msg-Id,
// which dedup derives from its input and keeps when it publishes the message again, so a
// copy republished after an OS crash lost the first from NATS (dedup's memo recovery) is
// known for what it is, while Redis kept the first's effects; a message published without
// one, its stream identity.
func appliedID(m jetstream.Msg) string {
	if id := m.Headers().Get(nats.MsgIdHdr); id != "" {
		return id
	}
	return natsx.MsgID(m)
}

// handleFrontier applies a batch of frontier messages in one frontier step. A message that
// does not decode is a permanent error (terminated); a Redis failure fails every decoded
// message so that they are redelivered, which is harmless because each message id is
// applied at most once (its marker is kept under its stream sequence until the consumer's
// ack floor passes it; see trimMarkers).
func (s *shard) handleFrontier(ctx context.Context, msgs []jetstream.Msg) []error {
	errs := make([]error, len(msgs))
	batches := make([]frontier.Batch, 0, len(msgs))
	idx := make([]int, 0, len(msgs))
	from := make([]int, 0, len(msgs)) // message index of each batch
	for i, m := range msgs {
		var fb crawlmsg.FrontierBatch
		if err := crawlmsg.Unmarshal(m.Data(), &fb); err != nil {
			errs[i] = fmt.Errorf("frontier message %s: %w", natsx.MsgID(m), err)
			continue
		}
		var seq uint64
		if md, err := m.Metadata(); err == nil {
			seq = md.Sequence.Stream
		}
		id := appliedID(m)
		for g, lg := range fb.LinkGroups() {
			// Each group is applied at most once by its own marker: the message's id for
			// the first (as for a batch of one group), "<id>#<g>" for the others.
			gid := id
			if g > 0 {
				gid = id + "#" + strconv.Itoa(g)
			}
			batches = append(batches, frontier.Batch{ID: gid, Seq: seq, Source: lg.Source, URLs: lg.URLs})
			from = append(from, i)
		}
		idx = append(idx, i)
	}
	if len(batches) == 0 {
		return errs
	}
	start := s.now()
	counts, err := s.f.Add(ctx, batches)
	s.observe("add", start, err)
	if err == nil {
		// Acked, the messages are gone: their URLs must not be lost with a Redis master.
		err = s.waitReplicated(ctx)
	}
	if err != nil {
		for _, i := range idx {
			errs[i] = err
		}
		return errs
	}
	added := 0
	for _, c := range counts {
		if c.Queued == frontier.Duplicate {
			s.m.duplicates.WithLabelValues(s.label).Inc()
			continue
		}
		added += c.Queued
	}
	s.m.added.WithLabelValues(s.label).Add(float64(added))
	if added > 0 {
		s.poke()
	}
	// Before the messages are acked (after this handler), so a kill between the add and
	// here is the only way to lose a refused URL's entry.
	s.logRefused(ctx, msgs, from, counts)
	return errs
}

// handleOutcomes applies every outcome of a pulled set of crawl.fetched messages (each a
// batch of outcomes from one fetcher) in one frontier step. Outcomes are idempotent
// through their lease tokens, so a failed step is simply redelivered. A message that does
// not decode is a permanent error (terminated); an outcome inside a batch that lacks host,
// lease or kind, or names a kind this code does not know, is counted and skipped, and the
// batch's other outcomes are applied (its message is acked), so one bad entry never loses
// the rest.
func (s *shard) handleOutcomes(ctx context.Context, msgs []jetstream.Msg) []error {
	errs := make([]error, len(msgs))
	outs := make([]crawlmsg.Outcome, 0, len(msgs))
	from := make([]int, 0, len(msgs)) // message index of each outcome
	for i, m := range msgs {
		batch, invalid, err := crawlmsg.DecodeOutcomes(m.Data())
		if err != nil {
			errs[i] = fmt.Errorf("outcome message %s: %w", natsx.MsgID(m), err)
			continue
		}
		if invalid > 0 {
			s.m.results.WithLabelValues(s.label, "malformed").Add(float64(invalid))
			s.log.Warn("outcomes without host, lease or kind skipped; the batch's others are applied",
				"msg", natsx.MsgID(m), "skipped", invalid, "applied", len(batch))
		}
		for range batch {
			from = append(from, i)
		}
		outs = append(outs, batch...)
	}
	if len(outs) == 0 {
		return errs
	}
	start := s.now()
	applied, err := s.f.Complete(ctx, outs)
	s.observe("complete", start, err)
	if err != nil {
		for _, i := range from {
			errs[i] = err
		}
		return errs
	}
	if s.rules != nil {
		if err := s.f.RefundDomains(ctx, s.rules(), applied); err != nil && ctx.Err() == nil {
			s.log.Warn("outcomes: domain budget refunds lost", "err", err)
		}
	}
	released, failed := false, false
	for j, a := range applied {
		o := outs[j]
		kind := string(o.Kind)
		if a.Result == frontier.ResultInvalid {
			// The kind comes from the wire: keep label values bounded.
			kind = "unknown"
		}
		s.m.outcomes.WithLabelValues(s.label, kind).Inc()
		s.m.results.WithLabelValues(s.label, a.Result.String()).Inc()
		switch a.Result {
		case frontier.ResultInvalid:
			// Not the message's fault as a whole: its other outcomes were applied.
			s.log.Warn("outcome of an unknown kind skipped", "host", o.Host, "lease", o.Lease, "kind", o.Kind, "msg", natsx.MsgID(msgs[from[j]]))
			continue
		case frontier.ResultStale:
			s.log.Debug("stale outcome ignored", "host", o.Host, "lease", o.Lease)
			continue
		}
		released = true
		failed = failed || a.Result == frontier.ResultFailed
		if a.CrawlDelayCapped {
			s.m.cappedDelays.WithLabelValues(s.label).Inc()
		}
		if a.NewCappedCrawlDelay {
			// Once per host and value (the frontier reports the outcome that stored it), not
			// once per fetch of a slow-crawl host.
			s.log.Info("robots.txt crawl-delay above the cap; the cap applies", "host", o.Host,
				"crawl_delay", time.Duration(min(o.CrawlDelay, 1e9)*float64(time.Second)), "max", s.cfg.MaxCrawlDelay)
		}
		if a.Retired {
			s.m.hostsRetired.WithLabelValues(s.label).Inc()
			s.log.Warn("host retired after consecutive failures; its URLs end as failed",
				"host", o.Host, "failures", s.cfg.RetireAfter, "last_kind", o.Kind, "last_status", o.Status,
				"last_error", o.Error, "urls_failed", a.RetiredQueued+1)
		}
	}
	if released {
		s.poke()
	}
	// Before the messages are acked (after this handler), so a kill loses no skip.
	for i, err := range s.logSkips(ctx, msgs, from, outs, applied) {
		if err != nil && errs[i] == nil {
			errs[i] = err
		}
	}
	if failed {
		// Their recrawl states wait in the outbox (rescheduleLoop).
		select {
		case s.resched <- struct{}{}:
		default:
		}
	}
	return errs
}
