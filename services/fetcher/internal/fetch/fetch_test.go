package fetch

import (
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/trawl/trawl/shared/safedial"
)

// site is an httptest server that logs the paths it was asked for.
type site struct {
	*httptest.Server
	mu    sync.Mutex
	log   []string
	heads []http.Header
}

func newSite(t *testing.T, h http.HandlerFunc) *site {
	t.Helper()
	s := &site{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.log = append(s.log, r.URL.RequestURI())
		s.heads = append(s.heads, r.Header.Clone())
		s.mu.Unlock()
		h(w, r)
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *site) requests() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.log...)
}

// staticResolver maps names to addresses; every other name does not exist.
type staticResolver map[string]string

func (r staticResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	a, ok := r[host]
	if !ok {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	return []netip.Addr{netip.MustParseAddr(a)}, nil
}

func testConfig(allow ...string) Config {
	prefixes, err := safedial.ParseCIDRs(allow)
	if err != nil {
		panic(err)
	}
	d := &safedial.Dialer{Policy: safedial.NewPolicy(prefixes...), Timeout: time.Second}
	return Config{
		UserAgent:       "trawl-test/1",
		Timeout:         3 * time.Second,
		TLSTimeout:      time.Second,
		HeaderTimeout:   2 * time.Second,
		MaxBody:         64 << 10,
		MaxHeaderBytes:  16 << 10,
		MaxConnsPerHost: 2,
		Dial:            d.DialContext,
	}
}

func TestGet(t *testing.T) {
	s := newSite(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "Text/HTML; Charset=ISO-8859-1")
		io.WriteString(w, "<html>hello</html>")
	})
	c := New(testConfig("127.0.0.0/8"))
	before := time.Now()
	resp, err := c.Get(context.Background(), s.URL+"/page?q=1")
	if err != nil {
		t.Fatal(err)
	}
	if resp.Status != 200 || string(resp.Body) != "<html>hello</html>" || resp.Truncated {
		t.Errorf("status %d body %q truncated %v", resp.Status, resp.Body, resp.Truncated)
	}
	if resp.MediaType != "text/html" || resp.Charset != "iso-8859-1" {
		t.Errorf("media type %q charset %q", resp.MediaType, resp.Charset)
	}
	if resp.StartedAt.Before(before) || resp.Duration <= 0 || resp.WireBytes != int64(len(resp.Body)) {
		t.Errorf("started %v duration %v wire %d", resp.StartedAt, resp.Duration, resp.WireBytes)
	}
	if got := s.requests(); len(got) != 1 || got[0] != "/page?q=1" {
		t.Errorf("requests %v", got)
	}
	h := s.heads[0]
	if h.Get("User-Agent") != "trawl-test/1" || !strings.HasPrefix(h.Get("Accept"), "text/html") || h.Get("Accept-Encoding") != "gzip" {
		t.Errorf("request headers %v", h)
	}
}

func TestBodyCap(t *testing.T) {
	const limit = 64 << 10
	cases := []struct {
		name      string
		size      int
		truncated bool
	}{
		{"below", limit - 1, false},
		{"exactly", limit, false},
		{"one over", limit + 1, true},
		{"far over", 50 * limit, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := newSite(t, func(w http.ResponseWriter, r *http.Request) {
				w.Write(bytes.Repeat([]byte("a"), c.size))
			})
			resp, err := New(testConfig("127.0.0.0/8")).Get(context.Background(), s.URL)
			if err != nil {
				t.Fatal(err)
			}
			if want := min(c.size, limit); len(resp.Body) != want || resp.Truncated != c.truncated {
				t.Errorf("body %d bytes truncated %v, want %d bytes truncated %v", len(resp.Body), resp.Truncated, want, c.truncated)
			}
			if resp.WireBytes > limit+limit/16+64<<10 {
				t.Errorf("read %d bytes off the wire", resp.WireBytes)
			}
		})
	}
}

func gzipped(t *testing.T, data []byte) []byte {
	t.Helper()
	var b bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&b, gzip.BestCompression)
	zw.Write(data)
	zw.Close()
	return b.Bytes()
}

