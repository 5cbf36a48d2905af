package robots

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

type probe struct {
	agent string
	path  string
	want  bool
}

func fixture(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestAllowed is the RFC 9309 table: every case is one robots.txt body and the decisions
// it must give.
func TestAllowed(t *testing.T) {
	cases := []struct {
		name   string
		body   string
		probes []probe
	}{
		// RFC 9309 §5.1, the simple example.
		{"rfc 5.1", fixture(t, "rfc9309_5_1.txt"), []probe{
			{"foobot", "/example/page.html", true},
			{"foobot", "/example/allowed.gif", true},
			{"foobot", "/example/", false},
			{"foobot", "/publications/", false},
			{"foobot", "/", false},
			{"barbot", "/example/page.html", false},
			{"barbot", "/example/allowed.gif", true},
			{"barbot", "/publications/", true},
			{"bazbot", "/example/page.html", false},
			{"bazbot", "/example/other.html", true},
			{"quxbot", "/example/", true}, // own empty group: no fallback to *
			{"quxbot", "/img.gif", true},
			{"otherbot", "/img.gif", false},
			{"otherbot", "/a/b/img.gif", false},
			{"otherbot", "/img.gif?size=2", true}, // $ anchors the end of path-and-query
			{"otherbot", "/example/", false},
			{"otherbot", "/example/x.html", false},
			{"otherbot", "/publications/", true},
			{"otherbot", "/", true},
		}},
		// RFC 9309 §5.2 and §2.2.2: the longest match wins.
		{"rfc 5.2 longest match", fixture(t, "rfc9309_5_2.txt"), []probe{
			{"foobot", "/example/page/", true},
			{"foobot", "/example/page/disallowed.gif", false},
			{"foobot", "/example/page/other.gif", true},
			{"foobot", "/example/", true},
		}},
		// RFC 9309 §2.2.3 special characters.
		{"rfc 2.2.3 end of pattern", "user-agent: *\ndisallow: /\nallow: /this/path/exactly$\n", []probe{
			{"x", "/this/path/exactly", true},
			{"x", "/this/path/exactly/", false},
			{"x", "/this/path/exactlyx", false},
			{"x", "/this/path/exactly?q", false},
		}},
		{"rfc 2.2.3 any characters", "user-agent: *\ndisallow: /\nallow: /this/*/exactly\n", []probe{
			{"x", "/this/a/exactly", true},
			{"x", "/this/a/b/exactly", true},
			{"x", "/this/a/exactly/more", true},
			{"x", "/this/exactly", false},
			{"x", "/that/a/exactly", false},
		}},
		{"rfc 2.2.3 comments", "user-agent: *\nallow: / # comment in line\ndisallow: /x # comment\n# comment at the end", []probe{
			{"x", "/", true},
			{"x", "/x", false},
			{"x", "/y", true},
		}},
		{"rfc 2.2.3 encoded special characters", "user-agent: *\ndisallow: /path/file-with-a-%2A.html\ndisallow: /path/foo-%24\n", []probe{
			{"x", "/path/file-with-a-*.html", false},
			{"x", "/path/file-with-a-%2a.html", false},
			{"x", "/path/file-with-a-x.html", true},
			{"x", "/path/foo-$", false},
			{"x", "/path/foo-", true},
		}},
		{"rfc 2.2.2 percent-encoded unreserved", "user-agent: *\ndisallow: /foo/bar/%62%61%7A\ndisallow: /%E3%83%84\n", []probe{
			{"x", "/foo/bar/baz", false},
			{"x", "/foo/bar/%62az", false},
			{"x", "/foo/bar/bay", true},
			{"x", "/%e3%83%84", false},
			{"x", "/%E3%83%84/x", false},
		}},
		// Google's precedence examples, which RFC 9309 formalises.
		{"allow /$ root only", "user-agent: *\nallow: /$\ndisallow: /\n", []probe{
			{"x", "/", true},
			{"x", "/page.htm", false},
			{"x", "/?q=1", false},
		}},
		{"longer allow beats shorter disallow", "user-agent: *\nallow: /p\ndisallow: /\n", []probe{
			{"x", "/page", true},
			{"x", "/other", false},
		}},
		{"equal length: allow wins", "user-agent: *\ndisallow: /folder\nallow: /folder\n", []probe{
			{"x", "/folder/page", true},
		}},
		{"wildcard disallow longer than allow", "user-agent: *\nallow: /page\ndisallow: /*.htm\n", []probe{
			{"x", "/page.htm", false},
			{"x", "/page", true},
		}},
		{"wildcard tie goes to allow", "user-agent: *\ndisallow: /*.ph\nallow: /page\n", []probe{
			{"x", "/page.php5", true},
			{"x", "/other.php5", false},
		}},
		{"wildcard allow ties literal disallow", "user-agent: *\ndisallow: /ab\nallow: /a*\n", []probe{
			{"x", "/abc", true},
		}},
		{"longest match, disallow longer", "user-agent: *\nallow: /a\ndisallow: /a/b\n", []probe{
			{"x", "/a/b", false},
			{"x", "/a/c", true},
		}},
		{"longest match independent of order", "user-agent: *\ndisallow: /a/b\nallow: /a\n", []probe{
			{"x", "/a/b/c", false},
			{"x", "/a/c", true},
		}},
		{"longest match counts wildcard octets", "user-agent: *\nallow: /docs\ndisallow: /*/private\n", []probe{
			{"x", "/docs/private", false},
			{"x", "/docs/public", true},
		}},
		// Wildcards.
		{"wildcard in the middle is anchored at the start", "user-agent: *\ndisallow: /a*b\n", []probe{
			{"x", "/axxb", false},
			{"x", "/ab", false},
			{"x", "/abzzz", false},
			{"x", "/x/a/b", true},
			{"x", "/a", true},
		}},
		{"wildcard at the end is a prefix", "user-agent: *\ndisallow: /fish*\n", []probe{
			{"x", "/fish", false},
			{"x", "/fish.html", false},
			{"x", "/fishheads/yummy.html", false},
			{"x", "/Fish.asp", true},
			{"x", "/catfish", true},
		}},
		{"several wildcards", "user-agent: *\ndisallow: /*a*b*c\n", []probe{
			{"x", "/xaybzc", false},
			{"x", "/abc", false},
			{"x", "/xcba", true},
		}},
		{"star alone", "user-agent: *\ndisallow: *\n", []probe{
			{"x", "/", false},
			{"x", "/anything?at=all", false},
		}},
		{"extension anchored and case-sensitive", "user-agent: *\ndisallow: /*.gif$\n", []probe{
			{"x", "/a.gif", false},
			{"x", "/dir/b.gif", false},
			{"x", "/a.gif?x=1", true},
			{"x", "/a.GIF", true},
			{"x", "/a.gifs", true},
		}},
		{"dollar inside a pattern is literal", "user-agent: *\ndisallow: /a$b\n", []probe{
			{"x", "/a$b", false},
			{"x", "/a%24b/c", false},
			{"x", "/ab", true},
			{"x", "/a", true},
		}},
		{"exact path", "user-agent: *\ndisallow: /exact$\n", []probe{
			{"x", "/exact", false},
			{"x", "/exact/", true},
			{"x", "/exactly", true},
		}},
		{"query patterns", "user-agent: *\ndisallow: /*?\ndisallow: /search?q=\n", []probe{
			{"x", "/page?x=1", false},
			{"x", "/page", true},
			{"x", "/search?q=abc", false},
			{"x", "/search", true},
		}},
		{"literal star in URL needs encoding in the pattern", "user-agent: *\ndisallow: /a%2Ab\n", []probe{
			{"x", "/a*b", false},
			{"x", "/axb", true},
		}},
		// Percent-encoding normalisation.
		{"encoded tilde in rule", "user-agent: *\ndisallow: /%7Ejoe\n", []probe{
			{"x", "/~joe", false},
			{"x", "/~joe/index.html", false},
			{"x", "/%7ejoe", false},
			{"x", "/~jo", true},
		}},
		{"literal tilde in rule", "user-agent: *\ndisallow: /~joe\n", []probe{
			{"x", "/%7Ejoe", false},
			{"x", "/%7ejoe", false},
		}},
		{"lowercase hex in rule", "user-agent: *\ndisallow: /%e3%83%84\n", []probe{
			{"x", "/%E3%83%84", false},
		}},
		{"raw UTF-8 in rule", "user-agent: *\ndisallow: /ツ\n", []probe{
			{"x", "/%E3%83%84", false},
			{"x", "/ツ", false},
			{"x", "/%E3%83%85", true},
		}},
		{"encoded reserved stays distinct", "user-agent: *\ndisallow: /a%2Fb\n", []probe{
			{"x", "/a%2Fb", false},
			{"x", "/a%2fb", false},
			{"x", "/a/b", true},
		}},
		{"space inside a pattern", "user-agent: *\ndisallow: /a b\n", []probe{
			{"x", "/a%20b", false},
			{"x", "/a b", false},
			{"x", "/ab", true},
		}},
		// Group selection.
		{"specific group beats star", "user-agent: *\ndisallow: /\n\nuser-agent: trawl\ndisallow: /private\n", []probe{
			{"trawl", "/public", true},
			{"trawl", "/private", false},
			{"otherbot", "/public", false},
		}},
		{"agent matching is case-insensitive", "User-agent: TRAWL\nDisallow: /x\n", []probe{
			{"trawl", "/x", false},
			{"Trawl", "/x", false},
			{"other", "/x", true},
		}},
		{"merged groups", fixture(t, "merged.txt"), []probe{
			{"trawl", "/a", false},
			{"trawl", "/b", false},
			{"trawl", "/c", true}, // trawlbot is not trawl
			{"trawl", "/d", true}, // traw is not a prefix match
			{"trawl", "/star", true},
			{"other", "/b", false},
			{"other", "/a", true},
			{"trawlbot", "/c", false},
			{"trawlbot", "/a", true},
			{"nobody", "/star", false},
			{"nobody", "/a", true},
		}},
		{"product token of a versioned user-agent line", "user-agent: trawl/0.1 (+https://github.com/trawl/trawl)\ndisallow: /v\n", []probe{
			{"trawl", "/v", false},
		}},
		{"full UA string in the line is not our token", "user-agent: *\ndisallow: /star\n\nuser-agent: Mozilla/5.0 (compatible; trawl/0.1)\ndisallow: /moz\n", []probe{
			{"trawl", "/moz", true},
			{"trawl", "/star", false},
			{"mozilla", "/moz", false},
		}},
		{"caller's full UA string reduced to its token", "user-agent: trawl\ndisallow: /t\n", []probe{
			{"trawl/0.1 (+https://github.com/trawl/trawl)", "/t", false},
		}},
		{"several agents in one group", "user-agent: a\n\nuser-agent: trawl\ndisallow: /x\n", []probe{
			{"a", "/x", false},
			{"trawl", "/x", false},
			{"b", "/x", true},
		}},
		{"user-agent after rules starts a new group", "user-agent: trawl\ndisallow: /a\nuser-agent: other\ndisallow: /b\n", []probe{
			{"trawl", "/a", false},
			{"trawl", "/b", true},
			{"other", "/a", true},
		}},
		{"crawl-delay ends the agent list", "user-agent: a\ncrawl-delay: 5\nuser-agent: trawl\ndisallow: /\n", []probe{
			{"a", "/x", true},
			{"trawl", "/x", false},
		}},
		{"sitemap does not end the agent list", "user-agent: a\nsitemap: https://e.com/s.xml\nuser-agent: trawl\ndisallow: /x\n", []probe{
			{"a", "/x", false},
			{"trawl", "/x", false},
		}},
		{"no matching group and no star", "user-agent: other\ndisallow: /\n", []probe{
			{"trawl", "/", true},
		}},
		// Syntax the RFC says to skip without losing the rest of the file.
		{"orphan and invalid lines", fixture(t, "orphans.txt"), []probe{
			{"trawl", "/orphan-before-any-group", true},
			{"trawl", "/private", false},
			{"trawl", "/missing-colon", true},
			{"somebot", "/anything", false},
		}},
		{"CRLF, CR and BOM", fixture(t, "crlf_bom.txt"), []probe{
			{"trawl", "/crlf", false},
			{"trawl", "/crlf/open", true},
			{"crbot", "/cr", false},
			{"crbot", "/other", true},
			{"other", "/cr", true},
		}},
		{"empty disallow allows everything", "user-agent: *\ndisallow:\n", []probe{
			{"x", "/", true},
			{"x", "/anything", true},
		}},
		{"empty disallow next to a rule", "user-agent: *\ndisallow:\ndisallow: /x\n", []probe{
			{"x", "/x", false},
			{"x", "/y", true},
		}},
		{"pattern without leading slash", "user-agent: *\ndisallow: private\n", []probe{
			{"x", "/private", false},
			{"x", "/public", true},
		}},
		{"keys case-insensitive and common misspellings", "USER-AGENT: *\nDISSALLOW: /x\nUserAgent: b\ndisallow: /y\n", []probe{
			{"a", "/x", false},
			{"b", "/y", false},
		}},
		{"empty file", "", []probe{{"x", "/", true}}},
		{"only comments", "# nothing here\n#User-agent: *\n#Disallow: /\n", []probe{{"x", "/", true}}},
		{"robots.txt always allowed", "user-agent: *\ndisallow: /\n", []probe{
			{"x", "/robots.txt", true},
			{"x", "/robots.txt?v=1", true},
			{"x", "/robots.txt.bak", false},
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := Parse([]byte(c.body), DefaultMaxBytes)
			for _, p := range c.probes {
				if got := r.Allowed(p.agent, p.path); got != p.want {
					t.Errorf("Allowed(%q, %q) = %v, want %v", p.agent, p.path, got, p.want)
				}
			}
		})
	}
}

func TestParseMaxBytes(t *testing.T) {
	const body = "user-agent: *\ndisallow: /early\ndisallow: /private-area\ndisallow: /late\n"
	cut := strings.Index(body, "/private-area") + len("/priv")
	cases := []struct {
		name  string
		limit int
		want  map[string]bool
	}{
		{"whole file", 0, map[string]bool{"/early": false, "/private-area": false, "/late": false}},
		{"exactly the file", len(body), map[string]bool{"/early": false, "/private-area": false, "/late": false}},
		// The line cut by the limit must not become "disallow: /priv".
		{"cut mid-line", cut, map[string]bool{"/early": false, "/private-area": true, "/privX": true, "/late": true}},
		{"cut after a line", strings.Index(body, "disallow: /late"), map[string]bool{"/early": false, "/private-area": false, "/late": true}},
		{"cut inside the first line", 5, map[string]bool{"/early": true}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := Parse([]byte(body), c.limit)
			for p, want := range c.want {
				if got := r.Allowed("x", p); got != want {
					t.Errorf("limit %d: Allowed(%q) = %v, want %v", c.limit, p, got, want)
				}
			}
		})
	}

	t.Run("default limit is 500 KiB", func(t *testing.T) {
		var b strings.Builder
		b.WriteString("user-agent: *\ndisallow: /first\n")
		filler := "# " + strings.Repeat("x", 97) + "\n"
		for b.Len()+len(filler) < DefaultMaxBytes-64 {
			b.WriteString(filler)
		}
		b.WriteString("disallow: /inside\n")
		for b.Len() < DefaultMaxBytes+1024 {
			b.WriteString(filler)
		}
		b.WriteString("disallow: /beyond\n")
		r := Parse([]byte(b.String()), DefaultMaxBytes)
		for p, want := range map[string]bool{"/first": false, "/inside": false, "/beyond": true} {
			if got := r.Allowed("x", p); got != want {
				t.Errorf("Allowed(%q) = %v, want %v", p, got, want)
			}
		}
	})
}

