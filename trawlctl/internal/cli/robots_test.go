package cli

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
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
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits = append(hits, r.URL.Path+" "+r.Header.Get("User-Agent"))
		mux.ServeHTTP(w, r)
	}))
	defer srv.Close()
	closed := "http://" + closedPort(t) + "/robots.txt"

	inv := invocation{env: map[string]string{"TRAWL_USER_AGENT": "TestBot/1.0"}}
	tests := []struct {
		name   string
		robots string
		urls   []string
		want   []string
		note   string // on stderr
	}{
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
