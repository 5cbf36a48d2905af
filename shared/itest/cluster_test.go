package itest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/trawl/trawl/devstack/natscluster"
	"github.com/trawl/trawl/devstack/natsembed"
	"github.com/trawl/trawl/devstack/rediscluster"
	"github.com/trawl/trawl/shared/envconfig"
	"github.com/trawl/trawl/shared/natsx"
	"github.com/trawl/trawl/shared/redisx"
	"github.com/trawl/trawl/shared/testwait"
	"github.com/trawl/trawl/shared/topology"
)

var clusterTimings = topology.StageTimings{AckWait: 30 * time.Second, FetchAckWait: 150 * time.Second, MaxDeliver: 20}

// On a three-node cluster, TRAWL_NATS_URL lists every node, the topology is made with
// TRAWL_STREAM_REPLICAS=3, and a service keeps publishing and consuming through the loss
// of the node it is connected to: it reconnects to a survivor, and the streams keep a
// quorum of two.
func TestNATSClusterReplicasAndReconnect(t *testing.T) {
	t.Parallel()
	cl := natscluster.StartT(t, natscluster.Options{})
	env := envconfig.FromMap(map[string]string{"TRAWL_NATS_URL": cl.URL(), "TRAWL_STREAM_REPLICAS": "3", "TRAWL_SHARDS": "2"})
	common := envconfig.LoadCommon(env, "127.0.0.1:0")
	if err := common.Validate(); err != nil {
		t.Fatalf("a comma-separated TRAWL_NATS_URL: %v", err)
	}
	ctx := testwait.Context(t)
	nc, js, err := natsx.Connect(ctx, common.NATSURL, "itest", slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	o := common.Topology()
	if err := natsx.Ensure(ctx, js, o, clusterTimings, slog.Default()); err != nil {
		t.Fatal(err)
	}
	for _, sc := range topology.Streams(o) {
		st, err := js.Stream(ctx, sc.Name)
		if err != nil {
			t.Fatal(err)
		}
		info, err := st.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if info.Config.Replicas != 3 || info.Cluster == nil || len(info.Cluster.Replicas) != 2 {
			t.Errorf("stream %s: replicas %d, cluster %+v; want a leader and 2 replicas", sc.Name, info.Config.Replicas, info.Cluster)
		}
	}
	cons, err := js.Consumer(ctx, topology.StreamDiscovered, topology.ConsumerDedup)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, topology.SubjectDiscovered, []byte("before")); err != nil {
		t.Fatal(err)
	}

	// Stop the node the client is on.
	connected := nc.ConnectedUrl()
	stopped := -1
	for i, s := range cl.Nodes {
		if s.URL() == connected {
			stopped = i
		}
	}
	if stopped < 0 {
		t.Fatalf("connected to %s, not a node of %s", connected, cl.URL())
	}
	cl.StopNode(stopped)
	testwait.Eventually(t, 20*time.Second, "the client on a surviving node", func() bool {
		return nc.IsConnected() && nc.ConnectedUrl() != connected
	})
	// A stream whose leader was on the stopped node elects another; publishing retries
	// until it has.
	testwait.Eventually(t, 20*time.Second, "a publish acknowledged by the surviving quorum", func() bool {
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		_, err := js.Publish(pctx, topology.SubjectDiscovered, []byte("after"))
		return err == nil
	})
	var got []string
	testwait.Eventually(t, 20*time.Second, "both messages consumed", func() bool {
		batch, err := cons.Fetch(2, jetstream.FetchMaxWait(time.Second))
		if err != nil {
			return false
		}
		for m := range batch.Messages() {
			got = append(got, string(m.Data()))
			_ = m.Ack()
		}
		return len(got) >= 2
	})
	if strings.Join(got, ",") != "before,after" {
		t.Errorf("consumed %v, want before, after", got)
	}
	if err := cl.StartNode(stopped); err != nil {
		t.Fatal(err)
	}
}

