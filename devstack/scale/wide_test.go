//go:build scale

package scale

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/trawl/trawl/devstack/stack"
	"github.com/trawl/trawl/devstack/synthweb"
	"github.com/trawl/trawl/shared/durability"
)

// Settings of the wide crawl (make bench-scale-wide passes them through).
const (
	// envWide lists the webs' sizes in hosts, comma-separated, e.g. "20000,100000".
	envWide = "SCALE_WIDE"
	// envWidePages is the pages of each host.
	envWidePages = "SCALE_WIDE_PAGES"
	// envWideDelay is TRAWL_MIN_DELAY, the gap the web's log is judged against.
	envWideDelay = "SCALE_WIDE_DELAY"
	// envWideJSON is the file the results are written to.
	envWideJSON = "SCALE_WIDE_JSON"
)

// wideMaxDepth is deep enough for every page of a host (its pages chain within it).
const wideMaxDepth = 20

// WideResult is one wide crawl's figures.
type WideResult struct {
	Hosts       int     `json:"hosts"`
	Pages       int     `json:"pages_expected"`
	Fetched     int     `json:"pages_fetched"`
	Coverage    float64 `json:"coverage"`
	Problems    int     `json:"problems"`   // Expectation.Check's lines: never, twice, unexpected
	Overlaps    int     `json:"overlaps"`   // requests in flight at once to one host
	GapsShort   int     `json:"gaps_short"` // consecutive requests to a host closer than the delay
	Delay       string  `json:"min_delay"`
	Seconds     float64 `json:"seconds"` // the web's first request's start to its last's end
	PagesPerSec float64 `json:"pages_per_second"`
	// MaxActive is the most hosts holding a back queue at once; RedisAtMax Redis's
	// used_memory then, RedisBase before the seeds, so (RedisAtMax−RedisBase)/MaxActive is
	// Redis's memory per active host with its queued URLs.
	MaxActive  int64 `json:"max_active_hosts"`
	RedisBase  int64 `json:"redis_used_base"`
	RedisAtMax int64 `json:"redis_used_at_max_active"`
	RedisPeak  int64 `json:"redis_used_peak"`
	// HostState is the host:<host> keys' MEMORY USAGE after the crawl (kept
	// TRAWL_HOST_STATE_TTL), per host.
	HostStatePerHost float64 `json:"host_state_bytes_per_host"`
	// Families is Redis's memory by key family after the crawl, per host.
	Families map[string]Family `json:"families_after"`
	PeakRSS  map[string]int64  `json:"peak_rss"`
	PeakFDs  map[string]int    `json:"peak_fds"`
	Load     string            `json:"load_at_start"`
	LoadEnd  string            `json:"load_at_end"`
}

// TestWide crawls the synthetic web served on SCALE_WIDE host addresses (default 20,000;
// one listener on 0.0.0.0, each host its own 127.x address) with the whole pipeline and
// politeness on, to the end; judged from the web's own request log. See
// docs/cost-per-page.md "Scale".
func TestWide(t *testing.T) {
	var sizes []int
	for _, f := range strings.Split(cmpOr(os.Getenv(envWide), "20000"), ",") {
		n, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err != nil || n < 1 {
			t.Fatalf("%s=%q: want host counts, e.g. 20000,1e5", envWide, os.Getenv(envWide))
		}
		sizes = append(sizes, int(n))
	}
	pages, err := strconv.Atoi(cmpOr(os.Getenv(envWidePages), "10"))
	if err != nil || pages < 1 {
		t.Fatalf("%s=%q: want a count of at least 1", envWidePages, os.Getenv(envWidePages))
	}
	delay, err := time.ParseDuration(cmpOr(os.Getenv(envWideDelay), "1s"))
	if err != nil {
		t.Fatalf("%s: %v", envWideDelay, err)
	}
	bins := binaries(t)
	var results []WideResult
	for _, h := range sizes {
		t.Run(strconv.Itoa(h), func(t *testing.T) {
			r := runWide(t, bins, h, pages, delay)
			results = append(results, r)
			t.Logf("\n%s", wideTable([]WideResult{r}))
		})
	}
	fmt.Println(wideTable(results))
	writeJSON(t, os.Getenv(envWideJSON), results)
}

