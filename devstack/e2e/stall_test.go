package e2e

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/trawl/trawl/devstack/stack"
)

// tinySite is a hand-made site on one loopback address: a home page linking to pages
// /p1../pN and to one special page whose handler the test gives. It logs every request.
type tinySite struct {
	srv  *http.Server
	url  string
	mu   sync.Mutex
	reqs map[string]int
}

func startTinySite(t *testing.T, ip string, pages int, special string, h http.HandlerFunc) *tinySite {
	t.Helper()
	l, err := net.Listen("tcp", ip+":0")
	if err != nil {
		t.Fatalf("listen on %s: %v", ip, err)
	}
	s := &tinySite{url: "http://" + l.Addr().String(), reqs: map[string]int{}}
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.reqs[r.URL.Path]++
		s.mu.Unlock()
		switch {
		case r.URL.Path == "/":
			var b strings.Builder
			b.WriteString("<html><head><title>home</title></head><body>")
			if special != "" {
				fmt.Fprintf(&b, `<a href="%s">special</a> `, special)
			}
			for i := 1; i <= pages; i++ {
				fmt.Fprintf(&b, `<a href="/p%d">page %d</a> `, i, i)
			}
			b.WriteString("</body></html>")
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			_, _ = w.Write([]byte(b.String()))
		case r.URL.Path == special:
			h(w, r)
		case strings.HasPrefix(r.URL.Path, "/p"):
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			fmt.Fprintf(w, "<html><head><title>%s</title></head><body><p>text of %s</p></body></html>", r.URL.Path, r.URL.Path)
		default:
			http.NotFound(w, r)
		}
	})
	s.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = s.srv.Serve(l) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = s.srv.Shutdown(ctx)
	})
	return s
}

func (s *tinySite) count(path string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reqs[path]
}

// explain runs `trawlctl explain` against the stack.
func explain(t *testing.T, st *stack.Stack, u string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(binDir, "trawlctl"), "explain", u)
	cmd.Env = append(os.Environ(), "TRAWL_NATS_URL="+st.NATS().URL(), "TRAWL_REDIS_URL="+st.Redis().URL())
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("trawlctl explain %s: %v\n%s", u, err, out)
	}
	return string(out)
}

