package scope

import (
	"reflect"
	"regexp"
	"testing"

	"github.com/trawl/trawl/shared/crawlmsg"
)

func TestSelectEmbeds(t *testing.T) {
	base := Config{Mode: Host, MaxDepth: 2, MaxURLLength: 2048, MaxOutlinks: 1000, MaxEmbedHops: 2}
	img := func(u string) crawlmsg.Link { return crawlmsg.Link{URL: u, Tag: "img"} }
	want := func(depth, hops int, urls ...string) []crawlmsg.Discovered {
		var out []crawlmsg.Discovered
		for _, u := range urls {
			out = append(out, crawlmsg.Discovered{URL: u, Depth: depth, Via: crawlmsg.ViaLink, Kind: crawlmsg.KindEmbed, Embeds: hops})
		}
		return out
	}
	tests := []struct {
		name   string
		cfg    func(*Config)
		page   Page
		embeds []crawlmsg.Link
		linked []crawlmsg.Discovered
		want   []crawlmsg.Discovered
		rej    Rejected
	}{
		{
			name:   "a requisite keeps its page's depth, at the depth limit too",
			page:   Page{URL: "http://example.com/", Depth: 2},
			embeds: []crawlmsg.Link{img("http://example.com/a.png")},
			want:   want(2, 1, "http://example.com/a.png"),
			rej:    Rejected{},
		},
		{
			name:   "one more embed hop than its page",
			page:   Page{URL: "http://example.com/site.css", Depth: 1, Embeds: 1},
			embeds: []crawlmsg.Link{img("http://example.com/font.woff2")},
			want:   want(1, 2, "http://example.com/font.woff2"),
			rej:    Rejected{},
		},
		{
			name:   "the chain is capped",
			page:   Page{URL: "http://example.com/imported.css", Embeds: 2},
			embeds: []crawlmsg.Link{img("http://example.com/a.png"), img("http://example.com/b.png")},
			rej:    Rejected{ReasonEmbedHops: 2},
		},
		{
			name:   "the cap is a setting",
			cfg:    func(c *Config) { c.MaxEmbedHops = 3 },
			page:   Page{URL: "http://example.com/imported.css", Embeds: 2},
			embeds: []crawlmsg.Link{img("http://example.com/a.png")},
			want:   want(0, 3, "http://example.com/a.png"),
			rej:    Rejected{},
		},
		{
			name:   "by default a requisite may leave the scope (a CDN)",
			page:   Page{URL: "http://example.com/"},
			embeds: []crawlmsg.Link{img("https://cdn.example.net/a.png")},
			want:   want(0, 1, "https://cdn.example.net/a.png"),
			rej:    Rejected{},
		},
		{
			name:   "TRAWL_EMBED_SCOPE=crawl holds it to the scope of links",
			cfg:    func(c *Config) { c.EmbedScope = EmbedCrawl },
			page:   Page{URL: "http://example.com/"},
			embeds: []crawlmsg.Link{img("https://cdn.example.net/a.png"), img("http://example.com/b.png")},
			want:   want(0, 1, "http://example.com/b.png"),
			rej:    Rejected{ReasonScope: 1},
		},
		{
			name:   "include binds requisites only in the crawl's scope",
			cfg:    func(c *Config) { c.Include = regexp.MustCompile(`/docs/`) },
			page:   Page{URL: "http://example.com/docs/"},
			embeds: []crawlmsg.Link{img("http://example.com/static/a.png")},
			want:   want(0, 1, "http://example.com/static/a.png"),
			rej:    Rejected{},
		},
		{
			name:   "exclude, length and traps bind requisites always",
			cfg:    func(c *Config) { c.Exclude = regexp.MustCompile(`\.mp4$`); c.MaxURLLength = 40 },
			page:   Page{URL: "http://example.com/"},
			embeds: []crawlmsg.Link{img("http://example.com/clip.mp4"), img("http://example.com/a/a/a/x.png"), img("http://example.com/" + "very-long-name-of-an-image.png"), img("http://example.com/ok.png")},
			want:   want(0, 1, "http://example.com/ok.png"),
			rej:    Rejected{ReasonExclude: 1, ReasonTrap: 1, ReasonLength: 1},
		},
		{
			name:   "nofollow is about links, not requisites",
			page:   Page{URL: "http://example.com/", NoFollow: true},
			embeds: []crawlmsg.Link{{URL: "http://example.com/a.png", NoFollow: true}},
			want:   want(0, 1, "http://example.com/a.png"),
			rej:    Rejected{},
		},
		{
			name:   "a URL followed as a link is not a requisite as well",
			page:   Page{URL: "http://example.com/"},
			embeds: []crawlmsg.Link{{URL: "http://example.com/frame.html", Tag: "frame"}, img("http://example.com/a.png")},
			linked: []crawlmsg.Discovered{{URL: "http://example.com/frame.html", Depth: 1, Via: crawlmsg.ViaLink}},
			want:   want(0, 1, "http://example.com/a.png"),
			rej:    Rejected{},
		},
		{
			name:   "requisites have an outlink cap of their own",
			cfg:    func(c *Config) { c.MaxOutlinks = 1 },
			page:   Page{URL: "http://example.com/"},
			embeds: []crawlmsg.Link{img("http://example.com/a.png"), img("http://example.com/b.png")},
			linked: []crawlmsg.Discovered{{URL: "http://example.com/page", Depth: 1, Via: crawlmsg.ViaLink}},
			want:   want(0, 1, "http://example.com/a.png"),
			rej:    Rejected{ReasonOutlinks: 1},
		},
		{
			name: "the page's links and requisites share its batch's bytes",
			// The link takes 23+48 octets, a requisite 24+48+28.
			cfg:    func(c *Config) { c.MaxBatchBytes = 71 + 100 },
			page:   Page{URL: "http://example.com/"},
			embeds: []crawlmsg.Link{img("http://example.com/a.png"), img("http://example.com/b.png")},
			linked: []crawlmsg.Discovered{{URL: "http://example.com/page", Depth: 1, Via: crawlmsg.ViaLink}},
			want:   want(0, 1, "http://example.com/a.png"),
			rej:    Rejected{ReasonBatchBytes: 1},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := base
			if tt.cfg != nil {
				tt.cfg(&cfg)
			}
			f, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			got, rej := f.SelectEmbeds(tt.page, tt.embeds, tt.linked)
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %+v\nwant %+v", got, tt.want)
			}
			if !reflect.DeepEqual(rej, tt.rej) {
				t.Errorf("rejected %v, want %v", rej, tt.rej)
			}
			g := crawlmsg.LinkGroup{Source: tt.page.URL, URLs: append(append([]crawlmsg.Discovered(nil), tt.linked...), got...)}
			b, err := crawlmsg.Marshal(&crawlmsg.DiscoveredBatch{Groups: []crawlmsg.LinkGroup{g}})
			if err != nil {
				t.Fatal(err)
			}
			if est := GroupSize(g); len(b) > est {
				t.Errorf("GroupSize %d under the encoded %d octets", est, len(b))
			}
		})
	}
}

func TestParseEmbedScope(t *testing.T) {
	for in, want := range map[string]EmbedScope{"any": EmbedAny, "Crawl": EmbedCrawl, " any ": EmbedAny} {
		if got, err := ParseEmbedScope(in); err != nil || got != want {
			t.Errorf("ParseEmbedScope(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := ParseEmbedScope("host"); err == nil {
		t.Error("ParseEmbedScope(host): want an error")
	}
}
