package frontier

import (
	"math"
	"testing"

	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/envconfig"
	"github.com/trawl/trawl/shared/frontierconf"
	"github.com/trawl/trawl/shared/politeness"
)

func TestAdmissible(t *testing.T) {
	f := New(nil, DefaultOptions(0), nil)
	for _, tc := range []struct {
		name   string
		u      crawlmsg.Discovered
		host   string
		reason string // "" admitted
	}{
		{"seed", crawlmsg.Discovered{URL: "http://a.example/"}, "a.example", ""},
		{"at max depth", crawlmsg.Discovered{URL: "http://a.example/", Depth: 20}, "a.example", ""},
		{"beyond max depth", crawlmsg.Discovered{URL: "http://a.example/", Depth: 21}, "a.example", crawlmsg.ReasonTooDeep},
		{"negative depth", crawlmsg.Discovered{URL: "http://a.example/", Depth: -1}, "a.example", crawlmsg.ReasonOutOfScope},
		{"negative hops", crawlmsg.Discovered{URL: "http://a.example/", Hops: -1}, "a.example", crawlmsg.ReasonOutOfScope},
		{"relative", crawlmsg.Discovered{URL: "/x"}, "", crawlmsg.ReasonOutOfScope},
		{"other scheme", crawlmsg.Discovered{URL: "ftp://a.example/"}, "", crawlmsg.ReasonOutOfScope},
		{"no host", crawlmsg.Discovered{URL: "http:///x"}, "", crawlmsg.ReasonOutOfScope},
		{"ipv6 zone disagrees with lua", crawlmsg.Discovered{URL: "http://[fe80::1%25en0]/"}, "", crawlmsg.ReasonOutOfScope},
	} {
		t.Run(tc.name, func(t *testing.T) {
			host, reason, _ := f.admissible(tc.u)
			if reason != tc.reason || host != tc.host {
				t.Fatalf("admissible(%+v) = %q, %q; want %q, %q", tc.u, host, reason, tc.host, tc.reason)
			}
		})
	}
}

func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    crawlmsg.Outcome
		want plan
		ok   bool
	}{
		{"200", crawlmsg.Outcome{Kind: crawlmsg.OutcomeFetched, Status: 200}, plan{act: actFetched, resetStreak: true, health: healthAnswered}, true},
		{"301", crawlmsg.Outcome{Kind: crawlmsg.OutcomeFetched, Status: 301}, plan{act: actFetched, resetStreak: true, health: healthAnswered}, true},
		{"404", crawlmsg.Outcome{Kind: crawlmsg.OutcomeFetched, Status: 404}, plan{act: actFetched, resetStreak: true, health: healthAnswered}, true},
		{"429 backs off but the host is alive", crawlmsg.Outcome{Kind: crawlmsg.OutcomeFetched, Status: 429}, plan{act: actRetry, health: healthAnswered}, true},
		{"503 is an error answer", crawlmsg.Outcome{Kind: crawlmsg.OutcomeFetched, Status: 503}, plan{act: actRetry, health: healthErrorAnswer}, true},
		{"network error: the host is down", crawlmsg.Outcome{Kind: crawlmsg.OutcomeError}, plan{act: actRetry, health: healthDown}, true},
		{"transient DNS failure is retried", crawlmsg.Outcome{Kind: crawlmsg.OutcomeError, Error: "lookup a.example: server misbehaving"}, plan{act: actRetry, health: healthDown}, true},
		{"no such host ends the host", crawlmsg.Outcome{Kind: crawlmsg.OutcomeError, Permanent: true, Error: "dns: no such host: a.example"}, plan{act: actFailed, health: healthGone}, true},
		{"other permanent error is the URL's", crawlmsg.Outcome{Kind: crawlmsg.OutcomeError, Permanent: true, Error: "invalid URL"}, plan{act: actFailed}, true},
		{"robots unavailable", crawlmsg.Outcome{Kind: crawlmsg.OutcomeRobotsUnavailable}, plan{act: actRetry, refund: true, health: healthDown}, true},
		{"blocked says nothing of the host", crawlmsg.Outcome{Kind: crawlmsg.OutcomeBlocked}, plan{act: actFailed, refund: true}, true},
		{"disallowed", crawlmsg.Outcome{Kind: crawlmsg.OutcomeDisallowed}, plan{act: actDisallowed, refund: true}, true},
		{"robots", crawlmsg.Outcome{Kind: crawlmsg.OutcomeRobots}, plan{act: actRequeue, resetStreak: true, refund: true, health: healthAnswered}, true},
		{"expired", crawlmsg.Outcome{Kind: crawlmsg.OutcomeExpired}, plan{act: actRequeue, refund: true}, true},
		{"unknown", crawlmsg.Outcome{Kind: "teleported"}, plan{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := classify(tc.o)
			if ok != tc.ok || got != tc.want {
				t.Fatalf("classify = %+v, %v; want %+v, %v", got, ok, tc.want, tc.ok)
			}
		})
	}
}

func TestResultString(t *testing.T) {
	if ResultRequeued.String() != "requeued" || ResultStale.String() != "stale" || Result(99).String() != "result(99)" {
		t.Fatal("Result names drifted")
	}
}

