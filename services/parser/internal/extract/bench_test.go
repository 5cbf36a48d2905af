package extract

import (
	"testing"
)

// BenchmarkExtract measures a realistic ~30 KiB article page; MB/s comes from SetBytes.
func BenchmarkExtract(b *testing.B) {
	body := fixture(b, "bench_page.html")
	in := Input{URL: "https://blog.example.com/2024/05/distributed-crawling", Body: body, ContentType: "text/html; charset=utf-8"}
	opt := Options{RobotsAgent: "trawl"}
	res, err := Extract(in, opt)
	if err != nil || len(res.Links) < 100 || len(res.Text) < 10000 {
		b.Fatalf("fixture does not look like a real page: %d links, %d text bytes, err %v", len(res.Links), len(res.Text), err)
	}
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Extract(in, opt); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "pages/s")
}
