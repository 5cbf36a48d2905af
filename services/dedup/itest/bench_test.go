package itest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/trawl/trawl/services/dedup/internal/bloom"
	"github.com/trawl/trawl/services/dedup/internal/cache"
	"github.com/trawl/trawl/services/dedup/internal/seen"
	"github.com/trawl/trawl/shared/testwait"
)

// defaultParams are the production defaults (12 MB filter, k = 7).
var defaultParams = bloom.Params{Capacity: 10_000_000, FPRate: 0.01, KeyBits: 1 << 31}

// BenchmarkDedupCheck measures seen-test throughput against a real redis-server in
// batches of 1000 URLs: the bare filter, the memoised store the service uses (with the
// Forget that follows each published batch), for new and for already-seen URLs, and the
// store behind the in-process cache (seen.Cached, the service's path) for all-new URLs and
// for a mix of 50 % repeats. Repeats are drawn from the last 20,000 URLs, the locality of
// links within a site; they make the cache worth having. Besides checks/s it reports
// redis-server's own CPU time per check, which a busy shared machine moves far less.
func BenchmarkDedupCheck(b *testing.B) {
	const batch = 1000
	cases := []struct {
		name    string
		perMsg  int     // URLs per input message (store and cached only)
		bare    bool    // bloom.TestAndSet without memo
		preseen bool    // URLs already in the filter
		cached  int     // through seen.Cached with a cache of this size (0: no cache)
		via     bool    // through seen.Cached at all
		repeat  float64 // fraction of URLs that repeat a recent one
		keep    bool    // messages keep an entry per URL (seen.Message.Keep, TRAWL_FSYNC=1s)
	}{
		{name: "bloom/new", bare: true},
		{name: "bloom/seen", bare: true, preseen: true},
		{name: "seen/new/1x1000", perMsg: 1000},
		{name: "seen/new/20x50", perMsg: 50},
		{name: "seen/new/20x50/keep", perMsg: 50, keep: true},
		{name: "seen/seen/20x50", perMsg: 50, preseen: true},
		{name: "seen/seen/20x50/keep", perMsg: 50, preseen: true, keep: true},
		{name: "cached/new/20x50", perMsg: 50, via: true, cached: 50_000},
		{name: "cached/mix50/20x50", perMsg: 50, via: true, cached: 50_000, repeat: 0.5},
		{name: "uncached/mix50/20x50", perMsg: 50, via: true, repeat: 0.5},
		{name: "uncached/mix50/20x50/keep", perMsg: 50, via: true, repeat: 0.5, keep: true},
	}
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			_, c := startRedis(b)
			ctx := testwait.Context(b)
			f := newFilter(b, c, "trawl", defaultParams)
			store := seen.New(c, f, "trawl")
			checker := &seen.Cached{Store: store}
			if tc.cached > 0 {
				checker.Cache = cache.New(tc.cached)
			}
			pool := mixedURLs(b.N*batch, tc.repeat)
			if tc.preseen {
				for i := 0; i < len(pool); i += 10_000 {
					if _, err := f.TestAndSet(ctx, c, pool[i:min(i+10_000, len(pool))]); err != nil {
						b.Fatal(err)
					}
				}
			}
			var msgs []seen.Message
			var ids []string
			var lookups, hits int
			cpu0 := redisCPU(b, c)
			b.ResetTimer()
			for i := range b.N {
				us := pool[i*batch : (i+1)*batch]
				if tc.bare {
					if _, err := f.TestAndSet(ctx, c, us); err != nil {
						b.Fatal(err)
					}
					continue
				}
				msgs, ids = msgs[:0], ids[:0]
				for j := 0; j < batch; j += tc.perMsg {
					m := seen.Message{ID: fmt.Sprintf("CRAWL_DISCOVERED:%d", i*batch+j)}
					for k, u := range us[j : j+tc.perMsg] {
						m.URLs = append(m.URLs, seen.URL{Index: k, URL: u})
					}
					if tc.keep {
						// About what dedup keeps of a link: its page, its URL and a few fields.
						src := "http://source.bench.test/some/page/" + m.ID
						m.Keep = func(k int) []byte { return []byte(src + "\x00" + us[j+k] + "\x00\x03\x00\x00\x00\x04link") }
					}
					msgs = append(msgs, m)
				}
				if !tc.via {
					if _, err := store.TestAndSet(ctx, msgs); err != nil {
						b.Fatal(err)
					}
					for _, m := range msgs {
						ids = append(ids, m.ID)
					}
				} else {
					res, err := checker.Check(ctx, msgs)
					if err != nil {
						b.Fatal(err)
					}
					lookups, hits = lookups+res.Lookups, hits+res.Hits
					for k, m := range msgs {
						if res.Asked[k] {
							ids = append(ids, m.ID)
						}
					}
				}
				if err := store.Forget(ctx, ids); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "checks/s")
			// Redis's own CPU time per check: on a shared machine it moves far less with
			// the load than checks/s does.
			b.ReportMetric((redisCPU(b, c)-cpu0)*1e6/float64(b.N*batch), "redis-µs/check")
			if lookups > 0 {
				b.ReportMetric(float64(hits)/float64(lookups), "hit-ratio")
			}
		})
	}
}

// mixedURLs returns n URLs of which about a fraction repeat one of the last 20,000 distinct
// URLs (uniformly), the others being new. The stream is the same for every run.
func mixedURLs(n int, repeat float64) []string {
	const window = 20_000
	rng := rand.New(rand.NewPCG(1, 2))
	out := make([]string, 0, n)
	fresh := urls("bench", 0, n)
	next := 0
	for len(out) < n {
		if next > 0 && rng.Float64() < repeat {
			out = append(out, fresh[next-1-rng.IntN(min(next, window))])
			continue
		}
		out = append(out, fresh[next])
		next++
	}
	return out
}

// BenchmarkDedupFalsePositive fills a filter (n = 100,000, p = 0.01) to capacity and
// reports the measured false-positive rate divided by the configured one ("fp-ratio",
// 1.0 = exactly on target).
func BenchmarkDedupFalsePositive(b *testing.B) {
	_, c := startRedis(b)
	var sum float64
	for i := range b.N {
		f := newFilter(b, c, fmt.Sprintf("fp%d", i), bloom.Params{Capacity: 100_000, FPRate: 0.01, KeyBits: 1 << 31})
		rate, _ := measureFP(b, c, f)
		sum += rate / f.FPRate
	}
	b.ReportMetric(sum/float64(b.N), "fp-ratio")
}

// redisCPU returns the CPU seconds (user + system) the redis-server has used so far.
func redisCPU(b *testing.B, c *redis.Client) float64 {
	b.Helper()
	info, err := c.Info(context.Background(), "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	var total float64
	for _, line := range strings.Split(info, "\n") {
		name, val, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && (name == "used_cpu_user" || name == "used_cpu_sys") {
			v, err := strconv.ParseFloat(val, 64)
			if err != nil {
				b.Fatalf("INFO cpu %s: %v", line, err)
			}
			total += v
		}
	}
	return total
}
