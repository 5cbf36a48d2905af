package service

import (
	"net/http"
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
