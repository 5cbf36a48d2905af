package helmcheck

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v4"

	"github.com/trawl/trawl/devstack/dockerhost"
	"github.com/trawl/trawl/devstack/stack"
	"github.com/trawl/trawl/shared/testwait"
)

// obj is one rendered Kubernetes object, read generically: the test checks the
// properties operators rely on, not every field.
type obj map[string]any

func (o obj) kind() string { return str(o, "kind") }
func (o obj) name() string { return str(o, "metadata", "name") }

// get walks maps by key and lists by index (an int); nil when a step is missing.
func get(v any, path ...any) any {
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, ok := v.(map[string]any)
			if !ok {
				if o, isObj := v.(obj); isObj {
					m, ok = map[string]any(o), true
				}
			}
			if !ok {
				return nil
			}
			v = m[k]
		case int:
			l, ok := v.([]any)
			if !ok || k >= len(l) {
				return nil
			}
			v = l[k]
		}
	}
	return v
}

func str(v any, path ...any) string {
	s, _ := get(v, path...).(string)
	return s
}

func list(v any, path ...any) []any {
	l, _ := get(v, path...).([]any)
	return l
}

type rendered struct {
	objs []obj
}

func (r rendered) find(kind, name string) obj {
	for _, o := range r.objs {
		if o.kind() == kind && o.name() == name {
			return o
		}
	}
	return nil
}

func (r rendered) names(kind string) []string {
	var n []string
	for _, o := range r.objs {
		if o.kind() == kind {
			n = append(n, o.name())
		}
	}
	slices.Sort(n)
	return n
}

func chartDir(t *testing.T) (root, chart string) {
	t.Helper()
	root, err := stack.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return root, filepath.Join(root, "deploy", "helm", "trawl")
}

