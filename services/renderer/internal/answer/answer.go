// Package answer answers the browser's requests on Trawl's behalf. The browser makes no
// request itself (services/renderer/README.md, "The renderer"): every request it would make is paused
// by the DevTools Fetch domain and handed here, where it is checked against the crawl's
// exclusions, the live site policy and the host's robots.txt, served from the shared
// subresource cache when a page fetched it before, and otherwise made by Trawl's own HTTP
// client (address-checked dialing) under a claim of its host (politeness.Claimer): the
// same schedule the fetchers keep, so a host's fetchers and renderers never overlap and
// never come closer than the host's gap. A request carries its site policy's request
// settings and robots.txt is read as a fetcher reads it (shared/polite), so a host is asked
// alike whichever process asks.
package answer

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/netip"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"

	"golang.org/x/sync/singleflight"

	"github.com/trawl/trawl/shared/contentcoding"
	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/crawlscope"
	"github.com/trawl/trawl/shared/ctxsleep"
	"github.com/trawl/trawl/shared/policy"
	"github.com/trawl/trawl/shared/polite"
	"github.com/trawl/trawl/shared/politeness"
	"github.com/trawl/trawl/shared/robots"
	"github.com/trawl/trawl/shared/robotscache"
	"github.com/trawl/trawl/shared/safedial"
	"github.com/trawl/trawl/shared/urlnorm"
)

// Reasons a request is refused (failed inside the page); the values of
// crawlmsg.Rendered.Refused and the metrics' reason label.
const (
	RefusedScheme  = "scheme"  // not http or https
	RefusedURL     = "url"     // unparseable, or longer than TRAWL_MAX_URL_LENGTH
	RefusedScope   = "scope"   // TRAWL_EXCLUDE matches it
	RefusedBlocked = "blocked" // a live site policy blocks it
	RefusedRobots  = "robots"  // robots.txt disallows it (or is unreachable: disallow all)
	RefusedUnsafe  = "unsafe"  // the address policy refuses its host's address
	RefusedTime    = "time"    // the page's time cap passed while it waited for its host
	RefusedError   = "error"   // the request was made and failed (no response)
	RefusedSecret  = "secret"  // a secret its site policy names cannot be read (TRAWL_SECRETS_DIR)
)

// Request is a request the browser would make.
type Request struct {
	URL    string
	Method string
	Header map[string]string
	Body   []byte
	// Page is the URL of the top-level page being rendered, whose scripts and frames may
	// have started the request: a site policy's secrets go only with a request to the
	// page's own site (sameSite). "": none do.
	Page string
}

// Result is how a request was answered: a refusal (Refused set), or a response with the
// exchange to archive.
type Result struct {
	Refused  string
	Err      error // why, for a refusal
	Status   int
	Header   http.Header
	Body     []byte
	Exchange *crawlmsg.Exchange
}

// Metrics are told what happened to each request.
type Metrics interface {
	Refused(reason string)
	Answered(source string) // "network" or "cache"
	ClaimWait(d time.Duration)
	Robots(result string) // the robots.txt fetches made: "parsed", "unavailable", "unreachable"
}

// Config are an Answerer's settings.
type Config struct {
	UserAgent      string
	RobotsAgent    string
	MaxURLLength   int
	Exclude        *regexp.Regexp
	RequestTimeout time.Duration
	MaxBody        int64
	CacheMaxEntry  int64
	// Norm is the URL form dedup gives the fetchers' URLs; every request is put in it first.
	Norm urlnorm.Options
	// Policy, when set, is the live site policies' verdict on a URL: "" to go on, or the
	// reason to refuse it (RefusedBlocked, RefusedScope) and the rule that decided.
	Policy func(rawURL string) (refuse, why string)
	// Rules, when set, is a URL's live site policy, whose request settings its request
	// carries and whose User-Agent names the agent robots.txt is read for.
	Rules func(rawURL string) policy.Resolved
	// Requests resolves those settings, and gives robots.txt's limit, as for the fetchers.
	Requests *polite.Requests
	// ServerLimits, when set, are the site policies' limits a claim on host's server
	// address addr applies (polite.ServerLimits), as a fetcher's claim does.
	ServerLimits func(host string, addr netip.Addr) politeness.ServerLimits
}

