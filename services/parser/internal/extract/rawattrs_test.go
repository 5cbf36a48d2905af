package extract

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"

	"golang.org/x/net/html"
)

// rawAttrCases are tags where reading attributes from the raw bytes could go wrong: every
// rule of the tokenizer's attribute states, and what rawAttrs must leave to TagAttr.
var rawAttrCases = map[string]string{
	"quotes":          `<a href="/x" rel='nofollow' alt=y>t</a>`,
	"upper-names":     `<A HREF="/x" ReL=Next>t</A>`,
	"dup":             `<a href=1 HREF=2 rel=a rel=b>x</a>`,
	"no-space":        `<a href="x"rel='y'alt=z>t</a>`,
	"eq-spaces":       "<a href = \"x\"  rel\t=\ny >t</a>",
	"eq-then-end":     `<a href=>t</a><a href= >u</a>`,
	"empty-first":     `<img ="x" alt=y><img =alt=z>`,
	"slashes":         `<img/src=x/><img / alt=y / ><a/href=z>t</a>`,
	"self-closing":    `<link rel=next href=/n/><br/>`,
	"no-value":        `<a href rel=x>t</a><input disabled>`,
	"unquoted-marks":  `<a href=/x?a=1&amp;b=2>t</a><a href=a"b'c=d>u</a>`,
	"entities":        `<a href="/x?a=1&amp;b=2" title="&lt;">t</a><a href='&#x41;'>u</a>`,
	"cr":              "<a href=\"x\r\ny\">t</a><a\rhref=z>u</a>",
	"nul":             "<a href=\"x\x00y\">t</a><a hr\x00ef=z>u</a>",
	"gt-in-quotes":    `<a href="a>b" rel='c>d'>t</a>`,
	"long-name":       `<abcdefghijklmnopqrstuvwxyzabcdefghijkl href=x>t</abcdefghijklmnopqrstuvwxyzabcdefghijkl>`,
	"name-then-slash": `<a/ href=x>t</a><p/>`,
	"eof-quoted":      `<a href="x>`,
	"eof-unquoted":    `<a href=x`,
	"eof-after-name":  `<a href`,
	"ws-kinds":        "<a\fhref=x\trel=y\n>t</a>",
	"non-ascii":       `<a href="/é" títle=ü ALT="Ä">t</a>`,
	"meta":            `<meta name=robots content="noindex, nofollow"><meta http-equiv=refresh content="0; url=/x">`,
	"html-lang":       `<html lang=en xml:lang=fr><base href=/b/>`,
}

// checkRawAttrs compares rawAttrs with the tokenizer on every start tag of in: wherever it
// does not give up, each attribute it reads must be the tokenizer's (name lowered, first
// occurrence, value as TagAttr gives it), absent ones empty, and "has any attribute" the
// same. It returns how many tags the raw reader answered.
func checkRawAttrs(t *testing.T, in []byte) int {
	t.Helper()
	z := html.NewTokenizer(bytes.NewReader(in))
	answered := 0
	for {
		tt := z.Next()
		if tt == html.ErrorToken {
			return answered
		}
		if tt != html.StartTagToken && tt != html.SelfClosingTagToken {
			continue
		}
		raw := slices.Clone(z.Raw())
		tok := z.Token() // reads the attributes through TagAttr
		want := map[string]string{}
		names := []string{"href", "rel", "zz", ""}
		for _, a := range tok.Attr {
			if _, ok := want[a.Key]; !ok {
				want[a.Key] = a.Val
				names = append(names, a.Key)
			}
		}
		for start := 0; start < len(names); start++ {
			group := names[start:min(start+4, len(names))]
			got, has, ok := rawAttrs(raw, group)
			if !ok {
				continue
			}
			answered++
			if has != (len(tok.Attr) > 0) {
				t.Errorf("%q: has = %v, tokenizer has %d attributes", raw, has, len(tok.Attr))
			}
			for i, name := range group {
				if got[i] != want[name] {
					t.Errorf("%q: %q = %q, tokenizer %q", raw, name, got[i], want[name])
				}
			}
		}
	}
}

func TestRawAttrsMatchTokenizer(t *testing.T) {
	inputs := map[string][]byte{}
	for name, in := range rawAttrCases {
		inputs[name] = []byte(in)
	}
	files, err := filepath.Glob("testdata/*.html")
	if err != nil {
		t.Fatal(err)
	}
	more, err := filepath.Glob("../service/testdata/*.html")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range append(files, more...) {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		inputs[filepath.Base(f)] = b
	}
	answered := 0
	for name, in := range inputs {
		t.Run(name, func(t *testing.T) { answered += checkRawAttrs(t, in) })
	}
	// The raw reader must carry the common case, or it saves nothing.
	if answered < 1000 {
		t.Errorf("raw reader answered for %d tags only", answered)
	}
}

// The tokenizer decides where a tag ends and what it holds; the raw reader must never
// disagree with it, whatever the markup.
func FuzzRawAttrs(f *testing.F) {
	for _, in := range rawAttrCases {
		f.Add([]byte(in))
	}
	f.Fuzz(func(t *testing.T, in []byte) { checkRawAttrs(t, in) })
}

// The link table and maps kept from page to page must carry nothing over: a page
// extracted after others gives what it gives alone.
func TestExtractCarriesNothingOver(t *testing.T) {
	names := []string{"a_href.html", "relative.html", "bench_page.html", "nofollow.html", "a_href.html"}
	first := map[string]*Result{}
	for round := range 2 {
		for _, name := range names {
			in := Input{URL: "https://example.com/dir/page.html", Body: fixture(t, name), ContentType: "text/html; charset=utf-8"}
			res, err := Extract(in, Options{RobotsAgent: "trawl"})
			if err != nil {
				t.Fatal(err)
			}
			if want, ok := first[name]; !ok {
				first[name] = res
			} else if !reflect.DeepEqual(res, want) {
				t.Errorf("round %d, %s: result differs from its first extraction", round, name)
			}
		}
	}
}
