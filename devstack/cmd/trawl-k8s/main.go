// Command trawl-k8s builds the single-node Kubernetes cluster of `make k8s-test`
// (devstack/k8scluster) when it is not cached yet and prints where its binaries are, so
// that the first build (minutes) is not counted in the test's timeout. With -up DIR it also
// starts the cluster with its state in DIR, prints its kubeconfig's path and runs until
// interrupted, then stops it: a cluster to try the chart on by hand.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/trawl/trawl/devstack/k8scluster"
)

func main() {
	up := flag.String("up", "", "start a cluster with its state in this directory and run until interrupted")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *up); err != nil {
		fmt.Fprintln(os.Stderr, "trawl-k8s:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, up string) error {
	bin, err := k8scluster.Build(ctx, os.Stderr)
	if err != nil {
		return err
	}
	fmt.Println(bin.Dir)
	if up == "" {
		return nil
	}
	c, err := k8scluster.Start(ctx, k8scluster.Options{Dir: up, Bin: bin, Log: os.Stderr})
	if err != nil {
		return err
	}
	defer c.Stop()
	fmt.Println(c.Kubeconfig)
	<-ctx.Done()
	return nil
}