// Answerer answers requests. It is safe for concurrent use.
type Answerer struct {
	cfg    Config
	robots *polite.RobotsStores
	claims *politeness.Claimer
	client *http.Client
	cache  *Cache // nil: no cache
	m      Metrics
	// robotsFetch makes the requests waiting for one origin's robots.txt share one fetch.
	robotsFetch singleflight.Group
	// servers spaces requests per server address (TRAWL_POLITENESS=ip; nil otherwise),
	// as the fetchers' do; pick resolves a host to the address its dial will use.
	servers *politeness.Servers
	pick    func(ctx context.Context, host string) (netip.Addr, error)
	log     *slog.Logger
}

// New returns an Answerer making its requests through dialer.
// servers, when not nil, also spaces the requests per server address.
func New(cfg Config, store *polite.RobotsStores, claims *politeness.Claimer, servers *politeness.Servers, dialer *safedial.Dialer, cache *Cache, m Metrics, log *slog.Logger) *Answerer {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			return dialer.DialContext(ctx, network, safedial.PinnedAddress(ctx, addr))
		},
		Proxy:                 http.ProxyFromEnvironment,
		TLSClientConfig:       &tls.Config{MinVersion: tls.VersionTLS12},
		TLSHandshakeTimeout:   min(10*time.Second, cfg.RequestTimeout),
		ResponseHeaderTimeout: cfg.RequestTimeout,
		// The request asks for no content coding itself (identity); what a server sends
		// anyway is decoded in do, under the body cap, not by the transport, which has none.
		DisableCompression:  true,
		MaxIdleConnsPerHost: 1,
		IdleConnTimeout:     30 * time.Second,
		ForceAttemptHTTP2:   true,
	}
	client := &http.Client{
		Transport: tr,
		// A redirect goes back to the browser, whose request for the target is answered
		// here again: every hop is checked and claimed like any request.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	return &Answerer{cfg: cfg, robots: store, claims: claims, client: client, cache: cache, m: m, log: log,
		servers: servers, pick: dialer.Pick}
}

// Close drops idle connections.
func (a *Answerer) Close() { a.client.CloseIdleConnections() }

func (a *Answerer) refuse(reason string, err error) Result {
	a.m.Refused(reason)
	return Result{Refused: reason, Err: err}
}

// Answer answers req within ctx (the page's time cap).
func (a *Answerer) Answer(ctx context.Context, req Request) Result {
	o, reason, err := a.prepare(req)
	if reason != "" {
		return a.refuse(reason, err)
	}
	cacheable := o.shareable && a.cache != nil
	if cacheable {
		if r, ok := a.cache.Get(ctx, o.norm); ok {
			a.m.Answered("cache")
			return r
		}
	}
	entry, err := a.robotsEntry(ctx, o.u.Scheme+"://"+o.u.Host, a.cfg.Requests.RobotsAgent(o.pol))
	if err != nil {
		return a.refuse(refusal(ctx, err), err)
	}
	if d := polite.Decide(entry, o.u); !d.Allowed {
		return a.refuse(RefusedRobots, fmt.Errorf("%s %s", d.Reason, d.Rule))
	}
	source := "network"
	res, err := a.claimed(ctx, o.host, entry.CrawlDelay(), func(ctx context.Context) (Result, error) {
		if cacheable {
			// Since the look above, another request for the URL (another tab's, another
			// renderer's) may have been answered and kept while this one waited for the
			// host: a favicon two pages ask for at once is requested once.
			if r, ok := a.cache.Get(ctx, o.norm); ok {
				source = "cache"
				return r, nil
			}
		}
		res, err := a.send(ctx, req, o)
		if err == nil && cacheable && a.keep(res) {
			// Stored before the host is released: a request for the URL waiting for the
			// host finds it.
			a.cache.Put(ctx, o.norm, res)
		}
		return res, err
	})
	if err != nil {
		return a.refuse(refusal(ctx, err), err)
	}
	a.m.Answered(source)
	return res
}

// outgoing is a request as Answer makes it.
type outgoing struct {
	norm string   // its URL in dedup's form
	u    *url.URL // norm, parsed
	host string
	pol  policy.Resolved // its URL's live site policy
	hdr  *polite.Headers // what pol adds to it (sameSite: its secrets or not)
	// shareable: a GET carrying no secret, whose response the cache may serve other pages.
	// A response to a request carrying a rule's secret is the site's answer to that
	// account: it is neither served from nor kept in the cache other pages read.
	shareable bool
}

