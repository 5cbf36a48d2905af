package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/trawl/trawl/devstack/stack"
	"github.com/trawl/trawl/devstack/synthweb"
)

// BenchmarkCrawl measures whole-pipeline throughput: the four real services crawl a
// synthetic web of many ordinary hosts from their home pages until the crawl is idle.
// Politeness stays on (one request per host at a time, a small per-host delay), so the
// figure is what a polite crawl of a wide web achieves on this machine.
func BenchmarkCrawl(b *testing.B) {
	for _, fetchers := range []int{1, 2} {
		b.Run(fmt.Sprintf("fetchers=%d", fetchers), func(b *testing.B) {
			var pages int64
			var took time.Duration
			for range b.N {
				p, d := benchCrawl(b, fetchers)
				pages += p
				took += d
			}
			b.ReportMetric(float64(pages)/took.Seconds(), "pages/s")
			b.ReportMetric(float64(pages)/float64(b.N), "pages/crawl")
		})
	}
}

func benchCrawl(b *testing.B, fetchers int) (int64, time.Duration) {
	b.Helper()
	b.StopTimer()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	wcfg := synthweb.DefaultConfig()
	wcfg.Special = false
	wcfg.Hosts = 200
	wcfg.PagesPerHost = 40
	web, err := synthweb.Start(ctx, wcfg)
	if err != nil {
		b.Fatal(err)
	}
	defer web.Close()
	st, err := stack.Start(ctx, stack.Options{
		BinDir:   binDir,
		Dir:      b.TempDir(),
		Replicas: map[string]int{"fetcher": fetchers},
		Env: map[string]string{
			"TRAWL_ALLOW_CIDRS":  "127.0.0.0/8",
			"TRAWL_MIN_DELAY":    "20ms",
			"TRAWL_DELAY_FACTOR": "2",
			"TRAWL_MAX_DEPTH":    "10",
			"TRAWL_LOG_LEVEL":    "warn",
		},
	})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close(context.WithoutCancel(ctx))
	b.StartTimer()
	start := time.Now()
	if err := st.Seed(ctx, web.Seeds()); err != nil {
		b.Fatal(err)
	}
	p, err := st.WaitIdle(ctx, 100*time.Millisecond, nil)
	if err != nil {
		b.Fatal(err)
	}
	// The idle check needs two quiet snapshots; take the time of the first.
	took := time.Since(start) - 100*time.Millisecond
	b.StopTimer()
	if p.Fetched < int64(wcfg.Hosts*wcfg.PagesPerHost)/2 {
		b.Fatalf("crawl fetched only %d pages", p.Fetched)
	}
	return p.Fetched, took
}
