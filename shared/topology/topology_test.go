package topology

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// The host → shard map must never change: a change moves hosts between shards mid-crawl.
func TestShardOfStable(t *testing.T) {
	tests := []struct {
		host string
		n    int
		want int
	}{
		{"example.com", 1, 0},
		{"example.com", 2, 0},
		{"example.org", 2, 1},
		{"127.0.1.1", 4, 1},
		{"127.0.1.2", 4, 0},
	}
	for _, tc := range tests {
		t.Run(tc.host, func(t *testing.T) {
			if got := ShardOf(tc.host, tc.n); got != tc.want {
				t.Fatalf("ShardOf(%q, %d) = %d, want %d", tc.host, tc.n, got, tc.want)
			}
		})
	}
}

func TestShardOfSpreads(t *testing.T) {
	counts := make([]int, 4)
	for i := range 4000 {
		counts[ShardOf("host"+string(rune('a'+i%26))+time.Duration(i).String(), 4)]++
	}
	for s, c := range counts {
		if c < 800 || c > 1200 {
			t.Fatalf("shard %d got %d of 4000 hosts: %v", s, c, counts)
		}
	}
}

func TestConsumersCoverShards(t *testing.T) {
	o := DefaultOptions(3)
	specs := Consumers(o, StageTimings{AckWait: time.Second, FetchAckWait: time.Minute, MaxDeliver: 5})
	seen := map[string]bool{}
	for _, s := range specs {
		if seen[s.Config.Durable] {
			t.Fatalf("duplicate consumer %s", s.Config.Durable)
		}
		seen[s.Config.Durable] = true
	}
	for s := range 3 {
		if !seen[SchedulerFrontierConsumer(s)] || !seen[SchedulerFetchedConsumer(s)] {
			t.Fatalf("shard %d consumers missing: %v", s, seen)
		}
	}
	for _, c := range specs {
		if c.Config.Durable == ConsumerFetcher && c.Config.AckWait != time.Minute {
			t.Fatalf("fetcher AckWait = %s, want the lease-derived %s", c.Config.AckWait, time.Minute)
		}
	}
}

// Each consumer names its owner and the variable its ack wait comes from; the fetch
// consumer records the lease TTL, which LeaseTTL reads back.
func TestConsumersOwnersAndLease(t *testing.T) {
	tm := StageTimings{AckWait: 10 * time.Second, FetchAckWait: 150 * time.Second, LeaseTTL: 2 * time.Minute, As: "fetcher"}
	for _, c := range Consumers(DefaultOptions(2), tm) {
		want := ServiceScheduler
		switch c.Config.Durable {
		case ConsumerDedup:
			want = ServiceDedup
		case ConsumerParser:
			want = ServiceParser
		case ConsumerRenderer:
			want = ServiceRenderer
		}
		if c.Owner != want {
			t.Errorf("%s: owner %q, want %q", c.Config.Durable, c.Owner, want)
		}
		if c.Config.Metadata[MetaSetBy] != "fetcher" || c.Config.Metadata[MetaSetting] != c.Setting {
			t.Errorf("%s: metadata %v", c.Config.Durable, c.Config.Metadata)
		}
		if c.Config.Durable == ConsumerFetcher {
			if c.Setting != "TRAWL_LEASE_TTL" || LeaseTTL(c.Config) != 2*time.Minute {
				t.Errorf("fetch consumer: setting %s, lease %s, want TRAWL_LEASE_TTL 2m", c.Setting, LeaseTTL(c.Config))
			}
		}
	}
	// A consumer made before the metadata: its ack wait, which exceeds the lease.
	if got := LeaseTTL(jetstream.ConsumerConfig{AckWait: 150 * time.Second}); got != 150*time.Second {
		t.Errorf("LeaseTTL without metadata = %s, want the ack wait", got)
	}
}
