package service

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/topology"
)

// TestRenderedMsgFitsBesideItsMeta checks that what a rendered page inlines is sized by its
// measured Trawl-Meta: large response headers push bodies to the object store so that the
// message stays within the stream's message size (else JetStream refuses it for good and
// the render task is terminated), and small ones leave room for a body a fixed allowance
// would have sent by reference.
func TestRenderedMsgFitsBesideItsMeta(t *testing.T) {
	const (
		maxPayload = 1 << 20 // nats-server's default max_payload
		maxMsg     = 128 << 10
		inlineMax  = 1 << 20 // TRAWL_BODY_INLINE_MAX's default: the message size decides
	)
	// 48 KiB of Set-Cookie: under the fetcher's default TRAWL_MAX_HEADER_BYTES (64 KiB) and
	// JetStream's 64 KiB header block, which bound a render task's metadata, so a page like
	// this reaches the renderer.
	cookies := make([]string, 12)
	for i := range cookies {
		cookies[i] = fmt.Sprintf("c%d=%s", i, strings.Repeat("v", 4<<10))
	}
	large := map[string][]string{"Set-Cookie": cookies, "Content-Type": {"text/html"}}
	small := map[string][]string{"Content-Type": {"text/html"}, "Server": {"nginx"}}
	exchange := func(body []byte) crawlmsg.Exchange {
		return crawlmsg.Exchange{
			URL: "https://example.com/app.js", Method: "GET", Status: 200, ContentType: "text/javascript",
			Request:  []byte("GET /app.js HTTP/1.1\r\nHost: example.com\r\n\r\n"),
			Response: []byte("HTTP/1.1 200 OK\r\nContent-Type: text/javascript\r\n\r\n"),
			Body:     body,
		}
	}
	// Exchanges without bodies whose URLs are long (a tracking pixel's query): their list
	// in the payload is what they cost, about 1.6 KiB each.
	var longURLs []crawlmsg.Exchange
	for i := range 40 {
		e := exchange(nil)
		e.URL = fmt.Sprintf("https://example.com/p.gif?i=%d&q=%s", i, strings.Repeat("q", 1500))
		longURLs = append(longURLs, e)
	}
	const attempt = "lease-1.0011223344556677"
	for _, tc := range []struct {
		name         string
		header       map[string][]string
		dom          []byte
		exchanges    []crawlmsg.Exchange
		wantDOMRef   bool
		wantExchRefs []int
	}{
		{
			name:       "large headers send the DOM by reference",
			header:     large,
			dom:        bytes.Repeat([]byte("d"), 100<<10),
			wantDOMRef: true,
		},
		{
			name:         "large headers send an exchange's body by reference and keep the DOM",
			header:       large,
			dom:          bytes.Repeat([]byte("d"), 30<<10),
			exchanges:    []crawlmsg.Exchange{exchange(bytes.Repeat([]byte("j"), 53<<10))},
			wantExchRefs: []int{0},
		},
		{
			// The list of 40 exchanges takes about 64 KiB of the payload: beside it a DOM
			// of 60 KiB no longer fits, though 512 octets an exchange would have said so.
			name:       "a long list of exchanges sends the DOM by reference",
			header:     small,
			dom:        bytes.Repeat([]byte("d"), 60<<10),
			exchanges:  longURLs,
			wantDOMRef: true,
		},
		{
			// 116 KiB: past what a fixed 16 KiB allowance for the metadata left (108 KiB).
			name:   "small headers keep a DOM near the message size inline",
			header: small,
			dom:    bytes.Repeat([]byte("d"), 116<<10),
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			task := &crawlmsg.RenderTask{Reason: "host", Page: crawlmsg.Page{Meta: crawlmsg.PageMeta{
				URL: "https://example.com/", Host: "example.com", Lease: "lease-1", Status: 200,
				Header: tc.header, ContentType: "text/html", Charset: "utf-8",
			}}}
			rendered := &crawlmsg.Rendered{Reason: "host", RenderedAt: 1, DurationMs: 1, Exchanges: slices.Clone(tc.exchanges)}
			room := func(metaLen int) int64 { return topology.PageInlineMax(inlineMax, maxPayload, maxMsg, metaLen) }
			var put []string
			msg, err := renderedMsg(task, rendered, tc.dom, attempt, room, func(name string, b []byte) (*crawlmsg.BodyRef, error) {
				put = append(put, name)
				return &crawlmsg.BodyRef{Bucket: topology.BodiesBucket, Name: name, Size: int64(len(b))}, nil
			})
			if err != nil {
				t.Fatal(err)
			}
			// max_payload and the stream's MaxMsgSize count the header block with the data.
			if size := msg.Size() - len(msg.Subject); size > maxMsg {
				t.Errorf("message of %d octets (Trawl-Meta %d, payload %d) over the %d the stream stores",
					size, len(msg.Header.Get(crawlmsg.MetaHeader)), len(msg.Data), maxMsg)
			}
			var want []string
			for _, i := range tc.wantExchRefs {
				want = append(want, crawlmsg.RenderedExchangeBodyName(attempt, i))
			}
			if tc.wantDOMRef {
				want = append(want, crawlmsg.RenderedBodyName(attempt))
			}
			if !slices.Equal(put, want) {
				t.Errorf("bodies sent by reference %q, want %q", put, want)
			}

			// What was kept inline reads back as it was rendered.
			page, err := crawlmsg.DecodePage(msg.Header, msg.Data)
			if err != nil {
				t.Fatal(err)
			}
			if got := page.Meta.Header["Set-Cookie"]; !slices.Equal(got, tc.header["Set-Cookie"]) {
				t.Errorf("Set-Cookie not carried: %d values, want %d", len(got), len(tc.header["Set-Cookie"]))
			}
			if !tc.wantDOMRef && !bytes.Equal(page.Body, tc.dom) {
				t.Errorf("inline DOM of %d octets read back as %d", len(tc.dom), len(page.Body))
			}
			if got := page.Meta.Rendered.Exchanges; len(got) != len(tc.exchanges) {
				t.Fatalf("%d exchanges read back, want %d", len(got), len(tc.exchanges))
			}
			for i, e := range page.Meta.Rendered.Exchanges {
				if e.BodyRef == nil && !bytes.Equal(e.Body, tc.exchanges[i].Body) {
					t.Errorf("inline body of exchange %d read back as %d octets, want %d", i, len(e.Body), len(tc.exchanges[i].Body))
				}
			}
		})
	}
}
