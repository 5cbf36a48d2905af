package statuspage

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/trawl/trawl/services/scheduler/internal/frontier"
	"github.com/trawl/trawl/shared/frontierkeys"
)

// fakeSource is a shard with fixed answers: the page's own logic (merging, rates,
// limits) is what these tests check; reading Redis is covered in itest.
type fakeSource struct {
	mu      sync.Mutex
	stats   frontierkeys.ShardStatus
	status  frontier.Status
	err     error
	lastTop int
	lastErr int
}

func (f *fakeSource) Stats(context.Context) (frontierkeys.ShardStatus, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.stats, f.err
}

func (f *fakeSource) Status(_ context.Context, _ time.Time, top, nErr int) (frontier.Status, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lastTop, f.lastErr = top, nErr
	return f.status, f.err
}

func (f *fakeSource) setFetched(n int64) {
	f.mu.Lock()
	f.stats.Fetched, f.stats.Dispatched = n, 2*n
	f.mu.Unlock()
}

// clock is a settable test clock.
type clock struct{ t time.Time }

func (c *clock) now() time.Time          { return c.t }
func (c *clock) advance(d time.Duration) { c.t = c.t.Add(d) }

// pps is a history point's rate, -1 for none.
func pps(p Point) float64 {
	if p.PagesPerSecond == nil {
		return -1
	}
	return *p.PagesPerSecond
}

func TestRates(t *testing.T) {
	a, b := &fakeSource{}, &fakeSource{}
	clk := &clock{t: time.UnixMilli(1_700_000_000_000)}
	p := New([]Shard{{ID: 0, Source: a}, {ID: 1, Source: b}}, Options{RateWindow: 10 * time.Second, Samples: 30, Now: clk.now})
	ctx := context.Background()
	rateOf := func(i int) *float64 { return p.ring.rates(2, p.o.RateWindow).fetched[i] }

	p.Sample(ctx)
	if r := rateOf(0); r != nil {
		t.Fatalf("rate from one sample = %v, want unknown", *r)
	}
	// 12 samples a second apart, shard 0 fetching 5 pages/s and shard 1 none.
	for i := 1; i <= 12; i++ {
		clk.advance(time.Second)
		a.setFetched(int64(5 * i))
		p.Sample(ctx)
	}
	for _, tc := range []struct {
		name  string
		shard int
		want  float64
	}{
		{"steady rate", 0, 5},
		{"idle shard", 1, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := rateOf(tc.shard)
			if r == nil || *r != tc.want {
				t.Fatalf("rate = %v, want %v", r, tc.want)
			}
		})
	}
	t.Run("window: only the last 10s count", func(t *testing.T) {
		clk.advance(time.Second)
		a.setFetched(60 + 50) // a burst of 50 in the last second
		p.Sample(ctx)
		// 10 s back the counter was 15 (sample 3); now 110.
		if r := rateOf(0); r == nil || *r != 9.5 {
			t.Fatalf("rate = %v, want 9.5", r)
		}
		ds := p.ring.rates(2, p.o.RateWindow).dispatched[0]
		if ds == nil || *ds != 19 {
			t.Fatalf("dispatched rate = %v, want 19", ds)
		}
	})
	t.Run("an unreadable shard keeps its last readings", func(t *testing.T) {
		a.err = errors.New("redis down")
		clk.advance(time.Second)
		p.Sample(ctx)
		a.err = nil
		if r := rateOf(0); r == nil || *r != 9.5 {
			t.Fatalf("rate = %v, want the previous 9.5", r)
		}
	})
	t.Run("a counter that went back is no rate", func(t *testing.T) {
		clk.advance(time.Second)
		a.setFetched(3)
		p.Sample(ctx)
		if r := rateOf(0); r != nil {
			t.Fatalf("rate after a reset = %v, want unknown", *r)
		}
	})
	t.Run("history", func(t *testing.T) {
		h := p.ring.history()
		// 16 samples a second apart: 15 intervals.
		if len(h) != 15 {
			t.Fatalf("%d points, want 15", len(h))
		}
		// The interval with shard 0 unreadable counts the shard read at both ends.
		if v := pps(h[0]); v != 5 || pps(h[12]) != 50 || pps(h[13]) != 0 {
			t.Fatalf("history %+v", h)
		}
		for i := 1; i < len(h); i++ {
			if h[i].AtMs <= h[i-1].AtMs {
				t.Fatalf("history not oldest first: %+v", h)
			}
		}
	})
	t.Run("history has no rate while no shard is read", func(t *testing.T) {
		a.err, b.err = errors.New("redis down"), errors.New("redis down")
		clk.advance(time.Second)
		p.Sample(ctx)
		a.err, b.err = nil, nil
		h := p.ring.history()
		if last := h[len(h)-1]; last.PagesPerSecond != nil {
			t.Fatalf("an interval with nothing read has rate %v, want null (not a stopped crawl)", *last.PagesPerSecond)
		}
	})
	t.Run("ring is bounded", func(t *testing.T) {
		for range 100 {
			clk.advance(time.Second)
			p.Sample(ctx)
		}
		if n := len(p.ring.history()); n != 29 {
			t.Fatalf("%d points kept, want 29 (30 samples)", n)
		}
	})
}

