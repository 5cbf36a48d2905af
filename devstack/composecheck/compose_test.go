// Package composecheck loads the repository's compose.yaml with the Compose
// specification's own loader and checks that it runs Trawl as documented, and replays the
// Dockerfile's build stage for each service (read with BuildKit's parser) with this host's
// go, so an image that would not build fails `make test` without Docker.
package composecheck

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/cli"
	"github.com/compose-spec/compose-go/v2/types"
	"go.yaml.in/yaml/v4"

	"github.com/trawl/trawl/devstack/stack"
)

func load(t *testing.T, env ...string) (*types.Project, string) {
	return loadProfiles(t, nil, env...)
}

func loadProfiles(t *testing.T, profiles []string, env ...string) (*types.Project, string) {
	t.Helper()
	root, err := stack.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	opts, err := cli.NewProjectOptions([]string{filepath.Join(root, "compose.yaml")},
		cli.WithWorkingDirectory(root), cli.WithEnv(env), cli.WithEnvFiles(), cli.WithDotEnv,
		cli.WithProfiles(profiles))
	if err != nil {
		t.Fatal(err)
	}
	p, err := opts.LoadProject(context.Background())
	if err != nil {
		t.Fatalf("compose.yaml does not load: %v", err)
	}
	return p, root
}

var services = []string{"scheduler", "fetcher", "parser", "dedup"}

func TestComposeInfrastructure(t *testing.T) {
	p, _ := load(t)
	nats, err := p.GetService("nats")
	if err != nil {
		t.Fatal(err)
	}
	if p.Name != "trawl" {
		t.Errorf("project name %q, want trawl (COMPOSE_PROJECT_NAME in .env)", p.Name)
	}
	conf := mountedFile(t, nats, "/etc/nats/nats.conf")
	for _, want := range []string{"jetstream", "store_dir: /data", "max_payload: 8MB"} {
		if !strings.Contains(conf, want) {
			t.Errorf("NATS config lacks %q:\n%s", want, conf)
		}
	}
	if !hasVolumeAt(nats, "/data") {
		t.Error("NATS file store is not on a volume")
	}
	if nats.HealthCheck == nil || len(nats.HealthCheck.Test) == 0 {
		t.Error("NATS has no healthcheck")
	}
	redis, err := p.GetService("redis")
	if err != nil {
		t.Fatal(err)
	}
	// The AOF and its fsync: TestComposeFsyncIsOneSetting.
	if !hasVolumeAt(redis, "/data") {
		t.Error("redis data is not on a volume")
	}
	if redis.HealthCheck == nil {
		t.Error("redis has no healthcheck")
	}
}

func TestComposeServices(t *testing.T) {
	p, root := load(t)
	for _, name := range services {
		t.Run(name, func(t *testing.T) {
			s, err := p.GetService(name)
			if err != nil {
				t.Fatal(err)
			}
			if s.Build == nil {
				t.Fatal("not built from source")
			}
			if s.Build.Context != root {
				t.Errorf("build context %q, want the repository root (shared/ must be visible)", s.Build.Context)
			}
			df := filepath.Join(root, "Dockerfile")
			if s.Build.Dockerfile != "Dockerfile" && s.Build.Dockerfile != df {
				t.Errorf("dockerfile %q, want the one at the repository root", s.Build.Dockerfile)
			}
			if got := serviceArg(s); got != name || s.Build.Target != "service" {
				t.Errorf("builds SERVICE=%q, target %q; want SERVICE=%s, target service", got, s.Build.Target, name)
			}
			body, err := os.ReadFile(df)
			if err != nil {
				t.Fatal(err)
			}
			for _, want := range []string{" AS build", "ARG SERVICE", "GOWORK=off", "CGO_ENABLED=0", " AS service", "USER nonroot", "COPY --from=build"} {
				if !strings.Contains(string(body), want) {
					t.Errorf("Dockerfile lacks %q (multi-stage, per service, static, non-root)", want)
				}
			}
			if s.HealthCheck == nil || !slices.Contains(s.HealthCheck.Test, "healthcheck") {
				t.Errorf("healthcheck %v, want the binary's own healthcheck", s.HealthCheck)
			}
			for _, dep := range []string{"nats", "redis"} {
				d, ok := s.DependsOn[dep]
				if !ok || d.Condition != types.ServiceConditionHealthy {
					t.Errorf("depends_on %s: %+v, want condition service_healthy", dep, d)
				}
			}
			for _, v := range []string{"TRAWL_NATS_URL", "TRAWL_REDIS_URL", "TRAWL_USER_AGENT", "TRAWL_ROBOTS_AGENT", "TRAWL_MIN_DELAY", "TRAWL_MAX_DEPTH", "TRAWL_FETCH_CONCURRENCY"} {
				if _, ok := s.Environment[v]; !ok {
					t.Errorf("environment lacks %s", v)
				}
			}
		})
	}
}

// Fetchers scale with --scale: nothing in their definition may pin one instance.
func TestComposeFetcherScales(t *testing.T) {
	p, _ := load(t)
	f, err := p.GetService("fetcher")
	if err != nil {
		t.Fatal(err)
	}
	if f.ContainerName != "" {
		t.Errorf("fetcher has container_name %q: --scale would clash", f.ContainerName)
	}
	for _, name := range []string{"fetcher", "parser"} {
		s, _ := p.GetService(name)
		for _, port := range s.Ports {
			if port.Published != "" {
				t.Errorf("%s publishes host port %s: --scale would clash", name, port.Published)
			}
		}
		if s.ContainerName != "" {
			t.Errorf("%s has container_name %q", name, s.ContainerName)
		}
	}
}

