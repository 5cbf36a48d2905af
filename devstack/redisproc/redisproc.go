// Package redisproc runs a real redis-server as a child process for tests,
// crash tests and the local demo. A real server (rather than an in-memory
// fake) is used so persistence and crash behaviour are the genuine article.
package redisproc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/trawl/trawl/devstack/freeport"
	"github.com/trawl/trawl/devstack/sysdeps"
)

const (
	// readyTimeout bounds the wait for PING even when the caller's ctx has none.
	readyTimeout = 10 * time.Second
	// stopTimeout bounds a graceful SIGTERM before falling back to SIGKILL.
	stopTimeout = 10 * time.Second
	// portAttempts covers the race between releasing a probed port and
	// redis binding it.
	portAttempts = 5
	installHint  = "apt-get install -y redis-server"
)

// ErrNotInstalled reports that no redis-server binary could be found.
var ErrNotInstalled = errors.New("redis-server not installed (install it with `" + installHint + "`)")

// Options configure a redis-server child. The zero value is usable.
type Options struct {
	Dir  string // working dir for AOF/RDB; "" = temp dir removed by Stop
	Port int    // 0 = free port
	// The AOF is on by default (appendfsync everysec): a Redis that forgets its data on a
	// restart is a lost crawl, and the services refuse to go on with one (shared/crawlid).
	// Ephemeral turns persistence off, for a test that wants exactly that loss.
	Ephemeral bool
	// AppendOnly states the default (AOF, everysec) explicitly.
	AppendOnly bool
	// FsyncAlways switches AOF to appendfsync always, as compose.yaml runs Redis, so a
	// write acknowledged before Kill is guaranteed to survive; everysec may hold back a
	// write while an fsync is slow, which would make crash tests racy.
	FsyncAlways bool
	Binary      string // default: "redis-server" from PATH
	// Password, set, is required of every client (--requirepass), as compose.yaml runs
	// Redis with TRAWL_REDIS_PASSWORD; URL carries it.
	Password string
	// Args are further redis-server options, after the package's own (e.g. cluster mode
	// for devstack/rediscluster).
	Args []string
	// Ports free ports more are probed at each start attempt and given to PortArgs, whose
	// options (a TLS port, a cluster bus port) follow Args: a port taken between its probe
	// and redis's bind is then tried again with new ones, as the server's own is. Restart
	// keeps them; Server.Ports reports them.
	Ports    int
	PortArgs func(ports []int) []string
}

// Server is a redis-server child process (running, or stopped awaiting
// Restart).
type Server struct {
	bin     string
	dir     string
	ownsDir bool
	opts    Options

	mu    sync.Mutex
	port  int
	ports []int // Options.Ports
	proc  *process
}

// process is one run of redis-server.
type process struct {
	cmd  *exec.Cmd
	out  *tailBuffer
	done chan struct{} // closed once the process has been reaped
	err  error         // Wait's result, valid after done
}

// Start launches redis-server and waits until it answers PING.
func Start(ctx context.Context, opts Options) (*Server, error) {
	bin, err := findBinary(opts.Binary)
	if err != nil {
		return nil, err
	}
	s := &Server{bin: bin, dir: opts.Dir, opts: opts, port: opts.Port}
	if s.dir == "" {
		dir, err := os.MkdirTemp("", "redisproc-")
		if err != nil {
			return nil, fmt.Errorf("redisproc: create data dir: %w", err)
		}
		s.dir, s.ownsDir = dir, true
	}

	attempts := 1
	if opts.Port == 0 || opts.Ports > 0 {
		attempts = portAttempts
	}
	for i := 0; i < attempts; i++ {
		if err = s.probePorts(ctx); err != nil {
			break
		}
		var p *process
		if p, err = s.launch(ctx); err == nil {
			s.proc = p
			return s, nil
		}
		if !errors.Is(err, errPortInUse) {
			break
		}
	}
	if s.ownsDir {
		_ = os.RemoveAll(s.dir)
	}
	return nil, err
}

// StartT starts redis-server for a test in a t.TempDir (unless opts.Dir is
// set) and stops it when the test ends.
func StartT(t testing.TB, opts Options) *Server {
	t.Helper()
	if opts.Dir == "" {
		// A caller-owned dir survives Stop, so tests may Stop then Restart
		// without losing data; t.TempDir's cleanup runs after ours.
		opts.Dir = t.TempDir()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := Start(ctx, opts)
	if err != nil {
		t.Fatalf("redisproc: cannot start redis-server: %v\n"+
			"These tests need a real redis-server binary: install it with `%s` "+
			"(or call redisproc.EnsureInstalled), or set Options.Binary.", err, installHint)
	}
	t.Cleanup(func() {
		if err := s.Stop(); err != nil {
			t.Errorf("redisproc: stop: %v", err)
		}
	})
	return s
}

// Addr is host:port, stable across Restart.
func (s *Server) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port))
}

// URL is a redis:// URL for database 0, with the password when one is set.
func (s *Server) URL() string {
	u := url.URL{Scheme: "redis", Host: s.Addr(), Path: "/0"}
	if s.opts.Password != "" {
		u.User = url.UserPassword("", s.opts.Password)
	}
	return u.String()
}

