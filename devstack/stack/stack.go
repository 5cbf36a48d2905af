// Package stack runs a whole Trawl crawl on one machine without Docker: an embedded NATS
// JetStream server, a redis-server child process, and the four service binaries as child
// processes. `make run`, the end-to-end tests and the end-to-end benchmark all use it, so
// what the tests exercise is what an operator runs.
package stack

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/trawl/trawl/devstack/freeport"
	"github.com/trawl/trawl/devstack/natsembed"
	"github.com/trawl/trawl/devstack/redisproc"
	"github.com/trawl/trawl/shared/durability"
	"github.com/trawl/trawl/shared/envconfig"
	"github.com/trawl/trawl/shared/natsx"
	"github.com/trawl/trawl/shared/redisx"
	"github.com/trawl/trawl/shared/renderconf"
	"github.com/trawl/trawl/shared/seed"
)

// Services are the binaries a stack runs, in start order.
var Services = []string{"scheduler", "dedup", "parser", "fetcher"}

// Archiver is the optional fifth service: the stack runs it when TRAWL_ARCHIVE_DIR is set
// (in Options.Env or the environment). It starts with the others, so its consumer exists
// before the first page is published.
const Archiver = "archiver"

// Renderer is the optional service that renders pages in a browser: the stack runs
// Options.Replicas["renderer"] of them, or one when TRAWL_RENDER (in Options.Env or the
// environment) is auto or always and no count is given.
const Renderer = "renderer"

// NATSServer is the trawl-nats binary Build also makes (devstack/cmd/trawl-nats), for
// stacks that run NATS as a process of its own (Options.NATSBin).
const NATSServer = "trawl-nats"

// Options configure a stack. Zero values take the defaults in the comments.
type Options struct {
	// BinDir holds the service binaries (see Build).
	BinDir string
	// Dir holds the NATS store, the Redis data and the service logs; "" = a temp dir
	// removed by Close.
	Dir string
	// Env is given to every service on top of the caller's environment (TRAWL_* settings).
	Env map[string]string
	// Replicas per service (default 1 each); e.g. {"fetcher": 3}.
	Replicas map[string]int
	// Only, if set, are the services of Services to run instead of all of them (e.g.
	// {"scheduler", "dedup"} for a benchmark that plays the fetchers itself); the
	// archiver and renderers still follow their settings.
	Only []string
	// ProcEnv adds settings for one replica, keyed "name-index" (e.g. "scheduler-1").
	ProcEnv map[string]map[string]string
	// Durability is what a write acknowledged by Redis or NATS survives
	// (TRAWL_FSYNC), given to the services too; "" is durability.Default, as compose.yaml
	// runs them. Either way the AOF is on, so a SIGKILLed redis-server (or a whole stack
	// killed and started again on the same Dir) loses nothing it acknowledged.
	Durability durability.Level
	// Logs, if set, also receives every service's log lines prefixed with its id.
	Logs io.Writer
	// Log is the stack's own logger (default: discard).
	Log *slog.Logger
	// NATSBin, if set, is a trawl-nats binary (devstack/cmd/trawl-nats): NATS then runs
	// as a child process of its own rather than inside the caller, so that its CPU time
	// can be read apart (benchmarks). NATS() is nil then.
	NATSBin string
	// NATSArgs are extra trawl-nats flags, e.g. {"-pprof", "127.0.0.1:6060"}.
	NATSArgs []string
	// NATSMaxStore, if set, is JetStream's file storage limit in bytes instead of three
	// quarters of the free disk (to stand for a small disk).
	NATSMaxStore int64
	// NATSURL, if set, is a NATS the stack uses instead of starting one (e.g. a cluster of
	// devstack/natscluster: several comma-separated URLs); NATS() is nil then.
	NATSURL string
	// RedisURL, if set, is a Redis the stack uses instead of starting one (e.g. a Redis
	// Cluster of devstack/rediscluster); Redis() is nil then.
	RedisURL string
	// Prepare, if set, runs once Redis answers and before any service starts, with a client
	// of it: state every service must find at start (the live site policies of a benchmark)
	// is written here.
	Prepare func(ctx context.Context, rdb redis.UniversalClient) error
	// CPUs, if set, pins every child process (NATS when NATSBin is set, Redis and the
	// services) to these CPU numbers, so that a benchmark can keep the web it crawls on
	// CPUs of its own. Linux only.
	CPUs []int
}

