package policy

import (
	"fmt"
	"testing"
)

// Set.Admit gives URL(u).Admit(u, depth)'s verdict and reason for every URL and depth,
// and allocates nothing to admit a URL.
func TestSetAdmitIsResolvedAdmit(t *testing.T) {
	set := compileT(t,
		rule(t, "domain:example.com", func(r *Rule) { r.MaxDepth = ptr(3); r.Include = []string{`/docs/`, `/blog/`} }),
		rule(t, "host:www.example.com", func(r *Rule) { r.Exclude = []string{`\.pdf$`} }),
		rule(t, "host:shop.example.com", func(r *Rule) { r.MaxDepth = ptr(1) }),
		rule(t, "https://www.example.com/docs/old/", func(r *Rule) { r.Include = []string{`/docs/old/keep`} }),
		rule(t, "https://www.example.com/docs/old/deep/", func(r *Rule) { r.MaxDepth = ptr(5) }),
		rule(t, "http://www.example.com:8080/", func(r *Rule) { r.Exclude = []string{`.`} }),
		rule(t, "host:other.test", func(r *Rule) { r.MinDelay = dur("2s") }),
	)
	urls := []string{
		"https://www.example.com/docs/a", "https://www.example.com/docs/a.pdf", "https://www.example.com/shop/",
		"https://www.example.com/docs/old/x", "https://www.example.com/docs/old/keep", "https://www.example.com/docs/old/deep/keep",
		"https://www.example.com/docs/old/deep/x", "http://www.example.com:8080/docs/a", "http://WWW.Example.com/docs/",
		"https://shop.example.com/docs/a", "https://example.com/blog/1", "https://a.b.example.com/x",
		"http://other.test/x.pdf", "http://plain.test/", "not a url",
	}
	for _, u := range urls {
		for depth := range 7 {
			t.Run(fmt.Sprintf("%s@%d", u, depth), func(t *testing.T) {
				ok, why := set.Admit(u, depth)
				wantOK, wantWhy := set.URL(u).Admit(u, depth)
				if ok != wantOK || why != wantWhy {
					t.Errorf("Set.Admit = %v %q, Resolved.Admit = %v %q", ok, why, wantOK, wantWhy)
				}
			})
		}
	}
	// Only a refusal builds a string, its reason.
	if raceEnabled {
		return
	}
	for _, u := range []string{"https://www.example.com/docs/old/keep", "https://www.example.com/docs/a", "http://plain.test/"} {
		if n := testing.AllocsPerRun(100, func() { set.Admit(u, 2) }); n != 0 {
			t.Errorf("Set.Admit(%s) allocates %v times", u, n)
		}
	}
}
