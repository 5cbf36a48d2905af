// Package natsembed runs a NATS server with JetStream inside the current
// process, so tests and the local demo need no external broker.
package natsembed

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/trawl/trawl/shared/durability"
)

// readyTimeout bounds how long Start waits for the server to accept clients.
const readyTimeout = 10 * time.Second

// defaultMaxPayload is large because fetched pages travel as message bodies.
const defaultMaxPayload = 8 << 20

// Options configure an embedded server. The zero value is usable.
type Options struct {
	StoreDir   string // JetStream file store dir; "" = a new temp dir removed by Close
	Port       int    // 0 = random free port
	Host       string // default "127.0.0.1"
	MaxPayload int32  // default 8 MiB (pages can be big)
	// Logger receives the server's own log lines; nil discards them because
	// the NATS banner would drown test output.
	Logger *slog.Logger
	// ServerName names the server; default "trawl-devstack". The servers of a cluster
	// need distinct names.
	ServerName string
	// Cluster, when set, joins the server to a NATS cluster over routes, with clustered
	// JetStream (devstack/natscluster).
	Cluster *Cluster
	// Username and Password, when set, are the only credentials the server accepts.
	Username, Password string
	// MaxStore is JetStream's file storage limit in bytes; 0 leaves the server's default,
	// three quarters of the store directory's free disk at start.
	MaxStore int64
	// Durability is what an acknowledged write survives (TRAWL_FSYNC); "" is
	// durability.Default, as compose.yaml runs NATS.
	Durability durability.Level
	// Tags are the server's tags, which a stream's placement can name to be put on it.
	Tags []string
}

// Cluster is the route side of a clustered server.
type Cluster struct {
	Name   string   // the cluster's name, the same on every server
	Port   int      // route listen port on Host; must be set (every server routes to it)
	Routes []string // nats-route://host:port of every server of the cluster (its own is skipped)
	// User and Password, when set, are what a peer must present to be routed to, and what
	// this server presents on its routes: without them anything that reaches the route
	// port joins the cluster.
	User, Password string
}

// Server is a running (or shut down, awaiting Restart) embedded NATS server.
type Server struct {
	mu        sync.Mutex
	opts      Options
	port      int // actual port, fixed after the first start so Restart keeps URLs valid
	ownsStore bool
	ns        *server.Server
	log       *fatalCapture
}

// Start launches a server and waits until it accepts connections.
func Start(opts Options) (*Server, error) {
	if opts.Host == "" {
		opts.Host = "127.0.0.1"
	}
	if opts.MaxPayload <= 0 {
		opts.MaxPayload = defaultMaxPayload
	}
	s := &Server{opts: opts, port: opts.Port}
	if s.port == 0 {
		s.port = server.RANDOM_PORT
	}
	if opts.StoreDir == "" {
		dir, err := os.MkdirTemp("", "natsembed-")
		if err != nil {
			return nil, fmt.Errorf("natsembed: create store dir: %w", err)
		}
		s.opts.StoreDir = dir
		s.ownsStore = true
	}
	if err := s.start(); err != nil {
		if s.ownsStore {
			_ = os.RemoveAll(s.opts.StoreDir)
		}
		return nil, err
	}
	return s, nil
}

// TestMaxStore is the JetStream file storage limit of a test's server. Services declare
// their streams with the production byte caps (TRAWL_PAGES_MAX_BYTES …, 18 GiB in all),
// which JetStream sets aside out of this limit when a stream is made, though a test writes
// a few megabytes. The server's default, three quarters of the free disk, would let a
// busy machine's disk decide whether the second of two tests running at once may start;
// this is bookkeeping, not a promise of disk.
const TestMaxStore = 1 << 40

// StartT starts a server for a test with its store in t.TempDir and shuts it
// down when the test ends.
func StartT(t testing.TB) *Server {
	t.Helper()
	s, err := Start(Options{StoreDir: t.TempDir(), MaxStore: TestMaxStore})
	if err != nil {
		t.Fatalf("natsembed: start embedded NATS server: %v", err)
	}
	t.Cleanup(s.Close)
	return s
}