// The status page and metrics are reachable from the host, on ports set in .env.
func TestComposePublishesStatusAndMetrics(t *testing.T) {
	p, _ := load(t)
	want := map[string]string{"scheduler": "8080", "dedup": "9104"}
	for name, host := range want {
		s, _ := p.GetService(name)
		found := false
		for _, port := range s.Ports {
			if port.Published == host && port.Target == 9100 {
				found = true
			}
		}
		if !found {
			t.Errorf("%s: ports %+v, want host %s → 9100", name, s.Ports, host)
		}
	}
	p, _ = load(t, "TRAWL_STATUS_PORT=18080")
	s, _ := p.GetService("scheduler")
	if len(s.Ports) == 0 || s.Ports[0].Published != "18080" {
		t.Errorf("TRAWL_STATUS_PORT not honoured: %+v", s.Ports)
	}
}

// .env holds the common settings and compose passes them to every service.
func TestComposeDotEnv(t *testing.T) {
	p, root := load(t)
	body, err := os.ReadFile(filepath.Join(root, ".env"))
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{"TRAWL_SEEDS", "TRAWL_USER_AGENT", "TRAWL_MIN_DELAY", "TRAWL_MAX_DEPTH", "TRAWL_FETCH_CONCURRENCY"} {
		if !strings.Contains(string(body), v+"=") {
			t.Errorf(".env lacks %s", v)
		}
	}
	s, _ := p.GetService("fetcher")
	if v := s.Environment["TRAWL_LOG_FORMAT"]; v == nil || *v != "json" {
		t.Errorf("TRAWL_LOG_FORMAT from .env = %v, want json", v)
	}
}

// The metrics profile adds Prometheus, scraping every replica of every service.
func TestComposePrometheusProfile(t *testing.T) {
	p, _ := load(t)
	if _, err := p.GetService("prometheus"); err == nil {
		t.Error("prometheus runs without the metrics profile")
	}
	p, _ = loadProfiles(t, []string{"metrics"})
	prom, err := p.GetService("prometheus")
	if err != nil {
		t.Fatalf("metrics profile has no prometheus: %v", err)
	}
	conf := mountedFile(t, prom, "/etc/prometheus/prometheus.yml")
	for _, want := range []string{"dns_sd_configs", "scheduler", "fetcher", "parser", "dedup", "archiver", "port: 9100"} {
		if !strings.Contains(conf, want) {
			t.Errorf("scrape config lacks %q:\n%s", want, conf)
		}
	}
}

// Settings given to compose reach every service.
func TestComposePassesSettings(t *testing.T) {
	p, _ := load(t, "TRAWL_MIN_DELAY=3s", "TRAWL_USER_AGENT=ExampleBot/1.0 (+https://example.org/bot)")
	for _, name := range services {
		s, _ := p.GetService(name)
		if v := s.Environment["TRAWL_MIN_DELAY"]; v == nil || *v != "3s" {
			t.Errorf("%s: TRAWL_MIN_DELAY = %v, want 3s", name, v)
		}
		if v := s.Environment["TRAWL_USER_AGENT"]; v == nil || *v != "ExampleBot/1.0 (+https://example.org/bot)" {
			t.Errorf("%s: TRAWL_USER_AGENT = %v", name, v)
		}
	}
}

// compose.yaml must load in every Compose v2 release and in docker-compose 1.29 (Debian 12's
// package), which reject a top-level `name` and inline `configs.content`, and ignore
// `configs` outside a swarm. The README promises that range; these are the keys that break it.
func TestComposePortable(t *testing.T) {
	root, err := stack.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(root, "compose.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		t.Fatalf("compose.yaml: %v", err)
	}
	for key := range doc {
		switch {
		case key == "services", key == "volumes", key == "networks", strings.HasPrefix(key, "x-"):
		default:
			t.Errorf("top-level key %q needs a newer Compose than the README promises", key)
		}
	}
	svcs, _ := doc["services"].(map[string]any)
	for name, v := range svcs {
		svc, _ := v.(map[string]any)
		for _, key := range []string{"configs", "secrets", "develop"} {
			if _, ok := svc[key]; ok {
				t.Errorf("service %s uses %q, which docker-compose 1.x rejects or ignores outside a swarm", name, key)
			}
		}
	}
}

// mountedFile reads the host file bind-mounted at target in s.
func mountedFile(t *testing.T, s types.ServiceConfig, target string) string {
	t.Helper()
	for _, v := range s.Volumes {
		if v.Target == target && v.Type == types.VolumeTypeBind {
			if !v.ReadOnly {
				t.Errorf("%s: %s is mounted writable", s.Name, target)
			}
			body, err := os.ReadFile(v.Source)
			if err != nil {
				t.Fatalf("%s: %s: %v", s.Name, target, err)
			}
			return string(body)
		}
	}
	t.Fatalf("%s: nothing is mounted at %s", s.Name, target)
	return ""
}

func hasVolumeAt(s types.ServiceConfig, target string) bool {
	for _, v := range s.Volumes {
		if v.Target == target && v.Type == types.VolumeTypeVolume {
			return true
		}
	}
	return false
}
