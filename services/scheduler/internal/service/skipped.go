package service

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/trawl/trawl/services/scheduler/internal/frontier"
	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/natsx"
	"github.com/trawl/trawl/shared/topology"
	"github.com/trawl/trawl/shared/urlnorm"
)

// skipPublishTimeout bounds the skip log's publish of one pulled set of outcomes.
const skipPublishTimeout = 10 * time.Second

// skipMaxDeliveries is the delivery of an outcome message after which a skip log publish
// that keeps failing is given up (logged and counted) rather than holding the message.
const skipMaxDeliveries = 5

// skipReason names the URL's end as the skip log does; "" for an outcome that does not
// end its URL unarchived.
func skipReason(r frontier.Result, o crawlmsg.Outcome) string {
	switch r {
	case frontier.ResultDisallowed:
		return crawlmsg.ReasonDisallowed
	case frontier.ResultOutOfScope:
		return crawlmsg.ReasonOutOfScope
	case frontier.ResultFailed:
		return crawlmsg.FailedReason(o.Kind)
	}
	return ""
}

// logSkips publishes, for each outcome message with outcomes that ended their URL
// unarchived, one entry on the shard's skip log (CRAWL_SKIPPED) named after the message,
// so that a redelivery's copy is dropped. It runs before the messages are acked: a
// scheduler killed in between gets them again, and their outcomes, stale by then, are
// logged by what they were planned to be (the first application's publish may never have
// happened; if it did, the duplicate window drops the copy). A message with no skip costs
// nothing. The returned errors are per message: a failed publish holds its message for
// redelivery, up to skipMaxDeliveries.
func (s *shard) logSkips(ctx context.Context, msgs []jetstream.Msg, from []int, outs []crawlmsg.Outcome, applied []frontier.Applied) []error {
	var batches map[int]*crawlmsg.SkippedBatch
	at := s.now().UnixMilli()
	var redelivered map[int]bool // by message, read only for stale outcomes
	for j, a := range applied {
		r := a.Result
		if r == frontier.ResultStale {
			i := from[j]
			if redelivered == nil {
				redelivered = map[int]bool{}
			}
			re, ok := redelivered[i]
			if !ok {
				if md, err := msgs[i].Metadata(); err == nil {
					re = md.NumDelivered > 1
				}
				redelivered[i] = re
			}
			if !re {
				continue
			}
			r = a.Planned
		}
		o := outs[j]
		reason := skipReason(r, o)
		if reason == "" {
			continue
		}
		if batches == nil {
			batches = map[int]*crawlmsg.SkippedBatch{}
		}
		b := batches[from[j]]
		if b == nil {
			b = &crawlmsg.SkippedBatch{}
			batches[from[j]] = b
		}
		b.URLs = append(b.URLs, crawlmsg.SkippedURL{URL: o.URL, Host: o.Host, Reason: reason, Status: o.Status, Error: o.Error, At: at})
	}
	if len(batches) == 0 {
		return nil
	}
	pub, idx := s.skipMsgs(msgs, batches)
	pctx, cancel := context.WithTimeout(ctx, skipPublishTimeout)
	defer cancel()
	err := natsx.PublishBatch(pctx, s.js, pub)
	if err == nil {
		return nil
	}
	errs := make([]error, len(msgs))
	for _, i := range idx {
		if md, mdErr := msgs[i].Metadata(); mdErr == nil && md.NumDelivered >= skipMaxDeliveries {
			s.m.skipsLost.WithLabelValues(s.label).Add(float64(len(batches[i].URLs)))
			s.log.Error("skip log: publish failed at every delivery; the outcome message is acked without it",
				"msg", natsx.MsgID(msgs[i]), "deliveries", md.NumDelivered, "urls", len(batches[i].URLs), "err", err)
			continue
		}
		errs[i] = fmt.Errorf("skip log: %w", err)
	}
	return errs
}

