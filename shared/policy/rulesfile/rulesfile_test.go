package rulesfile

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/trawl/trawl/shared/policy"
)

func TestParseFile(t *testing.T) {
	data, err := os.ReadFile("testdata/rules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	changes, err := Parse("/etc/trawl/testdata/rules.yaml", data)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]policy.Change{}
	for _, c := range changes {
		got[c.Rule.Scope.String()] = c
	}
	if len(changes) != 6 {
		t.Fatalf("%d rules, want 6: %v", len(changes), got)
	}
	d := got["domain:example.com"]
	if d.Source != "rules.yaml:6" || *d.Rule.Connections != 4 || time.Duration(*d.Rule.MinDelay) != 250*time.Millisecond || *d.Rule.DomainBudget != 50000 || d.Rule.Note == "" {
		t.Fatalf("domain rule %+v from %s", d.Rule, d.Source)
	}
	if s := got["host:shop.example.com"]; !s.Rule.CrawlDelay.Exact || *s.Rule.DelayFactor != 10 || s.Source != "rules.yaml:13" {
		t.Fatalf("shop rule %+v from %s", s.Rule, s.Source)
	}
	docs := got["surt:http://(com,example,)/docs/"]
	if len(docs.Rule.Exclude) != 2 || time.Duration(*docs.Rule.RecrawlMax) != 168*time.Hour {
		t.Fatalf("docs rule %+v", docs.Rule)
	}
	m := got["host:members.example.org"]
	if m.Rule.HeaderSecrets["X-Api-Key"] != "members-api-key" || *m.Rule.Cookies != "members-cookie" || m.Rule.Headers["Accept-Language"] != "en" {
		t.Fatalf("members rule %+v", m.Rule)
	}
	if _, err := policy.Compile(storedOf(changes), 1); err != nil {
		t.Fatalf("the example file does not compile: %v", err)
	}
}

func storedOf(cs []policy.Change) []policy.Stored {
	var out []policy.Stored
	for _, c := range cs {
		out = append(out, policy.Stored{Rule: c.Rule, Origin: policy.Origin{Source: c.Source}})
	}
	return out
}

func TestParseFileRefuses(t *testing.T) {
	tests := []struct{ name, file, err string }{
		{"unknown field", "- scope: host:a.example\n  min_dealy: 2s\n", `rules.yaml:1: host:a.example: unknown field "min_dealy"`},
		{"no scope", "- block: true\n", "rules.yaml:1: a rule without scope:"},
		{"bad scope", "- scope: host:a.example\n  block: true\n- scope: domain:co.uk\n", "rules.yaml:3:"},
		{"bad value names the line and scope", "- scope: host:a.example\n\n  connections: 0\n", "rules.yaml:1: policy: host:a.example: connections: 0 is outside"},
		{"politeness on a path", "- scope: https://a.example/x/\n  min_delay: 1s\n", "min_delay: a URL prefix rule may not set it"},
		{"bad duration", "- scope: host:a.example\n  min_delay: soon\n", `duration "soon"`},
		{"same scope twice", "- scope: host:a.example\n  block: true\n- scope: host:A.example\n  block: false\n", "rules.yaml:3: host:a.example is already set at line 1"},
		{"not a list", "scope: host:a.example\n", "want a list of rules"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("rules.yaml", []byte(tt.file))
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Fatalf("ParseFile = %v, want an error saying %q", err, tt.err)
			}
		})
	}
}

func TestFileChanges(t *testing.T) {
	blocked := func(scope, source string) policy.Stored {
		sc, err := policy.ParseScope(scope)
		if err != nil {
			t.Fatal(err)
		}
		yes := true
		return policy.Stored{Rule: policy.Rule{Scope: sc, Block: &yes}, Origin: policy.Origin{Version: 1, Source: source}}
	}
	cur, err := policy.Compile([]policy.Stored{
		blocked("host:a.example", "rules.yaml:1"),     // still in the file
		blocked("host:b.example", "rules.yaml:4"),     // dropped from the file: removed
		blocked("host:c.example", ""),                 // set by hand: kept unless prune
		blocked("host:d.example", "other.yaml:2"),     // another file's: kept unless prune
		blocked("host:e.example", "old/rules.yaml:9"), // (a path is never stored; see Parse)
	}, 1)
	if err != nil {
		t.Fatal(err)
	}
	file, err := Parse("ops/rules.yaml", []byte("- scope: host:a.example\n  block: false\n"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		prune bool
		want  string
	}{
		{false, "set host:a.example, remove host:b.example"},
		{true, "set host:a.example, remove host:b.example, remove host:c.example, remove host:d.example, remove host:e.example"},
	} {
		var got []string
		for _, c := range FileChanges(cur, "ops/rules.yaml", file, tt.prune) {
			verb := "set"
			if c.Remove {
				verb = "remove"
			}
			got = append(got, verb+" "+c.Rule.Scope.String())
		}
		if strings.Join(got, ", ") != tt.want {
			t.Errorf("prune=%v: %s, want %s", tt.prune, strings.Join(got, ", "), tt.want)
		}
	}
}