func runWide(t *testing.T, bins string, hosts, pages int, delay time.Duration) WideResult {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Minute)
	defer cancel()
	res := WideResult{Hosts: hosts, Delay: delay.String(), PeakRSS: map[string]int64{}, PeakFDs: map[string]int{}}
	web, err := synthweb.Start(ctx, synthweb.Config{Hosts: hosts, PagesPerHost: pages, Seed: 1, OneListener: true})
	if err != nil {
		t.Fatalf("synthetic web of %d hosts: %v", hosts, err)
	}
	defer web.Close()
	exp := web.Expected(wideMaxDepth)
	res.Pages = len(exp.Fetch)
	st, err := stack.Start(ctx, stack.Options{
		BinDir:  bins,
		Dir:     t.TempDir(),
		NATSBin: filepath.Join(bins, stack.NATSServer),
		Env: map[string]string{
			"TRAWL_ALLOW_CIDRS":  "127.0.0.0/8",
			"TRAWL_MIN_DELAY":    delay.String(),
			"TRAWL_MAX_DEPTH":    strconv.Itoa(wideMaxDepth),
			"TRAWL_ROBOTS_AGENT": synthweb.ProductToken,
			// Every host may hold a back queue at once: all of them active, which the
			// shipped 1024 would cap.
			"TRAWL_BACK_QUEUES": strconv.Itoa(hosts),
			"TRAWL_LOG_LEVEL":   "warn",
		},
		Durability: durability.EverySecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close(context.WithoutCancel(ctx))
	rdb := st.RedisClient()
	redisUsed := func() (used, peak int64) {
		info, err := rdb.Info(ctx, "memory").Result()
		if err != nil {
			t.Logf("info memory: %v", err)
			return 0, 0
		}
		return infoInt(info, "used_memory"), infoInt(info, "used_memory_peak")
	}
	res.RedisBase, _ = redisUsed()
	pids, err := st.PIDs()
	if err != nil {
		t.Fatal(err)
	}
	pids["web"] = os.Getpid()
	watch := func() {
		for id, pid := range pids {
			if m, err := ReadMem(pid); err == nil {
				res.PeakRSS[id] = max(res.PeakRSS[id], m.HWM)
			}
			if fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid)); err == nil {
				res.PeakFDs[id] = max(res.PeakFDs[id], len(fds))
			}
		}
	}

	res.Load = stack.LoadAverage()
	t.Logf("%d hosts × %d pages (%d expected), TRAWL_MIN_DELAY=%s (load %s)", hosts, pages, res.Pages, delay, res.Load)
	if err := st.Seed(ctx, web.Seeds()); err != nil {
		t.Fatal(err)
	}
	last := time.Now()
	p, err := st.WaitIdle(ctx, time.Second, func(p stack.Progress) {
		watch()
		if p.Hosts > res.MaxActive {
			res.MaxActive = p.Hosts
			res.RedisAtMax, _ = redisUsed()
		}
		if time.Since(last) > 15*time.Second {
			last = time.Now()
			t.Logf("fetched %d, queued %d, active hosts %d (load %s)", p.Fetched, p.Queued, p.Hosts, stack.LoadAverage())
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	watch()
	res.LoadEnd = stack.LoadAverage()
	_, res.RedisPeak = redisUsed()
	fam := map[string]Family{}
	if err := families(ctx, rdb, 1, int64(hosts), fam); err != nil {
		t.Fatal(err)
	}
	res.HostStatePerHost = fam["host state"].PerURL
	res.Families = fam

	if err := st.Close(ctx); err != nil {
		t.Logf("stack close: %v", err)
	}
	web.Close()
	reqs := web.Requests()
	rate := rateOfLog(reqs)
	res.Fetched, res.Seconds = rate.pages, rate.span.Seconds()
	res.PagesPerSec = float64(rate.pages) / rate.span.Seconds()
	problems := exp.Check(reqs, web.Origin, 3)
	res.Problems = len(problems)
	counts := synthweb.CountByURL(reqs, web.Origin)
	var got int
	for u := range exp.Fetch {
		if counts[u] > 0 {
			got++
		}
	}
	res.Coverage = float64(got) / float64(len(exp.Fetch))
	res.Overlaps = len(synthweb.Overlaps(reqs))
	gaps := synthweb.Gaps(reqs, func(string) time.Duration { return delay })
	res.GapsShort = len(gaps)
	t.Logf("frontier: fetched %d, failed %d", p.Fetched, p.Failed)
	for i, pr := range problems {
		if i == 10 {
			t.Errorf("… and %d more", len(problems)-10)
			break
		}
		t.Error(pr)
	}
	for i, v := range gaps {
		if i == 10 {
			break
		}
		t.Errorf("politeness: %s", v)
	}
	if res.Coverage < 1 {
		t.Errorf("coverage %.6f: %d of %d pages fetched", res.Coverage, got, len(exp.Fetch))
	}
	return res
}

// logRate is what the web's log says of a crawl: pages (robots.txt aside) over the span
// from the first request's start to the last one's end.
type logRate struct {
	pages int
	span  time.Duration
}

func rateOfLog(reqs []synthweb.Request) logRate {
	var r logRate
	if len(reqs) == 0 {
		return r
	}
	for _, q := range reqs {
		if q.Path != "/robots.txt" {
			r.pages++
		}
	}
	r.span = synthweb.Span(reqs)
	return r
}

func wideTable(rs []WideResult) string {
	var sb strings.Builder
	sb.WriteString("| hosts | pages | coverage | overlaps | gaps < delay | s | pages/s | max active hosts | Redis B/active host | host state B/host | scheduler RSS MB | fetcher RSS MB | parser RSS MB | redis RSS MB | NATS RSS MB | web RSS MB | fetcher fds | web fds | load start / end |\n")
	sb.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	mb := func(r WideResult, id string) string { return fmt.Sprintf("%.0f", float64(r.PeakRSS[id])/1e6) }
	for _, r := range rs {
		perHost := 0.0
		if r.MaxActive > 0 {
			perHost = float64(r.RedisAtMax-r.RedisBase) / float64(r.MaxActive)
		}
		fmt.Fprintf(&sb, "| %d | %d | %.4f | %d | %d | %.0f | %.0f | %d | %.0f | %.0f | %s | %s | %s | %s | %s | %s | %d | %d | %s / %s |\n",
			r.Hosts, r.Fetched, r.Coverage, r.Overlaps, r.GapsShort, r.Seconds, r.PagesPerSec, r.MaxActive, perHost, r.HostStatePerHost,
			mb(r, "scheduler-0"), mb(r, "fetcher-0"), mb(r, "parser-0"), mb(r, "redis"), mb(r, "nats"), mb(r, "web"), r.PeakFDs["fetcher-0"], r.PeakFDs["web"], r.Load, r.LoadEnd)
	}
	return sb.String()
}
