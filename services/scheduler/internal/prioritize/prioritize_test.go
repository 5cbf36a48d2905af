package prioritize

import (
	"math"
	"testing"
	"time"

	"github.com/trawl/trawl/shared/crawlmsg"
)

func TestBreadthFirst(t *testing.T) {
	for _, tc := range []struct {
		name          string
		depth, queues int
		want          int
	}{
		{"seed", 0, 8, 0},
		{"depth within queues", 3, 8, 3},
		{"last queue", 7, 8, 7},
		{"deeper than queues shares last", 20, 8, 7},
		{"one queue", 5, 1, 0},
		{"negative depth", -2, 8, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := BreadthFirst{}.Priority(crawlmsg.Discovered{URL: "http://a/", Depth: tc.depth}, tc.queues)
			if got != tc.want {
				t.Fatalf("Priority(depth %d, %d queues) = %d, want %d", tc.depth, tc.queues, got, tc.want)
			}
		})
	}
}

func TestLinkFeatures(t *testing.T) {
	long := "http://a.example/p?q=" + rep("abcdefghij", 4)
	for _, tc := range []struct {
		name string
		url  string
		want float64
	}{
		{"root", "http://a.example/", 4},
		{"one segment page", "http://a.example/about.html", 4},
		{"directory two deep", "http://a.example/docs/guide/", 3.75},
		{"five segments", "http://a.example/a/b/c/d/e", 3},
		{"one query parameter", "http://a.example/search?q=go", 3.5},
		{"two query parameters", "http://a.example/search?q=go&page=2", 3.25},
		{"three query parameters", "http://a.example/s?a=1&b=2&c=3", 3},
		{"session parameter", "http://a.example/p?PHPSESSID=x", 2.5},
		{"aspsessionid prefix", "http://a.example/p?ASPSESSIONIDQQ=x", 2.5},
		{"jsessionid in path", "http://a.example/p;jsessionid=1", 3},
		{"mixed long token in path", "http://a.example/item/a8f5f167f44f4964e6c9", 2.75},
		{"pure letters below 32 are words", "http://a.example/item/averyveryverylongwordindeed", 3.75},
		{"long token in query", long, 2.5},
		{"media extension", "http://a.example/photo.JPG", 3.5},
		{"page extension any case", "http://a.example/INDEX.PHP", 4},
		{"length over 64", "http://a.example/" + rep("ab-", 17), 3.75},
		{"length over 128", "http://a.example/" + rep("x-", 60), 3.5},
		{"no path", "http://a.example", 4},
		{"fragment ignored", "http://a.example/#x?a=1&b=2&c=3", 4},
		{"not a url", "a.example/x", 0},
		{
			"calendar trap",
			"http://a.example/calendar/2024/05/12/day?view=day&tz=UTC&from=1715472000",
			0 + 0 + 1 + 0.5 + 0.25,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := LinkFeatures(tc.url); math.Abs(got-tc.want) > 1e-12 {
				t.Fatalf("LinkFeatures(%q) = %g, want %g", tc.url, got, tc.want)
			}
		})
	}
}

func rep(s string, n int) string {
	out := ""
	for range n {
		out += s
	}
	return out
}

func TestLinkFeaturesBounds(t *testing.T) {
	for _, u := range []string{
		"", "http://", "http://a/", "https://a.example/" + rep("a/", 500) + "?" + rep("k=v&", 300),
		"http://a.example/?&&&", "http://a.example/%%%",
	} {
		if got := LinkFeatures(u); got < 0 || got > MaxLinkScore {
			t.Fatalf("LinkFeatures(%q) = %g outside [0, %g]", u, got, MaxLinkScore)
		}
	}
}

func TestQueueFor(t *testing.T) {
	for _, tc := range []struct {
		name   string
		score  float64
		queues int
		want   int
	}{
		{"zero is the last queue", 0, 8, 7},
		{"below one is the last queue", 0.99, 8, 7},
		{"one queue per unit", 1, 8, 6},
		{"fraction floors", 3.75, 8, 4},
		{"top clamps", 100, 8, 0},
		{"exactly top", 7, 8, 0},
		{"negative", -3, 8, 7},
		{"NaN", math.NaN(), 8, 7},
		{"one queue", 5, 1, 0},
		{"integral score from log2 stays integral", IB(7), 8, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := QueueFor(tc.score, tc.queues); got != tc.want {
				t.Fatalf("QueueFor(%g, %d) = %d, want %d", tc.score, tc.queues, got, tc.want)
			}
		})
	}
}

func TestIB(t *testing.T) {
	for n, want := range map[int64]float64{0: 0, -1: 0, 1: 1, 3: 2, 7: 3, 1023: 10} {
		if got := IB(n); math.Abs(got-want) > 1e-9 {
			t.Errorf("IB(%d) = %g, want %g", n, got, want)
		}
	}
}

