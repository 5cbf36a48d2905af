package service

import (
	"context"
	"fmt"
	"time"

	"github.com/trawl/trawl/services/archiver/internal/warc"
	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/natsx"
)

// rendering reads a rendered page into its records: the DOM as a resource record, and each
// request the browser made that Trawl answered as a request and a response record. The
// page's own fetch was archived when it was fetched (its page message on crawl.pages), so
// the rendered page writes no response for the page's URL: the DOM is not what the server
// sent, and replay must not serve it as such. Exchanges answered from the subresource
// cache carry no octets (their request was made, and archived, for an earlier page) and
// write nothing. A rendering that failed (Rendered.Failed) has no DOM: only its exchanges
// are written, and its DOM record is left out.
func (s *Service) rendering(ctx context.Context, page *crawlmsg.Page, key string) ([]*warc.Built, error) {
	meta, r := &page.Meta, page.Meta.Rendered
	dom := page.Body
	if ref := meta.BodyRef; ref != nil && r.Failed == "" {
		var err error
		if dom, err = s.object(ctx, meta.URL, ref); err != nil {
			return nil, err
		}
	}
	rd := &warc.Rendering{Key: key, URL: meta.URL, Date: time.UnixMilli(r.RenderedAt).UTC(), DOM: dom}
	for i := range r.Exchanges {
		e := &r.Exchanges[i]
		if e.Cached {
			continue
		}
		if len(e.Request) == 0 || len(e.Response) == 0 {
			return nil, natsx.Permanent(fmt.Errorf("archiver: %s: %w: exchange %d (%s) has no request or response head", meta.URL, crawlmsg.ErrMalformed, i, e.URL))
		}
		body := e.Body
		if e.BodyRef != nil {
			var err error
			if body, err = s.object(ctx, e.URL, e.BodyRef); err != nil {
				return nil, err
			}
		}
		rd.Exchanges = append(rd.Exchanges, &warc.Exchange{URL: e.URL, Date: time.UnixMilli(e.FetchedAt).UTC(), IP: e.IP,
			RequestHead: e.Request, ResponseHead: e.Response, Payload: body, Truncated: e.Truncated})
	}
	// A failed rendering's body is the page as fetched, already archived: no DOM was taken.
	rd.NoDOM = r.Failed != ""
	return warc.BuildRendering(rd), nil
}
