package itest

import (
	"fmt"
	"testing"
	"time"

	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/policy"
)

// A host allowed N connections gets N times the rate one connection gives it, and never
// more than N requests in flight: against a server answering every request in 300 ms, a
// crawl of one host under `connections: N, min_delay: 250ms` (the README's example) starts
// N times as many requests in the same time as under `connections: 1`: under the default
// delay factor (5 × 300 ms > 250 ms) one connection's cycle is 1.8 s, with none 550 ms,
// and N starts share it. The crawl is simulated on the frontier's clock: each task ends 300 ms
// after its dispatch, and the next step is whichever comes first, the host due or a
// request's end.
func TestPolicyConnectionsMultiplyTheRate(t *testing.T) {
	t.Parallel()
	const took = 300 * time.Millisecond
	const window = 36 * time.Second
	run := func(t *testing.T, kf float64, conns int) (starts, most int) {
		rdb := startRedis(t)
		o := testOptions(0)
		o.DelayFactor = kf
		f := newTF(t, rdb, o)
		f.syncPolicy(rules(t, 1, hostRule("slow.example", policy.Rule{Connections: pint(conns), MinDelay: pdur(250 * time.Millisecond)})))
		var us []crawlmsg.Discovered
		for i := range 400 {
			us = append(us, urls(0, fmt.Sprintf("http://slow.example/%d", i))...)
		}
		f.add("m1", us...)
		type req struct {
			task crawlmsg.FetchTask
			end  time.Time
		}
		var out []req // in flight, by end
		now := at(0)
		for now.Before(at(window)) {
			next, due := f.heapScore("slow.example")
			if !due && len(out) == 0 {
				// Not admitted yet: the dispatch routes it.
				next, due = now, true
			}
			if len(out) > 0 && (!due || !out[0].end.After(next)) {
				now = out[0].end
				o := ok200(out[0].task)
				o.DurationMs = took.Milliseconds()
				f.complete(now, o)
				out = out[1:]
				continue
			}
			now = next
			tasks := f.dispatch(now, 10)
			if len(tasks) == 0 && len(out) == 0 {
				t.Fatalf("at %s: nothing dispatched and nothing in flight", now.Sub(t0))
			}
			for _, tk := range tasks {
				out = append(out, req{tk, now.Add(took)})
				starts++
			}
			most = max(most, len(out))
		}
		return starts, most
	}
	for _, tc := range []struct {
		name string
		kf   float64
	}{
		{"default delay factor", 5},
		{"no delay factor", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			one, most1 := run(t, tc.kf, 1)
			four, most4 := run(t, tc.kf, 4)
			t.Logf("in %s: %d requests with one connection (at most %d in flight), %d with four (at most %d)", window, one, most1, four, most4)
			if most1 != 1 || most4 < 2 || most4 > 4 {
				t.Errorf("at most %d and %d in flight, want 1 and up to 4", most1, most4)
			}
			if r := float64(four) / float64(one); r < 3.6 || r > 4.4 {
				t.Errorf("four connections made %.2f times the requests of one, want 4", r)
			}
		})
	}
}
