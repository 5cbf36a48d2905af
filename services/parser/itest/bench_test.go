package itest

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/trawl/trawl/services/parser/internal/contentdup"
)

// BenchmarkCheck measures the duplicate check of one parse batch (32 pages, the default
// TRAWL_PARSE_BATCH) against a real redis-server: one script call per batch. Reported as
// docs/s.
//
//   - new: every page is an original (4 band writes) in an index of 100,000 originals,
//     whose buckets hold ~1.5 entries each.
//   - exact: every page is an exact duplicate (one GET, nothing else).
//   - hot: every page reads four full buckets (64 candidates each, 256 distance
//     computations) and matches none: the worst case of a large crawl.
func BenchmarkCheck(b *testing.B) {
	const batch = 32
	rng := rand.New(rand.NewPCG(3, 4))
	ix, _ := index(b, contentdup.Options{MaxDistance: 3, BucketCap: 64})
	seq := 0
	page := func(h uint64) contentdup.Page {
		seq++
		return hashPage(fmt.Sprintf("https://host%d.example/some/path/page-%d.html", seq%1000, seq), h)
	}
	fill := func(hashes func() uint64, n int) {
		for n > 0 {
			pages := make([]contentdup.Page, min(n, contentdup.MaxBatch))
			for i := range pages {
				pages[i] = page(hashes())
			}
			if _, err := ix.Check(ctxT(b), pages); err != nil {
				b.Fatal(err)
			}
			n -= len(pages)
		}
	}
	fill(rng.Uint64, 100_000)
	const hot = uint64(0x1234_5678_9abc_def0)
	for band := range 4 {
		shift := 48 - 16*band
		mask := uint64(0xffff) << shift
		fill(func() uint64 { return hot&mask | rng.Uint64()&^mask }, 64)
	}

	run := func(b *testing.B, mk func() []contentdup.Page) {
		batches := make([][]contentdup.Page, 64)
		for i := range batches {
			batches[i] = mk()
		}
		b.ResetTimer()
		i := 0
		for b.Loop() {
			if _, err := ix.Check(ctxT(b), batches[i%len(batches)]); err != nil {
				b.Fatal(err)
			}
			i++
		}
		b.ReportMetric(float64(batch*b.N)/b.Elapsed().Seconds(), "docs/s")
	}
	b.Run("new", func(b *testing.B) {
		// Fresh pages for every call: an original is indexed once.
		b.ResetTimer()
		for b.Loop() {
			b.StopTimer()
			pages := make([]contentdup.Page, batch)
			for i := range pages {
				pages[i] = page(rng.Uint64())
			}
			b.StartTimer()
			if _, err := ix.Check(ctxT(b), pages); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(batch*b.N)/b.Elapsed().Seconds(), "docs/s")
	})
	b.Run("exact", func(b *testing.B) {
		orig := page(rng.Uint64())
		run(b, func() []contentdup.Page {
			pages := make([]contentdup.Page, batch)
			for i := range pages {
				pages[i] = page(rng.Uint64())
				pages[i].Digest = orig.Digest
			}
			return pages
		})
	})
	b.Run("hot", func(b *testing.B) {
		run(b, func() []contentdup.Page {
			pages := make([]contentdup.Page, batch)
			for i := range pages {
				pages[i] = page(hot)
			}
			return pages
		})
	})
}
