package itest

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/trawl/trawl/devstack/rediscluster"
	"github.com/trawl/trawl/services/scheduler/internal/frontier"
	"github.com/trawl/trawl/services/scheduler/internal/prioritize"
	"github.com/trawl/trawl/shared/crawlmsg"
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
