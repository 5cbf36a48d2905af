package politetest

import (
	"compress/gzip"
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/trawl/trawl/shared/polite"
	"github.com/trawl/trawl/shared/safedial"
)

// Caller is one process's way of making a request, built by the suite (NewCaller).
type Caller interface {
	// GetRobots makes one robots.txt request for rawURL as the process does, under ctx
	// (the rule headers polite.WithHeaders put there, the pin safedial.Pin put there),
	// reading at most limit octets of its content. It returns the status and the content,
	// decoded.
	GetRobots(ctx context.Context, rawURL string, limit int64) (status int, body []byte, err error)
}

// NewCaller builds a process's client: User-Agent ua, every connection dialled through d
// (the suite's names and address policy).
type NewCaller func(t *testing.T, ua string, d *safedial.Dialer) Caller

// RobotsBody is the robots.txt the suite's server sends (gzipped to a client asking so).
const RobotsBody = "User-agent: *\nDisallow: /private\n"

// seen is one request as the suite's server received it.
type seen struct {
	host, accept, encoding, ua, extra, cookie string
}

// RunCallers runs the suite against one process's way of making a request: every process
// runs it (the fetcher's fetch client, the renderer's answerer), so a host is asked alike
// whichever asks. The server is a real local HTTP server; its own log is what is judged.
func RunCallers(t *testing.T, newCaller NewCaller) {
	var (
		mu  sync.Mutex
		log []seen
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		log = append(log, seen{host: r.Host, accept: r.Header.Get("Accept"), encoding: r.Header.Get("Accept-Encoding"),
			ua: r.Header.Get("User-Agent"), extra: r.Header.Get("X-Extra"), cookie: r.Header.Get("Cookie")})
		mu.Unlock()
		w.Header().Set("Content-Type", "text/plain")
		if strings.Contains(r.Header.Get("Accept-Encoding"), "gzip") {
			w.Header().Set("Content-Encoding", "gzip")
			zw := gzip.NewWriter(w)
			_, _ = zw.Write([]byte(RobotsBody))
			_ = zw.Close()
			return
		}
		_, _ = w.Write([]byte(RobotsBody))
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
			"a.test": {loop},
			// Pinned requests only: a dial by name goes to an address nothing answers at.
			"moved.test": {netip.MustParseAddr("192.0.2.1")},
			// Addresses the policy refuses: a private network, the cloud metadata service.
			"private.test":  {netip.MustParseAddr("10.1.2.3")},
			"metadata.test": {netip.MustParseAddr("169.254.169.254")},
		}},
		Timeout: 2 * time.Second,
	}
	const ua = "trawl-suite/1"
	c := newCaller(t, ua, d)
	rule := &polite.Headers{Host: "a.test", Header: http.Header{"X-Extra": {"plain"}, "Cookie": {"s=1"}}, Secret: []string{"Cookie"}}
	at := func(host string) string { return "http://" + host + ":" + port + "/robots.txt" }

	tests := []struct {
		name    string
		ctx     func(context.Context) context.Context
		url     string
		refused bool   // the address policy refuses the host's address
		extra   string // the rule header the server must see
		cookie  string
	}{
		{name: "robots.txt, no rule", url: at("a.test")},
		{name: "robots.txt with its host's rule headers", url: at("a.test"), extra: "plain", cookie: "s=1",
			ctx: func(ctx context.Context) context.Context { return polite.WithHeaders(ctx, rule) }},
		{name: "a rule's headers never go to another host", url: at("moved.test"),
			ctx: func(ctx context.Context) context.Context {
				return safedial.Pin(polite.WithHeaders(ctx, rule), "moved.test", loop)
			}},
		{name: "a pin sends the dial to the checked address", url: at("moved.test"),
			ctx: func(ctx context.Context) context.Context { return safedial.Pin(ctx, "moved.test", loop) }},
		{name: "a pin holds for the host however it is spelt", url: at("MOVED.test"),
			ctx: func(ctx context.Context) context.Context { return safedial.Pin(ctx, "moved.test", loop) }},
		{name: "a private address is refused", url: at("private.test"), refused: true},
		{name: "the metadata address is refused", url: at("metadata.test"), refused: true},
		{name: "a pin to a refused address is refused", url: at("a.test"), refused: true,
			ctx: func(ctx context.Context) context.Context {
				return safedial.Pin(ctx, "a.test", netip.MustParseAddr("10.1.2.3"))
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mu.Lock()
			log = nil
			mu.Unlock()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if tt.ctx != nil {
				ctx = tt.ctx(ctx)
			}
			status, body, err := c.GetRobots(ctx, tt.url, 1<<20)
			mu.Lock()
			got := log
			mu.Unlock()
			if tt.refused {
				if !errors.Is(err, safedial.ErrBlockedAddress) {
					t.Errorf("err %v, want the address refused (safedial.ErrBlockedAddress)", err)
				}
				if len(got) != 0 {
					t.Errorf("the server saw %d requests, want none", len(got))
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if status != http.StatusOK || string(body) != RobotsBody {
				t.Errorf("status %d, body %q; want 200 and %q decoded", status, body, RobotsBody)
			}
			if len(got) != 1 {
				t.Fatalf("the server saw %d requests, want 1", len(got))
			}
			want := seen{host: strings.TrimPrefix(strings.TrimSuffix(tt.url, "/robots.txt"), "http://"),
				accept: polite.AcceptRobots, encoding: polite.AcceptEncoding, ua: ua, extra: tt.extra, cookie: tt.cookie}
			if got[0] != want {
				t.Errorf("the server saw %+v, want %+v", got[0], want)
			}
		})
	}
}
