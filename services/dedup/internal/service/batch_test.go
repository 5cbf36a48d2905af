package service

import (
	"errors"
	"os"
	"slices"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/natsx"
	"github.com/trawl/trawl/shared/urlnorm"
)

// In the fixture, with 2 shards: a.test and c.test are shard 0, b.test is shard 1.
func TestParseFixture(t *testing.T) {
	data, err := os.ReadFile("testdata/discovered.json")
	if err != nil {
		t.Fatal(err)
	}
	p, err := parse(data, 3, 2, urlnorm.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if p.invalid != 3 || p.tooDeep != 1 {
		t.Errorf("invalid %d, too deep %d; want 3 (ftp, garbage, negative depth) and 1", p.invalid, p.tooDeep)
	}
	want := []candidate{
		{index: 0, shard: 0, d: crawlmsg.Discovered{URL: "http://a.test/page", Depth: 1, Via: crawlmsg.ViaLink}},
		{index: 1, shard: 1, d: crawlmsg.Discovered{URL: "http://b.test/~user", Depth: 2, Via: crawlmsg.ViaLink}},
		{index: 5, shard: 1, d: crawlmsg.Discovered{URL: "http://b.test/redirected", Depth: 3, Via: crawlmsg.ViaRedirect, Hops: 2}},
		{index: 7, shard: 0, d: crawlmsg.Discovered{URL: "http://c.test/", Depth: 0, Via: crawlmsg.ViaSeed}},
	}
	if !slices.Equal(p.cands, want) {
		t.Errorf("candidates\n got %+v\nwant %+v", p.cands, want)
	}
}

func TestParseDepthLimit(t *testing.T) {
	data, err := os.ReadFile("testdata/discovered.json")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		maxDepth, cands, tooDeep int
	}{
		{0, 1, 4},
		{2, 3, 2},
		{4, 5, 0},
	}
	for _, tt := range tests {
		p, err := parse(data, tt.maxDepth, 1, urlnorm.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if len(p.cands) != tt.cands || p.tooDeep != tt.tooDeep {
			t.Errorf("max depth %d: %d candidates, %d too deep; want %d, %d", tt.maxDepth, len(p.cands), p.tooDeep, tt.cands, tt.tooDeep)
		}
		for _, c := range p.cands {
			if c.shard != 0 {
				t.Errorf("one shard: %s in shard %d", c.d.URL, c.shard)
			}
		}
	}
}

func TestParseMalformedIsPermanent(t *testing.T) {
	tests := []struct {
		name string
		data string
		want error
	}{
		{"not json", "<html>", crawlmsg.ErrMalformed},
		{"urls not a list", `{"v":1,"urls":"http://a.test/"}`, crawlmsg.ErrMalformed},
		{"unknown version", `{"v":3,"urls":[]}`, crawlmsg.ErrVersion},
		{"no version", `{"urls":[{"url":"http://a.test/"}]}`, crawlmsg.ErrVersion},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := parse([]byte(tt.data), 20, 2, urlnorm.Options{})
			if !errors.Is(err, tt.want) || !natsx.IsPermanent(err) {
				t.Errorf("parse = %v, want permanent %v", err, tt.want)
			}
		})
	}
}

