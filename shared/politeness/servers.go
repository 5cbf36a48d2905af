package politeness

import (
	"context"
	"crypto/rand"
	"fmt"
	"net/netip"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/trawl/trawl/shared/redisx"
)

var (
	serverPrelude       = redisx.Lua{FS: luaFS, Name: "lua/serverargs.lua"}
	serverClaimScript   = redisx.Script(serverPrelude, Module, redisx.Lua{FS: luaFS, Name: "lua/server_claim.lua"})
	serverReleaseScript = redisx.Script(serverPrelude, Module, redisx.Lua{FS: luaFS, Name: "lua/server_release.lua"})
)

// ServerKey is the Redis key of one server address's state (the hash the server scripts
// keep: until, tok, next, rt, host), under the deployment prefix (TRAWL_REDIS_PREFIX).
// Each address has its own hash tag, so the key may live on any Redis Cluster node.
func ServerKey(prefix string, addr netip.Addr) string {
	return redisx.NewKeyspace(prefix, "addr:"+addr.Unmap().WithZone("").String()).Key("server")
}

// Servers spaces the requests to each server address with PerIP: at most one request in
// flight per address across every fetcher and shard, and the next one a gap after it
// ends (the gap of the host being requested: min delay, its Crawl-delay, k × the response
// time). It is an additional bound; the host's own gap is kept by the frontier as ever.
type Servers struct {
	rdb    redis.UniversalClient
	prefix string
	rules  Rules
}

// NewServers returns the address leases under prefix (TRAWL_REDIS_PREFIX), applying rules.
func NewServers(rdb redis.UniversalClient, prefix string, rules Rules) *Servers {
	return &Servers{rdb: rdb, prefix: prefix, rules: rules}
}

// ServerClaim is the answer to a claim on an address.
type ServerClaim struct {
	Addr       netip.Addr
	Host       string
	CrawlDelay time.Duration
	// OK: the address is in flight for this request until Until (the Redis clock, ms);
	// make the request to exactly Addr, then Release.
	OK    bool
	Until int64
	// Wait: the address is busy (a request is out, or its gap has not passed); ask
	// again after this long.
	Wait  time.Duration
	token string
	rules Rules // the claim's rules, its limits applied; Release spaces by them too
}

func (c ServerClaim) args(extra ...any) []any {
	return append(append(c.rules.Args(), c.Host, c.CrawlDelay.Milliseconds()), extra...)
}

// ServerLimits are what site policies (shared/policy: an address-block rule, or the
// requested host's own rule) set for one request at its server address. A nil field, or
// Connections 0, keeps the process-wide rule.
type ServerLimits struct {
	MinDelay      *time.Duration
	DelayFactor   *float64
	MaxCrawlDelay *time.Duration // how long a Crawl-delay is honoured (exact: a long one)
	// Connections is the most requests in flight at the address, this one included (1
	// by default). With more than one, each request still starts at least a gap after the
	// previous request's start.
	Connections int
}

// Claim reserves addr for one request to host (whose robots.txt Crawl-delay is
// crawlDelay) that ends within window. A claimer that dies leaves the address in flight
// until the window ends.
func (s *Servers) Claim(ctx context.Context, addr netip.Addr, host string, crawlDelay, window time.Duration) (ServerClaim, error) {
	return s.ClaimWith(ctx, addr, host, crawlDelay, window, ServerLimits{})
}