func TestGzip(t *testing.T) {
	page := []byte(strings.Repeat("<p>compressible</p>", 200))
	small := gzipped(t, page)
	bomb := gzipped(t, make([]byte, 64<<20)) // 64 MiB of zeros in ~64 KiB
	var deflated bytes.Buffer
	zw := zlib.NewWriter(&deflated)
	zw.Write(page)
	zw.Close()
	cases := []struct {
		name      string
		body      []byte
		want      []byte
		truncated bool
		coding    string
	}{
		{"decoded", small, page, false, "gzip"},
		{"bomb stopped at the decoded cap", bomb, make([]byte, 64<<10), true, "gzip"},
		{"empty", nil, nil, false, "gzip"},
		// Not asked for, sent all the same: decoded by the same decoder.
		{"deflate", deflated.Bytes(), page, false, "deflate"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := newSite(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Encoding", c.coding)
				w.Header().Set("Content-Type", "text/html")
				w.Write(c.body)
			})
			resp, err := New(testConfig("127.0.0.0/8")).Get(context.Background(), s.URL)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(resp.Body, c.want) || resp.Truncated != c.truncated {
				t.Errorf("body %d bytes truncated %v, want %d bytes truncated %v", len(resp.Body), resp.Truncated, len(c.want), c.truncated)
			}
			if resp.WireBytes > int64(len(c.body)) {
				t.Errorf("read %d wire bytes of %d", resp.WireBytes, len(c.body))
			}
			if resp.Header.Get("Content-Encoding") != "" {
				t.Errorf("Content-Encoding kept on a decoded body")
			}
		})
	}
	// A coding that cannot be decoded on a second field line leaves the whole body as
	// received, its header naming every coding, instead of gzip decoded and the br under
	// it passed on as content.
	t.Run("undecodable coding on a second line", func(t *testing.T) {
		s := newSite(t, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Add("Content-Encoding", "gzip")
			w.Header().Add("Content-Encoding", "br")
			w.Header().Set("Content-Type", "text/html")
			w.Write(small)
		})
		resp, err := New(testConfig("127.0.0.0/8")).Get(context.Background(), s.URL)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(resp.Body, small) {
			t.Errorf("body of %d octets, want the %d received", len(resp.Body), len(small))
		}
		if got := resp.Header.Values("Content-Encoding"); strings.Join(got, ",") != "gzip,br" {
			t.Errorf("Content-Encoding %q, want both lines kept", got)
		}
	})
	t.Run("corrupt stream is an error", func(t *testing.T) {
		s := newSite(t, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Encoding", "gzip")
			w.Write(small[:len(small)/2])
		})
		if _, err := New(testConfig("127.0.0.0/8")).Get(context.Background(), s.URL); err == nil {
			t.Error("half a gzip stream read without error")
		}
	})
}

// TestTimeouts: a server that trickles its body is cut at the total timeout, and one that
// never sends headers at the header timeout.
func TestTimeouts(t *testing.T) {
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	trickle := newSite(t, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(200)
		for {
			if _, err := w.Write([]byte("x")); err != nil {
				return
			}
			w.(http.Flusher).Flush()
			select {
			case <-r.Context().Done():
				return
			case <-release:
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	})
	silent := newSite(t, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	})
	cfg := testConfig("127.0.0.0/8")
	cfg.Timeout = 600 * time.Millisecond
	cfg.HeaderTimeout = 300 * time.Millisecond
	c := New(cfg)
	cases := []struct {
		name     string
		url      string
		min, max time.Duration
	}{
		{"trickling body cut at the total timeout", trickle.URL, 500 * time.Millisecond, 3 * time.Second},
		{"no headers cut at the header timeout", silent.URL, 250 * time.Millisecond, 550 * time.Millisecond},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			_, err := c.Get(context.Background(), tc.url)
			took := time.Since(start)
			if err == nil || !IsTimeout(err) {
				t.Fatalf("err = %v, want a timeout", err)
			}
			if IsPermanent(err) {
				t.Errorf("timeout classed permanent")
			}
			if took < tc.min || took > tc.max {
				t.Errorf("gave up after %v, want between %v and %v", took, tc.min, tc.max)
			}
		})
	}
}

