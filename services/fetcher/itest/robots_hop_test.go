package itest

import (
	"context"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/frontierkeys"
	"github.com/trawl/trawl/shared/policy"
)

// TestRobotsRedirectHopIsItsOwnTask: robots.txt redirected on the same host is not
// followed inline; each hop is one task's one request, so the scheduler's gap holds
// between them. The test plays the scheduler, re-dispatching the URL a minimum delay
// after each robots outcome, and checks the gaps in the site's own request log.
func TestRobotsRedirectHopIsItsOwnTask(t *testing.T) {
	t.Parallel()
	const minDelay = 250 * time.Millisecond
	type hit struct {
		path string
		at   time.Time
	}
	var mu sync.Mutex
	var hits []hit
	logged := func(h http.HandlerFunc) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			hits = append(hits, hit{r.URL.Path, time.Now()})
			mu.Unlock()
			h(w, r)
		}
	}
	st := newStack(t)
	s := newSite(t, map[string]http.HandlerFunc{
		"/robots.txt": logged(func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, "/robots-real.txt", http.StatusMovedPermanently)
		}),
		"/robots-real.txt": logged(text("User-agent: *\nDisallow: /private\n")),
		"/page":            logged(html(pageHTML)),
	})
	st.start(st.config(nil), "a")

	// Every task of the host waits minDelay after the previous one's outcome, as the
	// scheduler spaces a host's tasks.
	run := func(url string) crawlmsg.Outcome {
		tk := task(url)
		st.publishTask(tk)
		o := st.outcome(tk.Lease)
		time.Sleep(minDelay) // the scheduler's gap before the host's next task
		return o
	}
	if o := run(s.URL + "/page"); o.Kind != crawlmsg.OutcomeRobots || o.Status != http.StatusMovedPermanently || !o.Requested {
		t.Errorf("first task: %+v, want a robots outcome for the 301 alone", o)
	}
	if o := run(s.URL + "/page"); o.Kind != crawlmsg.OutcomeRobots || o.Status != http.StatusOK {
		t.Errorf("second task: %+v, want robots for the redirect target", o)
	}
	if o := run(s.URL + "/private/x"); o.Kind != crawlmsg.OutcomeDisallowed {
		t.Errorf("private URL: %+v, want disallowed by the redirected robots.txt", o)
	}
	if o := run(s.URL + "/page"); o.Kind != crawlmsg.OutcomeFetched {
		t.Errorf("page: %+v", o)
	}

	mu.Lock()
	defer mu.Unlock()
	var paths []string
	for i, h := range hits {
		paths = append(paths, h.path)
		if i > 0 {
			if gap := h.at.Sub(hits[i-1].at); gap < minDelay {
				t.Errorf("%s requested %s after %s, below the host's %s gap", h.path, gap, hits[i-1].path, minDelay)
			}
		}
	}
	if want := []string{"/robots.txt", "/robots-real.txt", "/page"}; !slices.Equal(paths, want) {
		t.Errorf("site saw %v, want %v", paths, want)
	}
}

