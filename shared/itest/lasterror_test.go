package itest

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/trawl/trawl/devstack/redisproc"
	"github.com/trawl/trawl/shared/redisx"
	"github.com/trawl/trawl/shared/testwait"
)

// A call cut short by its deadline while go-redis retries its dials says only "context
// deadline exceeded"; LastError keeps why Redis did not answer, and forgets it once
// Redis answers again.
func TestLastErrorExplainsADeadline(t *testing.T) {
	srv := redisproc.StartT(t, redisproc.Options{})
	c, err := redisx.Open(srv.URL(), redisx.Timeouts{Dial: time.Second, Read: time.Second, Write: time.Second, Retries: 100})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	why := redisx.TrackErrors(c)
	ctx := testwait.Context(t)
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"a deadline gets the reason", context.DeadlineExceeded, "connection refused"},
		{"another error stays as it is", errors.New("frontier: bad entry"), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// A deadline short of go-redis's retries: what a status reading gets.
			dctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
			defer cancel()
			if err := c.Ping(dctx).Err(); !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("ping of a stopped Redis: %v, want the deadline", err)
			}
			got := why.Explain(tc.err)
			if !errors.Is(got, tc.err) {
				t.Errorf("%v does not wrap %v", got, tc.err)
			}
			if tc.want == "" && got.Error() != tc.err.Error() {
				t.Errorf("Explain changed %q into %q", tc.err, got)
			}
			if tc.want != "" && !strings.Contains(got.Error(), tc.want) {
				t.Errorf("Explain(%v) = %q, want the reason (%s)", tc.err, got, tc.want)
			}
		})
	}

	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := srv.Restart(rctx); err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, 30*time.Second, "Redis to answer again", func() bool { return c.Ping(ctx).Err() == nil })
	if got := why.Explain(context.DeadlineExceeded); got.Error() != context.DeadlineExceeded.Error() {
		t.Errorf("after Redis answered again: %q, want no stale reason", got)
	}
}