func helm(t *testing.T) string {
	t.Helper()
	bin, err := Ensure(testwait.Context(t), os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// render lints the chart with args (values files, --set) and renders it as release "t".
func render(t *testing.T, bin, chart string, args ...string) (rendered, error) {
	t.Helper()
	ctx := testwait.Context(t)
	if out, err := dockerhost.Output(ctx, nil, bin, append([]string{"lint", "--strict", chart}, args...)...); err != nil {
		return rendered{}, errors.New(out + err.Error())
	}
	out, err := dockerhost.Output(ctx, nil, bin, append([]string{"template", "t", chart, "--namespace", "crawl"}, args...)...)
	if err != nil {
		return rendered{}, err
	}
	var r rendered
	dec := yaml.NewDecoder(strings.NewReader(out))
	for {
		var o map[string]any
		err := dec.Decode(&o)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("helm template's output is not YAML: %v", err)
		}
		if o != nil {
			r.objs = append(r.objs, obj(o))
		}
	}
	return r, nil
}

func TestChart(t *testing.T) {
	root, chart := chartDir(t)
	bin := helm(t)
	values := func(name string) string { return filepath.Join(root, "devstack", "helmcheck", "testdata", name) }
	core := []string{"t-trawl-dedup", "t-trawl-fetcher", "t-trawl-parser", "t-trawl-scheduler"}
	withAll := []string{"t-trawl-archiver", "t-trawl-dedup", "t-trawl-fetcher", "t-trawl-parser", "t-trawl-renderer", "t-trawl-scheduler"}
	cases := []struct {
		name        string
		args        []string
		deployments []string
		stores      bool   // NATS and Redis from the chart
		fsync       string // TRAWL_FSYNC everywhere
		secrets     string // Secret mounted at TRAWL_SECRETS_DIR; empty: none
		connection  string // Secret holding the URLs
		hpas        []string
	}{
		{name: "defaults", deployments: core, stores: true, fsync: "1s", connection: "t-trawl-connection"},
		{name: "fsync always", args: []string{"--set", "fsync=always"}, deployments: core, stores: true, fsync: "always", connection: "t-trawl-connection"},
		{name: "all features", args: []string{"-f", values("all-features.yaml")}, deployments: withAll, stores: true, fsync: "1s",
			secrets: "t-trawl-site-secrets", connection: "t-trawl-connection", hpas: []string{"t-trawl-fetcher", "t-trawl-parser", "t-trawl-renderer"}},
		{name: "external stores", args: []string{"-f", values("external-stores.yaml")},
			deployments: []string{"t-trawl-dedup", "t-trawl-fetcher", "t-trawl-parser", "t-trawl-renderer", "t-trawl-scheduler"},
			fsync:       "1s", secrets: "trawl-site-secrets", connection: "trawl-connection"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r, err := render(t, bin, chart, tc.args...)
			if err != nil {
				t.Fatalf("chart does not lint or render: %v", err)
			}
			for _, o := range r.objs {
				if err := strictDecode(o); err != nil {
					t.Errorf("not a valid Kubernetes object: %v", err)
				}
			}
			if got := r.names("Deployment"); !slices.Equal(got, tc.deployments) {
				t.Errorf("Deployments %v, want %v", got, tc.deployments)
			}
			if got := r.names("HorizontalPodAutoscaler"); !slices.Equal(got, tc.hpas) {
				t.Errorf("HPAs %v, want %v", got, tc.hpas)
			}
			cm := r.find("ConfigMap", "t-trawl-config")
			if cm == nil {
				t.Fatal("no ConfigMap t-trawl-config")
			}
			secretsDir := str(cm, "data", "TRAWL_SECRETS_DIR")
			if got := str(cm, "data", "TRAWL_FSYNC"); got != tc.fsync {
				t.Errorf("services' TRAWL_FSYNC %q, want %q", got, tc.fsync)
			}
			for _, name := range tc.deployments {
				checkService(t, r.find("Deployment", name), tc.connection, secretsDir, tc.secrets)
			}
			if slices.Contains(tc.deployments, "t-trawl-renderer") {
				checkRenderer(t, r, tc.stores)
			}
			if tc.stores {
				checkStores(t, r, root, tc.fsync)
			} else if got := r.names("StatefulSet"); len(got) != 0 {
				t.Errorf("StatefulSets %v with external stores", got)
			}
			if tc.connection == "t-trawl-connection" {
				s := r.find("Secret", tc.connection)
				if s == nil || str(s, "data", "nats-url") == "" || str(s, "data", "redis-url") == "" {
					t.Errorf("Secret %s lacks nats-url or redis-url: %v", tc.connection, s)
				}
			} else if s := r.find("Secret", "t-trawl-connection"); s != nil {
				t.Errorf("Secret t-trawl-connection made though connection.existingSecret is set")
			}
		})
	}
}

