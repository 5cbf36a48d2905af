// Package natscluster runs a NATS cluster of embedded nats-server nodes for tests: the
// nodes are joined over routes on loopback, each with JetStream and a store of its own,
// so streams can be made with several replicas. A node can be stopped and started again
// while the others go on.
package natscluster

import (
	"context"
	"crypto/rand"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/trawl/trawl/devstack/freeport"
	"github.com/trawl/trawl/devstack/natsembed"
)

// Options configure a cluster. The zero value is three nodes.
type Options struct {
	Nodes int // 0 = 3
	// StoreDir holds node i's JetStream store in StoreDir/n<i>; "" = a temp dir per node
	// (removed by Stop).
	StoreDir string
	Logger   *slog.Logger // the nodes' own log lines; nil discards them
	// Bin, if set, is a trawl-nats binary (devstack/cmd/trawl-nats): the nodes then run as
	// child processes, which Kill can SIGKILL, instead of inside the caller. StoreDir must
	// be set; node i logs to StoreDir/n<i>.log.
	Bin string
}

// NodeTag is node i's server tag: a stream whose placement names it is put on node i.
func NodeTag(i int) string { return "node:" + strconv.Itoa(i) }

// Cluster is a running NATS cluster; its methods are for one goroutine at a time.
type Cluster struct {
	// RouteUser and RoutePassword are what a server must present to join the cluster,
	// made at random by Start: a cluster on loopback is still reached by every local
	// process. RouteURLs are the nodes' route addresses, without them.
	RouteUser, RoutePassword string
	RouteURLs                []string
	Nodes                    []*natsembed.Server // in-process nodes (nil with Options.Bin)
	procs                    []*node             // child-process nodes (Options.Bin)
	stopped                  map[int]bool
}

// readyTimeout bounds the wait for the JetStream meta group when ctx has no deadline.
const readyTimeout = 30 * time.Second

// Start launches the nodes and waits until every one is current with a JetStream meta
// leader that knows them all.
func Start(ctx context.Context, opts Options) (_ *Cluster, err error) {
	if opts.Nodes == 0 {
		opts.Nodes = 3
	}
	c := &Cluster{stopped: map[int]bool{}, RouteUser: "trawl-route", RoutePassword: rand.Text()}
	defer func() {
		if err != nil {
			c.Stop()
		}
	}()
	ports, err := freeport.Ports(opts.Nodes)
	if err != nil {
		return nil, err
	}
	routes := make([]string, len(ports))
	for i, p := range ports {
		routes[i] = "nats-route://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(p))
	}
	c.RouteURLs = routes
	if opts.Bin != "" {
		if opts.StoreDir == "" {
			return nil, fmt.Errorf("natscluster: a cluster of %s processes needs Options.StoreDir", opts.Bin)
		}
		if err := c.startProcs(ctx, opts, ports, routes); err != nil {
			return nil, err
		}
		return c, nil
	}
	for i, p := range ports {
		o := natsembed.Options{
			ServerName: "trawl-n" + strconv.Itoa(i),
			MaxStore:   natsembed.TestMaxStore,
			Tags:       []string{NodeTag(i)},
			Logger:     opts.Logger,
			Cluster:    &natsembed.Cluster{Name: "trawl", Port: p, Routes: routes, User: c.RouteUser, Password: c.RoutePassword},
		}
		if opts.StoreDir != "" {
			o.StoreDir = fmt.Sprintf("%s/n%d", opts.StoreDir, i)
		}
		s, err := natsembed.Start(o)
		if err != nil {
			return nil, fmt.Errorf("natscluster: node %d: %w", i, err)
		}
		c.Nodes = append(c.Nodes, s)
	}
	if err := c.WaitReady(ctx); err != nil {
		return nil, err
	}
	return c, nil
}

// StartT starts a cluster for a test, with its stores in t.TempDir, and stops it when the
// test ends.
func StartT(t testing.TB, opts Options) *Cluster {
	t.Helper()
	if opts.StoreDir == "" {
		opts.StoreDir = t.TempDir()
	}
	c, err := Start(t.Context(), opts)
	if err != nil {
		t.Fatalf("natscluster: cannot start a NATS cluster: %v", err)
	}
	t.Cleanup(c.Stop)
	return c
}

// URL is TRAWL_NATS_URL for the cluster: every node's client URL, comma-separated.
func (c *Cluster) URL() string {
	var urls []string
	for _, s := range c.Nodes {
		urls = append(urls, s.URL())
	}
	for _, n := range c.procs {
		urls = append(urls, n.url)
	}
	return strings.Join(urls, ",")
}

// NodeURL is node i's client URL.
func (c *Cluster) NodeURL(i int) string {
	if c.procs != nil {
		return c.procs[i].url
	}
	return c.Nodes[i].URL()
}

// PID is node i's process id, to read its memory from /proc: 0 for a node that runs in
// this process (no Options.Bin) or is stopped.
func (c *Cluster) PID(i int) int {
	if c.procs == nil {
		return 0
	}
	return c.procs[i].pid()
}

// WaitReady waits until every running node is current with a JetStream meta leader that
// sees every running node online.
func (c *Cluster) WaitReady(ctx context.Context) error {
	if c.procs != nil {
		return c.waitPlaceable(ctx)
	}
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	var last string
	for {
		last = "no meta leader"
		running := len(c.Nodes) - len(c.stopped)
		led := false
		for i, s := range c.Nodes {
			if c.stopped[i] {
				continue
			}
			peers, leader, current := s.JetStreamPeers()
			if !current {
				last = fmt.Sprintf("node %d is not current with a meta leader", i)
				led = false
				break
			}
			if leader {
				// Exactly: a stopped node the leader still counts online would be given
				// replicas that can never elect a leader.
				if led = peers == running; !led {
					last = fmt.Sprintf("the meta leader (node %d) sees %d JetStream peers online, want the %d running", i, peers, running)
				}
			}
		}
		if led {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("natscluster: waiting for JetStream: %w (%s)", ctx.Err(), last)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// StopNode shuts node i down (its store stays for StartNode); the others go on.
func (c *Cluster) StopNode(i int) {
	c.stopped[i] = true
	if c.procs != nil {
		c.procs[i].signal(syscall.SIGTERM)
		return
	}
	c.Nodes[i].StopKeepingStore()
}

// Kill SIGKILLs node i, a child process (Options.Bin): a crash, with no goodbye to the
// cluster or the clients.
func (c *Cluster) Kill(i int) error {
	if c.procs == nil {
		return fmt.Errorf("natscluster: node %d runs in this process; only a cluster started with Options.Bin can be killed", i)
	}
	c.stopped[i] = true
	c.procs[i].signal(syscall.SIGKILL)
	return nil
}

// StartNode starts node i again on its ports and store.
func (c *Cluster) StartNode(i int) error {
	if c.procs != nil {
		if err := c.procs[i].start(); err != nil {
			return err
		}
		delete(c.stopped, i)
		return nil
	}
	if err := c.Nodes[i].Restart(); err != nil {
		return fmt.Errorf("natscluster: node %d: %w", i, err)
	}
	delete(c.stopped, i)
	return nil
}

// Stop shuts every node down.
func (c *Cluster) Stop() {
	for _, s := range c.Nodes {
		s.Close()
	}
	for _, n := range c.procs {
		n.signal(syscall.SIGTERM)
	}
}
