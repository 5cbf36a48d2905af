package itest

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/trawl/trawl/devstack/natsembed"
	"github.com/trawl/trawl/devstack/redisproc"
	"github.com/trawl/trawl/shared/natsx"
	"github.com/trawl/trawl/shared/redisx"
	"github.com/trawl/trawl/shared/testwait"
	"github.com/trawl/trawl/shared/topology"
)

// A NATS server that wants credentials refuses a service without the right ones, and the
// service says so at once, without the password, instead of waiting for ever; with them
// it connects and declares the topology.
func TestNATSCredentials(t *testing.T) {
	t.Parallel()
	srv, err := natsembed.Start(natsembed.Options{StoreDir: t.TempDir(), Username: "trawl", Password: "s3cret-nats"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	hostport := strings.TrimPrefix(srv.URL(), "nats://")
	for _, tc := range []struct{ name, url string }{
		{"none", srv.URL()},
		{"wrong password", "nats://trawl:wrong-pass@" + hostport},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(testwait.Context(t), 10*time.Second)
			defer cancel()
			start := time.Now()
			_, _, err := natsx.Connect(ctx, tc.url, "itest", slog.New(slog.DiscardHandler))
			if !errors.Is(err, natsx.ErrRefused) {
				t.Fatalf("Connect = %v, want ErrRefused", err)
			}
			if took := time.Since(start); took > 5*time.Second {
				t.Errorf("refused after %s, want at once", took)
			}
			if strings.Contains(err.Error(), "wrong-pass") {
				t.Errorf("the error shows the password: %v", err)
			}
		})
	}
	ctx := testwait.Context(t)
	nc, js, err := natsx.Connect(ctx, "nats://trawl:s3cret-nats@"+hostport, "itest", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("with the credentials: %v", err)
	}
	defer nc.Close()
	if err := natsx.Ensure(ctx, js, topology.DefaultOptions(1), clusterTimings, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
}

// A Redis with a password and an ACL user refuses a service without the right
// credentials, at once and without the password in the error; with them it connects.
func TestRedisCredentials(t *testing.T) {
	t.Parallel()
	rs := redisproc.StartT(t, redisproc.Options{Ephemeral: true})
	addr := rs.Addr()
	admin, err := redisx.Open("redis://"+addr+"/0", redisx.Timeouts{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := testwait.Context(t)
	if err := admin.Do(ctx, "ACL", "SETUSER", "trawl", "on", ">acl-pass", "~*", "&*", "+@all").Err(); err != nil {
		t.Fatal(err)
	}
	// Last: from here on this connection's default user needs the password too.
	if err := admin.ConfigSet(ctx, "requirepass", "s3cret-redis").Err(); err != nil {
		t.Fatal(err)
	}
	admin.Close()
	// redisproc stops the server with SIGTERM, which needs no password.
	for _, tc := range []struct {
		name, url string
		ok        bool
	}{
		{"none", "redis://" + addr + "/0", false},
		{"wrong password", "redis://:wrong-pass@" + addr + "/0", false},
		{"wrong ACL user", "redis://nobody:acl-pass@" + addr + "/0", false},
		{"default user's password", "redis://:s3cret-redis@" + addr + "/0", true},
		{"ACL user", "redis://trawl:acl-pass@" + addr + "/0", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(testwait.Context(t), 10*time.Second)
			defer cancel()
			rdb, err := redisx.Connect(ctx, tc.url, slog.New(slog.DiscardHandler))
			if tc.ok {
				if err != nil {
					t.Fatal(err)
				}
				defer rdb.Close()
				if err := redisx.Ping(ctx, rdb); err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, redisx.ErrRefused) {
				t.Fatalf("Connect = %v, want ErrRefused", err)
			}
			if ctx.Err() != nil {
				t.Error("refused only when the context ended")
			}
			if strings.Contains(err.Error(), "wrong-pass") || strings.Contains(err.Error(), "acl-pass") {
				t.Errorf("the error shows the password: %v", err)
			}
		})
	}
}

// compose.yaml builds the URLs from TRAWL_NATS_USER, TRAWL_NATS_PASSWORD and
// TRAWL_REDIS_PASSWORD, which are empty unless an operator sets them: an empty userinfo
// must connect to a server that asks for no credentials.
func TestEmptyCredentialsInURL(t *testing.T) {
	t.Parallel()
	srv, err := natsembed.Start(natsembed.Options{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	rs := redisproc.StartT(t, redisproc.Options{Ephemeral: true})
	ctx, cancel := context.WithTimeout(testwait.Context(t), 10*time.Second)
	defer cancel()
	nc, _, err := natsx.Connect(ctx, "nats://:@"+strings.TrimPrefix(srv.URL(), "nats://"), "itest", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("NATS with an empty userinfo: %v", err)
	}
	nc.Close()
	rdb, err := redisx.Connect(ctx, "redis://:@"+rs.Addr()+"/0", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("Redis with an empty userinfo: %v", err)
	}
	defer rdb.Close()
	if err := redisx.Ping(ctx, rdb); err != nil {
		t.Fatal(err)
	}
}
