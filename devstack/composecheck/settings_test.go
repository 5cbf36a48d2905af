package composecheck

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/compose-spec/compose-go/v2/types"
	"go.yaml.in/yaml/v4"

	"github.com/trawl/trawl/devstack/dockerhost"
	"github.com/trawl/trawl/devstack/stack"
	"github.com/trawl/trawl/shared/envconfig/envdoc"
)

// allProfiles loads every service compose.yaml can run.
var allProfiles = []string{"archive", "render", "cluster", "metrics"}

// trawlServices are the services that run a Trawl program: those built from the
// Dockerfile with a SERVICE, of every profile.
func trawlServices(t *testing.T, p *types.Project) []types.ServiceConfig {
	t.Helper()
	var out []types.ServiceConfig
	for _, name := range slices.Sorted(maps.Keys(p.Services)) {
		s := p.Services[name]
		if s.Build != nil && s.Build.Args["SERVICE"] != nil {
			out = append(out, s)
		}
	}
	var names []string
	for _, s := range out {
		names = append(names, s.Name)
	}
	for _, want := range append(append(slices.Clone(services), "archiver", "renderer"), clusterServices...) {
		if !slices.Contains(names, want) {
			t.Fatalf("%s is not among the services built with a SERVICE (%v)", want, names)
		}
	}
	return out
}

func serviceSettings(t *testing.T, root string) []string {
	t.Helper()
	doc, err := envdoc.Read(root)
	if err != nil {
		t.Fatal(err)
	}
	names, err := doc.ServiceSettings()
	if err != nil {
		t.Fatal(err)
	}
	return names
}

// A setting documented for the services reaches them from .env or the shell: Compose
// gives a container only the variables its environment names, so one missing there is
// silently its default (TRAWL_MAX_PAGES_PER_HOST=60 in .env: a crawl with no budget).
func TestComposePassesEveryDocumentedSetting(t *testing.T) {
	p, root := loadProfiles(t, allProfiles)
	missing := map[string][]string{}
	for _, s := range trawlServices(t, p) {
		for _, name := range serviceSettings(t, root) {
			if _, ok := s.Environment[name]; !ok {
				missing[name] = append(missing[name], s.Name)
			}
		}
	}
	for _, name := range slices.Sorted(maps.Keys(missing)) {
		t.Errorf("%s is documented in %s but compose.yaml does not pass it to %s: add `%s: ${%s:-}` to x-trawl-pass",
			name, envdoc.Reference, strings.Join(missing[name], ", "), name, name)
	}
}

