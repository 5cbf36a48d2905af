package itest

import (
	"testing"
	"time"

	"github.com/trawl/trawl/services/scheduler/internal/frontier"
	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/politeness"
	"github.com/trawl/trawl/shared/testwait"
)

// TestClaimKeepsTheHostsSchedule: a claim on a host (a robots.txt redirect hop made by a
// fetcher outside the host's tasks) and the host's own tasks never overlap, and each
// waits the other's gap. Both run on the Redis clock here, as in a crawl.
func TestClaimKeepsTheHostsSchedule(t *testing.T) {
	rdb := startRedis(t)
	ctx := testwait.Context(t)
	o := testOptions(0)
	o.MinDelay, o.DelayFactor = 300*time.Millisecond, 0
	f := frontier.New(rdb, o, nil)
	c := politeness.NewClaimer(rdb, o.KeyPrefix, 1, o.Rules, nil)
	if _, err := f.AddBatches(ctx, []frontier.Batch{{URLs: urls(0, "http://a.example/1", "http://a.example/2")}}); err != nil {
		t.Fatal(err)
	}
	tasks, err := f.Dispatch(ctx, 10)
	if err != nil || len(tasks) != 1 {
		t.Fatalf("dispatch: %+v, %v", tasks, err)
	}
	// A task of the host is out: no claim.
	if cl, err := c.Claim(ctx, "a.example", 5*time.Second); err != nil || cl.OK || cl.Wait <= 0 {
		t.Fatalf("claim with a task out: %+v, %v; want busy", cl, err)
	}
	if _, err := f.Complete(ctx, []crawlmsg.Outcome{ok200(tasks[0])}); err != nil {
		t.Fatal(err)
	}
	// Inside the gap the task's request left: no claim either, and the wait is the gap.
	cl, err := c.Claim(ctx, "a.example", 5*time.Second)
	if err != nil || cl.OK || cl.Wait <= 0 || cl.Wait > o.MinDelay {
		t.Fatalf("claim inside the gap: %+v, %v; want busy for at most %s", cl, err, o.MinDelay)
	}
	eventuallyClaim := func() politeness.Claim {
		deadline := time.Now().Add(5 * time.Second)
		for time.Now().Before(deadline) {
			cl, err := c.Claim(ctx, "a.example", 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if cl.OK {
				return cl
			}
			time.Sleep(cl.Wait)
		}
		t.Fatal("the host was never free to claim")
		return politeness.Claim{}
	}
	cl = eventuallyClaim()
	// While claimed, the host's next task is not dispatched, however long the claim's
	// request takes within its window.
	time.Sleep(o.MinDelay)
	if got, err := f.Dispatch(ctx, 10); err != nil || len(got) != 0 {
		t.Fatalf("dispatched %+v, %v while the host was claimed", got, err)
	}
	released, err := c.Release(ctx, cl, 50*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	now, _ := rdb.Time(ctx).Result()
	if gap := released.Sub(now); gap < o.MinDelay-50*time.Millisecond || gap > o.MinDelay {
		t.Errorf("released with the next fetch %s away, want the %s gap", gap, o.MinDelay)
	}
	if got, err := f.Dispatch(ctx, 10); err != nil || len(got) != 0 {
		t.Fatalf("dispatched %+v, %v inside the gap after the claim's request", got, err)
	}
	// After the gap the host's own schedule goes on.
	deadline := time.Now().Add(5 * time.Second)
	for {
		got, err := f.Dispatch(ctx, 10)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) == 1 {
			if at, _ := rdb.Time(ctx).Result(); at.Before(released) {
				t.Errorf("dispatched at %s, before the claim's gap ended at %s", at, released)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the host's next task never came after the claim")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestClaimOfAnUnknownHost: a host the frontier has never seen can be claimed; its state
// then records the gap (so a second claim waits) and expires rather than lingering.
func TestClaimOfAnUnknownHost(t *testing.T) {
	rdb := startRedis(t)
	ctx := testwait.Context(t)
	o := testOptions(0)
	o.MinDelay = 2 * time.Second
	c := politeness.NewClaimer(rdb, o.KeyPrefix, 1, o.Rules, nil)
	cl, err := c.Claim(ctx, "new.example", 5*time.Second)
	if err != nil || !cl.OK {
		t.Fatalf("claim: %+v, %v", cl, err)
	}
	if _, err := c.Release(ctx, cl, 0); err != nil {
		t.Fatal(err)
	}
	if again, err := c.Claim(ctx, "new.example", 5*time.Second); err != nil || again.OK || again.Wait <= time.Second {
		t.Fatalf("second claim: %+v, %v; want busy for about the 2s gap", again, err)
	}
	key := frontier.New(rdb, o, nil).Keyspace().Key("host", "new.example")
	if ttl := rdb.PTTL(ctx, key).Val(); ttl <= 0 || ttl > 2*time.Hour {
		t.Errorf("state of a host without a queue has TTL %s, want it to expire", ttl)
	}
}
