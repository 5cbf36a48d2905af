package itest

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/trawl/trawl/services/fetcher/internal/service"
	"github.com/trawl/trawl/shared/crawlmsg"
)

// A fetcher whose clock is off keeps its leases as one whose clock is right: a lease
// deadline is Redis's time, and the fetcher converts it by the offset it measures. With
// the clock ahead, a task with a minute of lease left is fetched (compared as they are,
// every task would look expired and come back for ever); with the clock behind, a task
// whose lease ends before a whole request could is answered expired with no request
// (compared as they are, the request would start and run past the lease, while the host
// is given to another fetcher).
func TestClockSkew(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		skew time.Duration
	}{
		{"ahead 90s", 90 * time.Second},
		{"behind 60s", -60 * time.Second},
		{"right", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			st := newStack(t)
			s := newSite(t, map[string]http.HandlerFunc{"/robots.txt": text(robotsTxt), "/page": html(pageHTML), "/late": html(pageHTML)})
			in := st.startWith(st.config(nil), "a", service.WithWallClock(func() time.Time { return time.Now().Add(tc.skew) }))

			// The fetch timeout is 5 s and the slack 2 s: a minute is plenty, 3 s too little.
			ok := task(s.URL + "/page")
			ok.Deadline = st.redisNow(t).Add(time.Minute).UnixMilli()
			st.publishTask(ok)
			// The host's first task fetches its robots.txt (outcome robots): a request all the same.
			if o := st.outcome(ok.Lease); o.Kind == crawlmsg.OutcomeExpired || !o.Requested {
				t.Errorf("a minute of lease left: outcome %s requested=%v, want a request made", o.Kind, o.Requested)
			}
			short := task(s.URL + "/late")
			short.Deadline = st.redisNow(t).Add(3 * time.Second).UnixMilli()
			st.publishTask(short)
			if o := st.outcome(short.Lease); o.Kind != crawlmsg.OutcomeExpired || o.Requested {
				t.Errorf("3 s of lease left: outcome %s requested=%v, want expired with no request", o.Kind, o.Requested)
			}
			for _, p := range s.requests() {
				if p == "/late" {
					t.Errorf("the site was asked for /late, whose lease could not hold the request")
				}
			}
			off := in.metric(t, "trawl_fetcher_clock_offset_seconds")
			if want := -tc.skew.Seconds(); off < want || off > want+1 {
				t.Errorf("clock offset %.3f s, want %.3f s (within the measurement's round trip)", off, want)
			}
		})
	}
}

// redisNow is Redis's clock, which the scheduler stamps lease deadlines from.
func (st *stack) redisNow(t *testing.T) time.Time {
	t.Helper()
	now, err := st.rdb.Time(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	return now
}
