//go:build docscrawl

package docsweb

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/trawl/trawl/devstack/stack"
	"github.com/trawl/trawl/devstack/sysdeps"
	"github.com/trawl/trawl/devstack/warccheck"
)

// The crawl's pace and bounds. The delay is brisker than a real crawl's 1 s so the ~1,600
// pages of the largest site fit CI, and leaves every rule of politeness in force.
const (
	minDelay = 100 * time.Millisecond
	// nginx's log is in ms from a clock read once per event-loop turn (see Rules).
	gapTolerance = 5 * time.Millisecond
	// A crawl that makes progress serves a URL it had not served before every few hundred
	// ms; one that serves none for this long has stalled.
	stallAfter = 90 * time.Second
	// The whole `make run`, build included, healthy or not.
	runDeadline = 15 * time.Minute
	// After SIGINT (Ctrl-C), `make run` stops the services and exits.
	stopGrace = time.Minute
	// A compressed body larger than this, base64-encoded, no longer fits a 64 KiB header.
	largeGzip = 48 << 10
)

// TestCrawlRealDocs serves Debian's documentation packages from nginx (gzip on), crawls
// them with `make run` and the archiver on, and judges the crawl from nginx's access log:
// the crawl reaches its summary, every HTML page reachable from the roots and allowed by
// robots.txt is fetched once, nothing disallowed is requested, no host gets two requests
// at once or closer than the delay, and every response is archived with the octets nginx
// served, read back by warccheck and by warcio.js. It runs under `make docs-crawl`, which
// installs node, npm and warcio first; it installs nginx and the packages itself.
func TestCrawlRealDocs(t *testing.T) {
	began := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), runDeadline+5*time.Minute)
	defer cancel()
	root, err := stack.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	if err := sysdeps.Ensure(ctx, os.Stderr, Programs(Sites)...); err != nil {
		t.Fatalf("nginx and the documentation packages: %v", err)
	}
	nginx, _ := sysdeps.Known["nginx"].Installed()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("node is not installed: run `make docs-crawl`, which installs it (%v)", err)
	}
	checker := filepath.Join(root, "devstack", "warcio", "check.mjs")
	if _, err := os.Stat(filepath.Join(root, "devstack", "warcio", "node_modules", "warcio")); err != nil {
		t.Fatalf("warcio.js is not installed in devstack/warcio: run `make docs-crawl` (%v)", err)
	}

	srv, err := Start(ctx, Options{Nginx: nginx, Sites: Sites})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	work := t.TempDir()
	archive := filepath.Join(work, "warc")
	state := filepath.Join(work, "state")
	// `make run` as the README shows it: seeds and TRAWL_* settings on the command line.
	args := []string{"--no-print-directory", "-C", root, "run",
		"SEEDS=" + strings.Join(srv.Seeds(), " "),
		"DIR=" + state, // kept, so a stalled crawl's logs can be read
		"TRAWL_ARCHIVE_DIR=" + archive,
		"TRAWL_RESOLVE=" + srv.Resolve(),
		"TRAWL_ALLOW_CIDRS=127.0.0.0/8",
		"TRAWL_MIN_DELAY=" + minDelay.String(),
		"TRAWL_SCOPE=host",        // the pages link to python.org, postgresql.org…, which are not here
		"TRAWL_EMBED_SCOPE=crawl", // and so may their requisites
		"TRAWL_MAX_DEPTH=10000",   // every page, however deep: the judge expects all of them
		"TRAWL_MAX_OUTLINKS=100000",
	}
	t.Logf("make %s", strings.Join(args, " "))
	run := startMake(t, args)
	outcome := run.watch(srv)
	entries, lerr := srv.Log()
	if lerr != nil {
		t.Fatalf("nginx's access log: %v", lerr)
	}
	summary := Summary(entries, Sites, time.Now())
	if outcome != "" {
		t.Fatalf("the crawl did not reach its summary: %s.\nmake run's last progress line: %s\n%s\nthe services' last warnings and errors:\n%s",
			outcome, run.lastLine(`^\[`), summary, warnings(filepath.Join(state, "logs"), 4))
	}
	took := run.lastLine(`^crawl finished in`)
	t.Logf("make run: %s; %s\n%s", time.Since(began).Round(time.Second), took, summary)
	// nginx answered every request it logged, so the crawler has no cause to give a URL up.
	if failed := run.lastLine(`^\s+failed \(after retries\)\s+\d+$`); !strings.HasSuffix(failed, " 0") {
		t.Errorf("the crawl's summary: %q, want 0; the services' last warnings and errors:\n%s", strings.TrimSpace(failed), warnings(filepath.Join(state, "logs"), 4))
	}

	// What this crawl is for: pages whose compressed body alone is larger than a NATS
	// header may be. Should nginx stop compressing them, the check would pass on a crawl that
	// proves nothing about them.
	large := 0
	for _, e := range entries {
		if e.Encoding == "gzip" && strings.HasPrefix(e.Type, "text/html") && e.Bytes > largeGzip {
			large++
		}
	}
	if large == 0 {
		t.Errorf("nginx served no HTML page gzip-encoded in more than %d octets: is gzip on in testdata/nginx.conf.tmpl?", largeGzip)
	}
	problems, err := Judge(entries, Sites, Rules{MinDelay: minDelay, Tolerance: gapTolerance})
	if err != nil {
		t.Fatal(err)
	}
	report(t, "nginx's log", problems)

	a, err := warccheck.Check(archive)
	if err != nil {
		t.Fatalf("the archive does not read back:\n%v", err)
	}
	report(t, "the archive", JudgeArchive(entries, Sites, a))
	files, err := filepath.Glob(filepath.Join(archive, "*.warc.gz"))
	if err != nil || len(files) == 0 {
		t.Fatalf("WARC files %v (%v): want some", files, err)
	}
	out, err := exec.CommandContext(ctx, node, append([]string{checker}, files...)...).CombinedOutput()
	t.Logf("%s", bytes.TrimSpace(out))
	if err != nil {
		t.Errorf("warcio.js does not read the archive as written: %v", err)
	}
	t.Logf("%d requests judged, %d captures in %d files; the whole check took %s", len(entries), len(a.Captures()), len(a.Files), time.Since(began).Round(time.Second))
}

