package itest

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/trawl/trawl/devstack/redisproc"
	"github.com/trawl/trawl/shared/crawlid"
	"github.com/trawl/trawl/shared/envconfig"
	"github.com/trawl/trawl/shared/redisx"
	"github.com/trawl/trawl/shared/testwait"
)

func common(shards int) envconfig.Common {
	return envconfig.LoadCommon(envconfig.FromMap(map[string]string{
		"TRAWL_SHARDS":        strconv.Itoa(shards),
		"TRAWL_STREAM_MEMORY": "true",
	}), "127.0.0.1:0")
}

func redisClient(t *testing.T, rs *redisproc.Server) redis.UniversalClient {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rdb, err := redisx.Connect(ctx, rs.URL(), slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

// The identity is created once and agreed on by every later start; a start with another
// shard count, or against a Redis that lost the crawl NATS knows, is refused.
func TestCrawlIdentityAtStart(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		// before changes the stores after the crawl was started with one shard.
		before  func(ctx context.Context, rdb redis.UniversalClient) error
		shards  int
		wantErr error
		wantMsg string
	}{
		{name: "same settings resume the crawl", shards: 1},
		{name: "another shard count is refused", shards: 2, wantErr: crawlid.ErrShards, wantMsg: "TRAWL_SHARDS=2 but crawl"},
		{name: "a flushed redis is refused", shards: 1, wantErr: crawlid.ErrLost, wantMsg: "Redis has no trawl:crawl",
			before: func(ctx context.Context, rdb redis.UniversalClient) error { return rdb.FlushAll(ctx).Err() }},
		{name: "another crawl's redis is refused", shards: 1, wantErr: crawlid.ErrLost, wantMsg: "different crawls",
			before: func(ctx context.Context, rdb redis.UniversalClient) error {
				return rdb.HSet(ctx, crawlid.Key("trawl"), "id", "other").Err()
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			js := connect(t)
			rdb := redisClient(t, redisproc.StartT(t, redisproc.Options{}))
			ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
			defer cancel()
			first, err := crawlid.Open(ctx, js, rdb, common(1), slog.Default())
			if err != nil {
				t.Fatal(err)
			}
			if tt.before != nil {
				if err := tt.before(ctx, rdb); err != nil {
					t.Fatal(err)
				}
			}
			again, err := crawlid.Open(ctx, js, rdb, common(tt.shards), slog.Default())
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) || !strings.Contains(err.Error(), tt.wantMsg) {
					t.Fatalf("Open = %v, want %v saying %q", err, tt.wantErr, tt.wantMsg)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if again.Identity() != first.Identity() {
				t.Errorf("second start got %+v, first %+v", again.Identity(), first.Identity())
			}
			known, err := crawlid.Known(ctx, js, "trawl")
			if err != nil || known == nil || *known != first.Identity() {
				t.Errorf("NATS records %+v (%v), want %+v", known, err, first.Identity())
			}
		})
	}
}

// A crawl begun before identities were recorded in NATS (Redis has one, NATS none) keeps
// its identity and NATS learns it.
func TestCrawlIdentityCopiedToNATS(t *testing.T) {
	t.Parallel()
	rdb := redisClient(t, redisproc.StartT(t, redisproc.Options{}))
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	first, err := crawlid.Open(ctx, connect(t), rdb, common(1), slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	js := connect(t) // a new NATS server: no record
	g, err := crawlid.Open(ctx, js, rdb, common(1), slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	if g.Identity() != first.Identity() {
		t.Errorf("identity %+v, want Redis's %+v", g.Identity(), first.Identity())
	}
	if known, err := crawlid.Known(ctx, js, "trawl"); err != nil || known == nil || known.ID != first.Identity().ID {
		t.Errorf("NATS records %+v (%v)", known, err)
	}
}

// Check, the services' readiness and consume gate, fails while Redis refuses writes
// (answering PING all the while) and while the identity is gone, and passes again once
// either is repaired.
func TestCrawlGuardCheck(t *testing.T) {
	t.Parallel()
	g, rdb, ctx := openGuard(t)
	if err := g.Check(ctx); err != nil {
		t.Fatalf("healthy: %v", err)
	}
	t.Run("redis at maxmemory", func(t *testing.T) {
		if err := rdb.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err(); err != nil {
			t.Fatal(err)
		}
		if err := rdb.ConfigSet(ctx, "maxmemory", "1").Err(); err != nil {
			t.Fatal(err)
		}
		defer rdb.ConfigSet(ctx, "maxmemory", "0")
		if err := rdb.Ping(ctx).Err(); err != nil {
			t.Fatalf("PING at maxmemory: %v", err)
		}
		if err := g.Check(ctx); err == nil || !strings.Contains(err.Error(), "OOM") {
			t.Fatalf("Check at maxmemory = %v, want the OOM of the write probe", err)
		}
		if err := rdb.ConfigSet(ctx, "maxmemory", "0").Err(); err != nil {
			t.Fatal(err)
		}
		if err := g.Check(ctx); err != nil {
			t.Fatalf("after more memory: %v", err)
		}
	})
	t.Run("identity flushed, then restored", func(t *testing.T) {
		if err := rdb.FlushAll(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		if err := g.Check(ctx); !errors.Is(err, crawlid.ErrLost) {
			t.Fatalf("Check after FLUSHALL = %v, want ErrLost", err)
		}
		id := g.Identity()
		if err := rdb.HSet(ctx, crawlid.Key("trawl"), "id", id.ID, "created", id.Created.Format(time.RFC3339), "shards", id.Shards).Err(); err != nil {
			t.Fatal(err)
		}
		if err := g.Check(ctx); err != nil {
			t.Fatalf("after restore: %v", err)
		}
	})
}

// A consume loop asks the gate before every pull: a passed check stands for a moment so
// the pull path carries no Redis round trip, but a failure is never remembered as a pass,
// and a handler's Invalidate makes the next pull check again.
func TestCrawlGuardGate(t *testing.T) {
	t.Parallel()
	g, rdb, ctx := openGuard(t)
	if err := g.Ready(ctx); err != nil {
		t.Fatalf("healthy gate: %v", err)
	}
	before := setCalls(t, rdb)
	for range 50 {
		if err := g.Ready(ctx); err != nil {
			t.Fatalf("gate after a passed check: %v", err)
		}
	}
	if n := setCalls(t, rdb) - before; n > 1 {
		t.Fatalf("50 gate calls right after a passed check sent %d write probes to Redis, want at most 1", n)
	}
	if err := rdb.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	g.Invalidate()
	if err := g.Ready(ctx); !errors.Is(err, crawlid.ErrLost) {
		t.Fatalf("gate after Invalidate = %v, want ErrLost", err)
	}
	if err := g.Ready(ctx); !errors.Is(err, crawlid.ErrLost) {
		t.Fatalf("a failed check was remembered: second gate = %v, want ErrLost", err)
	}
}

// setCalls is how many SET commands Redis has run (the write probe is a SET).
func setCalls(t *testing.T, rdb redis.UniversalClient) int {
	t.Helper()
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		if rest, ok := strings.CutPrefix(line, "cmdstat_set:calls="); ok {
			n, err := strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	return 0
}

// openGuard opens a crawl's guard on a fresh redis-server and NATS.
func openGuard(t *testing.T) (*crawlid.Guard, redis.UniversalClient, context.Context) {
	t.Helper()
	return openGuardOn(t, redisproc.StartT(t, redisproc.Options{}))
}

// openGuardOn is openGuard on rs, which the test may kill and restart.
func openGuardOn(t *testing.T, rs *redisproc.Server) (*crawlid.Guard, redis.UniversalClient, context.Context) {
	t.Helper()
	js := connect(t)
	rdb := redisClient(t, rs)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	g, err := crawlid.Open(ctx, js, rdb, common(1), slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	return g, rdb, ctx
}

// A settling consume loop acks a message only when Redis kept what its handler wrote: a
// check begun once the writes are on disk passed, and none failed since the handler
// began. Redis out of reach in between may be back from an OS crash without the writes,
// so that answer is no, and stays no after Redis is back.
func TestCrawlGuardKept(t *testing.T) {
	t.Parallel()
	rs := redisproc.StartT(t, redisproc.Options{})
	g, rdb, ctx := openGuardOn(t, rs)
	written := time.Now()
	before := setCalls(t, rdb)
	if !g.Kept(ctx, written, time.Now()) {
		t.Fatal("Kept = false with Redis up all along")
	}
	if n := setCalls(t, rdb) - before; n != 1 {
		t.Fatalf("Kept with no check begun since the writes sent %d write probes, want 1 (a check of its own)", n)
	}
	durableBy := time.Now().Add(300 * time.Millisecond)
	if !g.Kept(ctx, written, durableBy) {
		t.Fatal("Kept = false with Redis up all along")
	}
	if since := time.Since(durableBy); since < 0 {
		t.Fatalf("Kept answered %s before the writes were on disk", -since)
	}
	if err := rs.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := g.Check(ctx); err == nil {
		t.Fatal("check passed with Redis killed")
	}
	if err := rs.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, 10*time.Second, "the guard's check passing against the restarted Redis", func() bool { return g.Check(ctx) == nil })
	if g.Kept(ctx, written, time.Now()) {
		t.Fatal("Kept = true for writes made before Redis was out of reach")
	}
	if since := time.Now(); !g.Kept(ctx, since, since) {
		t.Fatal("Kept = false for writes made after Redis came back")
	}

	// Every settling loop of a process asks about its acks: callers at once share a check.
	const callers = 24
	before = setCalls(t, rdb)
	now := time.Now()
	var wg sync.WaitGroup
	var no atomic.Int32
	for range callers {
		wg.Go(func() {
			if !g.Kept(ctx, now, now) {
				no.Add(1)
			}
		})
	}
	wg.Wait()
	if no.Load() > 0 {
		t.Fatalf("%d of %d callers told no with Redis up", no.Load(), callers)
	}
	if n := setCalls(t, rdb) - before; n > 2 {
		t.Fatalf("%d callers at once sent %d write probes, want them to share one (at most 2)", callers, n)
	}
}

// go-redis dials again until its caller's deadline, so a check begun while Redis is down
// passes if Redis is back within it, and an outage may be met only by other callers of
// the client. Any refused connection still counts as a failed check: Redis may be back
// older (a restart from files an OS crash rolled back).
func TestCrawlGuardCountsAnOutageOnlyOthersMet(t *testing.T) {
	t.Parallel()
	rs := redisproc.StartT(t, redisproc.Options{})
	g, rdb, ctx := openGuardOn(t, rs)
	written := time.Now()
	if !g.Kept(ctx, written, time.Now()) {
		t.Fatal("Kept = false with Redis up all along")
	}
	if err := rs.Kill(); err != nil {
		t.Fatal(err)
	}
	pctx, pcancel := context.WithTimeout(ctx, 300*time.Millisecond)
	err := rdb.Ping(pctx).Err()
	pcancel()
	if err == nil {
		t.Fatal("ping passed with Redis killed")
	}
	if err := rs.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if err := g.Check(ctx); err != nil {
		t.Fatalf("check against the restarted Redis: %v", err)
	}
	if g.Kept(ctx, written, time.Now()) {
		t.Fatal("Kept = true for writes made before an outage that only another caller met")
	}
	if f := g.FailedAt(); f.Before(written) {
		t.Fatalf("FailedAt %s, want the outage after %s", f, written)
	}
}
