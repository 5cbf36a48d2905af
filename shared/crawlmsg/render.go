package crawlmsg

import (
	stdjson "encoding/json"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go"
)

// Rendering (services/renderer/README.md, "Rendering"). The parser decides that a fetched page
// needs a browser and publishes a render task on crawl.render (topology.SubjectRender); a
// renderer loads the page in headless Chromium with the fetched body as its main document
// (never requested again), answers every other request the page makes itself (robots,
// scope, the host's shared gap), and publishes the result on crawl.pages as a page whose
// Meta.Rendered is set: its body is the rendered DOM and Rendered.Exchanges the browser's
// requests and responses. A rendered page is never rendered again.
//
// A render task is written like a page (PageMsg) on crawl.render: its metadata is the
// fetched page's PageMeta (URL, host, depth, hops, kind, embeds, recrawl, under, lease,
// status, response headers, content type, charset, fetch time) without the capture (the
// fetched exchange is archived from crawl.pages already), the payload is the body as
// fetched and decoded, and the RenderReasonHeader says why it is rendered. A body too large
// to travel inline is the object RenderTaskBodyName(lease) in topology.BodiesBucket, named
// by Meta.BodyRef; its publisher stores it, the renderer deletes it once the task is done
// (rendered, or given up), and the parser's body sweeper leaves objects of that prefix
// alone (a render task may wait in its stream longer than a page's body window).
//
// Message ids: the parser publishes a task with Nats-Msg-Id RenderTaskMsgID(lease); the
// renderer publishes its page with RenderedMsgID(lease), so a redelivered task whose page
// was stored already stores nothing twice.

// RenderReasonHeader holds why a render task's page is rendered (a setting or a detection:
// "host", "pattern", "app-shell", …): carried into Rendered.Reason.
const RenderReasonHeader = "Trawl-Render-Reason"

// PageRenderedVersion is the version of a page message that carries a rendered page
// (Meta.Rendered, without its exchanges). Its payload is the body (the rendered DOM; none
// when it goes by reference), then the capture's parts as in PageCaptureVersion when it
// has a capture, then, exchange after exchange, the request head, the response head and
// the body as received (none when the exchange's body goes by reference), then the list of
// exchanges as JSON (Rendered.ExchangesSize octets), which gives each one's lengths. A reader that knows only versions 1 and 2 rejects it (ErrVersion) rather than
// taking a DOM for a fetched body.
const PageRenderedVersion = 3

// RenderTaskBodyPrefix starts the object names of render task bodies sent by reference.
const RenderTaskBodyPrefix = "render-task:"

// RenderTaskBodyName is the object holding the body of the render task of lease.
func RenderTaskBodyName(lease string) string { return RenderTaskBodyPrefix + lease }

// IsRenderTaskBody reports whether an object of topology.BodiesBucket is a render task's
// body, which the renderer removes and the body sweeper must leave.
func IsRenderTaskBody(name string) bool { return strings.HasPrefix(name, RenderTaskBodyPrefix) }

// RenderedBodyName is the object holding a rendered page's DOM when it goes by reference,
// and RenderedExchangeBodyName that of the body of its exchange i. Both are read and
// removed like a fetched page's body (the parser, its sweeper).
func RenderedBodyName(lease string) string { return "render:" + lease }

// RenderedExchangeBodyName names the body of exchange i of the rendered page of lease.
func RenderedExchangeBodyName(lease string, i int) string {
	return fmt.Sprintf("render:%s:%d", lease, i)
}

// RenderTaskMsgID is the Nats-Msg-Id of the render task of the page fetched under lease;
// RenderedMsgID that of its rendered page on crawl.pages.
func RenderTaskMsgID(lease string) string { return "render-task:" + lease }

// RenderedMsgID is the Nats-Msg-Id of the rendered page of the task of lease.
func RenderedMsgID(lease string) string { return "render:" + lease }

// RenderTask is a fetched page to render.
type RenderTask struct {
	// Page is the page as fetched: Meta without a capture, Body the decoded body (empty
	// when Meta.BodyRef names it).
	Page Page
	// Reason says why the page is rendered.
	Reason string
}

