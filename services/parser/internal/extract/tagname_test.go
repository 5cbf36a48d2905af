package extract

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/net/html"
)

// tagName and attrs' "has any attribute" must agree with the tokenizer's own TagName on
// every tag: they replace it on the hot path, and a wrong name would misroute a tag.
func TestTagNameMatchesTokenizer(t *testing.T) {
	inputs := map[string]string{
		"upper":        `<A HREF="/x">a</A><DiV Class=x></dIv>`,
		"nul":          "<a\x00b href=x>t</a\x00b>",
		"self-closing": `<br/><img alt=x /><a/>`,
		"no-attr":      `<img><img ><img/><img / ><a =x>`,
		"whitespace":   "<a\thref=x\n>t</a\f><p\r>",
		"end-attrs":    `<p>x</p foo="bar"></p >`,
		"long":         "<" + strings.Repeat("x", 40) + " a=1></" + strings.Repeat("X", 40) + ">",
		"raw-text":     `<script>if (a<b) {}</script><style>p{}</STYLE><title>T</title><textarea><a></textarea>`,
		"eof-in-tag":   `<a href="x`,
		"eof-name":     `<div`,
		"bogus":        `</ p><!-- <a> --><?x?></>`,
		"dup-attr":     `<a href=1 href=2 rel=nofollow>x</a>`,
		"empty-first":  `<img ="x" alt=y>`,
	}
	files, err := filepath.Glob("testdata/*.html")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		inputs[filepath.Base(f)] = string(b)
	}
	for name, in := range inputs {
		t.Run(name, func(t *testing.T) {
			// Two tokenizers in step: TagName consumes the name, so the reference reads its own.
			ref := html.NewTokenizer(bytes.NewReader([]byte(in)))
			z := html.NewTokenizer(bytes.NewReader([]byte(in)))
			var buf [32]byte
			for {
				tt := z.Next()
				if rt := ref.Next(); rt != tt {
					t.Fatalf("tokenizers out of step: %v vs %v", tt, rt)
				}
				if tt == html.ErrorToken {
					return
				}
				if tt != html.StartTagToken && tt != html.EndTagToken && tt != html.SelfClosingTagToken {
					continue
				}
				raw := string(z.Raw())
				got := string(tagName(z, &buf))
				want, wantAttr := ref.TagName()
				if got != string(want) {
					t.Errorf("%q: tagName = %q, TagName = %q", raw, got, want)
				}
				if tt == html.EndTagToken {
					continue
				}
				if _, has := attrs(z, "x"); has != wantAttr {
					t.Errorf("%q: attrs says has attribute %v, TagName %v", raw, has, wantAttr)
				}
			}
		})
	}
}

// One lookup of tagClasses stands for the four sets; it must say what each of them says.
func TestTagClassesAreTheSets(t *testing.T) {
	names := []string{"", "x", "span", "A"}
	for _, set := range []map[string]bool{scriptLike, fallback, headElements, blockElements} {
		for name := range set {
			names = append(names, name)
		}
	}
	for _, name := range names {
		c := tagClasses[name]
		if c&script != 0 != scriptLike[name] || c&fallbackContent != 0 != fallback[name] ||
			c&inHead != 0 != headElements[name] || c&block != 0 != blockElements[name] {
			t.Errorf("%q: class %04b disagrees with the sets", name, c)
		}
	}
}
