package politeness

import (
	"reflect"
	"testing"
	"time"

	"github.com/trawl/trawl/shared/frontierkeys"
	"github.com/trawl/trawl/shared/policy"
)

// TestPolicyTableResolvesAsTheSet: a host's limits read from the policy table as the
// scripts and ReadHostLimits read them (the entry of its most specific rule, taken whole)
// are the limits policy.Set resolves for the host, field by field over every rule that
// matches it; the entry names the rule that decided block and every rule merged.
func TestPolicyTableResolvesAsTheSet(t *testing.T) {
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
	table := PolicyTable(set)
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
			var got frontierkeys.PolicyEntry
			found := false
			for _, c := range frontierkeys.PolicyCandidates(tt.host) {
				if v, ok := table[c]; ok {
					if got, err = frontierkeys.ParsePolicyEntry(v); err != nil {
						t.Fatal(err)
					}
					found = true
					break
				}
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