// RenderTaskMsg builds the message of t on subject (topology.SubjectRender), with its
// Nats-Msg-Id. The page's capture, if any, is left out.
func RenderTaskMsg(subject string, t *RenderTask) (*nats.Msg, error) {
	p := t.Page
	p.Meta.Capture, p.Meta.Rendered, p.Raw = nil, nil, nil
	if p.Meta.URL == "" || p.Meta.Lease == "" {
		return nil, fmt.Errorf("%w: render task lacks url or lease", ErrMalformed)
	}
	m, err := PageMsg(subject, &p)
	if err != nil {
		return nil, err
	}
	m.Header.Set(RenderReasonHeader, t.Reason)
	m.Header.Set(nats.MsgIdHdr, RenderTaskMsgID(p.Meta.Lease))
	return m, nil
}

// DecodeRenderTask reads a message of crawl.render. Errors wrap ErrMalformed or ErrVersion.
func DecodeRenderTask(header nats.Header, data []byte) (*RenderTask, error) {
	p, err := DecodePage(header, data)
	if err != nil {
		return nil, err
	}
	if p.Meta.Lease == "" || p.Meta.Host == "" {
		return nil, fmt.Errorf("%w: render task %s lacks host or lease", ErrMalformed, p.Meta.URL)
	}
	if p.Meta.Rendered != nil {
		return nil, fmt.Errorf("%w: render task %s is a rendered page (never rendered twice)", ErrMalformed, p.Meta.URL)
	}
	return &RenderTask{Page: *p, Reason: header.Get(RenderReasonHeader)}, nil
}

// Rendered is what a rendered page carries beyond a fetched one (PageMeta.Rendered).
type Rendered struct {
	// Reason is the task's: why the page was rendered.
	Reason string `json:"reason,omitempty"`
	// Failed, when set, says the page could not be rendered and why (the browser crashed
	// on it on every attempt, it exceeded its memory cap, …): the body is then the page as
	// fetched, passed on so that it is still parsed, once, as it is. A failed page counts
	// as rendered: it is never rendered again.
	Failed string `json:"failed,omitempty"`
	// RenderedAt is when the renderer loaded the page (unix ms), DurationMs how long it
	// took until the DOM was taken.
	RenderedAt int64 `json:"rendered_at"`
	DurationMs int64 `json:"duration_ms"`
	// Exchanges are the browser's requests that Trawl answered with a response, in the
	// order they were answered; the main document (served from the task's body) is not
	// one. They travel in the payload, not the metadata: ExchangesSize is the length of
	// their list there (written by PageMsg).
	Exchanges     []Exchange `json:"exchanges,omitempty"`
	ExchangesSize int64      `json:"exchanges_size,omitempty"`
	// Refused counts the browser's requests failed inside the page, by reason ("robots",
	// "scope", "blocked", "unsafe", "scheme", "secret", "error", "time"): no request was made for
	// them (or, for "error", none that answered).
	Refused map[string]int `json:"refused,omitempty"`
}

// Exchange is one browser request answered by Trawl, as an archive keeps it: the request
// head as sent, the response head as received and the body as received (content coding
// intact), octets that travel in a rendered page's payload (never in its metadata). A
// request answered from the shared subresource cache (Cached) carries no octets: it made
// no request now, and its exchange was kept when it was made.
type Exchange struct {
	URL    string `json:"url"`
	Method string `json:"method"`
	Status int    `json:"status"`
	// ContentType is the response's media type without parameters, lowercased.
	ContentType string `json:"content_type,omitempty"`
	// FetchedAt is when the request started (unix ms), DurationMs until its last body byte.
	FetchedAt  int64  `json:"fetched_at"`
	DurationMs int64  `json:"duration_ms"`
	IP         string `json:"ip,omitempty"`
	// Verbatim says Request and Response are the octets on the wire (see Capture.Verbatim).
	Verbatim bool `json:"verbatim,omitempty"`
	// Cached says the response came from the subresource cache.
	Cached bool `json:"cached,omitempty"`
	// Truncated says the body was cut at the size cap.
	Truncated bool `json:"truncated,omitempty"`
	// RequestSize, ResponseSize and BodySize are the lengths of the octets in the payload;
	// written from Request, Response and Body. BodySize is also the length of the object
	// BodyRef names, when the body goes by reference.
	RequestSize  int64    `json:"request_size,omitempty"`
	ResponseSize int64    `json:"response_size,omitempty"`
	BodySize     int64    `json:"body_size,omitempty"`
	BodyRef      *BodyRef `json:"body_ref,omitempty"`

	Request  []byte `json:"-"`
	Response []byte `json:"-"`
	Body     []byte `json:"-"` // empty when BodyRef names it
}

