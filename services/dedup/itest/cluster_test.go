package itest

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/trawl/trawl/devstack/rediscluster"
	"github.com/trawl/trawl/devstack/redisproc"
	"github.com/trawl/trawl/services/dedup/internal/bloom"
	"github.com/trawl/trawl/services/dedup/internal/seen"
	"github.com/trawl/trawl/shared/testwait"
)

// clusterParts is TRAWL_BLOOM_PARTS in the cluster tests: a few times the three masters,
// so each master takes about a third of the parts.
const clusterParts = 12

// clusterSeen starts a Redis Cluster and a seen tester over a filter in clusterParts parts.
func clusterSeen(t *testing.T) (*rediscluster.Cluster, *redis.ClusterClient, bloom.Parts, *seen.Store) {
	t.Helper()
	cl := rediscluster.StartT(t, rediscluster.Options{})
	c := cl.Client(t)
	parts, err := bloom.NewParts("trawl", bloom.Params{Capacity: 120_000, FPRate: 0.001, KeyBits: 1 << 20, Parts: clusterParts})
	if err != nil {
		t.Fatal(err)
	}
	if err := parts.Init(testwait.Context(t), c); err != nil {
		t.Fatal(err)
	}
	return cl, c, parts, seen.NewParts(c, parts)
}

// On a Redis Cluster the seen filter and its memos are spread over every master, each
// part's script keeps its keys in one slot (a CROSSSLOT would fail the call), the seen
// test is exact across parts, a redelivery is answered from the memos of every part it
// touches, and Forget and Trim reach every part.
func TestSeenOnRedisCluster(t *testing.T) {
	t.Parallel()
	_, c, _, s := clusterSeen(t)
	ctx := testwait.Context(t)

	first := urls("cl", 0, 3000)
	msgs := []seen.Message{msg("A:1", first[:1500]...), msg("A:2", first[1000:]...)}
	msgs[0].Seq, msgs[1].Seq = 1, 2
	got, err := s.TestAndSet(ctx, msgs)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got[0], span(0, 1500)) || !slices.Equal(got[1], span(500, 1500)) {
		t.Fatalf("new URLs: %d and %d (first %v, %v), want all of the first message and the last 1500 of the second",
			len(got[0]), len(got[1]), got[0][:min(3, len(got[0]))], got[1][:min(3, len(got[1]))])
	}
	// Redelivered: the same answer, from every part's memo, though every bit is set now.
	again, err := s.TestAndSet(ctx, msgs[1:])
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(again[0], got[1]) {
		t.Errorf("redelivery found %d new, want the memo's %d", len(again[0]), len(got[1]))
	}
	// A new message finds them seen, wherever their part is.
	if seenNow, err := s.TestAndSet(ctx, []seen.Message{msg("B:1", first[2000:2500]...)}); err != nil || len(seenNow[0]) != 0 {
		t.Errorf("a later message found %d of 500 known URLs new (%v)", len(seenNow[0]), err)
	}

	bits := rediscluster.KeysPerMasterT(t, c, "trawl:{dedup*}:bloom:*")
	memos := rediscluster.KeysPerMasterT(t, c, "trawl:{dedup*}:memo")
	if len(bits) != 3 || bits[0] == 0 || bits[2] > 2*bits[0]+2 {
		t.Errorf("filter keys per master %v: want every one of the 3 masters to hold a share", bits)
	}
	if len(memos) != 3 || memos[0] == 0 {
		t.Errorf("memo hashes per master %v: want every master to hold some", memos)
	}

	if _, left, err := s.Trim(ctx, 1); err != nil || left == 0 {
		t.Fatalf("trim to 1: %d memos left, %v; want the second message's", left, err)
	}
	if err := s.Forget(ctx, []string{"A:2", "B:1"}); err != nil {
		t.Fatal(err)
	}
	if _, left, err := s.Trim(ctx, 0); err != nil || left != 0 {
		t.Errorf("after Forget: %d memos left in the parts, %v; want none", left, err)
	}
}

// The seen test goes on through the SIGKILL of a master: the cluster promotes its replica
// and the client finds it. What the dead master had not yet passed to its replica is
// lost (Redis replicates asynchronously), so URLs tested just before the crash may be
// new a second time: the bound services/dedup/README.md states.
func TestSeenSurvivesMasterFailover(t *testing.T) {
	t.Parallel()
	cl, c, parts, s := clusterSeen(t)
	ctx := testwait.Context(t)
	before := urls("fo", 0, 2000)
	if _, err := s.TestAndSet(ctx, []seen.Message{msg("A:1", before...)}); err != nil {
		t.Fatal(err)
	}
	// Let the replicas catch up: then nothing is lost and every earlier URL must read seen.
	if err := c.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
		return m.Wait(ctx, 1, 5*time.Second).Err()
	}); err != nil {
		t.Fatal(err)
	}
	killed, err := cl.KillMaster(ctx, int(c.ClusterKeySlot(ctx, parts[0].MetaKey()).Val()))
	if err != nil {
		t.Fatal(err)
	}
	after := urls("fo", 2000, 500)
	var got [][]int
	// The service retries a failed batch (its message is redelivered); so does this loop,
	// until the cluster has promoted the replica.
	testwait.Eventually(t, 30*time.Second, fmt.Sprintf("seen test after killing node %d", killed), func() bool {
		got, err = s.TestAndSet(ctx, []seen.Message{msg("A:2", append(slices.Clone(before[:500]), after...)...)})
		return err == nil
	})
	if !slices.Equal(got[0], span(500, 500)) {
		t.Errorf("after failover %d URLs new, want exactly the 500 new ones (the first 500 were replicated before the crash)", len(got[0]))
	}
}

// The dedup service runs against a Redis Cluster given as a seed list in TRAWL_REDIS_URL
// (the crawl's identity, the readiness write, the seen test, memo trim and the filter's
// statistics), with its filter split over the masters.
func TestServiceOnRedisCluster(t *testing.T) {
	t.Parallel()
	cl := rediscluster.StartT(t, rediscluster.Options{})
	s := startStack(t, redisproc.Options{Ephemeral: true}, map[string]string{
		"TRAWL_REDIS_URL":   cl.URL(),
		"TRAWL_BLOOM_PARTS": "6",
	})
	s.publishDiscovered(t, link("http://a.test/1", 1), link("http://b.test/1", 1), link("http://c.test/", 1))
	s.publishDiscovered(t, link("http://a.test/1", 2), link("http://b.test/2", 2))
	got, ids := map[int][]string{}, map[string]int{}
	testwait.Eventually(t, 20*time.Second, "new URLs on the frontier", func() bool {
		s.frontier(t, got, ids)
		return len(got[0])+len(got[1]) >= 4
	})
	testwait.Eventually(t, 20*time.Second, "dedup consumer idle", func() bool { return s.idle(t) })
	s.frontier(t, got, ids)
	all := append(slices.Clone(got[0]), got[1]...)
	slices.Sort(all)
	if want := []string{"http://a.test/1", "http://b.test/1", "http://b.test/2", "http://c.test/"}; !slices.Equal(all, want) {
		t.Errorf("frontier got %v, want each of %v once", all, want)
	}
	testwait.Eventually(t, 10*time.Second, "fill ratio measured", func() bool {
		return s.metric(t, "trawl_dedup_bloom_fill_ratio") > 0
	})
	if n := rediscluster.KeysPerMasterT(t, cl.Client(t), "trawl:{dedup*}:bloom:meta"); len(n) != 3 || n[0] == 0 {
		t.Errorf("filter parts per master %v: want the 6 parts spread over the 3 masters", n)
	}
}
