package robots

import (
	"errors"
	"net/url"
	"testing"
	"time"
)

func TestDecide(t *testing.T) {
	at := time.UnixMilli(1_700_000_000_000)
	const body = "user-agent: *\ndisallow: /private\nallow: /private/open\ndisallow: /folder\nallow: /folder\ncrawl-delay: 2\n" +
		"user-agent: trawl\ndisallow: /*.gif$\nallow: /\ncrawl-delay: 3\n"
	parsed := NewEntry("trawl", 200, []byte(body), DefaultMaxBytes, at)
	star := NewEntry("nobot", 200, []byte(body), DefaultMaxBytes, at)
	cases := []struct {
		name  string
		e     *Entry
		agent string
		url   string
		want  Decision
		errIs error
	}{
		{"own group, rule disallows", parsed, "trawl", "https://e.com/a/b.gif", Decision{Allowed: false, Class: Parsed, Reason: ReasonRule, Rule: "disallow /*.gif$", CrawlDelay: 3 * time.Second}, nil},
		{"own group, anchored miss", parsed, "", "https://e.com/a/b.gif?x=1", Decision{Allowed: true, Class: Parsed, Reason: ReasonRule, Rule: "allow /", CrawlDelay: 3 * time.Second}, nil},
		{"user-agent string reduced to token", parsed, "Trawl/0.1 (+https://x)", "http://e.com/x.gif", Decision{Allowed: false, Class: Parsed, Reason: ReasonRule, Rule: "disallow /*.gif$", CrawlDelay: 3 * time.Second}, nil},
		{"longest match wins", star, "nobot", "https://e.com/private/open/x", Decision{Allowed: true, Class: Parsed, Reason: ReasonRule, Rule: "allow /private/open", CrawlDelay: 2 * time.Second}, nil},
		{"longer disallow", star, "nobot", "https://e.com/private/x", Decision{Allowed: false, Class: Parsed, Reason: ReasonRule, Rule: "disallow /private", CrawlDelay: 2 * time.Second}, nil},
		{"tie goes to allow", star, "nobot", "https://e.com/folder/page", Decision{Allowed: true, Class: Parsed, Reason: ReasonRule, Rule: "allow /folder", CrawlDelay: 2 * time.Second}, nil},
		{"no rule matches", star, "", "/public", Decision{Allowed: true, Class: Parsed, Reason: ReasonNoRule, CrawlDelay: 2 * time.Second}, nil},
		{"empty path is /", star, "", "https://e.com", Decision{Allowed: true, Class: Parsed, Reason: ReasonNoRule, CrawlDelay: 2 * time.Second}, nil},
		{"robots.txt always allowed", NewEntry("trawl", 200, []byte("user-agent: *\ndisallow: /\n"), 0, at), "", "https://e.com/robots.txt", Decision{Allowed: true, Class: Parsed, Reason: ReasonRobotsTxt}, nil},
		{"404 allows all", NewEntry("trawl", 404, []byte(body), 0, at), "otherbot", "https://e.com/private", Decision{Allowed: true, Class: Unavailable, Reason: ReasonUnavailable}, nil},
		{"403 allows all", NewEntry("trawl", 403, nil, 0, at), "", "https://e.com/x", Decision{Allowed: true, Class: Unavailable, Reason: ReasonUnavailable}, nil},
		{"503 disallows all", NewEntry("trawl", 503, []byte(body), 0, at), "", "https://e.com/public", Decision{Allowed: false, Class: Unreachable, Reason: ReasonUnreachable}, nil},
		{"429 disallows all", NewEntry("trawl", 429, nil, 0, at), "otherbot", "https://e.com/", Decision{Allowed: false, Class: Unreachable, Reason: ReasonUnreachable}, nil},
		{"no response disallows all", UnreachableEntry("trawl", errors.New("refused"), at), "", "https://e.com/", Decision{Allowed: false, Class: Unreachable, Reason: ReasonUnreachable}, nil},
		{"parsed entry of another agent", parsed, "otherbot", "https://e.com/x", Decision{}, ErrAgentMismatch},
		{"nil entry", nil, "trawl", "https://e.com/x", Decision{}, ErrNoEntry},
		{"relative path without slash", parsed, "", "x/y", Decision{}, ErrURL},
		{"not http", parsed, "", "ftp://e.com/x", Decision{}, ErrURL},
		{"opaque", parsed, "", "mailto:a@b", Decision{}, ErrURL},
		{"unparsable", parsed, "", "http://e.com/%zz", Decision{}, ErrURL},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := Decide(c.e, c.agent, c.url)
			if c.errIs != nil {
				if !errors.Is(err, c.errIs) {
					t.Fatalf("Decide error = %v, want %v", err, c.errIs)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != c.want {
				t.Errorf("Decide(%q, %q) = %+v, want %+v", c.agent, c.url, got, c.want)
			}
			// The decoded cache entry decides alike: what trawlctl reads from Redis.
			raw, _ := c.e.MarshalBinary()
			dec, err := UnmarshalEntry(raw)
			if err != nil {
				t.Fatal(err)
			}
			if again, err := Decide(dec, c.agent, c.url); err != nil || again != got {
				t.Errorf("after a cache round trip: %+v, %v", again, err)
			}
			if a := c.e.Rules.Allowed(c.e.Agent, mustRequestURI(t, c.url)); a != got.Allowed {
				t.Errorf("Rules.Allowed = %v, Decide says %v", a, got.Allowed)
			}
		})
	}
}

func mustRequestURI(t *testing.T, raw string) string {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return u.RequestURI()
}
