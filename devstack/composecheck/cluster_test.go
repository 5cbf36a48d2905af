package composecheck

import (
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/types"
	"github.com/nats-io/nats-server/v2/server"

	"github.com/trawl/trawl/shared/redisx"
)

var (
	clusterNATS     = []string{"cluster-nats-1", "cluster-nats-2", "cluster-nats-3"}
	clusterRedis    = []string{"cluster-redis-1", "cluster-redis-2", "cluster-redis-3", "cluster-redis-4", "cluster-redis-5", "cluster-redis-6"}
	clusterServices = []string{"cluster-scheduler-a", "cluster-scheduler-b", "cluster-dedup", "cluster-fetcher", "cluster-parser"}
)

func env(s types.ServiceConfig, key string) string {
	if v := s.Environment[key]; v != nil {
		return *v
	}
	return ""
}

// The cluster profile stays out of the default stack, which keeps its single NATS and Redis.
func TestComposeClusterProfileIsOptIn(t *testing.T) {
	p, _ := load(t)
	for _, s := range p.Services {
		if strings.HasPrefix(s.Name, "cluster-") {
			t.Errorf("%s runs without the cluster profile", s.Name)
		}
	}
	for _, name := range services {
		s, _ := p.GetService(name)
		if got := env(s, "TRAWL_NATS_URL"); !strings.HasSuffix(got, "@nats:4222") {
			t.Errorf("%s: TRAWL_NATS_URL %q, want the single nats service", name, got)
		}
	}
}

// Three NATS nodes routed to each other with JetStream, each on its own volume and name.
func TestComposeClusterNATS(t *testing.T) {
	p, _ := loadProfiles(t, []string{"cluster"})
	names := map[string]bool{}
	volumes := map[string]bool{}
	for _, name := range clusterNATS {
		s, err := p.GetService(name)
		if err != nil {
			t.Fatal(err)
		}
		conf := mountedFile(t, s, "/etc/nats/nats.conf")
		for _, want := range []string{"jetstream", "store_dir: /data", "max_payload: 8MB", "server_name: $TRAWL_NATS_NODE"} {
			if !strings.Contains(conf, want) {
				t.Errorf("%s: config lacks %q", name, want)
			}
		}
		names[env(s, "TRAWL_NATS_NODE")] = true
		for _, v := range s.Volumes {
			if v.Target == "/data" && v.Type == types.VolumeTypeVolume {
				volumes[v.Source] = true
			}
		}
		if s.HealthCheck == nil || len(s.HealthCheck.Test) == 0 {
			t.Errorf("%s has no healthcheck", name)
		}
	}
	if len(names) != len(clusterNATS) || names[""] {
		t.Errorf("server names %v: each node needs its own", names)
	}
	if len(volumes) != len(clusterNATS) {
		t.Errorf("JetStream volumes %v: each node needs its own", volumes)
	}
}

// A node takes as a cluster peer only a server presenting TRAWL_NATS_ROUTE_USER and
// TRAWL_NATS_ROUTE_PASSWORD, and presents them on its routes to the others: the options
// nats-server makes of each node's command line and config file.
func TestComposeClusterNATSRoutes(t *testing.T) {
	_, root := load(t)
	example, err := os.ReadFile(filepath.Join(root, ".env.example"))
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{"TRAWL_NATS_ROUTE_USER=", "TRAWL_NATS_ROUTE_PASSWORD="} {
		if !strings.Contains(string(example), v) {
			t.Errorf(".env.example does not list %s", v)
		}
	}
	for _, tc := range []struct{ name, user, password string }{
		{"with route credentials", "route-user", "route-s3cret"},
		{"without", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, _ := loadProfiles(t, []string{"cluster"}, "TRAWL_NATS_ROUTE_USER="+tc.user, "TRAWL_NATS_ROUTE_PASSWORD="+tc.password)
			for _, name := range clusterNATS {
				s, err := p.GetService(name)
				if err != nil {
					t.Fatal(err)
				}
				o := natsServerOptions(t, s)
				if o.Cluster.Name != "trawl" || o.Cluster.Host != "0.0.0.0" || o.Cluster.Port != 6222 {
					t.Errorf("%s: cluster %q on %s:%d, want trawl on 0.0.0.0:6222", name, o.Cluster.Name, o.Cluster.Host, o.Cluster.Port)
				}
				if o.Cluster.Username != tc.user || o.Cluster.Password != tc.password {
					t.Errorf("%s: routes accept user %q password %q, want %q %q (TRAWL_NATS_ROUTE_USER, TRAWL_NATS_ROUTE_PASSWORD)",
						name, o.Cluster.Username, o.Cluster.Password, tc.user, tc.password)
				}
				routes := map[string]bool{}
				for _, r := range o.Routes {
					pw, _ := r.User.Password()
					if r.Scheme != "nats-route" || r.User.Username() != tc.user || pw != tc.password {
						t.Errorf("%s: route %s does not present the route credentials", name, r.Redacted())
					}
					routes[r.Host] = true
				}
				for _, peer := range clusterNATS {
					if !routes[peer+":6222"] {
						t.Errorf("%s: no route to %s", name, peer)
					}
				}
			}
		})
	}
}

