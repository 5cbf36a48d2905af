package itest

import (
	"context"
	"fmt"
	"io/fs"
	"log/slog"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/trawl/trawl/devstack/natsembed"
	"github.com/trawl/trawl/services/scheduler/internal/frontier"
	"github.com/trawl/trawl/shared/bloomhash"
	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/natsx"
	"github.com/trawl/trawl/shared/recrawl"
	"github.com/trawl/trawl/shared/testwait"
	"github.com/trawl/trawl/shared/topology"
)

// benchRecrawlState is a known URL's state as a recrawl keeps it: both validators, a text
// digest and SimHash, and a few fetches' counters.
func benchRecrawlState(i int) crawlmsg.Recrawl {
	return crawlmsg.Recrawl{
		ETag: fmt.Sprintf(`"%016x"`, i), LastModified: "Mon, 02 Jan 2026 15:04:05 GMT",
		Digest: fmt.Sprintf("%064x", i), SimHash: fmt.Sprintf("%016x", i*7919),
		Interval: 86_400_000, Fetches: 5, Changes: 2, NotModified: 2,
		LastFetch: 1_790_000_000_000 + int64(i), Due: 1_790_086_400_000 + int64(i),
	}
}

// BenchmarkRecrawlState measures what adaptive recrawling keeps per known URL for a crawl
// of 1,000,000 URLs (100,000 with -short): on disk, each URL's schedule message in
// CRAWL_RECRAWL (stream bytes and the file store's size); in Redis, the seen filter's bits
// (TRAWL_BLOOM_FP_RATE 0.01) and the frontier entries of the due URLs queued at once,
// which the intake bounds by TRAWL_RECRAWL_BACKLOG per shard (default 10,000) whatever
// the crawl's size; and the NATS server's memory per schedule (the embedded server's heap).
func BenchmarkRecrawlState(b *testing.B) {
	n := 1_000_000
	if testing.Short() {
		n = 100_000
	}
	backlog := recrawl.Defaults.Backlog
	for range b.N {
		b.StopTimer()
		ctx := testwait.Context(b)
		srv := natsembed.StartT(b)
		nc, js, err := natsx.Connect(ctx, srv.URL(), "bench", slog.New(slog.DiscardHandler))
		if err != nil {
			b.Fatal(err)
		}
		o := topology.DefaultOptions(1)
		o.Recrawl = true
		if err := natsx.Ensure(ctx, js, o, topology.StageTimings{AckWait: 30 * time.Second, FetchAckWait: time.Minute, MaxDeliver: -1}, slog.New(slog.DiscardHandler)); err != nil {
			b.Fatal(err)
		}
		heapBefore := liveHeap()
		b.StartTimer()
		// Under the client's limit of outstanding asynchronous publishes (4,000).
		const per = 1000
		for i := 0; i < n; i += per {
			msgs := make([]*nats.Msg, 0, per)
			for j := i; j < i+per && j < n; j++ {
				e := &crawlmsg.RecrawlEntry{URL: benchURL(j%50000, j), Depth: j % 4, State: benchRecrawlState(j)}
				// Due in a day: the schedules wait, as a crawl's do.
				e.State.Due = time.Now().Add(24 * time.Hour).UnixMilli()
				m, err := recrawl.Schedule(0, e, "")
				if err != nil {
					b.Fatal(err)
				}
				msgs = append(msgs, m)
			}
			if err := natsx.PublishBatch(ctx, js, msgs); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		str, err := js.Stream(ctx, topology.StreamRecrawl)
		if err != nil {
			b.Fatal(err)
		}
		info, err := str.Info(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if info.State.Msgs != uint64(n) {
			b.Fatalf("stream holds %d schedules, want %d", info.State.Msgs, n)
		}
		// The server runs in this process: what its heap grew by is what it keeps in memory
		// per schedule (the file store's per-subject index, the scheduler's timer wheel and
		// maps).
		heap := float64(liveHeap()-heapBefore) / float64(n)
		nc.Close()
		disk := dirSize(b, srv.StoreDir())

		// The frontier entries of a full intake backlog of due URLs.
		rdb := startRedis(b)
		f := newTF(b, rdb, testOptions(0))
		before := usedMemory(b, rdb.Info(ctx, "memory").Val())
		us := make([]crawlmsg.Discovered, 0, backlog)
		for j := range backlog {
			st := benchRecrawlState(j)
			us = append(us, crawlmsg.Discovered{URL: benchURL(j%50000, j), Depth: j % 4, Via: crawlmsg.ViaRecrawl, Recrawl: &st})
		}
		if _, err := f.AddBatches(context.Background(), []frontier.Batch{{ID: "due", URLs: us}}); err != nil {
			b.Fatal(err)
		}
		rdb.Del(ctx, f.Keyspace().Key("applied"))
		queued := float64(usedMemory(b, rdb.Info(ctx, "memory").Val())-before) / float64(backlog)
		m, _ := bloomhash.Size(uint64(n), 0.01)
		bloom := float64(m) / 8 / float64(n)

		b.ReportMetric(float64(info.State.Bytes)/float64(n), "stream-bytes/url")
		b.ReportMetric(float64(disk)/float64(n), "disk-bytes/url")
		b.ReportMetric(queued, "bytes/queued-recrawl")
		b.ReportMetric(bloom, "bloom-bytes/url")
		b.ReportMetric(bloom+queued*float64(backlog)/float64(n), "redis-bytes/known-url")
		b.ReportMetric(heap, "nats-heap-bytes/url")
		b.ReportMetric(float64(n), "urls")
	}
}

// liveHeap is the heap in use after a collection.
func liveHeap() int64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}

// dirSize is the bytes of the files under dir.
func dirSize(b *testing.B, dir string) int64 {
	var total int64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		fi, err := d.Info()
		if err == nil {
			total += fi.Size()
		}
		return err
	})
	if err != nil {
		b.Fatal(err)
	}
	return total
}
