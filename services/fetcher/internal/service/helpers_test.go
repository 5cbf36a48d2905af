package service

import (
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/trawl/trawl/services/fetcher/internal/fetch"
)

func TestStatusClass(t *testing.T) {
	cases := map[int]string{100: "1xx", 200: "2xx", 204: "2xx", 301: "3xx", 404: "4xx", 429: "4xx", 503: "5xx", 599: "5xx", 99: "other", 600: "other", 0: "other"}
	for code, want := range cases {
		if got := statusClass(code); got != want {
			t.Errorf("statusClass(%d) = %q, want %q", code, got, want)
		}
	}
}

// TestRetryAfterOnlyWhereItMeansBackOff: Retry-After is passed to the scheduler for 429 and
// 503 only; on a 3xx it means something else and on a 200 nothing.
func TestRetryAfterOnlyWhereItMeansBackOff(t *testing.T) {
	now := time.Now()
	h := http.Header{"Retry-After": []string{"90"}}
	cases := []struct {
		status int
		want   float64
	}{{429, 90}, {503, 90}, {500, 0}, {301, 0}, {200, 0}}
	for _, c := range cases {
		if got := retryAfter(&fetch.Response{Status: c.status, Header: h}, now); got != c.want {
			t.Errorf("status %d: retryAfter = %v, want %v", c.status, got, c.want)
		}
	}
}

// TestOriginOf: a task's origin is scheme://host[:port] of its parsed URL whether the URL
// string is written in that form (and sliced) or not (and built).
func TestOriginOf(t *testing.T) {
	cases := []struct{ raw, want string }{
		{"http://a.example/p?q=1", "http://a.example"},
		{"https://a.example:8443/", "https://a.example:8443"},
		{"http://a.example", "http://a.example"},
		{"http://a.example?q", "http://a.example"},
		{"http://a.example#f", "http://a.example"},
		{"http://[::1]:8080/x", "http://[::1]:8080"},
		{"HTTP://a.example/", "http://a.example"},
		{"http://u:p@a.example/", "http://a.example"},
		{"http://%C3%A9.example/", "http://é.example"},
	}
	for _, c := range cases {
		t.Run(c.raw, func(t *testing.T) {
			u, err := url.Parse(c.raw)
			if err != nil {
				t.Fatal(err)
			}
			if got := originOf(c.raw, u); got != c.want || got != u.Scheme+"://"+u.Host {
				t.Errorf("originOf(%q) = %q, want %q", c.raw, got, c.want)
			}
		})
	}
}