// Dir is the data directory holding the AOF/RDB files.
func (s *Server) Dir() string { return s.dir }

// Stop terminates redis gracefully (it flushes the AOF on SIGTERM), falling
// back to SIGKILL after a bound. A data dir created by Start is removed, so
// Restart after Stop then begins empty; Kill keeps it. Stop is idempotent.
func (s *Server) Stop() error {
	s.mu.Lock()
	p := s.proc
	s.proc = nil
	s.mu.Unlock()

	var err error
	if p != nil {
		err = p.stop(stopTimeout)
	}
	if s.ownsDir {
		if rmErr := os.RemoveAll(s.dir); rmErr != nil && err == nil {
			err = fmt.Errorf("redisproc: remove data dir: %w", rmErr)
		}
	}
	return err
}

// Kill sends SIGKILL to redis (and any fork it has, such as a background
// AOF rewrite) and waits for it to be reaped, simulating a crash.
func (s *Server) Kill() error {
	s.mu.Lock()
	p := s.proc
	s.proc = nil
	s.mu.Unlock()
	if p == nil {
		return nil
	}
	return p.kill()
}

// Pause stops the running redis-server with SIGSTOP: its port still accepts connections
// (the kernel completes them) but nothing answers, as when a server or its network stalls.
// Resume lets it go on.
func (s *Server) Pause() error { return s.signal(syscall.SIGSTOP) }

// Resume continues a paused redis-server (SIGCONT).
func (s *Server) Resume() error { return s.signal(syscall.SIGCONT) }

func (s *Server) signal(sig syscall.Signal) error {
	s.mu.Lock()
	p := s.proc
	s.mu.Unlock()
	if p == nil || p.exited() {
		return errors.New("redisproc: redis-server is not running")
	}
	if err := p.cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("redisproc: %s: %w", sig, err)
	}
	return nil
}

// Restart starts redis again on the same port and data dir after Stop or
// Kill, and waits until it answers PING.
func (s *Server) Restart(ctx context.Context) error {
	s.mu.Lock()
	running := s.proc != nil
	s.mu.Unlock()
	if running {
		return errors.New("redisproc: restart: server still running; Stop or Kill it first")
	}
	if err := os.MkdirAll(s.dir, 0o755); err != nil {
		return fmt.Errorf("redisproc: restart: data dir: %w", err)
	}
	// The kernel may not have released the port the instant the old process
	// was reaped; a few quick retries keep crash tests from flaking on that.
	var err error
	for attempt := 0; attempt < portAttempts; attempt++ {
		var p *process
		if p, err = s.launch(ctx); err == nil {
			s.mu.Lock()
			s.proc = p
			s.mu.Unlock()
			return nil
		}
		if !errors.Is(err, errPortInUse) {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("redisproc: restart: %w", errors.Join(err, ctx.Err()))
		case <-time.After(time.Duration(attempt+1) * 100 * time.Millisecond):
		}
	}
	return fmt.Errorf("redisproc: restart: %w", err)
}

var errPortInUse = errors.New("port already in use")

// probePorts takes new free ports for the ports the options leave to the package: the
// server's own unless Options.Port is set, and Options.Ports more.
func (s *Server) probePorts(ctx context.Context) error {
	if s.opts.Port == 0 {
		p, err := probePort(ctx)
		if err != nil {
			return err
		}
		s.port = p
	}
	s.ports = s.ports[:0]
	// freeport gives no port twice, but a test's stand-in may: a few more tries.
	for range 4 * (s.opts.Ports + 1) {
		if len(s.ports) == s.opts.Ports {
			return nil
		}
		p, err := probePort(ctx)
		if err != nil {
			return err
		}
		if p != s.port && !slices.Contains(s.ports, p) {
			s.ports = append(s.ports, p)
		}
	}
	if len(s.ports) < s.opts.Ports {
		return fmt.Errorf("redisproc: %d distinct free ports wanted, %d found", s.opts.Ports, len(s.ports))
	}
	return nil
}

// Ports are the ports probed for Options.PortArgs, stable across Restart.
func (s *Server) Ports() []int { return slices.Clone(s.ports) }

func (s *Server) args() []string {
	appendOnly, fsync := "yes", "everysec"
	if s.opts.Ephemeral {
		appendOnly = "no"
	}
	if s.opts.FsyncAlways {
		fsync = "always"
	}
	args := []string{
		"--port", strconv.Itoa(s.port),
		"--bind", "127.0.0.1",
		"--dir", s.dir,
		"--save", "",
		"--appendonly", appendOnly,
		"--appendfsync", fsync,
		"--daemonize", "no",
		"--protected-mode", "no",
		"--loglevel", "warning",
		"--logfile", "",
	}
	if s.opts.Password != "" {
		args = append(args, "--requirepass", s.opts.Password)
	}
	args = append(args, s.opts.Args...)
	if s.opts.PortArgs != nil {
		args = append(args, s.opts.PortArgs(s.Ports())...)
	}
	return args
}

