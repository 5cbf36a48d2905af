package crawlmsg

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go"
)

func TestRenderedPageRoundTrip(t *testing.T) {
	ex := func(url, body string, ref *BodyRef) Exchange {
		return Exchange{URL: url, Method: "GET", Status: 200, ContentType: "text/javascript", FetchedAt: 17, DurationMs: 2,
			Request: []byte("GET " + url + " HTTP/1.1\r\n\r\n"), Response: []byte("HTTP/1.1 200 OK\r\n\r\n"), Body: []byte(body), BodyRef: ref}
	}
	tests := []struct {
		name string
		page Page
	}{
		{"exchanges inline", Page{Meta: PageMeta{URL: "http://a.example/", Host: "a.example", Lease: "0-1-2", Rendered: &Rendered{
			Reason: "app-shell", Exchanges: []Exchange{ex("http://a.example/app.js", "console.log(1)", nil), ex("http://b.example/x.json", `{"a":1}`, nil)},
			Refused: map[string]int{"robots": 1}}}, Body: []byte("<html>rendered</html>")}},
		{"DOM and an exchange body by reference", Page{Meta: PageMeta{URL: "http://a.example/", Host: "a.example", Lease: "0-1-3",
			BodyRef: &BodyRef{Bucket: "CRAWL_BODIES", Name: RenderedBodyName("0-1-3"), Size: 9 << 20},
			Rendered: &Rendered{Exchanges: []Exchange{
				{URL: "http://a.example/big.js", Method: "GET", Status: 200, Request: []byte("GET /big.js HTTP/1.1\r\n\r\n"), Response: []byte("HTTP/1.1 200 OK\r\n\r\n"),
					BodySize: 5 << 20, BodyRef: &BodyRef{Bucket: "CRAWL_BODIES", Name: RenderedExchangeBodyName("0-1-3", 0), Size: 5 << 20}},
				{URL: "http://a.example/lib.js", Method: "GET", Status: 200, Cached: true},
				ex("http://a.example/s.css", "body{}", nil)}}}}},
		{"failed, with the fetched capture", Page{Meta: PageMeta{URL: "http://a.example/", Host: "a.example", Lease: "0-1-4",
			Capture:  &Capture{Request: []byte("GET / HTTP/1.1\r\n\r\n"), Response: []byte("HTTP/1.1 200 OK\r\n\r\n")},
			Rendered: &Rendered{Failed: "browser crashed on 3 attempts"}}, Body: []byte("<html>shell</html>")}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m, err := PageMsg("crawl.pages", &tc.page)
			if err != nil {
				t.Fatal(err)
			}
			got, err := DecodePage(m.Header, m.Data)
			if err != nil {
				t.Fatal(err)
			}
			if got.Meta.V != PageRenderedVersion || got.Meta.Rendered == nil {
				t.Fatalf("decoded v=%d rendered=%v, want v=%d rendered", got.Meta.V, got.Meta.Rendered, PageRenderedVersion)
			}
			if !bytes.Equal(got.Body, tc.page.Body) {
				t.Fatalf("body %q, want %q", got.Body, tc.page.Body)
			}
			if c := tc.page.Meta.Capture; c != nil && (!bytes.Equal(got.Meta.Capture.Request, c.Request) || !bytes.Equal(got.Meta.Capture.Response, c.Response)) {
				t.Fatalf("capture %q %q, want %q %q", got.Meta.Capture.Request, got.Meta.Capture.Response, c.Request, c.Response)
			}
			want := tc.page.Meta.Rendered
			if len(got.Meta.Rendered.Exchanges) != len(want.Exchanges) {
				t.Fatalf("%d exchanges, want %d", len(got.Meta.Rendered.Exchanges), len(want.Exchanges))
			}
			for i, e := range got.Meta.Rendered.Exchanges {
				w := want.Exchanges[i]
				if e.URL != w.URL || e.Cached != w.Cached || !bytes.Equal(e.Request, w.Request) || !bytes.Equal(e.Response, w.Response) || !bytes.Equal(e.Body, w.Body) {
					t.Fatalf("exchange %d = %+v, want %+v", i, e, w)
				}
				if (e.BodyRef == nil) != (w.BodyRef == nil) {
					t.Fatalf("exchange %d body ref %v, want %v", i, e.BodyRef, w.BodyRef)
				}
			}
		})
	}
}