// TestRobotsRedirectToBusyHostWaits: a robots.txt redirect to another host is requested
// only when that host's own schedule allows a request: not while a task of it is out, and
// not inside its gap. Meanwhile the origin's task ends without a request (deferred, or
// robots for its own request) and asks to be tried again when the other host is free;
// once it is, the hop is made and the other host's next fetch time moves a gap on.
func TestRobotsRedirectToBusyHostWaits(t *testing.T) {
	t.Parallel()
	const otherHost = "127.0.0.2"
	keys := frontierkeys.ForShard("itest", 0, 1)
	tests := []struct {
		name string
		busy func(ctx context.Context, rdb *redis.Client, now time.Time) error
		free func(ctx context.Context, rdb *redis.Client) error
	}{
		{
			name: "inside its gap",
			busy: func(ctx context.Context, rdb *redis.Client, now time.Time) error {
				return rdb.HSet(ctx, keys.Host(otherHost), "next", now.Add(time.Minute).UnixMilli()).Err()
			},
			free: func(ctx context.Context, rdb *redis.Client) error {
				return rdb.HDel(ctx, keys.Host(otherHost), "next").Err()
			},
		},
		{
			name: "a task out",
			busy: func(ctx context.Context, rdb *redis.Client, now time.Time) error {
				return rdb.ZAdd(ctx, keys.Inflight(), redis.Z{Score: float64(now.Add(time.Minute).UnixMilli()), Member: otherHost}).Err()
			},
			free: func(ctx context.Context, rdb *redis.Client) error {
				return rdb.ZRem(ctx, keys.Inflight(), otherHost).Err()
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			st := newStack(t)
			other := newSiteOn(t, otherHost, map[string]http.HandlerFunc{"/rules.txt": text("User-agent: trawl\nDisallow: /nope\n")})
			s := newSite(t, map[string]http.HandlerFunc{
				"/robots.txt": func(w http.ResponseWriter, r *http.Request) {
					http.Redirect(w, r, other.URL+"/rules.txt", http.StatusFound)
				},
			})
			now, err := st.rdb.Time(ctx).Result()
			if err != nil {
				t.Fatal(err)
			}
			if err := tt.busy(ctx, st.rdb, now); err != nil {
				t.Fatal(err)
			}
			in := st.start(st.config(nil), "a")
			run := func() crawlmsg.Outcome {
				tk := task(s.URL + "/nope/1")
				st.publishTask(tk)
				return st.outcome(tk.Lease)
			}

			// The origin's own request is made; the hop waits for the other host.
			if o := run(); o.Kind != crawlmsg.OutcomeRobots || !o.Requested || o.RetryAfter <= 0 || o.RetryAfter > 60 {
				t.Errorf("first task: %+v, want robots for the origin's own request, retry within the other host's wait", o)
			}
			// The next task makes no request at all: the other host is still busy.
			if o := run(); o.Kind != crawlmsg.OutcomeDeferred || o.Requested || o.RetryAfter <= 0 {
				t.Errorf("second task: %+v, want deferred without a request", o)
			}
			in.waitMetric(t, "trawl_fetcher_robots_deferred_total", 1)
			if got := other.requests(); len(got) != 0 {
				t.Fatalf("the busy host was requested: %v", got)
			}

			if err := tt.free(ctx, st.rdb); err != nil {
				t.Fatal(err)
			}
			before, _ := st.rdb.Time(ctx).Result()
			// The hop is made now; the origin itself is not asked again.
			if o := run(); o.Kind != crawlmsg.OutcomeRobots || o.Requested || o.Status != http.StatusOK {
				t.Errorf("third task: %+v, want robots from the hop alone, no request to the origin", o)
			}
			next, err := st.rdb.HGet(ctx, keys.Host(otherHost), "next").Int64()
			if err != nil {
				t.Fatal(err)
			}
			// The default rule: a minimum delay of 1s after the hop's request.
			if gap := time.UnixMilli(next).Sub(before); gap < time.Second || gap > time.Minute {
				t.Errorf("the other host's next fetch is %s after the hop, want about the 1s minimum delay", gap)
			}
			if o := run(); o.Kind != crawlmsg.OutcomeDisallowed {
				t.Errorf("fourth task: %+v, want disallowed by the redirected robots.txt", o)
			}
			if got := s.requests(); !slices.Equal(got, []string{"/robots.txt"}) {
				t.Errorf("origin saw %v, want one /robots.txt", got)
			}
			if got := other.requests(); !slices.Equal(got, []string{"/rules.txt"}) {
				t.Errorf("redirect target saw %v, want one /rules.txt", got)
			}
		})
	}
}

// TestRobotsRedirectToRuledHostKeepsItsRule: a robots.txt redirect to a host the
// frontier has never held is spaced by that host's site rule (a 7s min delay here), which
// the fetcher resolves from the rules it watches, not by the process-wide 1s.
func TestRobotsRedirectToRuledHostKeepsItsRule(t *testing.T) {
	t.Parallel()
	const otherHost = "127.0.0.2"
	keys := frontierkeys.ForShard("itest", 0, 1)
	ctx := context.Background()
	st := newStack(t)
	st.setRules(map[string]policy.Rule{"host:" + otherHost: {MinDelay: ptrTo(policy.Duration(7 * time.Second))}})
	other := newSiteOn(t, otherHost, map[string]http.HandlerFunc{"/rules.txt": text("User-agent: trawl\nDisallow: /nope\n")})
	s := newSite(t, map[string]http.HandlerFunc{
		"/robots.txt": func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, other.URL+"/rules.txt", http.StatusFound)
		},
	})
	st.start(st.config(nil), "a")
	before, err := st.rdb.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	tk := task(s.URL + "/nope/1")
	st.publishTask(tk)
	if o := st.outcome(tk.Lease); o.Kind != crawlmsg.OutcomeRobots || !o.Requested || o.Status != http.StatusOK {
		t.Fatalf("outcome %+v, want robots from the origin's request and the hop", o)
	}
	if got := other.requests(); !slices.Equal(got, []string{"/rules.txt"}) {
		t.Fatalf("redirect target saw %v, want one /rules.txt", got)
	}
	next, err := st.rdb.HGet(ctx, keys.Host(otherHost), frontierkeys.HostNext).Int64()
	if err != nil {
		t.Fatal(err)
	}
	if gap := time.UnixMilli(next).Sub(before); gap < 7*time.Second || gap > time.Minute {
		t.Errorf("the redirect target's next fetch is %s after the hop, want its rule's 7s min delay", gap)
	}
}
