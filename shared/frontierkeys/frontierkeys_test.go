package frontierkeys

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/trawl/trawl/shared/redisx"
)

// The names are what the scheduler's Lua scripts and every earlier release wrote: a change
// here strands a running crawl's state under keys nobody reads. With one shard the tag is
// every release's "{s0}"; with more, the spread tags of this layout.
func TestKeyNames(t *testing.T) {
	s := ForShard("trawl", 0, 1)
	for _, tc := range []struct{ name, got, want string }{
		{"prefix", s.Prefix(), "trawl:{s0}:"},
		{"stats", s.Stats(), "trawl:{s0}:stats"},
		{"heap", s.Heap(), "trawl:{s0}:heap"},
		{"hosts", s.Hosts(), "trawl:{s0}:hosts"},
		{"inflight", s.Inflight(), "trawl:{s0}:inflight"},
		{"lease", s.Lease(), "trawl:{s0}:lease"},
		{"paused", s.Paused(), "trawl:{s0}:paused"},
		{"seq", s.Seq(), "trawl:{s0}:seq"},
		{"backlinks", s.Backlinks(), "trawl:{s0}:backlinks"},
		{"busiest", s.Busiest(), "trawl:{s0}:busiest"},
		{"slowest", s.Slowest(), "trawl:{s0}:slowest"},
		{"errors", s.Errors(), "trawl:{s0}:errors"},
		{"applied", s.Applied(), "trawl:{s0}:applied"},
		{"pagelog", s.PageLog(), "trawl:{s0}:pagelog"},
		{"lasterr", s.LastErr(), "trawl:{s0}:lasterr"},
		{"front queue", s.FrontQueue(7), "trawl:{s0}:fq:7"},
		{"front queue name", FrontQueueName(7), "fq:7"},
		{"back queue", s.BackQueue("a.example"), "trawl:{s0}:bq:a.example"},
		{"back queue name", BackQueueName("a.example"), "bq:a.example"},
		{"host state", s.Host("a.example"), "trawl:{s0}:host:a.example"},
		{"keyspace", s.Keyspace().Key("x"), "trawl:{s0}:x"},
		{"empty prefix", ForShard("", 0, 1).Stats(), "trawl:{s0}:stats"},
		{"other prefix", ForShard("crawl2", 0, 1).Heap(), "crawl2:{s0}:heap"},
		{"shard of twelve", ForShard("crawl2", 5, 12).Heap(), "crawl2:{s:5:43}:heap"},
		{"shard of two", ForShard("trawl", 1, 2).Prefix(), "trawl:{s:1:3}:"},
		{"dispatch", Dispatch("crawl2"), "crawl2:dispatch"},
		{"dispatch default", Dispatch(""), "trawl:dispatch"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.got != tc.want {
				t.Fatalf("got %q, want %q", tc.got, tc.want)
			}
		})
	}
}

func TestEntry(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   string
		want Entry
		bad  bool
	}{
		{name: "seed", in: "0 0 0 http://a.example/", want: Entry{URL: "http://a.example/"}},
		{name: "all fields", in: "12 3 2 https://b.example/x?q=a%20b", want: Entry{Depth: 12, Hops: 3, Attempt: 2, URL: "https://b.example/x?q=a%20b"}},
		// A normalised URL has no space: what follows the first one is the extension.
		{name: "extension", in: "1 0 0 https://b.example/s.css eyJrIjoiZW1iZWQifQ", want: Entry{Depth: 1, URL: "https://b.example/s.css", Ext: "eyJrIjoiZW1iZWQifQ"}},
		{name: "negative", in: "-1 0 0 http://a.example/", want: Entry{Depth: -1, URL: "http://a.example/"}},
		{name: "empty", in: "", bad: true},
		{name: "no url", in: "1 2 3 ", bad: true},
		{name: "three fields", in: "1 2 http://a.example/", bad: true},
		{name: "not a number", in: "x 0 0 http://a.example/", bad: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseEntry(tc.in)
			if tc.bad {
				if !errors.Is(err, ErrBadEntry) {
					t.Fatalf("ParseEntry(%q) = %+v, %v; want ErrBadEntry", tc.in, got, err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("ParseEntry(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
			}
			// Round trip: what the Go side queues is what the scripts and readers parse.
			if s := got.String(); s != tc.in {
				t.Fatalf("String() = %q, want %q", s, tc.in)
			}
			if b := got.Append([]byte("x")); string(b) != "x"+tc.in {
				t.Fatalf("Append = %q", b)
			}
		})
	}
}

func TestParseLease(t *testing.T) {
	for _, tc := range []struct {
		name, in, token string
		entry           Entry
		bad             bool
	}{
		{name: "lease", in: "0-17-99 2 1 0 http://a.example/x", token: "0-17-99", entry: Entry{Depth: 2, Hops: 1, URL: "http://a.example/x"}},
		{name: "token only", in: "0-17-99", token: "0-17-99", bad: true},
		{name: "bad entry", in: "0-17-99 x", token: "0-17-99", bad: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tok, e, err := ParseLease(tc.in)
			if tok != tc.token || (err != nil) != tc.bad || (!tc.bad && e != tc.entry) {
				t.Fatalf("ParseLease(%q) = %q, %+v, %v", tc.in, tok, e, err)
			}
		})
	}
}

