// Package fetch is the fetcher's HTTP client: one GET, bounded in every dimension a server
// controls (connect, TLS, header and total time; header size; body size before and after
// content decoding, shared/contentcoding's), never following redirects on its own, and
// dialling only through the address policy it is given.
package fetch

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/trawl/trawl/shared/contentcoding"
	"github.com/trawl/trawl/shared/errclass"
	"github.com/trawl/trawl/shared/polite"
	"github.com/trawl/trawl/shared/safedial"
)

// Accept headers: pages ask for HTML first, robots.txt for plain text, sitemaps for XML;
// page requisites (images, style sheets, scripts, fonts) take anything, as a browser's
// requests for them do, so that a server choosing by Accept sends the requisite and not
// an HTML page about it.
const (
	AcceptPage    = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"
	AcceptRobots  = polite.AcceptRobots
	AcceptSitemap = "application/xml,text/xml;q=0.9,*/*;q=0.8"
	AcceptAny     = "*/*"
)

// ErrInvalidURL marks a URL that cannot be requested at all (unparseable, not http(s)).
var ErrInvalidURL = errors.New("fetch: invalid URL")

// Config bounds the client. Dial is required: it is where the address policy lives.
type Config struct {
	UserAgent       string
	Timeout         time.Duration // whole request, body included
	TLSTimeout      time.Duration // TLS handshake
	HeaderTimeout   time.Duration // from request written to response headers read
	MaxBody         int64         // body octets kept, after decoding; more sets Truncated
	MaxHeaderBytes  int64         // response header block
	MaxConnsPerHost int
	MaxIdleConns    int // kept-alive connections over all hosts (0: no limit)
	Dial            func(ctx context.Context, network, addr string) (net.Conn, error)
	// Proxy picks a proxy per request (http.ProxyFromEnvironment in production; nil for
	// none). With a proxy, Dial connects to the proxy, so the address policy judges the
	// proxy and not the target.
	Proxy     func(*http.Request) (*url.URL, error)
	TLSConfig *tls.Config // nil: system roots
	// KeepRaw says, per gzip response, whether its octets as received are kept beside the
	// decoded body (Response.Raw); nil keeps them always. The fetcher keeps them only while
	// an archive is written, the one reader of them.
	KeepRaw func() bool
}

// Client issues bounded GETs. It is safe for concurrent use.
type Client struct {
	cfg       Config
	hc        *http.Client
	tr        *http.Transport // hc's
	userAgent []string        // the User-Agent header's value, shared by every request
	types     mediaTypes
}

