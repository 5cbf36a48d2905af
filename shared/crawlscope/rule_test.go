package crawlscope

import (
	"regexp"
	"strings"
	"testing"
)

func TestRuleCheck(t *testing.T) {
	long := "http://example.com/" + strings.Repeat("x", 100)
	inc := regexp.MustCompile(`^https?://example\.com/(docs|blog)/`)
	exc := regexp.MustCompile(`/private/|\.pdf$`)
	type link struct {
		url  string
		want Refusal // "" = followed
	}
	for _, tc := range []struct {
		name string
		rule Rule
		page string
		held bool // false: a requisite, exempt from the mode and Include
		urls []link
	}{
		{"any scope keeps everything", Rule{Mode: Any}, "http://www.example.com/a", true, []link{
			{"http://www.example.com/b", ""}, {"https://other.org/c", ""}, {"http://10.0.0.1:8080/d", ""}}},
		{"empty mode is any", Rule{}, "http://example.com/", true, []link{{"https://other.org/c", ""}}},
		{"url length", Rule{MaxURLLength: len(long) - 1}, "http://example.com/", true, []link{
			{long, RefusedLength}, {"http://example.com/short", ""}}},
		{"no length limit", Rule{}, "http://example.com/", true, []link{{long, ""}}},
		{"length is checked before the host", Rule{MaxURLLength: 32}, "http://example.com/", true, []link{
			{"mailto:" + long, RefusedLength}}},
		{"no host", Rule{}, "http://example.com/", true, []link{{"mailto:a@b", RefusedInvalid}, {"http:///p", RefusedInvalid}}},
		{"host scope", Rule{Mode: Host}, "http://www.example.com:8080/a", true, []link{
			{"http://www.example.com/b", ""}, {"https://WWW.example.com/c", ""}, {"http://example.com/d", RefusedScope},
			{"http://cdn.example.com/e", RefusedScope}, {"http://user@www.example.com:81/f", ""}}},
		{"domain scope", Rule{Mode: Domain}, "http://news.example.co.uk/a", true, []link{
			{"http://example.co.uk/", ""}, {"http://shop.example.co.uk/x", ""}, {"http://other.co.uk/", RefusedScope},
			{"http://example.com/", RefusedScope}}},
		{"domain scope: private suffixes separate their users", Rule{Mode: Domain}, "https://alice.github.io/", true, []link{
			{"https://alice.github.io/x", ""}, {"https://bob.github.io/", RefusedScope}, {"https://github.io/", RefusedScope}}},
		{"domain scope: an IP address is its own domain", Rule{Mode: Domain}, "http://127.0.0.1:8080/", true, []link{
			{"http://127.0.0.1:9090/a", ""}, {"http://127.0.0.2/", RefusedScope}, {"http://[::1]/", RefusedScope}}},
		{"domain scope: single-label hosts", Rule{Mode: Domain}, "http://localhost:3000/", true, []link{
			{"http://localhost:3000/a", ""}, {"http://a.localhost/", RefusedScope}, {"http://intranet/", RefusedScope}}},
		{"include and exclude, exclude wins", Rule{Include: inc, Exclude: exc}, "http://example.com/", true, []link{
			{"http://example.com/docs/a", ""}, {"http://example.com/docs/private/b", RefusedExclude},
			{"http://example.com/shop/c", RefusedInclude}, {"http://example.com/blog/d.pdf", RefusedExclude}}},
		{"scope before exclude", Rule{Mode: Host, Exclude: exc}, "http://example.com/", true, []link{
			{"http://other.com/a.pdf", RefusedScope}}},
		{"traps", Rule{}, "http://example.com/", true, []link{
			{"http://example.com/a/b/a/b/a/b", RefusedTrap}, {"http://example.com/x/x/x", RefusedTrap},
			{"http://example.com/a/b/a/b", ""}, {"http://example.com/x/x/y?x/x/x", ""}}},
		{"a requisite may leave the mode and Include", Rule{Mode: Host, Include: inc, Exclude: exc}, "http://example.com/", false, []link{
			{"http://cdn.example.net/app.js", ""}, {"http://example.com/shop/c", ""},
			{"http://cdn.example.net/x.pdf", RefusedExclude}, {"http://cdn.example.net/a/a/a", RefusedTrap}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			from := tc.rule.From(tc.page)
			for _, l := range tc.urls {
				got, ok := tc.rule.Check(l.url, from, tc.held)
				if got != l.want || ok != (l.want == "") {
					t.Errorf("Check(%q) = %q, %v; want %q", l.url, got, ok, l.want)
				}
			}
		})
	}
}

func TestRulePredicates(t *testing.T) {
	r := Rule{MaxDepth: 2, MaxURLLength: 20, Include: regexp.MustCompile(`/docs/`), Exclude: regexp.MustCompile(`\.pdf$`)}
	for _, tc := range []struct {
		name string
		got  bool
		want bool
	}{
		{"depth at the limit", r.TooDeep(2), false},
		{"depth beyond it", r.TooDeep(3), true},
		{"max depth zero crawls seeds only", (&Rule{}).TooDeep(1), true},
		{"length at the limit", r.TooLong("http://h/docs/aaaaaa"), false},
		{"length beyond it", r.TooLong("http://h/docs/aaaaaaa"), true},
		{"excluded", r.Excluded("http://h/a.pdf"), true},
		{"not excluded", r.Excluded("http://h/a.html"), false},
		{"no exclude", (&Rule{}).Excluded("http://h/a.pdf"), false},
		{"not included", r.NotIncluded("http://h/shop/"), true},
		{"included", r.NotIncluded("http://h/docs/"), false},
		{"no include", (&Rule{}).NotIncluded("http://h/shop/"), false},
		{"trap", r.Trap("http://h/x/x/x"), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.got != tc.want {
				t.Errorf("got %v, want %v", tc.got, tc.want)
			}
		})
	}
}

func TestSettingsRule(t *testing.T) {
	for _, tc := range []struct {
		name    string
		s       Settings
		wantErr string
		check   func(t *testing.T, r Rule)
	}{
		{"defaults", Defaults, "", func(t *testing.T, r Rule) {
			if r.Mode != Any || r.MaxDepth != 7 || r.MaxURLLength != Defaults.MaxURLLength || r.Include != nil || r.Exclude != nil {
				t.Errorf("rule %+v", r)
			}
		}},
		{"mode is canonical", Settings{Scope: " Domain "}, "", func(t *testing.T, r Rule) {
			if r.Mode != Domain {
				t.Errorf("mode %q", r.Mode)
			}
		}},
		{"regexps compiled", Settings{Scope: Host, Include: `/docs/`, Exclude: `\.pdf$`}, "", func(t *testing.T, r Rule) {
			if !r.Excluded("http://h/docs/a.pdf") || r.NotIncluded("http://h/docs/a") {
				t.Errorf("rule %+v", r)
			}
		}},
		{"unknown mode", Settings{Scope: "planet"}, "TRAWL_SCOPE", nil},
		{"bad include", Settings{Scope: Any, Include: "("}, "TRAWL_INCLUDE", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := tc.s.Rule(7)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Rule = %v, want an error naming %s", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, r)
		})
	}
}
