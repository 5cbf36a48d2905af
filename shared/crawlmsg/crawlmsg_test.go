package crawlmsg

import (
	"bytes"
	"encoding/base64"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
)

func TestRoundTrip(t *testing.T) {
	in := &FetchTask{Shard: 1, Host: "example.com", URL: "http://example.com/", Depth: 2, Lease: "s1:7", Deadline: 123}
	data, err := Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	var out FetchTask
	if err := Unmarshal(data, &out); err != nil {
		t.Fatal(err)
	}
	if out != *in || out.V != Version {
		t.Fatalf("round trip: got %+v, want %+v", out, *in)
	}
}

func TestUnmarshalErrors(t *testing.T) {
	tests := []struct {
		name string
		data string
		into any
		want error
	}{
		{"not json", "{", &DiscoveredBatch{}, ErrMalformed},
		{"wrong type", `{"v":1,"urls":"x"}`, &DiscoveredBatch{}, ErrMalformed},
		{"future version", `{"v":3,"urls":[]}`, &DiscoveredBatch{}, ErrVersion},
		{"groups in version 1", `{"v":1,"groups":[{"urls":[]}]}`, &DiscoveredBatch{}, ErrMalformed},
		{"version 2 without groups", `{"v":2,"urls":[{"url":"http://a/"}]}`, &FrontierBatch{}, ErrMalformed},
		{"version 2 with a top-level source", `{"v":2,"source":"http://a/","groups":[{"urls":[]}]}`, &DiscoveredBatch{}, ErrMalformed},
		{"missing version", `{"urls":[]}`, &FrontierBatch{}, ErrVersion},
		{"task without lease", `{"v":1,"url":"http://a/","host":"a"}`, &FetchTask{}, ErrMalformed},
		{"outcome without kind", `{"v":1,"host":"a","lease":"x"}`, &Outcome{}, ErrMalformed},
		{"page without url", `{"v":1}`, &PageMeta{}, ErrMalformed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := Unmarshal([]byte(tc.data), tc.into); !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
		})
	}
}

// One link group is written as version 1, which every release reads; several as version
// 2; and a reader gets the groups of either.
func TestLinkGroups(t *testing.T) {
	a := LinkGroup{Source: "http://a.example/", URLs: []Discovered{{URL: "http://b.example/", Depth: 1}}}
	b := LinkGroup{Source: "http://c.example/", URLs: []Discovered{{URL: "http://d.example/", Depth: 2}}}
	tests := []struct {
		name    string
		in      DiscoveredBatch
		version int
		want    []LinkGroup
	}{
		{"fields of version 1", DiscoveredBatch{Source: a.Source, URLs: a.URLs}, Version, []LinkGroup{a}},
		{"one group", DiscoveredBatch{Groups: []LinkGroup{a}}, Version, []LinkGroup{a}},
		{"two groups", DiscoveredBatch{Groups: []LinkGroup{a, b}}, LinksVersion, []LinkGroup{a, b}},
		{"seeds", DiscoveredBatch{URLs: []Discovered{{URL: "http://s.example/", Via: ViaSeed}}}, Version,
			[]LinkGroup{{URLs: []Discovered{{URL: "http://s.example/", Via: ViaSeed}}}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			data, err := Marshal(&tc.in)
			if err != nil {
				t.Fatal(err)
			}
			var d DiscoveredBatch
			if err := Unmarshal(data, &d); err != nil {
				t.Fatalf("%s: %v", data, err)
			}
			if d.V != tc.version || !reflect.DeepEqual(d.LinkGroups(), tc.want) {
				t.Fatalf("%s read back as v%d %+v, want v%d %+v", data, d.V, d.LinkGroups(), tc.version, tc.want)
			}
			// A frontier batch has the same shape and rules.
			var f FrontierBatch
			if err := Unmarshal(data, &f); err != nil || !reflect.DeepEqual(f.LinkGroups(), tc.want) {
				t.Fatalf("as a frontier batch: %+v, %v", f.LinkGroups(), err)
			}
		})
	}
}

