package service

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/trawl/trawl/services/fetcher/internal/fetch"
	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/natsx"
	"github.com/trawl/trawl/shared/robots"
	"github.com/trawl/trawl/shared/topology"
)

const (
	// deadlineSlack is added to the fetch timeout when deciding whether a task can still be
	// served: the request must end, and its outcome be published, before the lease does.
	deadlineSlack = 2 * time.Second
	// publishTimeout bounds waiting for JetStream to store a task's messages.
	publishTimeout = 5 * time.Second
	// robotsMaxHops is RFC 9309 §2.3.1.2's "at least five consecutive redirects".
	robotsMaxHops = 5
)

// handle serves one fetch task. A nil result acks it; a permanent error terminates it; any
// other error naks it for a later retry.
func (s *Service) handle(ctx context.Context, msg jetstream.Msg) error {
	var task crawlmsg.FetchTask
	if err := crawlmsg.Unmarshal(msg.Data(), &task); err != nil {
		return err // ErrMalformed / ErrVersion: permanent, terminated by natsx
	}
	s.m.inflight.Inc()
	defer s.m.inflight.Dec()

	// A task in hand is finished on shutdown: its request is owed to the host's politeness
	// accounting and its lease blocks the host until then. Bound it by its own budget
	// rather than by the consume loop's drain.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.taskBudget())
	defer cancel()

	out, extra, err := s.process(ctx, &task)
	if err != nil {
		return err
	}
	data, err := crawlmsg.Marshal(out)
	if err != nil {
		return natsx.Permanent(fmt.Errorf("encode outcome: %w", err))
	}
	msgs := append(extra, natsx.NewMsg(topology.FetchedSubject(task.Shard), "out:"+task.Lease, data))
	if err := s.publishResults(&task, msgs); err != nil {
		// Never nak a task whose request was made: a redelivery would request the page
		// again at once, inside the host's delay. Drop it instead; its lease expires and
		// the scheduler re-queues the URL after the host's delay (a duplicate fetch the
		// design allows).
		s.m.publishFailures.Inc()
		s.log.Error("results not published before the lease deadline; the lease will expire and the URL be retried", "url", task.URL, "err", err)
		return nil
	}
	s.m.outcomes.WithLabelValues(string(out.Kind)).Inc()
	s.log.Debug("task done", "url", task.URL, "kind", out.Kind, "status", out.Status, "ms", out.DurationMs)
	return nil
}

