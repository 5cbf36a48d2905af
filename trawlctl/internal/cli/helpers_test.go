package cli

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/trawl/trawl/devstack/natsembed"
	"github.com/trawl/trawl/devstack/redisproc"
	"github.com/trawl/trawl/shared/natsx"
	"github.com/trawl/trawl/shared/testwait"
	"github.com/trawl/trawl/shared/topology"
)

// result is one trawlctl run.
type result struct {
	code           int
	stdout, stderr string
}

// invocation is a command line with its environment and standard input.
type invocation struct {
	env   map[string]string
	stdin string
}

// start runs trawlctl args in the background; wait returns its result.
func (inv invocation) start(ctx context.Context, args ...string) (wait func() result, stdout, stderr *testwait.Buffer) {
	stdout, stderr = &testwait.Buffer{}, &testwait.Buffer{}
	done := make(chan int, 1)
	lookup := func(k string) (string, bool) { v, ok := inv.env[k]; return v, ok }
	go func() {
		done <- Run(ctx, args, IO{Stdin: strings.NewReader(inv.stdin), Stdout: stdout, Stderr: stderr, Lookup: lookup})
	}()
	return func() result {
		code := <-done
		return result{code, stdout.String(), stderr.String()}
	}, stdout, stderr
}

// run runs trawlctl args to completion (bounded by a minute).
func (inv invocation) run(t testing.TB, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	wait, _, _ := inv.start(ctx, args...)
	return wait()
}

// expectOneLine checks the failure contract: the given exit code and exactly one line on
// stderr that contains want.
func expectOneLine(t testing.TB, r result, code int, want string) {
	t.Helper()
	if r.code != code {
		t.Errorf("exit %d, want %d (stderr %q)", r.code, code, r.stderr)
	}
	if strings.Count(r.stderr, "\n") != 1 || !strings.HasSuffix(r.stderr, "\n") {
		t.Errorf("stderr is not one line: %q", r.stderr)
	}
	if !strings.Contains(r.stderr, want) {
		t.Errorf("stderr %q does not contain %q", r.stderr, want)
	}
}

// stack is a real NATS (with the crawl's streams) and a real redis-server.
type stack struct {
	nats  *natsembed.Server
	redis *redisproc.Server
	rdb   *redis.Client
	nc    *nats.Conn
	js    jetstream.JetStream
	inv   invocation
}

// startStack starts both servers and declares the topology for shards shards, as the
// services do at start-up.
func startStack(t testing.TB, shards int) *stack {
	t.Helper()
	return startStackWith(t, shards, redisproc.Options{})
}

// startStackWith is startStack with redis-server started with ro.
func startStackWith(t testing.TB, shards int, ro redisproc.Options) *stack {
	t.Helper()
	s := &stack{nats: natsembed.StartT(t), redis: redisproc.StartT(t, ro)}
	opt, err := redis.ParseURL(s.redis.URL())
	if err != nil {
		t.Fatal(err)
	}
	s.rdb = redis.NewClient(opt)
	t.Cleanup(func() { s.rdb.Close() })
	ctx := testwait.Context(t)
	s.nc, s.js, err = natsx.Connect(ctx, s.nats.URL(), "test", slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.nc.Close)
	o := topology.DefaultOptions(shards)
	o.Storage = jetstream.MemoryStorage
	tm := topology.StageTimings{AckWait: 30 * time.Second, FetchAckWait: time.Minute, MaxDeliver: 5}
	if err := natsx.Ensure(ctx, s.js, o, tm, slog.New(slog.NewTextHandler(io.Discard, nil))); err != nil {
		t.Fatal(err)
	}
	s.inv = invocation{env: map[string]string{
		"TRAWL_NATS_URL":  s.nats.URL(),
		"TRAWL_REDIS_URL": s.redis.URL(),
		"TRAWL_SHARDS":    fmt.Sprint(shards),
	}}
	return s
}

// lines splits output into its non-empty lines.
func lines(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if l != "" {
			out = append(out, l)
		}
	}
	return out
}
