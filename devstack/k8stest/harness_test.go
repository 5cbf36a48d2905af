//go:build k8s

// Package k8stest runs the Helm chart (deploy/helm/trawl) on a real single-node Kubernetes
// cluster built and started here (devstack/k8scluster), with images built locally and
// imported into the node's containerd, and judges crawls of the synthetic web, served
// from a pod of the same cluster, from the web's own request log (`make k8s-test`).
package k8stest

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/trawl/trawl/devstack/dockerhost"
	"github.com/trawl/trawl/devstack/helmcheck"
	"github.com/trawl/trawl/devstack/k8scluster"
)

const (
	release   = "trawl"
	namespace = "trawl"
	webNS     = "web"
	// The crawl's settings, as the compose test's: politeness the log can check, a lease a
	// lost fetcher's tasks come back after.
	minDelay   = 300 * time.Millisecond
	leaseTTL   = "60s"
	maxRetries = 3 // TRAWL_MAX_RETRIES's default
	webPort    = 8080
	logPort    = 8081
	webHosts   = 3
	// taskBatch is TRAWL_TASK_BATCH's default: a fetcher lost with its tasks costs at most
	// hosts × taskBatch refetches.
	taskBatch    = 8
	crawlTimeout = 10 * time.Minute
)

var root = func() string {
	wd, _ := os.Getwd()
	return filepath.Dir(filepath.Dir(wd))
}()

// env is the cluster and the tools, set up once by TestMain for every test.
var env struct {
	cluster *k8scluster.Cluster
	helm    string
	tag     string // the images' tag
}

func TestMain(m *testing.M) {
	code, err := setUp(m)
	if err != nil {
		fmt.Fprintln(os.Stderr, "k8stest:", err)
		os.Exit(1)
	}
	os.Exit(code())
}

// setUp builds (once, cached) and starts the cluster, builds the images and imports them,
// and returns the run of the tests, which stops the cluster after them.
func setUp(m *testing.M) (func() int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Minute)
	defer cancel()
	start := time.Now()
	bin, err := k8scluster.Build(ctx, os.Stderr)
	if err != nil {
		return nil, err
	}
	if env.helm, err = helmcheck.Ensure(ctx, os.Stderr); err != nil {
		return nil, err
	}
	fmt.Fprintf(os.Stderr, "k8stest: binaries ready in %s\n", time.Since(start).Round(time.Second))
	t0 := time.Now()
	if _, err := dockerhost.EnsureEngine(ctx, os.Stderr, filepath.Join(os.TempDir(), "trawl-dockerd.log")); err != nil {
		return nil, err
	}
	if err := (dockerhost.Standins{Root: root, Log: os.Stderr}).Ensure(ctx); err != nil {
		return nil, err
	}
	env.tag = "k8s-test"
	images, err := buildImages(ctx, env.tag)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(os.Stderr, "k8stest: images built in %s\n", time.Since(t0).Round(time.Second))
	dir := filepath.Join(os.TempDir(), "trawl-k8s-test")
	if err := k8scluster.Remove(dir); err != nil {
		return nil, err
	}
	t0 = time.Now()
	c, err := k8scluster.Start(ctx, k8scluster.Options{Dir: dir, Bin: bin, Log: os.Stderr,
		Aliases: map[string]string{".synth.test": webNS + "/synthweb"}})
	if err != nil {
		return nil, err
	}
	env.cluster = c
	fmt.Fprintf(os.Stderr, "k8stest: cluster up in %s\n", time.Since(t0).Round(time.Second))
	if err := importImages(ctx, c, images); err != nil {
		c.Stop()
		return nil, err
	}
	// Interrupted, the cluster is stopped all the same: its processes and the pods'
	// containers would otherwise outlive the test.
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	go func() {
		<-sig
		fmt.Fprintln(os.Stderr, "k8stest: interrupted; stopping the cluster")
		c.Stop()
		os.Exit(1)
	}()
	return func() int {
		code := m.Run()
		c.Stop()
		// Kept after a failure: the components' logs are in dir/logs.
		if code == 0 {
			if err := k8scluster.Remove(dir); err != nil {
				fmt.Fprintln(os.Stderr, "k8stest:", err)
			}
		} else {
			fmt.Fprintf(os.Stderr, "k8stest: the cluster's logs are in %s\n", filepath.Join(dir, "logs"))
		}
		return code
	}, nil
}

