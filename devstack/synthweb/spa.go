package synthweb

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
)

// The single-page-app section (Config.SPA): two hosts after all others. The app host
// serves only application shells — an empty <div id="root">, a <noscript> asking for
// JavaScript, and one script loaded from the script host — for its home page and for
// /app/0 … /app/<Config.SPAPages-1>. The script (on the script host, another host) asks the app
// host's JSON endpoint /api/page?path=<the page's path> for the page's title, text and
// links, writes them into the page, and also requests /private/track, which the app
// host's robots.txt disallows. So a crawler that does not run scripts finds no link and no
// text on the app host; one that renders finds every page, each page's text (with its
// own token, Web.SPA().Tokens), and must never make the disallowed request.
//
// Links: the home page links to /app/0 and /app/1; /app/n links home and to /app/2n+2 and
// /app/2n+3 when they exist — a tree, so every page is found at one depth.
const (
	spaAPI       = "/api/page"
	spaScript    = "/js/app.js"
	spaForbidden = "/private/track"
	jsonType     = "application/json"
)

// SPAInfo describes the single-page-app section of a web with Config.SPA.
type SPAInfo struct {
	Host, ScriptHost string // host names (addresses) of the app and script hosts
	// Pages are the app host's pages whose links only its script writes (every page but
	// its home page, a seed).
	Pages []string
	// Tokens are, for the home page and each of Pages, a word only the page's text loaded
	// by fetch() holds.
	Tokens map[string]string
	// Requests are the URLs a rendering browser asks for besides the pages: the script
	// (once, if held) and each page's JSON.
	Script string
	API    []string
	// Disallowed is the URL the script requests that robots.txt forbids.
	Disallowed string
}

// SPA describes the section; ok is false without Config.SPA.
func (w *Web) SPA() (SPAInfo, bool) {
	m := w.m
	h, ok := m.special[KindSPA]
	if !ok {
		return SPAInfo{}, false
	}
	s := m.special[KindSPAScript]
	info := SPAInfo{Host: m.hosts[h].Name, ScriptHost: m.hosts[s].Name, Tokens: map[string]string{},
		Script: m.url(s, spaScript), Disallowed: m.url(h, spaForbidden)}
	for _, p := range m.spaPaths() {
		u := m.url(h, p)
		if p != "/" {
			info.Pages = append(info.Pages, u)
		}
		info.Tokens[u] = spaToken(h, p)
		info.API = append(info.API, m.url(h, spaAPIPath(p)))
	}
	return info, true
}

// SPAWaiting is how many requests of the app host's JSON endpoint are being held by
// Config.SPADelay now: a browser is in the middle of rendering a page.
func (w *Web) SPAWaiting() int { return int(w.spaWaiting.Load()) }

func (m *model) spaPaths() []string {
	paths := []string{"/"}
	for n := range m.cfg.SPAPages {
		paths = append(paths, "/app/"+strconv.Itoa(n))
	}
	return paths
}

func spaAPIPath(p string) string { return spaAPI + "?path=" + strings.ReplaceAll(p, "/", "%2F") }

// spaToken is a word no other page has: "spatoken" and the page's key in base 36.
func spaToken(h int, p string) string {
	return "spatoken" + strconv.FormatUint(uint64(h)<<20^hashPath(p)&0xfffff, 36)
}

// spaChildren are the paths page p's script writes links to.
func (m *model) spaChildren(p string) []string {
	if p == "/" {
		return []string{"/app/0", "/app/1"}
	}
	n, _ := parseNum(strings.TrimPrefix(p, "/app/"))
	kids := []string{"/"}
	for _, c := range []int{2*n + 2, 2*n + 3} {
		if c < m.cfg.SPAPages {
			kids = append(kids, "/app/"+strconv.Itoa(c))
		}
	}
	return kids
}

func (m *model) spaPage(p string) bool {
	if p == "/" {
		return true
	}
	n, ok := parseNum(strings.TrimPrefix(p, "/app/"))
	return ok && strings.HasPrefix(p, "/app/") && n < m.cfg.SPAPages
}

func (m *model) spaRobots() robotsFile {
	return robotsFile{status: http.StatusOK, groups: []robotsGroup{{
		comment: "The app's tracking endpoint, which its script requests, is not for crawlers.",
		agents:  []string{"*"},
		rules:   []robotsRule{{pattern: "/private/"}},
	}}}
}

