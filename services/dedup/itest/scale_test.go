package itest

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/trawl/trawl/devstack/redisproc"
	"github.com/trawl/trawl/services/dedup/internal/bloom"
	"github.com/trawl/trawl/services/dedup/internal/seen"
	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/testwait"
)

// TestBloomScalesPastCapacity adds three times the configured capacity, then measures the
// false-positive rate on URLs never added: a single filter would be at about 43 % (k = 7
// at 3n); the scalable one must stay within 1.2 p. Nothing added may be missed.
func TestBloomScalesPastCapacity(t *testing.T) {
	t.Parallel()
	_, c := startRedis(t)
	ctx := testwait.Context(t)
	const n, p = 10_000, 0.01
	// Keys of 2^16 bits: layers span several keys, so each layer's bits are set by key.
	f := newFilter(t, c, "trawl", bloom.Params{Capacity: n, FPRate: p, KeyBits: 1 << 16})
	added := 0
	for from := 0; from < 3*n; from += 1000 {
		got, err := f.TestAndSet(ctx, c, urls("in", from, 1000))
		if err != nil {
			t.Fatal(err)
		}
		added += len(got)
	}
	layers := f.Layers()
	if len(layers) != 2 || layers[1].N != 2*n {
		t.Fatalf("%d layers (%+v), want 2: n, then 2n", len(layers), layers)
	}
	counts, err := f.Counts(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	// The first layer closes at exactly its capacity; the rest went to the second.
	if counts[0] != n || int(counts[0]+counts[1]) != added || added < 3*n-3*n*p {
		t.Errorf("counts %v, %d new of %d", counts, added, 3*n)
	}
	for from := 0; from < 3*n; from += 5000 {
		in, err := f.Contains(ctx, c, urls("in", from, 5000))
		if err != nil {
			t.Fatal(err)
		}
		if len(in) != 5000 {
			t.Fatalf("%d of 5000 added URLs found from %d: a false negative", len(in), from)
		}
	}
	const probes = 100_000
	fp := 0
	for from := 0; from < probes; from += 5000 {
		got, err := f.Contains(ctx, c, urls("out", from, 5000))
		if err != nil {
			t.Fatal(err)
		}
		fp += len(got)
	}
	rate := float64(fp) / probes
	t.Logf("3n = %d URLs in %d layers (%d + %d): false-positive rate %.5f (%.2f p)", 3*n, len(layers), counts[0], counts[1], rate, rate/p)
	if rate > 1.2*p {
		t.Errorf("false-positive rate %.5f at 3× capacity, want at most 1.2 p = %.4f", rate, 1.2*p)
	}
}

// TestBloomReplicasGrowOnce: two replicas (each its own Filter and Store, as two dedup
// processes) fill the filter at once. Each full layer is followed by exactly one new
// layer, whoever finds it full first; both end up reading the same layers; no URL added
// by either is missed.
func TestBloomReplicasGrowOnce(t *testing.T) {
	t.Parallel()
	_, c := startRedis(t)
	ctx := testwait.Context(t)
	params := bloom.Params{Capacity: 1000, FPRate: 0.01, KeyBits: 1 << 31}
	var mu sync.Mutex
	grown := map[int]int{} // layer index → times reported added
	var wg sync.WaitGroup
	filters := make([]*bloom.Filter, 2)
	for r := range filters {
		filters[r] = newFilter(t, c, "trawl", params)
		s := seen.New(c, filters[r], "trawl")
		s.OnGrow = func(_ *bloom.Filter, l bloom.Layer) {
			mu.Lock()
			grown[l.Index]++
			mu.Unlock()
		}
		wg.Go(func() {
			for b := range 70 {
				var msgs []seen.Message
				for m := range 2 {
					id := fmt.Sprintf("r%d:%d:%d", r, b, m)
					msgs = append(msgs, msg(id, urls(fmt.Sprintf("r%d", r), (b*2+m)*50, 50)...))
				}
				if _, err := s.TestAndSet(ctx, msgs); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	// 14,000 URLs: layers of 1000, 2000, 4000, 8000.
	want := 4
	for r, f := range filters {
		if err := f.Load(ctx, c); err != nil {
			t.Fatal(err)
		}
		if n := len(f.Layers()); n != want {
			t.Errorf("replica %d reads %d layers, want %d", r, n, want)
		}
	}
	for i := 1; i < want; i++ {
		if grown[i] != 1 {
			t.Errorf("layer %d added %d times, want once (%v)", i, grown[i], grown)
		}
	}
	for r := range filters {
		in, err := filters[0].Contains(ctx, c, urls(fmt.Sprintf("r%d", r), 0, 7000))
		if err != nil {
			t.Fatal(err)
		}
		if len(in) != 7000 {
			t.Errorf("%d of replica %d's 7000 URLs found", len(in), r)
		}
	}
}

// TestServiceBloomGrowth: the service adds layers as the crawl outgrows the filter and
// shows it in its metrics and in the stats hash operators read.
func TestServiceBloomGrowth(t *testing.T) {
	t.Parallel()
	s := startStack(t, redisproc.Options{}, map[string]string{
		"TRAWL_BLOOM_CAPACITY": "1000",
		"TRAWL_BLOOM_KEY_BITS": "2147483648",
	})
	c := redisClient(t, s.redis)
	ctx := testwait.Context(t)
	for i := range 25 {
		var us []string
		for j := range 100 {
			us = append(us, fmt.Sprintf("http://h%d.test/%d", j%5, i*100+j))
		}
		var links []crawlmsg.Discovered
		for _, u := range us {
			links = append(links, link(u, 1))
		}
		s.publishDiscovered(t, links...)
	}
	testwait.Eventually(t, 20*time.Second, "every URL handled", func() bool {
		return s.metric(t, `trawl_dedup_urls_total{result="new"}`)+s.metric(t, `trawl_dedup_urls_total{result="seen"}`) == 2500
	})
	if n := s.metric(t, "trawl_dedup_bloom_layers"); n != 2 {
		t.Errorf("trawl_dedup_bloom_layers = %v, want 2 (1000 + 2000 URLs)", n)
	}
	f, err := bloom.New(s.cfg.Common.RedisPrefix, s.cfg.Bloom)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Load(ctx, c); err != nil {
		t.Fatal(err)
	}
	if next := s.metric(t, "trawl_dedup_bloom_next_layer_bytes"); next != float64(f.NextLayer().Bytes()) || f.NextLayer().Index != 2 {
		t.Errorf("next layer bytes %v, want %d (layer 2)", next, f.NextLayer().Bytes())
	}
	// The stats hash follows within a fill interval (1 s here).
	testwait.Eventually(t, 5*time.Second, "stats hash with two layers", func() bool {
		st, err := c.HGetAll(ctx, f.StatsKey()).Result()
		return err == nil && st["layers"] == "2" && st["capacity"] == "3000" && st["next_bytes"] == fmt.Sprint(f.NextLayer().Bytes()) &&
			st["bytes"] == fmt.Sprint(f.Bytes()) && st["fill"] != "" && st["updated"] != ""
	})
}