func at(ms int64) time.Time { return time.UnixMilli(1_700_000_000_000 + ms) }

func twoShards() (*fakeSource, *fakeSource) {
	a := &fakeSource{status: frontier.Status{
		ShardStatus: frontierkeys.ShardStatus{Counters: frontierkeys.Counters{Accepted: 10, Queued: 3, Fetched: 5, Failed: 1,
			Dispatched: 7, Retired: 1}, InFlight: 1, Active: 4, InHeap: 3, Ready: 1, Front: []int64{2, 1}},
		Busiest: []frontier.HostActivity{{Host: "a1", Fetched: 9, AvgMs: 10}, {Host: "a2", Fetched: 2, AvgMs: 300}},
		Slowest: []frontier.HostActivity{{Host: "a2", Fetched: 2, AvgMs: 300, LastMs: 280}, {Host: "a1", Fetched: 9, AvgMs: 10}},
		Errors: []frontier.ErrorRecord{
			{At: at(300), Result: "retry", Kind: "fetched", Status: 503, Host: "a2", URL: "http://a2/x"},
			{At: at(100), Result: "failed", Kind: "error", Host: "a2", URL: "http://a2/y", Error: "<b>refused</b>"},
		},
	}}
	b := &fakeSource{status: frontier.Status{
		ShardStatus: frontierkeys.ShardStatus{Counters: frontierkeys.Counters{Accepted: 5, Queued: 1, Fetched: 2, Disallowed: 2},
			Active: 1, InHeap: 1, Front: []int64{0, 0, 1}, Paused: true},
		Busiest: []frontier.HostActivity{{Host: "b1", Fetched: 9, AvgMs: 50}, {Host: "b2", Fetched: 4}},
		Slowest: []frontier.HostActivity{{Host: "b1", Fetched: 9, AvgMs: 50}},
		Errors:  []frontier.ErrorRecord{{At: at(200), Result: "retry", Kind: "error", Host: "b1", URL: "http://b1/"}},
	}}
	return a, b
}

func TestReportMerge(t *testing.T) {
	a, b := twoShards()
	p := New([]Shard{{ID: 0, Served: true, Source: a}, {ID: 1, Source: b}}, Options{})
	rep := p.Report(context.Background(), 3, 2)

	wantTotal := Counts{Accepted: 15, Queued: 4, Inflight: 1, Dispatched: 7,
		Terminal: Terminal{Fetched: 7, Failed: 1, Disallowed: 2},
		Hosts:    Hosts{Active: 5, Ready: 1, Waiting: 3, InFlight: 1, Retired: 1},
		Frontier: []int64{2, 1, 1}, Paused: true}
	gotTotal, _ := json.Marshal(rep.Total)
	wantJSON, _ := json.Marshal(wantTotal)
	if string(gotTotal) != string(wantJSON) {
		t.Errorf("total\n got %s\nwant %s", gotTotal, wantJSON)
	}
	hosts := func(rows []HostRow) string {
		var s []string
		for _, r := range rows {
			s = append(s, r.Host)
		}
		return strings.Join(s, ",")
	}
	for _, tc := range []struct{ name, got, want string }{
		// a1 and b1 tie on 9 pages: by host name.
		{"busiest across shards, cut to top", hosts(rep.Busiest), "a1,b1,b2"},
		{"slowest across shards", hosts(rep.Slowest), "a2,b1,a1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.got != tc.want {
				t.Fatalf("got %s, want %s", tc.got, tc.want)
			}
		})
	}
	if r := rep.Slowest[0]; r.Shard != 0 || r.LastMs != 280 || r.AvgMs != 300 || r.Fetched != 2 {
		t.Errorf("slowest row %+v", r)
	}
	if len(rep.Errors) != 2 || rep.Errors[0].Host != "a2" || rep.Errors[0].Status != 503 || rep.Errors[1].Shard != 1 {
		t.Errorf("errors not merged newest first and cut at 2: %+v", rep.Errors)
	}
	if len(rep.Shards) != 2 || !rep.Shards[0].Served || rep.Shards[1].Served || !rep.Shards[1].Paused {
		t.Errorf("shards %+v", rep.Shards)
	}
}

