package cli

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/trawl/trawl/devstack/redisproc"
	"github.com/trawl/trawl/shared/testwait"
)

// Redis stopped under `trawlctl status`: it prints no zeros but one line saying that the
// frontier cannot be read and why, without the password, and exits 1; so does a status
// started while Redis is down.
func TestStatusSaysRedisUnreachable(t *testing.T) {
	const password = "pw-s3cret-7"
	s := startStackWith(t, 2, redisproc.Options{Password: password})
	frontierFixture(t, s.rdb, "trawl")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	wait, stdout, _ := s.inv.start(ctx, "status", "-watch", "-interval", "100ms")
	testwait.Eventually(t, 10*time.Second, "a first snapshot", func() bool { return strings.Contains(stdout.String(), "fetched") })
	if err := s.redis.Stop(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		run  func() result
		want []string
	}{
		// Which read meets the stopped server first depends on timing; each says the same.
		{"stopped under -watch", wait, []string{"the frontier cannot be read from Redis: ", "dial tcp " + s.redis.Addr()}},
		{"down at the start", func() result { return s.inv.run(t, "status", "-json") }, []string{"Redis at " + s.redis.Addr() + " unreachable"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := tc.run()
			for _, w := range tc.want {
				expectOneLine(t, r, ExitFailure, w)
			}
			if strings.Contains(r.stdout+r.stderr, password) {
				t.Errorf("the output shows the Redis password:\n%s%s", r.stdout, r.stderr)
			}
		})
	}
}
