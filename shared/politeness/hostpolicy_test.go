package politeness

import (
	"reflect"
	"testing"
	"time"

	"github.com/trawl/trawl/shared/frontierkeys"
	"github.com/trawl/trawl/shared/policy"
)

// TestResolveAsTheSet: a host's entry (the entry of its most specific rule, taken whole,
// which the scheduler stores in the host's state) holds the limits policy.Set resolves for
// the host, field by field over every rule that matches it; the entry names the rule that
// decided block and every rule merged.
func TestResolveAsTheSet(t *testing.T) {
	dur := func(d time.Duration) *policy.Duration { p := policy.Duration(d); return &p }
	num := func(n int) *int { return &n }
	yes, no := true, false
	rule := func(kind policy.Kind, v string, r policy.Rule) policy.Stored {
		r.Scope = policy.Scope{Kind: kind, Value: v}
		return policy.Stored{Rule: r}
	}
	set, err := policy.Compile([]policy.Stored{
		rule(policy.KindDomain, "example.com", policy.Rule{MinDelay: dur(time.Minute), Block: &yes, CrawlDelay: &policy.CrawlDelay{Exact: true}}),
		rule(policy.KindDomain, "shop.example.com", policy.Rule{Connections: num(3)}),
		rule(policy.KindHost, "www.shop.example.com", policy.Rule{MinDelay: dur(time.Second), Block: &no}),
		rule(policy.KindHost, "header.example.org", policy.Rule{Headers: map[string]string{"X-A": "1"}}),
	}, 1)
	if err != nil {
		t.Fatal(err)
	}
	res := Resolve(set)
	for _, tt := range []struct {
		host    string
		blockBy string
		rules   []string // nil: no entry
	}{
		{"www.shop.example.com", "host:www.shop.example.com", []string{"host:www.shop.example.com", "domain:shop.example.com", "domain:example.com"}},
		{"img.shop.example.com", "domain:example.com", []string{"domain:shop.example.com", "domain:example.com"}},
		{"example.com", "domain:example.com", []string{"domain:example.com"}},
		{"header.example.org", "", []string{"host:header.example.org"}},
		{"example.org", "", nil},
	} {
		t.Run(tt.host, func(t *testing.T) {
			v := res.Entry(tt.host)
			found := v != ""
			got, err := frontierkeys.ParsePolicyEntry(v)
			if err != nil {
				t.Fatal(err)
			}
			if found != (tt.rules != nil) {
				t.Fatalf("entry found %v, want %v", found, tt.rules != nil)
			}
			if want := PolicyLimits(set.Host(tt.host).Rule); !reflect.DeepEqual(got.Limits, want) {
				t.Errorf("limits %s, the set resolves %s", got.Limits.Encode(), want.Encode())
			}
			if got.BlockBy != tt.blockBy || !reflect.DeepEqual(got.Rules, tt.rules) && tt.rules != nil {
				t.Errorf("block by %q rules %v, want %q %v", got.BlockBy, got.Rules, tt.blockBy, tt.rules)
			}
		})
	}
}

// TestResolveGeneration: equal rules give equal generations (two schedulers on a shard
// agree), other rules another, and no host or domain rule none.
func TestResolveGeneration(t *testing.T) {
	compile := func(v int64, rs ...policy.Stored) *policy.Set {
		set, err := policy.Compile(rs, v)
		if err != nil {
			t.Fatal(err)
		}
		return set
	}
	n := 2
	a := policy.Stored{Rule: policy.Rule{Scope: policy.Scope{Kind: policy.KindDomain, Value: "example.com"}, Connections: &n}}
	m := 3
	b := policy.Stored{Rule: policy.Rule{Scope: policy.Scope{Kind: policy.KindDomain, Value: "example.com"}, Connections: &m}}
	g1, g2, g3 := Resolve(compile(1, a)).Gen(), Resolve(compile(2, a)).Gen(), Resolve(compile(3, b)).Gen()
	if g1 == "" || g1 != g2 || g1 == g3 {
		t.Fatalf("generations %q %q %q: want the first two equal, the third other", g1, g2, g3)
	}
	if g := Resolve(compile(4)).Gen(); g != "" {
		t.Fatalf("generation %q without rules", g)
	}
	if e := Resolve(compile(1, a)).Entry("www.example.com"); e == "" {
		t.Fatal("a subdomain has no entry")
	}
	if e := Resolve(compile(1, a)).Entry("example.org"); e != "" {
		t.Fatalf("an unmatched host has entry %q", e)
	}
}
