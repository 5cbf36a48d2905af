package itest

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/trawl/trawl/devstack/inproc"
	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/policy"
)

// setRules applies rules (scope → rule) to the stack's policy store, as trawlctl policy
// apply does, and returns the new version.
func (st *stack) setRules(rules map[string]policy.Rule, remove ...string) int64 {
	st.t.Helper()
	var changes []policy.Change
	for scope, r := range rules {
		sc, err := policy.ParseScope(scope)
		if err != nil {
			st.t.Fatal(err)
		}
		r.Scope = sc
		changes = append(changes, policy.Change{Rule: r})
	}
	for _, scope := range remove {
		sc, err := policy.ParseScope(scope)
		if err != nil {
			st.t.Fatal(err)
		}
		changes = append(changes, policy.Change{Remove: true, Rule: policy.Rule{Scope: sc}})
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	v, _, err := policy.NewStore(st.rdb, st.common.RedisPrefix).Apply(ctx, changes, "itest", 0)
	if err != nil {
		st.t.Fatal(err)
	}
	return v
}

// secretsDir writes secrets (name → value) as files in a new directory, as Docker
// Compose mounts them, and returns it.
func secretsDir(t *testing.T, secrets map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, v := range secrets {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(v+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// seenRequest is one request as a server received it.
type seenRequest struct {
	host, path string
	header     http.Header
}

// headerSite serves routes on ip, recording every request with its headers.
type headerSite struct {
	*site
	mu   sync.Mutex
	seen []seenRequest
}

func newHeaderSite(t *testing.T, ip string, routes map[string]http.HandlerFunc) *headerSite {
	t.Helper()
	hs := &headerSite{}
	wrapped := map[string]http.HandlerFunc{}
	for path, h := range routes {
		wrapped[path] = func(w http.ResponseWriter, r *http.Request) {
			hs.mu.Lock()
			host, _, _ := net.SplitHostPort(r.Host)
			hs.seen = append(hs.seen, seenRequest{host, r.URL.Path, r.Header.Clone()})
			hs.mu.Unlock()
			h(w, r)
		}
	}
	hs.site = newSiteOn(t, ip, wrapped)
	return hs
}

func (hs *headerSite) requests() []seenRequest {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	return append([]seenRequest(nil), hs.seen...)
}

// TestPolicyRequestSettings: a host rule's User-Agent, extra headers, header secret,
// Cookie and basic credentials go with every request to that host (robots.txt included),
// and to no other host: not to the target of its redirect, not to the host its robots.txt
// redirects to, not to another host on the same server. The robots.txt group matched is
// the rule's User-Agent's. A secret that cannot be read fails the task without a request,
// naming the secret; no secret value appears in the fetcher's log or metrics.
func TestPolicyRequestSettings(t *testing.T) {
	t.Parallel()
	const (
		ua       = "AcmeBot/2.0 (+https://acme.example/bot)"
		tokenVal = "tok-5ecret-value"
		cookie   = "session=c00kie-5ecret"
		user     = "crawler"
		password = "pa55word-5ecret"
	)
	secretValues := []string{tokenVal, "c00kie-5ecret", password, base64.StdEncoding.EncodeToString([]byte(user + ":" + password))}

	st := newStack(t)
	var bPort string
	// a.test and c.test share 127.0.0.1; b.test is 127.0.0.2.
	siteA := newHeaderSite(t, "127.0.0.1", map[string]http.HandlerFunc{
		"/robots.txt": func(w http.ResponseWriter, r *http.Request) {
			if strings.HasPrefix(r.Host, "r.test") {
				http.Redirect(w, r, "http://b.test:"+bPort+"/rules.txt", http.StatusFound)
				return
			}
			text("User-agent: acmebot\nDisallow: /acme-only\n\nUser-agent: *\nDisallow: /star-only\n")(w, r)
		},
		"/page":      html(pageHTML),
		"/star-only": html(pageHTML),
		"/acme-only": html(pageHTML),
		"/moved": func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, "http://b.test:"+bPort+"/landing", http.StatusFound)
		},
	})
	siteB := newHeaderSite(t, "127.0.0.2", map[string]http.HandlerFunc{
		"/robots.txt": text("User-agent: *\nAllow: /\n"),
		"/rules.txt":  text("User-agent: *\nAllow: /\n"),
		"/landing":    html(pageHTML),
	})
	_, aPort, _ := net.SplitHostPort(siteA.Listener.Addr().String())
	_, bPort, _ = net.SplitHostPort(siteB.Listener.Addr().String())

	settings := func(r *policy.Rule) {
		r.UserAgent = ptrTo(ua)
		r.HeaderSecrets = map[string]string{"X-Token": "token"}
		r.Cookies = ptrTo("cookie")
		r.Credentials = ptrTo("basic")
	}
	var ra, rr policy.Rule
	settings(&ra)
	settings(&rr)
	// The plain header comes from a rule that sets nothing else, so that a fetcher that
	// left such rules out of the set it holds (policy.OnlyFields) would not send it.
	plain := policy.Rule{Headers: map[string]string{"X-Extra": "plain-value"}}
	st.setRules(map[string]policy.Rule{
		"host:a.test":   ra,
		"host:r.test":   rr,
		"domain:a.test": plain,
		"domain:r.test": plain,
		"host:s.test":   {Cookies: ptrTo("missing")},
		"host:u.test":   {Credentials: ptrTo("nocolon")},
	})
	dir := secretsDir(t, map[string]string{"token": tokenVal, "cookie": cookie, "basic": user + ":" + password, "nocolon": password})

	var logBuf lockedBuffer
	log := inproc.Logger(t, slog.LevelDebug, &logBuf)
	in := st.startLogged(st.config(map[string]string{
		"TRAWL_RESOLVE":     "a.test=127.0.0.1,c.test=127.0.0.1,r.test=127.0.0.1,s.test=127.0.0.1,u.test=127.0.0.1,b.test=127.0.0.2",
		"TRAWL_MIN_DELAY":   "0s",
		"TRAWL_TASK_BATCH":  "1",
		"TRAWL_SECRETS_DIR": dir,
	}), log)

	run := func(u string) crawlmsg.Outcome {
		t.Helper()
		tk := task(u)
		st.publishTask(tk)
		return st.outcome(tk.Lease)
	}
	// fetch runs tasks for u until its robots.txt is known and the URL decided.
	fetch := func(u string) crawlmsg.Outcome {
		t.Helper()
		o := run(u)
		if o.Kind == crawlmsg.OutcomeRobots {
			o = run(u)
		}
		return o
	}
	a := func(p string) string { return "http://a.test:" + aPort + p }
	tests := []struct {
		name string
		url  string
		want crawlmsg.OutcomeKind
	}{
		{"the rule's host", a("/page"), crawlmsg.OutcomeFetched},
		{"allowed for the rule's agent, not for the default one", a("/star-only"), crawlmsg.OutcomeFetched},
		{"disallowed for the rule's agent", a("/acme-only"), crawlmsg.OutcomeDisallowed},
		{"a redirect to another host", a("/moved"), crawlmsg.OutcomeFetched},
		{"the redirect's target", "http://b.test:" + bPort + "/landing", crawlmsg.OutcomeFetched},
		{"another host on the same server", "http://c.test:" + aPort + "/page", crawlmsg.OutcomeFetched},
		{"robots.txt redirecting to another host", "http://r.test:" + aPort + "/page", crawlmsg.OutcomeFetched},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if o := fetch(tt.url); o.Kind != tt.want {
				t.Fatalf("outcome %+v, want %s", o, tt.want)
			}
		})
	}
	for _, tt := range []struct{ name, host, secret string }{
		{"a secret that cannot be read", "s.test", "missing"},
		{"credentials that are not user:password", "u.test", "nocolon"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			o := run("http://" + tt.host + ":" + aPort + "/page")
			if o.Kind != crawlmsg.OutcomeError || !o.Permanent || o.Requested || !strings.Contains(o.Error, `"`+tt.secret+`"`) || !strings.Contains(o.Error, "host:"+tt.host) {
				t.Fatalf("outcome %+v, want a permanent error naming secret %q of host:%s, no request", o, tt.secret, tt.host)
			}
		})
	}

	auth := "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+password))
	ruled := map[string]bool{"a.test": true, "r.test": true}
	counts := map[string]int{}
	for _, r := range append(siteA.requests(), siteB.requests()...) {
		counts[r.host]++
		want := map[string]string{"User-Agent": ua, "X-Extra": "plain-value", "X-Token": tokenVal, "Cookie": cookie, "Authorization": auth}
		if !ruled[r.host] {
			want = map[string]string{"User-Agent": st.config(nil).UserAgent, "X-Extra": "", "X-Token": "", "Cookie": "", "Authorization": ""}
		}
		var wrong []string // names only: the values are secrets, never printed
		for name, v := range want {
			if r.header.Get(name) != v {
				wrong = append(wrong, name)
			}
		}
		if len(wrong) > 0 {
			sort.Strings(wrong)
			t.Errorf("%s%s (rule: %v): wrong %v; User-Agent %q", r.host, r.path, ruled[r.host], wrong, r.header.Get("User-Agent"))
		}
	}
	// a: robots.txt and three URLs (not /acme-only); r: robots.txt and its page; b: robots.txt, /landing
	// and r's robots.txt; c: robots.txt and its page; s: nothing.
	if want := map[string]int{"a.test": 4, "r.test": 2, "b.test": 3, "c.test": 2}; fmt.Sprint(counts) != fmt.Sprint(want) {
		t.Errorf("requests per host %v, want %v", counts, want)
	}

	var metrics bytes.Buffer
	resp, err := http.Get("http://" + in.Svc.Addr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(&metrics, resp.Body)
	resp.Body.Close()
	// Everything the fetcher printed or published: its log, its metrics, its outcomes and
	// its pages' metadata (the capture for archives is masked: fetch's TestHeadersBoundToHost).
	var published strings.Builder
	for _, o := range st.outcomes {
		fmt.Fprintf(&published, "%+v\n", o.v)
	}
	st.pollPages()
	for _, p := range st.pages {
		fmt.Fprintf(&published, "%+v\n", p.v.Meta)
	}
	for what, out := range map[string]string{"log": logBuf.String(), "metrics": metrics.String(), "outcomes and pages": published.String()} {
		for i, v := range secretValues {
			if strings.Contains(out, v) {
				t.Errorf("the fetcher's %s hold secret value #%d", what, i)
			}
		}
	}
	if got := in.metric(t, `trawl_fetcher_policy_secret_errors_total`); got != 2 {
		t.Errorf("trawl_fetcher_policy_secret_errors_total = %v, want 2", got)
	}
}

func ptrTo[T any](v T) *T { return &v }

// lockedBuffer is a bytes.Buffer written from several goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
