package policy

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"runtime"
	"strings"
	"testing"
	"time"
)

func ptr[T any](v T) *T { return &v }

func dur(s string) *Duration { d, _ := ParseDuration(s); return &d }

// rule is a stored rule at scope with the fields f sets, at version 1.
func rule(t testing.TB, scope string, f func(r *Rule)) Stored {
	t.Helper()
	sc, err := ParseScope(scope)
	if err != nil {
		t.Fatal(err)
	}
	st := Stored{Rule: Rule{Scope: sc}, Origin: Origin{Version: 1}}
	f(&st.Rule)
	return st
}

func compileT(t testing.TB, rules ...Stored) *Set {
	t.Helper()
	s, err := Compile(rules, 1)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// The precedence table: each row, the rules loaded, a URL (or an address), and for each
// field asked which scope decided it ("" = no rule: the process-wide setting).
func TestPrecedence(t *testing.T) {
	delay := func(d string) func(r *Rule) { return func(r *Rule) { r.MinDelay = dur(d) } }
	conns := func(n int) func(r *Rule) { return func(r *Rule) { r.Connections = ptr(n) } }
	block := func(r *Rule) { r.Block = ptr(true) }
	both := func(fs ...func(r *Rule)) func(r *Rule) {
		return func(r *Rule) {
			for _, f := range fs {
				f(r)
			}
		}
	}
	type rl struct {
		scope string
		f     func(r *Rule)
	}
	tests := []struct {
		name  string
		rules []rl
		url   string // or "addr:<ip>"
		want  map[Field]string
	}{
		{"no rule", nil, "https://example.com/", map[Field]string{FMinDelay: "", FBlock: ""}},
		{"domain covers its name", []rl{{"domain:example.com", delay("2s")}},
			"https://example.com/a", map[Field]string{FMinDelay: "domain:example.com"}},
		{"domain covers names under it", []rl{{"domain:example.com", delay("2s")}},
			"https://a.b.example.com/a", map[Field]string{FMinDelay: "domain:example.com"}},
		{"domain does not cover a name that only ends like it", []rl{{"domain:example.com", delay("2s")}},
			"https://notexample.com/a", map[Field]string{FMinDelay: ""}},
		{"longer domain beats shorter", []rl{{"domain:example.com", delay("2s")}, {"domain:shop.example.com", delay("3s")}},
			"https://www.shop.example.com/", map[Field]string{FMinDelay: "domain:shop.example.com"}},
		{"host beats domain", []rl{{"domain:example.com", delay("2s")}, {"host:www.example.com", delay("5s")}},
			"https://www.example.com/", map[Field]string{FMinDelay: "host:www.example.com"}},
		{"host rule is one host only", []rl{{"domain:example.com", delay("2s")}, {"host:example.com", delay("5s")}},
			"https://www.example.com/", map[Field]string{FMinDelay: "domain:example.com"}},
		{"prefix beats host", []rl{{"host:example.com", block}, {"https://example.com/open/", func(r *Rule) { r.Block = ptr(false) }}},
			"https://example.com/open/page", map[Field]string{FBlock: "surt:http://(com,example,)/open/"}},
		{"prefix does not match other paths", []rl{{"host:example.com", block}, {"https://example.com/open/", func(r *Rule) { r.Block = ptr(false) }}},
			"https://example.com/closed", map[Field]string{FBlock: "host:example.com"}},
		{"longer prefix beats shorter", []rl{{"https://example.com/a", func(r *Rule) { r.MaxDepth = ptr(1) }}, {"https://example.com/a/b", func(r *Rule) { r.MaxDepth = ptr(2) }}},
			"https://example.com/a/b/c", map[Field]string{FMaxDepth: "surt:http://(com,example,)/a/b"}},
		{"prefix matches http and https alike", []rl{{"https://example.com/a", block}},
			"http://example.com/a", map[Field]string{FBlock: "surt:http://(com,example,)/a"}},
		{"prefix without port does not match another port", []rl{{"https://example.com/a", block}},
			"https://example.com:8443/a", map[Field]string{FBlock: ""}},
		{"prefix with port matches that port", []rl{{"http://example.com:8080/a", block}},
			"http://example.com:8080/a/x", map[Field]string{FBlock: "surt:http://(com,example,:8080)/a"}},
		{"host rule covers every port", []rl{{"host:example.com", block}},
			"http://example.com:8080/a", map[Field]string{FBlock: "host:example.com"}},
		{"prefix's query part", []rl{{"https://example.com/s?q=", block}},
			"https://example.com/s?q=1", map[Field]string{FBlock: "surt:http://(com,example,)/s?q="}},
		{"field by field: each from the most specific rule setting it",
			[]rl{{"domain:example.com", both(delay("2s"), conns(4))}, {"host:www.example.com", delay("5s")}, {"https://www.example.com/x/", block}},
			"https://www.example.com/x/1", map[Field]string{FMinDelay: "host:www.example.com", FConnections: "domain:example.com", FBlock: "surt:http://(com,example,www,)/x/", FMaxDepth: ""}},
		{"address block: longer prefix beats shorter", []rl{{"cidr:192.0.2.0/24", delay("2s")}, {"cidr:192.0.2.128/25", delay("3s")}},
			"addr:192.0.2.200", map[Field]string{FMinDelay: "cidr:192.0.2.128/25"}},
		{"address block: the shorter decides outside the longer", []rl{{"cidr:192.0.2.0/24", delay("2s")}, {"cidr:192.0.2.128/25", delay("3s")}},
			"addr:192.0.2.1", map[Field]string{FMinDelay: "cidr:192.0.2.0/24"}},
		{"address block: field by field", []rl{{"cidr:192.0.0.0/16", conns(2)}, {"cidr:192.0.2.0/24", delay("3s")}},
			"addr:192.0.2.1", map[Field]string{FMinDelay: "cidr:192.0.2.0/24", FConnections: "cidr:192.0.0.0/16"}},
		{"address block: IPv6", []rl{{"cidr:2001:db8::/32", delay("2s")}},
			"addr:2001:db8::5", map[Field]string{FMinDelay: "cidr:2001:db8::/32"}},
		{"address blocks never decide a URL's policy", []rl{{"cidr:192.0.2.0/24", delay("2s")}},
			"http://192.0.2.1/", map[Field]string{FMinDelay: ""}},
		{"host rule by address", []rl{{"host:192.0.2.1", delay("2s")}},
			"http://192.0.2.1:8080/", map[Field]string{FMinDelay: "host:192.0.2.1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var rules []Stored
			for _, r := range tt.rules {
				rules = append(rules, rule(t, r.scope, r.f))
			}
			s := compileT(t, rules...)
			var res Resolved
			if a, ok := strings.CutPrefix(tt.url, "addr:"); ok {
				res = s.Addr(netip.MustParseAddr(a))
			} else {
				res = s.URL(tt.url)
			}
			for f, want := range tt.want {
				got := ""
				if st, ok := res.From[f]; ok {
					got = st.Scope.String()
				}
				if got != want {
					t.Errorf("%s decided by %q, want %q (From: %v)", f, got, want, res.From)
				}
			}
		})
	}
}

func TestResolvedValues(t *testing.T) {
	s := compileT(t,
		rule(t, "domain:example.com", func(r *Rule) {
			r.MinDelay, r.DomainBudget, r.CrawlDelay = dur("2s"), ptr[int64](100), &CrawlDelay{Exact: true}
		}),
		rule(t, "host:www.example.com", func(r *Rule) { r.MinDelay, r.Connections = dur("500ms"), ptr(3) }),
	)
	res := s.Host("www.example.com")
	if time.Duration(*res.MinDelay) != 500*time.Millisecond || *res.Connections != 3 || *res.DomainBudget != 100 || !res.CrawlDelay.Exact {
		t.Fatalf("merged %+v", res.Rule)
	}
	if res.Domain != "example.com" {
		t.Fatalf("Domain = %q, want example.com", res.Domain)
	}
	if res.Blocked() {
		t.Fatal("blocked with no block rule")
	}
	if got := s.Host("other.org"); got.From != nil || got.MinDelay != nil {
		t.Fatalf("a host no rule covers got %+v", got)
	}
}

func TestCompileRefuses(t *testing.T) {
	tests := []struct {
		scope string
		f     func(r *Rule)
		err   string
	}{
		{"https://example.com/private/", func(r *Rule) { r.MinDelay = dur("2s") }, "min_delay: a URL prefix rule may not set it"},
		{"https://example.com/private/", func(r *Rule) { r.Connections = ptr(2) }, "connections: a URL prefix rule"},
		{"https://example.com/private/", func(r *Rule) { r.CrawlDelay = &CrawlDelay{Exact: true} }, "crawl_delay: a URL prefix rule"},
		{"https://example.com/private/", func(r *Rule) { r.DelayFactor = ptr(2.0) }, "delay_factor: a URL prefix rule"},
		{"https://example.com/private/", func(r *Rule) { r.HostBudget = ptr[int64](5) }, "host_budget: a URL prefix rule"},
		{"host:example.com", func(r *Rule) { r.DomainBudget = ptr[int64](5) }, "domain_budget: only a domain rule"},
		{"cidr:192.0.2.0/24", func(r *Rule) { r.Block = ptr(true) }, "block: an address-block rule sets only"},
		{"cidr:192.0.2.0/24", func(r *Rule) { r.CrawlDelay = &CrawlDelay{Cap: time.Minute} }, "crawl_delay: an address-block rule"},
		{"host:example.com", func(r *Rule) { r.Connections = ptr(0) }, "connections: 0 is outside 1..64"},
		{"host:example.com", func(r *Rule) { r.MinDelay = dur("-1s") }, "min_delay: -1s is outside"},
		{"host:example.com", func(r *Rule) { r.DelayFactor = ptr(-1.0) }, "delay_factor"},
		{"host:example.com", func(r *Rule) { r.MaxDepth = ptr(-1) }, "max_depth: -1 is negative"},
		{"host:example.com", func(r *Rule) { r.Include = []string{"("} }, "include: \"(\" does not compile"},
		{"host:example.com", func(r *Rule) { r.Exclude = []string{"[a-"} }, "exclude:"},
		{"host:example.com", func(r *Rule) { r.RecrawlMin, r.RecrawlMax = dur("2h"), dur("1h") }, "recrawl_min: 2h0m0s is above recrawl_max"},
		{"host:example.com", func(r *Rule) { r.Headers = map[string]string{"Cookie": "a=b"} }, "headers: Cookie may not be set here: use cookies"},
		{"host:example.com", func(r *Rule) { r.Headers = map[string]string{"X A": "b"} }, "not a header name"},
		{"host:example.com", func(r *Rule) { r.Cookies = ptr("../etc/passwd") }, "cookies: secret name"},
		{"host:example.com", func(r *Rule) { r.Render = ptr("sometimes") }, "render: \"sometimes\" is not one of"},
		{"host:example.com", func(r *Rule) { r.UserAgent = ptr("a\nb") }, "user_agent"},
	}
	for _, tt := range tests {
		t.Run(tt.err, func(t *testing.T) {
			_, err := Compile([]Stored{rule(t, tt.scope, tt.f)}, 1)
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Fatalf("Compile = %v, want an error saying %q", err, tt.err)
			}
			sc, _ := ParseScope(tt.scope)
			if !strings.Contains(err.Error(), sc.String()) {
				t.Fatalf("the error %q does not name the rule's scope %s", err, sc)
			}
		})
	}
	t.Run("a scope not in canonical form", func(t *testing.T) {
		_, err := Compile([]Stored{{Rule: Rule{Scope: Scope{Kind: KindHost, Value: "Example.com"}}}}, 1)
		if err == nil || !strings.Contains(err.Error(), "canonical") {
			t.Fatalf("Compile = %v", err)
		}
	})
	t.Run("every bad rule is named", func(t *testing.T) {
		_, err := Compile([]Stored{
			rule(t, "host:a.example", func(r *Rule) { r.Connections = ptr(0) }),
			rule(t, "host:b.example", func(r *Rule) { r.MaxDepth = ptr(-2) }),
		}, 1)
		if err == nil || !strings.Contains(err.Error(), "host:a.example") || !strings.Contains(err.Error(), "host:b.example") {
			t.Fatalf("Compile = %v", err)
		}
	})
}

