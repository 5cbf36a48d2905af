package synthweb

import (
	"io"
	"net/http"
	"testing"
)

func TestRequisitesExpected(t *testing.T) {
	for _, fetch := range []bool{true, false} {
		t.Run(map[bool]string{true: "fetched", false: "not fetched"}[fetch], func(t *testing.T) {
			m := testModel(t, Config{Hosts: 2, PagesPerHost: 4, Requisites: true, FetchRequisites: fetch})
			exp := m.expected(0, nil)
			within := []string{sheetPath, iconPath, scriptPath, logoPath, importPath, bgPath, fontPath}
			for h := range 2 {
				for _, p := range within {
					u := m.url(h, p)
					if exp.Fetch[u] != fetch || exp.Forbidden[u] == fetch {
						t.Errorf("%s: fetch %v, forbidden %v; want fetched %v", u, exp.Fetch[u], exp.Forbidden[u], fetch)
					}
				}
				// Past the embed hop cap, and forbidden by robots.txt, whatever the crawler.
				for _, p := range []string{tooDeepPath, disallowPath} {
					if u := m.url(h, p); exp.Fetch[u] || !exp.Forbidden[u] {
						t.Errorf("%s: fetch %v, forbidden %v; want forbidden", u, exp.Fetch[u], exp.Forbidden[u])
					}
				}
				if !exp.Fetch[m.url(h, "/")] {
					t.Errorf("home of host %d not expected", h)
				}
			}
			if fetch && len(exp.Fetch) != 2*(1+len(within)) {
				t.Errorf("%d URLs expected, want each home and its %d requisites", len(exp.Fetch), len(within))
			}
		})
	}
}

func TestRequisitesServed(t *testing.T) {
	w := startWeb(t, Config{Hosts: 1, PagesPerHost: 2, Requisites: true})
	home := w.Seeds()[0]
	for path, ctype := range map[string]string{"": htmlType, sheetPath: cssType, importPath: cssType, scriptPath: jsType,
		logoPath: pngType, iconPath: iconType, fontPath: fontType, bgPath: pngType} {
		resp, err := http.Get(home + path[min(1, len(path)):])
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != ctype || len(body) == 0 {
			t.Errorf("%q: %d %q, %d octets; want 200 %q", path, resp.StatusCode, resp.Header.Get("Content-Type"), len(body), ctype)
		}
	}
	if got := w.Requisites(); got[home[:len(home)-1]+tooDeepPath] != 3 || got[home[:len(home)-1]+sheetPath] != 1 || len(got) != 9 {
		t.Errorf("Requisites() = %v", got)
	}
}
