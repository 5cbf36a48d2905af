package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"
	"golang.org/x/net/html"

	"github.com/trawl/trawl/devstack/stack"
	"github.com/trawl/trawl/devstack/synthweb"
	"github.com/trawl/trawl/shared/topology"
)

// extractLinks tokenizes an HTML body and returns its <a href> links that may be
// followed, resolved against the page (or its <base href>), without fragments.
func extractLinks(r io.Reader, page *url.URL) []string {
	base := page
	var links []string
	z := html.NewTokenizer(r)
	for {
		switch z.Next() {
		case html.ErrorToken:
			return links
		case html.StartTagToken, html.SelfClosingTagToken:
			name, hasAttr := z.TagName()
			if !hasAttr || len(name) > 4 {
				continue
			}
			tag := string(name)
			if tag != "a" && tag != "base" {
				continue
			}
			var href string
			nofollow := false
			for {
				k, v, more := z.TagAttr()
				switch string(k) {
				case "href":
					href = string(v)
				case "rel":
					nofollow = strings.Contains(strings.ToLower(string(v)), "nofollow")
				}
				if !more {
					break
				}
			}
			if href == "" {
				continue
			}
			u, err := base.Parse(strings.TrimSpace(href))
			if err != nil {
				continue
			}
			if tag == "base" {
				base = u
				continue
			}
			if nofollow || (u.Scheme != "http" && u.Scheme != "https") {
				continue
			}
			u.Fragment, u.RawFragment = "", ""
			links = append(links, u.String())
		}
	}
}

// trafficTap counts every message through the NATS server by kind: publishes to each
// stream's subjects with their deliveries to consumers, acks, pull requests, other
// JetStream API calls, and inbox traffic (publish acks and API replies).
type trafficTap struct {
	nc     *nats.Conn
	sub    *nats.Subscription
	mu     sync.Mutex
	by     map[string]*trafficCount
	events []hostEvent // fetch tasks and outcomes, for the host cycle breakdown
	// When each URL first appeared published in crawl.discovered (and from which page),
	// crawl.frontier and crawl.fetch: the URL's way through the pipeline.
	discovered, frontier, task map[string]time.Time
	source                     map[string]string
}

// hostEvent is a fetch task or an outcome seen by the tap: published (by the scheduler or
// a fetcher) or delivered (to a fetcher or the scheduler).
type hostEvent struct {
	host string
	url  string
	kind string // "task published", "task delivered", "outcome published", "outcome delivered"
	at   time.Time
}

type trafficCount struct{ msgs, bytes int64 }

func startTap(st *stack.Stack) (*trafficTap, error) {
	url := st.JetStream().Conn().ConnectedUrl()
	nc, err := nats.Connect(url, nats.Name("trawl-bench-tap"))
	if err != nil {
		return nil, fmt.Errorf("tap: %w", err)
	}
	t := &trafficTap{nc: nc, by: map[string]*trafficCount{},
		discovered: map[string]time.Time{}, frontier: map[string]time.Time{}, task: map[string]time.Time{}, source: map[string]string{}}
	t.sub, err = nc.Subscribe(">", func(m *nats.Msg) {
		n := int64(len(m.Data) + len(m.Subject) + len(m.Reply))
		for k, vs := range m.Header {
			for _, v := range vs {
				n += int64(len(k) + len(v) + 4)
			}
		}
		kind := trafficKind(m.Subject)
		evs := taskEvents(m)
		batch := batchOf(m)
		t.mu.Lock()
		for _, ev := range evs {
			t.events = append(t.events, ev)
			if ev.kind == "task published" {
				firstSeen(t.task, ev.url, ev.at)
			}
		}
		if batch.at != (time.Time{}) {
			seen := t.frontier
			if batch.discovered {
				seen = t.discovered
			}
			for _, g := range batch.groups() {
				for _, u := range g.URLs {
					if firstSeen(seen, u.URL, batch.at) && batch.discovered {
						t.source[u.URL] = g.Source
					}
				}
			}
		}
		c := t.by[kind]
		if c == nil {
			c = &trafficCount{}
			t.by[kind] = c
		}
		c.msgs++
		c.bytes += n
		t.mu.Unlock()
	})
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("tap: %w", err)
	}
	_ = t.sub.SetPendingLimits(-1, -1)
	if err := nc.Flush(); err != nil {
		nc.Close()
		return nil, fmt.Errorf("tap: %w", err)
	}
	return t, nil
}

