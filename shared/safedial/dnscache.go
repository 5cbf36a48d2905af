package safedial

import (
	"container/list"
	"context"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"
)

// CacheOptions configure a CachingResolver. Zero values take the defaults noted.
type CacheOptions struct {
	// TTL is how long a successful lookup is reused (default 5m). The system resolver does
	// not report record TTLs, so this caps staleness instead: a host that moved is found
	// again within TTL, and a rebinding to a blocked address is refused anyway, because
	// the dialer checks every address, cached or not, on every dial.
	TTL time.Duration
	// NegativeTTL is how long a failed lookup is reused (default 30s, at most TTL): long
	// enough that a burst of tasks for a dead name costs one query, short enough that a
	// transient failure does not linger.
	NegativeTTL time.Duration
	// MaxEntries bounds the cache (default 10000); the least recently used entry goes first.
	MaxEntries int
	// LookupTimeout bounds one upstream lookup (default 10s). The lookup is shared by every
	// caller waiting on the same name, so it runs under its own deadline rather than the
	// first caller's context; each caller still stops waiting when its own context ends.
	LookupTimeout time.Duration
	// OnLookup, if set, is told how each lookup was answered: "hit", "negative" (a cached
	// failure), "miss" (went upstream) or "shared" (joined another caller's lookup).
	OnLookup func(result string)
	Now      func() time.Time
}

// CachingResolver is a Resolver that remembers answers per (network, host) for a bounded
// time and number of names, and resolves each name once however many callers ask at the
// same time. It stores the addresses as resolved, unfiltered: the address policy is
// applied by the Dialer on every dial, so a change of policy takes effect at once.
type CachingResolver struct {
	up Resolver
	o  CacheOptions

	mu       sync.Mutex
	order    *list.List // of *dnsEntry, front = most recently used
	entries  map[dnsKey]*list.Element
	inflight map[dnsKey]*dnsCall
}

type dnsKey struct{ network, host string }

type dnsEntry struct {
	key   dnsKey
	addrs []netip.Addr
	err   error
	exp   time.Time
}

// dnsCall is one upstream lookup in progress; done closes when addrs/err are set.
type dnsCall struct {
	done  chan struct{}
	addrs []netip.Addr
	err   error
}

// NewCachingResolver caches the answers of up (net.DefaultResolver when nil).
func NewCachingResolver(up Resolver, o CacheOptions) *CachingResolver {
	if up == nil {
		up = net.DefaultResolver
	}
	if o.TTL <= 0 {
		o.TTL = 5 * time.Minute
	}
	if o.NegativeTTL <= 0 {
		o.NegativeTTL = 30 * time.Second
	}
	o.NegativeTTL = min(o.NegativeTTL, o.TTL)
	if o.MaxEntries <= 0 {
		o.MaxEntries = 10000
	}
	if o.LookupTimeout <= 0 {
		o.LookupTimeout = 10 * time.Second
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.OnLookup == nil {
		o.OnLookup = func(string) {}
	}
	return &CachingResolver{
		up:       up,
		o:        o,
		order:    list.New(),
		entries:  make(map[dnsKey]*list.Element),
		inflight: make(map[dnsKey]*dnsCall),
	}
}

// LookupNetIP answers from the cache when it can, else resolves through the upstream
// resolver, sharing one lookup among concurrent callers. The returned slice is the
// caller's own.
func (c *CachingResolver) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	key := dnsKey{network, strings.ToLower(host)}
	c.mu.Lock()
	if el, ok := c.entries[key]; ok {
		e := el.Value.(*dnsEntry)
		if c.o.Now().Before(e.exp) {
			c.order.MoveToFront(el)
			c.mu.Unlock()
			if e.err != nil {
				c.o.OnLookup("negative")
				return nil, e.err
			}
			c.o.OnLookup("hit")
			return slices.Clone(e.addrs), nil
		}
		c.order.Remove(el)
		delete(c.entries, key)
	}
	call, joined := c.inflight[key]
	if !joined {
		call = &dnsCall{done: make(chan struct{})}
		c.inflight[key] = call
		go c.resolve(key, call)
	}
	c.mu.Unlock()
	if joined {
		c.o.OnLookup("shared")
	} else {
		c.o.OnLookup("miss")
	}

	select {
	case <-call.done:
		if call.err != nil {
			return nil, call.err
		}
		return slices.Clone(call.addrs), nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// resolve runs one upstream lookup, detached from any caller, and caches its result.
func (c *CachingResolver) resolve(key dnsKey, call *dnsCall) {
	ctx, cancel := context.WithTimeout(context.Background(), c.o.LookupTimeout)
	defer cancel()
	addrs, err := c.up.LookupNetIP(ctx, key.network, key.host)
	if err == nil && len(addrs) == 0 {
		err = &net.DNSError{Err: "no addresses", Name: key.host, IsNotFound: true}
	}
	call.addrs, call.err = addrs, err

	ttl := c.o.TTL
	if err != nil {
		ttl = c.o.NegativeTTL
	}
	c.mu.Lock()
	delete(c.inflight, key)
	c.entries[key] = c.order.PushFront(&dnsEntry{key: key, addrs: addrs, err: err, exp: c.o.Now().Add(ttl)})
	for c.order.Len() > c.o.MaxEntries {
		old := c.order.Back()
		c.order.Remove(old)
		delete(c.entries, old.Value.(*dnsEntry).key)
	}
	c.mu.Unlock()
	close(call.done)
}

// Len is the number of cached names (expired ones included until they are next asked for
// or evicted).
func (c *CachingResolver) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.order.Len()
}