// checkService holds what every Trawl Deployment must have: its probes on the port
// TRAWL_HTTP_ADDR serves, memory requests and limits, the URLs from the connection Secret,
// a non-root pod that cannot gain privileges, and the site secrets where policies are read.
func checkService(t *testing.T, d obj, connection, secretsDir, secrets string) {
	t.Helper()
	if d == nil {
		return
	}
	name := strings.TrimPrefix(d.name(), "t-trawl-")
	spec := get(d, "spec", "template", "spec")
	c := get(spec, "containers", 0)
	for probe, path := range map[string]string{"readinessProbe": "/readyz", "livenessProbe": "/healthz"} {
		if got := str(c, probe, "httpGet", "path"); got != path {
			t.Errorf("%s: %s path %q, want %q", name, probe, got, path)
		}
		if got := str(c, probe, "httpGet", "port"); got != "metrics" {
			t.Errorf("%s: %s port %q, want metrics", name, probe, got)
		}
	}
	if got := get(c, "ports", 0, "containerPort"); got != 9100 {
		t.Errorf("%s: metrics port %v, want 9100 (TRAWL_HTTP_ADDR)", name, got)
	}
	for _, k := range []string{"requests", "limits"} {
		if str(c, "resources", k, "memory") == "" {
			t.Errorf("%s: no memory %s", name, k)
		}
	}
	env := map[string]any{}
	for _, e := range list(c, "env") {
		env[str(e, "name")] = e
	}
	for v, key := range map[string]string{"TRAWL_NATS_URL": "nats-url", "TRAWL_REDIS_URL": "redis-url"} {
		ref := get(env[v], "valueFrom", "secretKeyRef")
		if str(ref, "name") != connection || str(ref, "key") != key {
			t.Errorf("%s: %s from %v, want Secret %s key %s", name, v, ref, connection, key)
		}
	}
	// The Go runtime's soft limit follows the container's (runner.SetMemoryLimit).
	if ref := get(env["TRAWL_MEMORY_LIMIT"], "valueFrom", "resourceFieldRef"); str(ref, "resource") != "limits.memory" {
		t.Errorf("%s: TRAWL_MEMORY_LIMIT from %v, want resourceFieldRef limits.memory", name, ref)
	}
	if get(spec, "securityContext", "runAsNonRoot") != true {
		t.Errorf("%s: pod may run as root", name)
	}
	if get(c, "securityContext", "allowPrivilegeEscalation") != false {
		t.Errorf("%s: allowPrivilegeEscalation not false", name)
	}
	if drop := list(c, "securityContext", "capabilities", "drop"); !slices.Contains(drop, any("ALL")) {
		t.Errorf("%s: capabilities dropped %v, want ALL", name, drop)
	}
	policies := slices.Contains([]string{"scheduler", "fetcher", "parser", "renderer"}, name)
	var mounted string
	for _, m := range list(c, "volumeMounts") {
		if str(m, "name") == "site-secrets" {
			mounted = str(m, "mountPath")
		}
	}
	var secretName string
	for _, v := range list(spec, "volumes") {
		if str(v, "name") == "site-secrets" {
			secretName = str(v, "secret", "secretName")
		}
	}
	switch {
	case secrets != "" && policies:
		if mounted != secretsDir || secretName != secrets {
			t.Errorf("%s: site secrets %q at %q, want Secret %q at TRAWL_SECRETS_DIR %q", name, secretName, mounted, secrets, secretsDir)
		}
	case mounted != "":
		t.Errorf("%s: site secrets mounted at %q, want none", name, mounted)
	}
}

// checkRenderer holds the renderer's isolation: non-root, no privilege escalation, every
// capability dropped, a seccomp profile stated, and a NetworkPolicy that limits its
// egress to NATS, Redis, DNS and public addresses.
func checkRenderer(t *testing.T, r rendered, stores bool) {
	t.Helper()
	d := r.find("Deployment", "t-trawl-renderer")
	spec := get(d, "spec", "template", "spec")
	c := get(spec, "containers", 0)
	if uid, _ := get(spec, "securityContext", "runAsUser").(int); uid == 0 || get(spec, "securityContext", "runAsNonRoot") != true {
		t.Errorf("renderer pod securityContext %v: want non-root", get(spec, "securityContext"))
	}
	if str(c, "securityContext", "seccompProfile", "type") == "" {
		t.Errorf("renderer: no seccomp profile stated")
	}
	var shm bool
	for _, m := range list(c, "volumeMounts") {
		shm = shm || str(m, "mountPath") == "/dev/shm"
	}
	if !shm {
		t.Errorf("renderer: no /dev/shm volume for Chromium")
	}
	np := r.find("NetworkPolicy", "t-trawl-renderer")
	if np == nil {
		t.Fatal("no NetworkPolicy for the renderer")
	}
	if got := str(np, "spec", "podSelector", "matchLabels", "app.kubernetes.io/component"); got != "renderer" {
		t.Errorf("NetworkPolicy selects component %q, want renderer", got)
	}
	if types := list(np, "spec", "policyTypes"); !slices.Contains(types, any("Egress")) || !slices.Contains(types, any("Ingress")) {
		t.Errorf("NetworkPolicy policyTypes %v: want Ingress and Egress", types)
	}
	var ports []int
	var private bool
	for _, e := range list(np, "spec", "egress") {
		for _, p := range list(e, "ports") {
			if n, ok := get(p, "port").(int); ok {
				ports = append(ports, n)
			}
		}
		for _, to := range list(e, "to") {
			if str(to, "ipBlock", "cidr") == "0.0.0.0/0" {
				except := list(to, "ipBlock", "except")
				private = slices.Contains(except, any("10.0.0.0/8")) && slices.Contains(except, any("169.254.0.0/16"))
			}
		}
	}
	if !slices.Contains(ports, 53) {
		t.Errorf("NetworkPolicy egress ports %v: no DNS", ports)
	}
	if stores && (!slices.Contains(ports, 4222) || !slices.Contains(ports, 6379)) {
		t.Errorf("NetworkPolicy egress ports %v: want NATS 4222 and Redis 6379", ports)
	}
	if !private {
		t.Errorf("NetworkPolicy's web does not exclude the private and link-local ranges")
	}
}

