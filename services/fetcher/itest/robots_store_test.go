package itest

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/trawl/trawl/devstack/redisproc"
	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/robots"
	"github.com/trawl/trawl/shared/robotscache"
	"github.com/trawl/trawl/shared/topology"
)

type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

// TestRobotsStore runs the shared robots.txt cache against a real redis-server.
func TestRobotsStore(t *testing.T) {
	t.Parallel()
	srv := redisproc.StartT(t, redisproc.Options{})
	opt, _ := redis.ParseURL(srv.URL())
	rdb := redis.NewClient(opt)
	t.Cleanup(func() { rdb.Close() })
	ctx := context.Background()
	clk := &clock{t: time.Now()}
	opts := robotscache.StoreOptions{Prefix: "p", Agent: "trawl", TTL: time.Hour, ErrorTTL: 30 * time.Second, LocalTTL: time.Minute, Now: clk.now}
	const origin = "https://example.com"
	body := []byte("user-agent: *\ndisallow: /private\ncrawl-delay: 2\n")

	t.Run("miss, then put and get", func(t *testing.T) {
		s := robotscache.NewStore(rdb, opts)
		if e, err := s.Get(ctx, origin); e != nil || err != nil {
			t.Fatalf("empty cache: %v, %v", e, err)
		}
		if err := s.Put(ctx, origin, robots.NewEntry("trawl", 200, body, robots.DefaultMaxBytes, clk.t)); err != nil {
			t.Fatal(err)
		}
		// A second store (another fetcher) has an empty local cache and reads Redis.
		other := robotscache.NewStore(rdb, opts)
		e, err := other.Get(ctx, origin)
		if err != nil || e == nil {
			t.Fatalf("get from Redis: %v, %v", e, err)
		}
		if e.Allowed("/private") || !e.Allowed("/public") || e.CrawlDelay() != 2*time.Second || e.Status != 200 {
			t.Errorf("entry from Redis: %+v", e)
		}
		if ttl := rdb.TTL(ctx, "p:robots:"+origin).Val(); ttl <= 59*time.Minute || ttl > time.Hour {
			t.Errorf("TTL %v, want 1h", ttl)
		}
	})

	t.Run("unreachable entries expire sooner", func(t *testing.T) {
		s := robotscache.NewStore(rdb, opts)
		if err := s.Put(ctx, "http://down.example", robots.NewEntry("trawl", 503, nil, 0, clk.t)); err != nil {
			t.Fatal(err)
		}
		if ttl := rdb.TTL(ctx, "p:robots:http://down.example").Val(); ttl <= 0 || ttl > 30*time.Second {
			t.Errorf("TTL %v, want the 30s error TTL", ttl)
		}
		if err := s.Put(ctx, "http://gone.example", robots.NewEntry("trawl", 404, nil, 0, clk.t)); err != nil {
			t.Fatal(err)
		}
		if ttl := rdb.TTL(ctx, "p:robots:http://gone.example").Val(); ttl <= 30*time.Second {
			t.Errorf("404 TTL %v, want the full TTL", ttl)
		}
	})

	t.Run("local copy is served briefly, then Redis again", func(t *testing.T) {
		s := robotscache.NewStore(rdb, opts)
		if _, err := s.Get(ctx, origin); err != nil {
			t.Fatal(err)
		}
		// Another fetcher replaces the entry (e.g. after expiry and a refetch).
		robotscache.NewStore(rdb, opts).Put(ctx, origin, robots.NewEntry("trawl", 200, []byte("user-agent: *\ndisallow: /\n"), 0, clk.t))
		e, _ := s.Get(ctx, origin)
		if e == nil || !e.Allowed("/public") {
			t.Fatalf("local copy not used: %+v", e)
		}
		clk.t = clk.t.Add(time.Minute + time.Second)
		e, _ = s.Get(ctx, origin)
		if e == nil || e.Allowed("/public") {
			t.Errorf("stale local copy served after LocalTTL: %+v", e)
		}
	})

	t.Run("other agent or bad encoding is a miss", func(t *testing.T) {
		robotscache.NewStore(rdb, robotscache.StoreOptions{Prefix: "p", Agent: "otherbot"}).Put(ctx, "http://agent.example", robots.NewEntry("otherbot", 200, body, 0, clk.t))
		s := robotscache.NewStore(rdb, opts)
		if e, err := s.Get(ctx, "http://agent.example"); e != nil || err != nil {
			t.Errorf("entry of another agent used: %+v, %v", e, err)
		}
		rdb.Set(ctx, "p:robots:http://garbage.example", "not an entry", time.Minute)
		if e, err := s.Get(ctx, "http://garbage.example"); e != nil || err != nil {
			t.Errorf("garbage entry: %+v, %v", e, err)
		}
	})

	t.Run("Redis down is an error, not a miss", func(t *testing.T) {
		s := robotscache.NewStore(rdb, opts)
		if err := srv.Kill(); err != nil {
			t.Fatal(err)
		}
		defer func() {
			rctx, cancel := context.WithTimeout(ctx, waitFor)
			defer cancel()
			if err := srv.Restart(rctx); err != nil {
				t.Fatal(err)
			}
		}()
		e, err := s.Get(ctx, "http://never-cached.example")
		if err == nil || e != nil {
			t.Fatalf("Get with Redis down = %+v, %v; want an error", e, err)
		}
		if errors.Is(err, redis.Nil) {
			t.Errorf("outage reported as a miss: %v", err)
		}
		if err := s.Put(ctx, origin, robots.NewEntry("trawl", 200, body, 0, clk.t)); err == nil {
			t.Error("Put with Redis down succeeded")
		}
	})
}

// TestRedisOutagePausesConsumption: while Redis is down the fetcher stops pulling tasks
// instead of spending their deliveries on naks, and serves them once Redis is back.
func TestRedisOutagePausesConsumption(t *testing.T) {
	t.Parallel()
	st := newStack(t)
	s := newSite(t, map[string]http.HandlerFunc{"/robots.txt": text(robotsTxt)})
	in := st.start(st.config(nil), "a")

	if err := st.redis.Kill(); err != nil {
		t.Fatal(err)
	}
	// Once paused, the consume loop only pings Redis; it has no pull outstanding.
	in.waitMetric(t, "trawl_fetcher_paused", 1)
	tk := task(s.URL + "/")
	st.publishTask(tk)
	time.Sleep(time.Second) // the outage itself: nothing may be pulled during it
	cons, err := st.js.Consumer(context.Background(), topology.StreamFetch, topology.ConsumerFetcher)
	if err != nil {
		t.Fatal(err)
	}
	info, err := cons.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if info.NumPending != 1 || info.NumAckPending != 0 || info.NumRedelivered != 0 {
		t.Errorf("during the outage: pending %d, unacked %d, redelivered %d; want the task untouched",
			info.NumPending, info.NumAckPending, info.NumRedelivered)
	}
	rctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	if err := st.redis.Restart(rctx); err != nil {
		t.Fatal(err)
	}
	if o := st.outcome(tk.Lease); o.Kind != crawlmsg.OutcomeRobots {
		t.Errorf("outcome after the outage %+v", o)
	}
	if v := in.metric(t, `trawl_fetcher_messages_terminated_total{reason="permanent"}`); v != 0 {
		t.Errorf("%v tasks terminated during the outage", v)
	}
}
