package service

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/errclass"
	"github.com/trawl/trawl/shared/frontierkeys"
	"github.com/trawl/trawl/shared/natsx"
	"github.com/trawl/trawl/shared/topology"
)

// deliver stores a task's results in order: the page (its body first, when it goes by
// reference), then the outcome, in a batch with other tasks' pages and outcomes
// (outcomeBatcher). The outcome is what makes the scheduler count the URL fetched, so it is
// published only once the page is stored: a crash or a refused page in between leaves no
// outcome, and the lease brings the URL back. A page that can never be stored (too large
// for a message) turns the outcome into too-large. Every step retries through a NATS
// outage until the task's lease deadline; the Nats-Msg-Ids and lease tokens make each
// retry harmless.
func (s *Service) deliver(task *crawlmsg.FetchTask, out *crawlmsg.Outcome, res *pageResult) error {
	deadline := s.lease.local(task.Deadline)
	if floor := s.now().Add(publishTimeout); deadline.Before(floor) {
		deadline = floor
	}
	var pd *pageDelivery
	if res != nil {
		pm, page, err := s.preparePage(deadline, task, res)
		switch {
		case err == nil:
			pd = &pageDelivery{msg: pm, res: res, refused: func(batched *crawlmsg.Outcome, err error) {
				s.pageRefused(task, batched, page, err)
				// The task's own copy, which its worker reads once the batch is stored.
				*out = *batched
			}}
		case isTooLarge(err):
			s.pageRefused(task, out, page, err)
		default:
			return err
		}
	}
	if task.Recrawl != nil && failing(out.Kind) {
		out.Recrawl = recrawlEntry(task)
	}
	// The outcome goes out in its shard's next batch, after the batch's pages; this
	// returns once that batch is stored, so the task is acked only then.
	return s.outcomes.add(out, pd, deadline)
}

func recrawlEntry(task *crawlmsg.FetchTask) *crawlmsg.RecrawlEntry {
	return &crawlmsg.RecrawlEntry{V: crawlmsg.Version, URL: task.URL, Depth: task.Depth, Kind: task.Kind, Embeds: task.Embeds, State: *task.Recrawl}
}

// pageRefused ends a task whose page can never be stored too-large, and deletes what the
// page put in the bodies store, which nothing will reference.
func (s *Service) pageRefused(task *crawlmsg.FetchTask, out *crawlmsg.Outcome, page *crawlmsg.Page, err error) {
	s.m.tooLarge.Inc()
	s.log.Warn("page too large to store; the URL ends too-large", "url", task.URL, "status", out.Status, "err", err)
	out.Kind, out.Permanent, out.Error, out.PageSeq = crawlmsg.OutcomeTooLarge, true, err.Error(), 0
	if task.Recrawl != nil {
		out.Recrawl = recrawlEntry(task)
	}
	if page == nil {
		return
	}
	s.dropRaw(page)
	if page.Meta.BodyRef != nil {
		dctx, cancel := context.WithTimeout(context.Background(), publishTimeout)
		defer cancel()
		if derr := s.bodies.Delete(dctx, page.Meta.BodyRef.Name); derr != nil {
			s.log.Warn("delete unreferenced body", "name", page.Meta.BodyRef.Name, "err", derr)
		}
	}
}

// failing says an outcome of this kind can end its URL failed without a page stored.
func failing(k crawlmsg.OutcomeKind) bool {
	switch k {
	case crawlmsg.OutcomeError, crawlmsg.OutcomeBlocked, crawlmsg.OutcomeRobotsUnavailable, crawlmsg.OutcomeTooLarge:
		return true
	}
	return false
}

// preparePage makes the page's message, with the page as it will travel. A body above the
// inline threshold is put in the bodies object store first and the page names it; small
// bodies (the common case) travel inline with no extra round trip.
func (s *Service) preparePage(deadline time.Time, task *crawlmsg.FetchTask, res *pageResult) (*nats.Msg, *crawlmsg.Page, error) {
	page := res.page
	if err := s.storeRaw(deadline, task, page); err != nil {
		return nil, page, err
	}
	pm, err := crawlmsg.PageMsg(topology.SubjectPages, page)
	if err != nil {
		return nil, page, fmt.Errorf("encode page %s: %w", task.URL, err)
	}
	if int64(len(page.Body)) > s.inlineMax(len(pm.Header.Get(crawlmsg.MetaHeader))+headsLen(page)) {
		ref := &crawlmsg.BodyRef{Bucket: topology.BodiesBucket, Name: topology.PageID(task.Lease), Size: int64(len(page.Body))}
		// A body of many megabytes gets a second per 8 MiB on top of the usual wait.
		wait := publishTimeout + time.Duration(ref.Size/(8<<20))*time.Second
		if err := s.retryTask(deadline, task, "body", wait, func(ctx context.Context) error {
			_, err := s.bodies.Put(ctx, jetstream.ObjectMeta{Name: ref.Name, Opts: &jetstream.ObjectMetaOptions{ChunkSize: s.chunkSize()}}, bytes.NewReader(page.Body))
			return err
		}); err != nil {
			return nil, page, fmt.Errorf("store body of %s: %w", task.URL, err)
		}
		s.m.bodiesByRef.Inc()
		page = &crawlmsg.Page{Meta: page.Meta, Body: nil, Raw: page.Raw}
		page.Meta.BodyRef = ref
		if pm, err = crawlmsg.PageMsg(topology.SubjectPages, page); err != nil {
			return nil, page, fmt.Errorf("encode page %s: %w", task.URL, err)
		}
	}
	pm.Header.Set(nats.MsgIdHdr, topology.PageID(task.Lease))
	return pm, page, nil
}

