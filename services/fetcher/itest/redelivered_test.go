package itest

import (
	"context"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/frontierkeys"
	"github.com/trawl/trawl/shared/testwait"
)

// TestTaskOfEndedLeaseNotRequestedAgain: JetStream keeps a consumer's delivery state in
// memory for a while, so a NATS restart can hand out again, as never delivered, a task a
// fetcher served and the scheduler answered. A task dispatched before the fetcher's NATS
// session began is therefore checked against its lease in Redis: one whose lease ended is
// answered without a request (its request, made again, would come outside the host's
// turn); one whose lease holds is served; a task dispatched since is served unasked.
func TestTaskOfEndedLeaseNotRequestedAgain(t *testing.T) {
	t.Parallel()
	st := newStack(t)
	routes := map[string]http.HandlerFunc{"/robots.txt": text(robotsTxt)}
	for _, p := range []string{"/ended", "/held", "/new"} {
		routes[p] = html(pageHTML)
	}
	s := newSite(t, routes)
	in := st.start(st.config(nil), "a")

	// robots.txt first, a task of its own, so that each case below is its page's request.
	prime := task(s.URL + "/")
	st.publishTask(prime)
	if o := st.outcome(prime.Lease); o.Kind != crawlmsg.OutcomeRobots {
		t.Fatalf("first task's outcome %s, want robots", o.Kind)
	}

	before := time.Now().Add(-10 * time.Second).UnixMilli()
	checkLeaseCases(t, st, s, []leaseCase{
		{"/ended", before, false, crawlmsg.OutcomeExpired, false},
		{"/held", before, true, crawlmsg.OutcomeFetched, true},
		{"/new", time.Now().Add(2 * time.Second).UnixMilli(), false, crawlmsg.OutcomeFetched, true},
	})
	in.waitMetric(t, "trawl_fetcher_tasks_stale_total", 1)
}

// leaseCase is a task published with a dispatch time, its lease held in Redis or not, and
// what the fetcher must make of it.
type leaseCase struct {
	path       string
	dispatched int64
	leased     bool // the scheduler's lease still names the task
	want       crawlmsg.OutcomeKind
	requested  bool
}

// checkLeaseCases publishes each case's task in turn and checks its outcome and whether
// the site saw its request.
func checkLeaseCases(t *testing.T, st *stack, s *site, cases []leaseCase) {
	t.Helper()
	ctx := context.Background()
	leases := frontierkeys.ForShard(st.common.RedisPrefix, 0, st.common.Shards).Lease()
	for _, tc := range cases {
		t.Run(tc.path, func(t *testing.T) {
			tk := task(s.URL + tc.path)
			tk.Dispatched = tc.dispatched
			if tc.leased {
				if err := st.rdb.HSet(ctx, leases, frontierkeys.LeaseSlot(tk.Host, tk.Lease), tk.Lease+" 0 0 0 "+tk.URL).Err(); err != nil {
					t.Fatal(err)
				}
			}
			st.publishTask(tk)
			o := st.outcome(tk.Lease)
			if o.Kind != tc.want || o.Requested != tc.requested {
				t.Errorf("outcome %s requested=%v, want %s requested=%v", o.Kind, o.Requested, tc.want, tc.requested)
			}
			if got := slices.Contains(s.requests(), tc.path); got != tc.requested {
				t.Errorf("site saw %s: %v, want %v (requests %v)", tc.path, got, tc.requested, s.requests())
			}
		})
	}
}

// TestTaskDispatchedBeforeRedisOutageChecked: Redis out of reach may be back from an OS
// crash without the dispatches of its last seconds, and the frontier then dispatches the
// host again while the old task is still in NATS. A task dispatched before Redis was last
// out of reach is therefore checked against its lease like one from before the NATS
// session: with the lease gone it is answered without a request; a task dispatched since
// is served unasked.
func TestTaskDispatchedBeforeRedisOutageChecked(t *testing.T) {
	t.Parallel()
	st := newStack(t)
	routes := map[string]http.HandlerFunc{"/robots.txt": text(robotsTxt)}
	for _, p := range []string{"/lost", "/since"} {
		routes[p] = html(pageHTML)
	}
	s := newSite(t, routes)
	in := st.start(st.config(nil), "a")
	started := time.Now() // the NATS session began before
	prime := task(s.URL + "/")
	st.publishTask(prime)
	if o := st.outcome(prime.Lease); o.Kind != crawlmsg.OutcomeRobots {
		t.Fatalf("first task's outcome %s, want robots", o.Kind)
	}
	// The tasks below must be dispatched after the NATS session began, plus the second the
	// fetcher allows the clocks, so that only the outage can make it check them.
	time.Sleep(time.Until(started.Add(1300 * time.Millisecond)))

	ctx := context.Background()
	down := time.Now()
	if err := st.redis.Kill(); err != nil {
		t.Fatal(err)
	}
	ready := func() bool {
		resp, err := http.Get("http://" + in.Svc.Addr() + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}
	testwait.Eventually(t, 10*time.Second, "the fetcher seeing Redis out of reach (readyz failing)", func() bool { return !ready() })
	if err := st.redis.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, 10*time.Second, "the fetcher seeing Redis back (readyz passing)", func() bool { return ready() })

	checkLeaseCases(t, st, s, []leaseCase{
		// Dispatched just before Redis went: Redis has no lease for it.
		{"/lost", down.Add(-100 * time.Millisecond).UnixMilli(), false, crawlmsg.OutcomeExpired, false},
		{"/since", time.Now().Add(2 * time.Second).UnixMilli(), false, crawlmsg.OutcomeFetched, true},
	})
	in.waitMetric(t, "trawl_fetcher_tasks_stale_total", 1)
}
