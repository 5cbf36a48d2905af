package fetch

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/trawl/trawl/shared/polite"
	"github.com/trawl/trawl/shared/safedial"
)

// TestHeadersBoundToHost: a site policy's headers go with the requests to the host they
// were resolved for, and with no request to any other host, even one made under the same
// context (a redirect's target); a secret header is masked in the captured request head;
// the client's own framing and decoding headers cannot be replaced.
// (The client follows no redirect itself; the context is what could carry them on.)
func TestHeadersBoundToHost(t *testing.T) {
	var port string
	s := newSite(t, func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.Host, "a.test") {
			http.Redirect(w, r, "http://b.test:"+port+"/landing", http.StatusFound)
			return
		}
		w.Write([]byte("ok"))
	})
	port = s.URL[strings.LastIndex(s.URL, ":")+1:]
	cfg := testConfig()
	allow, _ := safedial.ParseCIDRs([]string{"127.0.0.1"})
	d := &safedial.Dialer{Policy: safedial.NewPolicy(allow...), Resolver: staticResolver{"a.test": "127.0.0.1", "b.test": "127.0.0.1"}, Timeout: time.Second}
	cfg.Dial = d.DialContext
	c := New(cfg)

	h := &polite.Headers{Host: "A.test", Header: http.Header{
		"User-Agent":      {"AcmeBot/2.0"},
		"Cookie":          {"session=s3cret"},
		"X-Extra":         {"plain"},
		"Accept-Encoding": {"br"},
	}, Secret: []string{"Cookie"}}
	// The redirect's target requested under the same context, as a careless caller would.
	ctx := polite.WithHeaders(context.Background(), h)
	resp, err := c.Get(ctx, "http://a.test:"+port+"/start")
	if err != nil {
		t.Fatal(err)
	}
	if resp.Status != http.StatusFound || resp.Location != "http://b.test:"+port+"/landing" {
		t.Fatalf("a.test answered %d to %q, want a redirect to b.test's /landing", resp.Status, resp.Location)
	}
	if resp, err = c.GetRobots(ctx, resp.Location, 1<<20); err != nil || resp.Status != 200 {
		t.Fatalf("b.test: %v, %v; want 200", resp, err)
	}
	s.mu.Lock()
	heads := append([]http.Header(nil), s.heads...)
	s.mu.Unlock()
	if len(heads) != 2 {
		t.Fatalf("%d requests, want 2", len(heads))
	}
	tests := []struct {
		name, header, want string
		req                int
	}{
		{"the rule's host gets its User-Agent", "User-Agent", "AcmeBot/2.0", 0},
		{"the rule's host gets its Cookie", "Cookie", "session=s3cret", 0},
		{"the rule's host gets its extra header", "X-Extra", "plain", 0},
		{"a reserved header is the client's", "Accept-Encoding", "gzip", 0},
		{"another host gets the client's User-Agent", "User-Agent", "trawl-test/1", 1},
		{"another host gets no Cookie", "Cookie", "", 1},
		{"another host gets no extra header", "X-Extra", "", 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := heads[tt.req].Get(tt.header); got != tt.want {
				t.Errorf("request %d: %s = %q, want %q", tt.req, tt.header, got, tt.want)
			}
		})
	}

	// The head captured for the archive: the secret masked, the rest as sent.
	resp, err = c.Get(polite.WithHeaders(context.Background(), h), "http://a.test:"+port+"/start")
	if err != nil {
		t.Fatal(err)
	}
	head := string(resp.RequestHead)
	if strings.Contains(head, "s3cret") || !strings.Contains(head, "Cookie: xxxxx\r\n") || !strings.Contains(head, "X-Extra: plain\r\n") {
		t.Errorf("captured request head %q: want the Cookie masked and X-Extra as sent", head)
	}
}
