// Package statuspage serves the scheduler's live status page: GET /status.json (the
// crawl's counters, frontier, rates, busiest and slowest hosts and recent errors, per
// shard and in total) and GET / or /status, one static page that polls it. Everything it
// shows is read from the frontiers in Redis, except the rates, which come from a short
// ring of counter samples kept in memory, so any scheduler process serves the same page.
package statuspage

import (
	"cmp"
	"context"
	"embed"
	"encoding/json"
	"fmt"
	"io/fs"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/trawl/trawl/services/scheduler/internal/frontier"
	"github.com/trawl/trawl/shared/frontierkeys"
	"github.com/trawl/trawl/shared/recrawl"
)

//go:embed static
var staticFS embed.FS

// Source is one shard's frontier as the page reads it.
type Source interface {
	Stats(ctx context.Context) (frontierkeys.ShardStatus, error)
	Status(ctx context.Context, now time.Time, top, errors int) (frontier.Status, error)
}

// Shard is a shard shown on the page.
type Shard struct {
	ID int
	// Served says this process serves the shard (the page shows every shard of the crawl).
	Served bool
	Source Source
}

// Options tune the page. Zero values take the defaults.
type Options struct {
	// SampleEvery is how often the counters are sampled for the rates (default 1s).
	SampleEvery time.Duration
	// RateWindow is the span the headline rates are computed over (default 10s).
	RateWindow time.Duration
	// Samples is how many samples are kept, which is also the history's length (default 61).
	Samples int
	// Timeout bounds one reading of all shards (default 3s).
	Timeout time.Duration
	// OnError is told of every shard that could not be read (for a metric and a log line).
	OnError func(shard int, err error)
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Dispatch reads the dispatch gate's figures (nil: not shown); ok is false when no
	// scheduler published any lately.
	Dispatch func(ctx context.Context) (d Dispatch, ok bool, err error)
	// SeenFilter reads the dedup filter's figures as dedup publishes them (nil: not shown).
	SeenFilter func(ctx context.Context) (map[string]string, error)
	// Recrawl reads the recrawl backlog (nil, or a nil backlog: not shown).
	Recrawl func(ctx context.Context) (*recrawl.Backlog, error)
	// Stuck reads the tasks out that make no progress, judged at now (nil: not shown).
	Stuck func(ctx context.Context) (stuck []frontierkeys.StuckLease, now time.Time, err error)
	// Rules reads the live site policies' rules in force with their counters summed over
	// the shards, the top most active of them (nil: not shown).
	Rules func(ctx context.Context, top int) (frontierkeys.ActiveRules, error)
}

// StuckRow is a task out that makes no progress (frontierkeys.StuckLease.Stuck).
type StuckRow struct {
	Shard      int    `json:"shard"`
	Host       string `json:"host"`
	URL        string `json:"url"`
	Attempt    int    `json:"attempt"` // 1 for the first
	SinceMs    int64  `json:"since_ms,omitempty"`
	DeadlineMs int64  `json:"deadline_ms"`
	Overdue    bool   `json:"overdue"`
	// The fetcher's last error for the task, with when it first and last failed and how
	// often; empty when it reported none.
	Error        string `json:"error,omitempty"`
	ErrorTries   int64  `json:"error_tries,omitempty"`
	ErrorFirstMs int64  `json:"error_first_ms,omitempty"`
	ErrorLastMs  int64  `json:"error_last_ms,omitempty"`
	// Text is the row as trawlctl status and the progress line print it.
	Text string `json:"text"`
}

// Dispatch is what holds dispatch back: the fetchers' capacity and the later stages'
// backlogs, as the schedulers last read them.
type Dispatch struct {
	// Held names the stages over their threshold ("" = dispatching); Holds counts holds.
	Held  string `json:"held"`
	Holds int64  `json:"holds"`
	// FetchQueued tasks wait for a fetcher (at most FetchQueuedLimit), FetchBusy are held
	// by fetchers.
	FetchQueued      uint64 `json:"fetch_queued"`
	FetchBusy        uint64 `json:"fetch_busy"`
	FetchQueuedLimit uint64 `json:"fetch_queued_limit"`
	Parser           uint64 `json:"parser_backlog"`
	Dedup            uint64 `json:"dedup_backlog"`
	Frontier         uint64 `json:"frontier_backlog"`
	PagesBytes       int64  `json:"pages_bytes"`
	PagesMaxBytes    int64  `json:"pages_max_bytes"`
}