func TestHeaderCap(t *testing.T) {
	cases := []struct {
		name    string
		size    int
		wantErr bool
	}{
		{"under the cap", 8 << 10, false},
		{"over the cap", 32 << 10, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := newSite(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("X-Big", strings.Repeat("h", c.size))
				io.WriteString(w, "ok")
			})
			_, err := New(testConfig("127.0.0.0/8")).Get(context.Background(), s.URL)
			if (err != nil) != c.wantErr {
				t.Errorf("err = %v, wantErr %v", err, c.wantErr)
			}
		})
	}
}

func TestRedirectNotFollowed(t *testing.T) {
	cases := []struct {
		name     string
		status   int
		location string
		want     string // resolved against /dir/page; "" = none
	}{
		{"relative", 301, "../other?x=1#frag", "/other?x=1"},
		{"absolute other host", 302, "HTTP://Example.COM:80/a/./b", "http://example.com/a/b"},
		{"temporary", 307, "/tmp", "/tmp"},
		{"permanent", 308, "/perm", "/perm"},
		{"see other", 303, "/seeother", "/seeother"},
		{"unsupported scheme", 301, "mailto:x@y.z", ""},
		{"no location", 301, "", ""},
		{"not a redirect status", 200, "/ignored", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := newSite(t, func(w http.ResponseWriter, r *http.Request) {
				if c.location != "" {
					w.Header().Set("Location", c.location)
				}
				w.WriteHeader(c.status)
			})
			resp, err := New(testConfig("127.0.0.0/8")).Get(context.Background(), s.URL+"/dir/page")
			if err != nil {
				t.Fatal(err)
			}
			want := c.want
			if strings.HasPrefix(want, "/") {
				want = s.URL + want
			}
			if resp.Status != c.status || resp.Location != want {
				t.Errorf("status %d location %q, want %d %q", resp.Status, resp.Location, c.status, want)
			}
			if got := s.requests(); len(got) != 1 {
				t.Errorf("server saw %v, want only the first request", got)
			}
		})
	}
}

// TestGetRobots: one call is one request: a redirect comes back as it is, for the
// fetcher to follow hop by hop under each host's politeness, and the address policy holds.
func TestGetRobots(t *testing.T) {
	var served atomic.Int32
	site := newSite(t, func(w http.ResponseWriter, r *http.Request) {
		served.Add(1)
		switch r.URL.Path {
		case "/robots.txt":
			http.Redirect(w, r, "/step1", http.StatusMovedPermanently)
		case "/step1":
			io.WriteString(w, "user-agent: *\ndisallow: /x\n")
		}
	})
	c := New(testConfig("127.0.0.0/8"))
	ctx := context.Background()

	t.Run("a redirect is not followed", func(t *testing.T) {
		served.Store(0)
		resp, err := c.GetRobots(ctx, site.URL+"/robots.txt", 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		if resp.Status != 301 || resp.Location != site.URL+"/step1" || served.Load() != 1 {
			t.Errorf("status %d location %q after %d requests; want 301 to /step1 after 1", resp.Status, resp.Location, served.Load())
		}
	})
	t.Run("the body", func(t *testing.T) {
		resp, err := c.GetRobots(ctx, site.URL+"/step1", 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		if resp.Status != 200 || !strings.Contains(string(resp.Body), "disallow: /x") {
			t.Errorf("status %d body %q", resp.Status, resp.Body)
		}
	})
	t.Run("the address policy", func(t *testing.T) {
		// Only 127.0.0.1 is allowed; internal.test resolves to 127.0.0.2.
		cfg := testConfig()
		allow, _ := safedial.ParseCIDRs([]string{"127.0.0.1"})
		d := &safedial.Dialer{Policy: safedial.NewPolicy(allow...), Resolver: staticResolver{"internal.test": "127.0.0.2"}, Timeout: time.Second}
		cfg.Dial = d.DialContext
		_, err := New(cfg).GetRobots(ctx, "http://internal.test:"+site.URL[strings.LastIndex(site.URL, ":")+1:]+"/robots.txt", 1<<20)
		if !IsBlocked(err) {
			t.Errorf("err = %v, want blocked", err)
		}
	})
}

// TestSafeByDefault: with no allowed ranges, a loopback server is never reached.
func TestSafeByDefault(t *testing.T) {
	s := newSite(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "secret") })
	c := New(testConfig())
	for _, u := range []string{s.URL, strings.Replace(s.URL, "127.0.0.1", "[::ffff:127.0.0.1]", 1)} {
		_, err := c.Get(context.Background(), u)
		if !IsBlocked(err) || !IsPermanent(err) {
			t.Errorf("Get(%s) err = %v, want blocked and permanent", u, err)
		}
		if _, err := c.GetRobots(context.Background(), u+"/robots.txt", 1<<20); !IsBlocked(err) {
			t.Errorf("GetRobots(%s) err = %v, want blocked", u, err)
		}
	}
	if got := s.requests(); len(got) != 0 {
		t.Errorf("server saw %v", got)
	}
}