// x-trawl-pass is the reference's list and nothing else: each entry passes its own
// variable through with no fallback of its own (empty is the code's default), is a
// documented service setting (not a credential or port of Compose's, not a setting gone),
// and is not one x-trawl-env sets itself, which would override it unseen.
func TestComposePassThroughIsTheReference(t *testing.T) {
	root, err := stack.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	body, err := os.ReadFile(filepath.Join(root, "compose.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(body, &doc); err != nil {
		t.Fatal(err)
	}
	pass := mappingEntry(doc.Content[0], "x-trawl-pass")
	env := mappingEntry(doc.Content[0], "x-trawl-env")
	if pass == nil || env == nil {
		t.Fatal("compose.yaml has no x-trawl-pass or x-trawl-env mapping")
	}
	own := map[string]bool{}
	for i := 0; i+1 < len(env.Content); i += 2 {
		own[env.Content[i].Value] = true
	}
	if !own["<<"] {
		t.Error("x-trawl-env does not merge x-trawl-pass (<<: *trawl-pass)")
	}
	documented := serviceSettings(t, root)
	for i := 0; i+1 < len(pass.Content); i += 2 {
		k, v := pass.Content[i].Value, pass.Content[i+1].Value
		switch {
		case !slices.Contains(documented, k):
			t.Errorf("x-trawl-pass passes %s, which %s documents for no service", k, envdoc.Reference)
		case v != "${"+k+":-}":
			t.Errorf("x-trawl-pass: %s: %q, want ${%s:-}", k, v, k)
		case own[k]:
			t.Errorf("x-trawl-pass passes %s, which x-trawl-env sets itself", k)
		}
	}
}

// mappingEntry is the value of key in the mapping node m, nil when absent.
func mappingEntry(m *yaml.Node, key string) *yaml.Node {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}

// Compose's credentials reach a Trawl service only inside the URLs it connects with, and
// the route credentials none: passing the reference's settings through must not pass the
// tooling's (a renderer runs pages' JavaScript; its browser's environment is scrubbed,
// but the renderer itself must hold no more than it needs).
func TestComposeServicesGetNoOtherCredential(t *testing.T) {
	marks := map[string]string{
		"TRAWL_NATS_USER":           "natsusermark",
		"TRAWL_NATS_PASSWORD":       "natspwmark",
		"TRAWL_REDIS_PASSWORD":      "redispwmark",
		"TRAWL_NATS_ROUTE_USER":     "routeusermark",
		"TRAWL_NATS_ROUTE_PASSWORD": "routepwmark",
	}
	var env []string
	for k, v := range marks {
		env = append(env, k+"="+v)
	}
	p, _ := loadProfiles(t, allProfiles, env...)
	carriers := map[string]bool{"TRAWL_NATS_URL": true, "TRAWL_REDIS_URL": true}
	for _, s := range trawlServices(t, p) {
		t.Run(s.Name, func(t *testing.T) {
			for k, v := range s.Environment {
				if _, ok := marks[k]; ok {
					t.Errorf("%s is in its environment", k)
				}
				if v == nil {
					continue
				}
				for name, m := range marks {
					if strings.Contains(*v, m) && (!carriers[k] || strings.Contains(name, "ROUTE")) {
						t.Errorf("%s carries %s", k, name)
					}
				}
			}
		})
	}
}

// The precedence README and compose.yaml promise, through the real docker compose: the
// shell wins over .env, which wins over the code's default (an empty variable). Run on a
// copy of compose.yaml, .env and deploy/, whose .env the test may change.
func TestDockerComposeSettingPrecedence(t *testing.T) {
	docker, err := exec.LookPath("docker")
	if err != nil {
		t.Fatalf("this test runs `docker compose config` (Docker Compose v2; no daemon or image needed): %v", err)
	}
	// Debian's docker.io has no compose plugin: on a fresh machine it is built, once, as
	// make compose-test builds it.
	if _, err := dockerhost.EnsureComposeV2(t.Context(), t.Output()); err != nil {
		t.Fatalf("this test runs `docker compose config` (Docker Compose v2): %v", err)
	}
	root, err := stack.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	const v = "TRAWL_MAX_PAGES_PER_HOST"
	for _, tc := range []struct {
		name, shell, dotenv string
		want                string
	}{
		{"shell", "60", "", "60"},
		{".env", "", "61", "61"},
		{"shell over .env", "60", "61", "60"},
		{"neither: the code's default", "", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			for _, n := range []string{"compose.yaml", ".env", "deploy"} {
				if err := copyTree(filepath.Join(root, n), filepath.Join(dir, n), func(string) bool { return false }, false); err != nil {
					t.Fatal(err)
				}
			}
			if tc.dotenv != "" {
				appendFile(t, filepath.Join(dir, ".env"), v+"="+tc.dotenv+"\n")
			}
			env := cleanEnv()
			if tc.shell != "" {
				env = append(env, v+"="+tc.shell)
			}
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, docker, "compose", "--profile", "cluster", "config", "--format", "json")
			cmd.Dir, cmd.Env = dir, env
			out, err := cmd.Output()
			if err != nil {
				var stderr []byte
				if ee, ok := err.(*exec.ExitError); ok {
					stderr = ee.Stderr
				}
				t.Fatalf("docker compose config (Docker Compose v2 needed): %v\n%s", err, stderr)
			}
			var cfg struct {
				Services map[string]struct {
					Environment map[string]*string `json:"environment"`
				} `json:"services"`
			}
			if err := json.Unmarshal(out, &cfg); err != nil {
				t.Fatalf("docker compose config: %v", err)
			}
			for _, name := range []string{"scheduler", "cluster-scheduler-a", "cluster-scheduler-b"} {
				s, ok := cfg.Services[name]
				if !ok {
					t.Fatalf("docker compose config has no %s", name)
				}
				got, ok := s.Environment[v]
				switch {
				case !ok:
					t.Errorf("%s: %s is not in its environment (shell %q, .env %q): the setting never reaches it", name, v, tc.shell, tc.dotenv)
				case got == nil || *got != tc.want:
					t.Errorf("%s: %s = %v, want %q (shell %q, .env %q)", name, v, deref(got), tc.want, tc.shell, tc.dotenv)
				}
			}
		})
	}
}

// cleanEnv is this process's environment without the variables Compose would read into
// compose.yaml, so that each case sets its own.
func cleanEnv() []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "TRAWL_") && !strings.HasPrefix(kv, "COMPOSE_") {
			out = append(out, kv)
		}
	}
	return out
}

func deref(s *string) string {
	if s == nil {
		return "<nil>"
	}
	return fmt.Sprintf("%q", *s)
}

func appendFile(t *testing.T, path, s string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString("\n" + s); err != nil {
		t.Fatal(err)
	}
}
