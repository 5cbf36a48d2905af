// Package rediscluster runs a real Redis Cluster of redis-server child processes for tests:
// masters that split the 16384 slots evenly, each with its replicas, built with the
// CLUSTER commands (ADDSLOTSRANGE, MEET, REPLICATE) on free loopback ports. A master can be
// SIGKILLed and WaitFailover waits until its replica has been promoted, as Redis Cluster
// does on its own.
package rediscluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/trawl/trawl/devstack/redisproc"
	"github.com/trawl/trawl/shared/redisx"
)

// Slots is the number of hash slots of a Redis Cluster.
const Slots = 16384

// Options configure a cluster. The zero value is three masters with one replica each.
type Options struct {
	Masters  int // 0 = 3
	Replicas int // per master; 0 = 1, -1 = none
	// NodeTimeout is cluster-node-timeout: how long a node is unreachable before it is
	// failed and its replica promoted. 0 = 1 s, so a failover in a test takes a few
	// seconds rather than the production default's tens.
	NodeTimeout time.Duration
	// AOF turns each node's append-only file on. Off by default: in a cluster a crashed
	// master's data lives on in its replica, and a replica that has just synced rewrites
	// its AOF in a child process, which holds a stop of the node for seconds.
	AOF bool
}

func (o Options) withDefaults() Options {
	if o.Masters == 0 {
		o.Masters = 3
	}
	switch {
	case o.Replicas == 0:
		o.Replicas = 1
	case o.Replicas < 0:
		o.Replicas = 0
	}
	if o.NodeTimeout == 0 {
		o.NodeTimeout = time.Second
	}
	return o
}

// Cluster is a running Redis Cluster; its methods are for one goroutine at a time. Node i < Masters started as a master; node
// Masters + j·Masters + i as a replica of master i.
type Cluster struct {
	opts  Options
	Nodes []*redisproc.Server
	ids   []string
	down  map[int]bool // killed and not restarted
}

// setupTimeout bounds building the cluster when the caller's ctx has no deadline.
const setupTimeout = 60 * time.Second

// Start launches the nodes and joins them into a cluster whose every slot is served, with
// each replica's link to its master up.
func Start(ctx context.Context, opts Options) (_ *Cluster, err error) {
	opts = opts.withDefaults()
	if opts.Masters < 1 || opts.Masters > Slots {
		return nil, fmt.Errorf("rediscluster: %d masters: want 1..%d", opts.Masters, Slots)
	}
	ctx, cancel := context.WithTimeout(ctx, setupTimeout)
	defer cancel()
	c := &Cluster{opts: opts, down: map[int]bool{}}
	defer func() {
		if err != nil {
			_ = c.Stop()
		}
	}()
	n := opts.Masters * (1 + opts.Replicas)
	for range n {
		s, err := redisproc.Start(ctx, redisproc.Options{Ephemeral: !opts.AOF, Args: []string{
			"--cluster-enabled", "yes",
			"--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", strconv.FormatInt(opts.NodeTimeout.Milliseconds(), 10),
			// A replica's first sync starts at once instead of after the 5 s default.
			"--repl-diskless-sync-delay", "0",
			// A stopped master does not wait for replicas that are stopped or lagging.
			"--shutdown-timeout", "0",
		}})
		if err != nil {
			return nil, fmt.Errorf("rediscluster: node %d: %w", len(c.Nodes), err)
		}
		c.Nodes = append(c.Nodes, s)
	}
	for i, s := range c.Nodes {
		id, err := c.do(ctx, i, "CLUSTER", "MYID").Text()
		if err != nil {
			return nil, fmt.Errorf("rediscluster: node %s: %w", s.Addr(), err)
		}
		c.ids = append(c.ids, id)
	}
	for i := range opts.Masters {
		lo, hi := i*Slots/opts.Masters, (i+1)*Slots/opts.Masters-1
		if err := c.do(ctx, i, "CLUSTER", "ADDSLOTSRANGE", lo, hi).Err(); err != nil {
			return nil, fmt.Errorf("rediscluster: slots %d-%d to %s: %w", lo, hi, c.Nodes[i].Addr(), err)
		}
	}
	for i := 1; i < n; i++ {
		if err := c.do(ctx, 0, "CLUSTER", "MEET", "127.0.0.1", c.port(i)).Err(); err != nil {
			return nil, fmt.Errorf("rediscluster: meet %s: %w", c.Nodes[i].Addr(), err)
		}
	}
	// A replica can follow only a master it knows.
	if err := c.poll(ctx, "every node knows every other", func(ctx context.Context) error {
		for i := range c.Nodes {
			nodes, err := c.do(ctx, i, "CLUSTER", "NODES").Text()
			if err != nil {
				return err
			}
			if got := strings.Count(strings.TrimSpace(nodes), "\n") + 1; got != n {
				return fmt.Errorf("%s knows %d nodes of %d", c.Nodes[i].Addr(), got, n)
			}
		}
		return nil
	}); err != nil {
		return nil, err
	}
	for i := opts.Masters; i < n; i++ {
		if err := c.do(ctx, i, "CLUSTER", "REPLICATE", c.ids[i%opts.Masters]).Err(); err != nil {
			return nil, fmt.Errorf("rediscluster: %s replicating %s: %w", c.Nodes[i].Addr(), c.Nodes[i%opts.Masters].Addr(), err)
		}
	}
	if err := c.WaitHealthy(ctx); err != nil {
		return nil, err
	}
	return c, nil
}