func TestAdmit(t *testing.T) {
	s := compileT(t,
		rule(t, "domain:example.com", func(r *Rule) { r.MaxDepth = ptr(3); r.Include = []string{`^https://[^/]+/(docs|private)/`} }),
		rule(t, "https://example.com/private/", func(r *Rule) { r.Exclude = []string{`\.pdf$`} }),
	)
	tests := []struct {
		url   string
		depth int
		ok    bool
		why   string
	}{
		{"https://example.com/docs/a", 3, true, ""},
		{"https://example.com/docs/a", 4, false, "max_depth of domain:example.com"},
		{"https://example.com/blog/a", 0, false, "include of domain:example.com"},
		{"https://example.com/private/a.pdf", 0, false, "exclude of surt:http://(com,example,)/private/"},
		{"https://example.com/private/a.html", 0, true, ""},
		{"https://other.org/anything", 99, true, ""},
	}
	for _, tt := range tests {
		t.Run(tt.url, func(t *testing.T) {
			ok, why := s.URL(tt.url).Admit(tt.url, tt.depth)
			if ok != tt.ok || why != tt.why {
				t.Fatalf("Admit = %v %q, want %v %q", ok, why, tt.ok, tt.why)
			}
		})
	}
	t.Run("a Resolved built by hand compiles its patterns", func(t *testing.T) {
		r := Resolved{Rule: Rule{Exclude: []string{`x`}}}
		if ok, _ := r.Admit("https://a.example/x", 0); ok {
			t.Fatal("admitted a URL its exclude matches")
		}
	})
}

