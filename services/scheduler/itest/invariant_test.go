package itest

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/trawl/trawl/services/scheduler/internal/frontier"
	"github.com/trawl/trawl/services/scheduler/internal/prioritize"
	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/policy"
	"github.com/trawl/trawl/shared/testwait"
)

// TestAccountingUnderRandomOperations drives the frontier with a random mix of every
// operation, including redeliveries, stale and duplicate outcomes, lease expiry, pause and
// budgets, host retirement, both prioritisers, and live policies that block and unblock
// hosts and domains (parking), that fetchers answer parked, and that give hosts several
// connections (lease slots) and take them back, and checks the invariants (tf.check)
// after each step. It then drains the frontier and requires every accepted URL to have
// reached exactly one terminal state.
func TestAccountingUnderRandomOperations(t *testing.T) {
	t.Parallel()
	for _, seed := range []uint64{1, 2, 3, 4} {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			t.Parallel()
			rng := rand.New(rand.NewPCG(seed, 99))
			rdb := startRedis(t)
			o := testOptions(0)
			o.FrontQueues = 4
			o.BackQueues = 5
			o.MaxDepth = 4
			o.MaxRetries = 2
			o.LeaseTTL = 30 * time.Second
			o.RetryBackoff = time.Second
			o.MaxBackoff = 4 * time.Second
			o.MaxPagesPerHost = 30
			o.RouteLimit = 7  // small, so routing is spread over many calls
			o.RetireAfter = 2 // small, so that hosts retire with work queued and in front queues
			var p frontier.Prioritizer = prioritize.BreadthFirst{}
			if seed%2 == 0 {
				p = prioritize.Preference{X: 1, Y: 1}
			}
			f := newTFWith(t, rdb, o, p)
			ctx := testwait.Context(t)

			hosts := manyHosts(20)
			now := t0
			var out []crawlmsg.FetchTask // tasks a fetcher holds
			var done []crawlmsg.Outcome  // outcomes already applied (for redelivery)
			msgs := 0
			kinds := []crawlmsg.OutcomeKind{crawlmsg.OutcomeFetched, crawlmsg.OutcomeFetched, crawlmsg.OutcomeFetched,
				crawlmsg.OutcomeError, crawlmsg.OutcomeRobots, crawlmsg.OutcomeRobotsUnavailable,
				crawlmsg.OutcomeDisallowed, crawlmsg.OutcomeBlocked, crawlmsg.OutcomeExpired, crawlmsg.OutcomeDeferred,
				crawlmsg.OutcomeParked}
			for step := 0; step < 400; step++ {
				now = now.Add(time.Duration(rng.IntN(3000)) * time.Millisecond)
				switch op := rng.IntN(10); {
				case op < 3: // add one or more messages, sometimes redelivered
					var batches []frontier.Batch
					for range 1 + rng.IntN(3) {
						id := fmt.Sprintf("CRAWL_FRONTIER:%d", msgs)
						if msgs > 0 && rng.IntN(5) == 0 {
							id = fmt.Sprintf("CRAWL_FRONTIER:%d", rng.IntN(msgs))
						} else {
							msgs++
						}
						var us []crawlmsg.Discovered
						for range rng.IntN(8) {
							us = append(us, crawlmsg.Discovered{
								URL:   fmt.Sprintf("http://%s/%d", hosts[rng.IntN(len(hosts))], rng.IntN(1000)),
								Depth: rng.IntN(6),
							})
						}
						batches = append(batches, frontier.Batch{ID: id, URLs: us, Source: fmt.Sprintf("http://%s/", hosts[rng.IntN(len(hosts))])})
					}
					if _, err := f.AddBatches(ctx, batches); err != nil {
						t.Fatal(err)
					}
					f.check()
				case op < 5:
					out = append(out, f.dispatch(now, 1+rng.IntN(6))...)
				case op < 8 && len(out) > 0: // complete some tasks, with some redelivered outcomes
					rng.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
					k := 1 + rng.IntN(len(out))
					var outs []crawlmsg.Outcome
					for _, tk := range out[:k] {
						o := outcome(tk, kinds[rng.IntN(len(kinds))], 200)
						switch rng.IntN(4) {
						case 0:
							o.Status = 503
						case 1:
							o.DurationMs = int64(rng.IntN(500))
							o.CrawlDelay = float64(rng.IntN(3))
						}
						outs = append(outs, o)
					}
					for range rng.IntN(3) {
						if len(done) > 0 {
							outs = append(outs, done[rng.IntN(len(done))])
						}
					}
					f.complete(now, outs...)
					done = append(done, outs...)
					out = out[k:]
				case op < 9:
					// Lost tasks are recovered only by expiry.
					if len(out) > 0 && rng.IntN(2) == 0 {
						out = out[1:]
					}
					f.reap(now.Add(time.Duration(rng.IntN(40)) * time.Second))
				default:
					switch rng.IntN(4) {
					case 0:
						must(t, f.Pause(ctx))
					case 1:
						must(t, f.Resume(ctx))
					default: // block a random few hosts (by host, and h1.example by domain)
						var rs []policy.Rule
						for _, h := range hosts {
							switch rng.IntN(8) {
							case 0, 1:
								rs = append(rs, hostRule(h, policy.Rule{Block: pbool(true)}))
							case 2, 3: // several connections, and their lowering with tasks out
								rs = append(rs, hostRule(h, policy.Rule{Connections: pint(1 + rng.IntN(3))}))
							}
						}
						if rng.IntN(3) == 0 {
							rs = append(rs, domainRule("h1.example", policy.Rule{Block: pbool(true)}))
						}
						f.applyPolicy(rules(t, int64(step), rs...))
					}
					f.check()
				}
			}
			must(t, f.Resume(ctx))
			f.applyPolicy(rules(t, 1000))
			// Drain: outstanding tasks are lost to a crash and come back through the reaper.
			now = now.Add(time.Hour)
			f.reap(now)
			f.drain(now, 10)
			s := f.stats()
			if s.Queued != 0 || s.InFlight != 0 || s.Accepted != s.Terminal() || s.Accepted == 0 {
				t.Fatalf("after draining: %+v", s)
			}
			if s.Active != 0 || s.InHeap != 0 {
				t.Fatalf("hosts left active after draining: %+v", s)
			}
			for _, h := range hosts {
				if p, _ := strconv.Atoi(f.hostField(h, "pages")); p > 30 || p < 0 {
					t.Fatalf("host %s charged %d pages, budget 30", h, p)
				}
			}
			t.Logf("%+v", s)
		})
	}
}
