package redisproc

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/trawl/trawl/shared/testwait"
)

func client(t *testing.T, s *Server) *redis.Client {
	t.Helper()
	opt, err := redis.ParseURL(s.URL())
	if err != nil {
		t.Fatalf("ParseURL(%q): %v", s.URL(), err)
	}
	c := redis.NewClient(opt)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func TestSetGet(t *testing.T) {
	s := StartT(t, Options{})
	ctx := testwait.Context(t)
	if !strings.HasPrefix(s.Addr(), "127.0.0.1:") {
		t.Fatalf("Addr() = %q", s.Addr())
	}
	if want := "redis://" + s.Addr() + "/0"; s.URL() != want {
		t.Fatalf("URL() = %q, want %q", s.URL(), want)
	}
	c := client(t, s)
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("SET: %v", err)
	}
	got, err := c.Get(ctx, "k").Result()
	if err != nil || got != "v" {
		t.Fatalf("GET = %q, %v; want v", got, err)
	}
}

// TestPersistenceAcrossRestart pins down which configurations keep data
// through which kind of shutdown, since crash tests depend on exactly this.
func TestPersistenceAcrossRestart(t *testing.T) {
	tests := []struct {
		name        string
		opts        Options
		crash       bool // Kill instead of Stop
		wantSurvive bool
	}{
		{name: "aof fsync always survives kill", opts: Options{AppendOnly: true, FsyncAlways: true}, crash: true, wantSurvive: true},
		{name: "aof everysec survives graceful stop", opts: Options{AppendOnly: true}, crash: false, wantSurvive: true},
		{name: "default (aof everysec) survives kill", opts: Options{}, crash: true, wantSurvive: true},
		{name: "default (aof everysec) survives graceful stop", opts: Options{}, crash: false, wantSurvive: true},
		{name: "ephemeral loses data on kill", opts: Options{Ephemeral: true}, crash: true, wantSurvive: false},
		{name: "ephemeral loses data on stop", opts: Options{Ephemeral: true}, crash: false, wantSurvive: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := StartT(t, tt.opts)
			ctx := testwait.Context(t)
			addr := s.Addr()
			c := client(t, s)
			if err := c.Set(ctx, "frontier:1", "http://127.0.1.1/", 0).Err(); err != nil {
				t.Fatalf("SET: %v", err)
			}
			if tt.crash {
				if err := s.Kill(); err != nil {
					t.Fatalf("Kill: %v", err)
				}
			} else if err := s.Stop(); err != nil {
				t.Fatalf("Stop: %v", err)
			}
			if conn, err := net.Dial("tcp", addr); err == nil {
				conn.Close()
				t.Fatal("redis port still accepting connections after shutdown")
			}
			if err := s.Restart(ctx); err != nil {
				t.Fatalf("Restart: %v", err)
			}
			if s.Addr() != addr {
				t.Fatalf("Addr changed across restart: %s -> %s", addr, s.Addr())
			}
			got, err := c.Get(ctx, "frontier:1").Result()
			switch {
			case tt.wantSurvive && err != nil:
				t.Fatalf("GET after restart: %v; want the key to survive", err)
			case tt.wantSurvive && got != "http://127.0.1.1/":
				t.Fatalf("GET after restart = %q", got)
			case !tt.wantSurvive && !errors.Is(err, redis.Nil):
				t.Fatalf("GET after restart = %q, %v; want redis.Nil (no persistence)", got, err)
			}
		})
	}
}

func TestRestartWhileRunningFails(t *testing.T) {
	s := StartT(t, Options{})
	if err := s.Restart(testwait.Context(t)); err == nil {
		t.Fatal("Restart of a running server succeeded")
	}
}

func TestStopIsIdempotentAndRemovesOwnedDir(t *testing.T) {
	s, err := Start(testwait.Context(t), Options{})
	if err != nil {
		t.Fatalf("Start: %v (install redis-server with `apt-get install -y redis-server`)", err)
	}
	dir := s.Dir()
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("data dir missing while running: %v", err)
	}
	if err := s.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if err := s.Stop(); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
	if err := s.Kill(); err != nil {
		t.Fatalf("Kill after Stop: %v", err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("owned data dir %s not removed (stat err=%v)", dir, err)
	}
}

func TestCallerDirKept(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	s, err := Start(testwait.Context(t), Options{Dir: dir, AppendOnly: true})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	if err := s.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatalf("caller's dir gone after Stop: %v", err)
	}
	if len(entries) == 0 {
		t.Fatal("AOF enabled but the data dir is empty")
	}
}

func TestExplicitPort(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	s := StartT(t, Options{Port: port})
	if want := "127.0.0.1:" + strconv.Itoa(port); s.Addr() != want {
		t.Fatalf("Addr() = %q, want %q", s.Addr(), want)
	}
}

