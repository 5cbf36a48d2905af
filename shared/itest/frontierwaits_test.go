package itest

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/trawl/trawl/devstack/redisproc"
	"github.com/trawl/trawl/shared/frontierkeys"
)

// Reader.Waits classifies the waiting hosts of the heap from their host state and the error
// log, as the scheduler's scripts leave them, and stays within its sample.
func TestReaderWaits(t *testing.T) {
	t.Parallel()
	rdb := redisClient(t, redisproc.StartT(t, redisproc.Options{}))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	now, err := rdb.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	ms := func(d time.Duration) float64 { return float64(now.Add(d).UnixMilli()) }
	s0, s1 := frontierkeys.ForShard("trawl", 0, 2), frontierkeys.ForShard("trawl", 1, 2)
	_, err = rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.ZAdd(ctx, s0.Heap(),
			redis.Z{Score: ms(-time.Second), Member: "due.example"},
			redis.Z{Score: ms(40 * time.Second), Member: "down.example"},
			redis.Z{Score: ms(3 * time.Second), Member: "delay.example"})
		p.ZAdd(ctx, s1.Heap(), redis.Z{Score: ms(10 * time.Second), Member: "slow.example"})
		p.ZAdd(ctx, s1.Inflight(), redis.Z{Score: ms(time.Minute), Member: "busy.example"})
		p.HSet(ctx, s0.Host("down.example"), frontierkeys.HostErr, 2, frontierkeys.HostNext, int64(ms(40*time.Second)))
		p.HSet(ctx, s1.Host("slow.example"), frontierkeys.HostCD, 10000)
		p.HSet(ctx, s0.Host("delay.example"), frontierkeys.HostRT, 1500)
		p.HSet(ctx, s0.Stats(), "retired", 1)
		// Newest first: the newer line of down.example is the one reported.
		p.RPush(ctx, s0.Errors(),
			strconv.FormatInt(now.UnixMilli(), 10)+"\tretry\trobots-unavailable\t503\tdown.example\thttp://down.example/\t",
			strconv.FormatInt(now.UnixMilli()-1, 10)+"\tretry\terror\t0\tdown.example\thttp://down.example/\tdial tcp: refused")
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name    string
		sample  int
		hosts   []string // latest due first
		reasons []string
		text    []string
	}{
		{name: "all waiting hosts", sample: 8,
			hosts:   []string{"down.example", "slow.example", "delay.example"},
			reasons: []string{frontierkeys.WaitBackoff, frontierkeys.WaitCrawlDelay, frontierkeys.WaitDelay},
			text: []string{"hosts waiting: 1 backing off until " + now.Add(40*time.Second).Format("15:04:05") +
				" (last error down.example: robots-unavailable 503)", "1 in Crawl-delay", "1 in politeness delay",
				"1 retired", "slowest down.example next at", ": error backoff, streak 2)"}},
		// One per shard: the slowest host of each, and the count says what was left out.
		{name: "sampled", sample: 1,
			hosts:   []string{"down.example", "slow.example"},
			reasons: []string{frontierkeys.WaitBackoff, frontierkeys.WaitCrawlDelay},
			text:    []string{"(2 of 3 waiting hosts sampled)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w, err := frontierkeys.OpenReadOnly(rdb, "trawl", 2).Waits(ctx, tc.sample)
			if err != nil {
				t.Fatal(err)
			}
			if w.Due != 1 || w.Waiting != 3 || w.InFlight != 1 || w.Retired != 1 {
				t.Fatalf("due %d waiting %d in flight %d retired %d", w.Due, w.Waiting, w.InFlight, w.Retired)
			}
			if got := w.Earliest.UnixMilli(); got != int64(ms(3*time.Second)) {
				t.Fatalf("earliest = %v", w.Earliest)
			}
			var hosts, reasons []string
			for _, h := range w.Hosts {
				hosts, reasons = append(hosts, h.Host), append(reasons, h.Reason)
			}
			if strings.Join(hosts, " ") != strings.Join(tc.hosts, " ") || strings.Join(reasons, " ") != strings.Join(tc.reasons, " ") {
				t.Fatalf("hosts %v reasons %v, want %v %v", hosts, reasons, tc.hosts, tc.reasons)
			}
			for _, want := range tc.text {
				if !strings.Contains(w.String(), want) {
					t.Fatalf("String() = %q, lacks %q", w.String(), want)
				}
			}
		})
	}
}
