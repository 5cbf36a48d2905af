//go:build compose

package composetest

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/trawl/trawl/devstack/synthweb"
	"github.com/trawl/trawl/devstack/warccheck"
)

func scaleCmd(t *testing.T) string {
	return readmeCommand(t, "scaling fetchers and parsers", func(a []string) bool {
		return has(a, "--scale") && has(a, "fetcher=") && !has(a, "--profile")
	})
}

// Three fetchers and two parsers (the README's scaling command, on docker-compose 1.29);
// Redis and one fetcher SIGKILLed mid-crawl come back by their restart policy, and the
// crawl ends with nothing lost and refetches only within the duplicate bound.
func TestScaledWithRedisAndFetcherKilled(t *testing.T) {
	s := newStack(t, v1, 40)
	cmd := scaleCmd(t)
	if !strings.Contains(cmd, "--scale fetcher=3") || !strings.Contains(cmd, "--scale parser=2") {
		t.Fatalf("README's scaling command %q: the test expects 3 fetchers and 2 parsers", cmd)
	}
	s.up(cmd)
	s.waitStatus(buildTimeout)
	snap := s.waitRequests(0)
	total := len(snap.Expected.Fetch)
	snap = s.waitRequests(total / 4)
	s.eventually(2*time.Minute, "3 fetchers and 2 parsers", func() (bool, string) {
		f, p := len(s.containers("fetcher")), len(s.containers("parser"))
		return f == 3 && p == 2, fmt.Sprintf("%d fetchers, %d parsers", f, p)
	})
	s.kill(s.containers("redis")[0], "redis")
	s.kill(s.busyFetcher(snap, "fetcher"), "a fetcher that just made a request")
	st := s.waitDone(crawlTimeout)
	snap = s.judge(st, webHosts*taskBatch)
	if n := len(remotes(snap)); n < 2 {
		t.Errorf("requests came from %d fetcher address(es), want the scaled fetchers to share the crawl", n)
	}
}

// A fetcher cut off the network while it holds tasks: the others finish the crawl, and the
// web never sees two requests in flight to one host.
func TestFetcherDisconnected(t *testing.T) {
	s := newStack(t, v2, 40)
	s.up(scaleCmd(t))
	s.waitStatus(buildTimeout)
	snap := s.waitRequests(0)
	snap = s.waitRequests(len(snap.Expected.Fetch) / 4)
	id := s.busyFetcher(snap, "fetcher")
	s.docker("network", "disconnect", project+"_default", id)
	cut := time.Now()
	t.Logf("disconnected fetcher %s from the network", id[:12])
	st := s.waitDone(crawlTimeout)
	snap = s.judge(st, webHosts*taskBatch)
	ip := s.lastIP
	for _, r := range snap.Requests {
		if r.Remote == ip && r.Start.After(cut.Add(time.Second)) {
			t.Errorf("the disconnected fetcher (%s) requested %s%s at %s, after it was cut off", ip, r.Host, r.Path, r.Start)
		}
	}
}

// The archive profile, started with the README's command on Compose v2 and on
// docker-compose 1.29, writes WARC files into its volume as the non-root user, and they
// read back with a response record for every page.
func TestArchiveProfile(t *testing.T) {
	for _, tool := range tools {
		t.Run(tool.Name, func(t *testing.T) { archiveProfile(t, tool) })
	}
}

func archiveProfile(t *testing.T, tool Tool) {
	s := newStack(t, tool, 20)
	s.up(readmeCommand(t, "the archive profile", func(a []string) bool { return has(a, "archive") }))
	st := s.waitDone(crawlTimeout)
	snap := s.judge(st, 0)
	// Stopping the stack seals the archiver's open file.
	s.stopUps()
	dir := s.docker("volume", "inspect", "-f", "{{.Mountpoint}}", project+"_warc-data")
	files, err := filepath.Glob(filepath.Join(dir, "*.warc.gz"))
	if err != nil || len(files) == 0 {
		entries, _ := os.ReadDir(dir)
		t.Fatalf("no sealed WARC file in the warc-data volume (%s): %v %v", dir, entries, err)
	}
	for _, f := range files {
		fi, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		if uid := fi.Sys().(*syscall.Stat_t).Uid; uid != 65532 {
			t.Errorf("%s is owned by uid %d, want the non-root user 65532", filepath.Base(f), uid)
		}
	}
	arch, err := warccheck.Check(dir)
	if err != nil {
		t.Fatalf("the WARC files do not read back: %v", err)
	}
	captured := map[string]bool{}
	for _, r := range arch.Captures() {
		captured[r.Get("WARC-Target-URI")] = true
	}
	for u := range snap.Expected.Fetch {
		if !captured[u] {
			t.Errorf("no WARC record for %s", u)
		}
	}
	t.Logf("%d WARC files, %d records, %d captures", len(arch.Files), len(arch.Records), len(arch.Captures()))
}

// busyFetcher returns the container of service whose address made the web's last request:
// a fetcher that holds tasks now.
func (s *Stack) busyFetcher(snap synthweb.Snapshot, service string) string {
	s.t.Helper()
	if len(snap.Requests) == 0 {
		s.t.Fatal("no request in the web's log")
	}
	last := snap.Requests[len(snap.Requests)-1].Remote
	for _, id := range s.containers(service) {
		if ip := s.docker("inspect", "-f", "{{range .NetworkSettings.Networks}}{{.IPAddress}} {{end}}", id); strings.Contains(" "+ip+" ", " "+last+" ") {
			s.lastIP = last
			return id
		}
	}
	s.t.Fatalf("no %s container has address %s, which made the last request", service, last)
	return ""
}

func remotes(snap synthweb.Snapshot) map[string]int {
	m := map[string]int{}
	for _, r := range snap.Requests {
		m[r.Remote]++
	}
	return m
}
