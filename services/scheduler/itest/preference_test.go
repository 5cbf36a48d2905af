package itest

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/trawl/trawl/services/scheduler/internal/frontier"
	"github.com/trawl/trawl/services/scheduler/internal/prioritize"
	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/testwait"
	"github.com/trawl/trawl/shared/urlnorm"
)

// poorURL scores IL = 0: deep, many parameters, a session id, a non-page extension and
// longer than 128 characters.
func poorURL(host string) string {
	return "http://" + host + "/a/b/c/d/e/f/archive.zip?sid=0123456789abcdef0123456789abcdef&x=1&y=2&z=3&w=" +
		"padding-padding-padding-padding-padding-padding"
}

// With hosts plentiful (B far below the number of hosts) the router decides which host
// comes next, so the dispatch order shows the priorities: URLs of high preference come
// first, and the weighted choice still takes some of the lowest queue early on.
func TestPreferenceDispatchOrder(t *testing.T) {
	t.Parallel()
	if got := prioritize.LinkFeatures(poorURL("h.example")); got != 0 {
		t.Fatalf("fixture: poor URL scores IL %g, want 0", got)
	}
	for _, tc := range []struct {
		name string
		// prepare returns the hosts whose URLs must come first and the others.
		prepare func(f *tf) (high, low []crawlmsg.Discovered)
	}{
		{
			name: "link score",
			prepare: func(f *tf) (high, low []crawlmsg.Discovered) {
				for i := range 100 {
					// Breadth-first would favour the poor URLs: they are seeds, the good ones deep.
					low = append(low, crawlmsg.Discovered{URL: poorURL(fmt.Sprintf("poor%d.example", i)), Depth: 0})
					high = append(high, crawlmsg.Discovered{URL: fmt.Sprintf("http://good%d.example/", i), Depth: 5})
				}
				return high, low
			},
		},
		{
			name: "backlinks",
			prepare: func(f *tf) (high, low []crawlmsg.Discovered) {
				// Seven pages on other hosts link to each popular host: IB = log2(8) = 3.
				for k := range 7 {
					var us []crawlmsg.Discovered
					for i := range 100 {
						us = append(us, crawlmsg.Discovered{URL: fmt.Sprintf("http://pop%d.example/w%d", i, k), Depth: 1})
					}
					f.addBatch(frontier.Batch{ID: fmt.Sprintf("src:%d", k), Source: fmt.Sprintf("http://src%d.example/page", k), URLs: us})
				}
				f.drain(t0, 50)
				for i := range 100 {
					low = append(low, crawlmsg.Discovered{URL: poorURL(fmt.Sprintf("dull%d.example", i))})
					high = append(high, crawlmsg.Discovered{URL: poorURL(fmt.Sprintf("pop%d.example", i))})
				}
				return high, low
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rdb := startRedis(t)
			o := testOptions(0)
			o.FrontQueues = 4
			o.BackQueues = 4
			f := newTFWith(t, rdb, o, prioritize.Preference{X: 1, Y: 1})
			high, low := tc.prepare(f)
			isHigh := map[string]bool{}
			for _, u := range high {
				isHigh[u.URL] = true
			}
			// The low ones arrive first: arrival order must not beat priority.
			f.add("probe", append(append([]crawlmsg.Discovered(nil), low...), high...)...)
			if s := f.stats(); s.Front[0] != int64(len(high)) || s.Front[3] != int64(len(low)) {
				t.Fatalf("front queues %v: want the %d high URLs in queue 0 and the %d low in queue 3", s.Front, len(high), len(low))
			}
			order := f.drain(t0.Add(24*time.Hour), 4)
			if len(order) != len(high)+len(low) {
				t.Fatalf("dispatched %d, want %d", len(order), len(high)+len(low))
			}
			first := 0
			for _, tk := range order[:len(high)] {
				if isHigh[tk.URL] {
					first++
				}
			}
			// Queue 0 has weight 1 and queue 3 weight 0.125: ~89% of the first 100 are high.
			if first < 75 {
				t.Fatalf("only %d of the first %d dispatches are high-preference URLs", first, len(high))
			}
			if first == len(high) {
				t.Fatalf("no low-preference URL among the first %d: the lowest queue is starved", len(high))
			}
		})
	}
}

