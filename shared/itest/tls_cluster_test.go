package itest

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/trawl/trawl/devstack/redisproc"
	"github.com/trawl/trawl/shared/envconfig"
	"github.com/trawl/trawl/shared/redisx"
	"github.com/trawl/trawl/shared/testwait"
)

// A Redis Cluster over TLS whose nodes each hold a certificate for their own address only
// (127.0.0.1, 127.0.0.2, 127.0.0.3): the cluster client verifies each node against that
// node's address, not the first seed's, so commands reach every master.
func TestRedisClusterTLSPerNodeNames(t *testing.T) {
	t.Parallel()
	pk := newPKI(t)
	const masters = 3
	type node struct {
		srv              *redisproc.Server
		ip               string
		tlsPort, busPort int
	}
	var nodes []node
	for i := range masters {
		ip := net.IPv4(127, 0, 0, byte(i+1))
		cert, key := pk.leafFor(t, fmt.Sprintf("node%d", i), ip)
		n := node{ip: ip.String()}
		// The plain port (on 127.0.0.1, redisproc's) builds the cluster; clients use TLS,
		// which tls-cluster makes the port the slot map announces.
		bind := []string{"--bind", "127.0.0.1"}
		if n.ip != "127.0.0.1" {
			bind = append(bind, n.ip)
		}
		n.srv = redisproc.StartT(t, redisproc.Options{Ephemeral: true, Args: append(bind,
			"--tls-cert-file", cert, "--tls-key-file", key,
			"--tls-ca-cert-file", pk.CA, "--tls-auth-clients", "no", "--tls-cluster", "yes",
			"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
			"--cluster-announce-ip", n.ip,
		), Ports: 2, PortArgs: func(p []int) []string {
			return []string{"--tls-port", strconv.Itoa(p[0]), "--cluster-port", strconv.Itoa(p[1])}
		}})
		ports := n.srv.Ports()
		n.tlsPort, n.busPort = ports[0], ports[1]
		nodes = append(nodes, n)
	}
	ctx, cancel := context.WithTimeout(testwait.Context(t), 60*time.Second)
	defer cancel()
	admin := func(i int) *redis.Client {
		c := redis.NewClient(&redis.Options{Addr: nodes[i].srv.Addr(), Protocol: 2})
		t.Cleanup(func() { c.Close() })
		return c
	}
	for i := range masters {
		lo, hi := i*redisx.Slots/masters, (i+1)*redisx.Slots/masters-1
		if err := admin(i).Do(ctx, "CLUSTER", "ADDSLOTSRANGE", lo, hi).Err(); err != nil {
			t.Fatalf("node %d: slots: %v", i, err)
		}
		if i > 0 {
			if err := admin(0).Do(ctx, "CLUSTER", "MEET", nodes[i].ip, nodes[i].tlsPort, nodes[i].busPort).Err(); err != nil {
				t.Fatalf("meet node %d: %v", i, err)
			}
		}
	}
	testwait.Eventually(t, 30*time.Second, "every node to see the cluster ok with all three masters", func() bool {
		for i := range masters {
			info, err := admin(i).ClusterInfo(ctx).Result()
			if err != nil || !strings.Contains(info, "cluster_state:ok") || !strings.Contains(info, "cluster_known_nodes:3") {
				return false
			}
		}
		return true
	})

	env := envconfig.FromMap(map[string]string{
		"TRAWL_REDIS_URL":    fmt.Sprintf("rediss-cluster://%s:%d", nodes[0].ip, nodes[0].tlsPort),
		"TRAWL_REDIS_TLS_CA": pk.CA,
	})
	c := envconfig.LoadConn(env)
	if err := c.Validate(nil); err != nil {
		t.Fatal(err)
	}
	rdb, err := redisx.Connect(ctx, c.RedisURL, slog.New(slog.DiscardHandler), c.RedisOptions()...)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer rdb.Close()
	// One key in each master's slots.
	for i := range masters {
		lo, hi := i*redisx.Slots/masters, (i+1)*redisx.Slots/masters-1
		key := ""
		for k := 0; key == ""; k++ {
			if s := redisx.Slot("k" + strconv.Itoa(k)); s >= lo && s <= hi {
				key = "k" + strconv.Itoa(k)
			}
		}
		if err := rdb.Set(ctx, key, "1", time.Minute).Err(); err != nil {
			t.Errorf("SET %s on the master at %s (certificate for %s only): %v", key, nodes[i].ip, nodes[i].ip, err)
		}
	}
}