func get(t *testing.T, h http.Handler, method, target string) *httptest.ResponseRecorder {
	t.Helper()
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(method, target, nil))
	return w
}

func TestHandlers(t *testing.T) {
	a, b := twoShards()
	p := New([]Shard{{ID: 0, Source: a}, {ID: 1, Source: b}}, Options{})
	mux := http.NewServeMux()
	p.Register(mux)
	for _, tc := range []struct {
		method, target string
		code           int
		ctype, body    string
	}{
		{"GET", "/", 200, "text/html; charset=utf-8", `id="fetched"`},
		{"GET", "/status", 200, "text/html; charset=utf-8", `<script src="status.js"`},
		{"HEAD", "/status", 200, "text/html; charset=utf-8", ""},
		{"GET", "/status.js", 200, "text/javascript; charset=utf-8", "textContent"},
		{"GET", "/status.css", 200, "text/css; charset=utf-8", ".num"},
		{"GET", "/status.json", 200, "application/json", `"busiest":[`},
		{"POST", "/status.json", 405, "", ""},
		{"GET", "/nothing", 404, "", ""},
	} {
		t.Run(tc.method+" "+tc.target, func(t *testing.T) {
			w := get(t, mux, tc.method, tc.target)
			if w.Code != tc.code {
				t.Fatalf("status %d, want %d", w.Code, tc.code)
			}
			if tc.code != 200 {
				return
			}
			if ct := w.Header().Get("Content-Type"); ct != tc.ctype {
				t.Errorf("Content-Type %q, want %q", ct, tc.ctype)
			}
			if csp := w.Header().Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") || !strings.Contains(csp, "default-src 'none'") {
				t.Errorf("CSP %q", csp)
			}
			if w.Header().Get("X-Content-Type-Options") != "nosniff" {
				t.Error("no nosniff")
			}
			if !strings.Contains(w.Body.String(), tc.body) {
				t.Errorf("body lacks %q", tc.body)
			}
		})
	}
	t.Run("limits on top and errors", func(t *testing.T) {
		for _, tc := range []struct {
			query            string
			wantTop, wantErr int
		}{
			{"", DefaultTop, DefaultErrors},
			{"?top=3&errors=4", 3, 4},
			{"?top=100000&errors=100000", MaxTop, MaxErrors},
			{"?top=-1&errors=x", DefaultTop, DefaultErrors},
		} {
			get(t, mux, "GET", "/status.json"+tc.query)
			if a.lastTop != tc.wantTop || a.lastErr != tc.wantErr {
				t.Errorf("%q: asked for top %d errors %d, want %d %d", tc.query, a.lastTop, a.lastErr, tc.wantTop, tc.wantErr)
			}
		}
	})
	t.Run("JSON escapes markup", func(t *testing.T) {
		body := get(t, mux, "GET", "/status.json").Body.String()
		if strings.Contains(body, "<b>") || !strings.Contains(body, `\u003cb\u003erefused`) {
			t.Fatalf("markup not escaped in %s", body)
		}
	})
	t.Run("one shard down: partial report, 503", func(t *testing.T) {
		var seen []int
		p := New([]Shard{{ID: 0, Source: a}, {ID: 1, Source: &fakeSource{err: errors.New("connection refused")}}},
			Options{OnError: func(s int, _ error) { seen = append(seen, s) }})
		m := http.NewServeMux()
		p.Register(m)
		w := get(t, m, "GET", "/status.json")
		var rep Report
		if err := json.Unmarshal(w.Body.Bytes(), &rep); err != nil {
			t.Fatal(err)
		}
		// The shards read are shown, but the totals are not the crawl's: a probe must see it.
		if w.Code != http.StatusServiceUnavailable || len(rep.Shards) != 1 || len(rep.Unavailable) != 1 || rep.Unavailable[0].Shard != 1 ||
			!strings.Contains(rep.Unavailable[0].Error, "refused") || rep.Total == nil || rep.Total.Accepted != 10 ||
			rep.Error != "the frontier cannot be read in full: 1 of 2 shards unreadable (shard 1: connection refused)" {
			t.Fatalf("status %d, report %+v", w.Code, rep)
		}
		if len(seen) != 1 || seen[0] != 1 {
			t.Fatalf("OnError told of %v, want [1]", seen)
		}
	})
	t.Run("every shard down: 503", func(t *testing.T) {
		p := New([]Shard{{ID: 0, Source: &fakeSource{err: errors.New("down")}}}, Options{})
		m := http.NewServeMux()
		p.Register(m)
		w := get(t, m, "GET", "/status.json")
		if w.Code != http.StatusServiceUnavailable || !strings.Contains(w.Body.String(), `"unavailable":[{"shard":0`) ||
			!strings.Contains(w.Body.String(), `"error":"the frontier cannot be read: shard 0: down"`) ||
			!strings.Contains(w.Body.String(), `"total":null`) {
			t.Fatalf("%d %s", w.Code, w.Body)
		}
	})
}

