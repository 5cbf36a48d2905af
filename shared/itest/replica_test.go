package itest

import (
	"context"
	"errors"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/trawl/trawl/devstack/redisproc"
	"github.com/trawl/trawl/shared/redisx"
	"github.com/trawl/trawl/shared/testwait"
)

// A replica that is connected but slow (here asleep in DEBUG SLEEP) does not let a write
// through: every wait while it sleeps fails with ErrNotReplicated, the second as the
// first (no master is skipped after a failed wait), and the wait holds again once the
// replica catches up. A master with no replica at all is let through at once.
func TestWaiterHoldsForASlowReplica(t *testing.T) {
	t.Parallel()
	ctx := testwait.Context(t)
	master := redisproc.StartT(t, redisproc.Options{Ephemeral: true})
	replica := redisproc.StartT(t, redisproc.Options{Ephemeral: true, Args: []string{
		"--replicaof", "127.0.0.1", strconv.Itoa(mustPort(t, master.Addr())),
		"--enable-debug-command", "local",
	}})
	rdb := redisClient(t, master)
	const timeout = 300 * time.Millisecond
	w := redisx.NewWaiter(rdb, timeout)
	ks := redisx.NewKeyspace("trawl", "s0")
	testwait.Eventually(t, 20*time.Second, "the replica acknowledges", func() bool {
		ok, err := w.Replicated(ctx, ks.Key("replicated"))
		return ok && err == nil
	})

	// The replica sleeps; a client with a short read timeout tells when it has started.
	sleeper := redis.NewClient(&redis.Options{Addr: replica.Addr(), ReadTimeout: 100 * time.Millisecond, MaxRetries: -1})
	t.Cleanup(func() { _ = sleeper.Close() })
	slept := make(chan error, 1)
	go func() {
		c := redis.NewClient(&redis.Options{Addr: replica.Addr(), ReadTimeout: 10 * time.Second, MaxRetries: -1})
		defer c.Close()
		slept <- c.Do(context.Background(), "DEBUG", "SLEEP", "3").Err()
	}()
	testwait.Eventually(t, 5*time.Second, "the replica is asleep", func() bool {
		return sleeper.Ping(ctx).Err() != nil
	})
	if err := rdb.RPush(ctx, ks.Key("q"), "x").Err(); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		start := time.Now()
		ok, err := w.Replicated(ctx, ks.Key("replicated"))
		if !errors.Is(err, redisx.ErrNotReplicated) {
			t.Fatalf("wait %d while the replica sleeps = %v, %v; want ErrNotReplicated", i+1, ok, err)
		}
		if took := time.Since(start); took < timeout {
			t.Errorf("wait %d failed after %s, before its %s timeout", i+1, took, timeout)
		}
	}
	if err := <-slept; err != nil {
		t.Fatalf("DEBUG SLEEP: %v", err)
	}
	testwait.Eventually(t, 10*time.Second, "the woken replica acknowledges", func() bool {
		ok, err := w.Replicated(ctx, ks.Key("replicated"))
		return ok && err == nil
	})

	// A master with no replica has none to fail over to: not waited on.
	lone := redisx.NewWaiter(redisClient(t, redisproc.StartT(t, redisproc.Options{Ephemeral: true})), 2*time.Second)
	start := time.Now()
	if ok, err := lone.Replicated(ctx, ks.Key("replicated")); ok || err != nil {
		t.Errorf("wait on a master without replicas = %v, %v; want false, nil", ok, err)
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("the wait on a master without replicas took %s; want no wait", took)
	}
}

func mustPort(t *testing.T, addr string) int {
	t.Helper()
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	p, err := strconv.Atoi(port)
	if err != nil {
		t.Fatal(err)
	}
	return p
}
