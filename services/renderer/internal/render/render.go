// Package render loads one fetched page in a browser tab and takes its DOM. The page's
// main document is answered from the body the fetcher already holds (never requested
// again); every other request the page makes is paused by the DevTools Fetch domain and
// answered by Trawl (package answer) or failed inside the page.
package render

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/fetch"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/trawl/trawl/services/renderer/internal/answer"
	"github.com/trawl/trawl/shared/crawlmsg"
)

// RefusedNavigation is the reason a request that would take the main frame to another
// document is failed: the DOM taken must be the page's.
const RefusedNavigation = "navigation"

// Page is the fetched page to load.
type Page struct {
	URL    string
	Status int
	Header map[string][]string
	Body   []byte
}

// Result is a rendered page.
type Result struct {
	DOM       []byte
	Exchanges []crawlmsg.Exchange
	Refused   map[string]int
	Started   time.Time
	Duration  time.Duration
}

// Answerer answers the browser's requests.
type Answerer interface {
	Answer(ctx context.Context, req answer.Request) answer.Result
}

// Options configure a Renderer.
type Options struct {
	Timeout time.Duration // the page's time cap, from navigation to DOM
	Settle  time.Duration // network quiet after the load event before the DOM is taken
	Log     *slog.Logger
	// OnRefused is told each request failed in the page by the renderer itself (a
	// navigation); the answerer counts its own.
	OnRefused func(reason string)
}

// Renderer renders pages.
type Renderer struct {
	a Answerer
	o Options
}

// New returns a Renderer answering through a.
func New(a Answerer, o Options) *Renderer {
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.OnRefused == nil {
		o.OnRefused = func(string) {}
	}
	return &Renderer{a: a, o: o}
}

// noServiceWorkers removes the API before any script of the page runs: a service worker
// would make requests outside the page's interception (they would fail at the browser's
// dead proxy, but the page would wait on them).
const noServiceWorkers = `try { Object.defineProperty(Navigator.prototype, 'serviceWorker', {get: () => undefined}); } catch (e) {}`

// page is one rendering's state.
type pageState struct {
	r        *Renderer
	p        Page
	ctx      context.Context // the page's time cap
	tab      context.Context // the tab's chromedp context
	mainDone atomic.Bool
	mainID   atomic.Value // cdp.FrameID of the main frame, once its document was asked for
	inflight atomic.Int64
	lastDone atomic.Int64 // unix ns of the last request answered, or of the load event if later
	wg       sync.WaitGroup

	mu        sync.Mutex
	exchanges []crawlmsg.Exchange
	refused   map[string]int
	// announced are the page's http(s) requests its document has begun (Network domain,
	// which chromedp enables on every tab) and that were neither paused for Trawl nor ended
	// yet, with when each began. The page's own process sends the load event and these on
	// one channel, in order; the pause of a request comes from the browser's network side,
	// and on a busy machine it can come well after the load event. Without them a request a
	// script began just before the load event would be unknown when the DOM is taken.
	announced map[network.RequestID]time.Time
}

// announceGrace bounds how long a begun request that was neither paused nor ended holds
// the page: the browser may begin a request it never sends (one a later event drops
// without a word), which must not hold a page to its time cap.
const announceGrace = 2 * time.Second

// waiting reports whether a request the page began is still on its way to Trawl.
func (st *pageState) waiting(now time.Time) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	for _, began := range st.announced {
		if now.Sub(began) < announceGrace {
			return true
		}
	}
	return false
}

// announce records, and forget drops, a begun request.
func (st *pageState) announce(id network.RequestID, rawURL string) {
	if !strings.HasPrefix(rawURL, "http://") && !strings.HasPrefix(rawURL, "https://") {
		return // data:, blob: and the like are never paused
	}
	st.mu.Lock()
	st.announced[id] = time.Now()
	st.mu.Unlock()
}

func (st *pageState) forget(id network.RequestID) {
	if id == "" {
		return
	}
	st.mu.Lock()
	delete(st.announced, id)
	st.mu.Unlock()
}

