package politeness

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/trawl/trawl/shared/frontierkeys"
	"github.com/trawl/trawl/shared/redisx"
	"github.com/trawl/trawl/shared/topology"
)

var (
	prelude       = redisx.Lua{FS: luaFS, Name: "lua/claimargs.lua"}
	claimScript   = redisx.Script(PolicyNames, HostNames, prelude, Module, PolicyModule, redisx.Lua{FS: luaFS, Name: "lua/claim.lua"})
	releaseScript = redisx.Script(PolicyNames, HostNames, prelude, Module, PolicyModule, redisx.Lua{FS: luaFS, Name: "lua/release.lua"})
)

// ClaimSlack is how much longer a claim lasts than the request it covers may run: the
// time to release it after the request ends.
const ClaimSlack = time.Second

// ClaimFor sizes a claim on a host (Claimer) or server address (Servers) for one request
// that may run up to timeout under ctx (less when ctx ends sooner), and bounds the
// request to it; take the claim right after. The claim's window runs from when it is
// taken, while a timeout set when the request starts would run from then: anything in
// between (a name lookup, a second claim, a slow dial setup, a paused process) would let
// the request outlive the claim, and another request to the same host or server begin
// while it still runs. So the request, name lookup included, runs under bounded, which
// ends when the window would without its slack.
func ClaimFor(ctx context.Context, timeout time.Duration) (window time.Duration, bounded context.Context, cancel context.CancelFunc) {
	now := time.Now()
	bound := timeout
	if d, ok := ctx.Deadline(); ok {
		bound = min(bound, d.Sub(now))
	}
	bounded, cancel = context.WithDeadline(ctx, now.Add(bound))
	return bound + ClaimSlack, bounded, cancel
}

// Claimer reserves a host of the frontier for one request that is not one of the host's
// tasks, so that the request still keeps the host's gap: the fetcher uses it to follow a
// robots.txt redirect to another host. It works on the host's own shard keys, so it
// agrees with the scheduler's leases and next fetch times, on the same (Redis) clock.
type Claimer struct {
	rdb    redis.UniversalClient
	prefix string
	shards int
	rules  Rules
}

// NewClaimer returns a Claimer for the frontier under prefix (TRAWL_REDIS_PREFIX) with
// shards shards (TRAWL_SHARDS), applying rules.
func NewClaimer(rdb redis.UniversalClient, prefix string, shards int, rules Rules) *Claimer {
	return &Claimer{rdb: rdb, prefix: prefix, shards: max(shards, 1), rules: rules}
}

// Claim is the answer to a claim.
type Claim struct {
	Host string
	// OK: the host is reserved until Until (the Redis clock); make the request and Release.
	OK    bool
	Until int64
	// Wait: the host is busy (a task of it is out, or its gap has not passed); ask again
	// after this long.
	Wait time.Duration
}

func (c *Claimer) keys(host string) []string {
	k := frontierkeys.ForShard(c.prefix, topology.ShardOf(host, c.shards), c.shards)
	return []string{k.Inflight(), k.Heap(), k.Hosts(), k.Host(host), k.Policy()}
}

func (c *Claimer) args(host string, extra ...any) []any {
	return append(append(c.rules.Args(), host), extra...)
}

// Claim reserves host for a request that ends within window. The host's next fetch time
// moves to the window's end until Release, so a claimer that dies costs the host that
// window, never an early request.
func (c *Claimer) Claim(ctx context.Context, host string, window time.Duration) (Claim, error) {
	v, err := claimScript.Run(ctx, c.rdb, c.keys(host), c.args(host, max(window.Milliseconds(), 1))...).Result()
	if err != nil {
		return Claim{}, fmt.Errorf("politeness: claim %s: %w", host, err)
	}
	r, err := redisx.Int64s(v)
	if err != nil || len(r) != 2 {
		return Claim{}, fmt.Errorf("politeness: claim %s: unexpected reply %v: %w", host, v, err)
	}
	if r[0] == 1 {
		return Claim{Host: host, OK: true, Until: r[1]}, nil
	}
	return Claim{Host: host, Wait: time.Duration(r[1]) * time.Millisecond}, nil
}

// Release ends a claim whose request took took: the host's next fetch time becomes a gap
// after now. It returns that time (the Redis clock).
func (c *Claimer) Release(ctx context.Context, cl Claim, took time.Duration) (time.Time, error) {
	v, err := releaseScript.Run(ctx, c.rdb, c.keys(cl.Host), c.args(cl.Host, cl.Until, max(took.Milliseconds(), 0))...).Result()
	if err != nil {
		return time.Time{}, fmt.Errorf("politeness: release %s: %w", cl.Host, err)
	}
	n, err := strconv.ParseInt(fmt.Sprint(v), 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("politeness: release %s: unexpected reply %v", cl.Host, v)
	}
	return time.UnixMilli(n), nil
}
