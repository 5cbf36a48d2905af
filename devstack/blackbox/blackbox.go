// Package blackbox is what the tests of a deployed stack (Compose, Kubernetes) read of it
// from outside, over HTTP only: the scheduler's /status.json and the synthetic web's own
// log, and the one judgement of a crawl both make from them.
package blackbox

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/trawl/trawl/devstack/synthweb"
)

// Status is what the tests read of the scheduler's /status.json.
type Status struct {
	Total struct {
		Accepted int64 `json:"accepted"`
		Queued   int64 `json:"queued"`
		Inflight int64 `json:"inflight"`
		Terminal struct {
			Fetched    int64 `json:"fetched"`
			Failed     int64 `json:"failed"`
			Disallowed int64 `json:"disallowed"`
			OutOfScope int64 `json:"out_of_scope"`
			OverBudget int64 `json:"over_budget"`
		} `json:"terminal"`
	} `json:"total"`
	Dispatch *struct {
		FetchQueued uint64 `json:"fetch_queued"`
		FetchBusy   uint64 `json:"fetch_busy"`
		Parser      uint64 `json:"parser_backlog"`
		Dedup       uint64 `json:"dedup_backlog"`
		Frontier    uint64 `json:"frontier_backlog"`
	} `json:"dispatch"`
	Unavailable []json.RawMessage `json:"unavailable"`
}

// Done says the crawl has ended: every accepted URL in a terminal state, nothing queued
// or in flight, every stage's backlog empty, and every source of the page available.
func (st Status) Done() bool {
	t := st.Total
	term := t.Terminal.Fetched + t.Terminal.Failed + t.Terminal.Disallowed + t.Terminal.OutOfScope + t.Terminal.OverBudget
	if t.Accepted == 0 || t.Queued != 0 || t.Inflight != 0 || term != t.Accepted || len(st.Unavailable) != 0 || st.Dispatch == nil {
		return false
	}
	d := st.Dispatch
	return d.FetchQueued == 0 && d.FetchBusy == 0 && d.Parser == 0 && d.Dedup == 0 && d.Frontier == 0
}

// GetJSON decodes the JSON answer of url into v; an answer other than 200 is an error
// with its body.
func GetJSON(url string, v any) error {
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s: %s", url, resp.Status, body)
	}
	return json.Unmarshal(body, v)
}

// DoneTwice is the condition of a wait for the end of a crawl, for a poller that calls it
// until it reports true: the status at statusURL says Done twice, 5 s apart and with the
// same totals (a page still in a stage shows in its backlog). *last is the status read.
func DoneTwice(statusURL string, last *Status) func() (bool, string) {
	var doneSince time.Time
	return func() (bool, string) {
		var cur Status
		if err := GetJSON(statusURL, &cur); err != nil {
			doneSince = time.Time{}
			return false, err.Error()
		}
		b, _ := json.Marshal(cur)
		if !cur.Done() {
			doneSince = time.Time{}
			return false, string(b)
		}
		if doneSince.IsZero() || cur.Total != last.Total {
			doneSince, *last = time.Now(), cur
			return false, "ended once: " + string(b)
		}
		return time.Since(doneSince) >= 5*time.Second, "ended: " + string(b)
	}
}

// Crawl is what a judgement holds a crawl to.
type Crawl struct {
	Origin       func(host string) string // a logged host's origin ("http://host:port")
	MinDelay     time.Duration            // TRAWL_MIN_DELAY
	MaxRetries   int                      // TRAWL_MAX_RETRIES
	RefetchBound int                      // pages that may be requested more than once
}

// Judge checks a crawl from the web's log snap and the final status st: every expected
// page requested, nothing else, no two requests in flight to one host, no gap below the
// delay; at most RefetchBound pages requested more than once, each at most 1+MaxRetries
// times; and the status's fetched count the web's pages.
func Judge(t testing.TB, snap synthweb.Snapshot, st Status, c Crawl) {
	t.Helper()
	exp := snap.Expected
	var pages []synthweb.Request
	for _, r := range snap.Requests {
		if r.Path != "/robots.txt" {
			pages = append(pages, r)
		}
	}
	counts := synthweb.CountByURL(pages, c.Origin)
	refetched := 0
	for u := range exp.Fetch {
		switch n := counts[u]; {
		case n == 0:
			t.Errorf("never requested: %s", u)
		case n > 1+c.MaxRetries:
			t.Errorf("requested %d times, beyond the duplicate bound 1+%d: %s", n, c.MaxRetries, u)
		case n > 1:
			refetched++
			t.Logf("requested %d times: %s", n, u)
		}
	}
	for u, n := range counts {
		if !exp.Fetch[u] {
			t.Errorf("unexpected URL requested %d times: %s", n, u)
		}
	}
	if refetched > c.RefetchBound {
		t.Errorf("%d pages requested more than once, want at most %d", refetched, c.RefetchBound)
	}
	for _, v := range synthweb.Overlaps(snap.Requests) {
		t.Errorf("two requests in flight to one host: %s", v)
	}
	for _, v := range synthweb.Gaps(snap.Requests, func(string) time.Duration { return c.MinDelay }) {
		t.Errorf("gap below TRAWL_MIN_DELAY=%s: %s", c.MinDelay, v)
	}
	// A rendering browser's requests (exp.Browser) are the web's, not the frontier's.
	if got, want := st.Total.Terminal.Fetched, int64(len(exp.Fetch)-len(exp.Browser)); got != want {
		t.Errorf("status.json: %d URLs fetched, the web has %d pages", got, want)
	}
	t.Logf("%d pages, %d requests (robots.txt included), %d requested more than once", len(exp.Fetch), len(snap.Requests), refetched)
}
