package scope

import (
	"reflect"
	"regexp"
	"testing"

	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/policy"
)

// rulesOf compiles rules given as scope → a function setting its fields.
func rulesOf(t *testing.T, rules map[string]func(r *policy.Rule)) *policy.Set {
	t.Helper()
	var st []policy.Stored
	for s, f := range rules {
		sc, err := policy.ParseScope(s)
		if err != nil {
			t.Fatal(err)
		}
		r := policy.Stored{Rule: policy.Rule{Scope: sc}, Origin: policy.Origin{Version: 1}}
		f(&r.Rule)
		st = append(st, r)
	}
	set, err := policy.Compile(st, 1)
	if err != nil {
		t.Fatal(err)
	}
	return set
}

func TestSelectPolicy(t *testing.T) {
	depth := func(n int) func(r *policy.Rule) { return func(r *policy.Rule) { r.MaxDepth = &n } }
	exclude := func(p ...string) func(r *policy.Rule) { return func(r *policy.Rule) { r.Exclude = p } }
	include := func(p ...string) func(r *policy.Rule) { return func(r *policy.Rule) { r.Include = p } }
	delay := func(r *policy.Rule) { d := policy.Duration(5e9); r.MinDelay = &d }
	base := Config{Mode: Any, MaxDepth: 20, MaxURLLength: 2048, MaxOutlinks: 1000}
	tests := []struct {
		name  string
		cfg   func(*Config)
		rules map[string]func(r *policy.Rule)
		page  Page
		links []crawlmsg.Link
		want  []string
		rej   Rejected
	}{
		{
			name:  "a host rule's exclude refuses its host's links only",
			rules: map[string]func(r *policy.Rule){"host:example.com": exclude(`/private/`)},
			page:  Page{URL: "http://example.com/"},
			links: links("http://example.com/private/a", "http://example.com/b", "http://other.test/private/c"),
			want:  []string{"http://example.com/b", "http://other.test/private/c"},
			rej:   Rejected{ReasonPolicyExclude: 1},
		},
		{
			name:  "a domain rule's include holds every name under it",
			rules: map[string]func(r *policy.Rule){"domain:example.com": include(`/docs/`)},
			page:  Page{URL: "http://example.com/"},
			links: links("http://www.example.com/docs/a", "http://shop.example.com/cart", "http://other.test/cart"),
			want:  []string{"http://www.example.com/docs/a", "http://other.test/cart"},
			rej:   Rejected{ReasonPolicyInclude: 1},
		},
		{
			name:  "a rule's max depth, at the link's depth",
			rules: map[string]func(r *policy.Rule){"host:deep.test": depth(2)},
			page:  Page{URL: "http://deep.test/", Depth: 2},
			links: links("http://deep.test/a", "http://other.test/a"),
			want:  []string{"http://other.test/a"},
			rej:   Rejected{ReasonPolicyDepth: 1},
		},
		{
			name:  "the link at the rule's depth is followed",
			rules: map[string]func(r *policy.Rule){"host:deep.test": depth(2)},
			page:  Page{URL: "http://deep.test/", Depth: 1},
			links: links("http://deep.test/a"),
			want:  []string{"http://deep.test/a"},
			rej:   Rejected{},
		},
		{
			name:  "a URL prefix rule beats its host's rule",
			rules: map[string]func(r *policy.Rule){"host:example.com": exclude(`\.pdf$`), "https://example.com/papers/": exclude(`draft`)},
			page:  Page{URL: "https://example.com/"},
			links: links("https://example.com/papers/final.pdf", "https://example.com/papers/draft.html", "https://example.com/a.pdf"),
			want:  []string{"https://example.com/papers/final.pdf"},
			rej:   Rejected{ReasonPolicyExclude: 2},
		},
		{
			name:  "a rule never widens the process-wide scope",
			cfg:   func(c *Config) { c.MaxDepth = 1; c.Exclude = regexp.MustCompile(`/tmp/`) },
			rules: map[string]func(r *policy.Rule){"host:example.com": depth(10)},
			page:  Page{URL: "http://example.com/", Depth: 0},
			links: links("http://example.com/tmp/a", "http://example.com/b"),
			want:  []string{"http://example.com/b"},
			rej:   Rejected{ReasonExclude: 1},
		},
		{
			name:  "rules of other fields refuse nothing",
			rules: map[string]func(r *policy.Rule){"host:example.com": delay},
			page:  Page{URL: "http://example.com/"},
			links: links("http://example.com/a"),
			want:  []string{"http://example.com/a"},
			rej:   Rejected{},
		},
		{
			name:  "refused links leave room under the outlink cap",
			cfg:   func(c *Config) { c.MaxOutlinks = 1 },
			rules: map[string]func(r *policy.Rule){"host:example.com": exclude(`/x`)},
			page:  Page{URL: "http://example.com/"},
			links: links("http://example.com/x1", "http://example.com/y"),
			want:  []string{"http://example.com/y"},
			rej:   Rejected{ReasonPolicyExclude: 1},
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
			tt.page.Rules = rulesOf(t, tt.rules)
			got, rej := f.Select(tt.page, tt.links)
			if !reflect.DeepEqual(urlsOf(got), tt.want) {
				t.Errorf("emitted %v, want %v", urlsOf(got), tt.want)
			}
			if !reflect.DeepEqual(rej, tt.rej) {
				t.Errorf("rejected %v, want %v", rej, tt.rej)
			}
		})
	}
}

// Requisites are held to the rules only where they are held to the crawl's scope.
func TestSelectEmbedsPolicy(t *testing.T) {
	rules := rulesOf(t, map[string]func(r *policy.Rule){"host:example.com": func(r *policy.Rule) { r.Exclude = []string{`\.mp4$`} }})
	embeds := []crawlmsg.Link{{URL: "http://example.com/clip.mp4", Tag: "video"}, {URL: "http://example.com/a.png", Tag: "img"}}
	for _, tc := range []struct {
		scope EmbedScope
		want  []string
		rej   Rejected
	}{
		{EmbedAny, []string{"http://example.com/clip.mp4", "http://example.com/a.png"}, Rejected{}},
		{EmbedCrawl, []string{"http://example.com/a.png"}, Rejected{ReasonPolicyExclude: 1}},
	} {
		t.Run(string(tc.scope), func(t *testing.T) {
			f, err := New(Config{Mode: Any, MaxDepth: 5, MaxEmbedHops: 2, EmbedScope: tc.scope})
			if err != nil {
				t.Fatal(err)
			}
			got, rej := f.SelectEmbeds(Page{URL: "http://example.com/", Rules: rules}, embeds, nil)
			if !reflect.DeepEqual(urlsOf(got), tc.want) || !reflect.DeepEqual(rej, tc.rej) {
				t.Errorf("got %v %v, want %v %v", urlsOf(got), rej, tc.want, tc.rej)
			}
		})
	}
}
