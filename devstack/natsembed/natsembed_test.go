package natsembed

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/trawl/trawl/shared/durability"
	"github.com/trawl/trawl/shared/testwait"
)

func connectJS(t *testing.T, url string) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatalf("connect %s: %v", url, err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		t.Fatalf("jetstream: %v", err)
	}
	return nc, js
}

func TestFileStreamSurvivesRestart(t *testing.T) {
	s := StartT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	url := s.URL()
	if !strings.HasPrefix(url, "nats://127.0.0.1:") {
		t.Fatalf("URL() = %q, want nats://127.0.0.1:<port>", url)
	}

	nc, js := connectJS(t, url)
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name:     "PAGES",
		Subjects: []string{"pages.>"},
		Storage:  jetstream.FileStorage,
	}); err != nil {
		t.Fatalf("create stream: %v", err)
	}
	// A payload above the NATS default of 1 MiB proves MaxPayload was raised.
	big := bytes.Repeat([]byte("x"), 3<<20)
	if _, err := js.Publish(ctx, "pages.fetched", big); err != nil {
		t.Fatalf("publish: %v", err)
	}
	nc.Close()

	if err := s.Restart(); err != nil {
		t.Fatalf("Restart: %v", err)
	}
	if got := s.URL(); got != url {
		t.Fatalf("URL changed across Restart: %q -> %q", url, got)
	}

	nc, js = connectJS(t, url)
	defer nc.Close()
	stream, err := js.Stream(ctx, "PAGES")
	if err != nil {
		t.Fatalf("stream after restart: %v", err)
	}
	msg, err := stream.GetMsg(ctx, 1)
	if err != nil {
		t.Fatalf("get message 1 after restart: %v", err)
	}
	if !bytes.Equal(msg.Data, big) {
		t.Fatalf("message after restart: %d bytes, want %d", len(msg.Data), len(big))
	}
}

func TestOwnedStoreDirRemovedOnClose(t *testing.T) {
	s, err := Start(Options{})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	dir := s.StoreDir()
	if dir == "" {
		t.Fatal("StoreDir() is empty")
	}
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("store dir missing while running: %v", err)
	}
	s.Close()
	s.Close() // idempotent
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("store dir %s still present after Close (err=%v)", dir, err)
	}
}

func TestCallerStoreDirKept(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "js")
	s, err := Start(Options{StoreDir: dir})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	s.Close()
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("caller's store dir removed: %v", err)
	}
}

func TestBusyPortReportsCause(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port

	s, err := Start(Options{StoreDir: t.TempDir(), Port: port})
	if err == nil {
		s.Close()
		t.Fatalf("Start on busy port %d succeeded", port)
	}
	if !strings.Contains(err.Error(), "listen") {
		t.Fatalf("error %q does not explain the listen failure", err)
	}
}

func TestExplicitPort(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()

	s, err := Start(Options{StoreDir: t.TempDir(), Port: port})
	if err != nil {
		t.Fatalf("Start on port %d: %v", port, err)
	}
	defer s.Close()
	if want := "nats://127.0.0.1:" + strconv.Itoa(port); s.URL() != want {
		t.Fatalf("URL() = %q, want %q", s.URL(), want)
	}
}

func TestLoggerReceivesServerLog(t *testing.T) {
	var buf testwait.Buffer
	logger := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo}))
	s, err := Start(Options{StoreDir: t.TempDir(), Logger: logger})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	s.Close()
	if out := buf.String(); !strings.Contains(out, "Server is ready") || !strings.Contains(out, "component=nats-server") {
		t.Fatalf("server log not forwarded to slog; got:\n%s", out)
	}
}

// The server's JetStream store syncs as TRAWL_FSYNC's level says, as Redis's AOF does; the
// zero value is the default level, not JetStream's own two minutes.
func TestDurabilityLevel(t *testing.T) {
	defAlways, defInterval := durability.Default.NATSSync()
	for _, tc := range []struct {
		level        durability.Level
		wantAlways   bool
		wantInterval time.Duration
	}{
		{"", defAlways, defInterval},
		{durability.Always, true, 0},
		{durability.EverySecond, false, time.Second},
	} {
		t.Run(string(tc.level), func(t *testing.T) {
			s, err := Start(Options{StoreDir: t.TempDir(), Durability: tc.level})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(s.Close)
			cfg := s.ns.JetStreamConfig()
			if cfg == nil {
				t.Fatal("JetStream is not enabled")
			}
			if cfg.SyncAlways != tc.wantAlways || (!tc.wantAlways && cfg.SyncInterval != tc.wantInterval) {
				t.Errorf("JetStream sync always=%v interval=%s, want always=%v interval=%s", cfg.SyncAlways, cfg.SyncInterval, tc.wantAlways, tc.wantInterval)
			}
		})
	}
	if _, err := Start(Options{StoreDir: t.TempDir(), Durability: "sometimes"}); err == nil || !strings.Contains(err.Error(), durability.Env) {
		t.Errorf("an unknown level started a server (err %v), want an error naming %s", err, durability.Env)
	}
}
