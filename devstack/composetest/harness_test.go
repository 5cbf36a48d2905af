//go:build compose

// Package composetest runs compose.yaml on a real Docker engine, with both Compose
// implementations the README promises, and judges each crawl from a synthetic web's own
// request log (`make compose-test`). The base images come from a registry when one
// answers, else from local stand-ins (devstack/dockerhost).
package composetest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/trawl/trawl/devstack/blackbox"
	"github.com/trawl/trawl/devstack/dockerhost"
	"github.com/trawl/trawl/devstack/freeport"
	"github.com/trawl/trawl/devstack/stack"
	"github.com/trawl/trawl/devstack/synthweb"
)

const (
	project      = "trawl-composetest"
	overrideFile = "devstack/composetest/compose.test.yaml"
	minDelay     = 300 * time.Millisecond
	// The shortest lease the default TRAWL_ACK_WAIT (30s, at most half of it) allows: a
	// killed fetcher's tasks come back after it.
	leaseTTL   = "60s"
	maxRetries = 3 // TRAWL_MAX_RETRIES's default
	webPort    = 8080
	// buildTimeout bounds building the images and starting a stack: cold, five Go builds.
	buildTimeout = 30 * time.Minute
)

// taskBatch is TRAWL_TASK_BATCH's default: a fetcher holds at most that many URLs of a host,
// so a fetcher lost with its tasks costs at most hosts × taskBatch refetches.
const (
	taskBatch = 8
	webHosts  = 3
	// crawlTimeout bounds a crawl of the small web, a lease expiry included.
	crawlTimeout = 10 * time.Minute
)

var (
	root      string
	composeV2 string
	compose1  string
)

func TestMain(m *testing.M) {
	ctx := context.Background()
	var err error
	if root, err = stack.RepoRoot(); err != nil {
		fmt.Fprintln(os.Stderr, "composetest:", err)
		os.Exit(1)
	}
	start := time.Now()
	if err := prepare(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "composetest:", err)
		os.Exit(1)
	}
	fmt.Fprintf(os.Stderr, "composetest: engine, Compose and base images ready in %s\n", time.Since(start).Round(time.Second))
	code := m.Run()
	pctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	err = dockerhost.PruneLeftovers(pctx, os.Stderr, start)
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "composetest:", err)
		code = max(code, 1)
	}
	os.Exit(code)
}

func prepare(ctx context.Context) error {
	v, err := dockerhost.EnsureEngine(ctx, os.Stderr, filepath.Join(os.TempDir(), "trawl-dockerd.log"))
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "composetest: Docker engine %s\n", v)
	t0 := time.Now()
	if composeV2, err = dockerhost.EnsureComposeV2(ctx, os.Stderr); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "composetest: docker compose %s (%s)\n", composeV2, time.Since(t0).Round(time.Second))
	if compose1, err = dockerhost.Compose1Version(ctx); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "composetest: docker-compose %s\n", compose1)
	return dockerhost.Standins{Root: root, Log: os.Stderr}.Ensure(ctx)
}

// readmeCommands returns the Compose commands of the README's sh blocks, continuation
// lines joined and comments dropped, as a user would paste them; a command may start with
// variable assignments (TRAWL_RENDER=auto docker compose …).
func readmeCommands(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	var cmds []string
	rest := string(b)
	for {
		var block string
		var ok bool
		if _, rest, ok = strings.Cut(rest, "```sh\n"); !ok {
			break
		}
		block, rest, _ = strings.Cut(rest, "```")
		cur := ""
		for _, l := range strings.Split(block, "\n") {
			if i := strings.Index(l, "#"); i >= 0 {
				l = l[:i]
			}
			l = strings.TrimSpace(l)
			if l == "" {
				continue
			}
			cont := strings.HasSuffix(l, "\\")
			cur += strings.TrimSpace(strings.TrimSuffix(l, "\\")) + " "
			if !cont {
				if c := strings.TrimSpace(cur); strings.HasPrefix(dropAssignments(c), "docker compose ") {
					cmds = append(cmds, c)
				}
				cur = ""
			}
		}
	}
	return cmds
}

// readmeCommand returns the README's one Compose command that pick chooses.
func readmeCommand(t *testing.T, what string, pick func(args []string) bool) string {
	t.Helper()
	var found []string
	for _, c := range readmeCommands(t) {
		if pick(strings.Fields(c)) {
			found = append(found, c)
		}
	}
	if len(found) != 1 {
		t.Fatalf("the README has %d Compose commands for %s, want 1: %q (all: %q)", len(found), what, found, readmeCommands(t))
	}
	return found[0]
}