func (s *Server) start() error {
	capture := &fatalCapture{logger: s.opts.Logger}
	name := s.opts.ServerName
	if name == "" {
		name = "trawl-devstack"
	}
	level, err := durability.Parse(string(s.opts.Durability))
	if err != nil {
		return fmt.Errorf("natsembed: %w", err)
	}
	syncAlways, syncInterval := level.NATSSync()
	nopts := &server.Options{
		ServerName:        name,
		Host:              s.opts.Host,
		Port:              s.port,
		MaxPayload:        s.opts.MaxPayload,
		JetStream:         true,
		StoreDir:          s.opts.StoreDir,
		JetStreamMaxStore: s.opts.MaxStore,
		SyncAlways:        syncAlways,
		SyncInterval:      syncInterval,
		// The embedding process owns signal handling.
		NoSigs:   true,
		Username: s.opts.Username,
		Password: s.opts.Password,
		Tags:     s.opts.Tags,
	}
	if c := s.opts.Cluster; c != nil {
		nopts.Cluster = server.ClusterOpts{Name: c.Name, Host: s.opts.Host, Port: c.Port, Username: c.User, Password: c.Password}
		own := net.JoinHostPort(s.opts.Host, strconv.Itoa(c.Port))
		for _, r := range server.RoutesFromStr(strings.Join(c.Routes, ",")) {
			if r.Host == own || r.Host == "" {
				continue
			}
			if c.User != "" {
				r.User = url.UserPassword(c.User, c.Password)
			}
			nopts.Routes = append(nopts.Routes, r)
		}
	}
	// Payloads above the default pending limit would be refused per client.
	if int64(nopts.MaxPayload)*4 > server.MAX_PENDING_SIZE {
		nopts.MaxPending = int64(nopts.MaxPayload) * 4
	}
	ns, err := server.NewServer(nopts)
	if err != nil {
		return fmt.Errorf("natsembed: configure server: %w", err)
	}
	// Always install the capturing logger: without one, Fatalf is silent and
	// a failed listen would surface only as an unexplained timeout.
	ns.SetLoggerV2(capture, false, false, false)
	go ns.Start()
	if !waitReady(ns, capture) {
		ns.Shutdown()
		ns.WaitForShutdown()
		if msg := capture.fatal(); msg != "" {
			return fmt.Errorf("natsembed: server on %s:%d failed: %s", s.opts.Host, s.port, msg)
		}
		return fmt.Errorf("natsembed: server on %s:%d not ready after %s", s.opts.Host, s.port, readyTimeout)
	}
	addr, ok := ns.Addr().(*net.TCPAddr)
	if !ok {
		ns.Shutdown()
		ns.WaitForShutdown()
		return errors.New("natsembed: server has no TCP listen address")
	}
	s.mu.Lock()
	s.ns = ns
	s.log = capture
	s.port = addr.Port
	s.mu.Unlock()
	return nil
}

// URL is the client URL, e.g. nats://127.0.0.1:4222. It stays the same
// across Restart.
func (s *Server) URL() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return "nats://" + net.JoinHostPort(s.opts.Host, strconv.Itoa(s.port))
}

// StoreDir is the JetStream file store directory.
func (s *Server) StoreDir() string { return s.opts.StoreDir }

// Close stops the server, waits for it and removes a store dir Start created (one given
// in Options stays); it is idempotent. Restart after Close starts empty. StopKeepingStore
// is the stop that keeps the store.
func (s *Server) Close() {
	s.stop()
	if s.ownsStore {
		_ = os.RemoveAll(s.opts.StoreDir)
	}
}

func (s *Server) stop() {
	s.mu.Lock()
	ns := s.ns
	s.ns = nil
	s.mu.Unlock()
	if ns == nil {
		return
	}
	ns.Shutdown()
	ns.WaitForShutdown()
}