func TestCrawlDelay(t *testing.T) {
	merged := fixture(t, "merged.txt")
	cases := []struct {
		name  string
		body  string
		agent string
		want  time.Duration
	}{
		{"integer", "user-agent: *\ncrawl-delay: 2\n", "x", 2 * time.Second},
		{"fractional", "user-agent: *\ncrawl-delay: 1.5\n", "x", 1500 * time.Millisecond},
		{"leading dot", "user-agent: *\ncrawl-delay: .25\n", "x", 250 * time.Millisecond},
		{"not a number ignored", "user-agent: *\ncrawl-delay: ten\n", "x", 0},
		{"negative ignored", "user-agent: *\ncrawl-delay: -1\n", "x", 0},
		{"invalid ignored, valid kept", "user-agent: *\ncrawl-delay: 3\ncrawl-delay: soon\n", "x", 3 * time.Second},
		{"merged groups keep the largest", merged, "trawl", 5 * time.Second},
		{"own group without delay ignores star", "user-agent: *\ncrawl-delay: 9\nuser-agent: trawl\ndisallow: /x\n", "trawl", 0},
		{"star group applies as fallback", "user-agent: *\ncrawl-delay: 9\nuser-agent: trawl\ndisallow: /x\n", "other", 9 * time.Second},
		{"before any group ignored", "crawl-delay: 4\nuser-agent: *\ndisallow: /x\n", "x", 0},
		{"alias key", "user-agent: *\ncrawldelay: 7\n", "x", 7 * time.Second},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := Parse([]byte(c.body), DefaultMaxBytes).CrawlDelay(c.agent); got != c.want {
				t.Errorf("CrawlDelay(%q) = %v, want %v", c.agent, got, c.want)
			}
		})
	}
}

