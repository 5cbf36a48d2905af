package itest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/trawl/trawl/devstack/redisproc"
	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/frontierkeys"
	"github.com/trawl/trawl/shared/natsx"
	"github.com/trawl/trawl/shared/testwait"
	"github.com/trawl/trawl/shared/topology"
)

// seedHosts queues one URL on each of n hosts of shard 0.
func (s *stack) seedHosts(prefix string, n int) {
	s.t.Helper()
	var batch crawlmsg.FrontierBatch
	for h := range n {
		batch.URLs = append(batch.URLs, crawlmsg.Discovered{URL: fmt.Sprintf("http://%s%d.example/", prefix, h)})
	}
	s.publish(topology.FrontierSubject(0), &batch)
}

// A registered indexer that stops reading holds the crawl before CRAWL_DOCS's byte limit
// drops a document it has not acked; an ad-hoc durable tap beside it holds nothing. Once
// the indexer reads again the crawl completes and it has every document, in order.
func TestDispatchHoldsForRegisteredIndexer(t *testing.T) {
	t.Parallel()
	s := startStack(t, redisproc.Options{}, map[string]string{"TRAWL_TASK_BATCH": "1"})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const hosts, docSize, limit = 300, 1024, 200 * 1024
	str := s.capStream(ctx, t, topology.StreamDocs, limit)
	indexer, err := s.js.CreateConsumer(ctx, topology.StreamDocs, topology.RegisteredDocsConsumer("slow-indexer", "test", 30*time.Second, 1000))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.js.CreateConsumer(ctx, topology.StreamDocs, jetstream.ConsumerConfig{
		Durable: "adhoc-tap", FilterSubject: topology.SubjectDocs, AckPolicy: jetstream.AckExplicitPolicy,
	}); err != nil {
		t.Fatal(err)
	}
	doc := bytes.Repeat([]byte("d"), docSize)
	// About 100 documents a second (the parser's output, one per page; one task per fetch
	// message), against a hold threshold of about 100 documents and a limit of about 200.
	s.runTimedFetcher(ctx, 2, 20*time.Millisecond, func(tk crawlmsg.FetchTask) crawlmsg.Outcome {
		if _, err := s.js.Publish(ctx, topology.SubjectDocs, doc); err != nil && ctx.Err() == nil {
			t.Errorf("publish document: %v", err)
		}
		return fetched200(tk)
	})
	s.seedHosts("ix", hosts)

	testwait.Eventually(t, 30*time.Second, "dispatch held for the indexer or the crawl done", func() bool {
		return s.held(ctx, "docs-lag") || s.stats().Fetched == hosts
	})
	testwait.Eventually(t, 30*time.Second, "tasks out drained", func() bool { return s.stats().InFlight == 0 })
	held := s.stats()
	info, err := str.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.FirstSeq != 1 || info.State.Msgs != uint64(held.Fetched) || held.Fetched >= hosts {
		t.Fatalf("docs stream first seq %d, %d documents kept for %d pages fetched of %d: documents the indexer had not read were dropped",
			info.State.FirstSeq, info.State.Msgs, held.Fetched, hosts)
	}
	if !s.held(ctx, "docs-lag") {
		t.Fatalf("dispatch held by %q, want docs-lag", s.rdb.HGet(ctx, frontierkeys.Dispatch(s.cfg.Common.RedisPrefix), "held").Val())
	}
	if n := s.rdb.HGet(ctx, frontierkeys.Dispatch(s.cfg.Common.RedisPrefix), "indexers").Val(); n != "1" {
		t.Fatalf("indexers %q in the dispatch state, want 1 (the ad-hoc tap is not registered)", n)
	}

	// The indexer reads again: the crawl completes and no document was missed.
	var mu sync.Mutex
	var seqs []uint64
	go func() {
		_ = natsx.ConsumeBatches(ctx, indexer, natsx.ConsumeOptions{Log: slog.New(slog.NewTextHandler(io.Discard, nil))}, func(_ context.Context, ms []jetstream.Msg) []error {
			mu.Lock()
			defer mu.Unlock()
			for _, m := range ms {
				if md, err := m.Metadata(); err == nil && md.NumDelivered == 1 {
					seqs = append(seqs, md.Sequence.Stream)
				}
			}
			return make([]error, len(ms))
		})
	}()
	testwait.Eventually(t, 60*time.Second, "crawl completed", func() bool { return s.stats().Fetched == hosts })
	testwait.Eventually(t, 30*time.Second, "indexer caught up", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(seqs) >= hosts
	})
	mu.Lock()
	defer mu.Unlock()
	for i, q := range seqs {
		if q != uint64(i+1) {
			t.Fatalf("indexer's document %d has stream sequence %d: documents were lost", i+1, q)
		}
	}
}

// Large bodies travel in the CRAWL_BODIES object store, while their pages on CRAWL_PAGES
// are small references: dispatch holds on the store's bytes before it refuses a body.
func TestDispatchHoldsWhileBodiesStoreFills(t *testing.T) {
	t.Parallel()
	s := startStack(t, redisproc.Options{}, map[string]string{"TRAWL_TASK_BATCH": "1"})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const hosts, bodySize, limit = 300, 2048, 400 * 1024
	o := topology.DefaultOptions(1)
	o.Storage, o.PagesMaxBytes = jetstream.MemoryStorage, limit
	bodies, err := natsx.ObjectStore(ctx, s.js, topology.Bodies(o))
	if err != nil {
		t.Fatal(err)
	}
	body := bytes.Repeat([]byte("b"), bodySize)
	var refused sync.Map
	// Nobody parses or sweeps: every body stays.
	s.runTimedFetcher(ctx, 2, 20*time.Millisecond, func(tk crawlmsg.FetchTask) crawlmsg.Outcome {
		if _, err := bodies.PutBytes(ctx, topology.PageID(tk.Lease), body); err != nil && ctx.Err() == nil {
			refused.Store(tk.URL, err)
		}
		return fetched200(tk)
	})
	s.seedHosts("bd", hosts)

	testwait.Eventually(t, 30*time.Second, "dispatch held for the bodies store or the crawl done", func() bool {
		return s.held(ctx, "bodies-bytes") || s.stats().Fetched == hosts
	})
	testwait.Eventually(t, 30*time.Second, "tasks out drained", func() bool { return s.stats().InFlight == 0 })
	refused.Range(func(url, err any) bool {
		t.Errorf("body of %s refused: %v", url, err)
		return true
	})
	if st := s.stats(); st.Fetched >= hosts || !s.held(ctx, "bodies-bytes") {
		t.Fatalf("stats %+v: the crawl ran on with the bodies store filling", st)
	}
}

// held reports whether the scheduler's published dispatch state names stage as holding.
func (s *stack) held(ctx context.Context, stage string) bool {
	return strings.Contains(s.rdb.HGet(ctx, frontierkeys.Dispatch(s.cfg.Common.RedisPrefix), "held").Val(), stage)
}