// A single server cannot hold replicated streams: Ensure says so at once, naming the
// setting, instead of waiting forever.
func TestEnsureRefusesReplicasOnOneServer(t *testing.T) {
	t.Parallel()
	srv := natsembed.StartT(t)
	ctx, cancel := context.WithTimeout(testwait.Context(t), 15*time.Second)
	defer cancel()
	nc, js, err := natsx.Connect(ctx, srv.URL(), "itest", slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	o := topology.DefaultOptions(1)
	o.Replicas = 3
	err = natsx.Ensure(ctx, js, o, clusterTimings, slog.Default())
	if !errors.Is(err, natsx.ErrNotClustered) || !strings.Contains(err.Error(), "TRAWL_STREAM_REPLICAS=3") {
		t.Fatalf("Ensure with 3 replicas on one server = %v, want ErrNotClustered naming TRAWL_STREAM_REPLICAS", err)
	}
	if ctx.Err() != nil {
		t.Fatal("Ensure waited until its context ended")
	}
}

// connectCluster starts a Redis Cluster and connects to it as the services do.
func connectCluster(t *testing.T) (*rediscluster.Cluster, context.Context, redis.UniversalClient) {
	t.Helper()
	cl := rediscluster.StartT(t, rediscluster.Options{})
	ctx := testwait.Context(t)
	rdb, err := redisx.Connect(ctx, cl.URL(), slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rdb.Close() })
	return cl, ctx, rdb
}

