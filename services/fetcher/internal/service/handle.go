package service

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/trawl/trawl/services/fetcher/internal/fetch"
	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/ctxsleep"
	"github.com/trawl/trawl/shared/errclass"
	"github.com/trawl/trawl/shared/frontierkeys"
	"github.com/trawl/trawl/shared/natsx"
	"github.com/trawl/trawl/shared/politeness"
	"github.com/trawl/trawl/shared/robots"
	"github.com/trawl/trawl/shared/robotscache"
	"github.com/trawl/trawl/shared/topology"
	"github.com/trawl/trawl/shared/urlnorm"
)

const (
	// deadlineSlack is added to the fetch timeout when deciding whether a task can still be
	// served: the request must end, and its outcome be published, before the lease does.
	// It is also the margin by which every request's context deadline precedes the lease
	// deadline, whatever time the robots lookup took: the slack is left for publishing.
	deadlineSlack = 2 * time.Second
	// minRequestTime: a request that would have less than this before its cut-off is not
	// started (the task is reported expired, no attempt counted).
	minRequestTime = time.Second
	// publishTimeout bounds waiting for JetStream to store a task's messages.
	publishTimeout = 5 * time.Second
	// robotsMaxHops is RFC 9309 §2.3.1.2's "at least five consecutive redirects".
	robotsMaxHops = 5
)

// handle serves one crawl.fetch message: a task, or a batch of tasks of different hosts
// run at once on the workers (natsx.ConsumeEach gave it a slot per task: taskCount). It
// returns once every task has ended, with its outcome stored or given up (its lease then
// brings the URL back), so the message is acked; only one that cannot be read is
// terminated. A message is never nak'ed: a temporary failure is retried in place. So it is
// delivered again only after AckWait, which exceeds the lease, when each of its tasks is
// answered expired without a request: a request that was made is never made again for the
// same lease.
func (s *Service) handle(ctx context.Context, msg jetstream.Msg) error {
	tasks, err := crawlmsg.DecodeTasks(msg.Data())
	if err != nil {
		return err // ErrMalformed / ErrVersion: permanent, terminated by natsx
	}
	s.work.runAll(ctx, tasks)
	return nil
}

// taskCount is how many tasks a crawl.fetch message holds, from its header (1 without
// one: a single task).
func taskCount(m jetstream.Msg) int {
	if n, err := strconv.Atoi(m.Headers().Get(crawlmsg.TasksHeader)); err == nil && n > 0 {
		return n
	}
	return 1
}

// handleTask serves one fetch task on a worker.
func (s *Service) handleTask(ctx context.Context, task *crawlmsg.FetchTask) {
	s.m.inflight.Inc()
	defer s.m.inflight.Dec()
	s.outcomes.begin()
	defer s.outcomes.end()

	// A task in hand is finished on shutdown: its request is owed to the host's politeness
	// accounting and its lease blocks the host until then. Bound it by its own budget
	// rather than by the consume loop's drain.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.taskBudget())
	defer cancel()

	out, page, err := s.process(ctx, task)
	// An error comes before any request (Redis failed for robots.txt): the task is tried
	// again in place, and past its deadline process answers expired.
	for try := uint64(1); err != nil; try++ {
		s.noteError(task, "task", err)
		if v := errclass.Of(err); v.Class == errclass.Permanent {
			s.m.permanentErrors.WithLabelValues("task", v.Reason).Inc()
			s.log.Error("task failed for good before its request; its lease will bring the URL back, counting an attempt", "url", task.URL, "reason", v.Reason, "err", err)
			return
		}
		if !ctxsleep.Sleep(ctx, natsx.DefaultBackoff(try)) {
			s.log.Error("task given up before its request; its lease will bring the URL back", "url", task.URL, "err", err)
			return
		}
		s.log.Warn("task failed before its request; retrying", "url", task.URL, "try", try, "err", err)
		out, page, err = s.process(ctx, task)
	}
	if err := s.deliver(task, out, page); err != nil {
		// The request was made, so it is never tried again: its lease expires and the
		// scheduler re-queues the URL after the host's delay (a duplicate fetch the design
		// allows).
		s.m.publishFailures.Inc()
		s.log.Error("results not published before the lease deadline; the lease will expire and the URL be retried", "url", task.URL, "err", err)
		return
	}
	if page != nil && page.reusable {
		page.resp.Release()
	}
	s.m.outcomes.WithLabelValues(string(out.Kind)).Inc()
	if s.log.Enabled(ctx, slog.LevelDebug) {
		// Checked first: the arguments alone would cost every page four allocations.
		s.log.Debug("task done", "url", task.URL, "kind", out.Kind, "status", out.Status, "ms", out.DurationMs)
	}
}