// New builds a client from cfg.
func New(cfg Config) *Client {
	tr := &http.Transport{
		Proxy: cfg.Proxy,
		// Both dials record each HTTP/1.1 exchange for the archive (capture.go); the TLS
		// one still negotiates HTTP/2, which the transport then speaks on the *tls.Conn.
		DialContext:            recordingDial(cfg.Dial, int(cfg.MaxHeaderBytes)+4<<10),
		DialTLSContext:         recordingTLSDial(cfg),
		ForceAttemptHTTP2:      true,
		TLSClientConfig:        cfg.TLSConfig,
		TLSHandshakeTimeout:    cfg.TLSTimeout,
		ResponseHeaderTimeout:  cfg.HeaderTimeout,
		MaxResponseHeaderBytes: cfg.MaxHeaderBytes,
		MaxConnsPerHost:        cfg.MaxConnsPerHost,
		MaxIdleConns:           cfg.MaxIdleConns,
		MaxIdleConnsPerHost:    max(1, cfg.MaxConnsPerHost),
		IdleConnTimeout:        30 * time.Second,
		ExpectContinueTimeout:  time.Second,
		// The client asks for gzip itself and decodes under its own size cap; the
		// transport's transparent decoding would have no cap on decoded bytes.
		DisableCompression: true,
	}
	return &Client{cfg: cfg, tr: tr, userAgent: []string{cfg.UserAgent}, hc: &http.Client{
		Transport: tr,
		// Redirects are not followed inline: the target is published as a discovered URL
		// so that it is deduplicated and scheduled politely like any other.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}}
}

// CloseIdle closes idle connections (shutdown).
func (c *Client) CloseIdle() { c.hc.CloseIdleConnections() }

// Response is what was received. Body holds at most the cap, decoded.
type Response struct {
	URL       string // the URL requested
	Status    int
	Header    http.Header
	Body      []byte
	Truncated bool  // the body went on past the cap
	WireBytes int64 // body octets read from the network (compressed, if gzip)
	MediaType string
	Charset   string
	Location  string // 3xx: Location resolved against URL and normalised; "" if absent or unusable
	StartedAt time.Time
	Duration  time.Duration // from the request's start to the last body byte read
	Proto     string        // "HTTP/1.1", "HTTP/2.0"

	// What an archive needs beside the decoded body (capture.go).
	RequestHead  []byte // the request line and headers sent, ending in the blank line
	ResponseHead []byte // the status line and headers received, ending in the blank line
	// Verbatim says RequestHead and ResponseHead are the octets on the wire; false when
	// they were rebuilt in HTTP/1.1 form (HTTP/2, or HTTPS through a proxy).
	Verbatim bool
	RemoteIP string // the address the connection went to ("" if unknown)
	// Raw is the body as received, content coding intact and transfer coding removed, when
	// it differs from Body (a gzip body); nil when Body is also the body as received.
	// Truncated applies to it too.
	Raw []byte
	// Decoded says Body is the content decoded (a gzip body), so not the body as received:
	// Raw is that, when it was kept (Config.KeepRaw).
	Decoded bool

	buf *[]byte // Body's pooled backing array, until Release
}

// Body buffers are reused across responses: a page's body is read into a buffer grown for
// an earlier one instead of growing a new one from nothing. A buffer larger than
// maxPooledBody is left to the collector, so one huge page does not stay pinned.
const (
	maxPooledBody = 256 << 10
	// maxPresize bounds the buffer sized up front from Content-Length: a server cannot make
	// the fetcher allocate more than this before it has sent the octets.
	maxPresize = 1 << 20
)

var bodyBufs = sync.Pool{New: func() any { return new([]byte) }}

// Release returns Body's buffer for reuse by a later response. Call it only once nothing
// refers to Body any more (it has been copied or published and acknowledged); Body is
// then nil. Never calling it is harmless.
func (r *Response) Release() {
	if r.buf == nil {
		return
	}
	if cap(r.Body) <= maxPooledBody {
		*r.buf = r.Body[:0]
		bodyBufs.Put(r.buf)
	}
	r.buf, r.Body = nil, nil
}

// Get fetches rawURL once, with the page Accept header and the body cap.
func (c *Client) Get(ctx context.Context, rawURL string) (*Response, error) {
	return c.GetIf(ctx, rawURL, Validators{})
}

// Validators are a URL's ETag and Last-Modified from its last fetch: sent as
// If-None-Match and If-Modified-Since, they let the server answer 304 without a body.
type Validators struct{ ETag, LastModified string }

// GetIf is Get made conditional on v (a field left empty sends no header). A 304 is
// returned as any other response.
func (c *Client) GetIf(ctx context.Context, rawURL string, v Validators) (*Response, error) {
	u, err := parseURL(rawURL)
	if err != nil {
		return nil, err
	}
	return c.GetParsed(ctx, rawURL, u, AcceptPage, v)
}

// GetParsed is GetIf for a URL its caller has parsed already: u is rawURL parsed, with an
// http or https scheme and a host (what GetIf checks). It spares the page path a second
// parse of every URL.
func (c *Client) GetParsed(ctx context.Context, rawURL string, u *url.URL, accept string, v Validators) (*Response, error) {
	ctx, cancel := c.withTimeout(ctx)
	defer cancel()
	return c.do(ctx, rawURL, u, accept, c.cfg.MaxBody, v)
}

// withTimeout bounds ctx by Timeout from now. A caller whose deadline is already that
// close keeps its context: a second timer would change nothing but cost one per request.
func (c *Client) withTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	d := time.Now().Add(c.cfg.Timeout)
	if cur, ok := ctx.Deadline(); ok && !cur.After(d) {
		return ctx, func() {}
	}
	return context.WithDeadline(ctx, d)
}

// RedirectError is a failure on a hop after the first of a robots.txt redirect chain,
// which the caller follows hop by hop with GetRobots: the origin itself answered, so the
// caller may judge it differently from a failure to reach the origin.
type RedirectError struct {
	Hop int // 1 = the first redirect target
	URL string
	Err error
}

func (e *RedirectError) Error() string {
	return fmt.Sprintf("fetch: redirect hop %d to %s: %v", e.Hop, e.URL, e.Err)
}

func (e *RedirectError) Unwrap() error { return e.Err }

// GetRobots fetches one robots.txt URL, asking for text, with the body capped at maxBody.
// A redirect is returned as it is: the caller follows a chain hop by hop, each hop under
// its own host's politeness, so one call is one request.
func (c *Client) GetRobots(ctx context.Context, rawURL string, maxBody int64) (*Response, error) {
	u, err := parseURL(rawURL)
	if err != nil {
		return nil, err
	}
	ctx, cancel := c.withTimeout(ctx)
	defer cancel()
	return c.do(ctx, rawURL, u, AcceptRobots, maxBody, Validators{})
}

func parseURL(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidURL, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("%w: scheme %q", ErrInvalidURL, u.Scheme)
	}
	if u.Host == "" {
		return nil, fmt.Errorf("%w: no host in %q", ErrInvalidURL, raw)
	}
	return u, nil
}

