package cli

import (
	"cmp"
	"compress/gzip"
	"fmt"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/trawl/trawl/shared/polite"
)

func TestRobotsCheckFileAndStatus(t *testing.T) {
	inv := invocation{env: map[string]string{}}
	tests := []struct {
		name string
		args []string // after "robots check"
		want []string // stdout lines
	}{
		{
			name: "RFC 5.1, foobot: disallow all but two pages",
			args: []string{"-agent", "foobot", "-file", "testdata/rfc9309_5_1.txt", "http://x.test/example/page.html", "http://x.test/example/allowed.gif", "http://x.test/other"},
			want: []string{"allowed http://x.test/example/page.html", "allowed http://x.test/example/allowed.gif", "disallowed http://x.test/other"},
		},
		{
			name: "RFC 5.1, bazbot shares barbot's group",
			args: []string{"-agent", "BazBot", "-file", "testdata/rfc9309_5_1.txt", "http://x.test/example/page.html", "http://x.test/example/other.html"},
			want: []string{"disallowed http://x.test/example/page.html", "allowed http://x.test/example/other.html"},
		},
		{
			name: "RFC 5.1, quxbot's empty group allows everything",
			args: []string{"-agent", "quxbot", "-file", "testdata/rfc9309_5_1.txt", "http://x.test/example/a.gif"},
			want: []string{"allowed http://x.test/example/a.gif"},
		},
		{
			name: "RFC 5.1, other agents use *",
			args: []string{"-file", "testdata/rfc9309_5_1.txt", "http://x.test/a.gif", "http://x.test/a.gif?x", "http://x.test/example/", "http://x.test/publications/1", "http://x.test/"},
			want: []string{"disallowed http://x.test/a.gif", "allowed http://x.test/a.gif?x", "disallowed http://x.test/example/", "allowed http://x.test/publications/1", "allowed http://x.test/"},
		},
		{
			name: "RFC 5.2, the longest match wins",
			args: []string{"-agent", "foobot", "-file", "testdata/rfc9309_5_2.txt", "http://x.test/example/page/", "http://x.test/example/page/disallowed.gif"},
			want: []string{"allowed http://x.test/example/page/", "disallowed http://x.test/example/page/disallowed.gif"},
		},
		{
			name: "allow wins a tie; percent-encoding is normalised",
			args: []string{"-file", "testdata/allow_tie.txt", "http://x.test/page", "http://x.test/page2", "http://x.test/~joe/x", "http://x.test/robots.txt"},
			want: []string{"allowed http://x.test/page", "allowed http://x.test/page2", "disallowed http://x.test/~joe/x", "allowed http://x.test/robots.txt"},
		},
		{
			name: "4xx allows everything",
			args: []string{"-status", "404", "http://x.test/anything"},
			want: []string{"allowed http://x.test/anything"},
		},
		{
			name: "401 is 4xx too, the body is ignored",
			args: []string{"-status", "401", "-file", "testdata/rfc9309_5_2.txt", "-agent", "foobot", "http://x.test/example/page/disallowed.gif"},
			want: []string{"allowed http://x.test/example/page/disallowed.gif"},
		},
		{
			name: "5xx disallows everything",
			args: []string{"-status", "503", "http://x.test/", "http://x.test/robots.txt"},
			want: []string{"disallowed http://x.test/", "allowed http://x.test/robots.txt"},
		},
		{
			name: "429 disallows everything",
			args: []string{"-status", "429", "http://x.test/"},
			want: []string{"disallowed http://x.test/"},
		},
		{
			name: "2xx with the file",
			args: []string{"-status", "200", "-file", "testdata/rfc9309_5_2.txt", "-agent", "foobot", "http://x.test/example/page/disallowed.gif"},
			want: []string{"disallowed http://x.test/example/page/disallowed.gif"},
		},
		{
			name: "verbose names the rule",
			args: []string{"-v", "-agent", "foobot", "-file", "testdata/rfc9309_5_2.txt", "http://x.test/example/page/disallowed.gif"},
			want: []string{"disallowed http://x.test/example/page/disallowed.gif\trule: disallow /example/page/disallowed.gif"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := inv.run(t, append([]string{"robots", "check"}, tt.args...)...)
			if r.code != 0 {
				t.Fatalf("exit %d: %s", r.code, r.stderr)
			}
			if got := lines(r.stdout); strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
				t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
		})
	}

	t.Run("stdin and an invalid URL", func(t *testing.T) {
		inv := invocation{stdin: "User-agent: *\nDisallow: /\n"}
		r := inv.run(t, "robots", "check", "-file", "-", "http://x.test/a", "gopher://x.test/")
		if lines(r.stdout)[0] != "disallowed http://x.test/a" {
			t.Errorf("stdout %q", r.stdout)
		}
		expectOneLine(t, r, ExitFailure, `invalid URL "gopher://x.test/"`)
	})
}