// A fetcher reads a batch of tasks and a single task of an earlier scheduler alike, and
// refuses what it cannot serve whole.
func TestDecodeTasks(t *testing.T) {
	a := FetchTask{Shard: 1, Host: "a.example", URL: "http://a.example/", Lease: "1-1-x", Deadline: 9}
	b := FetchTask{Shard: 1, Host: "b.example", URL: "http://b.example/p", Depth: 2, Lease: "1-2-x", Deadline: 9}
	batch, err := Marshal(&TaskBatch{Tasks: []FetchTask{a, b}})
	if err != nil {
		t.Fatal(err)
	}
	single, err := Marshal(&a)
	if err != nil {
		t.Fatal(err)
	}
	a1, b1 := a, b
	a1.V, b1.V = Version, Version
	tests := []struct {
		name string
		data string
		want []FetchTask
		err  error
	}{
		{"batch", string(batch), []FetchTask{a1, b1}, nil},
		{"single task", string(single), []FetchTask{a1}, nil},
		{"empty batch", `{"v":2,"tasks":[]}`, nil, ErrMalformed},
		{"task without lease", `{"v":2,"tasks":[{"host":"a","url":"http://a/"}]}`, nil, ErrMalformed},
		{"future version", `{"v":3,"tasks":[]}`, nil, ErrVersion},
		{"not json", `{"v":`, nil, ErrMalformed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := DecodeTasks([]byte(tc.data))
			if !errors.Is(err, tc.err) || !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %+v, %v; want %+v, %v", got, err, tc.want, tc.err)
			}
		})
	}
	if bytes.Contains(batch, []byte(`"v":0`)) {
		t.Errorf("tasks in a batch carry a version: %s", batch)
	}
}

// A lone task decodes field for field as Unmarshal reads it, whichever fields it has, and
// a batch's tasks keep theirs: the one-pass decoder must not lose a field to the other form.
func TestDecodeTasksEveryField(t *testing.T) {
	var full FetchTask
	fill(t, reflect.ValueOf(&full).Elem(), 1)
	full.V = 0
	tests := []struct {
		name string
		v    any
		want func() []FetchTask
	}{
		{"single", &full, func() []FetchTask {
			var want FetchTask
			data, _ := Marshal(&full)
			if err := Unmarshal(data, &want); err != nil {
				t.Fatal(err)
			}
			return []FetchTask{want}
		}},
		{"batch", &TaskBatch{Tasks: []FetchTask{full, full}}, func() []FetchTask {
			w := full
			w.V = Version
			return []FetchTask{w, w}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			data, err := Marshal(tc.v)
			if err != nil {
				t.Fatal(err)
			}
			want := tc.want()
			got, err := DecodeTasks(data)
			if err != nil || !reflect.DeepEqual(got, want) {
				t.Fatalf("DecodeTasks(%s) = %+v, %v; want %+v", data, got, err, want)
			}
		})
	}
}

func TestPageMsg(t *testing.T) {
	p := &Page{Meta: PageMeta{URL: "http://a/", Status: 200, ContentType: "text/html"}, Body: []byte("<html>")}
	m, err := PageMsg("crawl.pages", p)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodePage(m.Header, m.Data)
	if err != nil {
		t.Fatal(err)
	}
	if got.Meta.URL != p.Meta.URL || !bytes.Equal(got.Body, p.Body) || !got.Meta.IsHTML() {
		t.Fatalf("decoded %+v", got)
	}
	if _, err := DecodePage(nil, []byte("x")); !errors.Is(err, ErrMalformed) {
		t.Fatalf("page without header: %v", err)
	}
}

