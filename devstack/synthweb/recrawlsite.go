package synthweb

import (
	"context"
	"fmt"
	"html"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Paths of a RecrawlSite. The home page links to all of them.
const (
	// RecrawlChanging gets a new text every RecrawlConfig.Change, and sends no validators.
	RecrawlChanging = "/changing"
	// RecrawlStatic never changes and sends no validators: only its digest tells.
	RecrawlStatic = "/static"
	// RecrawlETag never changes; it sends an ETag and answers a matching If-None-Match 304.
	RecrawlETag = "/etag"
	// RecrawlLastModified never changes; it sends Last-Modified and answers an
	// If-Modified-Since at or after it 304.
	RecrawlLastModified = "/lastmod"
	// RecrawlIgnores sends an ETag but ignores If-None-Match, and its text carries a stamp
	// of the second it was served: the same page but for one word.
	RecrawlIgnores = "/ignores"
	// RecrawlSitemap is the sitemap robots.txt names; it lists RecrawlListed alone.
	RecrawlSitemap = "/sitemap.xml"
	// RecrawlListed is a page no page links to: only the sitemap finds it.
	RecrawlListed = "/listed"
)

// RecrawlPaths are the site's pages, home first.
var RecrawlPaths = []string{"/", RecrawlChanging, RecrawlStatic, RecrawlETag, RecrawlLastModified, RecrawlIgnores}

// RecrawlConfig shapes a RecrawlSite.
type RecrawlConfig struct {
	Addr   string        // loopback address to serve on (default 127.0.9.1)
	Change time.Duration // how often RecrawlChanging changes (default 2s)
}

// RecrawlRequest is one logged request of a RecrawlSite, with the validators it sent.
type RecrawlRequest struct {
	Request
	IfNoneMatch, IfModifiedSince string
}

// RecrawlSite is one host whose pages change, or answer validators, on a known schedule,
// for testing a crawler that fetches pages again. Like Web it logs every request from the
// server's side.
type RecrawlSite struct {
	siteServer
	cfg     RecrawlConfig
	started time.Time

	mu  sync.Mutex
	log []RecrawlRequest
}

// recrawlModified is the Last-Modified of the site's unchanging pages.
var recrawlModified = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// StartRecrawlSite serves the site until Close.
func StartRecrawlSite(ctx context.Context, cfg RecrawlConfig) (*RecrawlSite, error) {
	if cfg.Addr == "" {
		cfg.Addr = "127.0.9.1"
	}
	if cfg.Change <= 0 {
		cfg.Change = 2 * time.Second
	}
	s := &RecrawlSite{cfg: cfg, started: time.Now()}
	if err := s.serveSite(ctx, cfg.Addr, "recrawl site", s.handle); err != nil {
		return nil, err
	}
	return s, nil
}

// Close stops the site; Requests is final afterwards.
func (s *RecrawlSite) Close() error { return s.closeSite() }

// Origin is "http://<addr>:<port>".
func (s *RecrawlSite) Origin() string { return s.origin }

// Host is the site's host as the crawler names it (its address).
func (s *RecrawlSite) Host() string { return s.cfg.Addr }

// Seeds are the URLs to start a crawl of the site from.
func (s *RecrawlSite) Seeds() []string { return []string{s.origin + "/"} }

// Version is the version of RecrawlChanging served at t (0 from the start).
func (s *RecrawlSite) Version(t time.Time) int { return int(t.Sub(s.started) / s.cfg.Change) }

// Requests returns the requests so far, in arrival order.
func (s *RecrawlSite) Requests() []RecrawlRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]RecrawlRequest(nil), s.log...)
}