func report(t *testing.T, what string, problems []string) {
	t.Helper()
	const most = 40
	for i, p := range problems {
		if i == most {
			t.Errorf("%s: … and %d more problems", what, len(problems)-most)
			break
		}
		t.Errorf("%s: %s", what, p)
	}
}

// makeRun is `make run` running in a process group of its own, its output copied to the
// test's and kept.
type makeRun struct {
	t      *testing.T
	cmd    *exec.Cmd
	mu     sync.Mutex
	out    bytes.Buffer
	seeded time.Time // when make run said it seeded the crawl
	done   chan struct{}
	err    error
}

func (m *makeRun) Write(p []byte) (int, error) {
	os.Stdout.Write(p)
	m.mu.Lock()
	defer m.mu.Unlock()
	m.out.Write(p)
	if m.seeded.IsZero() && bytes.Contains(m.out.Bytes(), []byte("\nseeded ")) {
		m.seeded = time.Now()
	}
	return len(p), nil
}

func startMake(t *testing.T, args []string) *makeRun {
	m := &makeRun{t: t, done: make(chan struct{})}
	m.cmd = exec.Command("make", args...)
	m.cmd.Stdout, m.cmd.Stderr = m, m
	m.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := m.cmd.Start(); err != nil {
		t.Fatalf("make run: %v", err)
	}
	go func() {
		m.err = m.cmd.Wait()
		close(m.done)
	}()
	t.Cleanup(func() {
		select {
		case <-m.done:
		default:
			_ = syscall.Kill(-m.cmd.Process.Pid, syscall.SIGKILL)
			<-m.done
		}
	})
	return m
}

