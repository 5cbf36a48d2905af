package robotscache

// The temoto oracle lives here rather than beside shared/robots so that shared/go.mod does
// not require github.com/temoto/robotstxt: every service module would then need its checksum.

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/temoto/robotstxt"

	"github.com/trawl/trawl/shared/robots"
)

func fixture(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestTemotoOracle compares the decisions with github.com/temoto/robotstxt, an independent
// implementation, on files where its behaviour and RFC 9309 coincide (no wildcards, no ties,
// no orphan lines, agents named exactly). A disagreement there is a bug on our side.
func TestTemotoOracle(t *testing.T) {
	files := []string{
		fixture(t, "rfc9309_5_2.txt"),
		"user-agent: *\ndisallow: /private\nallow: /private/open\n",
		"user-agent: trawl\ndisallow: /a\n\nuser-agent: *\ndisallow: /\n",
		"user-agent: trawl\ndisallow: /a\n\nuser-agent: trawl\ndisallow: /b\n",
		"User-Agent: foobot\nDisallow: /\nAllow: /example/page.html\n",
		"user-agent: *\ndisallow: /\nallow: /public\n\nuser-agent: other\ndisallow: /a\n",
		"user-agent: *\r\ndisallow: /crlf\r\n",
		"user-agent: *\ndisallow: /\n\nuser-agent: trawl\ndisallow:\n",
		"",
	}
	paths := []string{"/", "/a", "/a/x", "/b", "/private", "/private/open", "/private/open/x", "/public",
		"/example/page.html", "/example/page/", "/example/page/disallowed.gif", "/crlf", "/other"}
	for i, body := range files {
		theirs, err := robotstxt.FromString(body)
		if err != nil {
			t.Fatalf("file %d: temoto: %v", i, err)
		}
		ours := robots.Parse([]byte(body), robots.DefaultMaxBytes)
		for _, agent := range []string{"trawl", "foobot", "other", "nobody"} {
			for _, p := range paths {
				if got, want := ours.Allowed(agent, p), theirs.TestAgent(p, agent); got != want {
					t.Errorf("file %d agent %s path %s: ours %v, temoto %v\n%s", i, agent, p, got, want, body)
				}
			}
		}
	}
}

// TestTemotoDivergence pins the documented places where temoto departs from RFC 9309 (see
// the shared/robots package comment). If temoto changes, this test says which workaround can go.
func TestTemotoDivergence(t *testing.T) {
	cases := []struct {
		name       string
		body       string
		agent      string
		path       string
		rfc        bool
		temotoErrs bool // temoto refuses the whole file
	}{
		{"orphan rule fails the file", "disallow: /x\nuser-agent: *\ndisallow: /y\n", "trawl", "/z", true, true},
		{"bad crawl-delay fails the file", "user-agent: *\ncrawl-delay: soon\ndisallow: /y\n", "trawl", "/z", true, true},
		{"unanchored wildcard", "user-agent: *\ndisallow: /a*b\n", "trawl", "/x/a/b", true, false},
		{"tie goes to the first rule", "user-agent: *\ndisallow: /folder\nallow: /folder\n", "trawl", "/folder/page", true, false},
		{"agent prefix match", "user-agent: traw\ndisallow: /\n", "trawl", "/x", true, false},
		{"encoded unreserved compared raw", "user-agent: *\ndisallow: /%7Ejoe\n", "trawl", "/~joe", false, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := robots.Parse([]byte(c.body), robots.DefaultMaxBytes).Allowed(c.agent, c.path); got != c.rfc {
				t.Fatalf("ours: Allowed = %v, want %v", got, c.rfc)
			}
			theirs, err := robotstxt.FromString(c.body)
			if c.temotoErrs {
				if err == nil {
					t.Errorf("temoto now accepts this file; the pre-parse skip could be dropped")
				}
				return
			}
			if err != nil {
				t.Fatalf("temoto: %v", err)
			}
			if theirs.TestAgent(c.path, c.agent) == c.rfc {
				t.Errorf("temoto now agrees with RFC 9309 here")
			}
		})
	}
}