// spaHost serves the app host: shells, and the JSON the script loads.
func (m *model) spaHost(h int, path, query string) resource {
	if m.spaPage(path) && query == "" {
		s := m.special[KindSPAScript]
		body := "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>App</title>\n" +
			// An icon of its own, so a browser asks for no /favicon.ico: every request of
			// the page is one Expected names.
			"<link rel=\"icon\" href=\"data:,\">\n" +
			"<script defer src=\"" + m.url(s, spaScript) + "\"></script>\n</head>\n<body>\n" +
			"<noscript>You need to enable JavaScript to run this app.</noscript>\n<div id=\"root\"></div>\n</body>\n</html>\n"
		return resource{status: http.StatusOK, contentType: htmlType, body: body, verbatim: true, links: m.spaLinks(h, path), scripted: true}
	}
	if path == spaAPI {
		p := strings.TrimPrefix(query, "path=")
		p = strings.ReplaceAll(p, "%2F", "/")
		if !m.spaPage(p) || !strings.HasPrefix(query, "path=") {
			return notFound()
		}
		return resource{status: http.StatusOK, contentType: jsonType, body: m.spaJSON(h, p)}
	}
	return notFound()
}

// spaLinks are the links page p's script writes, for Expected.
func (m *model) spaLinks(h int, p string) []link {
	var links []link
	for _, c := range m.spaChildren(p) {
		links = append(links, link{href: c, text: "go to " + c, target: m.url(h, c)})
	}
	return links
}

// expectSPA adds the browser's own requests to exp: with rendering, each rendered page's
// JSON and the script must be requested once; without, none of them. The disallowed
// request is never made.
func (m *model) expectSPA(exp *Expectation, visited map[string]bool) {
	h, ok := m.special[KindSPA]
	if !ok {
		return
	}
	s := m.special[KindSPAScript]
	exp.Forbidden[m.url(h, spaForbidden)] = true
	rendered := false
	for _, p := range m.spaPaths() {
		u, api := m.url(h, p), m.url(h, spaAPIPath(p))
		switch {
		case m.cfg.Render && visited[u]:
			exp.Fetch[api], exp.Browser[api], rendered = true, true, true
		default:
			exp.Forbidden[api] = true
			if !visited[u] {
				exp.Forbidden[u] = true
			}
		}
	}
	if rendered {
		exp.Fetch[m.url(s, spaScript)], exp.Browser[m.url(s, spaScript)] = true, true
	} else {
		exp.Forbidden[m.url(s, spaScript)] = true
	}
}

// spaJSON is a page's content as its script receives it.
func (m *model) spaJSON(h int, p string) string {
	rng := rand.New(rand.NewPCG(uint64(m.cfg.Seed), uint64(h)<<40^hashPath(p)))
	words := make([]string, 0, 80)
	for range 60 + rng.IntN(20) {
		words = append(words, lorem[rng.IntN(len(lorem))])
	}
	words = append(words, spaToken(h, p))
	type jlink struct {
		Href string `json:"href"`
		Text string `json:"text"`
	}
	var links []jlink
	for _, c := range m.spaChildren(p) {
		links = append(links, jlink{Href: c, Text: "go to " + c})
	}
	b, _ := json.Marshal(struct {
		Title string  `json:"title"`
		Text  string  `json:"text"`
		Links []jlink `json:"links"`
	}{Title: "App page " + p, Text: strings.Join(words, " "), Links: links})
	return string(b)
}

// spaScriptHost serves the script, and a home page of its own (every host is a seed).
func (m *model) spaScriptHost(h int, path, query string) resource {
	switch {
	case path == spaScript && query == "":
		return resource{status: http.StatusOK, contentType: jsType, body: spaJS}
	case path == "/" && query == "":
		return resource{status: http.StatusOK, contentType: htmlType, title: "Static files", textSeed: uint64(h)}
	}
	return notFound()
}

// spaJS is the app: load the page's JSON from the page's own host, write its text and
// links, and request a path robots.txt disallows. Written in ES5, so any engine runs it.
var spaJS = fmt.Sprintf(`(function () {
  var root = document.getElementById("root");
  fetch(%q).catch(function () {});
  fetch(%q + "?path=" + encodeURIComponent(location.pathname))
    .then(function (r) { return r.json(); })
    .then(function (d) {
      document.title = d.title;
      var h = document.createElement("h1"); h.textContent = d.title; root.appendChild(h);
      var p = document.createElement("p"); p.textContent = d.text; root.appendChild(p);
      var ul = document.createElement("ul");
      d.links.forEach(function (l) {
        var li = document.createElement("li"), a = document.createElement("a");
        a.href = l.href; a.textContent = l.text; li.appendChild(a); ul.appendChild(li);
      });
      root.appendChild(ul);
      document.body.setAttribute("data-ready", "1");
    });
})();
`, spaForbidden, spaAPI)