// A page with a capture is version 2: the heads and the body as received follow the body
// in the payload, never in a header (JetStream refuses headers over 64 KiB in all), and
// are cut back out by the lengths the metadata gives, whatever their size, a body or a raw
// body by reference included. A payload that does not hold what the metadata names is
// refused.
func TestPageMsgCapture(t *testing.T) {
	req, resp := []byte("GET / HTTP/1.1\r\n\r\n"), []byte("HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\n\r\n")
	big := bytes.Repeat([]byte{0x1f, 0x8b, 0, 0xff, '\r', '\n'}, 50_000) // 300 KB, base64 400 KB
	ref := &BodyRef{Bucket: "CRAWL_BODIES", Name: "x", Size: 9}
	for _, tc := range []struct {
		name            string
		body, raw       []byte
		bodyRef, rawRef bool
	}{
		{name: "plain page, no raw", body: []byte("<html>")},
		{name: "small raw", body: []byte("<html>"), raw: []byte{0x1f, 0x8b, 0, 0xff}},
		{name: "raw of 300 KB", body: []byte("<html>"), raw: big},
		{name: "empty body", raw: big},
		{name: "body by reference, raw inline", bodyRef: true, raw: big},
		{name: "raw by reference", body: []byte("<html>"), raw: big, rawRef: true},
		{name: "both by reference", bodyRef: true, raw: big, rawRef: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &Page{Meta: PageMeta{URL: "http://a/", Status: 200, Capture: &Capture{Request: req, Response: resp, RawSize: int64(len(tc.raw))}}, Body: tc.body, Raw: tc.raw}
			if tc.bodyRef {
				p.Meta.BodyRef, p.Body = ref, nil
			}
			if tc.rawRef {
				p.Meta.Capture.RawRef, p.Raw = ref, nil
			}
			m, err := PageMsg("crawl.pages", p)
			if err != nil {
				t.Fatal(err)
			}
			if m.Header.Get(RawHeader) != "" || len(m.Header.Get(MetaHeader)) > 1024 {
				t.Fatalf("headers carry octets: %d of metadata, raw header %t", len(m.Header.Get(MetaHeader)), m.Header.Get(RawHeader) != "")
			}
			if len(m.Data) != PayloadSize(p) {
				t.Fatalf("payload %d octets, PayloadSize says %d", len(m.Data), PayloadSize(p))
			}
			got, err := DecodePage(m.Header, m.Data)
			if err != nil {
				t.Fatal(err)
			}
			if got.Meta.V != PageCaptureVersion {
				t.Fatalf("v=%d, want %d", got.Meta.V, PageCaptureVersion)
			}
			c := got.Meta.Capture
			if !bytes.Equal(got.Body, p.Body) || !bytes.Equal(c.Request, req) || !bytes.Equal(c.Response, resp) || !bytes.Equal(got.Raw, p.Raw) {
				t.Fatalf("decoded body %d octets, request %q, response %q, raw %d octets", len(got.Body), c.Request, c.Response, len(got.Raw))
			}
			if c.RawSize != int64(len(tc.raw)) || (c.RawRef != nil) != tc.rawRef || (got.Meta.BodyRef != nil) != tc.bodyRef {
				t.Fatalf("capture %+v, body ref %v", c, got.Meta.BodyRef)
			}
			// An append to the body must not write over the heads that follow it.
			_ = append(got.Body, 'X')
			if !bytes.Equal(c.Request, req) {
				t.Fatal("the body's slice reaches into the request head")
			}
			if _, err := DecodePage(m.Header, m.Data[:len(m.Data)-1]); tc.bodyRef && !errors.Is(err, ErrMalformed) {
				t.Fatalf("payload one octet short, body by reference: %v", err)
			}
		})
	}
	// The metadata names more than the payload holds.
	p := &Page{Meta: PageMeta{URL: "http://a/", Capture: &Capture{Request: req, Response: resp}}}
	m, _ := PageMsg("crawl.pages", p)
	if _, err := DecodePage(m.Header, m.Data[:3]); !errors.Is(err, ErrMalformed) {
		t.Fatalf("short payload: %v", err)
	}
	// A version 2 page without its capture.
	h := nats.Header{}
	h.Set(MetaHeader, `{"v":2,"url":"http://a/","status":200}`)
	if _, err := DecodePage(h, []byte("x")); !errors.Is(err, ErrMalformed) {
		t.Fatalf("v2 without capture: %v", err)
	}
	// A page without a capture is still version 1, its payload the body alone.
	m, _ = PageMsg("crawl.pages", &Page{Meta: PageMeta{URL: "http://a/"}, Body: []byte("<html>")})
	if got, err := DecodePage(m.Header, m.Data); err != nil || got.Meta.V != Version || string(m.Data) != "<html>" {
		t.Fatalf("page without capture: %+v, %v", got, err)
	}
}