func (s *RecrawlSite) handle(rw http.ResponseWriter, r *http.Request) {
	start := time.Now()
	status, body := s.serve(rw, r, start)
	rw.WriteHeader(status)
	written := 0
	if len(body) > 1 {
		n, _ := rw.Write(body[:len(body)-1])
		written += n
	}
	end := time.Now() // as Web.handle: before the last byte, so no client has it all yet
	if len(body) > 0 {
		n, _ := rw.Write(body[len(body)-1:])
		written += n
	}
	req := RecrawlRequest{
		Request:     Request{Host: s.cfg.Addr, Addr: s.cfg.Addr, Path: r.URL.RequestURI(), Start: start, End: end, Status: status, Bytes: written},
		IfNoneMatch: r.Header.Get("If-None-Match"), IfModifiedSince: r.Header.Get("If-Modified-Since"),
	}
	s.mu.Lock()
	s.log = append(s.log, req)
	s.mu.Unlock()
}

func (s *RecrawlSite) serve(rw http.ResponseWriter, r *http.Request, now time.Time) (int, []byte) {
	h := rw.Header()
	page := func(title string, words string, links ...string) (int, []byte) {
		var b strings.Builder
		fmt.Fprintf(&b, "<!doctype html><html><head><title>%s</title></head><body><h1>%s</h1><p>%s</p>", html.EscapeString(title), html.EscapeString(title), html.EscapeString(words))
		for _, l := range links {
			fmt.Fprintf(&b, `<a href="%s">%s</a> `, l, l)
		}
		b.WriteString("</body></html>\n")
		h.Set("Content-Type", htmlType)
		h.Set("Content-Length", strconv.Itoa(b.Len()))
		return http.StatusOK, []byte(b.String())
	}
	switch r.URL.RequestURI() {
	case "/robots.txt":
		h.Set("Content-Type", textType)
		return http.StatusOK, []byte("User-agent: *\nAllow: /\nSitemap: " + s.origin + RecrawlSitemap + "\n")
	case RecrawlSitemap:
		h.Set("Content-Type", "application/xml")
		return http.StatusOK, []byte(`<?xml version="1.0" encoding="UTF-8"?>
<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"><url><loc>` + s.origin + RecrawlListed +
			`</loc><lastmod>2026-01-02</lastmod><priority>0.8</priority></url></urlset>
`)
	case RecrawlListed:
		return page("listed in the sitemap only", recrawlWords("listed", 200))
	case "/":
		return page("recrawl home", recrawlWords("home", 120), RecrawlPaths[1:]...)
	case RecrawlChanging:
		v := s.Version(now)
		return page("changing, version "+strconv.Itoa(v), recrawlWords("version"+strconv.Itoa(v), 200))
	case RecrawlStatic:
		return page("static", recrawlWords("static", 200))
	case RecrawlETag:
		const etag = `"etag-1"`
		h.Set("ETag", etag)
		if r.Header.Get("If-None-Match") == etag {
			return http.StatusNotModified, nil
		}
		return page("etag", recrawlWords("etag", 200))
	case RecrawlLastModified:
		h.Set("Last-Modified", recrawlModified.Format(http.TimeFormat))
		if t, err := http.ParseTime(r.Header.Get("If-Modified-Since")); err == nil && !t.Before(recrawlModified) {
			return http.StatusNotModified, nil
		}
		return page("last modified", recrawlWords("lastmod", 200))
	case RecrawlIgnores:
		h.Set("ETag", `"ignored-`+strconv.FormatInt(now.Unix(), 10)+`"`)
		return page("ignores validators", recrawlWords("ignores", 800)+" served "+strconv.FormatInt(now.Unix(), 10))
	}
	h.Set("Content-Type", textType)
	return http.StatusNotFound, []byte("not found\n")
}

// recrawlWords is n (at most 1000) distinct words of a text named key: two keys give texts
// that share no word, so their SimHashes are far apart, while in 800 words a one-word stamp
// moves the SimHash by a bit or two, within the parser's default distance of 3.
func recrawlWords(key string, n int) string {
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%sx%d", key, i*7919%1000)
	}
	return b.String()
}
