// Command trawl-synthweb serves a small synthetic web of virtual hosts on every address
// (vhost1.synth.test, vhost2.synth.test, …, one port) and its request log as JSON on a
// second port (GET /log), optionally with the single-page-app section (-spa), so the compose test can run the web as a container on the
// Compose network and judge a crawl from the server's own log.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/trawl/trawl/devstack/synthweb"
)

func main() {
	hosts := flag.Int("hosts", 3, "virtual hosts")
	pages := flag.Int("pages", 20, "pages per host")
	links := flag.Int("links", 4, "links per page")
	port := flag.Int("port", 8080, "port of the web")
	logAddr := flag.String("log-addr", ":8081", "address of the request log (GET /log)")
	maxDepth := flag.Int("max-depth", 20, "the crawler's TRAWL_MAX_DEPTH, for the expectation")
	spa := flag.Bool("spa", false, "add the single-page-app section: its app and script hosts are the virtual hosts after the others")
	render := flag.String("render", "off", "the crawler's TRAWL_RENDER (off, auto, always), for the expectation of the single-page app")
	flag.Parse()
	virtual := *hosts
	if *spa {
		virtual += 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, synthweb.Config{
		Hosts: *hosts, VirtualHosts: virtual, PagesPerHost: *pages, LinksPerPage: *links,
		BaseIP: "0.0.0.0", Port: *port, Seed: 1, SPA: *spa, Render: *render != "off",
	}, *logAddr, *maxDepth); err != nil {
		fmt.Fprintln(os.Stderr, "trawl-synthweb:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, cfg synthweb.Config, logAddr string, maxDepth int) error {
	web, err := synthweb.Start(ctx, cfg)
	if err != nil {
		return err
	}
	defer web.Close()
	srv := &http.Server{Addr: logAddr, Handler: web.LogHandler(maxDepth), ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.ListenAndServe() }()
	slog.Info("serving", "seeds", web.Seeds(), "log", logAddr)
	select {
	case <-ctx.Done():
		return srv.Close()
	case err := <-errc:
		if errors.Is(err, http.ErrServerClosed) {
			return nil
		}
		return fmt.Errorf("request log: %w", err)
	}
}
