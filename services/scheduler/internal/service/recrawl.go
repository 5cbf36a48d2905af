package service

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/trawl/trawl/services/scheduler/internal/config"
	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/ctxsleep"
	"github.com/trawl/trawl/shared/frontierkeys"
	"github.com/trawl/trawl/shared/natsx"
	"github.com/trawl/trawl/shared/recrawl"
	"github.com/trawl/trawl/shared/topology"
)

// dueBatch is the most due messages taken in one pull.
const dueBatch = 256

// dueIntake meters a shard's due recrawls into its frontier. While the shard holds fewer
// than Backlog queued URLs, due URLs fill it up to that; beyond, they enter at most at
// Share of the shard's dispatch rate (the dispatches counted in Redis since the last
// reading), so a day's worth of due URLs waits on disk in CRAWL_RECRAWL instead of in
// Redis, and new URLs keep most of the dispatch.
type dueIntake struct {
	backlog    int64
	share      float64
	credit     float64
	dispatched int64 // the shard's dispatch counter at the last reading; -1 before the first
}

// allow returns how many due URLs may enter the frontier now, given the shard's queued
// URLs and its dispatch counter.
func (d *dueIntake) allow(queued, dispatched int64) int {
	if d.dispatched >= 0 && dispatched >= d.dispatched {
		d.credit = min(d.credit+d.share*float64(dispatched-d.dispatched), float64(d.backlog))
	}
	d.dispatched = dispatched
	n := int64(d.credit)
	if queued < d.backlog {
		n = max(n, d.backlog-queued)
	}
	return int(min(n, dueBatch))
}

// took charges n due URLs that entered the frontier.
func (d *dueIntake) took(n int) { d.credit = max(d.credit-float64(n), 0) }

// dueLoop moves due recrawls (the server's copy of a URL's schedule message, once its time
// came) into the shard's frontier, as frontier messages: the frontier consumer adds them
// like new URLs (not through the seen test: the URL is known) with their state in the
// queue entry. A due message is acked only after its frontier message is stored, and that
// message's id is derived from the due message's, so a crash in between republishes it
// into the duplicate window and nothing is lost or queued twice. A due message the intake
// gives up on (malformed, or still failing after TRAWL_DEAD_LETTER_AFTER deliveries) is
// parked in CRAWL_DEAD first, as the consume loops park theirs, with o's settings
// (runner.ConsumeOptions): see dropDue and retryDue. A pull that fails is paced
// (natsx.PullPacer); a consumer that is gone ends the loop, and with it the scheduler,
// which declares it again when it starts.
func (s *shard) dueLoop(ctx context.Context, o natsx.ConsumeOptions) {
	in := &dueIntake{backlog: int64(s.cfg.Recrawl.Backlog), share: s.cfg.Recrawl.Share, dispatched: -1}
	log := s.log.With("loop", "recrawl intake")
	o.Log = log
	o.Prepare(s.dueC)
	defer o.Wait()
	pulls := natsx.PullPacer{Log: log}
	failures := 0 // in a row
	for ctx.Err() == nil {
		if s.crawl != nil && natsx.WaitReady(ctx, s.crawl.Ready, log) != nil {
			return
		}
		n, err := s.dueAllowance(ctx, in)
		if err == nil && n == 0 {
			ctxsleep.Sleep(ctx, errorPause)
			continue
		}
		if err == nil {
			var took int
			took, err = s.takeDue(ctx, n, &pulls, o)
			in.took(took)
		}
		switch {
		case errors.Is(err, natsx.ErrConsumerGone):
			log.Error("recrawl intake stopped: its consumer is gone; the scheduler stops, to declare it again when started", "err", err)
			return
		case err != nil && ctx.Err() == nil:
			if failures%40 == 0 {
				log.Warn("recrawl intake failed; trying again", "failures", failures+1, "err", err)
			}
			failures++
			ctxsleep.Sleep(ctx, errorPause)
		case err == nil:
			failures = 0
		}
	}
}

func (s *shard) dueAllowance(ctx context.Context, in *dueIntake) (int, error) {
	c, err := frontierkeys.OpenReadOnly(s.rdb, s.cfg.Common.RedisPrefix, s.cfg.Common.Shards).ShardStats(ctx, s.id)
	if err != nil {
		return 0, fmt.Errorf("frontier stats: %w", err)
	}
	return in.allow(c.Queued, c.Dispatched), nil
}

