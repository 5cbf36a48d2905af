package politeness

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/trawl/trawl/shared/frontierkeys"
	"github.com/trawl/trawl/shared/policy"
	"github.com/trawl/trawl/shared/redisx"
	"github.com/trawl/trawl/shared/topology"
)

var (
	prelude       = redisx.Lua{FS: luaFS, Name: "lua/claimargs.lua"}
	claimLimits   = redisx.Lua{FS: luaFS, Name: "lua/claimlimits.lua"}
	claimScript   = redisx.Script(PolicyNames, HostNames, prelude, Module, PolicyModule, claimLimits, redisx.Lua{FS: luaFS, Name: "lua/claim.lua"})
	releaseScript = redisx.Script(PolicyNames, HostNames, prelude, Module, PolicyModule, claimLimits, redisx.Lua{FS: luaFS, Name: "lua/release.lua"})
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
//
// A host's limits are the entry stored in its state while that is of the shard's
// generation (an active host's, kept current by the scheduler); otherwise (a host never
// active, or one whose rules changed since it was) the entry the Claimer resolves itself,
// with Resolve, from the rules its process watches, so that a claim obeys a site rule
// whether or not the host has URLs queued.
type Claimer struct {
	rdb    redis.UniversalClient
	prefix string
	shards int
	rules  Rules
	set    func() *policy.Set
	// resolved is Resolve of the last set seen: resolved again (by one caller, under mu)
	// when set gives another.
	resolved atomic.Pointer[Resolved]
	mu       sync.Mutex
}

// NewClaimer returns a Claimer for the frontier under prefix (TRAWL_REDIS_PREFIX) with
// shards shards (TRAWL_SHARDS), applying rules and the live site policies set gives (a
// policy.Watcher's Current, holding at least polite.Fields' politeness fields; nil: none).
func NewClaimer(rdb redis.UniversalClient, prefix string, shards int, rules Rules, set func() *policy.Set) *Claimer {
	if set == nil {
		set = func() *policy.Set { return nil }
	}
	return &Claimer{rdb: rdb, prefix: prefix, shards: max(shards, 1), rules: rules, set: set}
}

// entry is host's entry under the rules the process watches ("": none). The rules are
// resolved once per set the watcher loads, not per claim.
func (c *Claimer) entry(host string) string {
	s := c.set()
	if r := c.resolved.Load(); r != nil && r.Set() == s {
		return r.Entry(host)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	r := c.resolved.Load()
	if r == nil || r.Set() != s {
		r = Resolve(s)
		c.resolved.Store(r)
	}
	return r.Entry(host)
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
	return append(append(c.rules.Args(), host, c.entry(host)), extra...)
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
