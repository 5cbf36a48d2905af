package crawlmsg

import (
	"bytes"
	"errors"
	"testing"
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
		{"future version", `{"v":2,"urls":[]}`, &DiscoveredBatch{}, ErrVersion},
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