func TestParseStats(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   map[string]string
		want Counters
	}{
		{name: "empty", in: nil, want: Counters{}},
		{name: "every field", in: map[string]string{
			"accepted": "20", "queued": "3", "dispatched": "19", "fetched": "10", "failed": "2",
			"disallowed": "1", "out_of_scope": "3", "over_budget": "1", "pages": "12", "expired": "4",
			"retired": "1",
		}, want: Counters{Accepted: 20, Queued: 3, Dispatched: 19, Fetched: 10, Failed: 2, Disallowed: 1,
			OutOfScope: 3, OverBudget: 1, Pages: 12, Expired: 4, Retired: 1}},
		// A newer scheduler may add fields, and a counter read mid-upgrade may be junk:
		// neither stops a reader.
		{name: "unknown and unreadable", in: map[string]string{"fetched": "x", "future": "9", "queued": "-2"},
			want: Counters{Queued: -2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := ParseStats(tc.in)
			if got != tc.want {
				t.Fatalf("ParseStats = %+v, want %+v", got, tc.want)
			}
		})
	}
	if c := (Counters{Fetched: 1, Failed: 2, Disallowed: 3, OutOfScope: 4, OverBudget: 5, Queued: 6}); c.Terminal() != 15 {
		t.Fatalf("Terminal() = %d, want 15", c.Terminal())
	}
}

// The crawl's counters are its shards' summed, every field of them: a counter added to
// Counters and left out of Add would read 0 in trawlctl's report and the progress line.
func TestSumAddsEveryCounter(t *testing.T) {
	// Each field of a shard holds a different power of two, so a field dropped or added
	// into another shows in the sum.
	shard := func(k int) ShardCounters {
		var s ShardCounters
		v := reflect.ValueOf(&s.Counters).Elem()
		for i := range v.NumField() {
			v.Field(i).SetInt(int64(k) << i)
		}
		s.InFlight, s.Active = int64(k)<<20, int64(k)<<21
		return s
	}
	for _, tc := range []struct {
		name   string
		shards []ShardCounters
		want   ShardCounters
	}{
		{name: "none", shards: nil, want: ShardCounters{}},
		{name: "one", shards: []ShardCounters{shard(1)}, want: shard(1)},
		{name: "three", shards: []ShardCounters{shard(1), shard(2), shard(4)}, want: shard(7)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Sum(tc.shards); got != tc.want {
				t.Fatalf("Sum = %+v, want %+v", got, tc.want)
			}
		})
	}
}

// The dispatch hash is written by the schedulers and read by trawlctl and the status
// page, which may run another release: its field names are spelled out here, not taken
// from the constants, so renaming one fails this test.
func TestParseDispatch(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   map[string]string
		want DispatchFigures
		ok   bool
	}{
		{name: "none published", in: map[string]string{}},
		{name: "every field", in: map[string]string{
			"held": "parser,docs-lag", "holds": "3", "fetch_queued": "5", "fetch_busy": "7", "fetch_limit": "21",
			"parser": "11", "dedup": "13", "frontier": "17", "pages_bytes": "19", "pages_max_bytes": "-1",
			"bodies_bytes": "23", "bodies_max_bytes": "29", "docs_lag": "31", "docs_max_bytes": "37", "indexers": "2",
		}, want: DispatchFigures{Held: "parser,docs-lag", Holds: 3, FetchQueued: 5, FetchBusy: 7, FetchLimit: 21,
			Parser: 11, Dedup: 13, Frontier: 17, PagesBytes: 19, PagesMaxBytes: -1,
			BodiesBytes: 23, BodiesMaxBytes: 29, DocsLag: 31, DocsMaxBytes: 37, Indexers: 2}, ok: true},
		// An older scheduler writes fewer fields, a newer one more: neither stops a reader.
		{name: "missing, unknown and unreadable", in: map[string]string{"held": "", "fetch_busy": "x", "future": "9"},
			ok: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := ParseDispatch(tc.in)
			if ok != tc.ok || got != tc.want {
				t.Fatalf("ParseDispatch = %+v, %v; want %+v, %v", got, ok, tc.want, tc.ok)
			}
		})
	}
}