// Version 1 pages, written by fetchers of the earlier release, are still read: the heads
// in the metadata as base64, the raw body in the Trawl-Raw-Body header, the payload the
// body alone. A raw header that disagrees with the capture is refused.
func TestDecodePageVersion1(t *testing.T) {
	raw := []byte{0x1f, 0x8b, 0, 0xff, '\r', '\n'}
	h := nats.Header{}
	h.Set(MetaHeader, `{"v":1,"url":"http://a/","host":"a","depth":0,"status":200,"fetched_at":1,"duration_ms":1,`+
		`"capture":{"request":"R0VUIC8gSFRUUC8xLjENCg0K","response":"SFRUUC8xLjEgMjAwIE9LDQoNCg==","verbatim":true,"raw_size":6}}`)
	h.Set(RawHeader, base64.StdEncoding.EncodeToString(raw))
	got, err := DecodePage(h, []byte("<html>"))
	if err != nil {
		t.Fatal(err)
	}
	c := got.Meta.Capture
	if got.Meta.V != 1 || string(got.Body) != "<html>" || !bytes.Equal(got.Raw, raw) || string(c.Request) != "GET / HTTP/1.1\r\n\r\n" || string(c.Response) != "HTTP/1.1 200 OK\r\n\r\n" {
		t.Fatalf("decoded %+v, capture %+v", got, c)
	}
	h.Set(RawHeader, "AAAA")
	if _, err := DecodePage(h, []byte("<html>")); !errors.Is(err, ErrMalformed) {
		t.Fatalf("raw body of the wrong size: %v", err)
	}
}

func TestExtra(t *testing.T) {
	for _, tc := range []struct {
		name string
		x    Extra
		enc  string // "" = only check the round trip
	}{
		{name: "plain page costs nothing", x: Extra{}, enc: ""},
		{name: "embed", x: Extra{Kind: KindEmbed, Embeds: 2}},
		{name: "sitemap", x: Extra{Kind: KindSitemap}},
		{name: "cross-submitted sitemap", x: Extra{Kind: KindSitemap, Under: "https://a.example/"}},
		{name: "recrawl state", x: Extra{Recrawl: &Recrawl{ETag: `"v 1"`, LastModified: "Mon, 02 Jan 2006 15:04:05 GMT", Digest: "ab", SimHash: "0123456789abcdef", Interval: 3600000, Gone: 1, Fetches: 3}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := tc.x.Encode()
			if err != nil {
				t.Fatal(err)
			}
			if tc.x.IsZero() && s != tc.enc {
				t.Fatalf("Encode() = %q, want %q", s, tc.enc)
			}
			if strings.ContainsAny(s, " \t\r\n") {
				t.Fatalf("Encode() = %q: a queue entry extension must hold no space", s)
			}
			got, err := DecodeExtra(s)
			if err != nil || !reflect.DeepEqual(got, tc.x) {
				t.Fatalf("DecodeExtra(%q) = %+v, %v; want %+v", s, got, err, tc.x)
			}
		})
	}
	for _, bad := range []string{"not base64!", "e30x", "eyJrIjoid2hhdCJ9" /* {"k":"what"} */, "eyJlIjotMX0" /* {"e":-1} */} {
		if _, err := DecodeExtra(bad); !errors.Is(err, ErrMalformed) {
			t.Errorf("DecodeExtra(%q) = %v, want ErrMalformed", bad, err)
		}
	}
}
