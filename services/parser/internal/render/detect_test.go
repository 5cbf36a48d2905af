package render

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/trawl/trawl/services/parser/internal/extract"
	"github.com/trawl/trawl/shared/renderconf"
)

// TestDetectFixtures runs the detector over real-world-like pages: the starter templates'
// output of the common frameworks (shells), and ordinary pages that share some of a
// shell's marks (little text, scripts, a noscript, a div#app around server-rendered
// content).
func TestDetectFixtures(t *testing.T) {
	for _, tc := range []struct {
		file  string
		shell bool
		mount string // expected mount element ("" none)
	}{
		{"shell/cra.html", true, "div#root"},
		{"shell/vue-cli.html", true, "div#app"},
		{"shell/angular.html", true, "app-root"},
		{"shell/next-csr.html", true, "div#__next"},
		{"shell/nuxt-spa.html", true, "div#__nuxt"},
		{"shell/vite-module.html", true, "div#app"},
		{"shell/bare-bundle.html", true, ""},
		{"shell/inline-runtime.html", true, "div#main-app"},
		{"shell/ember.html", true, ""},
		{"shell/angularjs.html", true, "[ng-app]"},
		{"ordinary/article.html", false, ""},
		{"ordinary/next-ssr.html", false, "div#__next"},
		{"ordinary/contact.html", false, ""},
		{"ordinary/gallery.html", false, ""},
		{"ordinary/wordpress.html", false, ""},
		{"ordinary/login.html", false, ""},
		{"ordinary/vitepress-ssr.html", false, "div#app"},
		{"ordinary/plain-short.html", false, ""},
		{"ordinary/analytics-only-empty.html", false, ""},
	} {
		t.Run(tc.file, func(t *testing.T) {
			body, err := os.ReadFile(filepath.Join("testdata", tc.file))
			if err != nil {
				t.Fatal(err)
			}
			s := Detect(body)
			if s.Shell() != tc.shell || s.Mount != tc.mount {
				t.Fatalf("Detect = %s (shell %t), want shell %t, mount %q", s, s.Shell(), tc.shell, tc.mount)
			}
			// The parser's whole path: the text extract finds, then the decision.
			res, err := extract.Extract(extract.Input{URL: "http://h.test/", Body: body, ContentType: "text/html"}, extract.Options{Limits: extract.DefaultLimits()})
			if err != nil {
				t.Fatal(err)
			}
			d, _ := New(renderconf.Settings{Mode: renderconf.Auto}, nil)
			got := d.Decide(Page{URL: "http://h.test/", Host: "h.test", Text: res.Text, Body: body})
			if got.Render != tc.shell {
				t.Fatalf("Decide = %+v, want render %t", got, tc.shell)
			}
		})
	}
}

func TestFewWords(t *testing.T) {
	for _, tc := range []struct {
		n    int
		want bool
	}{{0, true}, {MaxWords, true}, {MaxWords + 1, false}} {
		text := ""
		for i := range tc.n {
			if i > 0 {
				text += " "
			}
			text += "w"
		}
		if got := FewWords(text); got != tc.want {
			t.Errorf("FewWords(%d words) = %t", tc.n, got)
		}
	}
}

func TestDecide(t *testing.T) {
	shell, err := os.ReadFile("testdata/shell/cra.html")
	if err != nil {
		t.Fatal(err)
	}
	article, err := os.ReadFile("testdata/ordinary/plain-short.html")
	if err != nil {
		t.Fatal(err)
	}
	rules := map[string]string{"http://ruled.test/a": "always", "http://ruled.test/n": "never", "http://ruled.test/auto": "auto"}
	rule := func(u string) (string, string) { return rules[u], "host:ruled.test" }
	for _, tc := range []struct {
		name     string
		s        renderconf.Settings
		p        Page
		render   bool
		reason   renderconf.Reason
		examined bool
	}{
		{"off renders nothing", renderconf.Settings{Mode: "off", Hosts: "h.test"}, Page{URL: "http://h.test/", Host: "h.test", Body: shell}, false, renderconf.ReasonOff, false},
		{"off beats a rule", renderconf.Settings{Mode: "off"}, Page{URL: "http://ruled.test/a", Host: "ruled.test"}, false, renderconf.ReasonOff, false},
		{"a rendering is never rendered again", renderconf.Settings{Mode: "always"}, Page{URL: "http://h.test/", Host: "h.test", Rendered: true, Body: shell}, false, renderconf.ReasonRendered, false},
		{"always", renderconf.Settings{Mode: "always"}, Page{URL: "http://h.test/", Host: "h.test", Body: article}, true, renderconf.ReasonAlways, false},
		{"auto shell", renderconf.Settings{Mode: "auto"}, Page{URL: "http://h.test/", Host: "h.test", Body: shell}, true, renderconf.ReasonShell, true},
		{"auto ordinary", renderconf.Settings{Mode: "auto"}, Page{URL: "http://h.test/", Host: "h.test", Text: "This page has moved to its new address.", Body: article}, false, renderconf.ReasonNoShell, true},
		{"auto long text is not read again", renderconf.Settings{Mode: "auto"}, Page{URL: "http://h.test/", Host: "h.test", Text: string(make([]byte, 0)) + longText(60), Body: shell}, false, renderconf.ReasonNoShell, false},
		{"host setting", renderconf.Settings{Mode: "auto", Hosts: "h.test"}, Page{URL: "http://h.test/x", Host: "H.test", Text: longText(60), Body: article}, true, renderconf.ReasonHost, false},
		{"url setting", renderconf.Settings{Mode: "auto", URLs: `/app/`}, Page{URL: "http://h.test/app/1", Host: "h.test", Text: longText(60)}, true, renderconf.ReasonURL, false},
		{"rule always beats auto", renderconf.Settings{Mode: "auto"}, Page{URL: "http://ruled.test/a", Host: "ruled.test", Text: longText(60)}, true, renderconf.ReasonRule, false},
		{"rule never beats always and settings", renderconf.Settings{Mode: "always", Hosts: "ruled.test"}, Page{URL: "http://ruled.test/n", Host: "ruled.test", Body: shell}, false, renderconf.ReasonNever, false},
		{"rule auto beats always", renderconf.Settings{Mode: "always"}, Page{URL: "http://ruled.test/auto", Host: "ruled.test", Text: "moved", Body: article}, false, renderconf.ReasonNoShell, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := New(tc.s, rule)
			if err != nil {
				t.Fatal(err)
			}
			got := d.Decide(tc.p)
			if got.Render != tc.render || got.Reason != tc.reason || got.Examined != tc.examined {
				t.Fatalf("Decide = %+v, want render %t reason %s examined %t", got, tc.render, tc.reason, tc.examined)
			}
			if got.Render != got.Reason.Renders() {
				t.Fatalf("reason %s does not agree with render %t", got.Reason, got.Render)
			}
		})
	}
}

func longText(n int) string {
	s := ""
	for range n {
		s += "word "
	}
	return s
}
