// Package politetest is the test suites every process that makes requests runs: Run
// against its own configuration (each service's config test calls it with its config's
// Load): read from one environment, the fetcher and the renderer must resolve a host's
// site policy into the same request settings, secrets, agent token, robots.txt limits and
// robots decisions; RunCallers against its own client (callers.go): a host must be asked
// alike, and dialled under the same address checks, whichever process asks.
package politetest

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/trawl/trawl/shared/envconfig"
	"github.com/trawl/trawl/shared/policy"
	"github.com/trawl/trawl/shared/polite"
	"github.com/trawl/trawl/shared/robots"
)

// Load reads a process's configuration from r and gives its polite.Settings.
type Load func(r *envconfig.Reader) (polite.Settings, error)

// secrets are the files of the suite's TRAWL_SECRETS_DIR.
var secrets = map[string]string{
	"cookie":    "session=s3cret\n",
	"creds":     "crawler:pa ss\n",
	"token":     "tok-123",
	"two-lines": "a\nb\n",
}

func rule(t *testing.T, scope string, set func(*policy.Rule)) policy.Stored {
	t.Helper()
	sc, err := policy.ParseScope(scope)
	if err != nil {
		t.Fatal(err)
	}
	st := policy.Stored{Rule: policy.Rule{Scope: sc}, Origin: policy.Origin{Version: 1}}
	set(&st.Rule)
	return st
}

func ptr[T any](v T) *T { return &v }

