package itest

import (
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/trawl/trawl/shared/policy"
	"github.com/trawl/trawl/shared/robots"
	"github.com/trawl/trawl/shared/testwait"
)

// A host's site policy reaches the browser's requests to it as it reaches a fetcher's
// (shared/polite): its User-Agent, extra headers, header secret, Cookie and credentials,
// to that host only (not to the host a response redirects to, nor to a robots.txt hop
// elsewhere), the exchange archived with the secrets masked; and robots.txt is read as a
// fetcher reads it: for the agent the rule's User-Agent names, through its redirects, and
// up to TRAWL_ROBOTS_MAX_BYTES. Judged from the sites' own request log.
func TestRenderCarriesTheSitePolicysRequestSettings(t *testing.T) {
	st := newStack(t)
	secrets := t.TempDir()
	for name, v := range map[string]string{"a-cookie": "session=s3cret\n", "a-creds": "crawler:pa55\n", "a-token": "tok-123\n"} {
		if err := os.WriteFile(filepath.Join(secrets, name), []byte(v), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// c.test's robots.txt disallows /deep/ past robots.DefaultMaxBytes, within the 1 MiB
	// TRAWL_ROBOTS_MAX_BYTES set below.
	bigRobots := strings.Repeat("# "+strings.Repeat("x", 97)+"\n", robots.DefaultMaxBytes/100+1000) + "User-agent: *\nDisallow: /deep/\n"
	var s *site
	s = newSite(t, map[string]http.HandlerFunc{
		// a.test's robots.txt is at b.test: the group for the rule's agent is only found
		// by following the redirect.
		"a.test/robots.txt": func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, s.url("b.test", "/robots-of-a.txt"), http.StatusFound)
		},
		"b.test/robots-of-a.txt":   serve("text/plain", "User-agent: acmebot\nDisallow: /not-for-acme/\n"),
		"a.test/app.js":            serve("text/javascript", "document.body.setAttribute('data-app', 'ran');"),
		"a.test/not-for-acme/x.js": serve("text/javascript", "document.body.setAttribute('data-acme', 'ran');"),
		"a.test/elsewhere.js": func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, s.url("b.test", "/landing.js"), http.StatusFound)
		},
		"b.test/robots.txt": serve("text/plain", ""),
		"b.test/landing.js": serve("text/javascript", "document.body.setAttribute('data-landing', 'ran');"),
		"c.test/robots.txt": serve("text/plain", bigRobots),
		"c.test/shallow.js": serve("text/javascript", "document.body.setAttribute('data-shallow', 'ran');"),
		"c.test/deep/y.js":  serve("text/javascript", "document.body.setAttribute('data-deep', 'ran');"),
	})
	sc, err := policy.ParseScope("host:a.test")
	if err != nil {
		t.Fatal(err)
	}
	ua, cookie, creds := "AcmeBot/2.0 (+https://acme.example/bot)", "a-cookie", "a-creds"
	if _, _, err := policy.NewStore(st.rdb(), "itest").Apply(testwait.Context(t), []policy.Change{{Rule: policy.Rule{
		Scope: sc, UserAgent: &ua, Cookies: &cookie, Credentials: &creds,
		Headers:       map[string]string{"X-Extra": "plain"},
		HeaderSecrets: map[string]string{"X-Token": "a-token"},
	}}}, "test", 0); err != nil {
		t.Fatal(err)
	}
	st.start(st.config(map[string]string{"TRAWL_RESOLVE": resolve("a.test", "b.test", "c.test"),
		"TRAWL_SECRETS_DIR": secrets, "TRAWL_ROBOTS_MAX_BYTES": "1MiB"}))
	p := st.page(st.publishTask(s.url("a.test", "/"), `<html><body>`+
		`<script src="/app.js"></script><script src="/elsewhere.js"></script><script src="/not-for-acme/x.js"></script>`+
		`<script src="`+s.url("c.test", "/shallow.js")+`"></script><script src="`+s.url("c.test", "/deep/y.js")+`"></script>`+
		`</body></html>`))
	if p.Meta.Rendered == nil || p.Meta.Rendered.Failed != "" {
		t.Fatalf("page not rendered: %+v", p.Meta.Rendered)
	}
	for _, want := range []string{`data-app="ran"`, `data-landing="ran"`, `data-shallow="ran"`} {
		if !strings.Contains(string(p.Body), want) {
			t.Errorf("rendered DOM lacks %s: %s", want, p.Body)
		}
	}

	// A response to a request that carried the rule's secrets is the site's answer to
	// that account: another page's request is made again, not served from the cache.
	p2 := st.page(st.publishTask(s.url("a.test", "/second"), `<html><body><script src="/app.js"></script></body></html>`))
	if !strings.Contains(string(p2.Body), `data-app="ran"`) {
		t.Errorf("second page: the script did not run: %s", p2.Body)
	}
	if n := strings.Count(strings.Join(s.paths("a.test"), " "), "/app.js"); n != 2 {
		t.Errorf("a.test saw /app.js %d times over two pages, want 2 (a response to a request with a secret is not cached)", n)
	}

	got := map[string]http.Header{} // host+path → the headers of its first request
	var seen []string
	for _, h := range s.log() {
		seen = append(seen, h.host+h.path)
		if _, ok := got[h.host+h.path]; !ok {
			got[h.host+h.path] = h.header
		}
	}
	ruled := map[string]string{
		"User-Agent": ua, "X-Extra": "plain", "X-Token": "tok-123", "Cookie": "session=s3cret",
		"Authorization": "Basic Y3Jhd2xlcjpwYTU1", // crawler:pa55
	}
	none := map[string]string{"X-Extra": "", "X-Token": "", "Cookie": "", "Authorization": ""}
	tests := []struct {
		name, req string
		want      map[string]string
	}{
		{"the ruled host's script carries every setting", "a.test/app.js", ruled},
		{"the ruled host's robots.txt request carries them", "a.test/robots.txt", ruled},
		{"the host a script redirects to gets none", "b.test/landing.js", none},
		{"the robots.txt hop to another host gets none", "b.test/robots-of-a.txt", none},
		{"an unruled host gets the process's User-Agent", "c.test/shallow.js", map[string]string{"User-Agent": robots.DefaultUserAgent, "Cookie": ""}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, ok := got[tt.req]
			if !ok {
				t.Fatalf("%s never requested; the sites saw %v", tt.req, seen)
			}
			for name, want := range tt.want {
				if v := h.Get(name); v != want {
					t.Errorf("%s: %s = %q, want %q", tt.req, name, v, want)
				}
			}
		})
	}
	t.Run("robots.txt read as the fetcher reads it", func(t *testing.T) {
		for _, never := range []string{"a.test/not-for-acme/x.js", "c.test/deep/y.js"} {
			if slices.Contains(seen, never) {
				t.Errorf("%s was requested; its robots.txt disallows it (the rule's agent, through a redirect, within TRAWL_ROBOTS_MAX_BYTES)", never)
			}
		}
		if r := p.Meta.Rendered.Refused; r["robots"] != 2 {
			t.Errorf("refused %v, want robots: 2", r)
		}
	})
	t.Run("the exchange archived masks the secrets", func(t *testing.T) {
		var head string
		for _, e := range p.Meta.Rendered.Exchanges {
			if e.URL == s.url("a.test", "/app.js") {
				head = string(e.Request)
			}
		}
		if head == "" {
			t.Fatal("no exchange for a.test's script")
		}
		for _, name := range []string{"Cookie", "Authorization", "X-Token"} {
			if !strings.Contains(head, name+": xxxxx\r\n") {
				t.Errorf("request head %q: want %s masked", head, name)
			}
		}
		for _, secret := range []string{"s3cret", "tok-123", "Y3Jhd2xlcjpwYTU1"} {
			if strings.Contains(head, secret) {
				t.Errorf("request head %q holds a secret", head)
			}
		}
		if !strings.Contains(head, "User-Agent: "+ua+"\r\n") || !strings.Contains(head, "X-Extra: plain\r\n") {
			t.Errorf("request head %q: want the rule's User-Agent and X-Extra as sent", head)
		}
	})
}
