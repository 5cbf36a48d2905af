package itest

import (
	"slices"
	"testing"
	"time"

	"github.com/trawl/trawl/shared/policy"
	"github.com/trawl/trawl/shared/testwait"
)

const policyPage = `<html><body>
<a href="/docs/a">a</a>
<a href="/docs/private/b">b</a>
<a href="/shop/c">c</a>
</body></html>`

// TestLinksHeldToLiveRules: a running parser holds each link to the live site policies
// (a change applied to Redis, no restart), counts what they refuse by reason, and never
// publishes it.
func TestLinksHeldToLiveRules(t *testing.T) {
	s := newStack(t, map[string]string{"TRAWL_POLICY_POLL": "50ms"})
	s.run()
	ctx := testwait.Context(t)
	st := policy.NewStore(s.rdb, "trawl")
	apply := func(scope string, f func(r *policy.Rule)) int64 {
		sc, err := policy.ParseScope(scope)
		if err != nil {
			t.Fatal(err)
		}
		r := policy.Rule{Scope: sc}
		f(&r)
		v, _, err := st.Apply(ctx, []policy.Change{{Rule: r}}, "test", 0)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	followed := func(page string) []string {
		var out []string
		for _, d := range discoveredBy(s.takeDiscovered())[page] {
			out = append(out, d.URL)
		}
		slices.Sort(out)
		return out
	}
	waitVersion := func(v int64) {
		testwait.Eventually(t, 2*time.Second, "the parser to hold the rules' version", func() bool {
			return s.metric("trawl_parser_policy_version") == float64(v)
		})
	}

	// No rule yet: every link in TRAWL_SCOPE is followed.
	s.publishPage(htmlMeta("http://site.test/", 0), policyPage)
	s.waitSettled()
	if got := followed("http://site.test/"); !slices.Equal(got, []string{"http://site.test/docs/a", "http://site.test/docs/private/b", "http://site.test/shop/c"}) {
		t.Fatalf("without rules followed %v", got)
	}

	// A host rule: only /docs/, nothing private. Applied while the parser runs.
	waitVersion(apply("host:site.test", func(r *policy.Rule) {
		r.Include = []string{`^http://site\.test/docs/`}
		r.Exclude = []string{`/private/`}
	}))
	s.publishPage(htmlMeta("http://site.test/2", 0), policyPage)
	s.waitSettled()
	if got := followed("http://site.test/2"); !slices.Equal(got, []string{"http://site.test/docs/a"}) {
		t.Errorf("under the host rule followed %v, want only /docs/a", got)
	}
	for series, want := range map[string]float64{
		`trawl_parser_links_rejected_total{reason="policy_include"}`: 1,
		`trawl_parser_links_rejected_total{reason="policy_exclude"}`: 1,
		`trawl_parser_links_rejected_total{reason="policy_depth"}`:   0,
	} {
		if got := s.metric(series); got != want {
			t.Errorf("%s = %v, want %v", series, got, want)
		}
	}

	// A change narrows the depth: links from a depth-1 page (to depth 2) are refused.
	waitVersion(apply("domain:site.test", func(r *policy.Rule) { r.MaxDepth = ptr(1) }))
	s.publishPage(htmlMeta("http://site.test/docs/", 1), policyPage)
	s.waitSettled()
	if got := followed("http://site.test/docs/"); len(got) != 0 {
		t.Errorf("beyond the rule's depth followed %v", got)
	}
	// The depth is asked first: all three count as policy_depth.
	if got := s.metric(`trawl_parser_links_rejected_total{reason="policy_depth"}`); got != 3 {
		t.Errorf("policy_depth rejections = %v, want 3", got)
	}
}

func ptr[T any](v T) *T { return &v }