// takeDue pulls up to n due messages and queues their URLs as they come: a pull waits up
// to a second for n, and a due URL must not wait for the others. It returns how many it
// queued. A failed pull goes to pulls, which pauses it; the error returned then is
// natsx.ErrConsumerGone or nil.
func (s *shard) takeDue(ctx context.Context, n int, pulls *natsx.PullPacer, o natsx.ConsumeOptions) (int, error) {
	mb, err := s.dueC.Fetch(n, jetstream.FetchMaxWait(natsx.PullMaxWait))
	if err != nil {
		if ctx.Err() != nil {
			return 0, nil
		}
		return 0, pulls.Failed(ctx, s.dueC, fmt.Errorf("fetch due: %w", err))
	}
	in := mb.Messages()
	took := 0
	// The pull is read to its end, whatever fails: it stays open at the server until then,
	// and a message delivered into a pull no one reads waits out AckWait.
	var failed error
	for m := range in {
		// Those that arrived with it, or within a moment, go in the same publish.
		chunk := []jetstream.Msg{m}
		linger := time.NewTimer(dueLinger)
	gather:
		for len(chunk) < dueBatch {
			select {
			case m, ok := <-in:
				if !ok {
					break gather
				}
				chunk = append(chunk, m)
			case <-linger.C:
				break gather
			}
		}
		linger.Stop()
		k, err := s.queueDue(ctx, chunk, o)
		took += k
		if failed == nil {
			failed = err
		}
	}
	if failed != nil {
		return took, failed
	}
	switch err := natsx.PullError(mb); {
	case err == nil:
		pulls.OK()
	case ctx.Err() == nil:
		return took, pulls.Failed(ctx, s.dueC, err)
	}
	return took, nil
}

// dueLinger is how long a due message waits for others to share its publish.
const dueLinger = 5 * time.Millisecond

// queueDue publishes the frontier messages of due messages, then acks them. One that is
// malformed, or whose publish fails, is settled as the consume loops settle theirs
// (natsx.Settle): nak'ed with backoff, or given up and parked in CRAWL_DEAD.
//
// A due letter replayed (natsx.Replay) goes back to its due subject, where the stream
// keeps one message per subject: it replaces any due message waiting there. No URL is lost
// for it. A newer due message of the same URL exists only if the URL was fetched since its
// schedule fired: a fired schedule is purged, only a fetch writes the next one (the
// parser, or rescheduleFailed for a failed fetch), and a sitemap's bringForward skips a
// URL without one. So the URL was queued another way: its last frontier publish was stored
// after all, the error seen after the store. Then the replay brings back state one fetch
// old: it replaces the newer due message or, that one taken already, queues the URL once
// more, whose schedule then replaces the newer one. Only a URL whose key collides with the
// parked one's (one subject for both, topology.RecrawlKey) loses its due message to it.
func (s *shard) queueDue(ctx context.Context, due []jetstream.Msg, o natsx.ConsumeOptions) (int, error) {
	var msgs []jetstream.Msg
	var out []*nats.Msg
	for _, m := range due {
		fm, err := s.frontierOf(m)
		if err != nil {
			natsx.Settle(ctx, m, natsx.Permanent(err), o)
			continue
		}
		msgs = append(msgs, m)
		out = append(out, fm)
	}
	if len(out) == 0 {
		return 0, nil
	}
	pctx, pcancel := context.WithTimeout(context.WithoutCancel(ctx), publishTimeout)
	defer pcancel()
	if err := natsx.PublishBatch(pctx, s.js, out); err != nil {
		// One publish carries them all: its error is no one message's, so a permanent one
		// (the batch refused) counts as temporary, each given up on its own deliveries.
		cause := err
		if natsx.IsPermanent(err) {
			cause = fmt.Errorf("queue due recrawls: %v", err)
		}
		for _, m := range msgs {
			natsx.Settle(ctx, m, cause, o)
		}
		return 0, fmt.Errorf("queue due recrawls: %w", err)
	}
	for _, m := range msgs {
		if err := m.Ack(); err != nil {
			s.log.Warn("ack of a due recrawl failed; it comes back and is dropped as a duplicate", "err", err)
		}
	}
	s.m.recrawlsDue.WithLabelValues(s.label).Add(float64(len(msgs)))
	return len(msgs), nil
}

// frontierOf is the frontier message of due message m. An error means m is malformed, for
// good.
func (s *shard) frontierOf(m jetstream.Msg) (*nats.Msg, error) {
	e, err := crawlmsg.DecodeRecrawl(m.Data())
	if err != nil {
		return nil, err
	}
	data, err := crawlmsg.Marshal(&crawlmsg.FrontierBatch{URLs: []crawlmsg.Discovered{e.Discovered()}})
	if err != nil {
		return nil, fmt.Errorf("encode the frontier message of due recrawl %s: %w", e.URL, err)
	}
	return natsx.NewMsg(topology.FrontierSubject(s.id), topology.DueID(natsx.MsgID(m)), data), nil
}

