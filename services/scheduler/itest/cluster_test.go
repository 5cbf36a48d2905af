package itest

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/trawl/trawl/devstack/rediscluster"
	"github.com/trawl/trawl/services/scheduler/internal/frontier"
	"github.com/trawl/trawl/services/scheduler/internal/prioritize"
	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/frontierkeys"
	"github.com/trawl/trawl/shared/testwait"
)

// On a Redis Cluster of three masters the frontiers of twelve shards fall four on each
// master, and with them their keys and the load of their scripts; each shard's scripts
// keep their keys in its slot (a CROSSSLOT would fail them), so every shard queues and
// dispatches its hosts there.
func TestFrontierShardsSpreadOverClusterMasters(t *testing.T) {
	t.Parallel()
	const shards, hosts = 12, 20
	c := rediscluster.StartT(t, rediscluster.Options{Replicas: -1}).Client(t)
	ctx := testwait.Context(t)
	for s := range shards {
		o := testOptions(s)
		o.Shards = shards
		o.MinDelay = 0
		o.Clock = func() time.Time { return t0 }
		f := frontier.New(c, o, prioritize.BreadthFirst{})
		var us []crawlmsg.Discovered
		for h := range hosts {
			us = append(us, crawlmsg.Discovered{URL: fmt.Sprintf("http://h%d.s%d.test/", h, s)})
		}
		if got, err := f.AddBatches(ctx, []frontier.Batch{{ID: fmt.Sprint(s), URLs: us}}); err != nil || got[0] != hosts {
			t.Fatalf("shard %d: AddBatches queued %v, %v; want %d", s, got, err, hosts)
		}
		if tasks, err := f.Dispatch(ctx, 2*hosts); err != nil || len(tasks) != hosts {
			t.Fatalf("shard %d: dispatched %d tasks, %v; want one per host, %d", s, len(tasks), err, hosts)
		}
	}
	if got := rediscluster.KeysPerMasterT(t, c, "t:*:stats"); !slices.Equal(got, []int{4, 4, 4}) {
		t.Errorf("shards per master %v, want 4 on each of the 3", got)
	}
	// Every shard holds the same keys (its hosts' state and queues), so the masters do.
	if got := rediscluster.KeysPerMasterT(t, c, "t:*"); got[0] != got[2] {
		t.Errorf("frontier keys per master %v, want the same on each", got)
	}
}

// A crawl of several shards written by a release before spread shard tags ("{s<shard>}")
// is taken up where it was: MoveUnspreadShard moves shard 1's keys, leases out included, to
// its spread tag, on one server (RENAME) and on a cluster (DUMP and RESTORE to another
// slot), and the frontier there holds the same counters, completes the leases out and
// dispatches the rest.
func TestMoveUnspreadShard(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		start func(t *testing.T) redis.UniversalClient
	}{
		{"one server", func(t *testing.T) redis.UniversalClient { return startRedis(t) }},
		{"cluster", func(t *testing.T) redis.UniversalClient {
			return rediscluster.StartT(t, rediscluster.Options{Replicas: -1}).Client(t)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rdb := tc.start(t)
			ctx := testwait.Context(t)
			open := func(shards int) *frontier.Frontier {
				o := testOptions(1)
				o.Shards = shards
				o.MinDelay = 0
				o.Clock = func() time.Time { return t0 }
				return frontier.New(rdb, o, prioritize.BreadthFirst{})
			}
			// Shard 1 of one shard is tagged "s1": the old layout of shard 1 of two.
			old := open(1)
			var us []crawlmsg.Discovered
			for h := range 5 {
				for p := range 2 {
					us = append(us, crawlmsg.Discovered{URL: fmt.Sprintf("http://h%d.test/%d", h, p)})
				}
			}
			if _, err := old.AddBatches(ctx, []frontier.Batch{{ID: "m", URLs: us}}); err != nil {
				t.Fatal(err)
			}
			out, err := old.Dispatch(ctx, 10)
			if err != nil || len(out) != 5 {
				t.Fatalf("dispatched %d, %v; want one task per host, 5", len(out), err)
			}
			before, err := old.Stats(ctx)
			if err != nil {
				t.Fatal(err)
			}

			moved, err := frontierkeys.MoveUnspreadShard(ctx, rdb, "t", 1, 2)
			if err != nil || moved == 0 {
				t.Fatalf("moved %d keys, %v", moved, err)
			}
			if left := keysLike(t, ctx, rdb, "t:{s1}:*"); left != 0 {
				t.Errorf("%d keys left under the old tag", left)
			}
			if again, err := frontierkeys.MoveUnspreadShard(ctx, rdb, "t", 1, 2); err != nil || again != 0 {
				t.Errorf("a second move moved %d keys, %v; want none", again, err)
			}
			f := open(2)
			if after, err := f.Stats(ctx); err != nil || fmt.Sprint(after) != fmt.Sprint(before) {
				t.Fatalf("stats under the spread tag %+v (%v), want the old layout's %+v", after, err, before)
			}
			var outs []crawlmsg.Outcome
			for _, tk := range out {
				outs = append(outs, ok200(tk))
			}
			applied, err := f.Complete(ctx, outs)
			if err != nil {
				t.Fatal(err)
			}
			for _, a := range applied {
				if a.Result != frontier.ResultFetched {
					t.Errorf("%s: outcome of a lease taken before the move applied as %v, want fetched", a.Host, a.Result)
				}
			}
			if rest, err := f.Dispatch(ctx, 10); err != nil || len(rest) != 5 {
				t.Errorf("dispatched %d after the move, %v; want the 5 URLs left", len(rest), err)
			}
		})
	}
}

// keysLike counts the keys matching pattern on every server rdb reaches.
func keysLike(t *testing.T, ctx context.Context, rdb redis.UniversalClient, pattern string) int {
	t.Helper()
	if c, ok := rdb.(*redis.ClusterClient); ok {
		n := 0
		for _, k := range rediscluster.KeysPerMasterT(t, c, pattern) {
			n += k
		}
		return n
	}
	keys, err := rdb.Keys(ctx, pattern).Result()
	if err != nil {
		t.Fatal(err)
	}
	return len(keys)
}
