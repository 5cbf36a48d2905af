package topology

import (
	"strings"
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

// Messages of one atomic group must land in one stream whatever the options: a batch that
// spans two streams is refused whole. Recrawl schedules stay out (their streams follow
// TRAWL_RECRAWL_STREAMS and take no atomic batches).
func TestAtomicGroup(t *testing.T) {
	o := DefaultOptions(8)
	o.Recrawl, o.RecrawlStreams = true, 3
	for _, tc := range []struct {
		a, b string
		same bool
	}{
		{FrontierSubject(0), FrontierSubject(7), true},
		{FetchSubject(1), FetchSubject(5), true},
		{FetchedSubject(2), FetchedSubject(3), true},
		{SkippedSubject(0), SkippedSubject(4), true},
		{SubjectPages, SubjectPages, true},
		{SubjectPages, SubjectDocs, false},
		{SubjectDiscovered, FrontierSubject(0), false},
		{ScheduleSubject(0, "http://a/"), ScheduleSubject(0, "http://a/"), false},
		{"elsewhere", "elsewhere", false},
	} {
		t.Run(tc.a+"|"+tc.b, func(t *testing.T) {
			ga, gb := AtomicGroup(tc.a), AtomicGroup(tc.b)
			if same := ga != "" && ga == gb; same != tc.same {
				t.Fatalf("AtomicGroup(%q)=%q, AtomicGroup(%q)=%q: one batch %v, want %v", tc.a, ga, tc.b, gb, same, tc.same)
			}
			if !tc.same {
				return
			}
			// Both subjects are in one stream, and that stream takes atomic batches.
			var in []string
			for _, sc := range Streams(o) {
				for _, subj := range sc.Subjects {
					if match(subj, tc.a) && match(subj, tc.b) {
						in = append(in, sc.Name)
						if !sc.AllowAtomicPublish {
							t.Errorf("stream %s takes no atomic batches", sc.Name)
						}
					}
				}
			}
			if len(in) != 1 {
				t.Fatalf("%q and %q are together in streams %v, want one", tc.a, tc.b, in)
			}
		})
	}
}

// match reports whether subject matches filter (tokens, "*" and ">").
func match(filter, subject string) bool {
	f, s := strings.Split(filter, "."), strings.Split(subject, ".")
	for i, tok := range f {
		if tok == ">" {
			return len(s) > i
		}
		if i >= len(s) || (tok != "*" && tok != s[i]) {
			return false
		}
	}
	return len(f) == len(s)
}