// logRefused publishes, for each frontier message whose URLs the frontier refused at
// admission (out of scope, too deep, over budget, a retired host), one entry on the
// shard's skip log named after the message. A redelivered message whose batch was applied
// before lists again what Go refused (the rules decide alike; the duplicate window drops
// the copy), not what the script refused then, which nothing keeps: a scheduler killed
// between the add and this publish loses those entries (their URLs stay counted). A
// failed publish is not retried through redelivery, which could not bring them back: it
// is logged and counted, and the messages are acked, so the crawl never waits on the log.
func (s *shard) logRefused(ctx context.Context, msgs []jetstream.Msg, from []int, added []frontier.Added) {
	var batches map[int]*crawlmsg.SkippedBatch
	at := s.now().UnixMilli()
	for j, a := range added {
		if len(a.Refused) == 0 {
			continue
		}
		i := from[j]
		if a.Queued == frontier.Duplicate {
			// A copy first delivered here was logged under its first copy's id.
			if md, err := msgs[i].Metadata(); err != nil || md.NumDelivered <= 1 {
				continue
			}
		}
		if batches == nil {
			batches = map[int]*crawlmsg.SkippedBatch{}
		}
		b := batches[i]
		if b == nil {
			b = &crawlmsg.SkippedBatch{}
			batches[i] = b
		}
		for _, r := range a.Refused {
			b.URLs = append(b.URLs, crawlmsg.SkippedURL{URL: r.URL, Host: r.Host, Reason: r.Reason, Error: r.Detail, At: at})
		}
	}
	if len(batches) == 0 {
		return
	}
	pub, idx := s.skipMsgs(msgs, batches)
	pctx, cancel := context.WithTimeout(ctx, skipPublishTimeout)
	defer cancel()
	if err := natsx.PublishBatch(pctx, s.js, pub); err != nil {
		n := 0
		for _, i := range idx {
			n += len(batches[i].URLs)
		}
		s.m.skipsLost.WithLabelValues(s.label).Add(float64(n))
		s.log.Error("skip log: publish failed; the refused URLs stay counted but unlisted", "urls", n, "err", err)
	}
}

// skipMsgs encodes one skip log entry per message with a batch, named after the message
// (topology.SkippedID), and returns them with their message indexes.
func (s *shard) skipMsgs(msgs []jetstream.Msg, batches map[int]*crawlmsg.SkippedBatch) ([]*nats.Msg, []int) {
	pub := make([]*nats.Msg, 0, len(batches))
	idx := make([]int, 0, len(batches))
	for i, b := range batches {
		data, err := crawlmsg.Marshal(b)
		if err != nil {
			s.log.Error("skip log entry not encoded", "msg", natsx.MsgID(msgs[i]), "err", err)
			continue
		}
		id := ""
		if mid := natsx.MsgID(msgs[i]); mid != "" {
			// Without the message's identity no id: "skip:" alone would drop every
			// other such entry as a copy.
			id = topology.SkippedID(mid)
		}
		pub = append(pub, natsx.NewMsg(topology.SkippedSubject(s.id), id, data))
		idx = append(idx, i)
	}
	return pub, idx
}

// logExcluded publishes the queued URLs a scope recheck ended out of scope (a rule
// narrowed the crawl: Heritrix's -5000) as one skip log entry. The recheck step is done
// and will not run again for them, so a failed publish is logged and counted, not retried.
func (s *shard) logExcluded(ctx context.Context, rs []frontier.Refused) {
	b := &crawlmsg.SkippedBatch{URLs: make([]crawlmsg.SkippedURL, 0, len(rs))}
	at := s.now().UnixMilli()
	for _, r := range rs {
		b.URLs = append(b.URLs, crawlmsg.SkippedURL{URL: r.URL, Host: r.Host, Reason: r.Reason, Error: r.Detail, At: at})
	}
	data, err := crawlmsg.Marshal(b)
	if err == nil {
		pctx, cancel := context.WithTimeout(ctx, skipPublishTimeout)
		defer cancel()
		// No id: nothing publishes these URLs twice (the step that ended them is over).
		err = natsx.PublishBatch(pctx, s.js, []*nats.Msg{natsx.NewMsg(topology.SkippedSubject(s.id), "", data)})
	}
	if err != nil {
		s.m.skipsLost.WithLabelValues(s.label).Add(float64(len(rs)))
		s.log.Error("skip log: publish failed; the excluded URLs stay counted but unlisted", "urls", len(rs), "err", err)
	}
}

