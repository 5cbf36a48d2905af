package service

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/trawl/trawl/services/fetcher/internal/fetch"
	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/policy"
	"github.com/trawl/trawl/shared/polite"
)

// fetchPage requests the page (u is task.URL parsed) under reqCtx and builds the page; a
// redirect's target is in its Location, for the parser. pol is task.URL's policy under
// rules, the set read when the task started.
func (s *Service) fetchPage(ctx, reqCtx context.Context, task *crawlmsg.FetchTask, u *url.URL, out *crawlmsg.Outcome, rules *policy.Set, pol policy.Resolved) (*crawlmsg.Outcome, *pageResult, error) {
	// Right before the request, the rules in force now decide: a block set since the task
	// was dispatched, received or started stops it here. A set is immutable, so while the
	// same one is in force the URL's policy is the one read at the start.
	if now := s.policies.Current(); now != rules {
		rules, pol = now, now.URL(task.URL)
	}
	if pol.Blocked() {
		return s.parked(out, parkedPage, rules), nil, nil
	}
	hdr, err := s.requests.Headers(pol, u.Hostname())
	if err != nil {
		return s.secretFailed(out, err), nil, nil
	}
	lease, reqErr, err := s.atServer(reqCtx, task.URL, time.Duration(out.CrawlDelay*float64(time.Second)))
	if err != nil {
		return nil, nil, err
	}
	if lease != nil && !lease.OK {
		return serverBusy(out, lease), nil, nil
	}
	started := s.now()
	var resp *fetch.Response
	switch {
	case reqErr != nil:
		// The dial would have failed the same way.
		err = reqErr
	case lease != nil:
		resp, err = s.client.GetParsed(polite.WithHeaders(lease.Ctx, hdr), task.URL, u, acceptFor(task.Kind), validators(task))
		s.releaseServer(ctx, lease, s.now().Sub(started))
		out.Addr = lease.Addr.String()
	default:
		resp, err = s.client.GetParsed(polite.WithHeaders(reqCtx, hdr), task.URL, u, acceptFor(task.Kind), validators(task))
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
		out.Error, out.Permanent = fetch.Reason(err), fetch.IsPermanent(err)
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

	// The parser follows a redirect from the page's Location: the target travels in the
	// page, so whatever brings the page back after a crash brings it too.
	out.Location = resp.Location
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

// pageResult is what a page request produced besides its outcome: the page.
type pageResult struct {
	page    *crawlmsg.Page // &pageMem
	pageMem crawlmsg.Page
	capture crawlmsg.Capture // page's, in the same allocation
	resp    *fetch.Response  // holds the body's buffer
	// reusable: the body went inline and its page message was acknowledged on the first
	// attempt, so no earlier attempt is left that the client could still resend, and the
	// body's buffer may serve another response.
	reusable bool
	// pageSeq is the page's sequence in CRAWL_PAGES once stored (its outcome carries it).
	pageSeq uint64
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
