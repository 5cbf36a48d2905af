package synthweb

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

// The log keeps each request's headers, so that what a crawler sent a host (a rule's
// User-Agent, headers, cookie, credentials) is judged from the server's side.
func TestLogKeepsRequestHeaders(t *testing.T) {
	cfg := smallConfig()
	cfg.Special = false
	w := startWeb(t, cfg)
	h := w.Hosts()[0]
	req, err := http.NewRequest(http.MethodGet, h.Origin+"/", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("User-Agent", "probe/1")
	req.Header.Set("Cookie", "sid=1")
	req.SetBasicAuth("u", "p")
	resp, err := noRedirects.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	reqs := w.Requests()
	if len(reqs) != 1 {
		t.Fatalf("%d requests logged, want 1", len(reqs))
	}
	got := reqs[0].Header
	if got.Get("Cookie") != "sid=1" || got.Get("Authorization") != "Basic dTpw" || reqs[0].Agent != "probe/1" {
		t.Errorf("logged headers %v, agent %q", got, reqs[0].Agent)
	}
}

// RobotsCrawlDelay puts a Crawl-delay in every ordinary host's robots.txt, and Latency
// holds every ordinary response that long.
func TestRobotsCrawlDelayAndLatency(t *testing.T) {
	cfg := smallConfig()
	cfg.Special = false
	cfg.RobotsCrawlDelay = 4 * time.Second
	cfg.Latency = 120 * time.Millisecond
	w := startWeb(t, cfg)
	for _, h := range w.Hosts() {
		if h.CrawlDelay != cfg.RobotsCrawlDelay {
			t.Errorf("%s: CrawlDelay %s, want %s", h.Name, h.CrawlDelay, cfg.RobotsCrawlDelay)
		}
	}
	f := get(t, w.Hosts()[1].Origin+"/robots.txt")
	if !strings.Contains(f.body, "Crawl-delay: 4\n") {
		t.Errorf("robots.txt:\n%s", f.body)
	}
	get(t, w.Hosts()[1].Origin+"/")
	for _, q := range w.Requests() {
		if d := q.End.Sub(q.Start); d < cfg.Latency {
			t.Errorf("%s%s took %s, want ≥ %s", q.Host, q.Path, d, cfg.Latency)
		}
	}
}
