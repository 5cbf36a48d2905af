package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/gocolly/colly/v2"

	"github.com/trawl/trawl/devstack/synthweb"
)

// collyCrawl is BenchmarkPipeline's second yardstick: Colly v2, the Go crawler users most
// often compare with, doing the work the bare loop and Trawl do on the same web —
// robots.txt read and obeyed (Colly's own robots support), each URL once, nofollow
// honoured, <base> followed, at most one request in flight per host (robots.txt
// included) — in one process with no durability. Colly's LimitRule bounds the requests of
// all the hosts a rule matches together, not each host's, and its robots.txt request
// bypasses the rules, so the per-host bound is a transport that takes a host's turn
// around every request.
func collyCrawl(ctx context.Context, seeds []string, maxDepth int) error {
	c := colly.NewCollector(
		colly.Async(true),
		colly.StdlibContext(ctx),
		// Colly counts a seed as depth 1; the web's depths count it as 0.
		colly.MaxDepth(maxDepth+1),
		colly.UserAgent(synthweb.ProductToken),
	)
	c.IgnoreRobotsTxt = false
	// Colly's timeout covers a request's wait for its host's turn too, which on a wide web
	// with every page's links in flight at once outlasts the bare loop's 10 s.
	c.SetRequestTimeout(2 * time.Minute)
	c.SetRedirectHandler(func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse })
	c.WithTransport(&onePerHost{next: &http.Transport{
		MaxIdleConns:        0, // no overall cap: one kept-alive connection per host
		MaxIdleConnsPerHost: 1,
		IdleConnTimeout:     30 * time.Second,
	}})
	var mu sync.Mutex
	var failures []string
	c.OnError(func(r *colly.Response, err error) {
		mu.Lock()
		defer mu.Unlock()
		if len(failures) < 5 {
			failures = append(failures, fmt.Sprintf("%s: %v", r.Request.URL, err))
		}
	})
	// Colly keys its visited set by the URL as written, and tests and sets it in two steps,
	// so another spelling of a URL, or two pages linking it at once, fetch it again; the
	// other crawlers' seen tests take the resolved URL once, and so does this one.
	var seen sync.Map
	c.OnHTML("a[href]", func(e *colly.HTMLElement) {
		if strings.Contains(strings.ToLower(e.Attr("rel")), "nofollow") {
			return
		}
		u, err := url.Parse(e.Request.AbsoluteURL(e.Attr("href")))
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") {
			return
		}
		u.Fragment, u.RawFragment = "", ""
		if _, dup := seen.LoadOrStore(u.String(), true); dup {
			return
		}
		// Visit's own errors (too deep, disallowed by robots.txt) are Colly's filters at
		// work, not failures.
		_ = e.Request.Visit(u.String())
	})
	for _, s := range seeds {
		seen.Store(s, true)
	}
	for _, s := range seeds {
		// A seed may already have come in as a link of an earlier seed's page.
		var visited *colly.AlreadyVisitedError
		if err := c.Visit(s); err != nil && !errors.As(err, &visited) {
			return fmt.Errorf("colly: seed %s: %w", s, err)
		}
	}
	c.Wait()
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("colly: %w", err)
	}
	if len(failures) > 0 {
		return fmt.Errorf("colly: requests failed: %s", strings.Join(failures, "; "))
	}
	return nil
}

// onePerHost lets one request per host through at a time. It also answers a host's
// robots.txt from its first response: Colly's robots.txt check, like its visited set,
// tests and fills its cache in two steps, so pages of one host found at once fetch it
// again each.
type onePerHost struct {
	next   http.RoundTripper
	mu     sync.Mutex
	turns  map[string]chan struct{}
	robots map[string]*robotsOnce
}

type robotsOnce struct {
	once   sync.Once
	status int
	header http.Header
	body   []byte
	err    error
}

func (t *onePerHost) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Path != "/robots.txt" {
		return t.roundTrip(req)
	}
	t.mu.Lock()
	if t.robots == nil {
		t.robots = map[string]*robotsOnce{}
	}
	r := t.robots[req.URL.Host]
	if r == nil {
		r = &robotsOnce{}
		t.robots[req.URL.Host] = r
	}
	t.mu.Unlock()
	r.once.Do(func() {
		resp, err := t.roundTrip(req)
		if err != nil {
			r.err = err
			return
		}
		defer resp.Body.Close()
		r.status, r.header = resp.StatusCode, resp.Header
		r.body, r.err = io.ReadAll(io.LimitReader(resp.Body, 500<<10))
	})
	if r.err != nil {
		return nil, r.err
	}
	return &http.Response{StatusCode: r.status, Header: r.header, Body: io.NopCloser(bytes.NewReader(r.body)), Request: req,
		ContentLength: int64(len(r.body)), Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1}, nil
}

func (t *onePerHost) roundTrip(req *http.Request) (*http.Response, error) {
	t.mu.Lock()
	if t.turns == nil {
		t.turns = map[string]chan struct{}{}
	}
	turn := t.turns[req.URL.Host]
	if turn == nil {
		turn = make(chan struct{}, 1)
		t.turns[req.URL.Host] = turn
	}
	t.mu.Unlock()
	select {
	case turn <- struct{}{}:
	case <-req.Context().Done():
		return nil, req.Context().Err()
	}
	resp, err := t.next.RoundTrip(req)
	if err != nil {
		<-turn
		return nil, err
	}
	// The turn ends when the body is read and closed, as the request's does in the log.
	resp.Body = &turnBody{ReadCloser: resp.Body, done: func() { <-turn }}
	return resp, nil
}

type turnBody struct {
	io.ReadCloser
	once sync.Once
	done func()
}

func (b *turnBody) Close() error {
	err := b.ReadCloser.Close()
	b.once.Do(b.done)
	return err
}