// checkStores holds the chart's NATS and Redis to compose.yaml's: the same nats.conf, the
// same Redis command (so the same AOF fsync from TRAWL_FSYNC), both given TRAWL_FSYNC, on
// persistent volumes.
func checkStores(t *testing.T, r rendered, root, fsync string) {
	t.Helper()
	composeConf, err := os.ReadFile(filepath.Join(root, "deploy", "compose", "nats.conf"))
	if err != nil {
		t.Fatal(err)
	}
	if got := str(r.find("ConfigMap", "t-trawl-nats"), "data", "nats.conf"); got != string(composeConf) {
		t.Errorf("the chart's nats.conf differs from deploy/compose/nats.conf:\n%s", got)
	}
	raw, err := os.ReadFile(filepath.Join(root, "compose.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var compose map[string]any
	if err := yaml.Unmarshal(raw, &compose); err != nil {
		t.Fatal(err)
	}
	// Compose escapes the shell's $ as $$.
	composeRedis := strings.ReplaceAll(str(compose, "services", "redis", "command", 2), "$$", "$")
	for _, name := range []string{"t-trawl-nats", "t-trawl-redis"} {
		s := r.find("StatefulSet", name)
		if s == nil {
			t.Errorf("no StatefulSet %s", name)
			continue
		}
		if len(list(s, "spec", "volumeClaimTemplates")) == 0 {
			t.Errorf("%s: no persistent volume", name)
		}
		c := get(s, "spec", "template", "spec", "containers", 0)
		var got string
		for _, e := range list(c, "env") {
			if str(e, "name") == "TRAWL_FSYNC" {
				got = str(e, "value")
			}
		}
		if got != fsync {
			t.Errorf("%s: TRAWL_FSYNC %q, want %q", name, got, fsync)
		}
		if name == "t-trawl-redis" {
			if cmd := str(c, "command", 2); cmd != composeRedis || composeRedis == "" {
				t.Errorf("Redis command differs from compose.yaml's:\n%s\nwant\n%s", cmd, composeRedis)
			}
		}
	}
}

// TestChartRefuses holds the chart's refusals: a store turned off without its URL, and a
// config key the chart sets from a value of its own (a ConfigMap with the key twice).
func TestChartRefuses(t *testing.T) {
	_, chart := chartDir(t)
	bin := helm(t)
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"nats off without url", []string{"--set", "nats.enabled=false"}, "nats.url is required"},
		{"redis off without url", []string{"--set", "redis.enabled=false"}, "redis.url is required"},
		{"fsync in config", []string{"--set", "config.TRAWL_FSYNC=always"}, "config.TRAWL_FSYNC: set by fsync"},
		{"http addr in config", []string{"--set", "config.TRAWL_HTTP_ADDR=:80"}, "config.TRAWL_HTTP_ADDR: set by the chart"},
		{"secrets dir in config", []string{"--set", "config.TRAWL_SECRETS_DIR=/x"}, "config.TRAWL_SECRETS_DIR: set by siteSecrets.mountPath"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := render(t, bin, chart, tc.args...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("render with %v: %v, want an error saying %q", tc.args, err, tc.want)
			}
		})
	}
}