// Stack is a running local deployment.
type Stack struct {
	opts    Options
	dir     string
	ownDir  bool
	nats    *natsembed.Server
	natsP   *Proc // NATS as a child process (Options.NATSBin)
	natsURL string
	redis   *redisproc.Server
	nc      *nats.Conn
	js      jetstream.JetStream
	rdb     redis.UniversalClient
	procs   []*Proc
	logMu   sync.Mutex
	files   []*os.File
	shards  int
	prefix  string
	// leaseTTL is TRAWL_LEASE_TTL as the services run with it: it dates the tasks out.
	leaseTTL time.Duration
}

// Build compiles the services (the archiver included) into outDir with the workspace at root.
func Build(ctx context.Context, root, outDir string) error {
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return fmt.Errorf("stack: build: %w", err)
	}
	args := []string{"build", "-o", outDir + string(os.PathSeparator)}
	for _, s := range append(Services, Archiver, Renderer) {
		args = append(args, "./services/"+s)
	}
	args = append(args, "./devstack/cmd/"+NATSServer)
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("stack: go build: %w\n%s", err, out)
	}
	return nil
}

// RepoRoot finds the directory holding go.work, walking up from the working directory.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.work")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("stack: no go.work above the working directory")
		}
		dir = parent
	}
}

// Start starts NATS, Redis and every service, and waits until each service answers
// /readyz.
func Start(ctx context.Context, opts Options) (_ *Stack, err error) {
	if opts.Log == nil {
		opts.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	level, err := durability.Parse(string(opts.Durability))
	if err != nil {
		return nil, fmt.Errorf("stack: %w", err)
	}
	opts.Durability = level
	s := &Stack{opts: opts, dir: opts.Dir, shards: 1, prefix: redisx.DefaultPrefix, leaseTTL: envconfig.DefaultLeaseTTL}
	defer func() {
		if err != nil {
			_ = s.Close(context.WithoutCancel(ctx))
		}
	}()
	if s.dir == "" {
		if s.dir, err = os.MkdirTemp("", "trawl-stack-"); err != nil {
			return nil, fmt.Errorf("stack: %w", err)
		}
		s.ownDir = true
	}
	for _, d := range []string{"nats", "redis", "logs"} {
		if err := os.MkdirAll(filepath.Join(s.dir, d), 0o755); err != nil {
			return nil, fmt.Errorf("stack: %w", err)
		}
	}
	natsURL := opts.NATSURL
	if natsURL == "" {
		if natsURL, err = s.startNATS(ctx); err != nil {
			return nil, err
		}
	}
	s.natsURL = natsURL
	redisURL := opts.RedisURL
	if redisURL == "" {
		if s.redis, err = redisproc.Start(ctx, redisproc.Options{Dir: filepath.Join(s.dir, "redis"), AppendOnly: true, FsyncAlways: level.RedisAppendFsync() == "always"}); err != nil {
			return nil, fmt.Errorf("stack: redis: %w", err)
		}
		redisURL = s.redis.URL()
	}
	if len(opts.CPUs) > 0 && s.redis != nil {
		pid, err := s.RedisPID()
		if err != nil {
			return nil, err
		}
		if err := Pin(pid, opts.CPUs); err != nil {
			return nil, err
		}
	}
	if s.nc, s.js, err = natsx.Connect(ctx, natsURL, "trawl-stack", opts.Log); err != nil {
		return nil, err
	}
	if s.rdb, err = redisx.Open(redisURL, redisx.Timeouts{Dial: 2 * time.Second, Read: 10 * time.Second, Write: 10 * time.Second, Retries: 3}); err != nil {
		return nil, fmt.Errorf("stack: %w", err)
	}
	if opts.Prepare != nil {
		if err := opts.Prepare(ctx, s.rdb); err != nil {
			return nil, fmt.Errorf("stack: prepare: %w", err)
		}
	}

	env := map[string]string{}
	for k, v := range opts.Env {
		env[k] = v
	}
	env["TRAWL_NATS_URL"] = natsURL
	env["TRAWL_REDIS_URL"] = redisURL
	// The services settle their acks by the level the stores run at.
	env[durability.Env] = string(opts.Durability)
	// NATS sets each stream's byte cap aside out of three quarters of the free disk, so the
	// production caps (18 GiB in all) would keep a local stack from starting on a small
	// disk; the environment's own values still win.
	for k, v := range localStreamCaps {
		if _, set := env[k]; !set && os.Getenv(k) == "" {
			env[k] = v
		}
	}
	// The services read the process environment too; opts.Env wins over it. The stack reads
	// what it needs to watch the crawl (shards, key prefix, lease TTL) the same way and with
	// the same code, and a bad value stops it here, as it would stop the services.
	r := envconfig.Overlay(env)
	conn := envconfig.LoadConn(r)
	s.shards, s.prefix, s.leaseTTL = conn.Shards, conn.RedisPrefix, envconfig.LoadLeaseTTL(r)
	if err := r.Err(); err != nil {
		return nil, fmt.Errorf("stack: %w", err)
	}
	names := slices.Clone(Services)
	if len(opts.Only) > 0 {
		names = slices.DeleteFunc(names, func(n string) bool { return !slices.Contains(opts.Only, n) })
	}
	if ArchiveDir(env) != "" {
		names = append(names, Archiver)
	}
	if Renderers(env, opts.Replicas) > 0 {
		names = append(names, Renderer)
	}
	for _, name := range names {
		n := opts.Replicas[name]
		if name == Renderer {
			n = Renderers(env, opts.Replicas)
		}
		if n <= 0 {
			n = 1
		}
		for i := range n {
			p, err := s.newProc(name, i, env)
			if err != nil {
				return nil, err
			}
			if err := p.Start(); err != nil {
				return nil, err
			}
			s.procs = append(s.procs, p)
			if err := s.pin(p); err != nil {
				return nil, err
			}
		}
	}
	for _, p := range s.procs {
		if err := s.waitBound(ctx, p); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// bindAttempts bounds the starts of a service whose HTTP port another process bound
// between freeport's pick and the service's own bind.
const bindAttempts = 3

// waitBound waits until p is ready, starting it again on another port when it exited
// because its HTTP port was taken. Only Start calls it: no one reads p.HTTPAddr yet.
func (s *Stack) waitBound(ctx context.Context, p *Proc) error {
	for attempt := 1; ; attempt++ {
		err := s.WaitReady(ctx, p)
		if err == nil || attempt == bindAttempts || !s.lostPort(p) {
			return err
		}
		addr, ferr := freeport.Addr()
		if ferr != nil {
			return fmt.Errorf("%w (and no other port: %w)", err, ferr)
		}
		s.opts.Log.Warn("stack: a service's HTTP port was taken before it bound it; starting it on another", "proc", p.ID(), "taken", p.HTTPAddr, "port", addr)
		p.setHTTPAddr(addr)
		if err := p.Start(); err != nil {
			return err
		}
		if err := s.pin(p); err != nil {
			return err
		}
	}
}

// lostPort reports whether p has exited because its HTTP address was in use, as Go's net
// package words the bind error the service logs.
func (s *Stack) lostPort(p *Proc) bool {
	exited, _ := p.Exited()
	return exited && strings.Contains(s.LogTail(p, 30), "listen tcp "+p.HTTPAddr+": bind: address already in use")
}

// Renderers is how many renderers a stack with env and replicas runs: the count given, else
// one when TRAWL_RENDER is on.
func Renderers(env map[string]string, replicas map[string]int) int {
	if n, ok := replicas[Renderer]; ok {
		return max(n, 0)
	}
	if renderconf.Load(envconfig.Overlay(env)).On() {
		return 1
	}
	return 0
}

// ArchiveDir is the TRAWL_ARCHIVE_DIR the services get with env: the archiver runs when it is set.
func ArchiveDir(env map[string]string) string {
	return envconfig.Overlay(env).String("ARCHIVE_DIR", "")
}

// startNATS starts the embedded server, or the trawl-nats child process with
// Options.NATSBin, and returns its client URL once it accepts connections.
func (s *Stack) startNATS(ctx context.Context) (string, error) {
	store := s.NATSDir()
	if s.opts.NATSBin == "" {
		var err error
		if s.nats, err = natsembed.Start(natsembed.Options{StoreDir: store, MaxStore: s.opts.NATSMaxStore, Durability: s.opts.Durability}); err != nil {
			return "", fmt.Errorf("stack: nats: %w", err)
		}
		return s.nats.URL(), nil
	}
	addr, err := freeport.Addr()
	if err != nil {
		return "", err
	}
	host, port, _ := net.SplitHostPort(addr)
	f, err := openLog(filepath.Join(s.dir, "logs", "nats-0.log"))
	if err != nil {
		return "", fmt.Errorf("stack: %w", err)
	}
	s.files = append(s.files, f)
	args := []string{"-store", store, "-host", host, "-port", port, "-fsync", string(s.opts.Durability)}
	if s.opts.NATSMaxStore > 0 {
		args = append(args, "-max-store", strconv.FormatInt(s.opts.NATSMaxStore, 10))
	}
	p := &Proc{Name: "nats", bin: s.opts.NATSBin, args: append(args, s.opts.NATSArgs...), env: os.Environ(), logOut: f}
	if err := p.Start(); err != nil {
		return "", err
	}
	s.natsP = p
	if err := s.pin(p); err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		if exited, err := p.Exited(); exited {
			return "", fmt.Errorf("stack: nats exited during start-up (%v):\n%s", err, s.LogTail(p, 30))
		}
		var d net.Dialer
		if c, err := d.DialContext(ctx, "tcp", addr); err == nil {
			c.Close()
			return "nats://" + addr, nil
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("stack: nats not listening on %s: %w", addr, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func (s *Stack) pin(p *Proc) error {
	if len(s.opts.CPUs) == 0 {
		return nil
	}
	return Pin(p.PID(), s.opts.CPUs)
}

// localStreamCaps are a local stack's stream caps: about 2.6 GiB set aside in all, room
// for thousands of unparsed pages.
var localStreamCaps = map[string]string{
	"TRAWL_PAGES_MAX_BYTES":   "1GiB",
	"TRAWL_DOCS_MAX_BYTES":    "512MiB",
	"TRAWL_SKIPPED_MAX_BYTES": "64MiB",
	"TRAWL_DEAD_MAX_BYTES":    "64MiB",
}

func (s *Stack) newProc(name string, i int, env map[string]string) (*Proc, error) {
	addr, err := freeport.Addr()
	if err != nil {
		return nil, err
	}
	p := &Proc{Name: name, Index: i, HTTPAddr: addr, bin: filepath.Join(s.opts.BinDir, name)}
	if _, err := os.Stat(p.bin); err != nil {
		return nil, fmt.Errorf("stack: %s binary: %w (run `make build`)", name, err)
	}
	vars := map[string]string{}
	for _, kv := range os.Environ() {
		k, v, _ := strings.Cut(kv, "=")
		vars[k] = v
	}
	for k, v := range env {
		vars[k] = v
	}
	for k, v := range s.opts.ProcEnv[p.ID()] {
		vars[k] = v
	}
	vars[httpAddrEnv] = addr
	keys := make([]string, 0, len(vars))
	for k := range vars {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		p.env = append(p.env, k+"="+vars[k])
	}
	f, err := openLog(filepath.Join(s.dir, "logs", p.ID()+".log"))
	if err != nil {
		return nil, fmt.Errorf("stack: %w", err)
	}
	s.files = append(s.files, f)
	var out io.Writer = f
	if s.opts.Logs != nil {
		out = io.MultiWriter(f, &prefixWriter{mu: &s.logMu, w: s.opts.Logs, prefix: p.ID()})
	}
	p.logOut = out
	return p, nil
}

// WaitReady waits until p answers /readyz, or fails with the tail of its log if it exits.
func (s *Stack) WaitReady(ctx context.Context, p *Proc) error {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for {
		if exited, err := p.Exited(); exited {
			return fmt.Errorf("stack: %s exited during start-up (%v):\n%s", p.ID(), err, s.LogTail(p, 30))
		}
		if probe(ctx, p.HTTPAddr) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("stack: %s not ready: %w\n%s", p.ID(), ctx.Err(), s.LogTail(p, 30))
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Procs returns the service processes.
func (s *Stack) Procs() []*Proc { return s.procs }

// Proc returns replica i of a service, or nil.
func (s *Stack) Proc(name string, i int) *Proc {
	for _, p := range s.procs {
		if p.Name == name && p.Index == i {
			return p
		}
	}
	return nil
}

// NATS is the embedded NATS server; nil when it runs as a child process (Options.NATSBin).
func (s *Stack) NATS() *natsembed.Server { return s.nats }

// NATSProc is NATS as a child process (Options.NATSBin), its store in NATSDir; nil when
// it is embedded.
func (s *Stack) NATSProc() *Proc { return s.natsP }

// NATSDir is NATS's JetStream store directory.
func (s *Stack) NATSDir() string { return filepath.Join(s.dir, "nats") }

// NATSURL is the NATS client URL, wherever the server runs.
func (s *Stack) NATSURL() string { return s.natsURL }

// PIDs maps every process of the stack to its pid: the services by ID ("fetcher-0"),
// "redis", and "nats" when NATS runs as a child process. Benchmarks read their CPU time.
func (s *Stack) PIDs() (map[string]int, error) {
	m := map[string]int{}
	for _, p := range s.procs {
		m[p.ID()] = p.PID()
	}
	if s.natsP != nil {
		m["nats"] = s.natsP.PID()
	}
	if s.redis == nil {
		return m, nil
	}
	pid, err := s.RedisPID()
	if err != nil {
		return nil, err
	}
	m["redis"] = pid
	return m, nil
}

// Redis is the redis-server process.
func (s *Stack) Redis() *redisproc.Server { return s.redis }

// JetStream is a client connection for tests and tools.
func (s *Stack) JetStream() jetstream.JetStream { return s.js }

// RedisClient is a client connection for tests and tools.
func (s *Stack) RedisClient() redis.UniversalClient { return s.rdb }

// Dir is the stack's working directory (stores and logs).
func (s *Stack) Dir() string { return s.dir }

// LogTail returns the last n lines of a process's log file.
func (s *Stack) LogTail(p *Proc, n int) string {
	b, err := os.ReadFile(filepath.Join(s.dir, "logs", p.ID()+".log"))
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return p.ID() + ": " + strings.Join(lines, "\n"+p.ID()+": ")
}

// Logs returns the last n lines of every process's log.
func (s *Stack) Logs(n int) string {
	var b strings.Builder
	for _, p := range s.procs {
		b.WriteString(s.LogTail(p, n))
		b.WriteByte('\n')
	}
	return b.String()
}

// Seed publishes seed URLs (depth 0) to crawl.discovered, in batches of 1000.
func (s *Stack) Seed(ctx context.Context, urls []string) error {
	_, err := seed.Publish(ctx, s.js, urls, 0)
	return err
}

// Crash ends the whole stack at once with no chance to clean up, as a power cut or a
// `kill -9` of the process tree would: SIGKILL for every service, redis-server and a NATS
// child process (Options.NATSBin); an embedded NATS server, which lives in the caller, is
// shut down. The directory is kept, so Start with the same Options resumes the crawl;
// Close still releases what is left.
func (s *Stack) Crash() error {
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	kill := func(f func() error) {
		wg.Go(func() {
			if err := f(); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		})
	}
	for _, p := range s.procs {
		kill(p.Kill)
	}
	if s.redis != nil {
		kill(s.redis.Kill)
	}
	if s.natsP != nil {
		kill(s.natsP.Kill)
	}
	wg.Wait()
	if s.nats != nil {
		s.nats.Close()
	}
	return errors.Join(errs...)
}

// Close stops the services gracefully (SIGTERM, 15s), then Redis and NATS, and removes
// a temporary directory.
func (s *Stack) Close(ctx context.Context) error {
	var errs []error
	var wg sync.WaitGroup
	var mu sync.Mutex
	for _, p := range s.procs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := p.Stop(15 * time.Second); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if s.nc != nil {
		s.nc.Close()
	}
	if s.rdb != nil {
		s.rdb.Close()
	}
	if s.redis != nil {
		if err := s.redis.Stop(); err != nil {
			errs = append(errs, err)
		}
	}
	if s.nats != nil {
		s.nats.Close()
	}
	if s.natsP != nil {
		if err := s.natsP.Stop(15 * time.Second); err != nil {
			errs = append(errs, err)
		}
	}
	for _, f := range s.files {
		f.Close()
	}
	if s.ownDir {
		os.RemoveAll(s.dir)
	}
	return errors.Join(errs...)
}