// A page JetStream can never store (its response header block makes the page message's
// headers larger than JetStream's 64 KiB limit) ends failed at once with its reason,
// within a bound far below its lease, while the rest of its host is crawled. Retried until
// its lease ran out, and again after each expiry, it would hold the host for minutes.
func TestUnstorablePageFailsAndTheHostGoesOn(t *testing.T) {
	t.Parallel()
	env := testEnv()
	vars := env.vars()
	vars["TRAWL_LEASE_TTL"] = "60s"
	vars["TRAWL_ACK_WAIT"] = "10s"
	vars["TRAWL_MAX_HEADER_BYTES"] = "512KiB"
	site := startTinySite(t, "127.0.0.1", 6, "/huge", func(w http.ResponseWriter, r *http.Request) {
		for i := range 20 {
			w.Header().Set("X-Filler-"+strconv.Itoa(i), strings.Repeat("x", 5000))
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = w.Write([]byte("<html><body>a page with a 100 KB header block</body></html>"))
	})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	st := startStack(t, ctx, stack.Options{Env: vars})
	start := time.Now()
	if err := st.Seed(ctx, []string{site.url + "/"}); err != nil {
		t.Fatal(err)
	}
	// The bound: half the lease. A page retried until its lease deadline misses it.
	const bound = 30 * time.Second
	wctx, wcancel := context.WithTimeout(ctx, bound)
	defer wcancel()
	p, err := st.WaitIdle(wctx, 250*time.Millisecond, nil)
	if err != nil {
		t.Fatalf("crawl did not end within %s (the lease is %s): %v\nexplain:\n%s", bound, vars["TRAWL_LEASE_TTL"], err, explain(t, st, site.url+"/huge"))
	}
	t.Logf("crawl ended in %s: %s", time.Since(start).Round(time.Millisecond), p)
	if p.Failed != 1 || p.Fetched != 7 {
		t.Errorf("fetched %d failed %d, want 7 fetched (home and six pages) and 1 failed", p.Fetched, p.Failed)
	}
	for i := 1; i <= 6; i++ {
		if n := site.count("/p" + strconv.Itoa(i)); n != 1 {
			t.Errorf("/p%d requested %d times, want 1", i, n)
		}
	}
	if n := site.count("/huge"); n != 1 {
		t.Errorf("/huge requested %d times, want once: its failure is permanent", n)
	}
	out := explain(t, st, site.url+"/huge")
	if !strings.Contains(out, "outcome    FAILED") || !strings.Contains(out, "err_code=10097") || !strings.Contains(out, "too-large") {
		t.Errorf("explain does not show the URL failed too-large with JetStream's answer:\n%s", out)
	}
	if v, ok, err := st.Proc("fetcher", 0).Metric(ctx, `trawl_fetcher_permanent_errors_total{reason="header-too-large",what="page"}`); err != nil || !ok || v != 1 {
		t.Errorf("trawl_fetcher_permanent_errors_total{what=page,reason=header-too-large} = %v (%v, %v), want 1", v, ok, err)
	}
}

// A URL during whose every attempt the fetcher holding it (told by its User-Agent) is
// SIGKILLed ends "failed:
// attempts exhausted" after 1 + TRAWL_MAX_RETRIES attempts, with its reason shown by
// trawlctl explain, while the other fetchers (the killed one restarted, as a supervisor
// would) finish the crawl.
func TestKilledOnEveryAttemptEndsAttemptsExhausted(t *testing.T) {
	t.Parallel()
	env := testEnv()
	vars := env.vars()
	// Short leases keep three expiries short; the request timeout is longer than the
	// test needs to find and kill the fetcher holding the hanging request.
	vars["TRAWL_LEASE_TTL"] = "8s"
	vars["TRAWL_ACK_WAIT"] = "4s"
	vars["TRAWL_FETCH_TIMEOUT"] = "2s"
	// One task per message and per fetcher: a killed fetcher holds the deadly URL alone, so
	// the other host's pages are never killed with it (tasks of several hosts dispatched
	// together would otherwise share its fate on every attempt).
	vars["TRAWL_TASK_BATCH"] = "1"
	vars["TRAWL_FETCH_CONCURRENCY"] = "1"
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	// Each fetcher sends its own User-Agent, so the site tells which one holds the request.
	agentOf := func(id string) string { return "trawl-stall/" + id }
	procEnv := map[string]map[string]string{}
	for i := range 3 {
		id := fmt.Sprintf("fetcher-%d", i)
		procEnv[id] = map[string]string{"TRAWL_USER_AGENT": agentOf(id)}
	}
	type hit struct {
		agent string
		done  chan struct{}
	}
	hits := make(chan hit, 8)
	site := startTinySite(t, "127.0.0.1", 5, "/deadly", func(w http.ResponseWriter, r *http.Request) {
		h := hit{agent: r.UserAgent(), done: make(chan struct{})}
		hits <- h
		// Hang until the client is gone (its fetcher killed) or the test has dealt with it.
		select {
		case <-r.Context().Done():
		case <-h.done:
		}
	})
	other := startTinySite(t, "127.0.0.2", 8, "", nil)

	st := startStack(t, ctx, stack.Options{Env: vars, Replicas: map[string]int{"fetcher": 3}, ProcEnv: procEnv})
	fetchers := map[string]*stack.Proc{}
	for _, p := range st.Procs() {
		if p.Name == "fetcher" {
			fetchers[agentOf(p.ID())] = p
		}
	}
	killed := make(chan string, 8)
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case h := <-hits:
				p, ok := fetchers[h.agent]
				if !ok {
					killed <- "error: a request for the deadly URL from an unknown agent " + strconv.Quote(h.agent)
					close(h.done)
					continue
				}
				if err := p.Kill(); err != nil {
					killed <- "error: kill " + p.ID() + ": " + err.Error()
					close(h.done)
					continue
				}
				close(h.done)
				killed <- p.ID()
				if err := p.Start(); err != nil {
					killed <- "error: restart " + p.ID() + ": " + err.Error()
					continue
				}
				if err := st.WaitReady(ctx, p); err != nil {
					killed <- "error: ready " + p.ID() + ": " + err.Error()
				}
			}
		}
	}()
	if err := st.Seed(ctx, []string{site.url + "/", other.url + "/"}); err != nil {
		t.Fatal(err)
	}
	// While a killed fetcher's lease waits out its TTL, the progress line names the URL
	// stuck, on its host, for how long.
	deadly := site.url + "/deadly"
	stuckLine := ""
	p, err := st.WaitIdle(ctx, 250*time.Millisecond, func(p stack.Progress) {
		for _, l := range p.Stuck {
			if l.URL == deadly && stuckLine == "" {
				stuckLine = p.String()
			}
		}
	})
	if err != nil {
		t.Fatalf("crawl did not finish: %v\nexplain:\n%s", err, explain(t, st, deadly))
	}
	close(killed)
	if !strings.Contains(stuckLine, "STUCK") || !strings.Contains(stuckLine, deadly+" (host 127.0.0.1") || !strings.Contains(stuckLine, "out for") {
		t.Errorf("no progress line named %s stuck; got %q", deadly, stuckLine)
	} else {
		t.Logf("stall named: %s", stuckLine[strings.Index(stuckLine, "STUCK"):])
	}
	var victims []string
	for k := range killed {
		if strings.HasPrefix(k, "error: ") {
			t.Errorf("%s", k)
			continue
		}
		victims = append(victims, k)
	}
	attempts := 1 + env.MaxRetries
	t.Logf("killed %v; %s", victims, p)
	if n := site.count("/deadly"); n != attempts || len(victims) != attempts {
		t.Errorf("/deadly requested %d times with %d fetchers killed, want %d of each (1 + TRAWL_MAX_RETRIES)", n, len(victims), attempts)
	}
	if p.Failed != 1 || p.Fetched != 1+5+1+8 {
		t.Errorf("fetched %d failed %d, want %d fetched and 1 failed", p.Fetched, p.Failed, 1+5+1+8)
	}
	// No other page was in flight on a killed fetcher: each was requested once.
	for i := 1; i <= 5; i++ {
		if n := site.count("/p" + strconv.Itoa(i)); n != 1 {
			t.Errorf("/p%d requested %d times, want 1", i, n)
		}
	}
	for i := 1; i <= 8; i++ {
		if n := other.count("/p" + strconv.Itoa(i)); n != 1 {
			t.Errorf("other host's /p%d requested %d times, want 1", i, n)
		}
	}
	out := explain(t, st, site.url+"/deadly")
	want := fmt.Sprintf("attempts exhausted after %d attempts", attempts)
	if !strings.Contains(out, "outcome    FAILED") || !strings.Contains(out, want) {
		t.Errorf("explain does not show the URL failed with %q:\n%s", want, out)
	}
}
