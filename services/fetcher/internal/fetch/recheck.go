package fetch

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	"github.com/trawl/trawl/shared/ctxsleep"
	"github.com/trawl/trawl/shared/errclass"
	"github.com/trawl/trawl/shared/safedial"
)

// NoSuchHostRecheck is how long RecheckResolver waits before it asks again about a name
// the DNS said does not exist: long enough for a resolver that answered wrongly for a
// moment (a zone being reloaded, a flapping forwarder), short enough that a batch crawl
// does not wait on names that are gone.
const NoSuchHostRecheck = 2 * time.Second

// RecheckResolver asks Up once more, after Delay, when Up answers that a name does not
// exist, so that one wrong answer does not end every URL of a host: only a second "no
// such host" is reported as one (errclass.IsNoSuchHost), which ends the host's URLs. Any
// other answer, a failed resolver (SERVFAIL, a timeout) included, passes through at once,
// to be retried with backoff as a temporary failure.
type RecheckResolver struct {
	Up    safedial.Resolver
	Delay time.Duration
}

// LookupNetIP resolves host through Up, asking twice when the first answer is that the
// name does not exist. When ctx ends before the second answer, the error is a timeout, not
// a missing name.
func (r *RecheckResolver) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	addrs, err := r.Up.LookupNetIP(ctx, network, host)
	if err == nil || !errclass.IsNoSuchHost(err) {
		return addrs, err
	}
	if !ctxsleep.Sleep(ctx, r.Delay) {
		return nil, fmt.Errorf("lookup %s: no such host, not asked again before the deadline: %w", host, ctx.Err())
	}
	return r.Up.LookupNetIP(ctx, network, host)
}
