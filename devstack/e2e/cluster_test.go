package e2e

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/trawl/trawl/devstack/natscluster"
	"github.com/trawl/trawl/devstack/rediscluster"
	"github.com/trawl/trawl/devstack/stack"
	"github.com/trawl/trawl/shared/frontierkeys"
	"github.com/trawl/trawl/shared/redisx"
)

// clusterDuplicates bounds the URLs fetched twice in the cluster crawl. A Redis master
// SIGKILLed mid-crawl takes with it what it had acknowledged but not yet passed to its
// replica (Redis replicates asynchronously): seen-filter bits, frontier steps. What the
// design does about each is in docs/clusters.md ("Running on clusters"); what is left
// is URLs fetched again, a few per failover.
const clusterDuplicates = 8

// The crawl on real clusters: three trawl-nats nodes with every stream at three replicas,
// a Redis Cluster of three masters with a replica each, two scheduler shards in their own
// processes and three fetchers. Mid-crawl one NATS node and then the Redis master that
// holds scheduler shard 0 are SIGKILLed; the services reconnect to the surviving NATS
// nodes and to the promoted replica, and the crawl finishes with full coverage and no
// politeness violation in the web's request log.
func TestCrawlOnClusters(t *testing.T) {
	t.Parallel()
	nc := natscluster.StartT(t, natscluster.Options{Bin: filepath.Join(binDir, stack.NATSServer), StoreDir: t.TempDir()})
	rc := rediscluster.StartT(t, rediscluster.Options{})
	env := testEnv()
	r := crawl(t, testWeb(), env, stack.Options{
		NATSURL:  nc.URL(),
		RedisURL: rc.URL(),
		Env: map[string]string{
			"TRAWL_SHARDS":          "2",
			"TRAWL_STREAM_REPLICAS": "3",
			"TRAWL_BLOOM_PARTS":     "6",
			"TRAWL_CONTENT_PARTS":   "6",
			"TRAWL_REDIS_WAIT":      "250ms",
		},
		Replicas: map[string]int{"scheduler": 2, "fetcher": 3},
		ProcEnv: map[string]map[string]string{
			"scheduler-0": {"TRAWL_SCHEDULER_SHARDS": "0"},
			"scheduler-1": {"TRAWL_SCHEDULER_SHARDS": "1"},
		},
	}, func(st *stack.Stack) {
		waitFetched(t, st, 40)
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		if err := nc.Kill(0); err != nil {
			t.Fatal(err)
		}
		slot := redisx.Slot(frontierkeys.ForShard("trawl", 0, 2).Heap())
		killed, err := rc.KillMaster(ctx, slot)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("SIGKILLed NATS node 0 (%s) and the Redis master of shard 0 (node %d, slot %d)", nc.NodeURL(0), killed, slot)
		if err := rc.WaitFailover(ctx, killed); err != nil {
			t.Fatal(err)
		}
	})
	checkInvariants(t, r, env, clusterDuplicates)
	again := map[string]int{}
	for _, q := range r.reqs {
		again[q.Host+q.Path]++
	}
	twice := 0
	for _, n := range again {
		if n > 1 {
			twice++
		}
	}
	t.Logf("crawled %d requests (%d fetched pages) in %s; %d URLs requested more than once (retries of failing hosts included)",
		len(r.reqs), r.progress.Fetched, r.took.Round(time.Millisecond), twice)
}
