//go:build k8s

package k8stest

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/trawl/trawl/devstack/blackbox"
	"github.com/trawl/trawl/devstack/synthweb"
)

// web serves the synthetic web from a pod: vhost1.synth.test … on one port, names the
// cluster's resolver answers with its service's address, and its request log on another.
func web(t *testing.T, pages int) (logURL string) {
	t.Helper()
	manifest := fmt.Sprintf(`apiVersion: v1
kind: Namespace
metadata: {name: %[1]s}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: synthweb, namespace: %[1]s}
spec:
  replicas: 1
  selector: {matchLabels: {app: synthweb}}
  template:
    metadata: {labels: {app: synthweb}}
    spec:
      containers:
        - name: synthweb
          image: trawl/synthweb:%[2]s
          imagePullPolicy: Never
          args: ["-hosts", "%[3]d", "-pages", "%[4]d", "-links", "4", "-port", "%[5]d", "-log-addr", ":%[6]d", "-max-depth", "20"]
          ports: [{containerPort: %[5]d}, {containerPort: %[6]d}]
          readinessProbe: {httpGet: {path: /log, port: %[6]d}, periodSeconds: 1}
---
apiVersion: v1
kind: Service
metadata: {name: synthweb, namespace: %[1]s}
spec:
  selector: {app: synthweb}
  ports: [{name: web, port: %[5]d}, {name: log, port: %[6]d}]
`, webNS, env.tag, webHosts, pages, webPort, logPort)
	kubectl(t, "delete", "namespace", webNS, "--ignore-not-found", "--wait")
	apply(t, manifest)
	kubectl(t, "-n", webNS, "rollout", "status", "deployment/synthweb", "--timeout=3m")
	// The pod's own address: the host routes to the pods' bridge, where a service's
	// address needs kube-proxy's rules for it in place first.
	ip := strings.TrimSpace(kubectl(t, "-n", webNS, "get", "pods", "-l", "app=synthweb", "-o", "jsonpath={.items[0].status.podIP}"))
	logURL = "http://" + net.JoinHostPort(ip, strconv.Itoa(logPort)) + "/log"
	eventually(t, time.Minute, "the web's log through its service", func() (bool, string) {
		var snap synthweb.Snapshot
		err := blackbox.GetJSON(logURL, &snap)
		return err == nil, fmt.Sprint(err)
	})
	return logURL
}

func apply(t *testing.T, manifest string) {
	t.Helper()
	f := filepath.Join(t.TempDir(), "manifest.yaml")
	if err := os.WriteFile(f, []byte(manifest), 0o644); err != nil {
		t.Fatal(err)
	}
	kubectl(t, "apply", "-f", f)
}

// install installs the chart as a user would, with the images imported (never pulled) and
// volumes for NATS and Redis: hostPath persistent volumes bound to their claims (the
// cluster has no storage provisioner), which outlive the pods.
func install(t *testing.T, delay time.Duration) {
	t.Helper()
	pvRoot := filepath.Join(os.TempDir(), "trawl-k8s-test", "pv")
	var pvs strings.Builder
	for _, store := range []string{"nats", "redis"} {
		dir := filepath.Join(pvRoot, store)
		if err := os.RemoveAll(dir); err != nil {
			t.Fatal(err)
		}
		// NATS and Redis run as users of their own, and a hostPath volume is not
		// chowned for them.
		if err := os.MkdirAll(dir, 0o777); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(dir, 0o777); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&pvs, `apiVersion: v1
kind: PersistentVolume
metadata: {name: trawl-test-%[1]s}
spec:
  capacity: {storage: 1Gi}
  accessModes: [ReadWriteOnce]
  persistentVolumeReclaimPolicy: Retain
  claimRef: {namespace: %[2]s, name: data-%[3]s-%[1]s-0}
  hostPath: {path: %[4]q, type: Directory}
---
`, store, namespace, release, dir)
	}
	apply(t, pvs.String())
	seeds := make([]string, webHosts)
	for i := range seeds {
		seeds[i] = fmt.Sprintf("http://vhost%d.synth.test:%d/", i+1, webPort)
	}
	values := map[string]any{
		"image": map[string]any{"tag": env.tag, "pullPolicy": "Never"},
		"config": map[string]any{
			"TRAWL_SEEDS": strings.Join(seeds, ","),
			// The web is a service of the cluster, in a private range.
			"TRAWL_ALLOW_CIDRS":     "10.0.0.0/8",
			"TRAWL_MIN_DELAY":       delay.String(),
			"TRAWL_LEASE_TTL":       leaseTTL,
			"TRAWL_LOG_FORMAT":      "text",
			"TRAWL_PAGES_MAX_BYTES": "128MiB",
			"TRAWL_DOCS_MAX_BYTES":  "64MiB",
		},
		"nats":  store(),
		"redis": store(),
	}
	// Two cores: requests the node can hold with three fetchers and a rolling update's
	// surge pod.
	for _, svc := range services {
		values[svc] = map[string]any{"resources": map[string]any{"requests": map[string]any{"cpu": "50m", "memory": "64Mi"}}}
	}
	b, err := json.Marshal(values)
	if err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(t.TempDir(), "values.json")
	if err := os.WriteFile(f, b, 0o644); err != nil {
		t.Fatal(err)
	}
	helm(t, "install", release, chartDir(), "-n", namespace, "--create-namespace", "-f", f, "--wait", "--timeout", "5m")
	t.Cleanup(func() { uninstall(t) })
}