// natsServerOptions parses s's command line as nats-server does, its config file the host
// file mounted at /etc/nats/nats.conf.
func natsServerOptions(t *testing.T, s types.ServiceConfig) *server.Options {
	t.Helper()
	var conf string
	for _, v := range s.Volumes {
		if v.Target == "/etc/nats/nats.conf" {
			conf = v.Source
		}
	}
	args := slices.Clone([]string(s.Command))
	if i := slices.Index(args, "-c"); i >= 0 && i+1 < len(args) && conf != "" {
		args[i+1] = conf
	} else {
		t.Fatalf("%s: command %v has no -c with the mounted config", s.Name, args)
	}
	// The config reads the node's environment (TRAWL_NATS_NODE, TRAWL_FSYNC).
	for k, v := range s.Environment {
		if v != nil {
			t.Setenv(k, *v)
		}
	}
	fs := flag.NewFlagSet("nats-server", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	o, err := server.ConfigureOptions(fs, args, func() {}, func() {}, func() {})
	if err != nil {
		t.Fatalf("%s: nats-server refuses %v: %v", s.Name, args, err)
	}
	return o
}

// Six redis-server nodes in cluster mode, joined as three masters with a replica each.
func TestComposeClusterRedis(t *testing.T) {
	p, _ := loadProfiles(t, []string{"cluster"})
	for _, name := range clusterRedis {
		s, err := p.GetService(name)
		if err != nil {
			t.Fatal(err)
		}
		cmd := strings.Join(s.Command, " ")
		for _, want := range []string{"--cluster-enabled yes", "--appendonly yes", "--requirepass", "--masterauth"} {
			if !strings.Contains(cmd, want) {
				t.Errorf("%s: command lacks %q: %s", name, want, cmd)
			}
		}
		if s.Hostname != name {
			t.Errorf("%s: hostname %q, announced to clients: want the service name", name, s.Hostname)
		}
		if !hasVolumeAt(s, "/data") {
			t.Errorf("%s: data not on a volume", name)
		}
	}
	init, err := p.GetService("cluster-redis-init")
	if err != nil {
		t.Fatal(err)
	}
	script := strings.Join(init.Entrypoint, " ")
	for _, want := range []string{"--cluster create", "--cluster-replicas 1", "--cluster-yes", "for i in 1 2 3 4 5 6", "cluster_state:ok"} {
		if !strings.Contains(script, want) {
			t.Errorf("cluster-redis-init lacks %q:\n%s", want, script)
		}
	}
	for _, name := range clusterRedis {
		if d, ok := init.DependsOn[name]; !ok || d.Condition != types.ServiceConditionHealthy {
			t.Errorf("cluster-redis-init: depends_on %s %+v, want service_healthy", name, d)
		}
	}
}

// Every service of the profile talks to the cluster's nodes, at three replicas, and the
// schedulers between them serve every shard exactly once.
func TestComposeClusterServices(t *testing.T) {
	p, _ := loadProfiles(t, []string{"cluster"})
	served := map[int]string{}
	shards := 0
	for _, name := range clusterServices {
		t.Run(name, func(t *testing.T) {
			s, err := p.GetService(name)
			if err != nil {
				t.Fatal(err)
			}
			var hosts []string
			for _, u := range strings.Split(env(s, "TRAWL_NATS_URL"), ",") {
				pu, err := url.Parse(strings.TrimSpace(u))
				if err != nil {
					t.Fatalf("TRAWL_NATS_URL: %v", err)
				}
				hosts = append(hosts, pu.Hostname())
			}
			if !slices.Equal(hosts, clusterNATS) {
				t.Errorf("TRAWL_NATS_URL servers %v, want %v", hosts, clusterNATS)
			}
			ru := env(s, "TRAWL_REDIS_URL")
			if !redisx.IsCluster(ru) {
				t.Errorf("TRAWL_REDIS_URL %q does not name a cluster", ru)
			}
			if err := redisx.Check(ru); err != nil {
				t.Errorf("TRAWL_REDIS_URL: %v", err)
			}
			for _, seed := range strings.Split(redisx.Addrs(ru), ",") {
				if host, _, _ := strings.Cut(seed, ":"); !slices.Contains(clusterRedis, host) {
					t.Errorf("TRAWL_REDIS_URL seed %q is not a node of the cluster", seed)
				}
			}
			if got := env(s, "TRAWL_STREAM_REPLICAS"); got != strconv.Itoa(len(clusterNATS)) {
				t.Errorf("TRAWL_STREAM_REPLICAS %q, want %d", got, len(clusterNATS))
			}
			if n, err := strconv.Atoi(env(s, "TRAWL_BLOOM_PARTS")); err != nil || n < 2 {
				t.Errorf("TRAWL_BLOOM_PARTS %q: the seen filter would sit on one master", env(s, "TRAWL_BLOOM_PARTS"))
			}
			if n, err := strconv.Atoi(env(s, "TRAWL_CONTENT_PARTS")); err != nil || n < 2 {
				t.Errorf("TRAWL_CONTENT_PARTS %q: the content-dedup index would sit on one master", env(s, "TRAWL_CONTENT_PARTS"))
			}
			if env(s, "TRAWL_REDIS_WAIT") == "" || env(s, "TRAWL_REDIS_WAIT") == "0" {
				t.Error("TRAWL_REDIS_WAIT unset: a master's failover could lose frontier adds and leases")
			}
			for _, dep := range clusterNATS {
				if d, ok := s.DependsOn[dep]; !ok || d.Condition != types.ServiceConditionHealthy {
					t.Errorf("depends_on %s: %+v, want service_healthy", dep, d)
				}
			}
			if d, ok := s.DependsOn["cluster-redis-init"]; !ok || d.Condition != types.ServiceConditionCompletedSuccessfully {
				t.Errorf("depends_on cluster-redis-init: %+v, want service_completed_successfully", d)
			}
			for _, single := range []string{"nats", "redis"} {
				if _, ok := s.DependsOn[single]; ok {
					t.Errorf("depends on the single-node %s", single)
				}
			}
			n, err := strconv.Atoi(env(s, "TRAWL_SHARDS"))
			if err != nil {
				t.Fatalf("TRAWL_SHARDS %q", env(s, "TRAWL_SHARDS"))
			}
			if shards != 0 && n != shards {
				t.Errorf("TRAWL_SHARDS %d, others have %d: fixed for a crawl", n, shards)
			}
			shards = n
			if !strings.HasPrefix(name, "cluster-scheduler-") {
				return
			}
			for _, sh := range shardList(t, env(s, "TRAWL_SCHEDULER_SHARDS")) {
				if other, ok := served[sh]; ok {
					t.Errorf("shard %d served by %s too", sh, other)
				}
				served[sh] = name
			}
		})
	}
	for sh := range shards {
		if _, ok := served[sh]; !ok {
			t.Errorf("shard %d of %d is served by no scheduler", sh, shards)
		}
	}
	if shards < len(clusterRedis)/2 {
		t.Errorf("%d shards for %d masters: a master would hold no frontier", shards, len(clusterRedis)/2)
	}
	for _, name := range []string{"cluster-fetcher", "cluster-parser"} {
		s, _ := p.GetService(name)
		if len(s.Ports) != 0 || s.ContainerName != "" {
			t.Errorf("%s pins a port or a name: --scale would clash", name)
		}
	}
}

// shardList reads TRAWL_SCHEDULER_SHARDS ("0,2,5-7").
func shardList(t *testing.T, v string) []int {
	t.Helper()
	var out []int
	for _, part := range strings.Split(v, ",") {
		lo, hi, isRange := strings.Cut(strings.TrimSpace(part), "-")
		a, err := strconv.Atoi(lo)
		b := a
		if err == nil && isRange {
			b, err = strconv.Atoi(hi)
		}
		if err != nil {
			t.Fatalf("TRAWL_SCHEDULER_SHARDS %q: %v", v, err)
		}
		for i := a; i <= b; i++ {
			out = append(out, i)
		}
	}
	return out
}

// Every published port, in every profile, binds to loopback unless TRAWL_BIND says otherwise.
func TestComposePortsBindLoopback(t *testing.T) {
	for _, tc := range []struct {
		bind, want string
	}{{"", "127.0.0.1"}, {"TRAWL_BIND=0.0.0.0", "0.0.0.0"}} {
		for _, profile := range []string{"", "metrics", "archive", "cluster"} {
			t.Run(fmt.Sprintf("%s/%s", profile, tc.want), func(t *testing.T) {
				var envs []string
				if tc.bind != "" {
					envs = append(envs, tc.bind)
				}
				var profiles []string
				if profile != "" {
					profiles = []string{profile}
				}
				p, _ := loadProfiles(t, profiles, envs...)
				published := 0
				for _, s := range p.Services {
					for _, port := range s.Ports {
						if port.Published == "" {
							continue
						}
						published++
						if port.HostIP != tc.want {
							t.Errorf("%s publishes %s on %q, want %s", s.Name, port.Published, port.HostIP, tc.want)
						}
					}
				}
				if published == 0 {
					t.Error("no published port found")
				}
			})
		}
	}
}

// Credentials set in the environment switch authentication on in NATS and Redis and reach
// every service's URLs; unset, nothing asks for or sends any.
func TestComposeCredentials(t *testing.T) {
	creds := []string{"TRAWL_NATS_USER=crawler", "TRAWL_NATS_PASSWORD=natspw", "TRAWL_REDIS_PASSWORD=redispw"}
	for _, tc := range []struct {
		name             string
		env              []string
		natsUser, natsPw string
		redisPw          string
	}{
		{"unset", nil, "", "", ""},
		{"set", creds, "crawler", "natspw", "redispw"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, _ := loadProfiles(t, []string{"cluster"}, tc.env...)
			for _, name := range append([]string{"nats"}, clusterNATS...) {
				s, _ := p.GetService(name)
				if !slices.Equal(argAfter(s.Command, "--user"), []string{tc.natsUser}) || !slices.Equal(argAfter(s.Command, "--pass"), []string{tc.natsPw}) {
					t.Errorf("%s: command %q, want --user %q --pass %q", name, s.Command, tc.natsUser, tc.natsPw)
				}
			}
			for _, name := range append([]string{"redis"}, clusterRedis...) {
				s, _ := p.GetService(name)
				args, err := redisArgs(t, s)
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				if got := argAfter(args, "--requirepass"); !slices.Equal(got, []string{tc.redisPw}) {
					t.Errorf("%s: --requirepass %q, want %q", name, got, tc.redisPw)
				}
			}
			for _, name := range append(append([]string{"cluster-redis-init"}, clusterRedis...), "redis") {
				s, _ := p.GetService(name)
				if got := env(s, "TRAWL_REDIS_PASSWORD"); got != tc.redisPw {
					t.Errorf("%s: TRAWL_REDIS_PASSWORD %q, want %q", name, got, tc.redisPw)
				}
			}
			for _, name := range append(slices.Clone(services), clusterServices...) {
				s, _ := p.GetService(name)
				for _, u := range strings.Split(env(s, "TRAWL_NATS_URL"), ",") {
					pu, err := url.Parse(u)
					if err != nil {
						t.Fatalf("%s: TRAWL_NATS_URL: %v", name, err)
					}
					if pw, _ := pu.User.Password(); pu.User.Username() != tc.natsUser || pw != tc.natsPw {
						t.Errorf("%s: TRAWL_NATS_URL %q does not carry the NATS credentials", name, u)
					}
				}
				ru := env(s, "TRAWL_REDIS_URL")
				if _, rest, _ := strings.Cut(ru, "://"); !strings.HasPrefix(rest, ":"+tc.redisPw+"@") {
					t.Errorf("%s: TRAWL_REDIS_URL %q does not carry the Redis password", name, ru)
				}
			}
		})
	}
}