func TestRoute(t *testing.T) {
	data, err := os.ReadFile("testdata/discovered.json")
	if err != nil {
		t.Fatal(err)
	}
	p, err := parse(data, 3, 2, urlnorm.Options{})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		newIdx []int
		want   map[string][]string // Nats-Msg-Id → URLs
		subj   map[string]string   // Nats-Msg-Id → subject
	}{
		{
			name:   "both shards; non-candidates from a stale memo skipped",
			newIdx: []int{0, 2, 5, 7, 99},
			want: map[string][]string{
				"front:CRAWL_DISCOVERED:42:0": {"http://a.test/page", "http://c.test/"},
				"front:CRAWL_DISCOVERED:42:1": {"http://b.test/redirected"},
			},
			subj: map[string]string{"front:CRAWL_DISCOVERED:42:0": "crawl.frontier.0", "front:CRAWL_DISCOVERED:42:1": "crawl.frontier.1"},
		},
		{
			name:   "one shard",
			newIdx: []int{1},
			want:   map[string][]string{"front:CRAWL_DISCOVERED:42:1": {"http://b.test/~user"}},
			subj:   map[string]string{"front:CRAWL_DISCOVERED:42:1": "crawl.frontier.1"},
		},
		{name: "nothing new", newIdx: nil, want: map[string][]string{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			msgs, routed, err := route("CRAWL_DISCOVERED:42", p.sources, p.cands, tt.newIdx)
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			got := map[string][]string{}
			for _, m := range msgs {
				id := m.Header.Get(nats.MsgIdHdr)
				if m.Subject != tt.subj[id] {
					t.Errorf("%s on %s, want %s", id, m.Subject, tt.subj[id])
				}
				var b crawlmsg.FrontierBatch
				if err := crawlmsg.Unmarshal(m.Data, &b); err != nil {
					t.Fatal(err)
				}
				for _, d := range b.URLs {
					got[id] = append(got[id], d.URL)
					n++
				}
			}
			if routed != n || len(got) != len(tt.want) {
				t.Errorf("routed %d, got %v, want %v", routed, got, tt.want)
			}
			for id, urls := range tt.want {
				if !slices.Equal(got[id], urls) {
					t.Errorf("%s: %v, want %v", id, got[id], urls)
				}
			}
		})
	}
}

func TestRouteKeepsFields(t *testing.T) {
	cands := []candidate{{index: 3, shard: 0, d: crawlmsg.Discovered{URL: "http://a.test/r", Depth: 7, Via: crawlmsg.ViaRedirect, Hops: 4}}}
	msgs, _, err := route("CRAWL_DISCOVERED:1", []string{""}, cands, []int{3})
	if err != nil || len(msgs) != 1 {
		t.Fatalf("route = %v, %v", msgs, err)
	}
	var b crawlmsg.FrontierBatch
	if err := crawlmsg.Unmarshal(msgs[0].Data, &b); err != nil {
		t.Fatal(err)
	}
	if len(b.URLs) != 1 || b.URLs[0] != cands[0].d {
		t.Errorf("frontier entry %+v, want %+v (depth, via and hops carried)", b.URLs, cands[0].d)
	}
}

// A batch of several pages' links (version 2) keeps each page's group, with its source, in
// the frontier batch of every shard it reaches, in order; the seen test counts positions
// across the groups.
func TestRouteKeepsLinkGroups(t *testing.T) {
	data, err := os.ReadFile("testdata/discovered-groups.json")
	if err != nil {
		t.Fatal(err)
	}
	p, err := parse(data, 20, 2, urlnorm.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var idx []int
	for _, c := range p.cands {
		idx = append(idx, c.index)
	}
	if want := []int{0, 1, 2, 4, 5}; !slices.Equal(idx, want) || p.invalid != 1 {
		t.Fatalf("candidate positions %v (invalid %d), want %v and 1 invalid", idx, p.invalid, want)
	}
	// All but b.test/2 are new.
	msgs, routed, err := route("CRAWL_DISCOVERED:9", p.sources, p.cands, []int{0, 1, 2, 5})
	if err != nil || routed != 4 {
		t.Fatalf("route: %d routed, %v", routed, err)
	}
	type group struct {
		source string
		urls   []string
	}
	got := map[string][]group{}
	for _, m := range msgs {
		var b crawlmsg.FrontierBatch
		if err := crawlmsg.Unmarshal(m.Data, &b); err != nil {
			t.Fatal(err)
		}
		for _, g := range b.LinkGroups() {
			var us []string
			for _, d := range g.URLs {
				us = append(us, d.URL)
			}
			got[m.Subject] = append(got[m.Subject], group{g.Source, us})
		}
	}
	want := map[string][]group{
		// a.test and c.test are shard 0; b.test is shard 1.
		"crawl.frontier.0": {{"http://one.test/", []string{"http://a.test/1", "http://c.test/1"}}, {"http://two.test/", []string{"http://a.test/2"}}},
		"crawl.frontier.1": {{"http://one.test/", []string{"http://b.test/1"}}},
	}
	for subj, w := range want {
		if !slices.EqualFunc(got[subj], w, func(a, b group) bool { return a.source == b.source && slices.Equal(a.urls, b.urls) }) {
			t.Errorf("%s: %+v, want %+v", subj, got[subj], w)
		}
	}
	if len(got) != len(want) {
		t.Errorf("subjects %v", got)
	}
}