// Request header values, shared by every request: the transport only reads them.
var (
	acceptValues = map[string][]string{
		AcceptPage: {AcceptPage}, AcceptRobots: {AcceptRobots}, AcceptSitemap: {AcceptSitemap}, AcceptAny: {AcceptAny},
	}
	acceptEncoding = []string{polite.AcceptEncoding}
)

// do makes one request for u (rawURL parsed).
func (c *Client) do(ctx context.Context, rawURL string, u *url.URL, accept string, maxBody int64, v Validators) (*Response, error) {
	if _, pinned := safedial.Pinned(ctx); pinned && c.cfg.Proxy != nil {
		// The proxy is chosen by the request's URL (ProxyFromEnvironment reads nothing else).
		if pu, perr := c.cfg.Proxy(&http.Request{Method: http.MethodGet, URL: u, Header: http.Header{}, Host: u.Host}); perr == nil && pu != nil {
			// The proxy connects to the server; the fetcher's connection is the proxy's.
			ctx = safedial.Unpin(ctx)
		}
	}
	x, tctx := getExchange(ctx)
	// The request is built on u as parsed, not from its string parsed again; its header
	// names are canonical and its values shared, so nothing is canonicalised or copied.
	req, err := http.NewRequestWithContext(tctx, http.MethodGet, "", nil)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidURL, err)
	}
	// NewRequest's Host: u's, an empty port dropped.
	req.URL, req.Host = u, strings.TrimSuffix(u.Host, ":")
	req.Header["User-Agent"] = c.userAgent
	if vs, ok := acceptValues[accept]; ok {
		req.Header["Accept"] = vs
	} else {
		req.Header["Accept"] = []string{accept}
	}
	req.Header["Accept-Encoding"] = acceptEncoding
	if v.ETag != "" {
		req.Header["If-None-Match"] = []string{v.ETag}
	}
	if v.LastModified != "" {
		req.Header["If-Modified-Since"] = []string{v.LastModified}
	}
	extra := polite.HeadersFor(ctx, u.Hostname())
	extra.Apply(req.Header)
	started := time.Now()
	resp, err := c.roundTrip(req)
	if err != nil {
		// x is not returned to the pool: a dial of this request may still report to it.
		return nil, fmt.Errorf("fetch: %w", err)
	}
	defer resp.Body.Close()
	defer x.put()

	// The response's header map is the caller's to keep: nothing else holds it once the
	// body is closed, so it is not copied.
	out := &Response{
		URL:       rawURL,
		Status:    resp.StatusCode,
		Header:    resp.Header,
		StartedAt: started,
		Proto:     resp.Proto,
	}
	// Before the header map is edited below: a rebuilt head shows what was received.
	x.capture(out, req, resp)
	if extra != nil {
		out.RequestHead = polite.MaskHead(out.RequestHead, extra.Secret)
	}
	// The wire cap leaves room for a coding's overhead on incompressible data; whichever
	// cap is hit first marks the body truncated.
	wireCap := contentcoding.WireCap(maxBody)
	wire := &x.wire
	*wire = countingReader{r: resp.Body, left: wireCap}
	var body io.Reader = wire
	// A coding that cannot be decoded leaves the body as received, its header saying so.
	codings, _ := contentcoding.Codings(contentcoding.Header(resp.Header))
	encoded := len(codings) > 0
	if encoded {
		// The archive keeps the octets as received; the parser gets them decoded.
		out.Decoded = true
		wire.keep = c.cfg.KeepRaw == nil || c.cfg.KeepRaw()
		zr, release, err := contentcoding.NewReader(wire, codings)
		if err != nil {
			return nil, fmt.Errorf("fetch: %s body: %w", contentcoding.Header(resp.Header), err)
		}
		defer release()
		body = zr
		// What follows is the decoded body: the encoding and length no longer describe it.
		out.Header.Del("Content-Encoding")
		out.Header.Del("Content-Length")
	}
	hint := int64(0)
	if !encoded && resp.ContentLength > 0 {
		// One octet more than the body, so the read that meets its end needs no growth.
		hint = min(resp.ContentLength, maxBody, maxPresize) + 1
	}
	out.buf = bodyBufs.Get().(*[]byte)
	x.body = io.LimitedReader{R: body, N: maxBody + 1}
	buf, err := readAll(&x.body, (*out.buf)[:0], hint)
	if encoded && err == nil && int64(len(buf)) <= maxBody {
		// The whole stream was decoded: octets after its end belong to the body as
		// received too (still under the wire cap).
		_, _ = io.Copy(io.Discard, wire)
	}
	out.WireBytes = wire.n
	if wire.keep {
		out.Raw = wire.kept
		if out.Raw == nil {
			out.Raw = []byte{} // kept, and empty
		}
	}
	if int64(len(buf)) > maxBody {
		buf, out.Truncated = buf[:maxBody], true
	} else if err != nil {
		if wire.n >= wireCap && errors.Is(err, io.ErrUnexpectedEOF) {
			out.Truncated = true
		} else {
			return nil, fmt.Errorf("fetch: read body: %w", err)
		}
	} else if wire.n >= wireCap {
		out.Truncated = true
	}
	out.Body = buf
	out.Duration = time.Since(started)
	out.MediaType, out.Charset = c.types.parse(resp.Header.Get("Content-Type"))
	out.Location = polite.Location(resp.StatusCode, u, resp.Header.Get("Location"))
	return out, nil
}