var assignment = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*=\S*\s+`)

// dropAssignments returns cmd without the variable assignments it starts with.
func dropAssignments(cmd string) string {
	for {
		loc := assignment.FindStringIndex(cmd)
		if loc == nil {
			return cmd
		}
		cmd = cmd[loc[1]:]
	}
}

func has(args []string, prefix string) bool {
	return slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, prefix) })
}

// Tool is a Compose implementation.
type Tool struct {
	Name string
	argv []string // what replaces the README's "docker compose"
}

var (
	v2 = Tool{"Compose v2", []string{"docker", "compose"}}
	v1 = Tool{"docker-compose 1.29", []string{"docker-compose"}}
	// tools are both: the README promises its commands on each. The scaling command runs
	// on 1.29 with kills and on v2 with a fetcher cut off the network.
	tools = []Tool{v2, v1}
)

// Stack is one project on the engine, run with one Compose tool.
type Stack struct {
	t          *testing.T
	tool       Tool
	env        []string
	statusPort int
	logPort    int
	dir        string
	ups        []*upProc
	lastIP     string // the address busyFetcher found
}

// upProc is a foreground `up` and its end.
type upProc struct {
	cmd  *exec.Cmd
	log  string        // its output
	done chan struct{} // closed when it exited, with err
	err  error
}

// freePort is a port for Docker to publish, from freeport: compose binds it only after the
// images are built, and an outgoing connection may take a port of the ephemeral range
// meanwhile.
func freePort(t *testing.T) int {
	t.Helper()
	port, err := freeport.Port()
	if err != nil {
		t.Fatal(err)
	}
	return port
}

// newStack starts from a clean project (no containers, no volumes) and the synthetic
// web; it removes everything when the test ends.
func newStack(t *testing.T, tool Tool, pages int, extraEnv ...string) *Stack {
	s := &Stack{t: t, tool: tool, statusPort: freePort(t), logPort: freePort(t), dir: t.TempDir()}
	seeds := make([]string, 3)
	for i := range seeds {
		seeds[i] = fmt.Sprintf("http://vhost%d.synth.test:%d/", i+1, webPort)
	}
	s.env = append(os.Environ(),
		"COMPOSE_PROJECT_NAME="+project,
		"COMPOSE_FILE=compose.yaml"+string(os.PathListSeparator)+overrideFile,
		// BuildKit would fetch the Dockerfiles' syntax image from a registry; the classic
		// builder reads them as they are.
		"DOCKER_BUILDKIT=0", "COMPOSE_DOCKER_CLI_BUILD=0",
		"TRAWL_SEEDS="+strings.Join(seeds, ","),
		// The synthetic web is on the Compose network, a private range.
		"TRAWL_ALLOW_CIDRS=10.0.0.0/8,172.16.0.0/12,192.168.0.0/16",
		"TRAWL_MIN_DELAY="+minDelay.String(),
		"TRAWL_LEASE_TTL="+leaseTTL,
		"TRAWL_MAX_DEPTH=20",
		"TRAWL_LOG_FORMAT=text",
		"TRAWL_STATUS_PORT="+strconv.Itoa(s.statusPort),
		"TRAWL_DEDUP_METRICS_PORT="+strconv.Itoa(freePort(t)),
		"TRAWL_TEST_WEB_LOG_PORT="+strconv.Itoa(s.logPort),
		"TRAWL_TEST_WEB_PAGES="+strconv.Itoa(pages),
		// NATS sets each file stream's byte cap aside out of three quarters of the disk
		// free when it started: the production caps (19 GiB with the render cache) would
		// let the test machine's free disk decide whether the services start. A test crawl
		// stores a few megabytes; these are the caps `make run` uses.
		"TRAWL_PAGES_MAX_BYTES=1GiB", "TRAWL_DOCS_MAX_BYTES=512MiB", "TRAWL_RENDER_CACHE_BYTES=256MiB",
	)
	s.env = append(s.env, extraEnv...)
	if err := s.down(); err != nil {
		t.Fatalf("%v; this test would start on what the last one left", err)
	}
	t.Cleanup(func() {
		s.stopUps()
		if t.Failed() {
			out, _ := s.output(2*time.Minute, "--profile", "cluster", "--profile", "archive", "--profile", "render", "logs", "--no-color", "--tail", "40")
			t.Logf("last log lines of the project:\n%s", out)
		}
		if err := s.down(); err != nil {
			t.Errorf("%v; the next test would start on what this one left", err)
		}
	})
	start := time.Now()
	s.compose(15*time.Minute, "up", "-d", "--build", "synthweb")
	t.Logf("%s: synthetic web up in %s", tool.Name, time.Since(start).Round(time.Second))
	return s
}

func (s *Stack) cmd(ctx context.Context, args ...string) *exec.Cmd {
	argv := append(slices.Clone(s.tool.argv), args...)
	c := exec.CommandContext(ctx, argv[0], argv[1:]...)
	c.Dir, c.Env = root, s.env
	return c
}

func (s *Stack) output(timeout time.Duration, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	out, err := s.cmd(ctx, args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %w\n%s", strings.Join(s.tool.argv, " "), strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

func (s *Stack) compose(timeout time.Duration, args ...string) string {
	s.t.Helper()
	out, err := s.output(timeout, args...)
	if err != nil {
		s.t.Fatal(err)
	}
	return out
}

// down removes the project, its volumes included. The Docker engine can still count an
// endpoint on the project's network for a moment after its container is gone ("has active
// endpoints"), and a project left up would start the next test on this one's volumes (a
// crawl whose NATS remembers it while its Redis does not, which the services refuse), so a
// failed down is tried again; one that keeps failing is returned.
func (s *Stack) down() error {
	const tries = 3
	var err error
	for try := 1; try <= tries; try++ {
		if _, err = s.output(5*time.Minute, "--profile", "cluster", "--profile", "archive", "--profile", "metrics", "--profile", "render", "down", "-v", "--remove-orphans", "-t", "5"); err == nil {
			return nil
		}
		s.t.Logf("down, try %d of %d: %v", try, tries, err)
		if try < tries {
			time.Sleep(2 * time.Second) // the engine's own bookkeeping, which nothing here can poll
		}
	}
	return fmt.Errorf("the project could not be taken down after %d tries: %w", tries, err)
}

// up runs a README command as printed, in the foreground as a user would, with the tool's
// own name in place of "docker compose" and the variables it sets in its environment; its
// output goes to a file of the test.
func (s *Stack) up(readme string) {
	s.t.Helper()
	cmdline := dropAssignments(readme)
	vars := strings.Fields(strings.TrimSuffix(readme, cmdline))
	args := strings.Fields(strings.TrimPrefix(cmdline, "docker compose "))
	logPath := filepath.Join(s.dir, fmt.Sprintf("up-%d.log", len(s.ups)))
	f, err := os.Create(logPath)
	if err != nil {
		s.t.Fatal(err)
	}
	c := s.cmd(context.Background(), args...)
	c.Env = append(c.Env, vars...)
	c.Stdout, c.Stderr = f, f
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	s.t.Logf("%s: %s", s.tool.Name, strings.TrimSpace(strings.Join(vars, " ")+" "+strings.Join(c.Args, " ")))
	if err := c.Start(); err != nil {
		s.t.Fatal(err)
	}
	f.Close()
	u := &upProc{cmd: c, log: logPath, done: make(chan struct{})}
	go func() { u.err = c.Wait(); close(u.done) }()
	s.ups = append(s.ups, u)
	// An `up` that refuses its arguments exits at once: say why.
	select {
	case <-u.done:
		out, _ := os.ReadFile(logPath)
		s.t.Fatalf("%s exited (%v) before the crawl:\n%s", strings.Join(c.Args, " "), u.err, out)
	case <-time.After(3 * time.Second):
	}
	s.t.Cleanup(func() {
		if s.t.Failed() {
			out, _ := os.ReadFile(logPath)
			s.t.Logf("%s output (tail):\n%s", strings.Join(c.Args, " "), lastLines(string(out), 60))
		}
	})
}

// upExited fails the test when a foreground `up` has exited (a build that failed, say),
// with the end of its output: nothing is coming up then.
func (s *Stack) upExited() {
	s.t.Helper()
	for _, u := range s.ups {
		select {
		case <-u.done:
			out, _ := os.ReadFile(u.log)
			s.t.Fatalf("%s exited (%v):\n%s", strings.Join(u.cmd.Args, " "), u.err, lastLines(string(out), 40))
		default:
		}
	}
}

// stopUps ends the foreground `up`s as Ctrl-C would: Compose stops the containers.
func (s *Stack) stopUps() {
	for _, u := range s.ups {
		_ = u.cmd.Process.Signal(os.Interrupt)
		select {
		case <-u.done:
		case <-time.After(90 * time.Second):
			s.t.Logf("%s did not stop within 90s of SIGINT; killing it", strings.Join(u.cmd.Args, " "))
			_ = syscall.Kill(-u.cmd.Process.Pid, syscall.SIGKILL)
			<-u.done
		}
	}
	s.ups = nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// containers lists the container ids of a service.
func (s *Stack) containers(service string) []string {
	s.t.Helper()
	out := s.compose(time.Minute, "ps", "-q", service)
	return strings.Fields(out)
}

func (s *Stack) docker(args ...string) string {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := dockerhost.Output(ctx, nil, "docker", args...)
	if err != nil {
		s.t.Fatal(err)
	}
	return strings.TrimSpace(out)
}

// kill SIGKILLs a container's process, as a crash would; the restart policy brings it
// back, which this waits for. The signal goes to the process from this host (the engine's):
// `docker kill` counts as a stop by hand, after which "unless-stopped" leaves it down.
func (s *Stack) kill(id, what string) {
	s.t.Helper()
	before := s.docker("inspect", "-f", "{{.RestartCount}} {{.State.Pid}}", id)
	_, pidStr, _ := strings.Cut(before, " ")
	pid, err := strconv.Atoi(pidStr)
	if err != nil || pid <= 0 {
		s.t.Fatalf("%s (%s) has no running process: %q", what, id[:12], before)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		s.t.Fatalf("SIGKILL %s (pid %d on this host; the engine must run here, as root): %v", what, pid, err)
	}
	s.t.Logf("SIGKILLed %s (%s)", what, id[:12])
	s.eventually(2*time.Minute, what+" restarted by its restart policy", func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		now, err := dockerhost.Output(ctx, nil, "docker", "inspect", "-f", "{{.RestartCount}} {{.State.Pid}} {{.State.Running}}", id)
		now = strings.TrimSpace(now)
		return err == nil && strings.HasSuffix(now, " true") && !strings.HasPrefix(now, before+" "), fmt.Sprintf("before %q, now %q %v", before, now, err)
	})
}

// eventually polls cond until it holds, failing after timeout with what it last said.
func (s *Stack) eventually(timeout time.Duration, what string, cond func() (bool, string)) {
	s.t.Helper()
	deadline := time.Now().Add(timeout)
	var last string
	for {
		ok, state := cond()
		if ok {
			return
		}
		last = state
		if time.Now().After(deadline) {
			s.t.Fatalf("waited %s for %s; last: %s", timeout, what, last)
		}
		time.Sleep(time.Second)
	}
}

// webLog reads the synthetic web's own log.
func (s *Stack) webLog() (synthweb.Snapshot, error) {
	var snap synthweb.Snapshot
	err := blackbox.GetJSON(fmt.Sprintf("http://127.0.0.1:%d/log", s.logPort), &snap)
	return snap, err
}

// waitStatus waits for the scheduler's status page, which answers once the images are
// built and the stack is up.
func (s *Stack) waitStatus(timeout time.Duration) {
	s.t.Helper()
	start := time.Now()
	s.eventually(timeout, "the scheduler's status page (images built, stack up)", func() (bool, string) {
		s.upExited()
		var cur blackbox.Status
		err := blackbox.GetJSON(fmt.Sprintf("http://127.0.0.1:%d/status.json", s.statusPort), &cur)
		return err == nil, fmt.Sprint(err)
	})
	s.t.Logf("%s: stack up in %s", s.tool.Name, time.Since(start).Round(time.Second))
}

// waitDone waits until the status JSON says the crawl ended, twice in a row 5 s apart
// (a page still in a stage shows in its backlog), and every expected page was requested.
func (s *Stack) waitDone(timeout time.Duration) blackbox.Status {
	s.t.Helper()
	s.waitStatus(buildTimeout)
	start := time.Now()
	defer func() { s.t.Logf("crawl ended %s after the stack was up", time.Since(start).Round(time.Second)) }()
	var st blackbox.Status
	s.eventually(timeout, "the crawl to end (status.json: nothing queued, in flight or in a backlog)",
		blackbox.DoneTwice(fmt.Sprintf("http://127.0.0.1:%d/status.json", s.statusPort), &st))
	return st
}

// waitRequests waits until the web has logged at least n page requests.
func (s *Stack) waitRequests(n int) synthweb.Snapshot {
	s.t.Helper()
	var snap synthweb.Snapshot
	s.eventually(5*time.Minute, fmt.Sprintf("%d requests in the web's log", n), func() (bool, string) {
		var err error
		snap, err = s.webLog()
		if err != nil {
			return false, err.Error()
		}
		return len(snap.Requests) >= n, fmt.Sprintf("%d requests", len(snap.Requests))
	})
	return snap
}

func origin(host string) string { return "http://" + net.JoinHostPort(host, strconv.Itoa(webPort)) }

// judge checks the crawl from the web's log (blackbox.Judge); at most refetchBound pages
// may be requested more than once.
func (s *Stack) judge(st blackbox.Status, refetchBound int) synthweb.Snapshot {
	s.t.Helper()
	snap, err := s.webLog()
	if err != nil {
		s.t.Fatal(err)
	}
	blackbox.Judge(s.t, snap, st, blackbox.Crawl{Origin: origin, MinDelay: minDelay, MaxRetries: maxRetries, RefetchBound: refetchBound})
	return snap
}