func TestParseErrorRecord(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     ErrorRecord
		ok       bool
	}{
		{name: "retry", in: "1700000000000\tretry\terror\t503\ta.example\thttp://a.example/\tconnection reset", ok: true,
			want: ErrorRecord{At: time.UnixMilli(1700000000000), Result: "retry", Kind: "error", Status: 503,
				Host: "a.example", URL: "http://a.example/", Error: "connection reset"}},
		{name: "tab in error", in: "1\tfailed\terror\t0\th\tu\ta\tb", ok: true,
			want: ErrorRecord{At: time.UnixMilli(1), Result: "failed", Kind: "error", Host: "h", URL: "u", Error: "a\tb"}},
		{name: "short", in: "1\tretry\terror", ok: false},
		{name: "bad time", in: "x\tretry\terror\t0\th\tu\te", ok: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := ParseErrorRecord(tc.in)
			if ok != tc.ok || (ok && got != tc.want) {
				t.Fatalf("ParseErrorRecord(%q) = %+v, %v", tc.in, got, ok)
			}
		})
	}
}

// The progress line names what holds the slowest host back, so a slow host's long
// politeness delay (k × its response time) reads as such.
func TestWaitsSlowestSaysWhy(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, tc := range []struct {
		name string
		host HostWait
		want string
	}{
		{"slow host", HostWait{Reason: WaitDelay, ResponseTime: 1500 * time.Millisecond, Next: now.Add(7500 * time.Millisecond)},
			"(in 7.5s: politeness delay after a 1.5s response)"},
		{"no response yet", HostWait{Reason: WaitDelay, Next: now.Add(time.Second)}, "(in 1s: politeness delay)"},
		{"Crawl-delay", HostWait{Reason: WaitCrawlDelay, CrawlDelay: 10 * time.Second, Next: now.Add(10 * time.Second)},
			"(in 10s: Crawl-delay 10s)"},
		{"backoff", HostWait{Reason: WaitBackoff, Streak: 3, Next: now.Add(2 * time.Minute)},
			"(in 2m0s: error backoff, streak 3)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.host.Host = "h.example"
			w := Waits{Now: now, Waiting: 1, Sampled: 1, Hosts: []HostWait{tc.host}}
			if got := w.String(); !strings.Contains(got, "slowest h.example next at "+tc.host.Next.Format("15:04:05")+" "+tc.want) {
				t.Errorf("String() = %q, want it to end with %q", got, tc.want)
			}
		})
	}
}

// clusterSplit is the slot range each of n masters owns in a cluster made by `redis-cli
// --cluster create` (its clusterManagerCommandCreate): equal shares rounded to whole
// slots, 0-5460, 5461-10922, 10923-16383 for three.
func clusterSplit(n int) [][2]int {
	per := float32(redisx.Slots) / float32(n)
	var out [][2]int
	first, cursor := 0, float32(0)
	for i := range n {
		last := int(math.Round(float64(cursor + per - 1)))
		if last > redisx.Slots || i == n-1 {
			last = redisx.Slots - 1
		}
		out = append(out, [2]int{first, last})
		first, cursor = last+1, cursor+per
	}
	return out
}

// Shards tagged by ShardTag fall evenly on a cluster's masters, its keys and load with them:
// with shards a multiple of the masters, every master holds the same number of shards.
func TestShardTagsSpreadEvenlyOverMasters(t *testing.T) {
	t.Parallel()
	for _, masters := range []int{2, 3, 4, 5, 6, 8} {
		split := clusterSplit(masters)
		if got := split[len(split)-1][1]; got != redisx.Slots-1 {
			t.Fatalf("split %v does not end at the last slot", split)
		}
		for _, shards := range []int{masters, 2 * masters, 4 * masters, 12 * masters, 64 * masters} {
			t.Run(fmt.Sprintf("%d shards on %d masters", shards, masters), func(t *testing.T) {
				t.Parallel()
				per := make([]int, masters)
				for i := range shards {
					slot := redisx.Slot(ForShard("trawl", i, shards).Heap())
					for m, r := range split {
						if slot >= r[0] && slot <= r[1] {
							per[m]++
						}
					}
				}
				for m, n := range per {
					if n != shards/masters {
						t.Fatalf("shards per master %v (slot ranges %v): master %d holds %d, want %d each", per, split, m, n, shards/masters)
					}
				}
			})
		}
	}
	if got := clusterSplit(3); !slices.Equal(got, [][2]int{{0, 5460}, {5461, 10922}, {10923, 16383}}) {
		t.Fatalf("three masters' split %v, want redis-cli's", got)
	}
}