// Render loads p in tab (a chromedp tab context) and returns its DOM within the time cap.
func (r *Renderer) Render(ctx context.Context, tab context.Context, p Page) (*Result, error) {
	started := time.Now()
	// Commands need the tab's chromedp context; the caller's ends the page too.
	pctx, cancel := context.WithTimeout(tab, r.o.Timeout)
	defer cancel()
	stopOnDone := context.AfterFunc(ctx, cancel)
	defer stopOnDone()
	st := &pageState{r: r, p: p, ctx: pctx, tab: tab, refused: map[string]int{}, announced: map[network.RequestID]time.Time{}}
	// Handlers answer from their own goroutines: the listener must return at once.
	lctx, stopListen := context.WithCancel(tab)
	defer stopListen()
	if err := chromedp.Listen(lctx, func(ev any) {
		switch e := ev.(type) {
		case *fetch.EventRequestPaused:
			st.inflight.Add(1)
			st.forget(e.NetworkID)
			st.wg.Add(1)
			go st.handle(e)
		case *network.EventRequestWillBeSent:
			st.announce(e.RequestID, e.Request.URL)
		case *network.EventLoadingFinished:
			st.forget(e.RequestID)
		case *network.EventLoadingFailed:
			st.forget(e.RequestID)
		}
	}); err != nil {
		return nil, fmt.Errorf("render: listen: %w", err)
	}
	// Every request is paused at the request stage: none leaves without an answer.
	if _, err := chromedp.Call(pctx, fetch.Enable, fetch.EnableParams{Patterns: []*fetch.RequestPattern{{URLPattern: "*"}}}); err != nil {
		return nil, fmt.Errorf("render: enable interception: %w", err)
	}
	if _, err := chromedp.Call(pctx, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{Source: noServiceWorkers}); err != nil {
		return nil, fmt.Errorf("render: %w", err)
	}
	err := chromedp.Do(pctx, chromedp.Navigate(p.URL))
	if err == nil {
		err = st.settle()
	}
	var dom string
	if err == nil {
		dom, err = chromedp.Run(pctx, chromedp.Evaluate[string](`(document.doctype ? new XMLSerializer().serializeToString(document.doctype) + "\n" : "") + document.documentElement.outerHTML`))
	}
	stopListen()
	cancel() // requests still waiting for their host give up
	st.wg.Wait()
	if err != nil {
		return nil, fmt.Errorf("render %s: %w", p.URL, err)
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	return &Result{DOM: []byte(dom), Exchanges: st.exchanges, Refused: st.refused, Started: started, Duration: time.Since(started)}, nil
}

// settle waits until no request has been in flight for Settle after the load event, or the
// time cap. In flight is a request paused for Trawl and not yet answered, or one the page
// began that has not reached Trawl yet (announced). The window starts at the load event,
// not at the last request's end: a page whose last request ended long before its load
// event (a slow script, a busy browser) would otherwise be taken at once, before what its
// load handler fetches.
func (st *pageState) settle() error {
	tick := time.NewTicker(25 * time.Millisecond)
	defer tick.Stop()
	st.lastDone.Store(time.Now().UnixNano())
	for {
		if st.inflight.Load() == 0 && time.Since(time.Unix(0, st.lastDone.Load())) >= st.r.o.Settle && !st.waiting(time.Now()) {
			return nil
		}
		select {
		case <-st.ctx.Done():
			// A page that never goes quiet (polling) is taken as it is at the cap... unless
			// the cap leaves no time to take it: then it is an error.
			return fmt.Errorf("network never quiet for %s: %w", st.r.o.Settle, st.ctx.Err())
		case <-tick.C:
		}
	}
}

func (st *pageState) done() {
	st.lastDone.Store(time.Now().UnixNano())
	st.inflight.Add(-1)
	st.wg.Done()
}

// handle answers one paused request.
func (st *pageState) handle(e *fetch.EventRequestPaused) {
	defer st.done()
	if e.ResourceType == network.ResourceTypeDocument {
		if st.mainDone.CompareAndSwap(false, true) {
			st.mainID.Store(e.FrameID)
			st.fulfillMain(e)
			return
		}
		if id, _ := st.mainID.Load().(cdp.FrameID); id == e.FrameID {
			st.refuse(e, RefusedNavigation, network.ErrorReasonBlockedByClient)
			st.r.o.OnRefused(RefusedNavigation)
			return
		}
	}
	// Whichever frame or script asked, the page is the site the request acts for: a rule's
	// secrets go only to that site (answer.Request.Page).
	req := answer.Request{URL: e.Request.URL, Method: e.Request.Method, Header: map[string]string{}, Page: st.p.URL}
	for k, v := range e.Request.Headers {
		req.Header[k] = fmt.Sprint(v)
	}
	for _, d := range e.Request.PostDataEntries {
		req.Body = append(req.Body, d.Bytes...)
	}
	began := time.Now()
	res := st.r.a.Answer(st.ctx, req)
	st.r.o.Log.Debug("browser request answered", "url", req.URL, "status", res.Status, "refused", res.Refused, "took", time.Since(began))
	if res.Refused != "" {
		reason := network.ErrorReasonBlockedByClient
		if res.Refused == answer.RefusedError {
			reason = network.ErrorReasonFailed
		} else if res.Refused == answer.RefusedTime {
			reason = network.ErrorReasonTimedOut
		}
		st.r.o.Log.Debug("browser request refused", "page", st.p.URL, "url", req.URL, "reason", res.Refused, "err", res.Err)
		st.refuse(e, res.Refused, reason)
		return
	}
	st.mu.Lock()
	st.exchanges = append(st.exchanges, *res.Exchange)
	st.mu.Unlock()
	st.fulfill(e, res.Status, res.Header, res.Body)
}

func (st *pageState) refuse(e *fetch.EventRequestPaused, reason string, why network.ErrorReason) {
	st.mu.Lock()
	st.refused[reason]++
	st.mu.Unlock()
	// The tab's context, not the page's: a request refused at the cap still gets its answer.
	ctx, cancel := context.WithTimeout(st.tab, 5*time.Second)
	defer cancel()
	if _, err := chromedp.Call(ctx, fetch.FailRequest, fetch.FailRequestParams{RequestID: e.RequestID, ErrorReason: why}); err != nil {
		st.r.o.Log.Debug("fail request", "url", e.Request.URL, "err", err)
	}
}

// skipHeaders describe the body as it travelled; the browser gets it decoded and whole.
var skipHeaders = map[string]bool{"content-encoding": true, "content-length": true, "transfer-encoding": true, "connection": true, "keep-alive": true}

func (st *pageState) fulfill(e *fetch.EventRequestPaused, status int, h http.Header, body []byte) {
	var hs []*fetch.HeaderEntry
	for k, vs := range h {
		if skipHeaders[strings.ToLower(k)] {
			continue
		}
		for _, v := range vs {
			hs = append(hs, &fetch.HeaderEntry{Name: k, Value: v})
		}
	}
	ctx, cancel := context.WithTimeout(st.tab, 5*time.Second)
	defer cancel()
	if _, err := chromedp.Call(ctx, fetch.FulfillRequest, fetch.FulfillRequestParams{
		RequestID: e.RequestID, ResponseCode: int64(status), ResponseHeaders: hs, Body: body,
	}); err != nil && !errors.Is(err, context.Canceled) {
		st.r.o.Log.Debug("fulfill request", "url", e.Request.URL, "err", err)
	}
}

// fulfillMain answers the page's own document from the fetched body.
func (st *pageState) fulfillMain(e *fetch.EventRequestPaused) {
	status := st.p.Status
	if status == 0 {
		status = http.StatusOK
	}
	st.fulfill(e, status, http.Header(st.p.Header), st.p.Body)
}