// services are the chart's services the test runs (the archiver and renderer are off by
// the chart's defaults).
var services = []string{"scheduler", "fetcher", "parser", "dedup"}

// buildImages builds the services' images and the synthetic web's with the Docker engine,
// as compose.yaml builds them, and returns every image the pods run.
func buildImages(ctx context.Context, tag string) ([]string, error) {
	// BuildKit would fetch the Dockerfiles' syntax image from a registry; the classic
	// builder reads them as they are.
	denv := append(os.Environ(), "DOCKER_BUILDKIT=0")
	var images []string
	for _, svc := range services {
		img := "trawl/" + svc + ":" + tag
		if err := dockerhost.Run(ctx, io.Discard, root, denv, "docker", "build", "-q", "--build-arg", "SERVICE="+svc, "--target", "service", "-t", img, "."); err != nil {
			return nil, fmt.Errorf("build %s: %w", img, err)
		}
		images = append(images, img)
	}
	// The image a helm upgrade moves the fetchers to: the same build, another image (its
	// configuration, hence its digest, differs by a label).
	next := "trawl/fetcher:" + tag + "-next"
	if err := dockerhost.Run(ctx, io.Discard, root, denv, "docker", "build", "-q", "--build-arg", "SERVICE=fetcher", "--target", "service", "--label", "org.trawl.k8stest=next", "-t", next, "."); err != nil {
		return nil, fmt.Errorf("build %s: %w", next, err)
	}
	images = append(images, next)
	web := "trawl/synthweb:" + tag
	if err := dockerhost.Run(ctx, io.Discard, filepath.Join(root, "devstack"), denv, "docker", "build", "-q", "-f", "composetest/synthweb.Dockerfile", "-t", web, "."); err != nil {
		return nil, fmt.Errorf("build %s: %w", web, err)
	}
	return append(images, web, dockerhost.NATSImage, dockerhost.RedisImage), nil
}

// importImages moves images from the Docker engine into the node's containerd.
func importImages(ctx context.Context, c *k8scluster.Cluster, images []string) error {
	cmd := exec.CommandContext(ctx, "docker", append([]string{"save"}, images...)...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("docker save: %w", err)
	}
	ierr := c.ImportImage(ctx, out)
	if err := cmd.Wait(); err != nil {
		return fmt.Errorf("docker save %s: %w: %s", strings.Join(images, " "), err, stderr.String())
	}
	return ierr
}

// kubectl runs kubectl against the cluster and fails the test on an error.
func kubectl(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	out, err := env.cluster.Kubectl(ctx, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func helm(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, env.helm, append([]string{"--kubeconfig", env.cluster.Kubeconfig}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// eventually polls cond every second until it holds; past timeout the test fails with
// what it waited for and the last answer.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var last string
	for {
		ok, why := cond()
		if ok {
			return
		}
		last = why
		if time.Now().After(deadline) {
			t.Fatalf("waited %s for %s; last: %s", timeout, what, last)
		}
		time.Sleep(time.Second)
	}
}

// serviceAddr is a service's cluster address, which kube-proxy routes from the host too.
func serviceAddr(t *testing.T, ns, name string, port int) string {
	ip := strings.TrimSpace(kubectl(t, "-n", ns, "get", "service", name, "-o", "jsonpath={.spec.clusterIP}"))
	return net.JoinHostPort(ip, strconv.Itoa(port))
}