// StartT starts a cluster for a test and stops it when the test ends. A cluster that
// cannot be started fails the test with the reason.
func StartT(t testing.TB, opts Options) *Cluster {
	t.Helper()
	c, err := Start(t.Context(), opts)
	if err != nil {
		t.Fatalf("rediscluster: cannot start a Redis Cluster: %v\n"+
			"These tests need a real redis-server binary (apt-get install -y redis-server).", err)
	}
	t.Cleanup(func() {
		if err := c.Stop(); err != nil {
			t.Errorf("rediscluster: stop: %v", err)
		}
	})
	return c
}

func (c *Cluster) port(i int) string {
	addr := c.Nodes[i].Addr()
	return addr[strings.LastIndex(addr, ":")+1:]
}

// do runs one command on node i with a fresh connection, so a killed node leaves nothing
// behind. The call is bounded by doTimeout whatever happens inside the client: a RESP3
// handshake read was once seen to outlive its read deadline by many minutes during a
// failover, so the connection speaks RESP2 and a call past its time is abandoned and its
// connection closed.
func (c *Cluster) do(ctx context.Context, i int, args ...any) *redis.Cmd {
	ctx, cancel := context.WithTimeout(ctx, doTimeout)
	defer cancel()
	cl := redis.NewClient(&redis.Options{Addr: c.Nodes[i].Addr(), Protocol: 2, MaxRetries: -1,
		DialTimeout: time.Second, ReadTimeout: doTimeout, WriteTimeout: doTimeout,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}})
	defer cl.Close()
	done := make(chan *redis.Cmd, 1)
	go func() { done <- cl.Do(ctx, args...) }()
	select {
	case cmd := <-done:
		return cmd
	case <-ctx.Done():
		cmd := redis.NewCmd(ctx, args...)
		cmd.SetErr(fmt.Errorf("rediscluster: node %d: %v: %w", i, args, ctx.Err()))
		return cmd
	}
}

// doTimeout bounds one command of do.
const doTimeout = 5 * time.Second