// roundTrip is http.Client.Do for this client's requests, without the client's work per
// request for redirects and cookies, which it never follows nor keeps (a copy of the
// headers, a clone of the URL): the request goes to the transport, and what the client
// would add is added here — a malformed Location of a 3xx is an error, a TLS answer in
// plain HTTP is http.ErrSchemeMismatch, and errors are *url.Error. A URL with user
// information, which the client sends as Basic authorization, takes the client's path.
func (c *Client) roundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.User != nil {
		return c.hc.Do(req)
	}
	resp, err := c.tr.RoundTrip(req)
	if err != nil {
		if tlsErr, ok := err.(tls.RecordHeaderError); ok && string(tlsErr.RecordHeader[:]) == "HTTP/" {
			err = http.ErrSchemeMismatch
		}
		return nil, &url.Error{Op: "Get", URL: req.URL.String(), Err: err}
	}
	if polite.IsRedirect(resp.StatusCode) {
		if loc := resp.Header.Get("Location"); loc != "" {
			if _, perr := req.URL.Parse(loc); perr != nil {
				_ = resp.Body.Close()
				return nil, &url.Error{Op: "Get", URL: req.URL.String(), Err: fmt.Errorf("failed to parse Location header %q: %v", loc, perr)}
			}
		}
	}
	return resp, nil
}