// TRAWL_REDIS_URL as a seed list gives a cluster client that reaches every master, and
// the readiness write works through it; a Redis Cluster refuses a script whose keys span
// slots, which is why every script's keys share one hash tag.
func TestRedisClusterURL(t *testing.T) {
	t.Parallel()
	cl, ctx, rdb := connectCluster(t)
	if err := redisx.Ping(ctx, rdb); err != nil {
		t.Fatal(err)
	}
	for i := range 30 {
		if err := rdb.Set(ctx, fmt.Sprintf("k%d", i), i, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	masters, err := cl.Masters(ctx)
	if err != nil || len(masters) != 3 {
		t.Fatalf("masters %v, %v", masters, err)
	}
	err = rdb.Eval(ctx, "return redis.call('GET', KEYS[2])", []string{"trawl:{s0}:a", "trawl:{s1}:b"}).Err()
	if err == nil || !strings.Contains(err.Error(), "CROSSSLOT") {
		t.Errorf("a script over two hash tags: %v, want CROSSSLOT", err)
	}
	if err := rdb.Eval(ctx, "return redis.call('GET', KEYS[2])", []string{"trawl:{s0}:a", "trawl:{s0}:b"}).Err(); err != nil && err.Error() != "redis: nil" {
		t.Errorf("a script over one hash tag: %v", err)
	}
}

// Every service declares the topology at start-up, all at once. On a cluster, requests
// racing for the same replicated stream must not hang each other: the services are ready
// within seconds.
func TestEnsureConcurrentlyOnCluster(t *testing.T) {
	t.Parallel()
	cl := natscluster.StartT(t, natscluster.Options{})
	o := topology.DefaultOptions(2)
	o.Replicas = 3
	ctx, cancel := context.WithTimeout(testwait.Context(t), 15*time.Second)
	defer cancel()
	errs := make(chan error, 8)
	for i := range cap(errs) {
		go func() {
			nc, js, err := natsx.Connect(ctx, cl.URL(), fmt.Sprintf("svc-%d", i), slog.New(slog.DiscardHandler))
			if err != nil {
				errs <- err
				return
			}
			defer nc.Close()
			errs <- natsx.Ensure(ctx, js, o, clusterTimings, slog.New(slog.DiscardHandler))
		}()
	}
	for range cap(errs) {
		if err := <-errs; err != nil {
			t.Errorf("ensure: %v", err)
		}
	}
}

// TRAWL_RECRAWL_PLACEMENT pins each recrawl stream of a split to the server with its tag,
// so the schedules' memory divides among the servers; left to itself the cluster may put
// two streams on one server.
func TestRecrawlStreamsPlacedByTag(t *testing.T) {
	t.Parallel()
	cl := natscluster.StartT(t, natscluster.Options{})
	ctx, cancel := context.WithTimeout(testwait.Context(t), time.Minute)
	defer cancel()
	c := envconfig.LoadCommon(envconfig.FromMap(map[string]string{"TRAWL_SHARDS": "3",
		"TRAWL_RECRAWL": "adaptive", "TRAWL_RECRAWL_STREAMS": "3",
		"TRAWL_RECRAWL_PLACEMENT": natscluster.NodeTag(2) + "," + natscluster.NodeTag(0) + "," + natscluster.NodeTag(1)}), ":9100")
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	o := c.Topology()
	nc, js, err := natsx.Connect(ctx, cl.URL(), "placement", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if err := natsx.Ensure(ctx, js, o, clusterTimings, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	for g, node := range []int{2, 0, 1} {
		name := topology.RecrawlStreamName(g, 3)
		str, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		info, err := str.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if want := "trawl-n" + fmt.Sprint(node); info.Cluster == nil || info.Cluster.Leader != want {
			t.Errorf("%s is on %+v, want server %s (tag %s)", name, info.Cluster, want, natscluster.NodeTag(node))
		}
	}
}

// A write the Waiter has seen reach a replica survives the SIGKILL of its master: the
// promoted replica has it. A promoted master with no replica of its own is not waited on:
// it has none to fail over to.
func TestWaiterSurvivesMasterFailover(t *testing.T) {
	t.Parallel()
	cl, ctx, rdb := connectCluster(t)
	w := redisx.NewWaiter(rdb, 2*time.Second)
	ks := redisx.NewKeyspace("trawl", "s0")
	for i := range 500 {
		if err := rdb.RPush(ctx, ks.Key("q"), i).Err(); err != nil {
			t.Fatal(err)
		}
	}
	ok, err := w.Replicated(ctx, ks.Key("replicated"))
	if err != nil || !ok {
		t.Fatalf("Replicated = %v, %v; want a replica's acknowledgement", ok, err)
	}
	killed, err := cl.KillMaster(ctx, redisx.Slot(ks.Key("q")))
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.WaitFailover(ctx, killed); err != nil {
		t.Fatal(err)
	}
	var n int64
	testwait.Eventually(t, 20*time.Second, "the promoted master answers", func() bool {
		n, err = rdb.LLen(ctx, ks.Key("q")).Result()
		return err == nil
	})
	if n != 500 {
		t.Errorf("after failover of node %d the list holds %d of the 500 entries confirmed on a replica; the cluster:%s", killed, n, cl.Describe(ctx))
	}
	// The promoted master has no replica until the old one returns.
	start := time.Now()
	if ok, err := w.Replicated(ctx, ks.Key("replicated")); ok || err != nil {
		t.Errorf("Replicated on a master without replicas = %v, %v; want false", ok, err)
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("the wait on a master without replicas took %s, want no wait", took)
	}
	start = time.Now()
	if ok, _ := w.Replicated(ctx, ks.Key("replicated")); ok || time.Since(start) > 500*time.Millisecond {
		t.Errorf("a second wait on the lone master: %v after %s; want false at once", ok, time.Since(start))
	}
}

// Ensure creates first and updates only what exists: a consumer whose settings changed
// between two starts gets the new ones.
func TestEnsureUpdatesAChangedConsumer(t *testing.T) {
	t.Parallel()
	js := connect(t)
	ctx := testwait.Context(t)
	o := topology.DefaultOptions(1)
	tm := clusterTimings
	if err := natsx.Ensure(ctx, js, o, tm, slog.Default()); err != nil {
		t.Fatal(err)
	}
	tm.AckWait = 20 * time.Second
	if err := natsx.Ensure(ctx, js, o, tm, slog.Default()); err != nil {
		t.Fatal(err)
	}
	c, err := js.Consumer(ctx, topology.StreamDiscovered, topology.ConsumerDedup)
	if err != nil {
		t.Fatal(err)
	}
	if got := c.CachedInfo().Config.AckWait; got != 20*time.Second {
		t.Errorf("dedup consumer's ack wait %s after a start with 20s, want 20s", got)
	}
}
