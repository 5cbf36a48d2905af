package itest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/trawl/trawl/devstack/rediscluster"
	"github.com/trawl/trawl/services/parser/internal/contentdup"
	"github.com/trawl/trawl/services/parser/internal/simhash"
	"github.com/trawl/trawl/shared/testwait"
)

// clusterIndex is an index in 16 partitions on a new 3-master cluster.
func clusterIndex(t *testing.T) (*contentdup.Index, *redis.ClusterClient, context.Context) {
	cl := rediscluster.StartT(t, rediscluster.Options{Replicas: -1})
	c := cl.Client(t)
	ix, err := contentdup.New(c, "trawl", contentdup.Options{MaxDistance: 3, BucketCap: 64, Parts: 16})
	if err != nil {
		t.Fatal(err)
	}
	return ix, c, testwait.Context(t)
}

// On a Redis Cluster the index in 16 partitions finds exact and near duplicates within a
// batch and across batches, each partition's script keeps its keys in one slot (a
// CROSSSLOT would fail the call), the scripts are loaded by themselves on masters that
// never saw them, a retried batch gets the same verdicts, and the keys spread over every
// master.
func TestContentDedupOnRedisCluster(t *testing.T) {
	t.Parallel()
	ix, c, ctx := clusterIndex(t)
	if err := ix.Init(ctx); err != nil {
		t.Fatal(err)
	}
	if v, err := c.Get(ctx, ix.MetaKey()).Result(); err != nil || v != simhash.HashVersion+" parts=16" {
		t.Fatalf("meta = %q, %v", v, err)
	}

	rng := rand.New(rand.NewPCG(11, 12))
	const n = 300
	first := make([]contentdup.Page, n)
	for i := range first {
		first[i] = hashPage(fmt.Sprintf("http://o%d.test/", i), rng.Uint64())
	}
	// Within the batch: a copy of page 10 and a near copy of page 20 (2 bits off).
	exactIn := first[10]
	exactIn.URL = "http://copy.test/10"
	nearIn := hashPage("http://near.test/20", flip(first[20].SimHash, 5, 40))
	batch1 := append(slices.Clone(first), exactIn, nearIn)
	res1, err := ix.Check(ctx, batch1)
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if res1.Verdicts[i].Kind != contentdup.Original {
			t.Fatalf("page %d: %+v, want original (random hashes are far apart)", i, res1.Verdicts[i])
		}
	}
	if got, want := res1.Verdicts[n], (contentdup.Verdict{Kind: contentdup.Exact, Of: first[10].URL}); got != want {
		t.Errorf("copy within the batch: %+v, want %+v", got, want)
	}
	if got, want := res1.Verdicts[n+1], (contentdup.Verdict{Kind: contentdup.Near, Of: first[20].URL, Distance: 2}); got != want {
		t.Errorf("near copy within the batch: %+v, want %+v", got, want)
	}

	// Across batches: copies and near copies of the first batch's originals, whose keys
	// lie in every partition.
	var batch2 []contentdup.Page
	var want2 []contentdup.Verdict
	for i := 0; i < n; i += 7 {
		cp := first[i]
		cp.URL = fmt.Sprintf("http://copy.test/%d", i)
		batch2 = append(batch2, cp, hashPage(fmt.Sprintf("http://near.test/%d", i), flip(first[i].SimHash, i%64, (i+31)%64, (i+50)%64)))
		want2 = append(want2, contentdup.Verdict{Kind: contentdup.Exact, Of: first[i].URL}, contentdup.Verdict{Kind: contentdup.Near, Of: first[i].URL, Distance: 3})
	}
	res2, err := ix.Check(ctx, batch2)
	if err != nil {
		t.Fatal(err)
	}
	for i, w := range want2 {
		if res2.Verdicts[i] != w {
			t.Errorf("second batch, page %d (%s): %+v, want %+v", i, batch2[i].URL, res2.Verdicts[i], w)
		}
	}

	// A retried batch is answered as the first time: its own entries do not count.
	again, err := ix.Check(ctx, batch1)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(again.Verdicts, res1.Verdicts) {
		for i := range again.Verdicts {
			if again.Verdicts[i] != res1.Verdicts[i] {
				t.Errorf("retried page %d: %+v, first time %+v", i, again.Verdicts[i], res1.Verdicts[i])
			}
		}
	}

	exact := rediscluster.KeysPerMasterT(t, c, "trawl:{content:*}:exact:*")
	bands := rediscluster.KeysPerMasterT(t, c, "trawl:{content:*}:band:*")
	if len(exact) != 3 || exact[0] == 0 || exact[2] > 3*exact[0] {
		t.Errorf("exact keys per master %v: want every one of the 3 masters to hold a share", exact)
	}
	if len(bands) != 3 || bands[0] == 0 || bands[2] > 2*bands[0] {
		t.Errorf("band buckets per master %v: want every one of the 3 masters to hold a share", bands)
	}
	if old := rediscluster.KeysPerMasterT(t, c, "trawl:{content}:[eb]*"); slices.Max(old) != 0 {
		t.Errorf("keys of the one-partition layout per master: %v, want none", old)
	}
}

// An index is refused by a parser configured with another partition count, in either
// direction, naming the setting; the same count is accepted again.
func TestInitRefusesAnotherPartitionCount(t *testing.T) {
	t.Parallel()
	tests := []struct {
		made, run int
	}{
		{1, 4},
		{4, 1},
		{4, 8},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%d then %d", tt.made, tt.run), func(t *testing.T) {
			ix, rdb := index(t, contentdup.Options{MaxDistance: 3, BucketCap: 64, Parts: tt.made})
			ctx := ctxT(t)
			other, err := contentdup.New(rdb, "trawl", contentdup.Options{MaxDistance: 3, BucketCap: 64, Parts: tt.run})
			if err != nil {
				t.Fatal(err)
			}
			err = other.Init(ctx)
			if !errors.Is(err, contentdup.ErrMismatch) || !strings.Contains(err.Error(), "TRAWL_CONTENT_PARTS") ||
				!strings.Contains(err.Error(), fmt.Sprintf("in %d partitions", tt.made)) {
				t.Errorf("Init with %d partitions over an index in %d: %v", tt.run, tt.made, err)
			}
			if err := ix.Init(ctx); err != nil {
				t.Errorf("Init with the index's own count: %v", err)
			}
		})
	}
}

// On a cluster the earlier layout's keys of each partition are on that partition's
// master: DropLegacy sweeps every master, not the one a SCAN happens to reach.
func TestDropLegacyOnRedisCluster(t *testing.T) {
	t.Parallel()
	ix, c, ctx := clusterIndex(t)
	var old []string
	for i := range 300 {
		dig := fmt.Sprintf("%064x", 1_000_000+i)
		key, _ := ix.ExactKey(dig)
		k := key[:len(key)-len("abcd")] + dig
		old = append(old, k)
		if err := c.Set(ctx, k, "http://old.test/", 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	n, err := ix.DropLegacy(ctx)
	if err != nil {
		t.Fatal(err)
	}
	left := 0
	for _, k := range old {
		if c.Exists(ctx, k).Val() == 1 {
			left++
		}
	}
	if n != int64(len(old)) || left > 0 {
		t.Errorf("deleted %d of the earlier layout's %d keys, %d left", n, len(old), left)
	}
}