// publishResults stores a task's messages, retrying through a NATS outage until the
// task's lease deadline: the Nats-Msg-Ids make every retry harmless.
func (s *Service) publishResults(task *crawlmsg.FetchTask, msgs []*nats.Msg) error {
	deadline := time.UnixMilli(task.Deadline)
	if floor := s.now().Add(publishTimeout); deadline.Before(floor) {
		deadline = floor
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	backoff := 100 * time.Millisecond
	for {
		pctx, pcancel := context.WithTimeout(ctx, publishTimeout)
		err := natsx.PublishBatch(pctx, s.js, msgs)
		pcancel()
		if err == nil {
			return nil
		}
		s.log.Warn("publish failed; retrying", "url", task.URL, "err", err)
		select {
		case <-ctx.Done():
			return err
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

// taskBudget bounds one task: a robots lookup, one request and publishing.
func (s *Service) taskBudget() time.Duration {
	return s.cfg.FetchTimeout + publishTimeout + deadlineSlack
}

// process decides the task and makes its request, if any. It returns the outcome and the
// messages to publish before it; an error means the task must be retried.
func (s *Service) process(ctx context.Context, task *crawlmsg.FetchTask) (*crawlmsg.Outcome, []*nats.Msg, error) {
	out := &crawlmsg.Outcome{Shard: task.Shard, Host: task.Host, URL: task.URL, Lease: task.Lease, Attempt: task.Attempt}

	// After the deadline the scheduler may give the host to another fetcher, so a request
	// that could still be running then must not start.
	if s.now().Add(s.cfg.FetchTimeout + deadlineSlack).After(time.UnixMilli(task.Deadline)) {
		s.m.expired.Inc()
		out.Kind = crawlmsg.OutcomeExpired
		return out, nil, nil
	}
	u, err := url.Parse(task.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		s.m.blocked.Inc()
		out.Kind, out.Permanent = crawlmsg.OutcomeBlocked, true
		out.Error = fmt.Sprintf("unfetchable URL %q", task.URL)
		return out, nil, nil
	}
	origin := u.Scheme + "://" + u.Host

	entry, err := s.robots.Get(ctx, origin)
	if err != nil {
		// Redis failed: make the gate ping again before the next pull, so an outage pauses
		// consumption at once instead of spending deliveries on naks.
		s.gateOK.Store(0)
		return nil, nil, err
	}
	if entry == nil {
		s.m.robotsDecisions.WithLabelValues("miss").Inc()
		out, err := s.fetchRobots(ctx, out, origin)
		return out, nil, err
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
	return s.fetchPage(ctx, task, out)
}

// fetchRobots makes the task's one request robots.txt: the result is cached for every
// fetcher, and the outcome sends the URL back to wait the host's delay, so robots.txt is
// fetched under the same politeness as a page.
func (s *Service) fetchRobots(ctx context.Context, out *crawlmsg.Outcome, origin string) (*crawlmsg.Outcome, error) {
	started := s.now()
	limit := s.cfg.RobotsMaxBytes
	// One octet over the limit tells robots.Parse the file went on, so it drops a cut line.
	resp, err := s.client.GetFollow(ctx, origin+"/robots.txt", robotsMaxHops, limit+1)
	elapsed := s.now().Sub(started)

	var entry *robots.Entry
	switch {
	case err != nil && ctx.Err() != nil:
		return nil, fmt.Errorf("fetcher: robots.txt of %s: %w", origin, err)
	case err != nil && fetch.IsBlocked(err) && !isRedirectErr(err):
		// The origin itself is not a public address: nothing was requested.
		s.m.robotsFetches.WithLabelValues("blocked").Inc()
		s.m.blocked.Inc()
		out.Kind, out.Error, out.Permanent = crawlmsg.OutcomeBlocked, err.Error(), true
		return out, nil
	case err != nil:
		entry = robots.UnreachableEntry(s.cfg.RobotsAgent, err, started)
		out.Error, out.Permanent = err.Error(), fetch.IsPermanent(err)
	default:
		s.m.bytes.Add(float64(resp.WireBytes))
		entry = robots.NewEntry(s.cfg.RobotsAgent, resp.Status, resp.Body, int(limit), started)
		out.Status = resp.Status
		out.RetryAfter = retryAfter(resp, started)
	}
	s.m.robotsFetches.WithLabelValues(entry.Class.String()).Inc()
	if err := s.robots.Put(ctx, origin, entry); err != nil {
		// The request was made, so the outcome is still owed to the scheduler; the next
		// task for the origin simply fetches robots.txt again.
		s.log.Warn("robots cache write failed", "origin", origin, "err", err)
	}
	out.Requested = true
	out.StartedAt = started.UnixMilli()
	out.DurationMs = elapsed.Milliseconds()
	out.CrawlDelay = entry.CrawlDelay().Seconds()
	out.Kind = crawlmsg.OutcomeRobots
	if entry.Class == robots.Unreachable {
		out.Kind = crawlmsg.OutcomeRobotsUnavailable
	}
	s.log.Debug("robots.txt fetched", "origin", origin, "class", entry.Class, "status", out.Status, "err", out.Error)
	return out, nil
}

func isRedirectErr(err error) bool {
	var re *fetch.RedirectError
	return errors.As(err, &re)
}

// fetchPage requests the page and builds the page message and, for a redirect, the
// discovered target.
func (s *Service) fetchPage(ctx context.Context, task *crawlmsg.FetchTask, out *crawlmsg.Outcome) (*crawlmsg.Outcome, []*nats.Msg, error) {
	started := s.now()
	resp, err := s.client.Get(ctx, task.URL)
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

	page := &crawlmsg.Page{
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
		},
		Body: resp.Body,
	}
	pm, err := crawlmsg.PageMsg(topology.SubjectPages, page)
	if err != nil {
		return nil, nil, natsx.Permanent(fmt.Errorf("encode page %s: %w", task.URL, err))
	}
	pm.Header.Set(nats.MsgIdHdr, "page:"+task.Lease)
	msgs := []*nats.Msg{pm}

	if resp.Location != "" {
		out.Location = resp.Location
		// The target is crawled like any discovered URL (deduplicated, scheduled politely),
		// at the same depth: a redirect is not a link hop. Hops caps the chain.
		if task.Hops+1 <= s.cfg.MaxRedirects {
			batch := &crawlmsg.DiscoveredBatch{Source: task.URL, URLs: []crawlmsg.Discovered{{
				URL: resp.Location, Depth: task.Depth, Via: crawlmsg.ViaRedirect, Hops: task.Hops + 1,
			}}}
			data, err := crawlmsg.Marshal(batch)
			if err != nil {
				return nil, nil, natsx.Permanent(fmt.Errorf("encode redirect of %s: %w", task.URL, err))
			}
			msgs = append(msgs, natsx.NewMsg(topology.SubjectDiscovered, "redir:"+task.Lease, data))
		}
	}
	out.Kind, out.Requested = crawlmsg.OutcomeFetched, true
	out.Status = resp.Status
	out.StartedAt = resp.StartedAt.UnixMilli()
	out.DurationMs = resp.Duration.Milliseconds()
	out.Bytes = int64(len(resp.Body))
	out.RetryAfter = retryAfter(resp, started)
	return out, msgs, nil
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
