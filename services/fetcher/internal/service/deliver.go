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
	"github.com/trawl/trawl/shared/topology"
)

// deliver stores a task's results in order: the page (its body first, when it goes by
// reference), then the outcome, in a batch with other tasks'
// outcomes. The outcome is what makes the scheduler count the URL fetched, so it is
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
	if res != nil {
		if err := s.storePage(deadline, task, res); err != nil {
			if !isTooLarge(err) {
				return err
			}
			s.m.tooLarge.Inc()
			s.log.Warn("page too large to store; the URL ends too-large", "url", task.URL, "status", out.Status, "err", err)
			out.Kind, out.Permanent, out.Error = crawlmsg.OutcomeTooLarge, true, err.Error()
		}
	}
	if res != nil && out.Kind == crawlmsg.OutcomeFetched {
		out.PageSeq = res.pageSeq
	}
	if task.Recrawl != nil && failing(out.Kind) {
		out.Recrawl = &crawlmsg.RecrawlEntry{V: crawlmsg.Version, URL: task.URL, Depth: task.Depth, Kind: task.Kind, Embeds: task.Embeds, State: *task.Recrawl}
	}
	// The outcome goes out in its shard's next batch; this returns once that batch is
	// stored, so the task is acked only then.
	return s.outcomes.add(out, deadline)
}

// failing says an outcome of this kind can end its URL failed without a page stored.
func failing(k crawlmsg.OutcomeKind) bool {
	switch k {
	case crawlmsg.OutcomeError, crawlmsg.OutcomeBlocked, crawlmsg.OutcomeRobotsUnavailable, crawlmsg.OutcomeTooLarge:
		return true
	}
	return false
}

// storePage publishes the page. A body above the inline threshold
// is put in the bodies object store first and the page names it; small bodies (the common
// case) travel inline with no extra round trip.
func (s *Service) storePage(deadline time.Time, task *crawlmsg.FetchTask, res *pageResult) error {
	page := res.page
	tries := 0 // attempts at publishing the page; a body put by reference counts one more
	if err := s.storeRaw(deadline, task, page); err != nil {
		return err
	}
	pm, err := crawlmsg.PageMsg(topology.SubjectPages, page)
	if err != nil {
		return fmt.Errorf("encode page %s: %w", task.URL, err)
	}
	if int64(len(page.Body)) > s.inlineMax(len(pm.Header.Get(crawlmsg.MetaHeader))+headsLen(page)) {
		ref := &crawlmsg.BodyRef{Bucket: topology.BodiesBucket, Name: topology.PageID(task.Lease), Size: int64(len(page.Body))}
		tries++
		// A body of many megabytes gets a second per 8 MiB on top of the usual wait.
		wait := publishTimeout + time.Duration(ref.Size/(8<<20))*time.Second
		if err := s.retryTask(deadline, task, "body", wait, func(ctx context.Context) error {
			_, err := s.bodies.Put(ctx, jetstream.ObjectMeta{Name: ref.Name, Opts: &jetstream.ObjectMetaOptions{ChunkSize: s.chunkSize()}}, bytes.NewReader(page.Body))
			return err
		}); err != nil {
			return fmt.Errorf("store body of %s: %w", task.URL, err)
		}
		s.m.bodiesByRef.Inc()
		page = &crawlmsg.Page{Meta: page.Meta, Body: nil, Raw: page.Raw}
		page.Meta.BodyRef = ref
		if pm, err = crawlmsg.PageMsg(topology.SubjectPages, page); err != nil {
			return fmt.Errorf("encode page %s: %w", task.URL, err)
		}
	}
	pm.Header.Set(nats.MsgIdHdr, topology.PageID(task.Lease))
	msgs := []*nats.Msg{pm}
	err = s.retryTask(deadline, task, "page", publishTimeout, func(ctx context.Context) error {
		tries++
		seqs, err := s.pages.PublishSeqs(ctx, msgs)
		if err == nil {
			res.pageSeq = seqs[0]
		}
		return err
	})
	res.reusable = err == nil && tries == 1
	if err != nil && isTooLarge(err) {
		s.dropRaw(page)
	}
	if err != nil && isTooLarge(err) && page.Meta.BodyRef != nil {
		// The body will never be referenced; the sweeper would remove it too, later.
		dctx, cancel := context.WithTimeout(context.Background(), publishTimeout)
		defer cancel()
		if derr := s.bodies.Delete(dctx, page.Meta.BodyRef.Name); derr != nil {
			s.log.Warn("delete unreferenced body", "name", page.Meta.BodyRef.Name, "err", derr)
		}
	}
	return err
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