func TestPermanentErrors(t *testing.T) {
	cfg := testConfig()
	d := &safedial.Dialer{Policy: safedial.NewPolicy(), Resolver: staticResolver{}, Timeout: time.Second}
	cfg.Dial = d.DialContext
	c := New(cfg)
	cases := []struct {
		url     string
		invalid bool
	}{
		{"ftp://example.com/x", true},
		{"http://", true},
		{"::not a url", true},
		{"javascript:alert(1)", true},
		{"http://no-such-host.test/", false},
	}
	for _, tc := range cases {
		t.Run(tc.url, func(t *testing.T) {
			_, err := c.Get(context.Background(), tc.url)
			if err == nil || !IsPermanent(err) || errors.Is(err, ErrInvalidURL) != tc.invalid {
				t.Errorf("err = %v, want permanent (invalid URL %v)", err, tc.invalid)
			}
		})
	}
}

func TestHTTP2(t *testing.T) {
	s := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, r.Proto)
	}))
	s.EnableHTTP2 = true
	s.StartTLS()
	t.Cleanup(s.Close)
	cfg := testConfig("127.0.0.0/8")
	cfg.TLSConfig = s.Client().Transport.(*http.Transport).TLSClientConfig.Clone()
	resp, err := New(cfg).Get(context.Background(), s.URL)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Proto != "HTTP/2.0" || string(resp.Body) != "HTTP/2.0" {
		t.Errorf("proto %q body %q, want HTTP/2.0", resp.Proto, resp.Body)
	}
}

func TestRetryAfter(t *testing.T) {
	now := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
	cases := []struct {
		name string
		v    string
		want time.Duration
		ok   bool
	}{
		{"seconds", "120", 120 * time.Second, true},
		{"zero", "0", 0, true},
		{"padded", " 5 ", 5 * time.Second, true},
		{"negative", "-5", 0, false},
		{"http date", "Wed, 01 Jan 2025 12:01:30 GMT", 90 * time.Second, true},
		{"date in the past", "Wed, 01 Jan 2025 11:00:00 GMT", 0, true},
		{"rfc 850 date", "Wednesday, 01-Jan-25 12:00:10 GMT", 10 * time.Second, true},
		{"garbage", "soon", 0, false},
		{"absent", "", 0, false},
		{"huge capped", "99999999999", 365 * 24 * time.Hour, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := http.Header{}
			if c.v != "" {
				h.Set("Retry-After", c.v)
			}
			got, ok := RetryAfter(h, now)
			if got != c.want || ok != c.ok {
				t.Errorf("RetryAfter(%q) = %v, %v; want %v, %v", c.v, got, ok, c.want, c.ok)
			}
		})
	}
}

func TestContentType(t *testing.T) {
	cases := []struct{ in, mt, cs string }{
		{"text/html", "text/html", ""},
		{"text/html; charset=UTF-8", "text/html", "utf-8"},
		{"Application/XHTML+XML;charset=\"windows-1252\"", "application/xhtml+xml", "windows-1252"},
		{"text/html; charset", "text/html", ""},
		{"", "", ""},
	}
	for _, c := range cases {
		t.Run(c.in, func(t *testing.T) {
			if mt, cs := contentType(c.in); mt != c.mt || cs != c.cs {
				t.Errorf("contentType(%q) = %q, %q; want %q, %q", c.in, mt, cs, c.mt, c.cs)
			}
		})
	}
}