func TestStartFailures(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	busyPort := busy.Addr().(*net.TCPAddr).Port
	// Another redis-server on the port answers PING as ours would.
	other := StartT(t, Options{})
	_, otherPort, err := net.SplitHostPort(other.Addr())
	if err != nil {
		t.Fatal(err)
	}
	otherRedisPort, err := strconv.Atoi(otherPort)
	if err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name     string
		opts     Options
		wantErr  string
		wantIs   error
		deadline time.Duration
	}{
		{name: "missing binary", opts: Options{Binary: "/nonexistent/redis-server"}, wantIs: ErrNotInstalled, wantErr: "apt-get install -y redis-server"},
		// The error must carry redis's own explanation from its output.
		{name: "busy port", opts: Options{Port: busyPort}, wantErr: "Address already in use"},
		{name: "port of another redis-server", opts: Options{Port: otherRedisPort}, wantErr: "Address already in use"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.opts.Dir = t.TempDir()
			s, err := Start(testwait.Context(t), tt.opts)
			if err == nil {
				_ = s.Stop()
				t.Fatal("Start succeeded, want error")
			}
			if tt.wantIs != nil && !errors.Is(err, tt.wantIs) {
				t.Errorf("error %v is not %v", err, tt.wantIs)
			}
			if !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("error %q does not contain %q", err, tt.wantErr)
			}
		})
	}
}

func TestStartHonoursContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	s, err := Start(ctx, Options{Dir: t.TempDir()})
	if err == nil {
		_ = s.Stop()
		t.Fatal("Start with a cancelled context succeeded")
	}
}

func TestEnsureInstalled(t *testing.T) {
	t.Run("found", func(t *testing.T) {
		path, err := EnsureInstalled(testwait.Context(t), nil)
		if err != nil {
			t.Fatalf("EnsureInstalled: %v", err)
		}
		if filepath.Base(path) != "redis-server" {
			t.Fatalf("path = %q", path)
		}
	})
	t.Run("missing and no apt-get", func(t *testing.T) {
		// An empty PATH hides both redis-server and apt-get, so nothing is
		// installed and the error must say what to install.
		t.Setenv("PATH", t.TempDir())
		_, err := EnsureInstalled(testwait.Context(t), nil)
		if err == nil {
			t.Fatal("EnsureInstalled succeeded with an empty PATH")
		}
		if !errors.Is(err, ErrNotInstalled) || !strings.Contains(err.Error(), "apt-get install -y redis-server") {
			t.Fatalf("error %q does not name the package to install", err)
		}
	})
}

func TestTailBuffer(t *testing.T) {
	tests := []struct {
		name   string
		max    int
		writes []string
		lines  int
		want   string
	}{
		{name: "last lines", max: 1024, writes: []string{"a\nb\n", "c\nd\n"}, lines: 2, want: "c\nd"},
		{name: "fewer lines than asked", max: 1024, writes: []string{"only\n"}, lines: 5, want: "only"},
		{name: "bounded bytes", max: 4, writes: []string{"abcdef"}, lines: 5, want: "cdef"},
		{name: "empty", max: 4, lines: 3, want: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := &tailBuffer{max: tt.max}
			for _, w := range tt.writes {
				if _, err := b.Write([]byte(w)); err != nil {
					t.Fatal(err)
				}
			}
			if got := b.Tail(tt.lines); got != tt.want {
				t.Fatalf("Tail(%d) = %q, want %q", tt.lines, got, tt.want)
			}
		})
	}
}

// Ports taken for PortArgs are probed again, with the server's own, when one of them was
// taken between its probe and redis's bind: here the first probe of the cluster bus port
// hands out a port another listener holds.
func TestPortArgsProbedAgainWhenTaken(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	taken := busy.Addr().(*net.TCPAddr).Port
	probes := 0
	probePort = func(ctx context.Context) (int, error) {
		probes++
		if probes == 2 { // the first attempt's bus port
			return taken, nil
		}
		return freePort(ctx)
	}
	t.Cleanup(func() { probePort = freePort })
	s := StartT(t, Options{Ephemeral: true, Ports: 1, PortArgs: func(p []int) []string {
		return []string{"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-port", strconv.Itoa(p[0])}
	}})
	if probes != 4 {
		t.Errorf("%d ports probed, want 4: two attempts of two", probes)
	}
	ports := s.Ports()
	if len(ports) != 1 || ports[0] == taken {
		t.Fatalf("Ports() = %v, want one port other than the taken %d", ports, taken)
	}
	conn, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(ports[0]), 5*time.Second)
	if err != nil {
		t.Fatalf("the cluster bus port %d: %v", ports[0], err)
	}
	conn.Close()
}

// A probe that keeps giving one port back ends in an error, not an endless loop.
func TestPortArgsWantDistinctPorts(t *testing.T) {
	probePort = func(context.Context) (int, error) { return 1, nil }
	t.Cleanup(func() { probePort = freePort })
	_, err := Start(testwait.Context(t), Options{Ephemeral: true, Ports: 2, PortArgs: func(p []int) []string { return nil }})
	if err == nil || !strings.Contains(err.Error(), "distinct free ports") {
		t.Fatalf("Start = %v, want the distinct ports error", err)
	}
}