// watch waits for make run to end and returns "" when it ended with its summary, or what
// went wrong: it failed, it ran past runDeadline, or nginx served no new URL for
// stallAfter once the crawl was seeded. A stopped run is interrupted as Ctrl-C would.
func (m *makeRun) watch(srv *Server) string {
	start := time.Now()
	distinct, lastNew := 0, time.Time{}
	var lastURL string
	tick := time.NewTicker(2 * time.Second)
	defer tick.Stop()
	for {
		select {
		case <-m.done:
			if m.err != nil {
				return fmt.Sprintf("make run failed (%v); its output ends:\n%s", m.err, m.tail(15))
			}
			if m.lastLine(`^crawl finished in`) == "" {
				return "make run exited 0 without printing its summary"
			}
			return ""
		case <-tick.C:
		}
		m.mu.Lock()
		seeded := m.seeded
		m.mu.Unlock()
		var reason string
		if entries, err := srv.Log(); err == nil {
			seen := map[string]bool{}
			for _, e := range entries {
				seen[e.Key()] = true
			}
			if len(seen) > distinct {
				distinct, lastNew = len(seen), time.Now()
				last := entries[len(entries)-1]
				lastURL = fmt.Sprintf("%s%s at %s", last.Host, last.URI, last.End.Format(stamp))
			}
		}
		switch {
		case time.Since(start) > runDeadline:
			reason = fmt.Sprintf("make run still running after %s", runDeadline)
		case !seeded.IsZero() && time.Since(latest(seeded, lastNew)) > stallAfter:
			reason = fmt.Sprintf("stalled: nginx served no URL it had not served before for %s (%d distinct URLs; when the last was new, the latest request was %s)",
				stallAfter, distinct, lastURL)
		}
		if reason != "" {
			return reason + m.interrupt()
		}
	}
}

// interrupt sends SIGINT to make run's process group, as Ctrl-C does, and kills the group
// if it has not exited within stopGrace.
func (m *makeRun) interrupt() string {
	_ = syscall.Kill(-m.cmd.Process.Pid, syscall.SIGINT)
	select {
	case <-m.done:
		return "; interrupted"
	case <-time.After(stopGrace):
		_ = syscall.Kill(-m.cmd.Process.Pid, syscall.SIGKILL)
		<-m.done
		return fmt.Sprintf("; killed: it did not exit within %s of SIGINT", stopGrace)
	}
}

func latest(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func (m *makeRun) lines() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return strings.Split(strings.TrimRight(m.out.String(), "\n"), "\n")
}

func (m *makeRun) lastLine(pattern string) string {
	re := regexp.MustCompile(pattern)
	lines := m.lines()
	for i := len(lines) - 1; i >= 0; i-- {
		if re.MatchString(lines[i]) {
			return lines[i]
		}
	}
	return ""
}

func (m *makeRun) tail(n int) string {
	lines := m.lines()
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// warnings are the last n WARN and ERROR lines of each service's log, with the number
// of such lines before them.
func warnings(dir string, n int) string {
	logs, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	var b strings.Builder
	for _, path := range logs {
		f, err := os.Open(path)
		if err != nil {
			continue
		}
		var hits []string
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 64*1024), 1<<20)
		for sc.Scan() {
			if l := sc.Text(); strings.Contains(l, "level=WARN") || strings.Contains(l, "level=ERROR") {
				hits = append(hits, l)
			}
		}
		f.Close()
		if len(hits) == 0 {
			continue
		}
		fmt.Fprintf(&b, "  %s (%d):\n", filepath.Base(path), len(hits))
		for _, l := range hits[max(0, len(hits)-n):] {
			if len(l) > 600 {
				l = l[:600] + "…"
			}
			fmt.Fprintf(&b, "    %s\n", l)
		}
	}
	if b.Len() == 0 {
		return "  none\n"
	}
	return b.String()
}