func (c *Cluster) poll(ctx context.Context, what string, cond func(context.Context) error) error {
	var last error
	for {
		if last = cond(ctx); last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("rediscluster: waiting until %s: %w (last: %v)", what, ctx.Err(), last)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// URL is TRAWL_REDIS_URL for the cluster: every node as a seed.
func (c *Cluster) URL() string {
	addrs := make([]string, len(c.Nodes))
	for i, s := range c.Nodes {
		addrs[i] = s.Addr()
	}
	return "redis://" + strings.Join(addrs, ",")
}

// Client returns the services' client for the cluster (redisx.Open of URL), closed when
// the test ends.
func (c *Cluster) Client(t testing.TB) *redis.ClusterClient {
	t.Helper()
	cl, err := redisx.Open(c.URL(), redisx.Timeouts{Dial: time.Second, Read: 5 * time.Second, Write: 5 * time.Second, Retries: 3})
	if err != nil {
		t.Fatalf("rediscluster: %v", err)
	}
	t.Cleanup(func() { cl.Close() })
	cc, ok := cl.(*redis.ClusterClient)
	if !ok {
		t.Fatalf("rediscluster: %s opened as %T, not a cluster client", c.URL(), cl)
	}
	return cc
}

// alive reports the nodes not killed.
func (c *Cluster) alive() []int {
	var out []int
	for i := range c.Nodes {
		if !c.down[i] {
			out = append(out, i)
		}
	}
	return out
}

// node is one line of CLUSTER NODES.
type node struct {
	id, addr string
	master   bool
	failed   bool // flagged fail (not only suspected, "fail?")
	slots    int
	linked   bool // connected to the cluster bus
}

func (c *Cluster) nodes(ctx context.Context, i int) ([]node, error) {
	text, err := c.do(ctx, i, "CLUSTER", "NODES").Text()
	if err != nil {
		return nil, err
	}
	var out []node
	for line := range strings.SplitSeq(strings.TrimSpace(text), "\n") {
		f := strings.Fields(line)
		if len(f) < 8 {
			return nil, fmt.Errorf("CLUSTER NODES line %q", line)
		}
		flags := strings.Split(f[2], ",")
		nd := node{id: f[0], addr: strings.Split(f[1], "@")[0], linked: f[7] == "connected"}
		for _, fl := range flags {
			switch fl {
			case "master":
				nd.master = true
			case "fail":
				nd.failed = true
			}
		}
		for _, r := range f[8:] {
			if strings.HasPrefix(r, "[") {
				continue // a slot being migrated
			}
			lo, hi, ok := strings.Cut(r, "-")
			a, _ := strconv.Atoi(lo)
			b := a
			if ok {
				b, _ = strconv.Atoi(hi)
			}
			nd.slots += b - a + 1
		}
		out = append(out, nd)
	}
	return out, nil
}

// Describe is every node as it sees itself, one line each — its address, flags and slots,
// its replication role and offset — for a test that failed to say what the cluster was
// doing. A node that cannot be read says why.
func (c *Cluster) Describe(ctx context.Context) string {
	var b strings.Builder
	for i, s := range c.Nodes {
		fmt.Fprintf(&b, "\n  node %d %s: ", i, s.Addr())
		if c.down[i] {
			b.WriteString("killed")
			continue
		}
		nodes, err := c.do(ctx, i, "CLUSTER", "NODES").Text()
		if err != nil {
			fmt.Fprintf(&b, "CLUSTER NODES: %v", err)
			continue
		}
		for line := range strings.SplitSeq(strings.TrimSpace(nodes), "\n") {
			if f := strings.Fields(line); len(f) >= 8 && strings.Contains(f[2], "myself") {
				fmt.Fprintf(&b, "%s %s", f[2], strings.Join(f[8:], " "))
			}
		}
		repl, err := c.do(ctx, i, "INFO", "replication").Text()
		if err != nil {
			fmt.Fprintf(&b, "; INFO replication: %v", err)
			continue
		}
		for line := range strings.SplitSeq(repl, "\n") {
			k, v, _ := strings.Cut(strings.TrimSpace(line), ":")
			switch k {
			case "role", "master_link_status", "master_sync_in_progress", "master_repl_offset", "connected_slaves":
				fmt.Fprintf(&b, "; %s=%s", k, v)
			}
		}
	}
	return b.String()
}

// Masters returns the indexes (into Nodes) of the running nodes that serve slots now.
func (c *Cluster) Masters(ctx context.Context) ([]int, error) {
	alive := c.alive()
	if len(alive) == 0 {
		return nil, errors.New("rediscluster: no node is running")
	}
	nodes, err := c.nodes(ctx, alive[0])
	if err != nil {
		return nil, fmt.Errorf("rediscluster: %w", err)
	}
	var out []int
	for _, nd := range nodes {
		if !nd.master || nd.failed || nd.slots == 0 {
			continue
		}
		for _, i := range alive {
			if c.Nodes[i].Addr() == nd.addr {
				out = append(out, i)
			}
		}
	}
	return out, nil
}

// WaitHealthy waits until every running node sees the cluster ok: all slots served by a
// master that is running, every running replica linked to its master.
func (c *Cluster) WaitHealthy(ctx context.Context) error {
	running := map[string]bool{}
	for _, i := range c.alive() {
		running[c.Nodes[i].Addr()] = true
	}
	return c.poll(ctx, "the cluster is healthy", func(ctx context.Context) error {
		for _, i := range c.alive() {
			info, err := c.do(ctx, i, "CLUSTER", "INFO").Text()
			if err != nil {
				return err
			}
			if !strings.Contains(info, "cluster_state:ok") || !strings.Contains(info, "cluster_slots_ok:"+strconv.Itoa(Slots)) {
				return fmt.Errorf("%s: %s", c.Nodes[i].Addr(), firstLines(info, 3))
			}
			nodes, err := c.nodes(ctx, i)
			if err != nil {
				return err
			}
			served := 0
			for _, nd := range nodes {
				if nd.master && !nd.failed && running[nd.addr] {
					served += nd.slots
				}
			}
			if served != Slots {
				return fmt.Errorf("%s sees %d slots served by running masters", c.Nodes[i].Addr(), served)
			}
			repl, err := c.do(ctx, i, "INFO", "replication").Text()
			if err != nil {
				return err
			}
			if strings.Contains(repl, "role:slave") && !strings.Contains(repl, "master_link_status:up") {
				return fmt.Errorf("%s: replica link down", c.Nodes[i].Addr())
			}
		}
		return nil
	})
}

func firstLines(s string, n int) string {
	lines := strings.SplitN(s, "\n", n+1)
	return strings.TrimSpace(strings.Join(lines[:min(n, len(lines))], " "))
}

// Kill SIGKILLs node i (a crash: no failover handshake, no flush).
func (c *Cluster) Kill(i int) error {
	c.down[i] = true
	if err := c.Nodes[i].Kill(); err != nil {
		return fmt.Errorf("rediscluster: kill %s: %w", c.Nodes[i].Addr(), err)
	}
	return nil
}

// KillMaster SIGKILLs the running master serving slot and returns its index.
func (c *Cluster) KillMaster(ctx context.Context, slot int) (int, error) {
	for _, i := range c.alive() {
		slots, err := c.do(ctx, i, "CLUSTER", "SLOTS").Slice()
		if err != nil {
			return -1, fmt.Errorf("rediscluster: %w", err)
		}
		for _, r := range slots {
			rng, _ := r.([]any)
			if len(rng) < 3 {
				continue
			}
			lo, _ := rng[0].(int64)
			hi, _ := rng[1].(int64)
			if int64(slot) < lo || int64(slot) > hi {
				continue
			}
			m, _ := rng[2].([]any)
			if len(m) < 2 {
				continue
			}
			port, _ := m[1].(int64)
			for j, s := range c.Nodes {
				if s.Addr() == "127.0.0.1:"+strconv.FormatInt(port, 10) {
					return j, c.Kill(j)
				}
			}
		}
		break
	}
	return -1, fmt.Errorf("rediscluster: no running master serves slot %d", slot)
}

// WaitFailover waits until the cluster has failed node i and serves every slot from
// running masters again (its replica promoted).
func (c *Cluster) WaitFailover(ctx context.Context, i int) error {
	dead := c.Nodes[i].Addr()
	err := c.poll(ctx, dead+" is failed over", func(ctx context.Context) error {
		for _, j := range c.alive() {
			nodes, err := c.nodes(ctx, j)
			if err != nil {
				return err
			}
			for _, nd := range nodes {
				if nd.addr == dead && (!nd.failed || nd.slots > 0) {
					return fmt.Errorf("%s sees %s failed=%v with %d slots", c.Nodes[j].Addr(), dead, nd.failed, nd.slots)
				}
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	return c.WaitHealthy(ctx)
}

// Restart starts a killed node again on its port and data; it rejoins the cluster (as a
// replica, if it was failed over meanwhile).
func (c *Cluster) Restart(ctx context.Context, i int) error {
	if err := c.Nodes[i].Restart(ctx); err != nil {
		return fmt.Errorf("rediscluster: %w", err)
	}
	delete(c.down, i)
	return nil
}

// Stop stops every node.
func (c *Cluster) Stop() error {
	var errs []error
	for _, s := range c.Nodes {
		errs = append(errs, s.Stop())
	}
	return errors.Join(errs...)
}

// KeysPerMaster counts, on each master c reaches, the keys matching pattern, in ascending
// order: how evenly a key family spread over the masters.
func KeysPerMaster(ctx context.Context, c *redis.ClusterClient, pattern string) ([]int, error) {
	var mu sync.Mutex
	var out []int
	err := c.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
		keys, err := m.Keys(ctx, pattern).Result()
		mu.Lock()
		out = append(out, len(keys))
		mu.Unlock()
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("rediscluster: keys %s per master: %w", pattern, err)
	}
	slices.Sort(out)
	return out, nil
}

// KeysPerMasterT is KeysPerMaster for a test, which it fails on error.
func KeysPerMasterT(t testing.TB, c *redis.ClusterClient, pattern string) []int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := KeysPerMaster(ctx, c, pattern)
	if err != nil {
		t.Fatal(err)
	}
	return out
}