// TestBacklinkCounting checks how the add script keeps inlinks and places URLs: one
// backlink per linking page and host, none from the host itself or from seeds, none
// twice for a redelivered message, and the queue Go's prioritize.QueueFor computes.
func TestBacklinkCounting(t *testing.T) {
	t.Parallel()
	rdb := startRedis(t)
	o := testOptions(0)
	pref := prioritize.Preference{X: 1.5, Y: 1}
	f := newTFWith(t, rdb, o, pref)
	inlinks := func(host string) int64 {
		t.Helper()
		v, err := rdb.ZScore(testwait.Context(t), f.Keyspace().Key("backlinks"), host).Result()
		if err != nil {
			return 0
		}
		return int64(v)
	}
	batch := func(id, source string, us ...string) frontier.Batch {
		return frontier.Batch{ID: id, Source: source, URLs: urls(1, us...)}
	}
	f.addBatch(batch("1", "http://hub.example/", "http://a.example/1", "http://a.example/2", "http://b.example/1", "http://hub.example/x"))
	f.addBatch(batch("2", "http://other.example/p", "http://a.example/3"))
	f.addBatch(batch("2", "http://other.example/p", "http://a.example/3")) // redelivered
	f.addBatch(batch("3", "", "http://a.example/4", "http://c.example/1")) // seeds
	f.addBatch(batch("4", "http://a.example/5", "http://a.example/6"))     // internal link
	f.addBatch(batch("5", "not a url", "http://c.example/2"))              // unreadable source
	for host, want := range map[string]int64{"a.example": 2, "b.example": 1, "hub.example": 0, "c.example": 0, "other.example": 0} {
		if got := inlinks(host); got != want {
			t.Errorf("inlinks[%s] = %d, want %d", host, got, want)
		}
	}

	// Placement: the script's queue equals QueueFor(X·IB + Y·IL) for every URL.
	probe := []string{"http://a.example/", "http://a.example/q/r/s/t?k=1", "http://b.example/", poorURL("b.example"),
		"http://c.example/", "http://zzz.example/x"}
	before := f.frontQueues()
	f.addBatch(batch("probe", "", probe...))
	after := f.frontQueues()
	for _, u := range probe {
		host, err := urlnorm.Host(u)
		if err != nil {
			t.Fatal(err)
		}
		score := pref.X*prioritize.IB(inlinks(host)) + pref.LinkScore(crawlmsg.Discovered{URL: u})
		want := prioritize.QueueFor(score, o.FrontQueues)
		entry := "1 0 0 " + u
		if after[want][entry]-before[want][entry] != 1 {
			t.Errorf("%s (score %.3f) not added to front queue %d", u, score, want)
		}
	}
	// Worked example: a.example has 2 backlinks, so its root (IL 4) scores
	// 1.5·log2(3) + 4 = 6.38 and goes to queue 8-1-6 = 1.
	if after[1]["1 0 0 http://a.example/"]-before[1]["1 0 0 http://a.example/"] != 1 {
		t.Fatalf("a.example root not in queue 1: %v", after)
	}
}

// frontQueues counts the entries of every front queue.
func (f *tf) frontQueues() []map[string]int {
	f.t.Helper()
	out := make([]map[string]int, f.Options().FrontQueues)
	for q := range out {
		out[q] = map[string]int{}
		for _, e := range f.rdb.LRange(testwait.Context(f.t), f.Keyspace().Key("fq", strconv.Itoa(q)), 0, -1).Val() {
			out[q][e]++
		}
	}
	return out
}

// The breadth-first prioritiser keeps no backlink counts: the default crawl pays nothing.
func TestBreadthFirstKeepsNoInlinks(t *testing.T) {
	t.Parallel()
	rdb := startRedis(t)
	f := newTF(t, rdb, testOptions(0))
	f.addBatch(frontier.Batch{ID: "1", Source: "http://hub.example/", URLs: urls(1, "http://a.example/")})
	if n := rdb.Exists(testwait.Context(t), f.Keyspace().Key("backlinks")).Val(); n != 0 {
		t.Fatal("inlinks written by the breadth-first prioritiser")
	}
	if s := f.stats(); s.Front[1] != 1 {
		t.Fatalf("depth-1 URL not in queue 1: %v", s.Front)
	}
}
