package itest

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/trawl/trawl/services/parser/internal/contentdup"
)

// BenchmarkExactIndexBytes measures the Redis memory the exact part of the content index
// takes per original text (used_memory before and after, over texts), with URLs of the
// wide crawl's length (docs/cost-per-page.md, "Scale"). Run with -benchtime 1x: each run
// indexes the same texts into an empty index.
//
//   - unbounded: every original kept (ExactCapacity 0).
//   - capacity: ExactCapacity at half the texts, so that the second half evicts.
func BenchmarkExactIndexBytes(b *testing.B) {
	const texts = 400_000
	for _, c := range []struct {
		name     string
		capacity int64
	}{{"unbounded", 0}, {"capacity", texts / 2}} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				ix, rdb := index(b, contentdup.Options{MaxDistance: 3, BucketCap: 64, ExactCapacity: c.capacity})
				before := usedMemory(b, rdb)
				for start := 0; start < texts; start += contentdup.MaxBatch {
					pages := make([]contentdup.Page, min(contentdup.MaxBatch, texts-start))
					for i := range pages {
						n := start + i
						sum := sha256.Sum256([]byte(strconv.Itoa(n)))
						pages[i] = contentdup.Page{URL: fmt.Sprintf("http://host%d.test/page/%d", n%20000, n), Digest: hex.EncodeToString(sum[:]), Store: true}
					}
					if _, err := ix.Check(ctxT(b), pages); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(usedMemory(b, rdb)-before)/texts, "B/text")
			}
		})
	}
}

func usedMemory(b *testing.B, rdb *redis.Client) int64 {
	info, err := rdb.Info(ctxT(b), "memory").Result()
	if err != nil {
		b.Fatal(err)
	}
	for _, l := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(l, "used_memory:"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				b.Fatal(err)
			}
			return n
		}
	}
	b.Fatal("INFO memory has no used_memory")
	return 0
}