// storePages publishes a batch's pages (pages[i] is outs[i]'s, nil for none), a few to a
// message (crawlmsg.Bundle), before the batch's outcomes, and writes each page's fate in
// its outcome: its stream sequence and how many pages shared its message, or too-large when
// it can never be stored. A page that does not fit in a bundle goes alone, as does each
// page of a bundle the stream refuses as too large. What fails otherwise is retried until
// deadline, and then fails the batch.
func (s *Service) storePages(deadline time.Time, outs []crawlmsg.Outcome, pages []*pageDelivery) error {
	var msgs []*nats.Msg
	var of []int // msgs[k] is the page of outs[of[k]]
	for i, p := range pages {
		if p != nil {
			msgs, of = append(msgs, p.msg), append(of, i)
		}
	}
	fates := s.publishPages(deadline, msgs)
	for k, i := range of {
		p, f := pages[i], fates[k]
		switch {
		case f.err == nil:
			if outs[i].Kind == crawlmsg.OutcomeFetched {
				outs[i].PageSeq = f.seq
				if f.parts > 1 {
					outs[i].PageParts = f.parts
				}
			}
			p.res.pageSeq = f.seq
			p.res.reusable = f.free
		case isTooLarge(f.err):
			p.refused(&outs[i], f.err)
		default:
			return f.err
		}
	}
	return nil
}

// pageFate is what became of one page of a batch.
type pageFate struct {
	seq   uint64 // its message's stream sequence
	parts int    // the pages its message carried
	err   error
	// free: the page was copied into a bundle, or stored alone on the first attempt, so no
	// attempt is left that the client could resend, and its body's buffer may be reused.
	free bool
}

// publishPages publishes msgs, pages bound for crawl.pages, in bundles of up to
// TRAWL_PAGES_PER_MESSAGE, and returns each page's fate.
func (s *Service) publishPages(deadline time.Time, msgs []*nats.Msg) []pageFate {
	fates := make([]pageFate, len(msgs))
	out, parts := s.bundlePages(msgs)
	for b, err := range s.publishEach(deadline, out, parts, fates) {
		if err == nil || !isTooLarge(err) || len(parts[b]) == 1 {
			for _, k := range parts[b] {
				fates[k].err = err
			}
			continue
		}
		// Refused as too large as a bundle: each page alone, judged on its own.
		alone := make([]*nats.Msg, len(parts[b]))
		single := make([][]int, len(parts[b]))
		for j, k := range parts[b] {
			alone[j], single[j] = msgs[k], []int{k}
		}
		for j, err := range s.publishEach(deadline, alone, single, fates) {
			fates[parts[b][j]].err = err
		}
	}
	return fates
}

// bundlePages groups msgs into bundles of up to TRAWL_PAGES_PER_MESSAGE pages within the
// largest message the server and the stream take; parts[b] are the pages of out[b]. A
// group of one goes as the page itself.
func (s *Service) bundlePages(msgs []*nats.Msg) (out []*nats.Msg, parts [][]int) {
	limit := int(min(s.nc.MaxPayload(), int64(s.maxMsg))) - topology.ExtraHeaderRoom
	var group []int
	size := 0
	flush := func() {
		if len(group) == 0 {
			return
		}
		m := msgs[group[0]]
		if len(group) > 1 {
			bm := make([]*nats.Msg, len(group))
			for j, k := range group {
				bm[j] = msgs[k]
			}
			var err error
			if m, err = crawlmsg.Bundle(topology.SubjectPages, bm); err != nil {
				// Every page has its id; should one not, the pages go alone.
				s.log.Warn("pages not bundled", "err", err)
				for _, k := range group {
					out, parts = append(out, msgs[k]), append(parts, []int{k})
				}
				group, size = nil, 0
				return
			}
		}
		out, parts = append(out, m), append(parts, group)
		group, size = nil, 0
	}
	for k, m := range msgs {
		n := partSize(m)
		if len(group) == s.cfg.PagesPerMessage || len(group) > 0 && size+n > limit {
			flush()
		}
		group, size = append(group, k), size+n
	}
	flush()
	return out, parts
}

// partSize is about what m takes in a bundle.
func partSize(m *nats.Msg) int {
	n := len(m.Data) + 16
	for k, vs := range m.Header {
		n += len(k) + 8
		for _, v := range vs {
			n += len(v) + 4
		}
	}
	return n
}

