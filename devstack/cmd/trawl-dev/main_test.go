package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/trawl/trawl/devstack/natsembed"
	"github.com/trawl/trawl/devstack/synthweb"
)

// binDir starts empty: the first run builds the services into it (ensureBinaries), as
// `go run ./devstack/cmd/trawl-dev` does.
var binDir string

func TestMain(m *testing.M) {
	os.Exit(func() int {
		dir, err := os.MkdirTemp("", "trawl-dev-bin-")
		if err != nil {
			fmt.Fprintln(os.Stderr, "trawl-dev test:", err)
			return 1
		}
		defer os.RemoveAll(dir)
		binDir = dir
		return m.Run()
	}())
}

// A host whose robots.txt answers 503 backs off for the default 30 s after its first
// failure: with -park-after below that, the batch crawl of it and a normal host ends once
// the normal host is done, says why it waited, names the parked host with its URLs, and
// leaves them queued so that a later run of the same directory still holds them.
func TestParkAfterEndsBatchCrawlAndResumes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cfg := synthweb.DefaultConfig()
	cfg.Hosts = 1
	web, err := synthweb.Start(ctx, cfg)
	if err != nil {
		t.Fatalf("synthetic web: %v", err)
	}
	defer web.Close()
	var normal, unavailable string
	for _, h := range web.Hosts() {
		switch h.Kind {
		case synthweb.KindOrdinary:
			normal = h.Origin
		case synthweb.KindRobots503:
			unavailable = h.Origin
		}
	}
	// Depth 0 keeps the crawl to the seeds: the normal host's links lead to every special
	// host of the web.
	t.Setenv("TRAWL_ALLOW_CIDRS", "127.0.0.0/8")
	t.Setenv("TRAWL_MAX_DEPTH", "0")
	t.Setenv("TRAWL_MIN_DELAY", "100ms")
	t.Setenv("TRAWL_RETRY_BACKOFF", "30s")
	t.Setenv("TRAWL_ROBOTS_ERROR_TTL", "1s")

	dir := t.TempDir()
	parkedURLs := []string{unavailable + "/", unavailable + "/p/1"}
	o := options{bin: binDir, natsMaxStore: natsembed.TestMaxStore, fetchers: 1, every: 300 * time.Millisecond, dir: dir, parkAfter: 3 * time.Second,
		seeds: append([]string{normal + "/"}, parkedURLs...)}
	var out bytes.Buffer
	if err := run(ctx, o, &out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	text := out.String()
	host := strings.TrimPrefix(unavailable, "http://")
	host = host[:strings.LastIndexByte(host, ':')]
	for _, want := range []string{
		"hosts waiting: 1 backing off until",       // the progress line says why it waits
		"robots-unavailable 503",                   // with the host's last error
		"crawl parked after",                       // the crawl ended
		host + ": 2 queued, backoff until",         // the summary names the parked host
		parkedURLs[0] + "\n", parkedURLs[1] + "\n", // and its URLs
		"they resume with the same -dir " + dir,
	} {
		if !strings.Contains(text, want) {
			t.Fatalf("output lacks %q:\n%s", want, text)
		}
	}
	if !strings.Contains(text, "  fetched                              1\n") {
		t.Fatalf("the normal host's page was not fetched before parking:\n%s", text)
	}

	// A later run of the same directory, seeded with the normal host only, still holds the
	// parked URLs: they come from the kept frontier, not from seeds.
	o.seeds = []string{normal + "/"}
	out.Reset()
	if err := run(ctx, o, &out); err != nil {
		t.Fatalf("resumed run: %v\n%s", err, out.String())
	}
	text = out.String()
	for _, want := range []string{"crawl parked after", host + ": 2 queued", parkedURLs[0] + "\n", parkedURLs[1] + "\n"} {
		if !strings.Contains(text, want) {
			t.Fatalf("resumed run's output lacks %q:\n%s", want, text)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "logs")); err != nil {
		t.Fatalf("crawl state not kept in %s: %v", dir, err)
	}
}

// A seed whose host does not exist (NXDOMAIN) ends the batch crawl within seconds, its URL
// failed: the fetcher asks the DNS twice and reports "dns: no such host", which retires the
// host, instead of robots.txt being unreachable and the URL backing off 30 s, 60 s, 120 s…
// (TRAWL_RETRY_BACKOFF). A resolver that fails (not NXDOMAIN) still backs off:
// services/fetcher/itest TestNoSuchHost.
func TestUnresolvableSeedEndsQuickly(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	t.Setenv("TRAWL_ALLOW_CIDRS", "127.0.0.0/8")
	t.Setenv("TRAWL_MAX_DEPTH", "0")
	t.Setenv("TRAWL_RETRY_BACKOFF", "30s")
	// The reserved .invalid domain does not exist (RFC 2606).
	const seed = "http://no-such-host.invalid/"
	o := options{bin: binDir, natsMaxStore: natsembed.TestMaxStore, fetchers: 1, every: 300 * time.Millisecond, dir: t.TempDir(), parkAfter: time.Minute,
		seeds: []string{seed}}
	var out bytes.Buffer
	if err := run(ctx, o, &out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	text := out.String()
	m := regexp.MustCompile(`crawl finished in ([0-9.]+)s`).FindStringSubmatch(text)
	if m == nil {
		t.Fatalf("output lacks \"crawl finished in\":\n%s", text)
	}
	if took, _ := strconv.ParseFloat(m[1], 64); took >= 20 {
		t.Fatalf("crawl finished in %ss, want well under the first 30 s backoff:\n%s", m[1], text)
	}
	if !regexp.MustCompile(`failed \(after retries\) +1\n`).MatchString(text) {
		t.Fatalf("output lacks the seed failed:\n%s", text)
	}
}