// Limits on what one request may ask for.
const (
	DefaultTop    = 10
	MaxTop        = 100
	DefaultErrors = 20
	MaxErrors     = 100
	// MaxStuck bounds the stuck tasks listed.
	MaxStuck = 20
	// The rules listed: a crawl may hold 10,000, the page shows the most active.
	DefaultRules = 20
	MaxRules     = 200
)

// Page is the status page of a crawl's shards.
type Page struct {
	shards []Shard
	o      Options
	ring   *ring
}

// New returns the page for shards.
func New(shards []Shard, o Options) *Page {
	if o.SampleEvery <= 0 {
		o.SampleEvery = time.Second
	}
	if o.RateWindow <= 0 {
		o.RateWindow = 10 * time.Second
	}
	if o.Samples <= 0 {
		o.Samples = 61
	}
	if o.Timeout <= 0 {
		o.Timeout = 3 * time.Second
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.OnError == nil {
		o.OnError = func(int, error) {}
	}
	return &Page{shards: shards, o: o, ring: newRing(o.Samples)}
}

// Mux is where the page's handlers go (obs.Server, http.ServeMux).
type Mux interface {
	Handle(pattern string, h http.Handler)
}

// Register adds the page's routes to m.
func (p *Page) Register(m Mux) {
	static, err := fs.Sub(staticFS, "static")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	page := serveFile(static, "index.html", "text/html; charset=utf-8")
	m.Handle("GET /{$}", page)
	m.Handle("GET /status", page)
	m.Handle("GET /status.js", serveFile(static, "status.js", "text/javascript; charset=utf-8"))
	m.Handle("GET /status.css", serveFile(static, "status.css", "text/css; charset=utf-8"))
	m.Handle("GET /status.json", http.HandlerFunc(p.serveJSON))
}

// securityHeaders confine the page to its own origin: the data it renders (URLs, error
// text) comes from crawled sites, so even a rendering bug must not be able to run script
// or load anything from elsewhere.
func securityHeaders(h http.Header) {
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-store")
}

func serveFile(fsys fs.FS, name, contentType string) http.Handler {
	body, err := fs.ReadFile(fsys, name)
	if err != nil {
		panic(err)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		securityHeaders(w.Header())
		w.Header().Set("Content-Type", contentType)
		_, _ = w.Write(body)
	})
}

