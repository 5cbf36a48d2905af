package natscluster

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/trawl/trawl/devstack/freeport"
	"github.com/trawl/trawl/devstack/natsembed"
)

// The variables trawl-nats reads its route credentials from (natsembed.Cluster's User and
// Password); compose.yaml's cluster profile takes the same names from .env.
const (
	RouteUserEnv     = "TRAWL_NATS_ROUTE_USER"
	RoutePasswordEnv = "TRAWL_NATS_ROUTE_PASSWORD"
)

// node is one trawl-nats child process of a cluster started with Options.Bin.
type node struct {
	bin  string
	args []string
	env  []string // the route credentials: out of the command line, which ps shows
	log  string   // file the process writes its output to
	url  string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

func (n *node) start() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	f, err := os.OpenFile(n.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("natscluster: %w", err)
	}
	cmd := exec.Command(n.bin, n.args...)
	cmd.Env = append(os.Environ(), n.env...)
	cmd.Stdout, cmd.Stderr = f, f
	// A test that dies must not leave servers behind.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("natscluster: start %s: %w", n.bin, err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		f.Close()
		close(done)
	}()
	n.cmd, n.done = cmd, done
	return nil
}

// signal sends sig and waits until the process is gone.
func (n *node) signal(sig syscall.Signal) {
	n.mu.Lock()
	cmd, done := n.cmd, n.done
	n.cmd = nil
	n.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(sig)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		<-done
	}
}

// startProcs runs the nodes as trawl-nats child processes.
func (c *Cluster) startProcs(ctx context.Context, opts Options, ports []int, routes []string) error {
	clientPorts, err := freeport.Ports(len(ports))
	if err != nil {
		return err
	}
	for i, p := range ports {
		store := filepath.Join(opts.StoreDir, "n"+strconv.Itoa(i))
		n := &node{bin: opts.Bin, log: store + ".log", url: "nats://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(clientPorts[i])), args: []string{
			"-store", store, "-host", "127.0.0.1", "-port", strconv.Itoa(clientPorts[i]),
			"-name", "trawl-n" + strconv.Itoa(i), "-cluster", "trawl", "-cluster-port", strconv.Itoa(p),
			"-routes", strings.Join(routes, ","), "-max-store", strconv.FormatInt(natsembed.TestMaxStore, 10), "-tags", NodeTag(i),
		}, env: []string{RouteUserEnv + "=" + c.RouteUser, RoutePasswordEnv + "=" + c.RoutePassword}}
		if err := n.start(); err != nil {
			return err
		}
		c.procs = append(c.procs, n)
	}
	return c.waitPlaceable(ctx)
}

// waitPlaceable waits until the cluster can place a stream on every running node: the
// meta group has a leader that sees them all. It makes and deletes a probe stream.
func (c *Cluster) waitPlaceable(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	running := len(c.procs) - len(c.stopped)
	var last error
	for {
		last = c.probe(ctx, running)
		if last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("natscluster: waiting for JetStream: %w (last: %v)", ctx.Err(), last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (c *Cluster) probe(ctx context.Context, replicas int) error {
	nc, err := nats.Connect(c.URL(), nats.Timeout(time.Second), nats.MaxReconnects(0))
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if _, err := js.CreateOrUpdateStream(pctx, jetstream.StreamConfig{Name: "NATSCLUSTER_PROBE", Subjects: []string{"natscluster.probe"}, Replicas: replicas, Storage: jetstream.MemoryStorage}); err != nil {
		return err
	}
	return js.DeleteStream(pctx, "NATSCLUSTER_PROBE")
}

// pid is the process's id, 0 when it is not running.
func (n *node) pid() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd == nil {
		return 0
	}
	return n.cmd.Process.Pid
}
