package itest

import (
	"bytes"
	"context"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/trawl/trawl/devstack/natsembed"
	"github.com/trawl/trawl/devstack/warccheck"
	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/topology"
)

const renderedDOM = `<html><head><title>App</title></head><body><div id="root"><p>written by the script</p></div></body></html>`

// browserExchange is one request a renderer answered, as it publishes it.
func browserExchange(url, ctype string, body []byte) crawlmsg.Exchange {
	return crawlmsg.Exchange{
		URL: url, Method: "GET", Status: 200, ContentType: ctype, FetchedAt: time.Now().UnixMilli(), IP: "192.0.2.9", Verbatim: true,
		Request:  []byte("GET " + url + " HTTP/1.1\r\nHost: a.example\r\nUser-Agent: itest\r\n\r\n"),
		Response: []byte("HTTP/1.1 200 OK\r\nContent-Type: " + ctype + "\r\nContent-Length: " + itoa(len(body)) + "\r\n\r\n"),
		Body:     body,
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

// renderedPage is the rendered page of the shell at url, as a renderer publishes it: the
// DOM, a JSON the script fetched, a script by reference, one exchange from the cache.
func (s *stack) renderedPage(url, lease string) *crawlmsg.Page {
	js := bytes.Repeat([]byte("var x=1;"), 100)
	ref := browserExchange("http://cdn.example/app.js", "text/javascript", nil)
	ref.BodyRef, ref.BodySize = s.putObject(crawlmsg.RenderedExchangeBodyName(lease, 1), js), int64(len(js))
	cached := crawlmsg.Exchange{URL: "http://cdn.example/lib.js", Method: "GET", Status: 200, Cached: true, FetchedAt: time.Now().UnixMilli()}
	return &crawlmsg.Page{
		Meta: crawlmsg.PageMeta{URL: url, Host: "a.example", Status: 200, ContentType: "text/html", FetchedAt: time.Now().UnixMilli(), Lease: lease,
			Rendered: &crawlmsg.Rendered{Reason: "shell", RenderedAt: time.Now().UnixMilli(), DurationMs: 80,
				Exchanges: []crawlmsg.Exchange{browserExchange("http://a.example/api/page?path=%2F", "application/json", []byte(`{"text":"hi"}`)), ref, cached},
				Refused:   map[string]int{"robots": 1}}},
		Body: []byte(renderedDOM),
	}
}

func (s *stack) publishRendered(p *crawlmsg.Page) {
	s.t.Helper()
	m, err := crawlmsg.PageMsg(topology.SubjectPages, p)
	if err != nil {
		s.t.Fatal(err)
	}
	m.Header.Set(nats.MsgIdHdr, crawlmsg.RenderedMsgID(p.Meta.Lease))
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	if _, err := s.js.PublishMsg(ctx, m); err != nil {
		s.t.Fatal(err)
	}
}

// A rendered page is archived as what it is: its DOM as a resource record urn:dom:<URL>
// (never a response for the page's URL, which its fetch already has), each browser
// request Trawl answered as a request and a response record naming each other and the
// DOM, nothing for an answer from the cache; a failed rendering writes its exchanges and
// no DOM. Every record verifies and is indexed.
func TestArchiveRendered(t *testing.T) {
	s := newStack(t, nil)
	stop := s.start()
	s.publish(exchange("http://a.example/", 200, "Content-Type: text/html\r\n", []byte("<div id=root></div>"), false), "f1")
	s.publishRendered(s.renderedPage("http://a.example/", "f1"))
	failed := s.renderedPage("http://a.example/failed", "f2")
	failed.Meta.Rendered.Failed = "browser crashed twice"
	failed.Meta.Rendered.Exchanges = failed.Meta.Rendered.Exchanges[:1]
	s.publishRendered(failed)
	s.waitArchived()
	stop()

	a, err := warccheck.Check(s.dir)
	if err != nil {
		t.Fatalf("the archive does not read back:\n%v", err)
	}
	checkRendered(t, a)
}

func checkRendered(t *testing.T, a *warccheck.Archive) {
	t.Helper()
	caps := capturesByURL(a)
	if n := len(caps["http://a.example/"]); n != 1 {
		t.Fatalf("%d captures of the page's URL, want its fetch's alone", n)
	}
	doms := caps["urn:dom:http://a.example/"]
	if len(doms) != 1 {
		t.Fatalf("%d DOM records, want 1", len(doms))
	}
	dom := doms[0]
	if dom.Get("WARC-Type") != "resource" || dom.Get("Content-Type") != "text/html; charset=utf-8" || string(dom.Block) != renderedDOM {
		t.Fatalf("DOM record %+v: %q", dom.Fields, dom.Block)
	}
	if len(caps["urn:dom:http://a.example/failed"]) != 0 {
		t.Error("a failed rendering wrote a DOM record")
	}
	api := caps["http://a.example/api/page?path=%2F"]
	if len(api) != 2 {
		t.Fatalf("%d responses of the JSON, want one per rendering", len(api))
	}
	js := caps["http://cdn.example/app.js"]
	if len(js) != 1 || !bytes.Equal(payload(t, js[0]), bytes.Repeat([]byte("var x=1;"), 100)) {
		t.Fatalf("script by reference: %d records", len(js))
	}
	if c := js[0].All("WARC-Concurrent-To"); len(c) != 2 || c[1] != dom.Get("WARC-Record-ID") {
		t.Errorf("the script's response names %v, want its request and the DOM record", c)
	}
	if n := len(caps["http://cdn.example/lib.js"]); n != 0 {
		t.Errorf("an answer from the cache wrote %d records", n)
	}
	lines := map[string]string{}
	for _, l := range a.Index {
		lines[l.URL] = l.Mime + " " + l.Status
	}
	if lines["urn:dom:http://a.example/"] != "text/html 200" {
		t.Errorf("index of the DOM: %q", lines["urn:dom:http://a.example/"])
	}
}

// A rendered page's records written before a crash are indexed when the file is
// recovered.
func TestArchiveRenderedRecovered(t *testing.T) {
	s := newStack(t, nil)
	dead := s.newService()
	s.publish(exchange("http://a.example/", 200, "Content-Type: text/html\r\n", []byte("<div id=root></div>"), false), "f1")
	s.publishRendered(s.renderedPage("http://a.example/", "f1"))
	failed := s.renderedPage("http://a.example/failed", "f2")
	failed.Meta.Rendered.Failed = "browser crashed twice"
	failed.Meta.Rendered.Exchanges = failed.Meta.Rendered.Exchanges[:1]
	s.publishRendered(failed)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	msgs := natsembed.Hold(t, s.js, topology.StreamPages, topology.ConsumerArchiver, 3, waitFor)
	for i, err := range dead.HandleBatch(ctx, msgs) {
		if err != nil {
			t.Fatalf("page %d: %v", i, err)
		}
	}
	dead.Close() // no seal, no ack: the file is left open
	if open, _ := filepath.Glob(filepath.Join(s.dir, "*.warc.gz.open")); len(open) != 1 {
		t.Fatalf("open files %v", open)
	}
	stop := s.start()
	s.waitArchived()
	stop()
	a, err := warccheck.Check(s.dir)
	if err != nil {
		t.Fatalf("the archive does not read back:\n%v", err)
	}
	checkRendered(t, a)
}