func TestRuleSetsAny(t *testing.T) {
	tests := []struct {
		name   string
		rule   Rule
		fields []Field
		want   bool
	}{
		{"a scope field it sets", Rule{MaxDepth: ptr(2)}, ScopeFields(), true},
		{"one of several", Rule{Exclude: []string{"x"}}, []Field{FBlock, FExclude}, true},
		{"fields it does not set", Rule{Block: ptr(true), Headers: map[string]string{"X": "y"}}, ScopeFields(), false},
		{"an empty list it sets nothing by", Rule{Include: []string{}}, []Field{FInclude}, false},
		{"no fields asked", Rule{MaxDepth: ptr(2)}, nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.rule.SetsAny(tt.fields...); got != tt.want {
				t.Fatalf("SetsAny(%v) = %v, want %v", tt.fields, got, tt.want)
			}
		})
	}
	t.Run("ScopeFields are what Admit decides by, and a copy", func(t *testing.T) {
		sf := ScopeFields()
		want := []Field{FMaxDepth, FInclude, FExclude}
		if fmt.Sprint(sf) != fmt.Sprint(want) {
			t.Fatalf("ScopeFields = %v, want %v", sf, want)
		}
		sf[0] = FBlock
		if ScopeFields()[0] != FMaxDepth {
			t.Fatal("a caller's change to ScopeFields' slice reached the package's")
		}
	})
}