func TestSitemaps(t *testing.T) {
	cases := []struct {
		name string
		body string
		want []string
	}{
		{"anywhere, in order", fixture(t, "merged.txt"), []string{"https://example.com/sitemap-1.xml", "https://example.com/sitemap-2.xml"}},
		{"outside any group", "Sitemap: https://e.com/a.xml\nuser-agent: *\ndisallow: /\nSITEMAP: https://e.com/b.xml # c\n", []string{"https://e.com/a.xml", "https://e.com/b.xml"}},
		{"empty ignored", "sitemap:\n", nil},
		{"none", "user-agent: *\ndisallow: /\n", nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := Parse([]byte(c.body), DefaultMaxBytes).Sitemaps(); !slices.Equal(got, c.want) {
				t.Errorf("Sitemaps() = %q, want %q", got, c.want)
			}
		})
	}
	t.Run("bounded", func(t *testing.T) {
		body := strings.Repeat("sitemap: https://e.com/s.xml\n", maxSitemaps+10)
		if got := len(Parse([]byte(body), DefaultMaxBytes).Sitemaps()); got != maxSitemaps {
			t.Errorf("kept %d sitemaps, want %d", got, maxSitemaps)
		}
	})
}

func TestStatus(t *testing.T) {
	const body = "user-agent: *\ndisallow: /private\n"
	cases := []struct {
		name      string
		status    int
		class     Class
		private   bool // may /private be fetched
		public    bool // may /public be fetched
		robotsTxt bool // may /robots.txt be fetched (always)
	}{
		{"200 parsed", 200, Parsed, false, true, true},
		{"204 parsed (empty)", 204, Parsed, false, true, true},
		{"301 chain not resolved", 301, Unavailable, true, true, true},
		{"308 chain not resolved", 308, Unavailable, true, true, true},
		{"404 allow all", 404, Unavailable, true, true, true},
		{"401 allow all", 401, Unavailable, true, true, true},
		{"403 allow all", 403, Unavailable, true, true, true},
		{"410 allow all", 410, Unavailable, true, true, true},
		{"429 disallow all", 429, Unreachable, false, false, true},
		{"500 disallow all", 500, Unreachable, false, false, true},
		{"503 disallow all", 503, Unreachable, false, false, true},
		{"599 disallow all", 599, Unreachable, false, false, true},
		{"invalid status disallow all", 99, Unreachable, false, false, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := FromStatus(c.status); got != c.class {
				t.Errorf("FromStatus(%d) = %v, want %v", c.status, got, c.class)
			}
			r := ForResponse(c.status, []byte(body), DefaultMaxBytes)
			for p, want := range map[string]bool{"/private": c.private, "/public": c.public, "/robots.txt": c.robotsTxt} {
				if got := r.Allowed("trawl", p); got != want {
					t.Errorf("status %d: Allowed(%q) = %v, want %v", c.status, p, got, want)
				}
			}
		})
	}
	t.Run("unreachable", func(t *testing.T) {
		e := UnreachableEntry("trawl", os.ErrDeadlineExceeded, time.Now())
		if e.Class != Unreachable || e.Allowed("/") || !e.Allowed("/robots.txt") || e.Error == "" {
			t.Errorf("unreachable entry: class %v, / allowed %v, error %q", e.Class, e.Allowed("/"), e.Error)
		}
	})
}

func TestProductToken(t *testing.T) {
	cases := map[string]string{
		"trawl":                          "trawl",
		"Trawl":                          "trawl",
		"ExampleBot/1.0 (+https://x.y)":  "examplebot",
		"  googlebot-news ":              "googlebot-news",
		"*":                              "*",
		"*bot":                           "*",
		"my_bot2":                        "my_bot",
		"2bot":                           "",
		"":                               "",
		"Mozilla/5.0 (compatible; bot)":  "mozilla",
		"trawl bot":                      "trawl",
		"trawl;v=1":                      "trawl",
		"\tTRAWL-Crawler_x/9":            "trawl-crawler_x",
		"(compatible; trawl/0.1; +http)": "",
	}
	for in, want := range cases {
		t.Run(in, func(t *testing.T) {
			if got := ProductToken(in); got != want {
				t.Errorf("ProductToken(%q) = %q, want %q", in, got, want)
			}
		})
	}
	for s, want := range map[string]bool{"trawl": true, "Trawl_Bot-2": false, "trawl-bot": true, "": false, "trawl/1": false, "*": false} {
		if got := IsProductToken(s); got != want {
			t.Errorf("IsProductToken(%q) = %v, want %v", s, got, want)
		}
	}
}
