//go:build compose

package composetest

import (
	"strings"
	"testing"
)

// The cluster profile, started with the README's own command on docker-compose 1.29 (which
// refuses options after service names) and on Compose v2: one NATS node and the Redis
// master of a shard SIGKILLed mid-crawl, and the crawl still ends with every page.
func TestClusterProfile(t *testing.T) {
	for _, tool := range []Tool{v1, v2} {
		t.Run(tool.Name, func(t *testing.T) { clusterProfile(t, tool) })
	}
}

func clusterProfile(t *testing.T, tool Tool) {
	s := newStack(t, tool, 40)
	cmd := readmeCommand(t, "the cluster profile", func(a []string) bool { return has(a, "cluster") })
	s.up(cmd)
	s.waitStatus(buildTimeout)
	snap := s.waitRequests(0)
	snap = s.waitRequests(len(snap.Expected.Fetch) / 4)
	s.kill(s.containers("cluster-nats-2")[0], "NATS node cluster-nats-2")
	master := s.redisMaster()
	s.kill(s.containers(master)[0], "Redis master "+master)
	st := s.waitDone(crawlTimeout)
	s.judge(st, webHosts*taskBatch)
}

// redisMaster names the service of a Redis Cluster master that serves slots.
func (s *Stack) redisMaster() string {
	s.t.Helper()
	out := s.docker("exec", s.containers("cluster-redis-1")[0], "redis-cli", "cluster", "nodes")
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) < 9 || !strings.Contains(f[2], "master") || strings.Contains(f[2], "fail") {
			continue
		}
		// ip:port@cport,hostname
		if _, host, ok := strings.Cut(f[1], ","); ok && strings.HasPrefix(host, "cluster-redis-") {
			return host
		}
	}
	s.t.Fatalf("no master serving slots in:\n%s", out)
	return ""
}