func TestCovers(t *testing.T) {
	s := Empty()
	for _, tt := range []struct {
		scope, host string
		want        bool
	}{
		{"host:example.com", "example.com", true},
		{"host:example.com", "www.example.com", false},
		{"domain:example.com", "www.example.com", true},
		{"domain:example.com", "badexample.com", false},
		{"https://www.example.com/a", "www.example.com", true},
		{"https://www.example.com/a", "example.com", false},
	} {
		sc, _ := ParseScope(tt.scope)
		if got := s.Covers(sc, tt.host); got != tt.want {
			t.Errorf("Covers(%s, %s) = %v, want %v", sc, tt.host, got, tt.want)
		}
	}
}

// manyRules is n rules of every kind over n/4 sites.
func manyRules(b testing.TB, n int) []Stored {
	rules := make([]Stored, 0, n)
	for i := 0; len(rules) < n; i++ {
		site := fmt.Sprintf("site%d.example", i)
		rules = append(rules,
			rule(b, "domain:"+site, func(r *Rule) { r.MinDelay = dur("2s") }),
			rule(b, "host:www."+site, func(r *Rule) { r.Connections = ptr(2) }),
			rule(b, "https://www."+site+"/private/", func(r *Rule) { r.Block = ptr(true) }),
			rule(b, fmt.Sprintf("cidr:10.%d.%d.0/24", i/256%256, i%256), func(r *Rule) { r.MinDelay = dur("1s") }),
		)
	}
	return rules[:n]
}