// TestRequestHeads: each way of asking sends its own Accept, the validators it is given
// and nothing else of its own, to the request-target and Host of the URL as given; and
// requests in turn on one client do not leak headers into each other.
func TestRequestHeads(t *testing.T) {
	type sent struct {
		uri, host string
		h         http.Header
	}
	var mu sync.Mutex
	var got []sent
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, sent{r.RequestURI, r.Host, r.Header.Clone()})
		mu.Unlock()
	}))
	t.Cleanup(srv.Close)
	host := strings.TrimPrefix(srv.URL, "http://")
	c := New(testConfig("127.0.0.0/8"))
	ctx := context.Background()
	cases := []struct {
		name    string
		do      func(url string) error
		path    string
		accept  string
		inm, lm string
	}{
		{"get", func(u string) error { _, err := c.Get(ctx, u); return err }, "/a", AcceptPage, "", ""},
		{"conditional", func(u string) error {
			_, err := c.GetIf(ctx, u, Validators{ETag: `W/"x y"`, LastModified: "Tue, 24 Nov 2026 04:00:00 GMT"})
			return err
		}, "/p%2Fq/%7Ex?a=b%20c&d=%C3%A9", AcceptPage, `W/"x y"`, "Tue, 24 Nov 2026 04:00:00 GMT"},
		{"etag only", func(u string) error { _, err := c.GetIf(ctx, u, Validators{ETag: `"e"`}); return err }, "/e", AcceptPage, `"e"`, ""},
		{"unconditional after conditional", func(u string) error { _, err := c.GetIf(ctx, u, Validators{}); return err }, "/b", AcceptPage, "", ""},
		{"robots", func(u string) error { _, err := c.GetRobots(ctx, u, 1<<10); return err }, "/robots.txt", AcceptRobots, "", ""},
		{"page after robots", func(u string) error { _, err := c.Get(ctx, u); return err }, "/c", AcceptPage, "", ""},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.do(srv.URL + tc.path); err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			s := got[i]
			mu.Unlock()
			if s.uri != tc.path || s.host != host {
				t.Errorf("request-target %q host %q, want %q %q", s.uri, s.host, tc.path, host)
			}
			want := http.Header{"User-Agent": {"trawl-test/1"}, "Accept": {tc.accept}, "Accept-Encoding": {"gzip"}}
			if tc.inm != "" {
				want["If-None-Match"] = []string{tc.inm}
			}
			if tc.lm != "" {
				want["If-Modified-Since"] = []string{tc.lm}
			}
			if !reflect.DeepEqual(s.h, want) {
				t.Errorf("headers %v, want %v", s.h, want)
			}
		})
	}
}

// TestRoundTripAsClient: the client's requests skip http.Client, so for every kind of
// answer they must come out as http.Client.Do gives them: the same status, or the same
// error (a malformed redirect target, a refused connection, TLS spoken to plain HTTP), and
// a URL's user information still sent as Basic authorization.
func TestRoundTripAsClient(t *testing.T) {
	var mu sync.Mutex
	var auth []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		auth = append(auth, r.Header.Get("Authorization"))
		mu.Unlock()
		switch r.URL.Path {
		case "/moved":
			w.Header().Set("Location", "/there")
			w.WriteHeader(http.StatusFound)
		case "/bad-location":
			w.Header().Set("Location", "http://[::1")
			w.WriteHeader(http.StatusMovedPermanently)
		case "/no-location":
			w.WriteHeader(http.StatusTemporaryRedirect)
		default:
			io.WriteString(w, "ok")
		}
	}))
	t.Cleanup(srv.Close)
	closed := httptest.NewServer(http.NotFoundHandler())
	closedURL := closed.URL
	closed.Close()
	c := New(testConfig("127.0.0.0/8"))
	cases := []struct{ name, url string }{
		{"ok", srv.URL + "/"},
		{"redirect", srv.URL + "/moved"},
		{"malformed location", srv.URL + "/bad-location"},
		{"redirect without location", srv.URL + "/no-location"},
		{"refused", closedURL + "/"},
		{"tls to plain http", strings.Replace(srv.URL, "http://", "https://", 1) + "/"},
		{"user info", strings.Replace(srv.URL, "http://", "http://u:p@", 1) + "/"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			outcome := func(do func(*http.Request) (*http.Response, error)) string {
				req, err := http.NewRequest(http.MethodGet, tc.url, nil)
				if err != nil {
					t.Fatal(err)
				}
				resp, err := do(req)
				if err != nil {
					return "error: " + err.Error()
				}
				resp.Body.Close()
				return fmt.Sprintf("status %d location %q", resp.StatusCode, resp.Header.Get("Location"))
			}
			got, want := outcome(c.roundTrip), outcome(c.hc.Do)
			if got != want {
				t.Errorf("roundTrip: %s\nhttp.Client: %s", got, want)
			}
		})
	}
	mu.Lock()
	defer mu.Unlock()
	basic := "Basic " + base64.StdEncoding.EncodeToString([]byte("u:p"))
	if n := len(auth); n < 2 || auth[n-1] != basic || auth[n-2] != basic {
		t.Errorf("authorization sent %q, want the last two %q", auth, basic)
	}
}