// taskEvents are the host events of a fetch task or outcome message: one per task or
// outcome it holds (a batch, or a single one). A publish carries a reply inbox for its
// acknowledgement; a delivery carries the consumer's $JS.ACK reply.
func taskEvents(m *nats.Msg) []hostEvent {
	var what string
	switch {
	case strings.HasPrefix(m.Subject, "crawl.fetch."):
		what = "task"
	case strings.HasPrefix(m.Subject, "crawl.fetched."):
		what = "outcome"
	default:
		return nil
	}
	var how string
	switch {
	case strings.HasPrefix(m.Reply, "$JS.ACK."):
		how = " delivered"
	case m.Reply != "":
		how = " published"
	default:
		return nil
	}
	type entry struct {
		Host string `json:"host"`
		URL  string `json:"url"`
	}
	var v struct {
		entry
		Tasks    []entry `json:"tasks"`
		Outcomes []entry `json:"outcomes"`
	}
	if json.Unmarshal(m.Data, &v) != nil {
		return nil
	}
	all := append(append([]entry{}, v.Tasks...), v.Outcomes...)
	if v.URL != "" {
		all = append(all, v.entry)
	}
	now := time.Now()
	evs := make([]hostEvent, 0, len(all))
	for _, e := range all {
		// The web logs hosts by IP; the URL has it with the port.
		host := e.Host
		if u, err := url.Parse(e.URL); err == nil && u.Hostname() != "" {
			host = u.Hostname()
		}
		evs = append(evs, hostEvent{host: host, url: e.URL, kind: what + how, at: now})
	}
	return evs
}

func firstSeen(m map[string]time.Time, url string, at time.Time) bool {
	if _, ok := m[url]; ok {
		return false
	}
	m[url] = at
	return true
}

// tappedBatch is a published crawl.discovered or crawl.frontier batch, of either version:
// one link group (source and urls) or several (groups).
type tappedBatch struct {
	at         time.Time
	discovered bool
	tappedGroup
	Groups []tappedGroup `json:"groups"`
}

type tappedGroup struct {
	Source string `json:"source"`
	URLs   []struct {
		URL string `json:"url"`
	} `json:"urls"`
}

func (b tappedBatch) groups() []tappedGroup {
	if len(b.Groups) > 0 {
		return b.Groups
	}
	return []tappedGroup{b.tappedGroup}
}

func batchOf(m *nats.Msg) tappedBatch {
	var b tappedBatch
	switch {
	case strings.HasPrefix(m.Reply, "$JS.ACK.") || m.Reply == "":
		return b // a delivery, or not a JetStream publish
	case m.Subject == topology.SubjectDiscovered:
		b.discovered = true
	case strings.HasPrefix(m.Subject, "crawl.frontier."):
	default:
		return b
	}
	if json.Unmarshal(m.Data, &b) != nil {
		return tappedBatch{}
	}
	b.at = time.Now()
	return b
}

// urlReport follows every fetched URL from the end of the request for the page that
// linked to it: until its link was published to crawl.discovered (fetcher, pages stream,
// parser), to crawl.frontier (dedup), as a fetch task (scheduler: includes waiting behind
// the host's earlier URLs, one request per host), and until its own request started.
func urlReport(reqs []synthweb.Request, web func(host string) string, t *trafficTap) string {
	ends := map[string]time.Time{}
	starts := map[string]time.Time{}
	for _, r := range reqs {
		u := web(r.Host) + r.Path
		if _, ok := starts[u]; !ok {
			starts[u] = r.Start
		}
		ends[u] = r.End
	}
	names := []string{"source page's request end → link in crawl.discovered", "→ crawl.frontier", "→ fetch task", "→ request start"}
	spans := make([][]time.Duration, len(names))
	n := 0
	for u, d := range t.discovered {
		e, ok1 := ends[t.source[u]]
		f, ok2 := t.frontier[u]
		k, ok3 := t.task[u]
		r, ok4 := starts[u]
		if !ok1 || !ok2 || !ok3 || !ok4 {
			continue
		}
		n++
		for i, x := range []time.Duration{d.Sub(e), f.Sub(d), k.Sub(f), r.Sub(k)} {
			spans[i] = append(spans[i], x)
		}
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "a URL's way, %d URLs (tap clock):\n", n)
	tw := tabwriter.NewWriter(&sb, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "stage\tp50\tp90\t\n")
	for i, name := range names {
		d := spans[i]
		if len(d) == 0 {
			continue
		}
		slices.Sort(d)
		fmt.Fprintf(tw, "%s\t%s\t%s\t\n", name, ms(d[len(d)/2]), ms(d[len(d)*9/10]))
	}
	tw.Flush()
	return sb.String()
}