// prepare puts req in Trawl's form and resolves what it carries, or says why it is
// refused (a reason and the error) before its host is asked anything.
func (a *Answerer) prepare(req Request) (outgoing, string, error) {
	u, err := url.Parse(req.URL)
	switch {
	case err != nil:
		return outgoing{}, RefusedURL, err
	case u.Scheme != "http" && u.Scheme != "https":
		return outgoing{}, RefusedScheme, fmt.Errorf("scheme %q", u.Scheme)
	case u.Hostname() == "":
		return outgoing{}, RefusedURL, errors.New("no host")
	}
	// The URL as Chromium writes it is not Trawl's: a trailing dot on the host, escaped
	// unreserved octets, a session id. Judged, cached, claimed and requested in the form
	// dedup gives the fetchers' URLs, a request is one URL with one host however the page
	// spells it, and no spelling slips past a block, a scope or a host's claim.
	o := outgoing{}
	if o.norm, o.host, err = a.normHost(req.URL); err != nil {
		return outgoing{}, RefusedURL, err
	}
	if o.u, err = url.Parse(o.norm); err != nil {
		return outgoing{}, RefusedURL, err
	}
	switch {
	case a.cfg.MaxURLLength > 0 && len(o.norm) > a.cfg.MaxURLLength:
		return outgoing{}, RefusedURL, fmt.Errorf("%d octets, TRAWL_MAX_URL_LENGTH is %d", len(o.norm), a.cfg.MaxURLLength)
	case a.cfg.Exclude != nil && a.cfg.Exclude.MatchString(o.norm):
		return outgoing{}, RefusedScope, errors.New("TRAWL_EXCLUDE matches")
	}
	if a.cfg.Policy != nil {
		// Asked right before each request, as fetchers do: a block is in force within the
		// watcher's poll whatever was dispatched before.
		if reason, why := a.cfg.Policy(o.norm); reason != "" {
			return outgoing{}, reason, errors.New(why)
		}
	}
	o.pol = a.rules(o.norm)
	if o.hdr, err = a.cfg.Requests.Headers(o.pol, o.host); err != nil {
		return outgoing{}, RefusedSecret, err
	}
	if !a.sameSite(req.Page, o.host) {
		// As a browser keeps a SameSite cookie from it: a page of another site must not act
		// as the rule's account (a POST, a JSONP read, a frame) through the crawl.
		o.hdr = o.hdr.WithoutSecrets()
	}
	o.shareable = req.Method == http.MethodGet && len(o.hdr.Secrets()) == 0
	return o, "", nil
}

// normHost is rawURL in dedup's form and its host.
func (a *Answerer) normHost(rawURL string) (norm, host string, err error) {
	if norm, err = urlnorm.NormalizeWith(rawURL, a.cfg.Norm); err != nil {
		return "", "", err
	}
	if host, err = urlnorm.Host(norm); err != nil {
		return "", "", err
	}
	return norm, host, nil
}

// sameSite reports whether host is of the same site as the page at pageURL: the same
// registrable domain (eTLD+1), or the same host when either has none (an IP address,
// localhost). Only such a request carries its rule's secrets, whatever its method: an
// application's own API keeps them, a request another site's page makes does not.
func (a *Answerer) sameSite(pageURL, host string) bool {
	if pageURL == "" {
		return false
	}
	_, page, err := a.normHost(pageURL)
	if err != nil {
		return false
	}
	return crawlscope.RegisteredDomain(page) == crawlscope.RegisteredDomain(host)
}

// send makes the request o under ctx (its host's claim), with the headers o carries.
func (a *Answerer) send(ctx context.Context, req Request, o outgoing) (Result, error) {
	return a.do(polite.WithHeaders(ctx, o.hdr), req, o.u, a.cfg.MaxBody, nil)
}

// keep reports whether a response may be served to other pages from the cache: a final
// answer HTTP lets a cache keep without being told (RFC 9111, 4.2.2: a 404 or a 410 as
// much as a 200), whole, not too large, and not private to this page.
func (a *Answerer) keep(res Result) bool {
	return heuristicallyCacheable[res.Status] && int64(len(res.Body)) <= a.cfg.CacheMaxEntry && !res.Exchange.Truncated && storable(res.Header)
}