// ClaimWith is Claim under the limits of the request's site policies.
func (s *Servers) ClaimWith(ctx context.Context, addr netip.Addr, host string, crawlDelay, window time.Duration, lim ServerLimits) (ServerClaim, error) {
	c := ServerClaim{Addr: addr.Unmap().WithZone(""), Host: host, CrawlDelay: crawlDelay, token: rand.Text(), rules: s.rules}
	if lim.MinDelay != nil {
		c.rules.MinDelay = *lim.MinDelay
	}
	if lim.DelayFactor != nil {
		c.rules.DelayFactor = *lim.DelayFactor
	}
	if lim.MaxCrawlDelay != nil {
		c.rules.MaxCrawlDelay = *lim.MaxCrawlDelay
	}
	v, err := serverClaimScript.Run(ctx, s.rdb, []string{ServerKey(s.prefix, c.Addr)},
		c.args(max(window.Milliseconds(), 1), c.token, max(lim.Connections, 1))...).Result()
	if err != nil {
		return ServerClaim{}, fmt.Errorf("politeness: claim address %s: %w", c.Addr, err)
	}
	r, err := redisx.Int64s(v)
	if err != nil || len(r) != 2 {
		return ServerClaim{}, fmt.Errorf("politeness: claim address %s: unexpected reply %v: %w", c.Addr, v, err)
	}
	if r[0] == 1 {
		c.OK, c.Until = true, r[1]
	} else {
		c.Wait = time.Duration(r[1]) * time.Millisecond
	}
	return c, nil
}

// Release ends a claim whose request took took: the address's next time becomes a gap
// after now. A negative took says no request was made: the address is freed, its next
// time unchanged. It returns the next time (the Redis clock).
func (s *Servers) Release(ctx context.Context, c ServerClaim, took time.Duration) (time.Time, error) {
	ms := max(took.Milliseconds(), 0)
	if took < 0 {
		ms = -1
	}
	v, err := serverReleaseScript.Run(ctx, s.rdb, []string{ServerKey(s.prefix, c.Addr)},
		c.args(ms, c.token)...).Result()
	if err != nil {
		return time.Time{}, fmt.Errorf("politeness: release address %s: %w", c.Addr, err)
	}
	n, err := strconv.ParseInt(fmt.Sprint(v), 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("politeness: release address %s: unexpected reply %v", c.Addr, v)
	}
	return time.UnixMilli(n), nil
}

// ServerState is what is known of an address, for an operator.
type ServerState struct {
	Addr netip.Addr
	// Known: the address has state (it was requested within the last hour or so).
	Known bool
	// InFlightUntil is set while a request is out (its claim ends by then).
	InFlightUntil time.Time
	Next          time.Time     // no request before then
	LastResponse  time.Duration // the last response time from it
	LastHost      string        // the host last requested at it
}

// Busy reports a request in flight at now.
func (st ServerState) Busy(now time.Time) bool { return st.InFlightUntil.After(now) }

// ReadServer reads an address's state under prefix. It only reads.
func ReadServer(ctx context.Context, rdb redis.UniversalClient, prefix string, addr netip.Addr) (ServerState, error) {
	h, err := rdb.HGetAll(ctx, ServerKey(prefix, addr)).Result()
	if err != nil {
		return ServerState{Addr: addr}, fmt.Errorf("politeness: read address %s: %w", addr, err)
	}
	return serverState(addr, h), nil
}

// ReadServers reads the state of several addresses under prefix in one round trip.
func ReadServers(ctx context.Context, rdb redis.UniversalClient, prefix string, addrs []netip.Addr) (map[netip.Addr]ServerState, error) {
	cmds := make(map[netip.Addr]*redis.MapStringStringCmd, len(addrs))
	_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, a := range addrs {
			if cmds[a] == nil {
				cmds[a] = p.HGetAll(ctx, ServerKey(prefix, a))
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("politeness: read addresses: %w", err)
	}
	out := make(map[netip.Addr]ServerState, len(cmds))
	for a, c := range cmds {
		out[a] = serverState(a, c.Val())
	}
	return out, nil
}

func serverState(addr netip.Addr, h map[string]string) ServerState {
	st := ServerState{Addr: addr}
	ms := func(k string) int64 { n, _ := strconv.ParseInt(h[k], 10, 64); return n }
	st.Known = len(h) > 0
	// One claim in flight (until), or several under a connections limit (cu: the latest
	// of their ends).
	if n := max(ms("until"), ms("cu")); n > 0 {
		st.InFlightUntil = time.UnixMilli(n)
	}
	if n := ms("next"); n > 0 {
		st.Next = time.UnixMilli(n)
	}
	st.LastResponse = time.Duration(ms("rt")) * time.Millisecond
	st.LastHost = h["host"]
	return st
}
