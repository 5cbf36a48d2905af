// Command trawl-nats runs the development NATS JetStream server (devstack/natsembed) as a
// process of its own, so that a benchmark can read its CPU time apart from the process
// that starts it, and a test can SIGKILL one node of a cluster (devstack/natscluster). It
// serves until SIGTERM or SIGINT.
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/trawl/trawl/devstack/natscluster"
	"github.com/trawl/trawl/devstack/natsembed"
	"github.com/trawl/trawl/shared/durability"
	"github.com/trawl/trawl/shared/runner"
)

func main() {
	var opts natsembed.Options
	flag.StringVar(&opts.StoreDir, "store", "", "JetStream file store directory (default: a temporary one, removed at exit)")
	flag.StringVar(&opts.Host, "host", "127.0.0.1", "listen address")
	flag.IntVar(&opts.Port, "port", 4222, "client port (0 = a free one)")
	pprofAddr := flag.String("pprof", "", "also serve the Go profiler (/debug/pprof/) on this address, to profile the server")
	flag.Int64Var(&opts.MaxStore, "max-store", 0, "JetStream file storage limit in bytes (default: three quarters of the free disk)")
	flag.Func("fsync", "how often JetStream fsyncs (TRAWL_FSYNC): always, or 1s; default "+string(durability.Default), func(v string) error {
		l, err := durability.Parse(v)
		opts.Durability = l
		return err
	})
	flag.StringVar(&opts.ServerName, "name", "", "server name (distinct in a cluster; default trawl-devstack)")
	cluster := flag.String("cluster", "", "join a NATS cluster of this name, with clustered JetStream (needs -cluster-port and -routes); "+
		"with TRAWL_NATS_ROUTE_USER and TRAWL_NATS_ROUTE_PASSWORD set, peers must present them and the routes do")
	clusterPort := flag.Int("cluster-port", 0, "route listen port")
	routes := flag.String("routes", "", "comma-separated nats-route://host:port of every server of the cluster")
	tags := flag.String("tags", "", "comma-separated server tags, which a stream's placement can name to be put on this server")
	flag.Parse()
	if *tags != "" {
		opts.Tags = strings.Split(*tags, ",")
	}
	if *cluster != "" {
		// The route credentials come from the environment, out of the command line.
		opts.Cluster = &natsembed.Cluster{Name: *cluster, Port: *clusterPort, Routes: strings.Split(*routes, ","),
			User: os.Getenv(natscluster.RouteUserEnv), Password: os.Getenv(natscluster.RoutePasswordEnv)}
	}
	// The server gets the services' collector target: its CPU per message counts as theirs.
	runner.SetGCDefault()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	s, err := natsembed.Start(opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, "trawl-nats:", err)
		os.Exit(1)
	}
	if *pprofAddr != "" {
		ln, err := net.Listen("tcp", *pprofAddr)
		if err != nil {
			fmt.Fprintln(os.Stderr, "trawl-nats: pprof:", err)
			s.Close()
			os.Exit(1)
		}
		mux := http.NewServeMux()
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		go http.Serve(ln, mux)
	}
	// The URL on stdout tells a parent that picked port 0 where to connect.
	fmt.Println(s.URL())
	<-ctx.Done()
	s.Close()
}