func TestRobotsCheckURL(t *testing.T) {
	var hits []string
	mux := http.NewServeMux()
	mux.HandleFunc("/robots.txt", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "User-agent: trawl\nDisallow: /private\n\nUser-agent: *\nDisallow: /\n")
	})
	mux.HandleFunc("/hop/", func(w http.ResponseWriter, r *http.Request) {
		// /hop/N redirects to /hop/N-1, and /hop/0 to the robots.txt.
		var n int
		fmt.Sscanf(strings.TrimPrefix(r.URL.Path, "/hop/"), "%d", &n)
		if n == 0 {
			http.Redirect(w, r, "/robots.txt", http.StatusMovedPermanently)
			return
		}
		http.Redirect(w, r, fmt.Sprintf("/hop/%d", n-1), http.StatusFound)
	})
	mux.HandleFunc("/down", func(w http.ResponseWriter, r *http.Request) { http.Error(w, "down", http.StatusServiceUnavailable) })
	mux.HandleFunc("/gone", func(w http.ResponseWriter, r *http.Request) { http.NotFound(w, r) })
	mux.HandleFunc("/gz", func(w http.ResponseWriter, r *http.Request) {
		// Only a request made as the fetchers make it gets the file; any other a 503.
		if r.Header.Get("Accept") != polite.AcceptRobots || r.Header.Get("Accept-Encoding") != polite.AcceptEncoding {
			http.Error(w, "asked otherwise than the fetchers ask", http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Encoding", "gzip")
		zw := gzip.NewWriter(w)
		fmt.Fprint(zw, "User-agent: *\nDisallow: /zipped\n")
		zw.Close()
	})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits = append(hits, r.URL.Path+" "+r.Header.Get("User-Agent"))
		mux.ServeHTTP(w, r)
	}))
	defer srv.Close()
	closed := "http://" + closedPort(t) + "/robots.txt"

	inv := invocation{env: map[string]string{"TRAWL_USER_AGENT": "TestBot/1.0", "TRAWL_ALLOW_CIDRS": "127.0.0.1"}}
	tests := []struct {
		name   string
		robots string
		urls   []string
		want   []string
		note   string // on stderr
	}{
		{"asked as the fetchers ask, gzip decoded", srv.URL + "/gz", []string{"http://x.test/zipped", "http://x.test/open"},
			[]string{"disallowed http://x.test/zipped", "allowed http://x.test/open"}, "parsed (status 200)"},
		{"parsed", srv.URL + "/robots.txt", []string{"http://x.test/private/a", "http://x.test/public"},
			[]string{"disallowed http://x.test/private/a", "allowed http://x.test/public"}, "parsed (status 200)"},
		{"five redirects are followed", srv.URL + "/hop/4", []string{"http://x.test/private", "http://x.test/p"},
			[]string{"disallowed http://x.test/private", "allowed http://x.test/p"}, "parsed (status 200)"},
		{"a sixth is not: unavailable, allow all", srv.URL + "/hop/5", []string{"http://x.test/private"},
			[]string{"allowed http://x.test/private"}, "unavailable (status 301)"},
		{"4xx allows all", srv.URL + "/gone", []string{"http://x.test/private"},
			[]string{"allowed http://x.test/private"}, "unavailable (status 404)"},
		{"5xx disallows all", srv.URL + "/down", []string{"http://x.test/public"},
			[]string{"disallowed http://x.test/public"}, "unreachable (status 503)"},
		{"no answer disallows all", closed, []string{"http://x.test/public"},
			[]string{"disallowed http://x.test/public"}, "unreachable: "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			hits = nil
			r := inv.run(t, append([]string{"robots", "check", tt.robots}, tt.urls...)...)
			if r.code != 0 {
				t.Fatalf("exit %d: %s", r.code, r.stderr)
			}
			if got := lines(r.stdout); strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
				t.Errorf("got %q, want %q", got, tt.want)
			}
			if !strings.Contains(r.stderr, tt.note) {
				t.Errorf("stderr %q lacks %q", r.stderr, tt.note)
			}
			for _, h := range hits {
				if !strings.HasSuffix(h, " TestBot/1.0") {
					t.Errorf("request %q without TRAWL_USER_AGENT", h)
				}
			}
		})
	}
	t.Run("not a URL", func(t *testing.T) {
		expectOneLine(t, inv.run(t, "robots", "check", "ftp://x.test/robots.txt", "http://x.test/"), ExitFailure, "want an absolute http(s) URL")
	})
}

// listen serves h on addr ("127.0.0.2:0": another loopback address than the test's other
// servers, so that the address policy can tell them apart).
func listen(t *testing.T, addr string, h http.Handler) *httptest.Server {
	t.Helper()
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("cannot listen on %s (the test needs the loopback range 127.0.0.0/8, as Linux gives it): %v", addr, err)
	}
	srv := httptest.NewUnstartedServer(h)
	srv.Listener.Close()
	srv.Listener = l
	srv.Start()
	t.Cleanup(srv.Close)
	return srv
}