// rescheduleLoop writes the next schedules of the recrawled URLs the frontier failed
// without a page (their host retired, their retries spent, a reap past them). The step
// that failed them kept them with their state in the shard's outbox
// (frontier.FailedRecrawls), so a scheduler that dies, a drain that times out or a step
// whose reply was lost loses none. An item leaves the outbox only once its schedule is
// stored, under an id derived from the item, so a crash in between writes the same
// schedule again (a duplicate JetStream drops, or the same message replacing itself). A
// failure to read or publish is logged and tried again at the next tick; the items wait in
// Redis meanwhile.
func (s *shard) rescheduleLoop(ctx context.Context) {
	t := time.NewTicker(rescheduleEvery)
	defer t.Stop()
	failures := 0
	for ctx.Err() == nil {
		n, err := s.rescheduleFailed(ctx)
		switch {
		case err != nil && ctx.Err() == nil:
			if failures%30 == 0 {
				s.log.Warn("failed recrawls not scheduled yet; they wait in Redis and are tried again", "err", err, "consecutive", failures+1)
			}
			failures++
		case err == nil && failures > 0:
			s.log.Info("failed recrawls scheduled again", "after_failures", failures)
			failures = 0
		}
		if err == nil && n >= dueBatch {
			continue
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-s.resched:
		}
	}
}

// rescheduleEvery is how often the outbox of failed recrawls is read without a wake-up.
const rescheduleEvery = time.Second

// rescheduleFailed writes the schedules of up to dueBatch failed recrawls and drops them
// from the outbox; it returns how many items it took. A URL for which a request was made
// counts that as a fetch answered "other" (interval kept); one that failed without a
// request (its host retired) is only postponed by its interval, its state otherwise kept.
func (s *shard) rescheduleFailed(ctx context.Context) (int, error) {
	kept, bad, err := s.f.FailedRecrawls(ctx, dueBatch)
	if err != nil {
		return 0, err
	}
	drop := bad
	for _, raw := range bad {
		s.log.Error("dropping a malformed failed-recrawl item", "item", raw)
	}
	var msgs []*nats.Msg
	for _, fr := range kept {
		x, err := crawlmsg.DecodeExtra(fr.Entry.Ext)
		if err != nil || x.Recrawl == nil {
			// No state to keep: a plain URL that carries only its kind.
			drop = append(drop, fr.Raw)
			continue
		}
		e := crawlmsg.RecrawlEntry{URL: fr.Entry.URL, Depth: fr.Entry.Depth, Kind: x.Kind, Embeds: x.Embeds}
		rs := s.recrawlFor(e.URL)
		if fr.Requested {
			e.State, _ = rs.Next(x.Recrawl, recrawl.Other, recrawl.Fetch{FetchedAt: fr.At})
		} else {
			e.State = rs.Postpone(*x.Recrawl, fr.At)
		}
		m, err := recrawl.Schedule(s.id, &e, "fail:"+strconv.FormatInt(fr.At.UnixMilli(), 10)+":"+topology.RecrawlKey(e.URL))
		if err != nil {
			s.log.Error("dropping a failed recrawl whose schedule cannot be encoded", "url", e.URL, "err", err)
			drop = append(drop, fr.Raw)
			continue
		}
		msgs = append(msgs, m)
		drop = append(drop, fr.Raw)
	}
	if len(msgs) > 0 {
		pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), publishTimeout)
		defer cancel()
		if err := natsx.PublishBatch(pctx, s.js, msgs); err != nil {
			return 0, fmt.Errorf("publish %d schedules of failed recrawls: %w", len(msgs), err)
		}
		s.m.recrawlsFailed.WithLabelValues(s.label).Add(float64(len(msgs)))
	}
	if err := s.f.DropFailedRecrawls(ctx, drop); err != nil {
		return 0, err
	}
	return len(kept) + len(bad), nil
}

// recrawlFor is the interval policy of one URL: TRAWL_RECRAWL_MIN/MAX, or the bounds of
// the live rule that matches it (recrawl_min, recrawl_max).
func (s *shard) recrawlFor(rawURL string) recrawl.Settings {
	if s.rules == nil {
		return s.cfg.Recrawl
	}
	return s.cfg.Recrawl.For(s.rules().URL(rawURL))
}

// recrawlBacklog reads the recrawl backlog for the status page at most every
// backlogEvery: each reading samples schedules from the stream, and the page refreshes
// every second. Nil in a one-shot crawl.
func recrawlBacklog(cfg config.Config, js jetstream.JetStream, now func() time.Time) func(context.Context) (*recrawl.Backlog, error) {
	if !cfg.Common.Topology().Recrawl {
		return nil
	}
	var mu sync.Mutex
	var last *recrawl.Backlog
	var at time.Time
	return func(ctx context.Context) (*recrawl.Backlog, error) {
		mu.Lock()
		defer mu.Unlock()
		if last != nil && now().Sub(at) < backlogEvery {
			return last, nil
		}
		b, err := recrawl.ReadBacklog(ctx, js, cfg.Common.Shards, backlogSample, now())
		if err != nil {
			return nil, err
		}
		last, at = b, now()
		return b, nil
	}
}

const (
	backlogEvery  = 10 * time.Second
	backlogSample = 128
)