// pageResult is what a page request produced besides its outcome: the page and, for a
// redirect, the target to discover.
type pageResult struct {
	page     *crawlmsg.Page // &pageMem
	pageMem  crawlmsg.Page
	capture  crawlmsg.Capture // page's, in the same allocation
	redirect *nats.Msg
	resp     *fetch.Response // holds the body's buffer
	// reusable: the body went inline and its page message was acknowledged on the first
	// attempt, so no earlier attempt is left that the client could still resend, and the
	// body's buffer may serve another response.
	reusable bool
}

// deliver stores a task's results in order: the page (its body first, when it goes by
// reference) and any redirect target, then the outcome, in a batch with other tasks'
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
	if task.Recrawl != nil && failing(out.Kind) {
		out.Recrawl = &crawlmsg.RecrawlEntry{V: crawlmsg.Version, URL: task.URL, Depth: task.Depth, Kind: task.Kind, Embeds: task.Embeds, State: *task.Recrawl}
	}
	// The outcome goes out in its shard's next batch; this returns once that batch is
	// stored, so the task is acked only then.
	return s.outcomes.add(out, deadline)
}

// storePage publishes the page and its redirect target. A body above the inline threshold
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
	if res.redirect != nil {
		msgs = append(msgs, res.redirect)
	}
	err = s.retryTask(deadline, task, "page", publishTimeout, func(ctx context.Context) error {
		tries++
		return natsx.PublishBatch(ctx, s.js, msgs)
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

// messageRoom is left in a message for the Nats-Msg-Id and JetStream's own headers.
const messageRoom = 4 << 10

// inlineMax is the largest body that travels inline with metaLen octets of metadata:
// TRAWL_BODY_INLINE_MAX, lowered if the server's max_payload or the stream's message
// size would not hold it.
func (s *Service) inlineMax(metaLen int) int64 {
	limit := min(s.nc.MaxPayload(), int64(s.maxMsg)) - int64(metaLen) - messageRoom
	return max(0, min(s.cfg.BodyInlineMax, limit))
}

// chunkSize is the object store chunk: large enough to keep the message count low, small
// enough for any server's max_payload.
func (s *Service) chunkSize() uint32 {
	return uint32(max(32<<10, min(1<<20, s.nc.MaxPayload()-messageRoom)))
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
	if _, nerr := frontierkeys.NoteLeaseError(ctx, s.rdb, s.cfg.Common.RedisPrefix, task.Shard, task.Host, task.Lease, fmt.Errorf("%s: %w", what, err)); nerr != nil {
		s.log.Debug("last error of a task not recorded", "url", task.URL, "err", nerr)
	}
}

func earliest(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// taskBudget bounds one task: a robots lookup, one request and publishing.
func (s *Service) taskBudget() time.Duration {
	return s.cfg.FetchTimeout + publishTimeout + deadlineSlack
}

// process decides the task and makes its request, if any. It returns the outcome and the
// page to store before it; an error means the task must be retried.
func (s *Service) process(ctx context.Context, task *crawlmsg.FetchTask) (*crawlmsg.Outcome, *pageResult, error) {
	out := &crawlmsg.Outcome{Shard: task.Shard, Host: task.Host, URL: task.URL, Lease: task.Lease, Attempt: task.Attempt}

	// After the deadline the scheduler may give the host to another fetcher, so a request
	// that could still be running then must not start.
	if s.now().Add(s.cfg.FetchTimeout + deadlineSlack).After(s.lease.local(task.Deadline)) {
		return s.expired(out), nil, nil
	}
	u, err := url.Parse(task.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		s.m.blocked.Inc()
		out.Kind, out.Permanent = crawlmsg.OutcomeBlocked, true
		out.Error = fmt.Sprintf("unfetchable URL %q", task.URL)
		return out, nil, nil
	}
	origin := originOf(task.URL, u)
	// The site policies are read when the task starts on its worker, not when it was
	// received, and again right before each request it makes (fetchPage, fetchRobots):
	// a block set while the task waited is obeyed.
	pol := s.policyOf(task.URL)
	if pol.Blocked() {
		return s.parked(out, parkedPage), nil, nil
	}
	if o := s.outOfScope(task, pol, out); o != nil {
		return o, nil, nil
	}
	rb := s.robotsFor(pol)

	// Whatever the robots lookup below costs, the request ends deadlineSlack before the
	// lease: its context carries that cut-off, on top of the fetch timeout.
	cutoff := s.lease.local(task.Deadline).Add(-deadlineSlack)
	reqCtx := ctx
	if d, ok := ctx.Deadline(); !ok || cutoff.Before(d) {
		// Only when the cut-off is the tighter bound: otherwise ctx already ends first and
		// another timer would change nothing.
		var cancel context.CancelFunc
		reqCtx, cancel = context.WithDeadline(ctx, cutoff)
		defer cancel()
	}

	entry, err := rb.store.Get(reqCtx, origin)
	if err != nil {
		if ctx.Err() == nil && reqCtx.Err() != nil {
			return s.expired(out), nil, nil
		}
		// Redis failed: make the gate ping again before the next pull, so an outage pauses
		// consumption at once instead of spending deliveries on naks.
		s.crawl.Invalidate()
		return nil, nil, err
	}
	if s.now().Add(minRequestTime).After(cutoff) {
		// The lookup took the time the request needed.
		return s.expired(out), nil, nil
	}
	if entry == nil {
		s.m.robotsDecisions.WithLabelValues("miss").Inc()
		rout, fresh, err := s.fetchRobots(ctx, reqCtx, out, origin, task.Host, rb)
		if err != nil || !s.goOnAfterRobots(ctx, task, fresh) {
			return rout, nil, err
		}
		// The host's gap after robots.txt has passed already (no delay is set, or the file
		// was slow enough to cover it): the URL is decided now instead of in a task of its
		// own, saving the host a round trip through the frontier. The outcome speaks of the
		// last request; until the page's is made, that is robots.txt's.
		s.m.robotsThenPage.Inc()
		entry = fresh.entry
		out = &crawlmsg.Outcome{Shard: task.Shard, Host: task.Host, URL: task.URL, Lease: task.Lease, Attempt: task.Attempt,
			Robots: true, CrawlDelay: rout.CrawlDelay, Requested: true, StartedAt: rout.StartedAt, DurationMs: rout.DurationMs}
	}
	// The same decision trawlctl's "robots check" shows an operator. An unreachable
	// robots.txt sends every task back (even one for /robots.txt itself, which the RFC
	// would allow): the host is down, and the scheduler must back off.
	d := entry.Decide(u.RequestURI())
	switch {
	case d.Class == robots.Unreachable:
		s.m.robotsDecisions.WithLabelValues("unavailable").Inc()
		out.Kind, out.Error = crawlmsg.OutcomeRobotsUnavailable, entry.Error
		return out, nil, nil
	case !d.Allowed:
		s.m.robotsDecisions.WithLabelValues("disallowed").Inc()
		out.Kind = crawlmsg.OutcomeDisallowed
		return out, nil, nil
	}
	s.m.robotsDecisions.WithLabelValues("allowed").Inc()
	out.CrawlDelay = d.CrawlDelay.Seconds()
	return s.fetchPage(ctx, reqCtx, task, u, out)
}

// acceptFor is the Accept header of a request for a URL of this kind.
func acceptFor(k crawlmsg.Kind) string {
	switch k {
	case crawlmsg.KindEmbed:
		return fetch.AcceptAny
	case crawlmsg.KindSitemap:
		return fetch.AcceptSitemap
	}
	return fetch.AcceptPage
}

// originOf is u's scheme://host[:port], rawURL's own prefix when it is written so (a
// normalised URL is), which spares a string per task.
func originOf(rawURL string, u *url.URL) string {
	n := len(u.Scheme) + len("://") + len(u.Host)
	if n <= len(rawURL) && rawURL[:len(u.Scheme)] == u.Scheme && rawURL[len(u.Scheme):len(u.Scheme)+3] == "://" && rawURL[len(u.Scheme)+3:n] == u.Host &&
		(n == len(rawURL) || rawURL[n] == '/' || rawURL[n] == '?' || rawURL[n] == '#') {
		return rawURL[:n]
	}
	return u.Scheme + "://" + u.Host
}

// robotsFetched is a robots.txt that a task fetched in one request to its own host.
type robotsFetched struct {
	entry *robots.Entry
	end   time.Time     // when the request ended
	took  time.Duration // the request's time, which the host's gap is measured by
}

// goOnAfterRobots says whether the task may go on to its URL after fetching robots.txt
// (f, nil when that took more than one request or did not succeed): only when the politeness
// rule puts the host's next request no later than now, so that the two requests are as far
// apart as two tasks would be, and only when the task's lease and budget still hold a full
// request and its publishing.
func (s *Service) goOnAfterRobots(ctx context.Context, task *crawlmsg.FetchTask, f *robotsFetched) bool {
	if f == nil {
		return false
	}
	now := s.now()
	gap, _ := s.cfg.Politeness.Gap(f.entry.CrawlDelay(), f.took)
	if now.Before(f.end.Add(gap)) || now.Add(s.cfg.FetchTimeout+deadlineSlack).After(s.lease.local(task.Deadline)) {
		return false
	}
	dl, ok := ctx.Deadline()
	return !ok || dl.Sub(now) >= s.cfg.FetchTimeout+publishTimeout
}

// expired reports a task that cannot make its request before its lease ends.
func (s *Service) expired(out *crawlmsg.Outcome) *crawlmsg.Outcome {
	s.m.expired.Inc()
	out.Kind = crawlmsg.OutcomeExpired
	return out
}

// fetchRobots makes the task's request robots.txt: the result is cached for every
// fetcher, and the outcome sends the URL back to wait the host's delay, so robots.txt is
// fetched under the same politeness as a page. ctx is the task's; the requests run under
// reqCtx, which ends before the lease.
//
// A redirect chain keeps every host's gap. The task's own host gets one request: when
// robots.txt redirects to the same host (http→https included), the hop is recorded in the
// cache and the outcome is `robots`, so the hop is the host's next task, after its delay.
// A hop to another host is made only under a claim on that host (politeness.Claimer): when
// that host is inside its gap or has a task out, the hop is recorded and the task ends
// `deferred` (or `robots`, if it made its own request), asking to be tried again when the
// other host is free; the URL waits at the head of its queue meanwhile, no attempt counted.
//
// Each request of the chain is made under the site policy of its own URL (its headers,
// only to its host), checked right before it: when the task's URL is blocked the task is
// parked, and a hop whose URL is blocked ends the chain as unreachable. The entry is
// reduced for rb's agent: the product token of the User-Agent the task's URL is crawled as.
func (s *Service) fetchRobots(ctx, reqCtx context.Context, out *crawlmsg.Outcome, origin, host string, rb robotsView) (*crawlmsg.Outcome, *robotsFetched, error) {
	hop, err := rb.store.GetHop(reqCtx, origin)
	if err != nil {
		s.crawl.Invalidate()
		return nil, nil, err
	}
	target, n := origin+"/robots.txt", 0
	if hop != nil {
		target, n = hop.URL, hop.N
	}
	limit := s.cfg.RobotsMaxBytes
	var (
		resp      *fetch.Response
		own       bool          // the task's own host was requested
		started   time.Time     // when the chain's first request of this task started
		ownTook   time.Duration // the own host's request time, its gap's measure
		requested bool
	)
	for {
		to, herr := urlnorm.Host(target)
		other := herr == nil && to != host
		if own && !other {
			// A second request to the task's own host waits for its next task.
			return noFresh(s.robotsHop(ctx, rb.store, out, origin, robotscache.Hop{URL: target, N: n}, started, ownTook, 0))
		}
		next := robotscache.Hop{URL: target, N: n}
		if s.policyOf(out.URL).Blocked() {
			if requested {
				return noFresh(s.robotsHop(ctx, rb.store, out, origin, next, started, ownTook, 0))
			}
			return s.parked(out, parkedRobots), nil, nil
		}
		tpol := s.policyOf(target)
		if tpol.Blocked() {
			s.m.policy.hopBlock.Inc()
			err = fmt.Errorf("robots.txt at %s: %w", target, errPolicyBlocked)
			if n > 0 {
				err = &fetch.RedirectError{Hop: n, URL: target, Err: err}
			}
			break
		}
		hdr, herr := s.headersOf(tpol, to)
		if herr != nil {
			if requested {
				s.log.Warn("robots.txt: the next hop's secret cannot be read", "origin", origin, "target", target, "err", herr)
				return noFresh(s.robotsHop(ctx, rb.store, out, origin, next, started, ownTook, 0))
			}
			return s.secretFailed(out, herr), nil, nil
		}
		// The server address first: a busy one ends the chain here, before another host
		// is claimed for nothing.
		lease, reqErr, lerr := s.atServer(reqCtx, target, 0)
		switch {
		case lerr != nil && requested:
			s.log.Warn("robots.txt: server lease failed", "origin", origin, "target", target, "err", lerr)
			return noFresh(s.robotsHop(ctx, rb.store, out, origin, next, started, ownTook, 0))
		case lerr != nil:
			return nil, nil, lerr
		case lease != nil && !lease.claim.OK && requested:
			return noFresh(s.robotsHop(ctx, rb.store, out, origin, next, started, ownTook, lease.claim.Wait))
		case lease != nil && !lease.claim.OK:
			if n > 0 && (hop == nil || *hop != next) {
				if err := rb.store.PutHop(ctx, origin, next); err != nil {
					s.crawl.Invalidate()
					return nil, nil, err
				}
			}
			return serverBusy(out, lease), nil, nil
		}
		var claim politeness.Claim
		hopCtx := reqCtx
		if lease != nil {
			hopCtx = lease.ctx
		}
		if other {
			window, bounded, cancel := s.claimFor(hopCtx)
			defer cancel()
			hopCtx = bounded
			claim, err = s.claims.Claim(reqCtx, to, window)
			if err != nil || !claim.OK {
				s.releaseServer(ctx, lease, -1)
			}
			switch {
			case err != nil && requested:
				// The hop was not made: record it, and report the request that was.
				s.log.Warn("robots.txt redirect: claim failed", "origin", origin, "to", to, "err", err)
				return noFresh(s.robotsHop(ctx, rb.store, out, origin, robotscache.Hop{URL: target, N: n}, started, ownTook, 0))
			case err != nil:
				s.crawl.Invalidate()
				return nil, nil, err
			case !claim.OK && requested:
				return noFresh(s.robotsHop(ctx, rb.store, out, origin, robotscache.Hop{URL: target, N: n}, started, ownTook, claim.Wait))
			case !claim.OK:
				return noFresh(s.deferRobots(ctx, rb.store, out, origin, robotscache.Hop{URL: target, N: n}, hop, to, claim.Wait))
			}
		}
		hopCtx = fetch.WithHeaders(hopCtx, hdr)
		t0 := s.now()
		if !requested {
			started = t0
		}
		// One octet over the limit tells robots.Parse the file went on, so it drops a cut line.
		switch {
		case reqErr != nil:
			// The dial would have failed the same way.
			resp, err = nil, reqErr
		case lease != nil:
			resp, err = s.client.GetRobots(hopCtx, target, limit+1)
			s.releaseServer(ctx, lease, s.now().Sub(t0))
		default:
			resp, err = s.client.GetRobots(hopCtx, target, limit+1)
		}
		took := s.now().Sub(t0)
		requested = true
		if other {
			if _, rerr := s.claims.Release(ctx, claim, took); rerr != nil {
				// The claim's window still holds the host; it only waits longer.
				s.log.Warn("robots.txt redirect: claim not released", "host", to, "err", rerr)
			}
		} else {
			own, ownTook = true, took
		}
		if err != nil && n > 0 {
			err = &fetch.RedirectError{Hop: n, URL: target, Err: err}
		}
		if err != nil || resp.Location == "" || n >= robotsMaxHops {
			break
		}
		s.m.bytes.Add(float64(resp.WireBytes))
		s.m.robotsFetches.WithLabelValues("redirect").Inc()
		out.Status = resp.Status
		target, n = resp.Location, n+1
	}

	var entry *robots.Entry
	switch {
	case err != nil && ctx.Err() != nil:
		return nil, nil, fmt.Errorf("fetcher: robots.txt of %s: %w", origin, err)
	case err != nil && fetch.IsBlocked(err) && !isRedirectErr(err):
		// The origin itself is not a public address: nothing was requested.
		s.m.robotsFetches.WithLabelValues("blocked").Inc()
		s.m.blocked.Inc()
		out.Kind, out.Error, out.Permanent = crawlmsg.OutcomeBlocked, err.Error(), true
		return out, nil, nil
	case err != nil:
		entry = robots.UnreachableEntry(rb.agent, err, started)
		out.Error, out.Permanent = err.Error(), fetch.IsPermanent(err)
	default:
		s.m.bytes.Add(float64(resp.WireBytes))
		entry = robots.NewEntry(rb.agent, resp.Status, resp.Body, int(limit), started)
		out.Status = resp.Status
		out.RetryAfter = retryAfter(resp, started)
	}
	s.m.robotsFetches.WithLabelValues(entry.Class.String()).Inc()
	if err := rb.store.Put(ctx, origin, entry); err != nil {
		// The request was made, so the outcome is still owed to the scheduler; the next
		// task for the origin simply fetches robots.txt again.
		s.log.Warn("robots cache write failed", "origin", origin, "err", err)
	}
	if entry.Class != robots.Unreachable && s.cfg.SitemapsEnabled() {
		s.publishSitemaps(ctx, out.Lease, origin, entry)
	}
	// Requested and the duration speak of the task's own host: a chain served by other
	// hosts alone spent nothing of this host's gap.
	out.Requested = own
	if own {
		out.StartedAt = started.UnixMilli()
		out.DurationMs = ownTook.Milliseconds()
	}
	out.CrawlDelay = entry.CrawlDelay().Seconds()
	out.Kind = crawlmsg.OutcomeRobots
	if entry.Class == robots.Unreachable {
		out.Kind = crawlmsg.OutcomeRobotsUnavailable
	}
	if hop != nil || n > 0 {
		if err := rb.store.ClearHop(ctx, origin); err != nil {
			s.log.Warn("robots cache hop not cleared", "origin", origin, "err", err)
		}
	}
	s.log.Debug("robots.txt fetched", "origin", origin, "class", entry.Class, "status", out.Status, "err", out.Error)
	var fresh *robotsFetched
	if own && hop == nil && n == 0 && entry.Class != robots.Unreachable && out.RetryAfter == 0 {
		fresh = &robotsFetched{entry: entry, end: started.Add(ownTook), took: ownTook}
	}
	return out, fresh, nil
}

// noFresh is for the ends of a robots.txt chain that leave the URL to a later task.
func noFresh(out *crawlmsg.Outcome, err error) (*crawlmsg.Outcome, *robotsFetched, error) {
	return out, nil, err
}

// cutoffOf is ctx's deadline; reqCtx always has one (the task's cut-off).
func cutoffOf(ctx context.Context) time.Time {
	if d, ok := ctx.Deadline(); ok {
		return d
	}
	return time.Now().Add(time.Minute)
}

// robotsHop records the origin's next robots.txt hop after this task's request to its own
// host and reports that request: the URL goes back to its host queue, and a later task
// requests the hop, after the host's delay and at least wait.
func (s *Service) robotsHop(ctx context.Context, rc *robotscache.Store, out *crawlmsg.Outcome, origin string, next robotscache.Hop, started time.Time, took, wait time.Duration) (*crawlmsg.Outcome, error) {
	if err := rc.PutHop(ctx, origin, next); err != nil {
		// The request was made, so its outcome is owed; the chain starts over next time.
		s.log.Warn("robots cache hop write failed", "origin", origin, "err", err)
	}
	out.Kind, out.Requested = crawlmsg.OutcomeRobots, true
	out.StartedAt = started.UnixMilli()
	out.DurationMs = took.Milliseconds()
	out.RetryAfter = wait.Seconds()
	s.log.Debug("robots.txt redirect; the next hop is a later task", "origin", origin, "hop", next.N, "to", next.URL, "wait", wait)
	return out, nil
}

// deferRobots ends a task that made no request because the next hop of its robots.txt
// chain goes to another host that is busy: the URL waits at the head of its queue and the
// host's next task, after wait, tries the hop again.
func (s *Service) deferRobots(ctx context.Context, rc *robotscache.Store, out *crawlmsg.Outcome, origin string, next robotscache.Hop, pending *robotscache.Hop, to string, wait time.Duration) (*crawlmsg.Outcome, error) {
	if pending == nil || *pending != next {
		if err := rc.PutHop(ctx, origin, next); err != nil {
			s.crawl.Invalidate()
			return nil, err
		}
	}
	s.m.robotsDeferred.Inc()
	out.Kind = crawlmsg.OutcomeDeferred
	out.RetryAfter = wait.Seconds()
	out.Error = fmt.Sprintf("robots.txt redirects to %s, which is inside its gap", to)
	s.log.Debug("robots.txt redirect to a busy host; task deferred", "origin", origin, "to", to, "wait", wait)
	return out, nil
}

func isRedirectErr(err error) bool {
	var re *fetch.RedirectError
	return errors.As(err, &re)
}

// fetchPage requests the page (u is task.URL parsed) under reqCtx and builds the page
// and, for a redirect, the discovered target.
func (s *Service) fetchPage(ctx, reqCtx context.Context, task *crawlmsg.FetchTask, u *url.URL, out *crawlmsg.Outcome) (*crawlmsg.Outcome, *pageResult, error) {
	// Right before the request, the rules in force now decide: a block set since the task
	// was dispatched, received or started stops it here.
	pol := s.policyOf(task.URL)
	if pol.Blocked() {
		return s.parked(out, parkedPage), nil, nil
	}
	hdr, err := s.headersOf(pol, u.Hostname())
	if err != nil {
		return s.secretFailed(out, err), nil, nil
	}
	lease, reqErr, err := s.atServer(reqCtx, task.URL, time.Duration(out.CrawlDelay*float64(time.Second)))
	if err != nil {
		return nil, nil, err
	}
	if lease != nil && !lease.claim.OK {
		return serverBusy(out, lease), nil, nil
	}
	started := s.now()
	var resp *fetch.Response
	switch {
	case reqErr != nil:
		// The dial would have failed the same way.
		err = reqErr
	case lease != nil:
		resp, err = s.client.GetParsed(fetch.WithHeaders(lease.ctx, hdr), task.URL, u, acceptFor(task.Kind), validators(task))
		s.releaseServer(ctx, lease, s.now().Sub(started))
		out.Addr = lease.claim.Addr.String()
	default:
		resp, err = s.client.GetParsed(fetch.WithHeaders(reqCtx, hdr), task.URL, u, acceptFor(task.Kind), validators(task))
	}
	if err != nil {
		switch {
		case ctx.Err() != nil:
			return nil, nil, fmt.Errorf("fetcher: %s: %w", task.URL, err)
		case fetch.IsBlocked(err):
			s.m.blocked.Inc()
			out.Kind, out.Error, out.Permanent = crawlmsg.OutcomeBlocked, err.Error(), true
			return out, nil, nil
		}
		out.Kind, out.Requested = crawlmsg.OutcomeError, true
		out.Error, out.Permanent = err.Error(), fetch.IsPermanent(err)
		out.StartedAt, out.DurationMs = started.UnixMilli(), s.now().Sub(started).Milliseconds()
		return out, nil, nil
	}
	s.m.pages.WithLabelValues(statusClass(resp.Status)).Inc()
	s.m.bytes.Add(float64(resp.WireBytes))
	s.m.duration.Observe(resp.Duration.Seconds())

	// The page, its capture and the result are one allocation.
	res := &pageResult{resp: resp}
	res.pageMem = crawlmsg.Page{
		Meta: crawlmsg.PageMeta{
			URL:         task.URL,
			Host:        task.Host,
			Depth:       task.Depth,
			Status:      resp.Status,
			Header:      resp.Header,
			ContentType: resp.MediaType,
			Charset:     resp.Charset,
			FetchedAt:   resp.StartedAt.UnixMilli(),
			DurationMs:  resp.Duration.Milliseconds(),
			Truncated:   resp.Truncated,
			// A redirect chain is recorded hop by hop: this hop's target, and how many
			// hops led here (the previous hop is the page whose Location is this URL).
			Location: resp.Location,
			Hops:     task.Hops,
			Lease:    task.Lease,
			Kind:     task.Kind,
			Embeds:   task.Embeds,
			Recrawl:  task.Recrawl,
			Under:    task.Under,
		},
		Body: resp.Body,
	}
	res.page = &res.pageMem
	s.attachCapture(res.page, &res.capture, resp)

	if resp.Location != "" {
		out.Location = resp.Location
		// The target is crawled like any discovered URL (deduplicated, scheduled politely),
		// at the same depth: a redirect is not a link hop. Hops caps the chain.
		if task.Hops+1 <= s.cfg.MaxRedirects {
			batch := &crawlmsg.DiscoveredBatch{Source: task.URL, URLs: []crawlmsg.Discovered{{
				URL: resp.Location, Depth: task.Depth, Via: crawlmsg.ViaRedirect, Hops: task.Hops + 1,
				// A moved stylesheet is still a requisite; a moved sitemap still a sitemap.
				Kind: task.Kind, Embeds: task.Embeds, Under: task.Under,
			}}}
			data, err := crawlmsg.Marshal(batch)
			if err != nil {
				return nil, nil, natsx.Permanent(fmt.Errorf("encode redirect of %s: %w", task.URL, err))
			}
			res.redirect = natsx.NewMsg(topology.SubjectDiscovered, topology.RedirectID(task.Lease), data)
		}
	}
	out.Kind, out.Requested = crawlmsg.OutcomeFetched, true
	if resp.RemoteIP != "" {
		out.Addr = resp.RemoteIP
	}
	out.Status = resp.Status
	out.StartedAt = resp.StartedAt.UnixMilli()
	out.DurationMs = resp.Duration.Milliseconds()
	out.Bytes = int64(len(resp.Body))
	out.RetryAfter = retryAfter(resp, started)
	return out, res, nil
}

// failing says an outcome of this kind can end its URL failed without a page stored.
func failing(k crawlmsg.OutcomeKind) bool {
	switch k {
	case crawlmsg.OutcomeError, crawlmsg.OutcomeBlocked, crawlmsg.OutcomeRobotsUnavailable, crawlmsg.OutcomeTooLarge:
		return true
	}
	return false
}

// validators make a recrawl's request conditional: a page unchanged since its last fetch
// then costs a 304 and no body.
func validators(task *crawlmsg.FetchTask) fetch.Validators {
	if task.Recrawl == nil {
		return fetch.Validators{}
	}
	return fetch.Validators{ETag: task.Recrawl.ETag, LastModified: task.Recrawl.LastModified}
}

// retryAfter is the Retry-After of a 429 or 503 in seconds, or 0.
func retryAfter(resp *fetch.Response, now time.Time) float64 {
	if resp.Status != http.StatusTooManyRequests && resp.Status != http.StatusServiceUnavailable {
		return 0
	}
	d, ok := fetch.RetryAfter(resp.Header, now)
	if !ok {
		return 0
	}
	return d.Seconds()
}
