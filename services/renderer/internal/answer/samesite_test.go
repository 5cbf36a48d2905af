package answer

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/trawl/trawl/shared/policy"
	"github.com/trawl/trawl/shared/polite"
	"github.com/trawl/trawl/shared/safedial"
)

// TestSecretsGoOnlyToThePagesSite: a rule's secrets (Cookie, credentials, header secrets)
// go with a request to its host only when the page being rendered is of the same site, as
// a browser scopes a SameSite cookie; a page of another site makes the request without
// them (its plain headers still apply), whatever the method, and the response may then be
// cached. Judged by the headers a real server received, sent as Answer sends them (the
// host's claim and robots.txt, which need Redis, are the renderer's itest's).
func TestSecretsGoOnlyToThePagesSite(t *testing.T) {
	var (
		mu   sync.Mutex
		last http.Header
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		last = r.Header.Clone()
		mu.Unlock()
		_, _ = w.Write([]byte("ok"))
	}))
	t.Cleanup(srv.Close)
	_, port, err := net.SplitHostPort(srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	loop := netip.MustParseAddr("127.0.0.1")
	d := &safedial.Dialer{
		Policy: safedial.NewPolicy(netip.MustParsePrefix("127.0.0.0/8")),
		Resolver: &safedial.StaticResolver{Names: map[string][]netip.Addr{
			"members.test": {loop}, "www.members.test": {loop}, "evil.test": {loop},
		}},
		Timeout: 2 * time.Second,
	}

	secrets := t.TempDir()
	for name, v := range map[string]string{"m-cookie": "session=s3cret\n", "m-creds": "crawler:pa55\n", "m-token": "tok-123\n"} {
		if err := os.WriteFile(filepath.Join(secrets, name), []byte(v), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	sc, err := policy.ParseScope("host:members.test")
	if err != nil {
		t.Fatal(err)
	}
	ua, cookie, creds := "AcmeBot/2.0", "m-cookie", "m-creds"
	set, err := policy.Compile([]policy.Stored{{Rule: policy.Rule{
		Scope: sc, UserAgent: &ua, Cookies: &cookie, Credentials: &creds,
		Headers: map[string]string{"X-Extra": "plain"}, HeaderSecrets: map[string]string{"X-Token": "m-token"},
	}, Origin: policy.Origin{Version: 1}}}, 1)
	if err != nil {
		t.Fatal(err)
	}
	a := New(Config{UserAgent: "trawl-test", RequestTimeout: 5 * time.Second, MaxBody: 1 << 20,
		Rules:    set.URL,
		Requests: polite.New(polite.Settings{SecretsDir: secrets}, nil),
	}, nil, nil, nil, d, nil, nil, slog.New(slog.DiscardHandler))
	t.Cleanup(a.Close)

	at := func(host, path string) string { return "http://" + host + ":" + port + path }
	secret := map[string]string{"Cookie": "session=s3cret", "Authorization": "Basic Y3Jhd2xlcjpwYTU1", "X-Token": "tok-123"}
	plain := map[string]string{"User-Agent": ua, "X-Extra": "plain"}
	tests := []struct {
		name, page, method string
		secrets            bool // the server sees the rule's secrets (and the response is not shareable)
	}{
		{"same-site GET", at("members.test", "/home"), http.MethodGet, true},
		{"GET from another host of the site", at("www.members.test", "/"), http.MethodGet, true},
		{"same-site POST (the site's own API)", at("members.test", "/home"), http.MethodPost, true},
		{"cross-site GET (a JSONP read, a frame)", at("evil.test", "/"), http.MethodGet, false},
		{"cross-site POST", at("evil.test", "/"), http.MethodPost, false},
		{"no page", "", http.MethodGet, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			mu.Lock()
			last = nil
			mu.Unlock()
			req := Request{URL: at("members.test", "/account/delete"), Method: tt.method, Page: tt.page,
				Header: map[string]string{"Cookie": "page=1"}}
			if tt.method == http.MethodPost {
				req.Body = []byte("confirm=yes")
			}
			o, reason, err := a.prepare(req)
			if reason != "" {
				t.Fatalf("refused %s: %v", reason, err)
			}
			if _, err := a.send(ctx, req, o); err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			got := last
			mu.Unlock()
			if got == nil {
				t.Fatal("the server saw no request")
			}
			for name, v := range plain {
				if g := got.Get(name); g != v {
					t.Errorf("%s = %q, want the rule's %q", name, g, v)
				}
			}
			for name, v := range secret {
				want := ""
				if tt.secrets {
					want = v
				}
				if g := got.Get(name); g != want {
					t.Errorf("%s = %q, want %q", name, g, want)
				}
			}
			if shareable := tt.method == http.MethodGet && !tt.secrets; o.shareable != shareable {
				t.Errorf("shareable %v, want %v (a response to a request with a secret is never cached)", o.shareable, shareable)
			}
		})
	}
}
