package itest

import (
	"fmt"
	"testing"

	"github.com/trawl/trawl/services/dedup/internal/bloom"
	"github.com/trawl/trawl/services/dedup/internal/seen"
)

// defaultParams are the production defaults (12 MB filter, k = 7).
var defaultParams = bloom.Params{Capacity: 10_000_000, FPRate: 0.01, KeyBits: 1 << 31}

// BenchmarkDedupCheck measures seen-test throughput against a real redis-server in
// batches of 1000 URLs: the bare filter, and the memoised store the service uses (with
// the Forget that follows each published batch), for new and for already-seen URLs.
func BenchmarkDedupCheck(b *testing.B) {
	const batch = 1000
	cases := []struct {
		name    string
		perMsg  int  // URLs per input message (seen store only)
		bare    bool // bloom.TestAndSet without memo
		preseen bool // URLs already in the filter
	}{
		{name: "bloom/new", bare: true},
		{name: "bloom/seen", bare: true, preseen: true},
		{name: "seen/new/1x1000", perMsg: 1000},
		{name: "seen/new/20x50", perMsg: 50},
		{name: "seen/seen/20x50", perMsg: 50, preseen: true},
	}
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			_, c := startRedis(b)
			ctx := testCtx(b)
			f := newFilter(b, c, "trawl", defaultParams)
			store := seen.New(c, f, "trawl")
			pool := urls("bench", 0, b.N*batch)
			if tc.preseen {
				for i := 0; i < len(pool); i += 10_000 {
					if _, err := f.TestAndSet(ctx, c, pool[i:min(i+10_000, len(pool))]); err != nil {
						b.Fatal(err)
					}
				}
			}
			var msgs []seen.Message
			var ids []string
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
					msgs = append(msgs, m)
					ids = append(ids, m.ID)
				}
				if _, err := store.TestAndSet(ctx, msgs); err != nil {
					b.Fatal(err)
				}
				if err := store.Forget(ctx, ids); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "checks/s")
		})
	}
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