// The page must stay a self-contained page that renders data as text: guard the static
// files against the easy regressions.
func TestStaticFiles(t *testing.T) {
	read := func(name string) string {
		b, err := os.ReadFile("static/" + name)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	html, js := read("index.html"), read("status.js")
	t.Run("no HTML sinks in the script", func(t *testing.T) {
		for _, sink := range []string{"innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function", "setAttribute('on", "href ="} {
			if strings.Contains(js, sink) {
				t.Errorf("status.js uses %s", sink)
			}
		}
	})
	t.Run("no external assets", func(t *testing.T) {
		for _, f := range []string{html, js, read("status.css")} {
			if m := regexp.MustCompile(`(?i)(src|href)\s*=\s*["']?(https?:)?//|@import|url\(`).FindString(f); m != "" {
				t.Errorf("external reference %q", m)
			}
		}
	})
	t.Run("every id the script writes exists", func(t *testing.T) {
		for _, m := range regexp.MustCompile(`text\('([a-z-]+)'`).FindAllStringSubmatch(js, -1) {
			if !strings.Contains(html, `id="`+m[1]+`"`) {
				t.Errorf("status.js writes #%s, not in index.html", m[1])
			}
		}
		for _, m := range regexp.MustCompile(`fill\('([a-z-]+)'`).FindAllStringSubmatch(js, -1) {
			if !strings.Contains(html, `<table id="`+m[1]+`"`) {
				t.Errorf("status.js fills table #%s, not in index.html", m[1])
			}
		}
	})
}

// The dispatch gate's figures are part of the report when a scheduler published them
// lately, and absent (not zero) otherwise.
func TestReportDispatch(t *testing.T) {
	a, _ := twoShards()
	held := Dispatch{Held: "parser", Holds: 2, FetchQueued: 3, FetchBusy: 4, FetchQueuedLimit: 8, Parser: 25}
	for _, tc := range []struct {
		name string
		read func(context.Context) (Dispatch, bool, error)
		want string
	}{
		{"published", func(context.Context) (Dispatch, bool, error) { return held, true, nil },
			`"dispatch":{"held":"parser","holds":2,"fetch_queued":3,"fetch_busy":4,"fetch_queued_limit":8,"parser_backlog":25,`},
		{"none published", func(context.Context) (Dispatch, bool, error) { return Dispatch{}, false, nil }, ""},
		{"unreadable", func(context.Context) (Dispatch, bool, error) { return held, true, errors.New("down") }, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := New([]Shard{{ID: 0, Source: a}}, Options{Dispatch: tc.read})
			body, err := json.Marshal(p.Report(context.Background(), 1, 1))
			if err != nil {
				t.Fatal(err)
			}
			if tc.want == "" {
				if strings.Contains(string(body), `"dispatch"`) {
					t.Fatalf("report %s has dispatch figures, want none", body)
				}
				return
			}
			if !strings.Contains(string(body), tc.want) {
				t.Fatalf("report %s\nwant it to contain %s", body, tc.want)
			}
		})
	}
}

