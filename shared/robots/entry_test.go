package robots

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestEntryRoundTrip checks that the cached form gives the same decisions as the file it
// came from, for the agent it was reduced for.
func TestEntryRoundTrip(t *testing.T) {
	fetched := time.UnixMilli(1_700_000_000_123)
	body := fixture(t, "merged.txt") + "\nuser-agent: trawl\nallow: /a/open$\ndisallow: /*.gif$\ndisallow: /%7Ejoe\n"
	paths := []string{"/", "/a", "/a/open", "/a/open/x", "/b", "/c", "/d", "/star", "/x.gif", "/x.gif?y", "/~joe", "/robots.txt"}
	cases := []struct {
		name   string
		agent  string
		status int
		body   string
		class  Class
		delay  time.Duration
	}{
		{"parsed, own group", "trawl", 200, body, Parsed, 5 * time.Second},
		{"parsed, star fallback", "nobody", 200, body, Parsed, 0},
		{"parsed, no group at all", "trawl", 200, "user-agent: other\ndisallow: /\n", Parsed, 0},
		{"unavailable", "trawl", 404, body, Unavailable, 0},
		{"unreachable", "trawl", 503, body, Unreachable, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			full := ForResponse(c.status, []byte(c.body), DefaultMaxBytes)
			e := NewEntry(c.agent, c.status, []byte(c.body), DefaultMaxBytes, fetched)
			raw, err := e.MarshalBinary()
			if err != nil {
				t.Fatal(err)
			}
			got, err := UnmarshalEntry(raw)
			if err != nil {
				t.Fatalf("unmarshal %q: %v", raw, err)
			}
			if got.Class != c.class || got.Status != c.status || !got.FetchedAt.Equal(fetched) || got.Agent != ProductToken(c.agent) {
				t.Errorf("got class %v status %d fetched %v agent %q", got.Class, got.Status, got.FetchedAt, got.Agent)
			}
			if got.CrawlDelay() != c.delay {
				t.Errorf("CrawlDelay = %v, want %v", got.CrawlDelay(), c.delay)
			}
			for _, p := range paths {
				if a, b := got.Allowed(p), full.Allowed(c.agent, p); a != b {
					t.Errorf("Allowed(%q): cached %v, file %v", p, a, b)
				}
			}
			if c.class != Unreachable && !slices.Equal(got.Rules.Sitemaps(), full.Sitemaps()) {
				t.Errorf("sitemaps %q, want %q", got.Rules.Sitemaps(), full.Sitemaps())
			}
		})
	}

	t.Run("unreachable with error text", func(t *testing.T) {
		e := UnreachableEntry("trawl", errors.New("dial tcp: connection refused\nsecond line"), fetched)
		raw, _ := e.MarshalBinary()
		got, err := UnmarshalEntry(raw)
		if err != nil {
			t.Fatal(err)
		}
		if got.Class != Unreachable || got.Status != 0 || got.Allowed("/") || !strings.Contains(got.Error, "connection refused") {
			t.Errorf("got %+v", got)
		}
	})

	t.Run("compact: other agents' groups are not stored", func(t *testing.T) {
		big := strings.Repeat("user-agent: somebody\ndisallow: /their/long/path/pattern\n", 1000) + "user-agent: trawl\ndisallow: /mine\n"
		raw, _ := NewEntry("trawl", 200, []byte(big), DefaultMaxBytes, fetched).MarshalBinary()
		if len(raw) > 200 {
			t.Errorf("encoded entry is %d bytes: %q", len(raw), raw)
		}
	})
}

func TestUnmarshalEntryRejects(t *testing.T) {
	cases := map[string]string{
		"empty":         "",
		"other version": "trawl-robots/2\nagent trawl\nclass 1\n",
		"no class":      "trawl-robots/1\nagent trawl\n",
		"no agent":      "trawl-robots/1\nclass 1\n",
		"bad class":     "trawl-robots/1\nagent trawl\nclass 9\n",
		"bad status":    "trawl-robots/1\nagent trawl\nclass 1\nstatus x\n",
		"bad delay":     "trawl-robots/1\nagent trawl\nclass 1\ndelay 1.5s\n",
		"empty rule":    "trawl-robots/1\nagent trawl\nclass 1\nallow \n",
	}
	for name, raw := range cases {
		t.Run(name, func(t *testing.T) {
			if _, err := UnmarshalEntry([]byte(raw)); !errors.Is(err, errEncoding) {
				t.Errorf("UnmarshalEntry(%q) error = %v, want errEncoding", raw, err)
			}
		})
	}
}
