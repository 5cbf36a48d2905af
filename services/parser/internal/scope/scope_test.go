package scope

import (
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/trawl/trawl/shared/crawlmsg"
)

func links(urls ...string) []crawlmsg.Link {
	out := make([]crawlmsg.Link, len(urls))
	for i, u := range urls {
		out[i] = crawlmsg.Link{URL: u, Tag: "a"}
	}
	return out
}

func urlsOf(ds []crawlmsg.Discovered) []string {
	var out []string
	for _, d := range ds {
		out = append(out, d.URL)
	}
	return out
}

func TestSelect(t *testing.T) {
	base := Config{Mode: Any, MaxDepth: 20, MaxURLLength: 2048, MaxOutlinks: 1000}
	long := "http://example.com/" + strings.Repeat("x", 100)
	tests := []struct {
		name  string
		cfg   func(*Config)
		page  Page
		links []crawlmsg.Link
		want  []string
		rej   Rejected
	}{
		{
			name:  "any scope keeps everything",
			page:  Page{URL: "http://www.example.com/a", Depth: 3},
			links: links("http://www.example.com/b", "https://other.org/c", "http://10.0.0.1:8080/d"),
			want:  []string{"http://www.example.com/b", "https://other.org/c", "http://10.0.0.1:8080/d"},
			rej:   Rejected{},
		},
		{
			name:  "link nofollow",
			page:  Page{URL: "http://example.com/", Depth: 0},
			links: []crawlmsg.Link{{URL: "http://example.com/a", NoFollow: true}, {URL: "http://example.com/b"}},
			want:  []string{"http://example.com/b"},
			rej:   Rejected{ReasonNoFollow: 1},
		},
		{
			name:  "page nofollow",
			page:  Page{URL: "http://example.com/", NoFollow: true},
			links: links("http://example.com/a", "http://example.com/b"),
			rej:   Rejected{ReasonNoFollow: 2},
		},
		{
			name:  "depth at the limit is emitted",
			page:  Page{URL: "http://example.com/", Depth: 19},
			links: links("http://example.com/a"),
			want:  []string{"http://example.com/a"},
			rej:   Rejected{},
		},
		{
			name:  "depth beyond the limit is not",
			page:  Page{URL: "http://example.com/", Depth: 20},
			links: []crawlmsg.Link{{URL: "http://example.com/a"}, {URL: "http://example.com/b", NoFollow: true}},
			rej:   Rejected{ReasonDepth: 1, ReasonNoFollow: 1},
		},
		{
			name:  "max depth zero crawls seeds only",
			cfg:   func(c *Config) { c.MaxDepth = 0 },
			page:  Page{URL: "http://example.com/", Depth: 0},
			links: links("http://example.com/a"),
			rej:   Rejected{ReasonDepth: 1},
		},
		{
			name:  "url length",
			cfg:   func(c *Config) { c.MaxURLLength = len(long) - 1 },
			page:  Page{URL: "http://example.com/"},
			links: links(long, "http://example.com/short"),
			want:  []string{"http://example.com/short"},
			rej:   Rejected{ReasonLength: 1},
		},
		{
			name:  "outlinks cap counts only links that pass the other rules",
			cfg:   func(c *Config) { c.MaxOutlinks = 2 },
			page:  Page{URL: "http://example.com/"},
			links: []crawlmsg.Link{{URL: "http://example.com/1", NoFollow: true}, {URL: "http://example.com/2"}, {URL: "http://example.com/3"}, {URL: "http://example.com/4"}, {URL: "http://example.com/5"}},
			want:  []string{"http://example.com/2", "http://example.com/3"},
			rej:   Rejected{ReasonNoFollow: 1, ReasonOutlinks: 2},
		},
		{
			name:  "batch byte budget",
			cfg:   func(c *Config) { c.MaxBatchBytes = 2 * (len("http://example.com/1") + discoveredOverhead) },
			page:  Page{URL: "http://example.com/"},
			links: links("http://example.com/1", "http://example.com/2", "http://example.com/3"),
			want:  []string{"http://example.com/1", "http://example.com/2"},
			rej:   Rejected{ReasonBatchBytes: 1},
		},
		{
			name: "host scope",
			cfg:  func(c *Config) { c.Mode = Host },
			page: Page{URL: "http://www.example.com:8080/a"},
			links: links("http://www.example.com/b", "https://WWW.example.com/c", "http://example.com/d",
				"http://cdn.example.com/e", "http://user@www.example.com:81/f"),
			want: []string{"http://www.example.com/b", "https://WWW.example.com/c", "http://user@www.example.com:81/f"},
			rej:  Rejected{ReasonScope: 2},
		},
		{
			name: "domain scope",
			cfg:  func(c *Config) { c.Mode = Domain },
			page: Page{URL: "http://news.example.co.uk/a"},
			links: links("http://example.co.uk/", "http://shop.example.co.uk/x", "http://other.co.uk/",
				"http://example.com/"),
			want: []string{"http://example.co.uk/", "http://shop.example.co.uk/x"},
			rej:  Rejected{ReasonScope: 2},
		},
		{
			name:  "domain scope: private suffixes separate their users",
			cfg:   func(c *Config) { c.Mode = Domain },
			page:  Page{URL: "https://alice.github.io/"},
			links: links("https://alice.github.io/x", "https://bob.github.io/", "https://github.io/"),
			want:  []string{"https://alice.github.io/x"},
			rej:   Rejected{ReasonScope: 2},
		},
		{
			name:  "domain scope: an IP address is its own domain",
			cfg:   func(c *Config) { c.Mode = Domain },
			page:  Page{URL: "http://127.0.0.1:8080/"},
			links: links("http://127.0.0.1:9090/a", "http://127.0.0.2/", "http://[::1]/"),
			want:  []string{"http://127.0.0.1:9090/a"},
			rej:   Rejected{ReasonScope: 2},
		},
		{
			name:  "domain scope: single-label hosts",
			cfg:   func(c *Config) { c.Mode = Domain },
			page:  Page{URL: "http://localhost:3000/"},
			links: links("http://localhost:3000/a", "http://a.localhost/", "http://intranet/"),
			want:  []string{"http://localhost:3000/a"},
			rej:   Rejected{ReasonScope: 2},
		},
		{
			name: "include and exclude, exclude wins",
			cfg: func(c *Config) {
				c.Include = regexp.MustCompile(`^https?://example\.com/(docs|blog)/`)
				c.Exclude = regexp.MustCompile(`/private/|\.pdf$`)
			},
			page:  Page{URL: "http://example.com/"},
			links: links("http://example.com/docs/a", "http://example.com/docs/private/b", "http://example.com/shop/c", "http://example.com/blog/d.pdf"),
			want:  []string{"http://example.com/docs/a"},
			rej:   Rejected{ReasonExclude: 2, ReasonInclude: 1},
		},
		{
			name:  "traps",
			page:  Page{URL: "http://example.com/"},
			links: links("http://example.com/a/b/a/b/a/b", "http://example.com/x/x/x", "http://example.com/a/b/a/b", "http://example.com/x/x/y?x/x/x"),
			want:  []string{"http://example.com/a/b/a/b", "http://example.com/x/x/y?x/x/x"},
			rej:   Rejected{ReasonTrap: 2},
		},
		{
			name:  "depth is page depth plus one",
			page:  Page{URL: "http://example.com/", Depth: 7},
			links: links("http://example.com/a"),
			want:  []string{"http://example.com/a"},
			rej:   Rejected{},
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
			got, rej := f.Select(tt.page, tt.links)
			if !reflect.DeepEqual(urlsOf(got), tt.want) {
				t.Errorf("emitted %v, want %v", urlsOf(got), tt.want)
			}
			if !reflect.DeepEqual(rej, tt.rej) {
				t.Errorf("rejected %v, want %v", rej, tt.rej)
			}
			for _, d := range got {
				if d.Depth != tt.page.Depth+1 || d.Via != crawlmsg.ViaLink {
					t.Errorf("%s: depth %d via %q, want depth %d via link", d.URL, d.Depth, d.Via, tt.page.Depth+1)
				}
			}
		})
	}
}

func TestParseMode(t *testing.T) {
	for in, want := range map[string]Mode{"any": Any, "HOST": Host, " domain ": Domain} {
		if got, err := ParseMode(in); err != nil || got != want {
			t.Errorf("ParseMode(%q) = %q, %v", in, got, err)
		}
	}
	if _, err := ParseMode("site"); err == nil {
		t.Error("ParseMode(site) accepted")
	}
	if _, err := New(Config{Mode: "site"}); err == nil {
		t.Error("New accepted an unknown mode")
	}
}
