// Package robotscheck answers "may the crawler fetch these URLs?" for a robots.txt given
// as a file, as a file with an HTTP status, or as a URL to fetch, with shared/robots: the
// same parser, status handling (RFC 9309 §2.3.1) and matcher the fetchers use, and for a
// URL the fetchers' address policy, request, redirect rule and limit (Fetcher).
package robotscheck

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"net/url"
	"time"

	"github.com/trawl/trawl/shared/contentcoding"
	"github.com/trawl/trawl/shared/polite"
	"github.com/trawl/trawl/shared/robots"
	"github.com/trawl/trawl/shared/safedial"
	"github.com/trawl/trawl/shared/urlnorm"
)

// FromBody is the entry for a robots.txt body served with status (200 for a plain file),
// maxBytes of it parsed (TRAWL_ROBOTS_MAX_BYTES; 0: robots.DefaultMaxBytes).
func FromBody(agent string, status int, body []byte, maxBytes int64) *robots.Entry {
	return robots.NewEntry(agent, status, body, int(limit(maxBytes)), time.Now())
}

func limit(maxBytes int64) int64 {
	if maxBytes <= 0 {
		return robots.DefaultMaxBytes
	}
	return maxBytes
}

// Fetcher gets robots.txt files over HTTP as a fetcher does: every connection through
// the fetchers' address policy (shared/safedial), the request as every process makes it
// (polite.RobotsHeader), the chain walked by polite.WalkRobots, as the renderers walk it, and
// MaxBytes of the content, decoded by the fetchers' decoder, parsed.
type Fetcher struct {
	Timeout   time.Duration // each request's; default 30s
	UserAgent string
	// Allow is TRAWL_ALLOW_CIDRS: the ranges the address policy lets through beside the
	// public addresses.
	Allow []netip.Prefix
	// MaxBytes is TRAWL_ROBOTS_MAX_BYTES; 0: robots.DefaultMaxBytes.
	MaxBytes int64
}

// Fetch gets robotsURL and returns the entry the fetcher would cache: the final status
// decides (a 3xx left after polite.RobotsMaxHops is "unavailable"), and no response at
// all, a redirect to an address the policy refuses among them, is "unreachable"
// (disallow all). The error is for a robotsURL that cannot be requested: not an absolute
// http(s) URL, or one whose own address the policy refuses (the fetcher requests nothing
// there and ends its URLs blocked).
func (f *Fetcher) Fetch(ctx context.Context, agent, robotsURL string) (*robots.Entry, error) {
	u, err := url.Parse(robotsURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("robots.txt URL %q: want an absolute http(s) URL", robotsURL)
	}
	timeout := f.Timeout
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	dialer := &safedial.Dialer{Policy: safedial.NewPolicy(f.Allow...), Timeout: timeout}
	tr := &http.Transport{
		Proxy:               http.ProxyFromEnvironment,
		DialContext:         dialer.DialContext,
		ForceAttemptHTTP2:   true,
		TLSHandshakeTimeout: min(10*time.Second, timeout),
		// The request asks for gzip itself and decodes under the limit, as the fetchers
		// do; the transport's transparent decoding has no cap.
		DisableCompression: true,
	}
	defer tr.CloseIdleConnections()
	hc := &http.Client{
		Transport: tr,
		Timeout:   timeout,
		// Each hop is a request of its own, as the fetchers make it.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	e, err := polite.WalkRobots(ctx, agent, u.String(), limit(f.MaxBytes), func(ctx context.Context, _ int, u *url.URL, maxBody int64) (polite.RobotsResponse, error) {
		status, loc, body, err := f.get(ctx, hc, u, maxBody)
		return polite.RobotsResponse{Status: status, Location: loc, Body: body}, err
	})
	var blocked *safedial.BlockedError
	switch {
	case err != nil && ctx.Err() != nil:
		return nil, ctx.Err()
	case errors.As(err, &blocked):
		return nil, fmt.Errorf("robots.txt URL %q: %w, as by the fetchers (TRAWL_ALLOW_CIDRS lets a range through)", robotsURL, blocked)
	}
	return e, err
}

// get makes one robots.txt request for u and reads at most maxBody octets of its content.
func (f *Fetcher) get(ctx context.Context, hc *http.Client, u *url.URL, maxBody int64) (status int, location string, body []byte, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return 0, "", nil, err
	}
	polite.RobotsHeader(req.Header)
	if f.UserAgent != "" {
		req.Header.Set("User-Agent", f.UserAgent)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, "", nil, err
	}
	defer resp.Body.Close()
	coding := contentcoding.Header(resp.Header)
	if _, cerr := contentcoding.Codings(coding); cerr != nil {
		// A coding the fetchers cannot decode: they keep the body as received, and so
		// parse it.
		coding = ""
	}
	b, err := contentcoding.Read(resp.Body, coding, maxBody)
	if err != nil {
		// A body that breaks off is no answer: the fetcher treats it as unreachable.
		return 0, "", nil, err
	}
	return resp.StatusCode, resp.Header.Get("Location"), b.Content, nil
}

// Result is the verdict on one URL.
type Result struct {
	URL      string // as given
	Norm     string // urlnorm form, which is what the crawler asks about
	Decision robots.Decision
	Err      error
}

// ErrURL marks a URL that cannot be checked.
var ErrURL = errors.New("invalid URL")

// Check decides every URL under e for e's agent.
func Check(e *robots.Entry, urls []string) []Result {
	out := make([]Result, len(urls))
	for i, raw := range urls {
		r := Result{URL: raw}
		norm, err := urlnorm.Normalize(raw)
		if err != nil {
			r.Err = fmt.Errorf("%w %q: %w", ErrURL, raw, err)
		} else {
			r.Norm = norm
			r.Decision, r.Err = robots.Decide(e, "", norm)
		}
		out[i] = r
	}
	return out
}
