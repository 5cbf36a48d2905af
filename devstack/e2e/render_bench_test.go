package e2e

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/trawl/trawl/devstack/stack"
	"github.com/trawl/trawl/devstack/synthweb"
)

// BenchmarkRender crawls a web whose app has 40 script-only pages with one renderer and
// reports rendered pages/s per renderer, CPU-ms per rendered page of the renderer and its
// browser (the renderer's process group: Chromium's processes included) and the group's
// peak resident memory. The app's pages are on one host, so the rate is bounded by that
// host's politeness (TRAWL_MIN_DELAY 20ms here, each page asking for its JSON) as well as
// by the browser. Peak memory sums the group's resident sets, so memory Chromium's processes
// share counts once per process: an upper bound. The cost of rendering to pages that are not rendered is
// services/parser BenchmarkProcessNotRendered (the parser is the only stage whose work per
// page changes).
func BenchmarkRender(b *testing.B) {
	for range b.N {
		benchRender(b)
	}
}

func benchRender(b *testing.B) {
	b.StopTimer()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	web, err := synthweb.Start(ctx, synthweb.Config{Hosts: 1, PagesPerHost: 2, LinksPerPage: 2, SPA: true, Render: true, SPAPages: benchSPAPages})
	if err != nil {
		b.Fatal(err)
	}
	defer web.Close()
	env := map[string]string{
		"TRAWL_ALLOW_CIDRS":  "127.0.0.0/8",
		"TRAWL_MIN_DELAY":    "20ms",
		"TRAWL_DELAY_FACTOR": "0",
		"TRAWL_MAX_DEPTH":    "12",
		"TRAWL_ROBOTS_AGENT": synthweb.ProductToken,
		"TRAWL_LOG_LEVEL":    "warn",
		"TRAWL_RENDER":       "auto",
	}
	st, err := stack.Start(ctx, stack.Options{BinDir: binDir, Dir: b.TempDir(), Env: env, Replicas: map[string]int{stack.Renderer: 1}})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close(context.WithoutCancel(ctx))
	pid := st.Proc(stack.Renderer, 0).PID()
	cpu0, _ := groupStats(pid)
	var peak atomic.Int64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			if _, rss := groupStats(pid); rss > peak.Load() {
				peak.Store(rss)
			}
			select {
			case <-stop:
				return
			case <-t.C:
			}
		}
	}()
	start := time.Now()
	b.StartTimer()
	if err := st.Seed(ctx, web.Seeds()); err != nil {
		b.Fatal(err)
	}
	if _, err := st.WaitIdle(ctx, 100*time.Millisecond, nil); err != nil {
		b.Fatalf("crawl did not finish: %v", err)
	}
	b.StopTimer()
	took := time.Since(start)
	close(stop)
	<-sampled
	cpu1, _ := groupStats(pid)
	rendered, ok, err := st.Proc(stack.Renderer, 0).Metric(ctx, `trawl_renderer_pages_total{result="rendered"}`)
	if err != nil || !ok {
		// The metric's name is the renderer's; count the app's pages instead.
		rendered = float64(benchSPAPages + 1)
	}
	if rendered == 0 {
		b.Fatal("nothing was rendered")
	}
	b.ReportMetric(rendered/took.Seconds(), "rendered-pages/s/renderer")
	b.ReportMetric(float64((cpu1-cpu0).Milliseconds())/rendered, "renderer-cpu-ms/rendered-page")
	b.ReportMetric(float64(peak.Load())/(1<<20), "renderer-peak-rss-MB")
	b.Logf("%v rendered pages in %s; renderer and browser %s CPU, peak RSS %d MB", rendered, took.Round(time.Millisecond), cpu1-cpu0, peak.Load()>>20)
}

// benchSPAPages is the app's pages besides its home page in BenchmarkRender.
const benchSPAPages = 40

// groupStats is the CPU time (children waited for included) and resident memory of every
// process in process group pgid.
func groupStats(pgid int) (cpu time.Duration, rss int64) {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) < 22 || f[2] != strconv.Itoa(pgid) {
			continue
		}
		var t int64
		for _, k := range []int{11, 12, 13, 14} { // utime, stime, cutime, cstime
			n, _ := strconv.ParseInt(f[k], 10, 64)
			t += n
		}
		pages, _ := strconv.ParseInt(f[21], 10, 64)
		cpu += time.Duration(t) * 10 * time.Millisecond
		rss += pages * int64(os.Getpagesize())
	}
	return cpu, rss
}
