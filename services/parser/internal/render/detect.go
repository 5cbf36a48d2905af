// Package render decides which pages the parser sends to a renderer: by setting
// (TRAWL_RENDER, TRAWL_RENDER_HOSTS, TRAWL_RENDER_URLS, shared/renderconf), by the live
// site policy's render field, and by detecting an application shell — an HTML page whose
// content a script writes after it loads.
package render

import (
	"bytes"
	"fmt"
	"strings"
	"unicode/utf8"

	"golang.org/x/net/html"
	"golang.org/x/net/html/atom"
)

// The detector's thresholds. A shell is a page with at most MaxWords words of visible
// text that loads at least one script bundle and shows that the script is its content: a
// root mount element, or a <noscript> asking for JavaScript, or no text at all.
const (
	// MaxWords: a shell's visible text is a few words (a "Loading…", a title repeated in a
	// header); the shortest ordinary pages (a contact page, a gallery caption) pass 50
	// words in the fixtures and in practice.
	MaxWords = 50
	// BundleInline: an inline script this long counts as a bundle (frameworks inline
	// their runtime); shorter ones are analytics snippets and settings objects.
	BundleInline = 1024
	// maxScan bounds the octets the detector reads: a shell is small, and what makes it
	// one (the mount element, the bundles, the noscript) is in its first part.
	maxScan = 512 << 10
)

// mountIDs are the ids the common frameworks and their starter templates mount into.
var mountIDs = map[string]bool{
	"root": true, "app": true, "__next": true, "__nuxt": true, "___gatsby": true,
	"svelte": true, "main-app": true, "app-root": true, "react-root": true, "application": true,
	"ember-app": true, "q-app": true, "__layout": true,
}

// mountAttrs mark a mount element whatever its id (Angular, AngularJS, Vue 3, React 15).
var mountAttrs = map[string]bool{"ng-app": true, "ng-version": true, "data-v-app": true, "data-reactroot": true}

// mountTags are custom root elements of Angular's and Ember's templates.
var mountTags = map[string]bool{"app-root": true, "ember-application": true}

// Signals are what the detector saw in a page.
type Signals struct {
	Words      int    // visible words, outside script, style, noscript and template (counted to MaxWords+1)
	Mount      string // the mount element found ("div#root", "app-root", "[ng-app]"), "" none
	Bundles    int    // external scripts and inline scripts of BundleInline octets or more
	NoScriptJS bool   // a <noscript> whose text mentions JavaScript
}

// Shell says the signals are an application shell's.
func (s Signals) Shell() bool {
	return s.Words <= MaxWords && s.Bundles > 0 && (s.Mount != "" || s.NoScriptJS || s.Words == 0)
}

// String is the figures as trawlctl explain shows them.
func (s Signals) String() string {
	mount := s.Mount
	if mount == "" {
		mount = "none"
	}
	return fmt.Sprintf("words=%d mount=%s bundles=%d noscript-js=%t", s.Words, mount, s.Bundles, s.NoScriptJS)
}

// FewWords says text has at most MaxWords words: the parser's cheap test on the text it
// already extracted, so a page with plenty of text is never tokenised a second time.
func FewWords(text string) bool {
	n, in := 0, false
	for i := 0; i < len(text); i++ {
		space := text[i] == ' ' || text[i] == '\n' || text[i] == '\t' || text[i] == '\r'
		if !space && !in {
			if n++; n > MaxWords {
				return false
			}
		}
		in = !space
	}
	return true
}

// Detect reads the page's markup for the signals of a shell.
func Detect(body []byte) Signals {
	if len(body) > maxScan {
		body = body[:maxScan]
	}
	var s Signals
	z := html.NewTokenizer(bytes.NewReader(body))
	var skip []atom.Atom // open script, style, noscript, template: not visible text
	inNoscript := false
	var script []byte // an inline script's text so far
	inScript := false
	for {
		tt := z.Next()
		switch tt {
		case html.ErrorToken:
			return s
		case html.TextToken:
			t := z.Text()
			switch {
			case inScript:
				script = append(script, t...)
			case inNoscript:
				if !s.NoScriptJS && containsFold(t, "javascript") {
					s.NoScriptJS = true
				}
			case len(skip) == 0 && s.Words <= MaxWords:
				s.Words += countWords(t)
			}
		case html.StartTagToken, html.SelfClosingTagToken:
			name, hasAttr := z.TagName()
			a := atom.Lookup(name)
			var id, src, typ string
			mountAttr := ""
			for hasAttr {
				var k, v []byte
				k, v, hasAttr = z.TagAttr()
				switch key := string(k); key {
				case "id":
					id = strings.ToLower(strings.TrimSpace(string(v)))
				case "src":
					src = string(v)
				case "type":
					typ = strings.ToLower(strings.TrimSpace(string(v)))
				default:
					if mountAttrs[key] {
						mountAttr = key
					}
				}
			}
			switch {
			case s.Mount != "":
			case mountAttr != "":
				s.Mount = "[" + mountAttr + "]"
			case mountTags[string(name)]:
				s.Mount = string(name)
			case id != "" && mountIDs[id] && a != atom.Script && a != atom.Html && a != atom.Body:
				s.Mount = string(name) + "#" + id
			}
			if tt == html.SelfClosingTagToken {
				continue
			}
			switch a {
			case atom.Script:
				if !scriptType(typ) {
					skip = append(skip, a) // a data block (JSON, templates): not code
					continue
				}
				if src != "" {
					s.Bundles++
				}
				inScript, script = src == "", script[:0]
				skip = append(skip, a)
			case atom.Noscript:
				inNoscript = true
				skip = append(skip, a)
			case atom.Style, atom.Template, atom.Title:
				skip = append(skip, a)
			}
		case html.EndTagToken:
			name, _ := z.TagName()
			a := atom.Lookup(name)
			if n := len(skip); n > 0 && skip[n-1] == a {
				skip = skip[:n-1]
				switch a {
				case atom.Script:
					if inScript && len(bytes.TrimSpace(script)) >= BundleInline {
						s.Bundles++
					}
					inScript = false
				case atom.Noscript:
					inNoscript = false
				}
			}
		}
	}
}

// scriptType says a <script type> is code a browser runs (HTML's JavaScript MIME types
// and "module"); others are data blocks.
func scriptType(t string) bool {
	switch t {
	case "", "module", "text/javascript", "application/javascript", "text/ecmascript",
		"application/ecmascript", "text/jsx", "text/babel":
		return true
	}
	return false
}

func countWords(t []byte) int {
	n, in := 0, false
	for len(t) > 0 {
		r, size := utf8.DecodeRune(t)
		t = t[size:]
		space := r == ' ' || r == '\n' || r == '\t' || r == '\r' || r == '\f' || r == 0xA0
		if !space && !in {
			n++
		}
		in = !space
	}
	return n
}

func containsFold(b []byte, sub string) bool {
	return bytes.Contains(bytes.ToLower(b), []byte(sub))
}
