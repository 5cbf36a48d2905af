package e2e

import (
	"encoding/base64"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/trawl/trawl/devstack/stack"
	"github.com/trawl/trawl/devstack/synthweb"
	"github.com/trawl/trawl/shared/policy"
)

// Rules give two hosts each their own User-Agent, extra header, header secret, cookie and
// basic credentials, the secrets as files of TRAWL_SECRETS_DIR. From the headers in the
// web's own log: every page request to a named host carries exactly its rule's values; no
// request to any other host carries any of them — not the host the redirect host sends a
// page to (a cross-host redirect), not the robots-rules host both link to. No secret value
// is in any service's log.
func TestPolicyHeadersReachOnlyTheirHosts(t *testing.T) {
	t.Parallel()
	env := crawlEnv{MinDelay: 100 * time.Millisecond, DelayFactor: 1, MaxDepth: 5, MaxRetries: 2}
	wcfg := synthweb.DefaultConfig()
	wcfg.Hosts, wcfg.PagesPerHost = 3, 6
	wcfg.CrawlDelay, wcfg.SlowDelay = 200*time.Millisecond, 50*time.Millisecond
	wcfg.BaseIP = "127.0.26.1"
	secrets := map[string]string{
		"redir-cookie": "sid=Redir-Cookie-6c1f", "redir-login": "redir-user:Redir-Pass-93be", "redir-key": "Redir-Key-0d7e",
		"ord-cookie": "sid=Ord-Cookie-a4b2", "ord-login": "ord-user:Ord-Pass-57c1", "ord-key": "Ord-Key-e28a",
	}
	dir := writeSecrets(t, secrets)

	named := map[string]headerSet{}
	pc := startPolicyCrawl(t, wcfg, env, stack.Options{Env: map[string]string{"TRAWL_SECRETS_DIR": dir}},
		func(web *synthweb.Web) []policy.Change {
			redirect := hostsOfKind(web, synthweb.KindRedirect)[0].Name
			ordinary := web.Hosts()[1].Name
			var cs []policy.Change
			for _, r := range []struct{ host, tag string }{{redirect, "redir"}, {ordinary, "ord"}} {
				w := headerSet{
					agent:  "PolicyBot-" + r.tag + "/1.0 (+https://trawl.example/bot)",
					plain:  "plain-" + r.tag,
					key:    secrets[r.tag+"-key"],
					cookie: secrets[r.tag+"-cookie"],
					login:  "Basic " + base64.StdEncoding.EncodeToString([]byte(secrets[r.tag+"-login"])),
				}
				named[r.host] = w
				cs = append(cs, hostRule(r.host, policy.Rule{
					UserAgent:     ptr(w.agent),
					Headers:       map[string]string{"X-Policy-Plain": w.plain},
					HeaderSecrets: map[string]string{"X-Api-Key": r.tag + "-key"},
					Cookies:       ptr(r.tag + "-cookie"),
					Credentials:   ptr(r.tag + "-login"),
				}))
			}
			return cs
		})
	pc.wait(t)
	reqs := pc.web.Requests()

	// What a named host's requests carry, by header.
	got := func(q synthweb.Request) headerSet {
		return headerSet{agent: q.Agent, plain: q.Header.Get("X-Policy-Plain"), key: q.Header.Get("X-Api-Key"),
			cookie: strings.Join(q.Header.Values("Cookie"), "; "), login: q.Header.Get("Authorization")}
	}
	pages := map[string]int{}
	var probs problems
	for _, q := range reqs {
		w, ok := named[q.Host]
		if ok && q.Path != "/robots.txt" {
			pages[q.Host]++
			if g := got(q); g != w {
				probs.add("a page of "+q.Host+" without its rule's values", "%s carried %+v, want %+v", reqString(q), g, w)
			}
			continue
		}
		if ok {
			// robots.txt of a named host: the rule's values or none, never another's.
			for h, other := range named {
				if h != q.Host && leaks(q.Header, other) != "" {
					probs.add("robots.txt with another host's rule values", "%s carried %s of %s's rule", reqString(q), leaks(q.Header, other), h)
				}
			}
			continue
		}
		for h, w := range named {
			if what := leaks(q.Header, w); what != "" {
				probs.add("a host no rule names got a rule's values", "%s carried %s of %s's rule", reqString(q), what, h)
			}
		}
		for _, hdr := range []string{"Cookie", "Authorization", "X-Api-Key", "X-Policy-Plain"} {
			if v := q.Header.Get(hdr); v != "" {
				probs.add("a host no rule names got a rule's header", "%s carried %s", reqString(q), hdr)
			}
		}
	}
	probs.report(t)
	for h := range named {
		if pages[h] < 2 {
			t.Errorf("host %s: %d pages requested, want its site", h, pages[h])
		}
	}
	// The cross-host redirect was followed (through the frontier) to a host no rule names.
	redirect := hostsOfKind(pc.web, synthweb.KindRedirect)[0]
	away := false
	for _, q := range reqs {
		away = away || (q.Host == redirect.Name && q.Path == "/away")
	}
	if !away {
		t.Errorf("the redirect host's /away (a cross-host redirect) was never requested")
	}

	// No secret value in any log.
	logs, err := filepath.Glob(filepath.Join(pc.st.Dir(), "logs", "*.log"))
	if err != nil || len(logs) == 0 {
		t.Fatalf("service logs in %s: %v", pc.st.Dir(), err)
	}
	for _, f := range logs {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for name, v := range secrets {
			// The value, and each part of it a log could quote alone (the password of a
			// login, the value of a cookie).
			for _, piece := range append(strings.FieldsFunc(v, func(r rune) bool { return r == ':' || r == '=' }), v) {
				if len(piece) > 8 && strings.Contains(string(b), piece) {
					t.Errorf("%s holds %q of secret %s", filepath.Base(f), piece, name)
				}
			}
			if enc := base64.StdEncoding.EncodeToString([]byte(v)); strings.Contains(string(b), enc) {
				t.Errorf("%s holds secret %s base64-encoded", filepath.Base(f), name)
			}
		}
	}
}

// headerSet is what one rule makes a request carry.
type headerSet struct{ agent, plain, key, cookie, login string }

// leaks names the rule values w that h carries, "" when none.
func leaks(h http.Header, w headerSet) string {
	var out []string
	if strings.Contains(h.Get("User-Agent"), w.agent) {
		out = append(out, "the User-Agent")
	}
	for _, v := range []struct{ name, hdr, val string }{
		{"the plain header", "X-Policy-Plain", w.plain}, {"the header secret", "X-Api-Key", w.key},
		{"the cookie", "Cookie", w.cookie}, {"the credentials", "Authorization", w.login},
	} {
		for _, got := range h.Values(v.hdr) {
			if strings.Contains(got, v.val) {
				out = append(out, v.name)
			}
		}
	}
	return strings.Join(out, ", ")
}
