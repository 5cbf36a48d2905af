package frontierkeys

import (
	"strings"
	"testing"
	"time"
)

// A task out is stuck when its lease is overdue, its fetcher reported an error for it, or
// it has been out longer than half the lease TTL; its line names the URL, the host, how
// long, and the error.
func TestStuckLease(t *testing.T) {
	now := time.UnixMilli(1_700_000_000_000)
	ttl := 2 * time.Minute
	lease := func(out time.Duration, le *LeaseError) StuckLease {
		return StuckLease{Shard: 0, Host: "a.example", URL: "http://a.example/x", Attempt: 1,
			Since: now.Add(-out), Deadline: now.Add(-out).Add(ttl), LastError: le}
	}
	failing := &LeaseError{Token: "0-1-2", First: now.Add(-40 * time.Second), Last: now.Add(-time.Second), Tries: 12,
		Error: "page: nats: API error: code=400 err_code=10097 description=header size exceeds maximum allowed of 64k"}
	for _, tc := range []struct {
		name  string
		l     StuckLease
		stuck bool
		text  []string
	}{
		{"fresh", lease(5*time.Second, nil), false, []string{"out for 5s", "lease ends in 1m55s", "no error reported"}},
		{"failing", lease(45*time.Second, failing), true, []string{"host a.example", "attempt 2", "failing for 40s (12 tries)", "err_code=10097"}},
		{"out over half the lease", lease(61*time.Second, nil), true, []string{"out for 1m1s"}},
		{"overdue", lease(3*time.Minute, nil), true, []string{"lease overdue by 1m0s"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.l.Stuck(now, ttl); got != tc.stuck {
				t.Errorf("Stuck = %v, want %v", got, tc.stuck)
			}
			d := tc.l.Describe(now)
			for _, w := range tc.text {
				if !strings.Contains(d, w) {
					t.Errorf("Describe = %q, want it to contain %q", d, w)
				}
			}
		})
	}
	if v, ok := ParseLeaseError("0-1-2\t1\t2\t3\tboom: a\tb"); !ok || v.Tries != 3 || v.Error != "boom: a\tb" {
		t.Errorf("ParseLeaseError = %+v, %v", v, ok)
	}
	if _, ok := ParseLeaseError("garbage"); ok {
		t.Error("ParseLeaseError accepted garbage")
	}
}