// heuristicallyCacheable are the statuses RFC 9111 lets a cache keep without explicit
// freshness (RFC 9110, 15.1), but 206: the cache is keyed by URL alone, and a part is not
// the answer to a request for the whole.
var heuristicallyCacheable = map[int]bool{
	http.StatusOK: true, http.StatusNonAuthoritativeInfo: true, http.StatusNoContent: true,
	http.StatusMultipleChoices: true, http.StatusMovedPermanently: true, http.StatusPermanentRedirect: true,
	http.StatusNotFound: true, http.StatusMethodNotAllowed: true, http.StatusGone: true,
	http.StatusRequestURITooLong: true, http.StatusNotImplemented: true,
}

func refusal(ctx context.Context, err error) string {
	var se *polite.SecretError
	switch {
	case errors.As(err, &se):
		return RefusedSecret
	case errors.Is(err, safedial.ErrBlockedAddress):
		return RefusedUnsafe
	case ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded):
		return RefusedTime
	}
	return RefusedError
}

// storable reports whether the response may be served to other pages: not when the
// server said no-store or private.
func storable(h http.Header) bool {
	cc := strings.ToLower(h.Get("Cache-Control"))
	return !strings.Contains(cc, "no-store") && !strings.Contains(cc, "private") && h.Get("Set-Cookie") == ""
}

// claimPoll is the longest a request waits before asking for its host again.
const claimPoll = 100 * time.Millisecond

// claimed runs do under a claim of host, waiting for the host's turn until ctx ends: no
// other request to the host (a fetcher's task, another renderer's request) is in flight
// meanwhile, and the host's next turn is a gap after this request ends. Under per-server
// politeness the request also claims the address it will be made to, under the site
// policies' address limits, as a fetcher's does; one claim is never held while waiting for
// the other (a window could run out meanwhile): a busy address gives the host back, later
// than it would have been, never earlier. The request's whole time ends within the claims
// it holds (politeness.Claimer.Take, Servers.Take): the address is resolved before any
// claim, and the second claim is taken under the first's context.
func (a *Answerer) claimed(ctx context.Context, host string, crawlDelay time.Duration, do func(context.Context) (Result, error)) (Result, error) {
	var (
		addr netip.Addr
		lim  politeness.ServerLimits
	)
	if a.servers != nil {
		var err error
		if addr, err = a.pick(ctx, host); err != nil {
			return Result{}, err
		}
		if a.cfg.ServerLimits != nil {
			lim = a.cfg.ServerLimits(host, addr)
		}
	}
	start := time.Now()
	wait := func(d time.Duration) error {
		// While another request holds the host, the wait the claim gives is its whole
		// window, though the request usually ends far sooner: ask again shortly.
		if !ctxsleep.Sleep(ctx, min(d, claimPoll)) {
			return fmt.Errorf("waiting %s for host %s's turn: %w", time.Since(start).Round(time.Millisecond), host, ctx.Err())
		}
		return nil
	}
	var (
		ht   politeness.HostTurn
		st   politeness.ServerTurn
		rctx context.Context
	)
	for {
		var err error
		if ht, err = a.claims.Take(ctx, host, a.cfg.RequestTimeout); err != nil {
			return Result{}, err
		}
		if !ht.OK {
			if err := wait(ht.Wait); err != nil {
				return Result{}, err
			}
			continue
		}
		rctx = ht.Ctx
		if a.servers == nil {
			break
		}
		if st, err = a.servers.Take(ht.Ctx, addr, host, crawlDelay, a.cfg.RequestTimeout, lim); err == nil && st.OK {
			rctx = st.Ctx
			break
		}
		a.release(ctx, ht, -1)
		if err != nil {
			return Result{}, err
		}
		if err := wait(st.Wait); err != nil {
			return Result{}, err
		}
	}
	a.m.ClaimWait(time.Since(start))
	began := time.Now()
	res, err := do(rctx)
	took := time.Since(began)
	if st.OK {
		relCtx, relCancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		if rerr := a.servers.End(relCtx, st, took); rerr != nil {
			a.log.Warn("release of a server address claim failed; the address waits out the claim's window", "addr", st.Addr, "err", rerr)
		}
		relCancel()
	}
	a.release(ctx, ht, took)
	return res, err
}

