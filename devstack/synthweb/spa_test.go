package synthweb

import (
	"context"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"
)

// The app host's pages are shells with no link and no text; only running their script
// (chromium, headless, as a browser runs it) shows each page's text and links; Expected
// holds the script-only pages, the JSON and the script only for a rendering crawler, and
// forbids the disallowed request either way.
func TestSPAHost(t *testing.T) {
	cfg := Config{Hosts: 1, PagesPerHost: 2, BaseIP: "127.0.6.31", SPA: true}
	w := startWeb(t, cfg)
	spa, ok := w.SPA()
	if !ok || len(w.Hosts()) != 3 {
		t.Fatalf("SPA() = %+v, %t with %d hosts: want the app host and the script host", spa, ok, len(w.Hosts()))
	}
	app := hostOfKind(t, w, KindSPA)
	home := get(t, app.Origin+"/")
	if home.status != 200 || strings.Contains(home.body, "<a ") || strings.Contains(home.body, spa.Tokens[app.Origin+"/"]) ||
		!strings.Contains(home.body, `<div id="root"></div>`) || !strings.Contains(home.body, spa.Script) {
		t.Fatalf("shell: %d\n%s", home.status, home.body)
	}
	if robots := get(t, app.Origin+"/robots.txt").body; !strings.Contains(robots, "Disallow: /private/") {
		t.Fatalf("robots.txt:\n%s", robots)
	}
	if js := get(t, spa.Script); js.status != 200 || !strings.Contains(js.body, `fetch("/private/track")`) {
		t.Fatalf("script: %d\n%s", js.status, js.body)
	}
	for i, u := range spa.API {
		j := get(t, u)
		if j.status != 200 || j.header.Get("Content-Type") != jsonType || !strings.Contains(j.body, spa.Tokens[app.Origin+w.m.spaPaths()[i]]) {
			t.Fatalf("%s: %d %q\n%s", u, j.status, j.header.Get("Content-Type"), j.body)
		}
	}

	// What a browser makes of a page: its token and its links.
	page := spa.Pages[0] // /app/0: links home, /app/2, /app/3
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "chromium", "--headless", "--no-sandbox", "--disable-gpu",
		"--virtual-time-budget=5000", "--dump-dom", page).Output()
	if err != nil {
		t.Fatalf("chromium (Debian's package, installed by make test) on %s: %v", page, err)
	}
	dom := string(out)
	for _, want := range []string{spa.Tokens[page], `href="/app/2"`, `href="/app/3"`, `href="/"`, `data-ready="1"`} {
		if !strings.Contains(dom, want) {
			t.Errorf("rendered %s lacks %s:\n%s", page, want, dom)
		}
	}

	// Expected without and with rendering.
	off := w.Expected(10)
	for _, u := range append(append(slices.Clone(spa.Pages), spa.API...), spa.Script, spa.Disallowed) {
		if off.Fetch[u] || !off.Forbidden[u] {
			t.Errorf("without rendering %s: fetch %t forbidden %t, want forbidden", u, off.Fetch[u], off.Forbidden[u])
		}
	}
	if !off.Fetch[app.Origin+"/"] {
		t.Error("the app's home page is a seed and is fetched without rendering")
	}
	w.m.cfg.Render = true
	on := w.Expected(10)
	for _, u := range append(append(slices.Clone(spa.Pages), spa.API...), spa.Script) {
		if !on.Fetch[u] || on.Forbidden[u] {
			t.Errorf("with rendering %s: fetch %t forbidden %t, want fetched", u, on.Fetch[u], on.Forbidden[u])
		}
	}
	if !on.Forbidden[spa.Disallowed] || on.Fetch[spa.Disallowed] {
		t.Errorf("the disallowed request %s is not forbidden", spa.Disallowed)
	}
	if deep := w.Expected(1); deep.Fetch[app.Origin+"/app/2"] {
		t.Error("/app/2 is two script-written links from the seed, beyond depth 1")
	}
}
