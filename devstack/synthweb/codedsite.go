package synthweb

import (
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"context"
	"encoding/base64"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// CodedPage is one page of a CodedSite: its body as sent on the wire is about Size
// octets, with the content coding Coding ("gzip", "deflate" or "" for none), chunked or
// with a Content-Length.
type CodedPage struct {
	Path    string
	Coding  string
	Chunked bool
	Size    int
}

// CodedPages are the pages an archive of compressed responses is tested on: gzip bodies
// from below to far above what a 64 KiB NATS header could hold, gzip sent chunked as
// nginx sends it, an identity body sent chunked, and a deflate body, which the crawler
// does not ask for (its Accept-Encoding is gzip) and a server may send regardless.
func CodedPages() []CodedPage {
	return []CodedPage{
		{Path: "/gzip-50k", Coding: "gzip", Size: 50_000},
		{Path: "/gzip-300k", Coding: "gzip", Size: 300_000},
		{Path: "/gzip-5m", Coding: "gzip", Size: 5_000_000},
		{Path: "/gzip-20m", Coding: "gzip", Size: 20_000_000},
		{Path: "/gzip-chunked-300k", Coding: "gzip", Chunked: true, Size: 300_000},
		{Path: "/gzip-chunked-5m", Coding: "gzip", Chunked: true, Size: 5_000_000},
		{Path: "/identity-chunked-300k", Chunked: true, Size: 300_000},
		{Path: "/deflate-300k", Coding: "deflate", Size: 300_000},
	}
}

// CodedSite is one host serving CodedPages, linked from its home page, each page's
// octets fixed at start so a test can compare an archive with them. Like Web it logs
// every request from the server's side.
type CodedSite struct {
	siteServer
	addr  string
	pages map[string]codedPage
	order []string

	mu  sync.Mutex
	log []Request
}

type codedPage struct {
	CodedPage
	wire    []byte // the body as sent (content coding applied, no transfer coding)
	decoded int    // its length decoded
}

// StartCodedSite serves pages on addr (a loopback address; "" is 127.0.9.2) until
// Close.
func StartCodedSite(ctx context.Context, addr string, pages []CodedPage) (*CodedSite, error) {
	if addr == "" {
		addr = "127.0.9.2"
	}
	s := &CodedSite{addr: addr, pages: map[string]codedPage{}}
	for i, p := range pages {
		cp, err := buildCoded(p, uint64(i))
		if err != nil {
			return nil, err
		}
		s.pages[p.Path] = cp
		s.order = append(s.order, p.Path)
	}
	if err := s.serveSite(ctx, addr, "coded site", s.handle); err != nil {
		return nil, err
	}
	return s, nil
}

// buildCoded makes a page whose coded body is about p.Size octets: HTML around random
// octets in base64, which gzip and deflate bring back to about their own size.
func buildCoded(p CodedPage, seed uint64) (codedPage, error) {
	noise := make([]byte, p.Size)
	r := rand.NewChaCha8([32]byte{byte(seed), 't', 'r', 'a', 'w', 'l'})
	_, _ = r.Read(noise)
	var b bytes.Buffer
	fmt.Fprintf(&b, "<!doctype html><html><head><title>%s</title></head><body><p>", p.Path)
	enc := base64.NewEncoder(base64.StdEncoding, &b)
	_, _ = enc.Write(noise)
	_ = enc.Close()
	b.WriteString("</p></body></html>\n")
	decoded := b.Bytes()
	var w bytes.Buffer
	switch p.Coding {
	case "":
		return codedPage{CodedPage: p, wire: decoded, decoded: len(decoded)}, nil
	case "gzip":
		zw := gzip.NewWriter(&w)
		_, _ = zw.Write(decoded)
		_ = zw.Close()
	case "deflate":
		zw := zlib.NewWriter(&w) // HTTP's "deflate" is the zlib format (RFC 9110 §8.4.1.2)
		_, _ = zw.Write(decoded)
		_ = zw.Close()
	default:
		return codedPage{}, fmt.Errorf("synthweb: coded site: coding %q not served", p.Coding)
	}
	return codedPage{CodedPage: p, wire: w.Bytes(), decoded: len(decoded)}, nil
}

// Close stops the site; Requests is final afterwards.
func (s *CodedSite) Close() error { return s.closeSite() }

// Origin is "http://<addr>:<port>".
func (s *CodedSite) Origin() string { return s.origin }

// Seeds are the URLs to start a crawl of the site from.
func (s *CodedSite) Seeds() []string { return []string{s.origin + "/"} }

// Paths are the pages' paths, in the order given.
func (s *CodedSite) Paths() []string { return append([]string(nil), s.order...) }

// Page is the page at path as configured.
func (s *CodedSite) Page(path string) CodedPage { return s.pages[path].CodedPage }

// Wire is the body of the page at path as sent: content coding applied, no transfer
// coding. Nil for a path the site does not serve.
func (s *CodedSite) Wire(path string) []byte { return s.pages[path].wire }

// DecodedSize is the length of the page at path with its content coding removed.
func (s *CodedSite) DecodedSize(path string) int { return s.pages[path].decoded }

// Requests returns the requests so far, in arrival order.
func (s *CodedSite) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.log...)
}

func (s *CodedSite) handle(rw http.ResponseWriter, r *http.Request) {
	start := time.Now()
	status, written := s.serve(rw, r)
	s.mu.Lock()
	s.log = append(s.log, Request{Host: s.addr, Addr: s.addr, Path: r.URL.RequestURI(), Start: start, End: time.Now(), Status: status, Bytes: written})
	s.mu.Unlock()
}

func (s *CodedSite) serve(rw http.ResponseWriter, r *http.Request) (status, written int) {
	h := rw.Header()
	send := func(body []byte, chunked bool) (int, int) {
		if !chunked {
			h.Set("Content-Length", strconv.Itoa(len(body)))
			rw.WriteHeader(http.StatusOK)
			n, _ := rw.Write(body)
			return http.StatusOK, n
		}
		// No Content-Length and a flush per piece: net/http sends it chunked.
		rw.WriteHeader(http.StatusOK)
		for len(body) > 0 {
			k, _ := rw.Write(body[:min(len(body), 32<<10)])
			rw.(http.Flusher).Flush()
			written += k
			body = body[min(len(body), 32<<10):]
		}
		return http.StatusOK, written
	}
	switch path := r.URL.RequestURI(); path {
	case "/robots.txt":
		h.Set("Content-Type", textType)
		return send([]byte("User-agent: *\nAllow: /\n"), false)
	case "/":
		var b strings.Builder
		b.WriteString("<!doctype html><html><head><title>coded pages</title></head><body>")
		for _, p := range s.order {
			fmt.Fprintf(&b, `<a href="%s">%s</a> `, p, p)
		}
		b.WriteString("</body></html>\n")
		h.Set("Content-Type", htmlType)
		return send([]byte(b.String()), false)
	default:
		p, ok := s.pages[path]
		if !ok {
			h.Set("Content-Type", textType)
			rw.WriteHeader(http.StatusNotFound)
			n, _ := rw.Write([]byte("not found\n"))
			return http.StatusNotFound, n
		}
		h.Set("Content-Type", htmlType)
		if p.Coding != "" {
			h.Set("Content-Encoding", p.Coding)
			h.Set("Vary", "Accept-Encoding")
		}
		return send(p.wire, p.Chunked)
	}
}