// release ends a host turn, even when the page's context ended: the host's next turn
// must be set. took < 0: no request was made.
func (a *Answerer) release(ctx context.Context, t politeness.HostTurn, took time.Duration) {
	relCtx, relCancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer relCancel()
	if err := a.claims.End(relCtx, t, took); err != nil {
		// The claim's window then ends the host's wait: later, never earlier.
		a.log.Warn("release of a host claim failed; the host waits out the claim's window", "host", t.Host, "err", err)
	}
}

// rules is rawURL's live site policy (none without Config.Rules).
func (a *Answerer) rules(rawURL string) policy.Resolved {
	if a.cfg.Rules == nil {
		return policy.Resolved{}
	}
	return a.cfg.Rules(rawURL)
}

// robotsEntry returns origin's robots.txt entry for agent (Requests.RobotsAgent),
// fetching robots.txt (each hop under a claim of its host, as any request) when no fetcher
// or renderer has it cached.
func (a *Answerer) robotsEntry(ctx context.Context, origin, agent string) (*robots.Entry, error) {
	store := a.robots.For(agent)
	e, err := store.Get(ctx, origin)
	if err != nil || e != nil {
		return e, err
	}
	// The page's requests to one origin arrive together: one of them fetches robots.txt.
	v, err, _ := a.robotsFetch.Do(agent+" "+origin, func() (any, error) { return a.fetchRobots(ctx, origin, agent, store) })
	if err != nil {
		return nil, err
	}
	return v.(*robots.Entry), nil
}

// errPolicyBlocked: a site policy blocks a robots.txt hop's URL.
var errPolicyBlocked = errors.New("a site policy blocks it")

// fetchRobots fetches origin's robots.txt as a fetcher does and caches the entry: the
// chain walked by polite.WalkRobots, each request under a claim of its own host and with
// the request settings of its own URL's policy (only to its host; secrets too, whichever
// page's request needs the file: it is Trawl's own request, and its response never reaches
// a page); a hop a policy blocks, or whose address the address policy refuses, leaves
// robots.txt unreachable. No entry is cached when the origin itself is refused or a secret
// cannot be read: the request is refused instead.
func (a *Answerer) fetchRobots(ctx context.Context, origin, agent string, store *robotscache.Store) (*robots.Entry, error) {
	if e, err := store.Get(ctx, origin); err != nil || e != nil {
		return e, err
	}
	e, err := polite.WalkRobots(ctx, agent, origin+"/robots.txt", a.cfg.Requests.RobotsMaxBytes(),
		func(ctx context.Context, _ int, u *url.URL, maxBody int64) (polite.RobotsResponse, error) {
			target := u.String()
			to, err := urlnorm.Host(target)
			if err != nil {
				return polite.RobotsResponse{}, err
			}
			pol := a.rules(target)
			if pol.Blocked() {
				return polite.RobotsResponse{}, fmt.Errorf("robots.txt at %s: %w", target, errPolicyBlocked)
			}
			hdr, err := a.cfg.Requests.Headers(pol, to)
			if err != nil {
				return polite.RobotsResponse{}, polite.StopRobots(err)
			}
			res, err := a.claimed(ctx, to, 0, func(ctx context.Context) (Result, error) {
				return a.getRobots(polite.WithHeaders(ctx, hdr), u, maxBody)
			})
			return polite.RobotsResponse{Status: res.Status, Location: res.Header.Get("Location"), Body: res.Body}, err
		})
	if err != nil {
		return nil, err
	}
	a.m.Robots(e.Class.String())
	if perr := store.Put(ctx, origin, e); perr != nil {
		a.log.Warn("robots.txt entry not cached", "origin", origin, "err", perr)
	}
	return e, nil
}

// getRobots makes one robots.txt request as every process makes it (polite.RobotsHeader),
// reading at most maxBody octets of its content.
func (a *Answerer) getRobots(ctx context.Context, u *url.URL, maxBody int64) (Result, error) {
	return a.do(ctx, Request{URL: u.String(), Method: http.MethodGet}, u, maxBody, polite.RobotsHeader)
}