// publishEach publishes out (out[b] carrying the pages parts[b]), retrying what failed with
// a temporary error until deadline, and returns each one's last error; the fates of the
// pages of a stored message get its sequence.
func (s *Service) publishEach(deadline time.Time, out []*nats.Msg, parts [][]int, fates []pageFate) []error {
	errs := make([]error, len(out))
	todo := make([]int, len(out))
	for b := range todo {
		todo[b] = b
	}
	tries := 0
	_ = s.retry(deadline, "a batch of pages", "page", publishTimeout, func(ctx context.Context) error {
		tries++
		batch := make([]*nats.Msg, len(todo))
		for j, b := range todo {
			batch[j] = out[b]
		}
		perr, pseqs := natsx.PublishEach(ctx, s.js, batch)
		var again []int
		var first error
		for j, b := range todo {
			errs[b] = perr[j]
			switch {
			case perr[j] == nil:
				s.m.pageMessages.Inc()
				n := len(parts[b])
				for _, k := range parts[b] {
					fates[k] = pageFate{seq: pseqs[j], parts: n, free: n > 1 || tries == 1}
				}
			case !isTooLarge(perr[j]):
				again = append(again, b)
				if first == nil {
					first = perr[j]
				}
			case len(parts[b]) == 1:
				// A page refused for good; a bundle refused goes again page by page.
				if v := errclass.Of(perr[j]); v.Class == errclass.Permanent {
					s.m.permanentErrors.WithLabelValues("page", v.Reason).Inc()
				}
			}
		}
		todo = again
		return first
	})
	return errs
}

// inlineMax is the largest body that travels inline with metaLen octets of metadata
// (topology.PageInlineMax).
func (s *Service) inlineMax(metaLen int) int64 {
	return topology.PageInlineMax(s.cfg.BodyInlineMax, s.nc.MaxPayload(), s.maxMsg, metaLen)
}

// chunkSize is the object store chunk: large enough to keep the message count low, small
// enough for any server's max_payload.
func (s *Service) chunkSize() uint32 {
	return uint32(max(32<<10, min(1<<20, s.nc.MaxPayload()-topology.ExtraHeaderRoom)))
}

// isTooLarge reports a message that can never be stored: over the server's max_payload
// (refused by the client), the stream's maximum message size or JetStream's header limit,
// or refused for any other reason shared/errclass calls permanent. Its URL ends too-large
// with the error as its reason; retried, it would only hold its host until the lease ends.
func isTooLarge(err error) bool {
	return errors.Is(err, nats.ErrMaxPayload) || errors.Is(err, jetstream.ErrStreamMessageExceedsMaximum) ||
		errclass.IsPermanent(err)
}

// retry runs op, each attempt bounded by wait, until it succeeds, fails for good (an error
// shared/errclass calls permanent) or the deadline passes. Each attempt's context is the only one made for it (no
// parent to cancel it): one timer per publish.
func (s *Service) retry(deadline time.Time, about string, what string, wait time.Duration, op func(ctx context.Context) error) error {
	backoff := 100 * time.Millisecond
	for {
		pctx, pcancel := context.WithDeadline(context.Background(), earliest(deadline, time.Now().Add(wait)))
		err := op(pctx)
		pcancel()
		if err == nil {
			return nil
		}
		if v := errclass.Of(err); v.Class == errclass.Permanent {
			s.m.permanentErrors.WithLabelValues(what, v.Reason).Inc()
			s.log.Warn("publish failed for good; not retried", "what", what, "about", about, "reason", v.Reason, "err", err)
			return err
		}
		s.m.publishRetries.WithLabelValues(what).Inc()
		s.log.Warn("publish failed; retrying", "what", what, "about", about, "err", err)
		left := time.Until(deadline)
		if left <= 0 {
			return err
		}
		t := time.NewTimer(min(backoff, left))
		<-t.C
		if backoff >= left {
			return err
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

// retryTask is retry for a step of one task: each failure is also recorded as the task's
// last error under its lease (noteError), so a task that cannot store its results is named
// with its cause while it holds its host, and fails with it when its attempts run out.
func (s *Service) retryTask(deadline time.Time, task *crawlmsg.FetchTask, what string, wait time.Duration, op func(ctx context.Context) error) error {
	return s.retry(deadline, task.URL, what, wait, func(ctx context.Context) error {
		err := op(ctx)
		if err != nil {
			s.noteError(task, what, err)
		}
		return err
	})
}

// noteTimeout bounds recording a task's error: it informs, and must not hold the retry.
const noteTimeout = time.Second

// noteError records err as the last error of task's lease in the frontier
// (frontierkeys.NoteLeaseError). A failure to record is only logged: Redis may be what
// failed.
func (s *Service) noteError(task *crawlmsg.FetchTask, what string, err error) {
	if s.rdb == nil || task.Lease == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), noteTimeout)
	defer cancel()
	if _, nerr := frontierkeys.NoteLeaseError(ctx, s.rdb, s.cfg.Common.RedisPrefix, task.Shard, s.cfg.Common.Shards, task.Host, task.Lease, fmt.Errorf("%s: %w", what, err)); nerr != nil {
		s.log.Debug("last error of a task not recorded", "url", task.URL, "err", nerr)
	}
}

func earliest(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
