// Package robotscheck answers "may the crawler fetch these URLs?" for a robots.txt given
// as a file, as a file with an HTTP status, or as a URL to fetch, with shared/robots: the
// same parser, status handling (RFC 9309 §2.3.1) and matcher the fetchers use.
package robotscheck

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/trawl/trawl/shared/robots"
	"github.com/trawl/trawl/shared/urlnorm"
)

// MaxHops is how many redirects a robots.txt fetch follows, as the fetcher does
// (RFC 9309 §2.3.1.2: at least five).
const MaxHops = 5

// FromBody is the entry for a robots.txt body served with status (200 for a plain file).
func FromBody(agent string, status int, body []byte) *robots.Entry {
	return robots.NewEntry(agent, status, body, robots.DefaultMaxBytes, time.Now())
}

// Fetcher gets robots.txt files over HTTP.
type Fetcher struct {
	Client    *http.Client // default: a client with Timeout
	Timeout   time.Duration
	UserAgent string
}

// Fetch gets robotsURL, following up to MaxHops redirects, and returns the entry the
// fetcher would cache: the final status decides (a 3xx left after MaxHops is
// "unavailable"), and no response at all is "unreachable" (disallow all). The error is
// only for a robotsURL that cannot be requested.
func (f *Fetcher) Fetch(ctx context.Context, agent, robotsURL string) (*robots.Entry, error) {
	u, err := url.Parse(robotsURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("robots.txt URL %q: want an absolute http(s) URL", robotsURL)
	}
	timeout := f.Timeout
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	c := f.Client
	if c == nil {
		c = &http.Client{}
	}
	cc := *c
	cc.Timeout = timeout
	cc.CheckRedirect = func(req *http.Request, via []*http.Request) error {
		if len(via) > MaxHops {
			// The fetcher stops here too and classifies the 3xx it is left with.
			return http.ErrUseLastResponse
		}
		return nil
	}
	started := time.Now()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, fmt.Errorf("robots.txt URL %q: %w", robotsURL, err)
	}
	req.Header.Set("Accept", "text/plain,*/*;q=0.5")
	if f.UserAgent != "" {
		req.Header.Set("User-Agent", f.UserAgent)
	}
	resp, err := cc.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return robots.UnreachableEntry(agent, err, started), nil
	}
	defer resp.Body.Close()
	// One octet over the limit lets the parser see that a cut line was cut.
	body, err := io.ReadAll(io.LimitReader(resp.Body, robots.DefaultMaxBytes+1))
	if err != nil {
		// A body that breaks off is no answer: the fetcher treats it as unreachable.
		return robots.UnreachableEntry(agent, err, started), nil
	}
	return robots.NewEntry(agent, resp.StatusCode, body, robots.DefaultMaxBytes, started), nil
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