// Restart shuts the server down and starts it again on the same port and
// store dir, so crash tests can check what JetStream persisted. Clients
// configured to reconnect will find it at the same URL.
func (s *Server) Restart() error {
	s.stop()
	if s.ownsStore {
		// Close may have removed it; a fresh start needs it to exist.
		if err := os.MkdirAll(s.opts.StoreDir, 0o755); err != nil {
			return fmt.Errorf("natsembed: recreate store dir: %w", err)
		}
	}
	// The old listener's port can linger briefly in the kernel after
	// shutdown; retry rather than fail a crash test on a transient bind error.
	var err error
	for attempt := 0; attempt < 5; attempt++ {
		if err = s.start(); err == nil {
			return nil
		}
		time.Sleep(time.Duration(attempt+1) * 50 * time.Millisecond)
	}
	return fmt.Errorf("natsembed: restart: %w", err)
}

// waitReady polls in short slices so a fatal start-up error (such as a busy
// port) fails fast instead of after the full readiness timeout.
func waitReady(ns *server.Server, capture *fatalCapture) bool {
	deadline := time.Now().Add(readyTimeout)
	for time.Now().Before(deadline) {
		if ns.ReadyForConnections(50 * time.Millisecond) {
			return true
		}
		if capture.fatal() != "" {
			return false
		}
	}
	return false
}

// fatalCapture forwards server logs to slog (when configured) and remembers
// the last fatal message so start-up failures can be reported.
type fatalCapture struct {
	logger *slog.Logger
	mu     sync.Mutex
	last   string
}

func (f *fatalCapture) fatal() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.last
}

func (f *fatalCapture) emit(level slog.Level, format string, v []any) {
	if f.logger == nil {
		return
	}
	// The server's callbacks carry no context of their own.
	f.logger.Log(context.Background(), level, fmt.Sprintf(format, v...), "component", "nats-server")
}

func (f *fatalCapture) Noticef(format string, v ...any) { f.emit(slog.LevelInfo, format, v) }
func (f *fatalCapture) Warnf(format string, v ...any)   { f.emit(slog.LevelWarn, format, v) }
func (f *fatalCapture) Errorf(format string, v ...any)  { f.emit(slog.LevelError, format, v) }
func (f *fatalCapture) Debugf(format string, v ...any)  { f.emit(slog.LevelDebug, format, v) }
func (f *fatalCapture) Tracef(format string, v ...any)  { f.emit(slog.LevelDebug-4, format, v) }

// Fatalf must not exit: the default NATS logger would kill the whole test
// binary over, say, a port already in use.
func (f *fatalCapture) Fatalf(format string, v ...any) {
	f.mu.Lock()
	f.last = fmt.Sprintf(format, v...)
	f.mu.Unlock()
	f.emit(slog.LevelError, format, v)
}

// JetStreamPeers reports, for a clustered server, whether it is the JetStream meta
// leader, how many JetStream peers are online (known on the leader only; 0 elsewhere), and
// whether it is current with the leader (so a stream can be placed). An unclustered or
// stopped server reports 0, false, false.
func (s *Server) JetStreamPeers() (peers int, leader, current bool) {
	s.mu.Lock()
	ns := s.ns
	s.mu.Unlock()
	if ns == nil || !ns.JetStreamIsClustered() {
		return 0, false, false
	}
	return len(ns.JetStreamClusterPeers()), ns.JetStreamIsLeader(), ns.JetStreamIsCurrent()
}

// Routes is how many route connections to other servers of its cluster the server has.
func (s *Server) Routes() int {
	s.mu.Lock()
	ns := s.ns
	s.mu.Unlock()
	if ns == nil {
		return 0
	}
	return ns.NumRoutes()
}

// StopKeepingStore shuts the server down, keeping its store and port for Restart (a node
// of a cluster going away while the others go on).
func (s *Server) StopKeepingStore() { s.stop() }