// cycleReport splits the time between two requests to one host into the stages a URL
// passes through, from the tap's events and the web's log: for each request, the first
// outcome published after it ends, that outcome's delivery, the next task published for
// the host, its delivery, and the next request's start. Medians over all complete cycles.
func cycleReport(reqs []synthweb.Request, events []hostEvent) string {
	type ev struct {
		kind string
		at   time.Time
	}
	byHost := map[string][]ev{}
	for _, r := range reqs {
		byHost[r.Host] = append(byHost[r.Host], ev{"request start", r.Start}, ev{"request end", r.End})
	}
	for _, e := range events {
		byHost[e.host] = append(byHost[e.host], ev{e.kind, e.at})
	}
	stages := []string{"outcome published", "outcome delivered", "task published", "task delivered", "request start"}
	spans := make([][]time.Duration, len(stages))
	cycles := 0
	for _, evs := range byHost {
		slices.SortStableFunc(evs, func(a, b ev) int { return a.at.Compare(b.at) })
		for i, e := range evs {
			if e.kind != "request end" {
				continue
			}
			prev, j := e.at, i+1
			var got []time.Duration
			for _, want := range stages {
				for j < len(evs) && evs[j].kind != want {
					if evs[j].kind == "request start" {
						j = len(evs) // the next request came first: not a plain cycle
						break
					}
					j++
				}
				if j >= len(evs) {
					break
				}
				got = append(got, evs[j].at.Sub(prev))
				prev = evs[j].at
				j++
			}
			if len(got) == len(stages) {
				cycles++
				for k, d := range got {
					spans[k] = append(spans[k], d)
				}
			}
		}
	}
	var sb strings.Builder
	tw := tabwriter.NewWriter(&sb, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(&sb, "host cycle, request end to next request start, %d cycles (medians; tap clock):\n", cycles)
	fmt.Fprintf(tw, "stage (time until)\tp50\tp90\t\n")
	from := "request end"
	for k, name := range stages {
		d := spans[k]
		if len(d) == 0 {
			continue
		}
		slices.Sort(d)
		fmt.Fprintf(tw, "%s → %s\t%s\t%s\t\n", from, name, ms(d[len(d)/2]), ms(d[len(d)*9/10]))
		from = name
	}
	tw.Flush()
	return sb.String()
}

func trafficKind(subj string) string {
	tok := strings.Split(subj, ".")
	switch {
	case strings.HasPrefix(subj, "$JS.ACK."):
		if len(tok) > 3 {
			return "ack " + tok[2] + "/" + tok[3]
		}
	case strings.HasPrefix(subj, "$JS.API.CONSUMER.MSG.NEXT."):
		if len(tok) > 6 {
			return "pull " + tok[5] + "/" + tok[6]
		}
	case strings.HasPrefix(subj, "$JS.API."):
		return "js-api " + strings.Join(tok[2:min(len(tok), 4)], ".")
	case strings.HasPrefix(subj, "_INBOX."):
		return "inbox (publish acks, API replies)"
	case strings.HasPrefix(subj, "$JS.EVENT.") || strings.HasPrefix(subj, "$SYS."):
		return "system"
	case len(tok) >= 2:
		// A ">" subscriber sees a JetStream delivery under the message's own subject too.
		return tok[0] + "." + tok[1] + " (publishes + deliveries)"
	}
	return "other"
}

func (t *trafficTap) stop() {
	t.nc.Close()
}

func (t *trafficTap) snapshot() map[string]trafficCount {
	_ = t.nc.Flush()
	t.mu.Lock()
	defer t.mu.Unlock()
	m := map[string]trafficCount{}
	for k, v := range t.by {
		m[k] = *v
	}
	return m
}

// startProfiles takes a CPU profile of every service and of NATS in the background; the
// returned wait blocks until those are written and then takes allocation profiles.
func startProfiles(ctx context.Context, b *testing.B, st *stack.Stack, natsPprof, dir string) (wait func()) {
	b.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		b.Fatal(err)
	}
	secs := 20
	if v := os.Getenv(envBenchSeconds); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			b.Fatalf("%s=%q: want whole seconds", envBenchSeconds, v)
		}
		secs = n
	}
	targets := map[string]string{"nats": natsPprof}
	for _, p := range st.Procs() {
		targets[p.ID()] = p.HTTPAddr
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []string
	for id, addr := range targets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := saveURL(ctx, fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", addr, secs), filepath.Join(dir, "cpu-"+id+".pprof")); err != nil {
				mu.Lock()
				errs = append(errs, err.Error())
				mu.Unlock()
			}
		}()
	}
	return func() {
		wg.Wait()
		if len(errs) > 0 {
			b.Fatalf("profiles: %s", strings.Join(errs, "; "))
		}
		for id, addr := range targets {
			if err := saveURL(ctx, "http://"+addr+"/debug/pprof/allocs", filepath.Join(dir, "allocs-"+id+".pprof")); err != nil {
				b.Fatal(err)
			}
		}
	}
}

