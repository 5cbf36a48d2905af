package itest

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"github.com/trawl/trawl/services/parser/internal/contentdup"
)

// BenchmarkCheck measures the duplicate check of one parse batch (32 pages, the default
// TRAWL_PARSE_BATCH) against a real redis-server: a lookup and an insert round trip per
// batch. Reported as docs/s, and as the redis-server's CPU time per page (used_cpu_user
// + used_cpu_sys of INFO cpu), since on a busy crawl Redis is the shared resource.
//
//   - new: every page is an original (4 band writes) in an index of 100,000 originals,
//     whose buckets hold ~1.5 entries each.
//   - new-64: the same in batches of 64 pages.
//   - exact: every page is an exact duplicate (one GET, nothing else).
//   - hot: every page reads four full buckets (64 candidates each, 256 distance
//     computations) and matches none: the worst case of a large crawl.
func BenchmarkCheck(b *testing.B) {
	const batch = 32
	rng := rand.New(rand.NewPCG(3, 4))
	ix, rdb := index(b, contentdup.Options{MaxDistance: 3, BucketCap: 64})
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

	cpu := func(b *testing.B) float64 {
		info, err := rdb.Info(ctxT(b), "cpu").Result()
		if err != nil {
			b.Fatal(err)
		}
		var sum float64
		for _, l := range strings.Split(info, "\r\n") {
			k, v, _ := strings.Cut(l, ":")
			if k == "used_cpu_sys" || k == "used_cpu_user" {
				f, err := strconv.ParseFloat(v, 64)
				if err != nil {
					b.Fatalf("INFO cpu %s: %v", l, err)
				}
				sum += f
			}
		}
		return sum
	}
	report := func(b *testing.B, size int, cpu0 float64) {
		pages := float64(size * b.N)
		b.ReportMetric(pages/b.Elapsed().Seconds(), "docs/s")
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/pages, "ns/page")
		b.ReportMetric((cpu(b)-cpu0)*1e9/pages, "redis-ns/page")
	}
	run := func(b *testing.B, mk func() []contentdup.Page) {
		batches := make([][]contentdup.Page, 64)
		for i := range batches {
			batches[i] = mk()
		}
		cpu0 := cpu(b)
		b.ResetTimer()
		i := 0
		for b.Loop() {
			if _, err := ix.Check(ctxT(b), batches[i%len(batches)]); err != nil {
				b.Fatal(err)
			}
			i++
		}
		report(b, batch, cpu0)
	}
	originals := func(size int) func(b *testing.B) {
		return func(b *testing.B) {
			// Fresh pages for every call: an original is indexed once. The pages are
			// made before the clock runs, since the loop cannot stop it cheaply.
			const ahead = 4096
			batches := make([][]contentdup.Page, ahead)
			for i := range batches {
				batches[i] = make([]contentdup.Page, size)
				for j := range batches[i] {
					batches[i][j] = page(rng.Uint64())
				}
			}
			cpu0 := cpu(b)
			b.ResetTimer()
			i := 0
			for b.Loop() {
				if i == ahead {
					b.Fatalf("more than %d batches: raise ahead", ahead)
				}
				if _, err := ix.Check(ctxT(b), batches[i]); err != nil {
					b.Fatal(err)
				}
				i++
			}
			report(b, size, cpu0)
		}
	}
	b.Run("new", originals(batch))
	b.Run("new-64", originals(64))
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