// The skip spool's drain (spoolLoop): items listed per pass (each up to 256 URLs and one
// skip log entry), how often the spool is read without a full pass, and after how many
// failed publishes in a row the items at its head are dropped unlisted.
const (
	spoolBatch    = 16
	spoolEvery    = time.Second
	spoolAttempts = 5
)

// spoolLoop lists on the skip log the queued URLs the frontier's scripts dropped over
// budget (frontier.SpooledSkips), which the step that dropped them moved to the shard's
// skip spool. An item leaves the spool only once its entry is acknowledged, under an id
// derived from the item, so a scheduler killed in between publishes the same entry again
// and the duplicate window drops it. A publish that fails spoolAttempts passes in a row
// drops the items it held, logged and counted, so the spool never waits on the log for
// ever; a failed read is logged and tried again at the next tick (the items wait in Redis,
// which holds no more of them than the queues they left did).
func (s *shard) spoolLoop(ctx context.Context) {
	t := time.NewTicker(spoolEvery)
	defer t.Stop()
	failures := 0
	for ctx.Err() == nil {
		n, err := s.listSpooled(ctx, failures+1 >= spoolAttempts)
		switch {
		case err != nil && ctx.Err() == nil:
			failures++
			s.log.Warn("skip log: spooled URLs not listed yet; they wait in Redis and are tried again",
				"err", err, "consecutive", failures, "of", spoolAttempts)
			if failures >= spoolAttempts {
				failures = 0
			}
		case err == nil:
			failures = 0
		}
		if err == nil && n >= spoolBatch {
			continue
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// listSpooled publishes up to spoolBatch skip spool items, one skip log entry each, and
// removes them once acknowledged; it returns how many items it took. With last, a failed
// publish drops the items anyway (logged and counted as skips left unlisted).
func (s *shard) listSpooled(ctx context.Context, last bool) (int, error) {
	items, bad, err := s.f.SpooledSkips(ctx, spoolBatch)
	if err != nil {
		return 0, err
	}
	for _, raw := range bad {
		s.log.Error("skip log: dropping a malformed skip spool item", "item", raw)
	}
	drop := bad
	pub := make([]*nats.Msg, 0, len(items))
	urls := 0
	for _, it := range items {
		b := &crawlmsg.SkippedBatch{URLs: make([]crawlmsg.SkippedURL, 0, len(it.Entries))}
		for _, e := range it.Entries {
			b.URLs = append(b.URLs, crawlmsg.SkippedURL{URL: e.URL, Host: urlnorm.HostOf(e.URL), Reason: it.Reason, At: it.At.UnixMilli()})
		}
		data, err := crawlmsg.Marshal(b)
		if err != nil {
			s.log.Error("skip log: dropping a skip spool item that cannot be encoded", "urls", len(b.URLs), "err", err)
			drop = append(drop, it.Raw)
			continue
		}
		sum := sha256.Sum256([]byte(it.Raw))
		id := topology.SkippedID("spool:" + strconv.Itoa(s.id) + ":" + hex.EncodeToString(sum[:16]))
		pub = append(pub, natsx.NewMsg(topology.SkippedSubject(s.id), id, data))
		drop = append(drop, it.Raw)
		urls += len(b.URLs)
	}
	if len(pub) > 0 {
		pctx, cancel := context.WithTimeout(ctx, skipPublishTimeout)
		defer cancel()
		if err := natsx.PublishBatch(pctx, s.js, pub); err != nil {
			if !last {
				return 0, fmt.Errorf("publish %d spooled skipped URLs: %w", urls, err)
			}
			s.m.skipsLost.WithLabelValues(s.label).Add(float64(urls))
			s.log.Error("skip log: publish failed at every attempt; the spooled URLs stay counted but unlisted",
				"urls", urls, "attempts", spoolAttempts, "err", err)
		}
	}
	if err := s.f.DropSpooledSkips(ctx, drop); err != nil {
		return 0, err
	}
	return len(items) + len(bad), nil
}
