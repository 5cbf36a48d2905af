package itest

import (
	"context"
	"log/slog"
	"net/http"
	"net/netip"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/trawl/trawl/devstack/redisproc"
	"github.com/trawl/trawl/services/renderer/internal/answer"
	"github.com/trawl/trawl/shared/frontierkeys"
	"github.com/trawl/trawl/shared/polite"
	"github.com/trawl/trawl/shared/politeness"
	"github.com/trawl/trawl/shared/robots"
	"github.com/trawl/trawl/shared/robotscache"
	"github.com/trawl/trawl/shared/safedial"
	"github.com/trawl/trawl/shared/testwait"
)

// slowDNS answers every name with 127.0.0.1 after delay: a name server slow to answer.
type slowDNS struct{ delay time.Duration }

func (d slowDNS) LookupNetIP(ctx context.Context, _, _ string) ([]netip.Addr, error) {
	select {
	case <-time.After(d.delay):
		return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

type noMetrics struct{}

func (noMetrics) Refused(string)          {}
func (noMetrics) Answered(string)         {}
func (noMetrics) ClaimWait(time.Duration) {}
func (noMetrics) Robots(string)           {}

// A browser request's whole time, its name lookup included, ends within the claim of its
// host it holds, as a fetcher's does: the claim's window is what keeps every other
// request to the host (a fetcher's task, another renderer's) away. Under per-server
// politeness the lookup, slower here than the request timeout's slack, comes before the
// claims; per host it is part of the request (its dial), bounded with it. Judged from the site's own
// log: the request, held open by a server slower than the request timeout, is in flight
// no later than the end of the window the host's state in Redis shows while it runs.
func TestAnswerEndsWithinItsHostClaim(t *testing.T) {
	const timeout = time.Second
	for _, tc := range []struct {
		name   string
		per    politeness.Per
		lookup time.Duration // per host, within the request's timeout, or it never reaches the site
	}{
		{"per server", politeness.PerIP, 2 * time.Second},
		{"per host", politeness.PerHost, timeout / 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testwait.Context(t)
			srv := redisproc.StartT(t, redisproc.Options{})
			rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
			t.Cleanup(func() { _ = rdb.Close() })
			const prefix = "itest"
			hostKey := frontierkeys.ForShard(prefix, 0, 1).Host("slow.test")
			// The end of the host's claim, as the claim wrote it, read while the request runs.
			claimEnd := make(chan time.Time, 1)
			s := newSite(t, map[string]http.HandlerFunc{
				"slow.test/page": func(w http.ResponseWriter, r *http.Request) {
					next, err := rdb.HGet(r.Context(), hostKey, frontierkeys.HostNext).Result()
					ms, perr := strconv.ParseInt(next, 10, 64)
					if err != nil || perr != nil {
						t.Errorf("host state during the request: %q, %v", next, err)
					}
					claimEnd <- time.UnixMilli(ms)
					// Slower than any request timeout: the renderer decides when it ends.
					select {
					case <-r.Context().Done():
					case <-ctx.Done():
					}
				},
			})
			rules := politeness.Defaults
			rules.Per = tc.per
			var servers *politeness.Servers
			if tc.per == politeness.PerIP {
				servers = politeness.NewServers(rdb, prefix, rules)
			}
			stores := polite.NewRobotsStores(rdb, robotscache.StoreOptions{Prefix: prefix, Agent: "trawl"})
			origin := s.url("slow.test", "")
			if err := stores.Default().Put(ctx, origin, robots.NewEntry("trawl", http.StatusOK, nil, robots.DefaultMaxBytes, time.Now())); err != nil {
				t.Fatal(err)
			}
			dialer := &safedial.Dialer{Policy: safedial.NewPolicy(netip.MustParsePrefix("127.0.0.0/8")), Resolver: slowDNS{tc.lookup}}
			a := answer.New(answer.Config{UserAgent: "trawl-test", RobotsAgent: "trawl", RequestTimeout: timeout, MaxBody: 1 << 20,
				Requests: polite.New(polite.Settings{RobotsAgent: "trawl", RobotsMaxBytes: robots.DefaultMaxBytes}, nil)},
				stores, politeness.NewClaimer(rdb, prefix, 1, rules, nil), servers, dialer, nil, noMetrics{}, slog.New(slog.DiscardHandler))
			t.Cleanup(a.Close)

			res := a.Answer(ctx, answer.Request{URL: s.url("slow.test", "/page"), Method: http.MethodGet})
			if res.Refused != answer.RefusedTime {
				t.Errorf("answer: refused %q (%v), status %d; want the request timed out", res.Refused, res.Err, res.Status)
			}
			hits := s.log()
			if len(hits) != 1 {
				t.Fatalf("the site saw %d requests, want 1: %+v", len(hits), hits)
			}
			end := <-claimEnd
			if hits[0].end.After(end) {
				t.Errorf("request in flight until %s, %s after its host's claim ended",
					hits[0].end.Format("15:04:05.000"), hits[0].end.Sub(end).Round(time.Millisecond))
			}
		})
	}
}
