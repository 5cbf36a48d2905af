package service

import (
	"slices"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/natsx"
	"github.com/trawl/trawl/shared/topology"
)

// deadPage is page p as natsx.DeadLetter parks it: its data and headers, and the
// Trawl-Dead-* headers saying where it came from, on crawl.dead.CRAWL_PAGES.
func deadPage(t *testing.T, p *crawlmsg.Page) *nats.Msg {
	t.Helper()
	m, err := crawlmsg.PageMsg(topology.SubjectPages, p)
	if err != nil {
		t.Fatal(err)
	}
	return deadLetterOf(m)
}

func deadLetterOf(m *nats.Msg) *nats.Msg {
	dm := nats.NewMsg(topology.DeadSubject(topology.StreamPages))
	dm.Data = m.Data
	for k, vs := range m.Header {
		dm.Header[k] = vs
	}
	dm.Header.Set(natsx.DeadStreamHdr, topology.StreamPages)
	dm.Header.Set(natsx.DeadSeqHdr, "7")
	dm.Header.Set(natsx.DeadSubjectHdr, m.Subject)
	dm.Header.Set(natsx.DeadReasonHdr, natsx.DeadPermanent)
	dm.Header.Set(natsx.DeadErrorHdr, "parser: body gone")
	return dm
}

func ref(name string, size int64) *crawlmsg.BodyRef {
	return &crawlmsg.BodyRef{Bucket: topology.BodiesBucket, Name: name, Size: size}
}

// TestPageObjects: a dead page letter pins every object its page would read again when
// replayed (the body, the body as received, a rendered page's DOM and exchange bodies),
// and nothing when it names none or cannot be read as a page.
func TestPageObjects(t *testing.T) {
	meta := func() crawlmsg.PageMeta {
		return crawlmsg.PageMeta{URL: "http://site.test/", Host: "site.test", Status: 200, ContentType: "text/html", Lease: "0-1-2"}
	}
	byRef := meta()
	byRef.BodyRef = ref("page:0-1-2", 9<<20)

	captured := meta()
	captured.Capture = &crawlmsg.Capture{
		Request: []byte("GET / HTTP/1.1\r\n\r\n"), Response: []byte("HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\n\r\n"),
		RawSize: 12 << 20, RawRef: ref("raw:0-1-2", 12<<20),
	}

	rendered := meta()
	rendered.BodyRef = ref(crawlmsg.RenderedBodyName("0-1-2"), 9<<20)
	ex := func(url, body string, r *crawlmsg.BodyRef) crawlmsg.Exchange {
		e := crawlmsg.Exchange{URL: url, Method: "GET", Status: 200, Body: []byte(body), BodyRef: r,
			Request: []byte("GET " + url + " HTTP/1.1\r\n\r\n"), Response: []byte("HTTP/1.1 200 OK\r\n\r\n")}
		if r != nil {
			e.Body, e.BodySize = nil, r.Size
		}
		return e
	}
	rendered.Rendered = &crawlmsg.Rendered{Reason: "app-shell", Exchanges: []crawlmsg.Exchange{
		ex("http://site.test/app.js", "", ref(crawlmsg.RenderedExchangeBodyName("0-1-2", 0), 5<<20)),
		ex("http://site.test/small.css", "a{}", nil),
		ex("http://site.test/data.json", "", ref(crawlmsg.RenderedExchangeBodyName("0-1-2", 2), 6<<20)),
	}}

	elsewhere := meta()
	elsewhere.BodyRef = &crawlmsg.BodyRef{Bucket: "OTHER", Name: "page:0-1-2", Size: 9 << 20}

	// Metadata naming a body but cut short: no replay could read it, so it pins nothing.
	undecodable := deadLetterOf(&nats.Msg{Subject: topology.SubjectPages, Header: nats.Header{
		crawlmsg.MetaHeader: {`{"v":1,"url":"http://site.test/","body_ref":{"bucket":"CRAWL_BODIES","name":"page:0-1-2"`},
	}})

	cases := []struct {
		name    string
		letter  *nats.Msg
		want    []string
		wantErr bool
	}{
		{"body by reference", deadPage(t, &crawlmsg.Page{Meta: byRef}), []string{"page:0-1-2"}, false},
		{"capture with the raw body by reference", deadPage(t, &crawlmsg.Page{Meta: captured, Body: []byte("<html></html>")}), []string{"raw:0-1-2"}, false},
		{"rendered page with exchanges by reference", deadPage(t, &crawlmsg.Page{Meta: rendered}),
			[]string{"render:0-1-2", crawlmsg.RenderedExchangeBodyName("0-1-2", 0), crawlmsg.RenderedExchangeBodyName("0-1-2", 2)}, false},
		{"inline page", deadPage(t, &crawlmsg.Page{Meta: meta(), Body: []byte("<html></html>")}), nil, false},
		{"reference outside the bodies bucket", deadPage(t, &crawlmsg.Page{Meta: elsewhere}), nil, false},
		{"undecodable letter", undecodable, nil, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := pageObjects(c.letter.Header, c.letter.Data)
			if (err != nil) != c.wantErr {
				t.Fatalf("error %v, want error %t", err, c.wantErr)
			}
			slices.Sort(got)
			want := slices.Clone(c.want)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Errorf("objects %q, want %q", got, want)
			}
		})
	}
}
