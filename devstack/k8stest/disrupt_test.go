//go:build k8s

package k8stest

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/trawl/trawl/devstack/synthweb"
)

// Mid-crawl, as an operator would: a fetcher pod deleted, the Redis pod deleted (its
// volume kept), the fetchers scaled from 1 to 3 with kubectl scale, and a helm upgrade to a
// new fetcher image. The crawl ends with every page fetched, none beyond the duplicate
// bound, and no politeness violation.
//
// The bound: a fetcher stopped while it holds tasks costs at most hosts × TRAWL_TASK_BATCH
// refetches (its leases expire and the tasks go to another); here fetchers stop twice,
// the deleted pod and the one the upgrade replaces (both by SIGTERM, after which a fetcher
// returns what it holds, so usually none). Redis's AOF is fsynced every second and its pod
// stopped by SIGTERM, which writes what it has.
func TestDisruptions(t *testing.T) {
	const (
		delay = time.Second
		pages = 120 // per host: at a second a page, two minutes of crawl for the steps
	)
	logURL := web(t, pages)
	install(t, delay)
	total := len(waitRequests(t, logURL, 0).Expected.Fetch)
	sel := "app.kubernetes.io/component="
	step := func(at int, what string, do func()) {
		t.Helper()
		snap := waitRequests(t, logURL, at)
		if done := crawled(snap); done >= total {
			t.Fatalf("the crawl ended (%d of %d pages) before %s: make the web larger", done, total, what)
		}
		t.Logf("%d of %d pages requested: %s", crawled(snap), total, what)
		do()
	}

	step(total/8, "a fetcher pod deleted", func() {
		kubectl(t, "-n", namespace, "delete", "pod", "-l", sel+"fetcher", "--wait=false")
		waitReady(t, sel+"fetcher", 1)
	})
	step(total/4, "the Redis pod deleted", func() {
		kubectl(t, "-n", namespace, "delete", "pod", release+"-redis-0", "--wait=false")
		waitReady(t, sel+"redis", 1)
	})
	step(total/3, "the fetchers scaled to 3", func() {
		kubectl(t, "-n", namespace, "scale", "deployment/"+release+"-fetcher", "--replicas=3")
		waitReady(t, sel+"fetcher", 3)
	})
	step(total/2, "helm upgrade to a new fetcher image", func() {
		helm(t, "upgrade", release, chartDir(), "-n", namespace, "--reuse-values",
			"--set", "fetcher.imageTag="+env.tag+"-next", "--set", "fetcher.replicas=3", "--wait", "--timeout", "5m")
		eventually(t, 3*time.Minute, "3 fetchers of the new image, and no other", func() (bool, string) {
			out, err := env.cluster.Kubectl(t.Context(), "-n", namespace, "get", "pods", "-l", sel+"fetcher",
				"-o", `jsonpath={range .items[*]}{.spec.containers[0].image} {.status.phase}{"\n"}{end}`)
			lines := strings.Fields(strings.ReplaceAll(strings.TrimSpace(out), "\n", " "))
			want := "trawl/fetcher:" + env.tag + "-next"
			ok := err == nil && len(lines) == 6
			for i := 0; ok && i < len(lines); i += 2 {
				ok = lines[i] == want && lines[i+1] == "Running"
			}
			return ok, fmt.Sprintf("%q %v", out, err)
		})
	})
	st := waitDone(t)
	snap := judge(t, logURL, delay, st, 2*webHosts*taskBatch)
	remotes := map[string]bool{}
	for _, r := range snap.Requests {
		remotes[r.Remote] = true
	}
	if len(remotes) < 3 {
		t.Errorf("requests came from %d fetcher address(es), want the scaled and upgraded fetchers to share the crawl", len(remotes))
	}
}

// crawled counts the distinct pages the web has served.
func crawled(snap synthweb.Snapshot) int {
	seen := map[string]bool{}
	for _, r := range snap.Requests {
		if r.Path != "/robots.txt" {
			seen[r.Host+r.Path] = true
		}
	}
	return len(seen)
}

// waitReady waits until n pods match the selector, every one of them Ready.
func waitReady(t *testing.T, selector string, n int) {
	t.Helper()
	eventually(t, 3*time.Minute, fmt.Sprintf("%d Ready pod(s) %s", n, selector), func() (bool, string) {
		out, err := env.cluster.Kubectl(t.Context(), "-n", namespace, "get", "pods", "-l", selector,
			"-o", `jsonpath={range .items[*]}{.metadata.deletionTimestamp}/{.status.conditions[?(@.type=="Ready")].status} {end}`)
		states := strings.Fields(out)
		ok := err == nil && len(states) == n
		for _, s := range states {
			ok = ok && s == "/True"
		}
		return ok, fmt.Sprintf("%q %v", out, err)
	})
}