// readAll is io.ReadAll appending to buf, first grown to hold hint octets.
func readAll(r io.Reader, buf []byte, hint int64) ([]byte, error) {
	if int64(cap(buf)) < hint {
		buf = make([]byte, 0, hint)
	}
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = nil
			}
			return buf, err
		}
	}
}

// countingReader reads at most left octets of r (as io.LimitReader) and counts them.
type countingReader struct {
	r    io.Reader
	left int64
	n    int64
	keep bool   // append what is read to kept
	kept []byte // the octets read, when keep
}

func (c *countingReader) Read(p []byte) (int, error) {
	if c.left <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > c.left {
		p = p[:c.left]
	}
	n, err := c.r.Read(p)
	c.left -= int64(n)
	c.n += int64(n)
	if c.keep {
		c.kept = append(c.kept, p[:n]...)
	}
	return n, err
}

// mediaTypes remembers what contentType made of the Content-Type values seen: a crawl
// meets few distinct ones, and parsing one allocates its parameter map every time. It
// stops learning at maxMediaTypes values (no eviction: a web that sends endless distinct
// values is only parsed each time), and values longer than maxMediaTypeLen are not kept.
type mediaTypes struct {
	m sync.Map // value → *mediaType
	n atomic.Int32
}

type mediaType struct{ mt, charset string }

const (
	maxMediaTypes   = 1024
	maxMediaTypeLen = 128
)

func (t *mediaTypes) parse(h string) (mt, charset string) {
	if v, ok := t.m.Load(h); ok {
		e := v.(*mediaType)
		return e.mt, e.charset
	}
	mt, charset = contentType(h)
	if len(h) <= maxMediaTypeLen && t.n.Load() < maxMediaTypes {
		if _, loaded := t.m.LoadOrStore(strings.Clone(h), &mediaType{mt, charset}); !loaded {
			t.n.Add(1)
		}
	}
	return mt, charset
}

// contentType splits a Content-Type header into the lowercased media type and charset.
// A header mime cannot parse still yields whatever precedes its first ";".
func contentType(h string) (mediaType, charset string) {
	if h == "" {
		return "", ""
	}
	mt, params, err := mime.ParseMediaType(h)
	if err != nil {
		mt, _, _ = strings.Cut(h, ";")
		return strings.ToLower(strings.TrimSpace(mt)), ""
	}
	return mt, strings.ToLower(params["charset"])
}

// RetryAfter reads a Retry-After header: delay seconds or an HTTP date (RFC 9110 §10.2.3).
// A date in the past gives 0; an unreadable header gives ok == false.
func RetryAfter(h http.Header, now time.Time) (d time.Duration, ok bool) {
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0, false
	}
	if secs, err := strconv.ParseInt(v, 10, 64); err == nil {
		if secs < 0 {
			return 0, false
		}
		return time.Duration(min(secs, 365*24*3600)) * time.Second, true
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	return max(0, t.Sub(now)), true
}

// IsBlocked reports a request refused by the address policy: nothing reached the host.
func IsBlocked(err error) bool { return errors.Is(err, safedial.ErrBlockedAddress) }

// IsPermanent reports a failure that retrying cannot fix: an invalid URL, a blocked
// address, or a name that does not exist.
func IsPermanent(err error) bool {
	return errors.Is(err, ErrInvalidURL) || IsBlocked(err) || errclass.IsNoSuchHost(err)
}

// Reason is the outcome reason of a failed request: a name the DNS says does not exist
// reads errclass.NoSuchHostReason (the frontier ends the host's URLs on it), any other
// error its own text.
func Reason(err error) string {
	if errclass.IsNoSuchHost(err) {
		return errclass.NoSuchHostReason(err)
	}
	return err.Error()
}

// IsTimeout reports a failure because a deadline passed.
func IsTimeout(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