// Run samples the counters every SampleEvery until ctx ends.
func (p *Page) Run(ctx context.Context) {
	t := time.NewTicker(p.o.SampleEvery)
	defer t.Stop()
	for {
		p.Sample(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Sample reads every shard's counters once into the ring.
func (p *Page) Sample(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, p.o.Timeout)
	defer cancel()
	n := len(p.shards)
	s := sample{fetched: make([]int64, n), dispatched: make([]int64, n), ok: make([]bool, n)}
	for i, sh := range p.shards {
		st, err := sh.Source.Stats(ctx)
		if err != nil {
			if ctx.Err() == nil {
				p.o.OnError(sh.ID, err)
			}
			continue
		}
		s.fetched[i], s.dispatched[i], s.ok[i] = st.Fetched, st.Dispatched, true
	}
	// Stamped after the reads: with a slow Redis the interval is what the counters saw.
	s.at = p.o.Now()
	p.ring.add(s)
}

// Counts are a shard's numbers, or their sums over the crawl.
type Counts struct {
	Accepted   int64 `json:"accepted"`
	Queued     int64 `json:"queued"`
	Inflight   int64 `json:"inflight"`
	Dispatched int64 `json:"dispatched"`
	Expired    int64 `json:"expired"`
	// Terminal are the URLs in each terminal state; accepted = queued + inflight + Σ terminal.
	Terminal Terminal `json:"terminal"`
	Hosts    Hosts    `json:"hosts"`
	// Frontier is the length of each front queue, priority 0 (highest) first.
	Frontier            []int64  `json:"frontier"`
	Paused              bool     `json:"paused"`
	PagesPerSecond      *float64 `json:"pages_per_second"`
	DispatchedPerSecond *float64 `json:"dispatched_per_second"`
}

// Terminal are the terminal-state counters.
type Terminal struct {
	Fetched    int64 `json:"fetched"`
	Failed     int64 `json:"failed"`
	Disallowed int64 `json:"disallowed"`
	OutOfScope int64 `json:"out_of_scope"`
	OverBudget int64 `json:"over_budget"`
}

// Hosts describe the back-queue side, with trawlctl status's names.
type Hosts struct {
	Active   int64 `json:"active"`    // holding a back queue
	Ready    int64 `json:"ready"`     // idle in the heap and due now
	Waiting  int64 `json:"waiting"`   // idle in the heap, waiting out their politeness delay
	InFlight int64 `json:"in_flight"` // with a task out
	Retired  int64 `json:"retired"`   // retired after a failure streak (counter)
}

// ShardStatus is one shard's entry.
type ShardStatus struct {
	Shard  int  `json:"shard"`
	Served bool `json:"served"`
	Counts
}

// HostRow is a row of the busiest or the slowest hosts.
type HostRow struct {
	Host    string `json:"host"`
	Shard   int    `json:"shard"`
	Fetched int64  `json:"fetched"`
	AvgMs   int64  `json:"avg_ms"`
	LastMs  int64  `json:"last_ms"`
	// Addr is the server address the host was last requested at ("" = unknown); AddrBusy
	// says a request to it is in flight and AddrNextMs is when it may next be requested
	// (unix ms; 0 = no state: free), under per-server politeness.
	Addr       string `json:"addr,omitempty"`
	AddrBusy   bool   `json:"addr_busy,omitempty"`
	AddrNextMs int64  `json:"addr_next_ms,omitempty"`
}

// ErrorRow is a recent error.
type ErrorRow struct {
	AtMs   int64  `json:"t_ms"`
	Shard  int    `json:"shard"`
	Result string `json:"result"`
	Kind   string `json:"kind"`
	Status int    `json:"status"`
	Host   string `json:"host"`
	URL    string `json:"url"`
	Error  string `json:"error"`
}

// Unavailable names a shard that could not be read.
type Unavailable struct {
	Shard int    `json:"shard"`
	Error string `json:"error"`
}

// Report is the body of /status.json.
type Report struct {
	V                 int     `json:"v"`
	NowMs             int64   `json:"now_ms"`
	RateWindowSeconds float64 `json:"rate_window_seconds"`
	// Error says that the frontier cannot be read (in full) and why; then the response is
	// a 503 and Unavailable names each shard that could not be read.
	Error string `json:"error,omitempty"`
	// Total sums the shards that were read; null when none could be, never zeros that
	// would read as an empty crawl.
	Total   *Counts       `json:"total"`
	Shards  []ShardStatus `json:"shards"`
	Busiest []HostRow     `json:"busiest"`
	Slowest []HostRow     `json:"slowest"`
	Errors  []ErrorRow    `json:"errors"`
	// History is the crawl's pages/s over each sampling interval, oldest first.
	History     []Point       `json:"history"`
	Unavailable []Unavailable `json:"unavailable"`
	// Dispatch is absent when no scheduler published its gate's figures lately.
	Dispatch *Dispatch `json:"dispatch,omitempty"`
	// SeenFilter is the dedup filter's growth (layers, fill, memory and the next layer's),
	// absent until dedup has published it.
	SeenFilter map[string]string `json:"seen_filter,omitempty"`
	// Recrawl is the recrawl schedule's backlog, absent in a one-shot crawl.
	Recrawl *recrawl.Backlog `json:"recrawl,omitempty"`
	// Stuck names the tasks out that make no progress: which URLs, on which hosts, for how
	// long, with their fetcher's last error. Empty while the crawl moves.
	Stuck []StuckRow `json:"stuck"`
	// Rules are the live site policies in force: how many, and the most active with their
	// counters summed over the shards. Absent when they cannot be read; RulesError says
	// why.
	Rules      *frontierkeys.ActiveRules `json:"rules,omitempty"`
	RulesError string                    `json:"rules_error,omitempty"`
}

func intParam(r *http.Request, name string, def, hi int) int {
	v, err := strconv.Atoi(r.URL.Query().Get(name))
	if err != nil || v < 0 {
		return def
	}
	return min(v, hi)
}

func (p *Page) serveJSON(w http.ResponseWriter, r *http.Request) {
	top := intParam(r, "top", DefaultTop, MaxTop)
	nErr := intParam(r, "errors", DefaultErrors, MaxErrors)
	nRules := intParam(r, "rules", DefaultRules, MaxRules)
	ctx, cancel := context.WithTimeout(r.Context(), p.o.Timeout)
	defer cancel()
	rep := p.Report(ctx, top, nErr)
	p.addRules(ctx, &rep, nRules)
	securityHeaders(w.Header())
	w.Header().Set("Content-Type", "application/json")
	code := http.StatusOK
	if rep.Error != "" {
		// Counters of a frontier not read in full are no crawl's state: a probe must not
		// take them for an empty or finished crawl.
		code = http.StatusServiceUnavailable
	}
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	_ = enc.Encode(rep)
}

// Report reads every shard and merges the result: the top hosts and the errors across
// shards, at most top and nErrors of them.
func (p *Page) Report(ctx context.Context, top, nErrors int) Report {
	now := p.o.Now()
	rates := p.ring.rates(len(p.shards), p.o.RateWindow)
	rep := Report{
		V: 1, NowMs: now.UnixMilli(), RateWindowSeconds: p.o.RateWindow.Seconds(),
		Shards: []ShardStatus{}, Busiest: []HostRow{}, Slowest: []HostRow{}, Errors: []ErrorRow{},
		History: p.ring.history(), Unavailable: []Unavailable{}, Stuck: []StuckRow{},
	}
	var sum frontierkeys.ShardStatus
	var pagesPerSecond, dispatchedPerSecond *float64
	for i, sh := range p.shards {
		st, err := sh.Source.Status(ctx, now, top, nErrors)
		if err != nil {
			p.o.OnError(sh.ID, err)
			rep.Unavailable = append(rep.Unavailable, Unavailable{Shard: sh.ID, Error: err.Error()})
			continue
		}
		c := counts(st.ShardStatus)
		c.PagesPerSecond, c.DispatchedPerSecond = rates.fetched[i], rates.dispatched[i]
		rep.Shards = append(rep.Shards, ShardStatus{Shard: sh.ID, Served: sh.Served, Counts: c})
		sum.Add(st.ShardStatus)
		pagesPerSecond = addRate(pagesPerSecond, c.PagesPerSecond)
		dispatchedPerSecond = addRate(dispatchedPerSecond, c.DispatchedPerSecond)
		for _, a := range st.Busiest {
			rep.Busiest = append(rep.Busiest, hostRow(sh.ID, a, now))
		}
		for _, a := range st.Slowest {
			rep.Slowest = append(rep.Slowest, hostRow(sh.ID, a, now))
		}
		for _, e := range st.Errors {
			rep.Errors = append(rep.Errors, ErrorRow{AtMs: e.At.UnixMilli(), Shard: sh.ID, Result: e.Result,
				Kind: e.Kind, Status: e.Status, Host: e.Host, URL: e.URL, Error: e.Error})
		}
	}
	if p.o.Dispatch != nil {
		if d, ok, err := p.o.Dispatch(ctx); err == nil && ok {
			rep.Dispatch = &d
		}
	}
	if p.o.SeenFilter != nil {
		if f, err := p.o.SeenFilter(ctx); err == nil && len(f) > 0 {
			rep.SeenFilter = f
		}
	}
	if p.o.Recrawl != nil {
		if b, err := p.o.Recrawl(ctx); err == nil {
			rep.Recrawl = b
		}
	}
	if p.o.Stuck != nil {
		if ls, at, err := p.o.Stuck(ctx); err == nil {
			for _, l := range ls {
				rep.Stuck = append(rep.Stuck, stuckRow(l, at))
			}
		}
	}
	total := counts(sum)
	total.PagesPerSecond, total.DispatchedPerSecond = pagesPerSecond, dispatchedPerSecond
	rep.Total = &total
	if n := len(rep.Unavailable); n > 0 {
		u := rep.Unavailable[0]
		if n == len(p.shards) {
			rep.Total = nil
			rep.Error = fmt.Sprintf("the frontier cannot be read: shard %d: %s", u.Shard, u.Error)
		} else {
			rep.Error = fmt.Sprintf("the frontier cannot be read in full: %d of %d shards unreadable (shard %d: %s)", n, len(p.shards), u.Shard, u.Error)
		}
	}
	// Ties are broken by host so that the order does not flicker between refreshes.
	slices.SortFunc(rep.Busiest, func(a, b HostRow) int {
		return cmp.Or(cmp.Compare(b.Fetched, a.Fetched), cmp.Compare(a.Host, b.Host))
	})
	slices.SortFunc(rep.Slowest, func(a, b HostRow) int {
		return cmp.Or(cmp.Compare(b.AvgMs, a.AvgMs), cmp.Compare(a.Host, b.Host))
	})
	slices.SortStableFunc(rep.Errors, func(a, b ErrorRow) int { return cmp.Compare(b.AtMs, a.AtMs) })
	rep.Busiest = rep.Busiest[:min(len(rep.Busiest), top)]
	rep.Slowest = rep.Slowest[:min(len(rep.Slowest), top)]
	rep.Errors = rep.Errors[:min(len(rep.Errors), nErrors)]
	return rep
}

// addRules adds the rules in force, at most top of them.
func (p *Page) addRules(ctx context.Context, rep *Report, top int) {
	if p.o.Rules == nil {
		return
	}
	ar, err := p.o.Rules(ctx, top)
	if err != nil {
		rep.RulesError = err.Error()
		return
	}
	rep.Rules = &ar
}

func stuckRow(l frontierkeys.StuckLease, now time.Time) StuckRow {
	r := StuckRow{Shard: l.Shard, Host: l.Host, URL: l.URL, Attempt: l.Attempt + 1,
		DeadlineMs: l.Deadline.UnixMilli(), Overdue: l.Overdue(now), Text: l.Describe(now)}
	if !l.Since.IsZero() {
		r.SinceMs = l.Since.UnixMilli()
	}
	if e := l.LastError; e != nil {
		r.Error, r.ErrorTries, r.ErrorFirstMs, r.ErrorLastMs = e.Error, e.Tries, e.First.UnixMilli(), e.Last.UnixMilli()
	}
	return r
}

func hostRow(shard int, a frontier.HostActivity, now time.Time) HostRow {
	r := HostRow{Host: a.Host, Shard: shard, Fetched: a.Fetched, AvgMs: a.AvgMs, LastMs: a.LastMs, Addr: a.Addr}
	if a.Server.Known {
		r.AddrBusy = a.Server.Busy(now)
		if !a.Server.Next.IsZero() {
			r.AddrNextMs = a.Server.Next.UnixMilli()
		}
	}
	return r
}

func counts(st frontierkeys.ShardStatus) Counts {
	return Counts{
		Accepted: st.Accepted, Queued: st.Queued, Inflight: st.InFlight,
		Dispatched: st.Dispatched, Expired: st.Expired,
		Terminal: Terminal{Fetched: st.Fetched, Failed: st.Failed, Disallowed: st.Disallowed,
			OutOfScope: st.OutOfScope, OverBudget: st.OverBudget},
		Hosts: Hosts{Active: st.Active, Ready: st.Ready, Waiting: st.InHeap - st.Ready,
			InFlight: st.InFlight, Retired: st.Retired},
		Frontier: append([]int64{}, st.Front...),
		Paused:   st.Paused,
	}
}

func addRate(a, b *float64) *float64 {
	switch {
	case b == nil:
		return a
	case a == nil:
		v := *b
		return &v
	}
	v := *a + *b
	return &v
}