// launch starts one process and waits for PING; on failure the process is
// gone and the error carries the tail of its output.
func (s *Server) launch(ctx context.Context) (*process, error) {
	out := &tailBuffer{max: 16 << 10}
	cmd := exec.Command(s.bin, s.args()...)
	cmd.Dir = s.dir
	cmd.Stdout = out
	cmd.Stderr = out
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("redisproc: exec %s: %w", s.bin, err)
	}
	p := &process{cmd: cmd, out: out, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()

	if err := waitPing(ctx, s.Addr(), s.opts.Password, cmd.Process.Pid, p.done); err != nil {
		_ = p.kill()
		tail := out.Tail(20)
		if strings.Contains(tail, "Address already in use") {
			err = errors.Join(errPortInUse, err)
		}
		return nil, fmt.Errorf("redisproc: redis-server on port %d did not become ready: %w\n--- redis-server output (tail) ---\n%s", s.port, err, tail)
	}
	return p, nil
}

// waitPing polls with a short backoff until redis answers PING (which also
// means any AOF has finished loading), the process exits, or ctx /
// readyTimeout runs out. The answer must come from process pid: another
// redis-server that took the probed port first would answer too, while ours
// fails to bind it and exits, and two tests would share one server.
func waitPing(ctx context.Context, addr, password string, pid int, exited <-chan struct{}) error {
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	client := redis.NewClient(&redis.Options{
		Addr:         addr,
		Password:     password,
		DialTimeout:  250 * time.Millisecond,
		ReadTimeout:  250 * time.Millisecond,
		WriteTimeout: 250 * time.Millisecond,
		// Honour pingOnce's deadline even inside the connection handshake.
		ContextTimeoutEnabled: true,
		MaxRetries:            -1, // this loop is the retry policy
		DialerRetries:         1,
	})
	defer client.Close()

	backoff := 5 * time.Millisecond
	for {
		err := pingOnce(ctx, client, addr, pid)
		if err == nil {
			return nil
		}
		select {
		case <-exited:
			return errors.New("process exited")
		case <-ctx.Done():
			return fmt.Errorf("no PING reply (last error: %v): %w", err, ctx.Err())
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 100*time.Millisecond)
	}
}

// pingOnce probes the port with a bare dial first: go-redis logs every failed
// dial, which would spam test output while redis is still starting. Each
// attempt is bounded so a port held by something that is not redis cannot
// stall the loop past the process's exit.
func pingOnce(ctx context.Context, client *redis.Client, addr string, pid int) error {
	ctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	_ = conn.Close()
	if err := client.Ping(ctx).Err(); err != nil {
		return err
	}
	info := client.InfoMap(ctx, "server")
	if err := info.Err(); err != nil {
		return err
	}
	if got := info.Item("Server", "process_id"); got != strconv.Itoa(pid) {
		return fmt.Errorf("%s is answered by another redis-server (process %s)", addr, got)
	}
	return nil
}

func (p *process) stop(timeout time.Duration) error {
	if err := p.cmd.Process.Signal(sigterm); err != nil && !p.exited() {
		return fmt.Errorf("redisproc: SIGTERM: %w", err)
	}
	select {
	case <-p.done:
		return nil
	case <-time.After(timeout):
		if err := p.kill(); err != nil {
			return err
		}
		return fmt.Errorf("redisproc: redis-server ignored SIGTERM for %s and was killed", timeout)
	}
}

func (p *process) kill() error {
	// Signalling a reaped pid could hit an unrelated, recycled process group.
	if p.exited() {
		return nil
	}
	if err := killGroup(p.cmd.Process); err != nil && !p.exited() {
		return fmt.Errorf("redisproc: SIGKILL: %w", err)
	}
	<-p.done
	return nil
}

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// probePort is freePort, or a test's stand-in that hands out a port in use.
var probePort = freePort

// freePort is a port from freeport. It is free but not held until redis binds it, hence
// the retries in Start.
func freePort(context.Context) (int, error) { return freeport.Port() }

func findBinary(name string) (string, error) {
	if name == "" {
		name = "redis-server"
	}
	path, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("redisproc: %w: %w", ErrNotInstalled, err)
	}
	return path, nil
}

// EnsureInstalled returns the path of redis-server, installing it with
// apt-get when it is missing and this process may do so (root with apt-get
// on PATH). Installer output goes to w. Otherwise the error says exactly what
// to install.
func EnsureInstalled(ctx context.Context, w io.Writer) (string, error) {
	if err := sysdeps.Ensure(ctx, w, sysdeps.Known["redis-server"]); err != nil {
		return "", fmt.Errorf("redisproc: %w: %w", ErrNotInstalled, err)
	}
	return exec.LookPath("redis-server")
}

// tailBuffer keeps the last max bytes written, so a chatty or crashing redis
// cannot grow memory while its last words remain available for errors.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	if over := len(b.buf) - b.max; over > 0 {
		b.buf = append(b.buf[:0], b.buf[over:]...)
	}
	return len(p), nil
}

// Tail returns at most the last n lines.
func (b *tailBuffer) Tail(n int) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	lines := bytes.Split(bytes.TrimRight(b.buf, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}
