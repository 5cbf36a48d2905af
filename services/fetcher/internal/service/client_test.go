package service

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/trawl/trawl/services/fetcher/internal/config"
	"github.com/trawl/trawl/services/fetcher/internal/fetch"
	"github.com/trawl/trawl/shared/envconfig"
)

func loadConfig(t *testing.T, env map[string]string) config.Config {
	t.Helper()
	cfg, err := envconfig.Valid(config.Load(envconfig.FromMap(env)))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// TestClientProxyFromEnvironment: the service's client sends requests through the proxy
// HTTP_PROXY names, and the address policy then judges the proxy's address, not the
// target's (the documented caveat: a proxy must enforce its own policy). The test must set
// the variables before anything in this binary reads them: net/http reads them once.
func TestClientProxyFromEnvironment(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.RequestURI) // absolute-form: what a forward proxy receives
		mu.Unlock()
		io.WriteString(w, "via proxy")
	}))
	t.Cleanup(proxy.Close)
	t.Setenv("HTTP_PROXY", proxy.URL)
	t.Setenv("http_proxy", proxy.URL)
	t.Setenv("NO_PROXY", "")
	t.Setenv("no_proxy", "")
	t.Setenv("REQUEST_METHOD", "") // CGI mode would ignore HTTP_PROXY

	// The target name does not resolve anywhere: only the proxy can answer for it.
	const target = "http://crawl-target.invalid/page?q=1"
	cases := []struct {
		name    string
		env     map[string]string
		body    string
		blocked bool
	}{
		{"proxy allowed", map[string]string{"TRAWL_ALLOW_CIDRS": "127.0.0.0/8"}, "via proxy", false},
		{"proxy on a blocked address", nil, "", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := len(seen)
			cl, _ := newClient(loadConfig(t, c.env), nil, nil, nil)
			resp, err := cl.Get(context.Background(), target)
			if c.blocked {
				if !fetch.IsBlocked(err) {
					t.Fatalf("err = %v, want the proxy's address blocked", err)
				}
				mu.Lock()
				defer mu.Unlock()
				if len(seen) != before {
					t.Errorf("the proxy was reached despite the policy")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			defer mu.Unlock()
			if string(resp.Body) != c.body || len(seen) != before+1 || seen[before] != target {
				t.Errorf("body %q, proxy saw %v; want %q for %s", resp.Body, seen, c.body, target)
			}
		})
	}
}

// TestClientDNSCache: with TRAWL_DNS_TTL set the client resolves through the cache (the
// hook sees the lookups); with 0 it does not.
func TestClientDNSCache(t *testing.T) {
	cases := []struct {
		name    string
		ttl     string
		lookups int
	}{
		{"cache on", "5m", 2}, // a miss, then a negative hit
		{"cache off", "0", 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var mu sync.Mutex
			got := map[string]int{}
			cl, _ := newClient(loadConfig(t, map[string]string{"TRAWL_DNS_TTL": c.ttl}), nil, func(r string) {
				mu.Lock()
				got[r]++
				mu.Unlock()
			}, nil)
			for range 2 {
				// .invalid never resolves (RFC 2606): the lookup fails, however the local
				// resolver reports it, and a failure is cached too.
				if _, err := cl.Get(context.Background(), "https://no-such-host.invalid/"); err == nil {
					t.Fatal("a .invalid name was fetched")
				}
			}
			mu.Lock()
			defer mu.Unlock()
			if n := got["miss"] + got["negative"]; n != c.lookups || (c.lookups > 0 && got["negative"] != 1) {
				t.Errorf("lookups %v, want %d", got, c.lookups)
			}
		})
	}
}