// Run runs the suite against the configuration load reads.
func Run(t *testing.T, load Load) {
	dir := t.TempDir()
	for name, v := range secrets {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(v), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	s, err := load(envconfig.FromMap(map[string]string{
		"TRAWL_SECRETS_DIR":      dir,
		"TRAWL_ROBOTS_MAX_BYTES": "1MiB",
		"TRAWL_ROBOTS_AGENT":     "trawl",
	}))
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	var applied []policy.Field
	q := polite.New(s, func(f policy.Field) { applied = append(applied, f) })

	set, err := policy.Compile([]policy.Stored{
		rule(t, "host:all.test", func(r *policy.Rule) {
			r.UserAgent = ptr("AcmeBot/2.0 (+https://acme.example/bot)")
			r.Headers = map[string]string{"X-Extra": "plain"}
			r.HeaderSecrets = map[string]string{"x-token": "token"}
			r.Cookies, r.Credentials = ptr("cookie"), ptr("creds")
		}),
		rule(t, "host:browserform.test", func(r *policy.Rule) {
			r.UserAgent = ptr("Mozilla/5.0 (compatible; ExampleBot/2.1; +https://example.org/bot)")
		}),
		rule(t, "host:own.test", func(r *policy.Rule) { r.UserAgent = ptr("Trawl/9.9") }),
		rule(t, "host:missing.test", func(r *policy.Rule) { r.Cookies = ptr("nosuch") }),
		rule(t, "host:twolines.test", func(r *policy.Rule) { r.Cookies = ptr("two-lines") }),
		rule(t, "host:nocolon.test", func(r *policy.Rule) { r.Credentials = ptr("token") }),
		rule(t, "host:plain.test", func(r *policy.Rule) { r.MaxDepth = ptr(3) }),
	}, 1)
	if err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name    string
		url     string
		header  http.Header // nil: no headers at all
		secret  []string
		agent   string
		applied []policy.Field
		errName string // the secret a *polite.SecretError names
	}{
		{name: "every setting, secrets read from the directory", url: "https://all.test/a",
			header: http.Header{
				"User-Agent":    {"AcmeBot/2.0 (+https://acme.example/bot)"},
				"X-Extra":       {"plain"},
				"X-Token":       {"tok-123"},
				"Cookie":        {"session=s3cret"},
				"Authorization": {"Basic Y3Jhd2xlcjpwYSBzcw=="},
			},
			secret:  []string{"X-Token", "Cookie", "Authorization"},
			agent:   "acmebot",
			applied: []policy.Field{policy.FUserAgent, policy.FHeaders, policy.FCookies, policy.FCredentials}},
		{name: "a browser-form User-Agent reads robots.txt for its compatible token", url: "http://browserform.test/",
			header:  http.Header{"User-Agent": {"Mozilla/5.0 (compatible; ExampleBot/2.1; +https://example.org/bot)"}},
			agent:   "examplebot",
			applied: []policy.Field{policy.FUserAgent}},
		{name: "a User-Agent naming the process's own token keeps its agent", url: "http://own.test/",
			header: http.Header{"User-Agent": {"Trawl/9.9"}}, agent: "trawl", applied: []policy.Field{policy.FUserAgent}},
		{name: "no request setting: no headers, the process's agent", url: "http://plain.test/", agent: "trawl"},
		{name: "no rule at all", url: "http://elsewhere.test/", agent: "trawl"},
		{name: "a missing secret is an error naming it", url: "http://missing.test/", agent: "trawl", errName: "nosuch"},
		{name: "a secret of two lines is refused", url: "http://twolines.test/", agent: "trawl", errName: "two-lines"},
		{name: "credentials without a colon are refused", url: "http://nocolon.test/", agent: "trawl", errName: "token"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			applied = nil
			pol := set.URL(tt.url)
			host := strings.SplitN(strings.SplitN(tt.url, "://", 2)[1], "/", 2)[0]
			h, err := q.Headers(pol, host)
			if got := q.RobotsAgent(pol); got != tt.agent {
				t.Errorf("robots agent %q, want %q", got, tt.agent)
			}
			if tt.errName != "" {
				var se *polite.SecretError
				if !errors.As(err, &se) || se.Name != tt.errName {
					t.Fatalf("err %v, want a SecretError naming %q", err, tt.errName)
				}
				for _, v := range secrets {
					if strings.Contains(err.Error(), strings.TrimSpace(v)) {
						t.Errorf("error %q holds a secret's value", err)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tt.header == nil {
				if h != nil {
					t.Fatalf("headers %v, want none", h.Header)
				}
				return
			}
			if h == nil {
				t.Fatalf("no headers, want %v", tt.header)
			}
			for name, want := range tt.header {
				if got := h.Header[name]; !slices.Equal(got, want) {
					t.Errorf("%s = %q, want %q", name, got, want)
				}
			}
			if len(h.Header) != len(tt.header) {
				t.Errorf("headers %v, want exactly %v", h.Header, tt.header)
			}
			if !slices.Equal(h.Secret, tt.secret) {
				t.Errorf("secret headers %q, want %q", h.Secret, tt.secret)
			}
			if !slices.Equal(applied, tt.applied) {
				t.Errorf("settings applied %q, want %q", applied, tt.applied)
			}
			// Bound to the host: a request to another host (a redirect's target, a
			// robots.txt hop) under the same context gets none of them.
			ctx := polite.WithHeaders(context.Background(), h)
			if polite.HeadersFor(ctx, strings.ToUpper(host)) != h {
				t.Errorf("the headers do not go to their own host %s", host)
			}
			if got := polite.HeadersFor(ctx, "other.test"); got != nil {
				t.Errorf("the headers go to another host: %v", got.Header)
			}
			// The archived request head shows every secret masked.
			hdr := http.Header{}
			h.Apply(hdr)
			var head strings.Builder
			head.WriteString("GET / HTTP/1.1\r\n")
			_ = hdr.Write(&head)
			masked := string(polite.MaskHead([]byte(head.String()+"\r\n"), h.Secret))
			for _, name := range h.Secret {
				if !strings.Contains(masked, name+": xxxxx\r\n") || strings.Contains(masked, h.Header.Get(name)) {
					t.Errorf("masked head %q: want %s masked", masked, name)
				}
			}
		})
	}

	t.Run("robots decision for the rule's agent", func(t *testing.T) {
		const body = "User-agent: acmebot\nDisallow: /acme-only\n\nUser-agent: trawl\nDisallow: /private\n"
		now := time.Now()
		for _, tt := range []struct {
			url     string
			allowed bool
		}{
			{"https://all.test/private", true}, // acmebot's group, not the process's
			{"https://all.test/acme-only", false},
			{"http://plain.test/private", false},
			{"http://plain.test/private?x=1", false},
			{"http://plain.test/acme-only", true},
			{"http://plain.test/robots.txt", true},
		} {
			u, err := url.Parse(tt.url)
			if err != nil {
				t.Fatal(err)
			}
			e := robots.NewEntry(q.RobotsAgent(set.URL(tt.url)), http.StatusOK, []byte(body), int(q.RobotsMaxBytes()), now)
			if d := polite.Decide(e, u); d.Allowed != tt.allowed {
				t.Errorf("%s: allowed %v (%s %s), want %v", tt.url, d.Allowed, d.Reason, d.Rule, tt.allowed)
			}
		}
		// An unreachable robots.txt refuses everything, robots.txt itself included.
		e := robots.UnreachableEntry("trawl", errors.New("connection refused"), now)
		for _, raw := range []string{"http://plain.test/", "http://plain.test/robots.txt"} {
			u, _ := url.Parse(raw)
			if d := polite.Decide(e, u); d.Allowed {
				t.Errorf("%s allowed under an unreachable robots.txt", raw)
			}
		}
	})

	t.Run("robots.txt limits", func(t *testing.T) {
		if got := q.RobotsMaxBytes(); got != 1<<20 {
			t.Errorf("robots.txt limit %d, want TRAWL_ROBOTS_MAX_BYTES's %d", got, 1<<20)
		}
		for n, want := range map[int]bool{0: true, polite.RobotsMaxHops - 1: true, polite.RobotsMaxHops: false} {
			if got := polite.FollowRobots(n, "https://x.test/robots.txt"); got != want {
				t.Errorf("after hop %d, follow: %v, want %v", n, got, want)
			}
		}
		if polite.FollowRobots(0, "") {
			t.Error("a redirect without a usable Location is followed")
		}
	})
}
