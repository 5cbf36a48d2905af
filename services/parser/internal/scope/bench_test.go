package scope

import (
	"fmt"
	"testing"

	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/policy"
)

// BenchmarkSelectPolicy is the cost per link of the live site policies: 40 links of a page
// to 8 hosts, with no rule, with 10,000 rules none of which sets a scope field, and with
// 10,000 rules whose host rules each run an include and an exclude on every link.
func BenchmarkSelectPolicy(b *testing.B) {
	f, err := New(Config{Mode: Any, MaxDepth: 20, MaxURLLength: 2048, MaxOutlinks: 1000})
	if err != nil {
		b.Fatal(err)
	}
	var ls []crawlmsg.Link
	for i := range 40 {
		ls = append(ls, crawlmsg.Link{URL: fmt.Sprintf("http://h%d.example.com/section/page-%d.html", i%8, i), Tag: "a"})
	}
	set := func(scopeFields bool) *policy.Set {
		var rules []policy.Stored
		d := policy.Duration(2e9)
		for i := range 10000 {
			sc, err := policy.ParseScope(fmt.Sprintf("host:h%d.example.com", i))
			if err != nil {
				b.Fatal(err)
			}
			r := policy.Rule{Scope: sc, MinDelay: &d}
			if scopeFields {
				r.Include, r.Exclude = []string{`^http://`}, []string{`/never-linked-\d+$`}
			}
			rules = append(rules, policy.Stored{Rule: r})
		}
		s, err := policy.Compile(rules, 1)
		if err != nil {
			b.Fatal(err)
		}
		return s
	}
	for _, tc := range []struct {
		name  string
		rules *policy.Set
	}{{"rules=0", nil}, {"rules=10000,politeness-only", set(false)}, {"rules=10000,include+exclude", set(true)}} {
		b.Run(tc.name, func(b *testing.B) {
			p := Page{URL: "http://h0.example.com/", Depth: 1, Rules: tc.rules}
			b.ReportAllocs()
			for b.Loop() {
				if out, _ := f.Select(p, ls); len(out) != len(ls) {
					b.Fatalf("%d of %d links followed", len(out), len(ls))
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(ls)), "ns/link")
		})
	}
}