// Secrets are not committed nor built into images: .env.example documents them, .env leaves
// them out and the Dockerfile does not mention them.
func TestComposeSecretsStayOut(t *testing.T) {
	_, root := load(t)
	secrets := []string{"TRAWL_NATS_USER", "TRAWL_NATS_PASSWORD", "TRAWL_REDIS_PASSWORD", "TRAWL_BIND"}
	example, err := os.ReadFile(filepath.Join(root, ".env.example"))
	if err != nil {
		t.Fatal(err)
	}
	dotenv, err := os.ReadFile(filepath.Join(root, ".env"))
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range secrets {
		if !strings.Contains(string(example), "\n"+v+"=") {
			t.Errorf(".env.example does not document %s", v)
		}
		if strings.Contains(string(dotenv), v+"=") {
			t.Errorf(".env, which is committed, sets %s", v)
		}
	}
	body, err := os.ReadFile(filepath.Join(root, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range secrets {
		if strings.Contains(string(body), v) {
			t.Errorf("the Dockerfile mentions %s", v)
		}
	}
}

// argAfter returns the arguments following flag in cmd (one per occurrence).
func argAfter(cmd []string, flag string) []string {
	var out []string
	for i, a := range cmd {
		if a == flag && i+1 < len(cmd) {
			out = append(out, cmd[i+1])
		}
	}
	return out
}