func TestPreference(t *testing.T) {
	good := crawlmsg.Discovered{URL: "http://a.example/", Depth: 9}
	bad := crawlmsg.Discovered{URL: "http://a.example/a/b/c/d/e/f?sid=1&x=2&y=3&z=4", Depth: 0}
	for _, tc := range []struct {
		name      string
		p         Preference
		u         crawlmsg.Discovered
		wantQueue int
		wantScore float64
	}{
		{"good URL, depth ignored", Preference{X: 1, Y: 1}, good, 3, 4},
		{"bad URL, depth ignored", Preference{X: 1, Y: 1}, bad, 6, 1},
		{"Y scales IL", Preference{X: 1, Y: 0.5}, good, 5, 2},
		{"Y zero leaves only IB", Preference{X: 1, Y: 0}, good, 7, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.p.LinkScore(tc.u); got != tc.wantScore {
				t.Fatalf("LinkScore = %g, want %g", got, tc.wantScore)
			}
			if got := tc.p.Priority(tc.u, 8); got != tc.wantQueue {
				t.Fatalf("Priority = %d, want %d", got, tc.wantQueue)
			}
			if tc.p.BacklinkWeight() != tc.p.X {
				t.Fatal("BacklinkWeight is not X")
			}
		})
	}
}

// A sitemap's priority moves a listed URL one queue at most, either way, in both
// prioritisers; a URL no sitemap rated keeps its queue.
func TestSitemapNudge(t *testing.T) {
	p := func(v float64) *float64 { return &v }
	for _, tc := range []struct {
		name     string
		depth    int
		priority *float64
		breadth  int // queue of 8 by breadth
		nudge    int
	}{
		{"not from a sitemap", 1, nil, 1, 0},
		{"protocol default", 1, p(0.5), 1, 0},
		{"just below the step", 1, p(0.74), 1, 0},
		{"high", 1, p(0.75), 0, 1},
		{"top", 3, p(1), 2, 1},
		{"low", 1, p(0.25), 2, -1},
		{"bottom", 1, p(0), 2, -1},
		{"cannot go above the first queue", 0, p(1), 0, 1},
		{"cannot go below the last queue", 9, p(0), 7, -1},
		{"out of range is clamped", 1, p(7), 0, 1},
		{"NaN is ignored", 1, p(math.NaN()), 1, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := crawlmsg.Discovered{URL: "http://a.example/x", Depth: tc.depth, Via: crawlmsg.ViaSitemap, Priority: tc.priority}
			if got := SitemapNudge(u); got != tc.nudge {
				t.Errorf("SitemapNudge = %d, want %d", got, tc.nudge)
			}
			if got := (BreadthFirst{}).Priority(u, 8); got != tc.breadth {
				t.Errorf("BreadthFirst queue = %d, want %d", got, tc.breadth)
			}
			plain := u
			plain.Priority = nil
			pref := Preference{X: 1, Y: 1}
			if got, want := pref.LinkScore(u)-pref.LinkScore(plain), float64(tc.nudge); got != want {
				t.Errorf("Preference score moved by %g, want %g", got, want)
			}
		})
	}
}

func TestRecrawlNudge(t *testing.T) {
	now := time.UnixMilli(10_000_000)
	hour := time.Hour.Milliseconds()
	for _, tc := range []struct {
		name  string
		via   crawlmsg.Via
		st    *crawlmsg.Recrawl
		nudge int
	}{
		{"first fetch", crawlmsg.ViaLink, nil, 0},
		{"recrawl just due", crawlmsg.ViaRecrawl, &crawlmsg.Recrawl{Interval: hour, Due: now.UnixMilli()}, 0},
		{"overdue by less than half its interval", crawlmsg.ViaRecrawl, &crawlmsg.Recrawl{Interval: hour, Due: now.UnixMilli() - hour/2 + 1}, 0},
		{"overdue by half its interval", crawlmsg.ViaRecrawl, &crawlmsg.Recrawl{Interval: hour, Due: now.UnixMilli() - hour/2}, 1},
		{"changes on most fetches", crawlmsg.ViaRecrawl, &crawlmsg.Recrawl{Interval: hour, Due: now.UnixMilli(), Fetches: 4, Changes: 3}, 1},
		{"changed once in one fetch is not yet a pattern", crawlmsg.ViaRecrawl, &crawlmsg.Recrawl{Interval: hour, Due: now.UnixMilli(), Fetches: 1, Changes: 1}, 0},
		{"changes half the time", crawlmsg.ViaRecrawl, &crawlmsg.Recrawl{Interval: hour, Due: now.UnixMilli(), Fetches: 4, Changes: 2}, 0},
		{"overdue and changeable", crawlmsg.ViaRecrawl, &crawlmsg.Recrawl{Interval: hour, Due: now.UnixMilli() - 2*hour, Fetches: 2, Changes: 2}, 2},
		{"state on a URL not queued for a recrawl", crawlmsg.ViaLink, &crawlmsg.Recrawl{Interval: hour, Due: 1, Fetches: 9, Changes: 9}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := crawlmsg.Discovered{URL: "http://a.example/x", Depth: 3, Via: tc.via, Recrawl: tc.st}
			if got := RecrawlNudge(u, now); got != tc.nudge {
				t.Fatalf("RecrawlNudge = %d, want %d", got, tc.nudge)
			}
		})
	}
}