func saveURL(ctx context.Context, u, path string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("get %s: %w", u, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("get %s: %s (does the binary serve TRAWL_PPROF?)", u, resp.Status)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// trafficReport writes, per page fetched: messages stored per stream, NATS traffic by
// kind, and Redis calls and time per command; then where a host's cycle spends its time.
func trafficReport(ctx context.Context, b *testing.B, st *stack.Stack, tap *trafficTap, seqs0 map[string]uint64, web *synthweb.Web, pages int, dir string) string {
	reqs := web.Requests()
	b.Helper()
	var sb strings.Builder
	pp := float64(pages)
	p, err := st.Progress(ctx)
	if err != nil {
		b.Fatal(err)
	}
	tw := tabwriter.NewWriter(&sb, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(&sb, "\nper page, %d pages:\n", pages)
	fmt.Fprintf(tw, "stream\tstored msgs/page\t\n")
	for _, name := range []string{topology.StreamDiscovered, topology.StreamFrontier, topology.StreamFetch, topology.StreamFetched, topology.StreamPages, topology.StreamDocs} {
		fmt.Fprintf(tw, "%s\t%.2f\t\n", name, float64(p.Seqs[name]-seqs0[name])/pp)
	}
	tw.Flush()

	tw = tabwriter.NewWriter(&sb, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "NATS traffic\tmsgs/page\tbytes/page\tbytes/msg\t\n")
	traffic := tap.snapshot()
	kinds := make([]string, 0, len(traffic))
	for k := range traffic {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	var tm, tb int64
	for _, k := range kinds {
		c := traffic[k]
		tm += c.msgs
		tb += c.bytes
		fmt.Fprintf(tw, "%s\t%.2f\t%.0f\t%.0f\t\n", k, float64(c.msgs)/pp, float64(c.bytes)/pp, float64(c.bytes)/float64(max(c.msgs, 1)))
	}
	fmt.Fprintf(tw, "total\t%.2f\t%.0f\t\t\n", float64(tm)/pp, float64(tb)/pp)
	tw.Flush()

	info, err := st.RedisClient().Info(ctx, "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	tw = tabwriter.NewWriter(&sb, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "Redis command\tcalls/page\tµs/page\tµs/call\t\n")
	sc := bufio.NewScanner(strings.NewReader(info))
	type cmdStat struct {
		name        string
		calls, usec float64
	}
	var stats []cmdStat
	for sc.Scan() {
		line, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "cmdstat_")
		if !ok {
			continue
		}
		name, rest, _ := strings.Cut(line, ":")
		s := cmdStat{name: name}
		for _, kv := range strings.Split(rest, ",") {
			k, v, _ := strings.Cut(kv, "=")
			f, _ := strconv.ParseFloat(v, 64)
			switch k {
			case "calls":
				s.calls = f
			case "usec":
				s.usec = f
			}
		}
		stats = append(stats, s)
	}
	sort.Slice(stats, func(i, j int) bool { return stats[i].usec > stats[j].usec })
	for _, s := range stats {
		fmt.Fprintf(tw, "%s\t%.2f\t%.1f\t%.1f\t\n", s.name, s.calls/pp, s.usec/pp, s.usec/max(s.calls, 1))
	}
	tw.Flush()
	tap.mu.Lock()
	events := slices.Clone(tap.events)
	tap.mu.Unlock()
	sb.WriteString(cycleReport(reqs, events))
	tap.mu.Lock()
	sb.WriteString(urlReport(reqs, web.Origin, tap))
	tap.mu.Unlock()
	if err := os.WriteFile(filepath.Join(dir, "traffic.txt"), []byte(sb.String()), 0o644); err != nil {
		b.Fatal(err)
	}
	return sb.String()
}

// startLine holds crawls run side by side until every one is ready to seed, so that they
// crawl over the same seconds of the machine. Without it the crawl whose stack starts
// later (loading 10,000 rules takes a second or two) spends its last seconds alone on the
// machine, where every stage takes its messages in smaller batches: its CPU per page read
// about 1.5% higher with the rules in Redis but in force nowhere.
type startLine struct {
	left atomic.Int32
	all  chan struct{}
}

func newStartLine(n int) *startLine {
	l := &startLine{all: make(chan struct{})}
	l.left.Store(int32(n))
	return l
}

// lane is one crawl's place on the line: it arrives once, by ready or leave.
func (l *startLine) lane() *startLane { return &startLane{line: l} }

type startLane struct {
	line *startLine
	once sync.Once
}

func (s *startLane) arrive() {
	s.once.Do(func() {
		if s.line.left.Add(-1) == 0 {
			close(s.line.all)
		}
	})
}

// ready says this crawl can seed and waits for the others; nil waits for none.
func (s *startLane) ready(ctx context.Context) error {
	if s == nil {
		return nil
	}
	s.arrive()
	select {
	case <-s.line.all:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("waiting for the crawl beside this one to be ready to seed: %w", ctx.Err())
	}
}

// leave gives up this crawl's place, so that a crawl that failed does not hold the others.
func (s *startLane) leave() {
	if s != nil {
		s.arrive()
	}
}