// Set.URL costs the same with 10,000 rules as with 10: compare the ns/op of each URL
// kind across the two.
func BenchmarkSetURL(b *testing.B) {
	urls := []struct{ name, url string }{
		{"prefix+host+domain", "https://www.site1.example/private/page"},
		{"domain", "https://a.b.site2.example/x"},
		{"none", "https://unruled.org/some/path?q=1"},
	}
	for _, n := range []int{10, 10000} {
		s, err := Compile(manyRules(b, n), 1)
		if err != nil {
			b.Fatal(err)
		}
		for _, u := range urls {
			b.Run(fmt.Sprintf("rules=%d/%s", n, u.name), func(b *testing.B) {
				b.ReportAllocs()
				for i := 0; i < b.N; i++ {
					_ = s.URL(u.url)
				}
			})
		}
	}
}

// Set.Admit, asked of every link, visits only the rules that set max depth, include or
// exclude: with 10,000 politeness rules and one in a hundred sites limiting its depth, an
// unruled link costs as little as with no rule.
func BenchmarkSetAdmit(b *testing.B) {
	urls := []struct{ name, url string }{
		{"depth rule", "https://www.site0.example/a/b"},
		{"politeness rules", "https://www.site1.example/a/b"},
		{"none", "https://unruled.org/some/path?q=1"},
	}
	rules := manyRules(b, 10000)
	for i := 0; i < len(rules); i += 400 {
		rules[i].MaxDepth = ptr(3)
	}
	s, err := Compile(rules, 1)
	if err != nil {
		b.Fatal(err)
	}
	for _, u := range urls {
		b.Run(u.name, func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				_, _ = s.Admit(u.url, 2)
			}
		})
	}
}

func TestSetDomainBudgets(t *testing.T) {
	zero, five := int64(0), int64(5)
	tests := []struct {
		name  string
		rules []Stored
		want  bool
	}{
		{"no rules", nil, false},
		{"a budget of 0 (no limit)", []Stored{rule(t, "domain:example.com", func(r *Rule) { r.DomainBudget = &zero })}, false},
		{"other fields only", []Stored{rule(t, "host:www.example.com", func(r *Rule) { r.Connections = ptr(2) })}, false},
		{"a domain budget", []Stored{
			rule(t, "host:www.example.com", func(r *Rule) { r.Connections = ptr(2) }),
			rule(t, "domain:example.org", func(r *Rule) { r.DomainBudget = &five }),
		}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := compileT(t, tt.rules...).DomainBudgets(); got != tt.want {
				t.Fatalf("DomainBudgets() = %v, want %v", got, tt.want)
			}
		})
	}
}

// A fetcher, parser and scheduler each hold the set in force, and every garbage
// collection scans it: with 10,000 rules its heap is a few megabytes, not tens. (A copy of
// each rule per field that decides it, or per entry, made it 1,570 bytes per rule.)
func TestSetHeapPerRule(t *testing.T) {
	const n, bound = 10_000, 1000
	rules := manyRules(t, n)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	s, err := Compile(rules, 1)
	if err != nil {
		t.Fatal(err)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	per := (int64(after.HeapAlloc) - int64(before.HeapAlloc)) / n
	t.Logf("%d rules: %d bytes of heap per rule", n, per)
	if per > bound {
		t.Errorf("a set of %d rules holds %d bytes of heap per rule, want at most %d", n, per, bound)
	}
	runtime.KeepAlive(s)
	runtime.KeepAlive(rules)
}

// Rules lists the set in scope string order (status, ls and apply's diff print it so),
// whatever order the store gave.
func TestSetRulesInScopeOrder(t *testing.T) {
	rules := manyRules(t, 400)
	rand.New(rand.NewPCG(1, 2)).Shuffle(len(rules), func(i, j int) { rules[i], rules[j] = rules[j], rules[i] })
	got := compileT(t, rules...).Rules()
	if len(got) != len(rules) {
		t.Fatalf("%d rules, want %d", len(got), len(rules))
	}
	for i := 1; i < len(got); i++ {
		if got[i-1].Scope.String() >= got[i].Scope.String() {
			t.Fatalf("rule %d %s before rule %d %s", i-1, got[i-1].Scope, i, got[i].Scope)
		}
	}
}
