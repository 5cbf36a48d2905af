package urlnorm

import (
	"encoding/json"
	"net/url"
	"os"
	"strings"
	"testing"
)

// whatwgCase is one entry of the WHATWG URL test data (testdata/urltestdata.json, from
// web-platform-tests; see testdata/README.md). Only the fields used here are decoded.
type whatwgCase struct {
	Input   string  `json:"input"`
	Base    *string `json:"base"`
	Href    string  `json:"href"`
	Failure bool    `json:"failure"`
}

// whatwgDeviations are the http(s) cases where Trawl's normal form intentionally differs
// from the WHATWG URL parser even after both sides are put in Trawl's normal form. Keyed
// by input + "\x00" + base. Every entry must still deviate: a stale entry fails the test,
// so the list cannot silently outgrow the truth. DEVIATIONS.md explains each kind.
var whatwgDeviations = map[string]string{
	"http://f:0/c\x00http://example.org/foo/bar":              "port 0 is rejected: nothing can be fetched from it",
	"http://f:00000000000000/c\x00http://example.org/foo/bar": "port 0 is rejected: nothing can be fetched from it",
	"http://./\x00about:blank":                                "a host of empty labels is rejected: it is not a resolvable DNS name",
	"http://../\x00about:blank":                               "a host of empty labels is rejected: it is not a resolvable DNS name",
	"http://foo.09..\x00about:blank":                          "a host with empty labels is rejected: it is not a resolvable DNS name",
	"http://!\"$&'()*+,-.;=_`{}~/\x00about:blank":             "only letters, digits, '-', '_' and '.' are accepted in a host name: others cannot be resolved",
	"http://host/?'\x00about:blank":                           "a sub-delimiter (') in the query is kept as is (RFC 3986 §2.2); WHATWG encodes ' as %27 in special-scheme queries",
	"https://www.example.com/path{\u007fpath.html?query'\u007f=query#fragment<\u007ffragment\x00about:blank": "a sub-delimiter (') in the query is kept as is (RFC 3986 §2.2); WHATWG encodes ' as %27 in special-scheme queries",
}

func loadWHATWG(t *testing.T) []whatwgCase {
	t.Helper()
	data, err := os.ReadFile("testdata/urltestdata.json")
	if err != nil {
		t.Fatal(err)
	}
	// The file mixes comment strings with case objects.
	var raw []json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		t.Fatal(err)
	}
	var cases []whatwgCase
	for _, r := range raw {
		if len(r) == 0 || r[0] != '{' {
			continue
		}
		var c whatwgCase
		if err := json.Unmarshal(r, &c); err != nil {
			t.Fatalf("case %s: %v", r, err)
		}
		cases = append(cases, c)
	}
	return cases
}

func isHTTP(s string) bool {
	scheme, _, ok := splitScheme(strings.TrimFunc(s, func(r rune) bool { return r <= ' ' }))
	return ok && isSpecial(scheme)
}

// TestWHATWGURLTestData runs every http(s) case of the WHATWG URL test data. For an input
// the WHATWG parser accepts, Resolve(base, input) (Normalize for an absolute input without
// a usable base) must equal the expected href put in Trawl's normal form. For an input it
// rejects, Trawl must reject it too. Either way, unless the case is a listed deviation.
func TestWHATWGURLTestData(t *testing.T) {
	cases := loadWHATWG(t)
	if len(cases) < 500 {
		t.Fatalf("only %d cases in testdata/urltestdata.json", len(cases))
	}
	seen := map[string]bool{}
	var ran, accepted, rejected int
	for _, c := range cases {
		base := ""
		if c.Base != nil {
			base = *c.Base
		}
		var b *url.URL
		if bu, err := url.Parse(base); err == nil && isHTTP(base) {
			b = bu
		}
		_, _, hasScheme := splitScheme(strings.TrimFunc(c.Input, func(r rune) bool { return r <= ' ' }))
		switch {
		case c.Failure && (isHTTP(c.Input) || (!hasScheme && b != nil)):
		case !c.Failure && isHTTP(c.Href):
		default:
			continue // a case about another scheme
		}
		ran++
		key := c.Input + "\x00" + base
		deviation, listed := whatwgDeviations[key]
		seen[key] = listed

		var got string
		var err error
		if b != nil {
			got, err = Resolve(b, c.Input)
		} else {
			got, err = Normalize(c.Input)
		}
		var problem string
		if c.Failure {
			rejected++
			if err == nil {
				problem = "WHATWG rejects it, urlnorm gives " + got
			}
		} else {
			accepted++
			want, werr := Normalize(c.Href)
			switch {
			case werr != nil:
				problem = "urlnorm rejects the WHATWG href " + c.Href + ": " + werr.Error()
			case err != nil:
				problem = "urlnorm rejects it (" + err.Error() + "), WHATWG gives " + c.Href
			case got != want:
				problem = "urlnorm gives " + got + ", WHATWG " + c.Href + " (normal form " + want + ")"
			}
			if err == nil {
				if again, err := Normalize(got); err != nil || again != got {
					t.Errorf("%q: result %q is not a fixed point: %q, %v", c.Input, got, again, err)
				}
			}
		}
		switch {
		case problem != "" && !listed:
			t.Errorf("input %q, base %q: %s", c.Input, base, problem)
		case problem == "" && listed:
			t.Errorf("input %q, base %q: listed as a deviation (%s) but urlnorm now agrees; remove it", c.Input, base, deviation)
		}
	}
	for key := range whatwgDeviations {
		if !seen[key] {
			t.Errorf("deviation %q matches no http(s) case of the test data", key)
		}
	}
	t.Logf("%d http(s) cases: %d the WHATWG parser accepts, %d it rejects; %d listed deviations",
		ran, accepted, rejected, len(whatwgDeviations))
}