// wireRendered is r as a page's metadata carries it: without its exchanges, which travel
// in the payload (a page's requests can be hundreds, and JetStream bounds a message's
// headers to 64 KiB).
func wireRendered(r *Rendered) *Rendered {
	w := *r
	w.Exchanges = nil
	return &w
}

// exchangesJSON is the list of r's exchanges as the payload carries it: JSON with their
// octets' lengths, not the octets.
func exchangesJSON(r *Rendered) ([]byte, error) {
	if len(r.Exchanges) == 0 {
		return nil, nil
	}
	list := make([]Exchange, len(r.Exchanges))
	for i, e := range r.Exchanges {
		e.RequestSize = headSize(e.Request, e.RequestSize)
		e.ResponseSize = headSize(e.Response, e.ResponseSize)
		if e.BodyRef == nil {
			e.BodySize = headSize(e.Body, e.BodySize)
		}
		e.Request, e.Response, e.Body = nil, nil, nil
		list[i] = e
	}
	b, err := stdjson.Marshal(list)
	if err != nil {
		return nil, fmt.Errorf("crawlmsg: encode exchanges: %w", err)
	}
	return b, nil
}

// exchangesSize is the length of the exchanges' octets and their list in the payload.
func exchangesSize(r *Rendered) int {
	if r == nil {
		return 0
	}
	n := 0
	for _, e := range r.Exchanges {
		n += len(e.Request) + len(e.Response)
		if e.BodyRef == nil {
			n += len(e.Body)
		}
	}
	js, _ := exchangesJSON(r)
	return n + len(js)
}

func appendExchanges(b []byte, r *Rendered) []byte {
	if r == nil {
		return b
	}
	for _, e := range r.Exchanges {
		b = append(b, e.Request...)
		b = append(b, e.Response...)
		if e.BodyRef == nil {
			b = append(b, e.Body...)
		}
	}
	return b
}

// splitExchanges cuts the exchanges' list and octets from the end of data and returns
// what is before them.
func (p *Page) splitExchanges(data []byte) ([]byte, error) {
	r := p.Meta.Rendered
	n := r.ExchangesSize
	if n < 0 || n > int64(len(data)) {
		return nil, fmt.Errorf("%w: page %s: payload of %d octets does not hold the %d of its exchanges' list", ErrMalformed, p.Meta.URL, len(data), n)
	}
	r.Exchanges = nil
	if n > 0 {
		if err := decode(data[int64(len(data))-n:], &r.Exchanges); err != nil {
			return nil, fmt.Errorf("%w: page %s: exchanges: %v", ErrMalformed, p.Meta.URL, err)
		}
	}
	data = data[:int64(len(data))-n]
	var tail int64
	for _, e := range r.Exchanges {
		if e.RequestSize < 0 || e.ResponseSize < 0 || e.BodySize < 0 {
			return nil, fmt.Errorf("%w: page %s: negative exchange sizes", ErrMalformed, p.Meta.URL)
		}
		tail += e.RequestSize + e.ResponseSize
		if e.BodyRef == nil {
			tail += e.BodySize
		}
	}
	if tail > int64(len(data)) {
		return nil, fmt.Errorf("%w: page %s: payload of %d octets does not hold the %d its exchanges name", ErrMalformed, p.Meta.URL, len(data), tail)
	}
	cut := len(data) - int(tail)
	rest := data[cut:]
	for i := range r.Exchanges {
		e := &r.Exchanges[i]
		e.Request, rest = rest[:e.RequestSize:e.RequestSize], rest[e.RequestSize:]
		e.Response, rest = rest[:e.ResponseSize:e.ResponseSize], rest[e.ResponseSize:]
		if e.BodyRef == nil {
			e.Body, rest = rest[:e.BodySize:e.BodySize], rest[e.BodySize:]
		}
	}
	return data[:cut:cut], nil
}