// TestMediaTypesRemembered: a remembered Content-Type gives what parsing it gives, on its
// first and later sightings; the memory stops growing at its bound and skips long values,
// which are still parsed right.
func TestMediaTypesRemembered(t *testing.T) {
	long := "text/html; charset=utf-8; x=" + strings.Repeat("y", maxMediaTypeLen)
	values := []string{"text/html", "Text/HTML; Charset=ISO-8859-1", "text/html; charset=utf-8", `text/plain; charset="us-ascii"`,
		"text/html; charset", "no/type/here;", "", long}
	var mt mediaTypes
	for round := range 2 {
		for _, v := range values {
			wantMT, wantCS := contentType(v)
			if gotMT, gotCS := mt.parse(v); gotMT != wantMT || gotCS != wantCS {
				t.Errorf("round %d: parse(%q) = %q, %q; want %q, %q", round, v, gotMT, gotCS, wantMT, wantCS)
			}
		}
	}
	if _, ok := mt.m.Load(long); ok {
		t.Error("a value longer than maxMediaTypeLen was remembered")
	}
	for i := range 2 * maxMediaTypes {
		mt.parse(fmt.Sprintf("text/x-%d", i))
	}
	n := 0
	mt.m.Range(func(any, any) bool { n++; return true })
	if n > maxMediaTypes || int(mt.n.Load()) != n {
		t.Errorf("remembered %d values (counted %d), want at most %d", n, mt.n.Load(), maxMediaTypes)
	}
	if got, _ := mt.parse("text/x-1999"); got != "text/x-1999" {
		t.Errorf("past the bound, parse gives %q", got)
	}
}

// TestMaxConnsPerHost: however many requests to one host run at once, the transport opens
// at most MaxConnsPerHost connections to it; the others wait for a free one.
func TestMaxConnsPerHost(t *testing.T) {
	for _, limit := range []int{1, 2} {
		t.Run(fmt.Sprintf("limit %d", limit), func(t *testing.T) {
			var inflight, peak, conns atomic.Int32
			release := make(chan struct{})
			s := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				n := inflight.Add(1)
				for {
					p := peak.Load()
					if n <= p || peak.CompareAndSwap(p, n) {
						break
					}
				}
				<-release
				inflight.Add(-1)
				io.WriteString(w, "ok")
			}))
			s.Config.ConnState = func(_ net.Conn, st http.ConnState) {
				if st == http.StateNew {
					conns.Add(1)
				}
			}
			s.Start()
			t.Cleanup(s.Close)

			cfg := testConfig("127.0.0.0/8")
			cfg.MaxConnsPerHost = limit
			c := New(cfg)
			const n = 6
			errs := make(chan error, n)
			for i := range n {
				go func() {
					_, err := c.Get(context.Background(), s.URL+"/"+strings.Repeat("p", i+1))
					errs <- err
				}()
			}
			deadline := time.Now().Add(2 * time.Second)
			for inflight.Load() < int32(limit) {
				if time.Now().After(deadline) {
					t.Fatalf("only %d requests arrived, want %d", inflight.Load(), limit)
				}
				time.Sleep(time.Millisecond)
			}
			// Give the other requests a chance to break the limit before releasing.
			time.Sleep(100 * time.Millisecond)
			close(release)
			for range n {
				if err := <-errs; err != nil {
					t.Error(err)
				}
			}
			if peak.Load() != int32(limit) || conns.Load() > int32(limit) {
				t.Errorf("peak %d requests on %d connections, want at most %d", peak.Load(), conns.Load(), limit)
			}
		})
	}
}