func TestRenderTaskRoundTrip(t *testing.T) {
	task := &RenderTask{Reason: "app-shell", Page: Page{
		Meta: PageMeta{URL: "http://a.example/app", Host: "a.example", Depth: 2, Hops: 1, Kind: KindPage, Lease: "3-9-x", Status: 200,
			Header: map[string][]string{"Content-Type": {"text/html"}}, ContentType: "text/html", Recrawl: &Recrawl{Interval: 5},
			Capture: &Capture{Request: []byte("GET /app HTTP/1.1\r\n\r\n")}},
		Body: []byte(`<div id="root"></div><script src="/app.js"></script>`)}}
	m, err := RenderTaskMsg("crawl.render", task)
	if err != nil {
		t.Fatal(err)
	}
	if id := m.Header.Get(nats.MsgIdHdr); id != RenderTaskMsgID("3-9-x") {
		t.Fatalf("msg id %q", id)
	}
	got, err := DecodeRenderTask(m.Header, m.Data)
	if err != nil {
		t.Fatal(err)
	}
	if got.Reason != "app-shell" || got.Page.Meta.Capture != nil || string(got.Page.Body) != string(task.Page.Body) ||
		got.Page.Meta.Depth != 2 || got.Page.Meta.Hops != 1 || got.Page.Meta.Recrawl == nil || got.Page.Meta.Lease != "3-9-x" {
		t.Fatalf("decoded %+v", got)
	}
	if task.Page.Meta.Capture == nil {
		t.Fatal("RenderTaskMsg changed the caller's page")
	}

	// A rendered page is never a render task.
	rendered := Page{Meta: PageMeta{URL: "http://a.example/", Host: "a.example", Lease: "l", Rendered: &Rendered{}}}
	pm, err := PageMsg("crawl.render", &rendered)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := DecodeRenderTask(pm.Header, pm.Data); !errors.Is(err, ErrMalformed) {
		t.Fatalf("rendered page as a task: err %v, want ErrMalformed", err)
	}
}

// A page's requests can be hundreds: their list travels in the payload, so the metadata
// header (JetStream bounds a message's headers to 64 KiB) stays small whatever their
// number.
func TestRenderedPageWithManyExchanges(t *testing.T) {
	r := &Rendered{Reason: "app-shell"}
	for i := range 1000 {
		u := fmt.Sprintf("http://cdn.example/assets/chunk-%04d.js?v=0123456789abcdef", i)
		r.Exchanges = append(r.Exchanges, Exchange{URL: u, Method: "GET", Status: 200, ContentType: "text/javascript",
			Request: []byte("GET " + u + " HTTP/1.1\r\n\r\n"), Response: []byte("HTTP/1.1 200 OK\r\n\r\n"), Body: []byte("x();")})
	}
	m, err := PageMsg("crawl.pages", &Page{Meta: PageMeta{URL: "http://a.example/", Host: "a.example", Lease: "l", Rendered: r}, Body: []byte("<html></html>")})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(m.Header.Get(MetaHeader)); n > 1024 {
		t.Fatalf("metadata header of %d octets for 1000 exchanges, want it independent of their number", n)
	}
	got, err := DecodePage(m.Header, m.Data)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Meta.Rendered.Exchanges) != 1000 || string(got.Body) != "<html></html>" ||
		got.Meta.Rendered.Exchanges[999].URL != r.Exchanges[999].URL || string(got.Meta.Rendered.Exchanges[999].Body) != "x();" {
		t.Fatalf("decoded %d exchanges, body %q", len(got.Meta.Rendered.Exchanges), got.Body)
	}
}