// TestRobotsCheckAddressPolicy: robots check dials as the fetchers dial, so a robots.txt
// that redirects to a loopback or link-local address (a cache, the cloud's metadata
// service) gets no request there unless TRAWL_ALLOW_CIDRS lets the range through.
func TestRobotsCheckAddressPolicy(t *testing.T) {
	var mu sync.Mutex
	hits := map[string]int{}
	count := func(name string, h http.HandlerFunc) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			hits[name]++
			mu.Unlock()
			h(w, r)
		}
	}
	inner := listen(t, "127.0.0.2:0", count("inner", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "User-agent: *\nDisallow: /private\n")
	}))
	origin := listen(t, "127.0.0.1:0", count("origin", func(w http.ResponseWriter, r *http.Request) {
		to := inner.URL + "/robots.txt"
		if r.URL.Path == "/metadata" {
			to = "http://169.254.169.254/latest/meta-data/"
		}
		http.Redirect(w, r, to, http.StatusFound)
	}))
	tests := []struct {
		name   string
		allow  string
		robots string
		code   int
		want   []string // stdout
		note   string   // on stderr
		hits   map[string]int
	}{
		{"a redirect to a refused address: unreachable, disallow all", "127.0.0.1", origin.URL + "/robots.txt", ExitOK,
			[]string{"disallowed http://x.test/public"}, "blocked address", map[string]int{"origin": 1}},
		{"a redirect to the metadata address: unreachable, disallow all", "127.0.0.1", origin.URL + "/metadata", ExitOK,
			[]string{"disallowed http://x.test/public"}, "link-local", map[string]int{"origin": 1}},
		{"the same redirect allowed", "127.0.0.1,127.0.0.2", origin.URL + "/robots.txt", ExitOK,
			[]string{"allowed http://x.test/public"}, "parsed (status 200)", map[string]int{"origin": 1, "inner": 1}},
		// The fetcher requests nothing of an origin it may not reach and ends its URLs
		// blocked: there is no robots.txt to decide by.
		{"a refused origin", "", origin.URL + "/robots.txt", ExitFailure, nil, "blocked address", map[string]int{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mu.Lock()
			clear(hits)
			mu.Unlock()
			inv := invocation{env: map[string]string{"TRAWL_ALLOW_CIDRS": tt.allow}}
			// A dial to the metadata address would wait out the timeout: the test fails fast.
			r := inv.run(t, "robots", "check", "-timeout", "5s", tt.robots, "http://x.test/public")
			if r.code != tt.code {
				t.Fatalf("exit %d, want %d: %s", r.code, tt.code, r.stderr)
			}
			if got := lines(r.stdout); strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
				t.Errorf("got %q, want %q", got, tt.want)
			}
			if !strings.Contains(r.stderr, tt.note) {
				t.Errorf("stderr %q lacks %q", r.stderr, tt.note)
			}
			mu.Lock()
			defer mu.Unlock()
			if !maps.Equal(hits, tt.hits) {
				t.Errorf("requests %v, want %v", hits, tt.hits)
			}
		})
	}
}

// TestRobotsCheckMaxBytes: the file is parsed as far as TRAWL_ROBOTS_MAX_BYTES reaches, as
// the fetchers parse it, whether fetched or read from a file.
func TestRobotsCheckMaxBytes(t *testing.T) {
	// A rule past RFC 9309's 500 KiB, the default.
	body := "User-agent: *\n# " + strings.Repeat("x", 600<<10) + "\nDisallow: /late\n"
	srv := listen(t, "127.0.0.1:0", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, body) }))
	file := filepath.Join(t.TempDir(), "robots.txt")
	if err := os.WriteFile(file, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, src := range []struct{ name, arg string }{{"fetched", srv.URL + "/robots.txt"}, {"file", "-file=" + file}} {
		for _, tt := range []struct {
			max  string
			want string
		}{{"", "allowed http://x.test/late"}, {"1MiB", "disallowed http://x.test/late"}} {
			t.Run(src.name+" "+cmp.Or(tt.max, "default"), func(t *testing.T) {
				env := map[string]string{"TRAWL_ALLOW_CIDRS": "127.0.0.1"}
				if tt.max != "" {
					env["TRAWL_ROBOTS_MAX_BYTES"] = tt.max
				}
				r := invocation{env: env}.run(t, "robots", "check", src.arg, "http://x.test/late")
				if r.code != 0 {
					t.Fatalf("exit %d: %s", r.code, r.stderr)
				}
				if got := strings.Join(lines(r.stdout), "\n"); got != tt.want {
					t.Errorf("got %q, want %q", got, tt.want)
				}
			})
		}
	}
}
