package service

import (
	"context"
	"testing"
	"time"

	"github.com/trawl/trawl/services/fetcher/internal/config"
	"github.com/trawl/trawl/shared/politeness"
)

// A request made under a claim (a server address, or another host for a robots.txt hop)
// ends within the claim's window counted from before the claim was taken, whatever time
// passes between the claim and the request's start: the request's own fetch timeout would
// start later and could outlive the claim.
func TestClaimBoundsItsRequest(t *testing.T) {
	for _, tc := range []struct {
		name      string
		fetch     time.Duration
		leaseLeft time.Duration // the task's cut-off, from now
		wantBound time.Duration // the request's whole budget under the claim
	}{
		{"fetch timeout binds", 5 * time.Second, time.Minute, 5 * time.Second},
		{"lease cut-off binds", 30 * time.Second, 4 * time.Second, 4 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &Service{cfg: config.Config{FetchTimeout: tc.fetch}}
			reqCtx, cancel := context.WithTimeout(context.Background(), tc.leaseLeft)
			defer cancel()
			window, bounded, release := politeness.ClaimFor(reqCtx, s.requestTimeout(reqCtx))
			// The claim is asked for after this: it holds until after+window at the least.
			after := time.Now()
			defer release()
			if got := window - politeness.ClaimSlack; got > tc.wantBound || got < tc.wantBound-time.Second {
				t.Errorf("claim window %s, want %s + %s", window, tc.wantBound, politeness.ClaimSlack)
			}
			dl, ok := bounded.Deadline()
			if !ok {
				t.Fatal("the request under the claim has no deadline")
			}
			if end := after.Add(window - politeness.ClaimSlack); dl.After(end) {
				t.Errorf("the request may run %s past the claim's window", dl.Sub(end))
			}
		})
	}
}