func chartDir() string { return filepath.Join(root, "deploy", "helm", "trawl") }

func store() map[string]any {
	return map[string]any{
		"imagePullPolicy": "Never",
		"persistence":     map[string]any{"size": "1Gi"},
		"resources":       map[string]any{"requests": map[string]any{"cpu": "50m", "memory": "64Mi"}},
	}
}

// uninstall removes the release, its claims and the volumes, so that the next test starts
// from nothing.
func uninstall(t *testing.T) {
	if t.Failed() {
		// Not t.Context(): it has ended when cleanups run.
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		out, _ := env.cluster.Kubectl(ctx, "-n", namespace, "get", "pods,pvc", "-o", "wide")
		t.Logf("pods at the end:\n%s", out)
		for _, app := range append(services, "nats", "redis") {
			out, _ := env.cluster.Kubectl(ctx, "-n", namespace, "logs", "--tail", "30", "--prefix", "-l", "app.kubernetes.io/component="+app)
			t.Logf("%s's last log lines:\n%s", app, out)
		}
	}
	helm(t, "uninstall", release, "-n", namespace, "--wait", "--timeout", "3m")
	kubectl(t, "-n", namespace, "delete", "pvc", "--all", "--wait")
	kubectl(t, "delete", "pv", "trawl-test-nats", "trawl-test-redis", "--ignore-not-found", "--wait")
}

// waitDone waits until the scheduler's status says the crawl ended (blackbox.DoneTwice).
func waitDone(t *testing.T) blackbox.Status {
	t.Helper()
	url := "http://" + serviceAddr(t, namespace, release+"-scheduler", 9100) + "/status.json"
	start := time.Now()
	var st blackbox.Status
	eventually(t, crawlTimeout, "the crawl to end (status.json: nothing queued, in flight or in a backlog)", blackbox.DoneTwice(url, &st))
	t.Logf("crawl ended in %s", time.Since(start).Round(time.Second))
	return st
}

// waitRequests waits until the web has logged at least n requests.
func waitRequests(t *testing.T, logURL string, n int) synthweb.Snapshot {
	t.Helper()
	var snap synthweb.Snapshot
	eventually(t, 5*time.Minute, fmt.Sprintf("%d requests in the web's log", n), func() (bool, string) {
		snap = synthweb.Snapshot{}
		if err := blackbox.GetJSON(logURL, &snap); err != nil {
			return false, err.Error()
		}
		return len(snap.Requests) >= n, fmt.Sprintf("%d requests", len(snap.Requests))
	})
	return snap
}

func origin(host string) string { return "http://" + net.JoinHostPort(host, strconv.Itoa(webPort)) }

// judge checks the crawl from the web's log (blackbox.Judge); at most refetchBound pages
// may be requested more than once.
func judge(t *testing.T, logURL string, delay time.Duration, st blackbox.Status, refetchBound int) synthweb.Snapshot {
	t.Helper()
	var snap synthweb.Snapshot
	if err := blackbox.GetJSON(logURL, &snap); err != nil {
		t.Fatal(err)
	}
	blackbox.Judge(t, snap, st, blackbox.Crawl{Origin: origin, MinDelay: delay, MaxRetries: maxRetries, RefetchBound: refetchBound})
	return snap
}

// The chart installed on the cluster crawls the web to the end: every page once, and no
// politeness violation.
func TestCrawl(t *testing.T) {
	logURL := web(t, 30)
	install(t, minDelay)
	st := waitDone(t)
	judge(t, logURL, minDelay, st, 0)
}