// scorer is a BacklinkScorer with fixed answers.
type scorer struct {
	x, score float64
}

func (s scorer) Priority(crawlmsg.Discovered, int) int { return 0 }
func (s scorer) BacklinkWeight() float64               { return s.x }
func (s scorer) LinkScore(crawlmsg.Discovered) float64 { return s.score }

// fixedQueue asks for a queue beyond F.
type fixedQueue struct{}

func (fixedQueue) Priority(crawlmsg.Discovered, int) int { return 100 }

func TestPriorityArgument(t *testing.T) {
	u := crawlmsg.Discovered{URL: "http://a.example/", Depth: 3, Hops: 1}
	for _, tc := range []struct {
		name string
		p    Prioritizer
		want string
	}{
		{"no prioritiser is breadth-first", nil, "3"},
		{"queue clamped to F-1", fixedQueue{}, "7"},
		{"link score passed as is", scorer{x: 1, score: 2.75}, "2.75"},
		{"negative link score is zero", scorer{x: 1, score: -4}, "0"},
		{"NaN link score is zero", scorer{x: 1, score: math.NaN()}, "0"},
		{"huge link score bounded", scorer{x: 1, score: math.Inf(1)}, "1e+06"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := New(nil, DefaultOptions(0), tc.p)
			if got := f.priority(u); got != tc.want {
				t.Fatalf("priority = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestSourceHost(t *testing.T) {
	pref := New(nil, DefaultOptions(0), scorer{x: 1})
	breadth := New(nil, DefaultOptions(0), nil)
	for _, tc := range []struct {
		name, source, want string
		f                  *Frontier
	}{
		{"page", "https://Hub.example:8443/a?b", "hub.example", pref},
		{"seed", "", "", pref},
		{"unreadable", "not a url", "", pref},
		{"not counted without a scorer", "https://hub.example/", "", breadth},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.f.sourceHost(tc.source); got != tc.want {
				t.Fatalf("sourceHost(%q) = %q, want %q", tc.source, got, tc.want)
			}
		})
	}
}

// New builds KEYS and ARGV to match lua/common.lua for any F. The settings are taken as
// given (they are validated where they are read, once); only the bounds that are not
// settings take their defaults when zero; and the defaults are the settings' own.
func TestNewLayoutAndDefaults(t *testing.T) {
	for _, fq := range []int{1, 8, 64} {
		o := DefaultOptions(0)
		o.FrontQueues = fq
		o.RetireAfter = 0
		o.RouteLimit, o.TopHosts = 0, 0
		f := New(nil, o, nil) // panics if the layout is out of step
		if len(f.keys) != fixedKeys+fq || len(f.args(0)) != argStart-1 {
			t.Fatalf("F=%d: %d keys, %d common args", fq, len(f.keys), len(f.args(0)))
		}
		got := f.Options()
		if got.RetireAfter != 0 || got.RouteLimit != DefaultOptions(0).RouteLimit || got.TopHosts != DefaultOptions(0).TopHosts {
			t.Fatalf("options %+v: want RetireAfter 0 as given and the internal bounds defaulted", got)
		}
	}
	if d := DefaultOptions(0); d.Settings != frontierconf.Defaults || d.Rules != politeness.Defaults || d.LeaseTTL != envconfig.DefaultLeaseTTL {
		t.Fatalf("defaults %+v differ from the settings' own", d)
	}
}

// A skip spool item is "<ms> <seed> <i>" and its entries, one a line, as the scripts'
// flush_stats writes it; anything else is reported bad so the drain can drop it.
func TestParseSpooled(t *testing.T) {
	for _, tc := range []struct {
		name, raw string
		urls      []string
		reason    string
	}{
		{"one", "1700000000000 42 1\n0 0 0 http://a.example/", []string{"http://a.example/"}, crawlmsg.ReasonOverBudget},
		{"several with ext", "1700000000000 42 257\n1 1 0 http://a.example/x eyJrIjoxfQ\n2 0 1 http://b.example/", []string{"http://a.example/x", "http://b.example/"}, crawlmsg.ReasonOverBudget},
		{"a retired host's queue", "1700000000000 42 1 retired\n0 0 0 http://a.example/", []string{"http://a.example/"}, crawlmsg.ReasonRetired},
		{"no entries", "1700000000000 42 1", nil, ""},
		{"bad time", "x 42 1\n0 0 0 http://a.example/", nil, ""},
		{"bad entry", "1700000000000 42 1\n0 0 http://a.example/", nil, ""},
		{"unknown reason", "1700000000000 42 1 gone\n0 0 0 http://a.example/", nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			it, ok := parseSpooled(tc.raw)
			if ok != (tc.urls != nil) {
				t.Fatalf("parsed %v, want %v", ok, tc.urls != nil)
			}
			if !ok {
				return
			}
			if it.At.UnixMilli() != 1700000000000 || it.Raw != tc.raw || len(it.Entries) != len(tc.urls) || it.Reason != tc.reason {
				t.Fatalf("parsed %+v", it)
			}
			for i, u := range tc.urls {
				if it.Entries[i].URL != u {
					t.Errorf("entry %d: %q, want %q", i, it.Entries[i].URL, u)
				}
			}
		})
	}
}
