package policy

import (
	"strings"
	"testing"
)

func TestAssign(t *testing.T) {
	base := Rule{Include: []string{"old"}, Connections: ptr(2), Headers: map[string]string{"X-A": "1"}}
	tests := []struct {
		words []string
		want  string // Summary after, or the error
	}{
		{[]string{"min_delay=1.5s", "block=true"}, `min_delay=1.5s connections=2 include=["old"] headers={"X-A":"1"} block=true`},
		{[]string{"connections="}, `include=["old"] headers={"X-A":"1"}`},
		{[]string{"include=a", "include=b"}, `connections=2 include=["a","b"] headers={"X-A":"1"}`},
		{[]string{"include="}, `connections=2 headers={"X-A":"1"}`},
		{[]string{"headers.X-B=2", "headers.X-A="}, `connections=2 include=["old"] headers={"X-B":"2"}`},
		{[]string{"header_secrets.X-Key=api-key", "cookies=c1", "crawl_delay=exact", "note=asked by owner"},
			`crawl_delay=exact connections=2 include=["old"] headers={"X-A":"1"} header_secrets={"X-Key":"api-key"} cookies=c1 note="asked by owner"`},
		{[]string{"crawl_delay=60s", "host_budget=100"}, `crawl_delay=1m0s connections=2 host_budget=100 include=["old"] headers={"X-A":"1"}`},
		{[]string{"min_delay=soon"}, `error: min_delay: duration "soon"`},
		{[]string{"connections=two"}, `error: connections: "two" is not a whole number`},
		{[]string{"speed=3"}, `error: speed: no such field`},
		{[]string{"block"}, `error: "block": want field=value`},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.words, " "), func(t *testing.T) {
			r := base
			err := r.Assign(tt.words)
			got := r.Summary()
			if err != nil {
				got = "error: " + err.Error()
			}
			if !strings.HasPrefix(got, tt.want) {
				t.Fatalf("got  %s\nwant %s", got, tt.want)
			}
			if base.Headers["X-A"] != "1" || len(base.Headers) != 1 {
				t.Fatal("Assign changed the map of the rule it was copied from")
			}
		})
	}
}

func TestScopeCoversURL(t *testing.T) {
	for _, tt := range []struct {
		scope, url string
		want       bool
	}{
		{"https://example.com/a/", "https://example.com/a/b", true},
		{"https://example.com/a/", "http://example.com/a/b", true},
		{"https://example.com/a/", "https://example.com/b", false},
		{"https://example.com/a/", "https://www.example.com/a/b", false},
		{"domain:example.com", "https://www.example.com/", true},
		{"host:example.com", "https://www.example.com/", false},
	} {
		sc, _ := ParseScope(tt.scope)
		if got := sc.CoversURL(tt.url); got != tt.want {
			t.Errorf("%s covers %s = %v, want %v", sc, tt.url, got, tt.want)
		}
	}
}