// hopByHop are the request headers the browser's request loses: Trawl's client manages
// the connection, sends its own User-Agent and asks for no content coding (identity).
var hopByHop = []string{"Connection", "Keep-Alive", "Proxy-Connection", "Transfer-Encoding", "Upgrade", "Te", "Trailer",
	"Accept-Encoding", "User-Agent", "Host", "Content-Length", "Cookie"}

// do makes one request and reads at most maxBody octets of its response's content. It
// carries the site policy's headers ctx holds for u's host (polite.WithHeaders), over the
// browser's own, and the exchange shows their secrets masked, as a fetcher's does. head,
// when not nil, sets the request's Accept and Accept-Encoding (a robots.txt request); a
// browser's request keeps its own Accept and asks for no content coding.
func (a *Answerer) do(ctx context.Context, req Request, u *url.URL, maxBody int64, head func(http.Header)) (Result, error) {
	var body io.Reader
	if len(req.Body) > 0 {
		body = bytes.NewReader(req.Body)
	}
	method := req.Method
	if method == "" {
		method = http.MethodGet
	}
	var ip string
	pinned := ctx
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) {
		if i.Reused && safedial.OffPin(pinned, i.Conn) {
			// A pooled connection to another address of the host than the one claimed:
			// closed before anything is written, so the transport dials the pinned one.
			_ = i.Conn.Close()
			return
		}
		if i.Conn != nil {
			ip = i.Conn.RemoteAddr().String()
		}
	}})
	hr, err := http.NewRequestWithContext(ctx, method, u.String(), body)
	if err != nil {
		return Result{}, err
	}
	for k, v := range req.Header {
		if !slices.ContainsFunc(hopByHop, func(h string) bool { return strings.EqualFold(h, k) }) {
			hr.Header.Set(k, v)
		}
	}
	hr.Header.Set("User-Agent", a.cfg.UserAgent)
	if head != nil {
		head(hr.Header)
	}
	extra := polite.HeadersFor(ctx, u.Hostname())
	extra.Apply(hr.Header)
	if head == nil {
		// Asked explicitly: a server that reads no Accept-Encoding as "anything" must not
		// pick a coding. One that sends a coding all the same (objects stored gzipped,
		// nginx's gzip_static always) is decoded below.
		hr.Header.Set("Accept-Encoding", "identity")
	}
	started := time.Now()
	resp, err := a.client.Do(hr)
	if err != nil {
		return Result{}, err
	}
	defer resp.Body.Close()
	coding := contentcoding.Header(resp.Header)
	b, err := contentcoding.Read(resp.Body, coding, maxBody)
	if err != nil {
		return Result{}, fmt.Errorf("body of %s: %w", u, err)
	}
	ct, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	ex := &crawlmsg.Exchange{
		URL: u.String(), Method: method, Status: resp.StatusCode, ContentType: strings.ToLower(ct),
		FetchedAt: started.UnixMilli(), DurationMs: time.Since(started).Milliseconds(), IP: hostOnly(ip),
		// The archive keeps the body as received, under the head that describes it.
		Truncated: b.Truncated, Request: polite.MaskHead(requestHead(hr), extra.Secrets()), Response: responseHead(resp), Body: b.Content,
	}
	h := resp.Header
	if b.Raw != nil {
		ex.Body = b.Raw
		// The page and the cache get the content: the coding and length describe the
		// octets as received, not it.
		h = h.Clone()
		h.Del("Content-Encoding")
		h.Del("Content-Length")
	}
	return Result{Status: resp.StatusCode, Header: h, Body: b.Content, Exchange: ex}, nil
}

func hostOnly(addr string) string {
	if i := strings.LastIndexByte(addr, ':'); i > 0 {
		return strings.Trim(addr[:i], "[]")
	}
	return addr
}

// requestHead is the request head in HTTP/1.1 form, rebuilt from the request sent (the
// exchange says so: Verbatim false).
func requestHead(r *http.Request) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\nHost: %s\r\n", r.Method, r.URL.RequestURI(), r.URL.Host)
	_ = r.Header.Write(&b)
	b.WriteString("\r\n")
	return b.Bytes()
}

// responseHead is the response's status line and headers in HTTP/1.1 form.
func responseHead(r *http.Response) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "HTTP/1.1 %s\r\n", r.Status)
	_ = r.Header.Write(&b)
	b.WriteString("\r\n")
	return b.Bytes()
}
