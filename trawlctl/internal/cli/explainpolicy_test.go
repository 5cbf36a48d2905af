package cli

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/trawl/trawl/shared/frontierkeys"
	"github.com/trawl/trawl/shared/policy"
	"github.com/trawl/trawl/shared/testwait"
	"github.com/trawl/trawl/shared/topology"
	"github.com/trawl/trawl/trawlctl/internal/inspect"
)

// TestExplainPolicy: explain names, for each limit, the value and what decided it — a
// rule with its file line or its change, or the process-wide setting — and a blocked
// host's parked URLs, against rules applied to a real redis-server.
func TestExplainPolicy(t *testing.T) {
	s := startStack(t, 2)
	ctx := testwait.Context(t)
	rule := func(scope string, f func(r *policy.Rule)) policy.Rule {
		sc, err := policy.ParseScope(scope)
		if err != nil {
			t.Fatal(err)
		}
		r := policy.Rule{Scope: sc}
		f(&r)
		return r
	}
	d := func(s string) *policy.Duration {
		v, err := policy.ParseDuration(s)
		if err != nil {
			t.Fatal(err)
		}
		return &v
	}
	st := policy.NewStore(s.rdb, "trawl")
	// A rules file's lines, then a change by hand: the origins explain must name.
	if _, _, err := st.Apply(ctx, []policy.Change{
		{Rule: rule("domain:example.com", func(r *policy.Rule) {
			r.MinDelay, r.Connections, r.HostBudget = d("3s"), ptr(2), ptr[int64](500)
			r.Include = []string{`^https://[^/]+/docs/`}
		}), Source: "rules.yaml:4"},
		{Rule: rule("host:www.example.com", func(r *policy.Rule) {
			r.CrawlDelay = &policy.CrawlDelay{Exact: true}
			r.UserAgent = ptr("ExampleBot/2")
			r.Cookies, r.Credentials = ptr("example-session"), ptr("example-login")
			r.HeaderSecrets = map[string]string{"X-Api-Key": "example-key"}
			r.Headers = map[string]string{"X-Team": "crawl"}
		}), Source: "rules.yaml:11"},
		{Rule: rule("https://www.example.com/docs/old/", func(r *policy.Rule) {
			r.Exclude = []string{`\.pdf$`}
			r.RecrawlMax = d("2h")
		}), Source: "rules.yaml:20"},
	}, "alice", 0); err != nil {
		t.Fatal(err)
	}
	if _, _, err := st.Apply(ctx, []policy.Change{{Rule: rule("host:blocked.test", func(r *policy.Rule) { r.Block = ptr(true) })}}, "bob", 0); err != nil {
		t.Fatal(err)
	}
	// The scheduler parked three of blocked.test's URLs (sched-policy's keys, written here
	// as its scripts write them).
	ks := frontierkeys.ForShard("trawl", topology.ShardOf("blocked.test", 2), 2)
	if err := s.rdb.HSet(ctx, ks.Parked(), "blocked.test", "blocked 3 host:blocked.test").Err(); err != nil {
		t.Fatal(err)
	}
	if err := s.rdb.RPush(ctx, ks.Park("blocked.test"), "0 0 0 http://blocked.test/a", "0 0 0 http://blocked.test/b", "0 0 0 http://blocked.test/c").Err(); err != nil {
		t.Fatal(err)
	}

	explain := func(t *testing.T, env map[string]string, url string) *inspect.Report {
		inv := s.inv
		inv.env = map[string]string{}
		for k, v := range s.inv.env {
			inv.env[k] = v
		}
		for k, v := range env {
			inv.env[k] = v
		}
		r := inv.run(t, "explain", "-json", url)
		if r.code != 0 {
			t.Fatalf("exit %d: %s", r.code, r.stderr)
		}
		var rep inspect.Report
		if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
			t.Fatalf("%v: %s", err, r.stdout)
		}
		return &rep
	}
	type want struct{ value, by string }
	tests := []struct {
		name     string
		env      map[string]string
		url      string
		limits   map[policy.Field]want
		admitted bool
		why      string
		blocked  string
		parked   int64
	}{
		{"host over domain over process-wide", map[string]string{"TRAWL_DELAY_FACTOR": "7", "TRAWL_MAX_PAGES_PER_HOST": "0"},
			"https://www.example.com/docs/guide", map[policy.Field]want{
				policy.FMinDelay:     {"3s", "rule domain:example.com (rules.yaml:4, change v1 by alice at "},
				policy.FDelayFactor:  {"7 × the last response time", "process-wide TRAWL_DELAY_FACTOR"},
				policy.FCrawlDelay:   {"robots.txt Crawl-delay honoured exactly, however long", "rule host:www.example.com (rules.yaml:11, change v1 by alice"},
				policy.FConnections:  {"2 in flight per host", "rule domain:example.com"},
				policy.FHostBudget:   {"500 pages per host", "rule domain:example.com"},
				policy.FMaxDepth:     {"20", "process-wide TRAWL_MAX_DEPTH"},
				policy.FInclude:      {`^https://[^/]+/docs/`, "rule domain:example.com"},
				policy.FExclude:      {"none", "process-wide TRAWL_EXCLUDE"},
				policy.FRecrawlMax:   {"720h0m0s", "process-wide TRAWL_RECRAWL_MAX"},
				policy.FUserAgent:    {"ExampleBot/2", "rule host:www.example.com"},
				policy.FHeaders:      {"X-Team: crawl", "rule host:www.example.com"},
				"header_secrets":     {`X-Api-Key: secret "example-key"`, "rule host:www.example.com"},
				policy.FCookies:      {`secret "example-session"`, "rule host:www.example.com"},
				policy.FCredentials:  {`secret "example-login"`, "rule host:www.example.com"},
				policy.FBlock:        {"no", "default (not blocked)"},
				policy.FDomainBudget: {"none", "default"},
			}, true, "", "", 0},
		{"a URL prefix rule", nil, "https://www.example.com/docs/old/a.pdf", map[policy.Field]want{
			policy.FExclude:    {`\.pdf$`, "rule surt:"},
			policy.FRecrawlMax: {"2h0m0s", "(rules.yaml:20, change v1 by alice"},
			policy.FRecrawlMin: {"1h0m0s", "process-wide TRAWL_RECRAWL_MIN"},
		}, false, "exclude of surt:", "", 0},
		{"out of the domain rule's include", nil, "https://shop.example.com/cart", map[policy.Field]want{
			policy.FInclude: {`^https://[^/]+/docs/`, "rule domain:example.com"},
		}, false, "include of domain:example.com", "", 0},
		{"blocked and parked, set by hand", nil, "http://blocked.test/x", map[policy.Field]want{
			policy.FBlock:    {"yes: no request is made, queued URLs are parked", "rule host:blocked.test (change v2 by bob at "},
			policy.FMinDelay: {"1s", "process-wide TRAWL_MIN_DELAY"},
		}, true, "", "host:blocked.test (change v2 by bob at ", 3},
		{"no rule", nil, "http://plain.test/", map[policy.Field]want{
			policy.FConnections: {"1 in flight per host", "default (one request in flight per host)"},
			policy.FCookies:     {"none", "default (none)"},
		}, true, "", "", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := explain(t, tt.env, tt.url)
			p := r.Policy
			if p.Version != 2 || p.Rules != 4 || p.Note != "" {
				t.Errorf("rules version %d count %d note %q, want version 2, 4 rules", p.Version, p.Rules, p.Note)
			}
			got := map[policy.Field]inspect.Limit{}
			for _, l := range p.Limits {
				got[l.Field] = l
			}
			for _, f := range policy.Fields() {
				if _, ok := got[f]; !ok {
					t.Errorf("no line for %s", f)
				}
			}
			for f, w := range tt.limits {
				l := got[f]
				if l.Value != w.value || !strings.Contains(l.DecidedBy(), w.by) {
					t.Errorf("%s = %q by %q, want %q by …%q…", f, l.Value, l.DecidedBy(), w.value, w.by)
				}
			}
			if p.Admitted != tt.admitted || !strings.Contains(p.Why, tt.why) {
				t.Errorf("admitted %v (%q), want %v (%q)", p.Admitted, p.Why, tt.admitted, tt.why)
			}
			if !strings.Contains(p.Blocked, tt.blocked) || (tt.blocked == "") != (p.Blocked == "") {
				t.Errorf("blocked %q, want %q", p.Blocked, tt.blocked)
			}
			switch {
			case tt.parked == 0 && p.Parked != nil:
				t.Errorf("parked %+v, want none", p.Parked)
			case tt.parked > 0 && (p.Parked == nil || p.Parked.Entries != tt.parked || p.Parked.Queued != tt.parked || p.Parked.Reason != "blocked" || p.Parked.Rule != "host:blocked.test"):
				t.Errorf("parked %+v, want %d blocked", p.Parked, tt.parked)
			}
		})
	}

	t.Run("text names rules, parked URLs and secrets by name only", func(t *testing.T) {
		r := s.inv.run(t, "explain", "http://blocked.test/x")
		for _, w := range []string{
			"policy     rules at version 2 (4 rules); BLOCKED by host:blocked.test (change v2 by bob at ",
			"PARKED 3 URLs of this host (reason blocked by host:blocked.test; 3 in trawl:{s",
			"min_delay      1s  ← process-wide TRAWL_MIN_DELAY",
		} {
			if !strings.Contains(r.stdout, w) {
				t.Errorf("text lacks %q:\n%s", w, r.stdout)
			}
		}
		r = s.inv.run(t, "explain", "https://www.example.com/docs/")
		for _, w := range []string{`cookies        secret "example-session"  ← rule host:www.example.com (rules.yaml:11, change v1 by alice at `} {
			if !strings.Contains(r.stdout, w) {
				t.Errorf("text lacks %q:\n%s", w, r.stdout)
			}
		}
	})

	t.Run("unreadable rules are said, the rest still explained", func(t *testing.T) {
		if err := s.rdb.HSet(ctx, policy.KeysFor("broken").Rules, "host:x.test", "{not json").Err(); err != nil {
			t.Fatal(err)
		}
		if err := s.rdb.Set(ctx, policy.KeysFor("broken").Version, 1, 0).Err(); err != nil {
			t.Fatal(err)
		}
		r := explain(t, map[string]string{"TRAWL_REDIS_PREFIX": "broken"}, "http://x.test/")
		if r.Policy.Note == "" || r.Policy.Limits[0].Setting != "process-wide TRAWL_MIN_DELAY" {
			t.Errorf("policy %+v, want a note and the process-wide settings", r.Policy)
		}
	})
}

func ptr[T any](v T) *T { return &v }