// The report names the stuck tasks — URL, host, attempt, time out, the lease's time left
// or overdue, the fetcher's last error — and lists none while the crawl moves or the
// reading fails.
func TestReportStuck(t *testing.T) {
	a, _ := twoShards()
	now := time.UnixMilli(1_700_000_000_000)
	failing := frontierkeys.StuckLease{Shard: 0, Host: "a.example", URL: "http://a.example/big", Attempt: 1,
		Since: now.Add(-70 * time.Second), Deadline: now.Add(50 * time.Second),
		LastError: &frontierkeys.LeaseError{Token: "0-1-2", First: now.Add(-60 * time.Second), Last: now.Add(-time.Second), Tries: 30, Error: "page: nats: no response from stream"}}
	for _, tc := range []struct {
		name string
		read func(context.Context) ([]frontierkeys.StuckLease, time.Time, error)
		want []string
	}{
		{"stuck", func(context.Context) ([]frontierkeys.StuckLease, time.Time, error) {
			return []frontierkeys.StuckLease{failing}, now, nil
		}, []string{`"host":"a.example"`, `"url":"http://a.example/big"`, `"attempt":2`, `"overdue":false`, `"error":"page: nats: no response from stream"`, `"error_tries":30`,
			`"text":"http://a.example/big (host a.example, attempt 2): out for 1m10s, lease ends in 50s; failing for 1m0s (30 tries), last error 1s ago: page: nats: no response from stream"`}},
		{"none", func(context.Context) ([]frontierkeys.StuckLease, time.Time, error) { return nil, now, nil }, []string{`"stuck":[]`}},
		{"unreadable", func(context.Context) ([]frontierkeys.StuckLease, time.Time, error) {
			return nil, now, errors.New("down")
		}, []string{`"stuck":[]`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := New([]Shard{{ID: 0, Source: a}}, Options{Stuck: tc.read})
			body, err := json.Marshal(p.Report(context.Background(), 1, 1))
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range tc.want {
				if !strings.Contains(string(body), w) {
					t.Errorf("report %s\nwant it to contain %s", body, w)
				}
			}
		})
	}
}

// The page lists the rules in force, bounded: the most active ?rules= of them (20 by
// default, 200 at most) and how many there are; a failed reading is said, not shown as
// no rules.
func TestReportRules(t *testing.T) {
	a, _ := twoShards()
	var stats []frontierkeys.RuleStats
	read := func(_ context.Context, top int) (frontierkeys.ActiveRules, error) {
		m := map[string]frontierkeys.PolicyStat{}
		scopes := make([]string, 10000)
		for i := range scopes {
			scopes[i] = fmt.Sprintf("host:h%05d.test", i)
			m[scopes[i]] = frontierkeys.PolicyStat{Requests: int64(i % 97)}
		}
		m["host:h00042.test"] = frontierkeys.PolicyStat{Parked: 1000}
		return frontierkeys.TopRules(m, scopes, 7, top), nil
	}
	for _, tc := range []struct {
		name  string
		query string
		read  func(context.Context, int) (frontierkeys.ActiveRules, error)
		shown int
		err   string
	}{
		{"default", "", read, DefaultRules, ""},
		{"asked for", "?rules=5", read, 5, ""},
		{"bounded", "?rules=100000", read, MaxRules, ""},
		{"unreadable", "", func(context.Context, int) (frontierkeys.ActiveRules, error) {
			return frontierkeys.ActiveRules{}, errors.New("redis down")
		}, 0, "redis down"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := New([]Shard{{ID: 0, Source: a}}, Options{Rules: tc.read})
			rec := httptest.NewRecorder()
			p.serveJSON(rec, httptest.NewRequest("GET", "/status.json"+tc.query, nil))
			var rep Report
			if err := json.Unmarshal(rec.Body.Bytes(), &rep); err != nil {
				t.Fatal(err)
			}
			if tc.err != "" {
				if rep.Rules != nil || !strings.Contains(rep.RulesError, tc.err) {
					t.Fatalf("rules %+v error %q, want none and %q", rep.Rules, rep.RulesError, tc.err)
				}
				return
			}
			if rep.Rules == nil || rep.Rules.Total != 10000 || rep.Rules.Version != 7 || len(rep.Rules.Shown) != tc.shown {
				t.Fatalf("rules %+v, want 10000 at version 7, %d shown", rep.Rules, tc.shown)
			}
			stats = rep.Rules.Shown
			if stats[0].Scope != "host:h00042.test" || stats[1].Requests != 96 {
				t.Errorf("first rows %+v, want the parking rule first, then the busiest", stats[:2])
			}
			if rec.Body.Len() > 64<<10 {
				t.Errorf("status.json of %d bytes with 10,000 rules", rec.Body.Len())
			}
		})
	}
}
