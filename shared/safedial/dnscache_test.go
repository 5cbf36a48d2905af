package safedial

import (
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/trawl/trawl/shared/testwait"
)

// dnsFake is an upstream resolver whose answers can change between lookups and which can
// hold every lookup until released.
type dnsFake struct {
	mu      sync.Mutex
	answers map[string][]string // host → addresses; missing = NXDOMAIN; nil slice = failure
	fail    map[string]error
	calls   map[string]int
	hold    chan struct{} // when non-nil, lookups wait for it to close
}

func newDNSFake(answers map[string][]string) *dnsFake {
	return &dnsFake{answers: answers, fail: map[string]error{}, calls: map[string]int{}}
}

func (f *dnsFake) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	f.mu.Lock()
	f.calls[network+" "+host]++
	hold := f.hold
	f.mu.Unlock()
	if hold != nil {
		select {
		case <-hold:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.fail[host]; err != nil {
		return nil, err
	}
	list, ok := f.answers[host]
	if !ok {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	var out []netip.Addr
	for _, s := range list {
		a := netip.MustParseAddr(s)
		if network == "ip4" && !a.Unmap().Is4() || network == "ip6" && !a.Is6() {
			continue
		}
		out = append(out, a)
	}
	return out, nil
}

func (f *dnsFake) set(host string, addrs ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.answers[host] = addrs
}

func (f *dnsFake) count(network, host string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[network+" "+host]
}

type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// results counts OnLookup reports.
type results struct {
	mu sync.Mutex
	n  map[string]int
}

func (r *results) add(s string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.n == nil {
		r.n = map[string]int{}
	}
	r.n[s]++
}

func (r *results) get(s string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n[s]
}

func lookupStrings(t *testing.T, r Resolver, network, host string) ([]string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	addrs, err := r.LookupNetIP(ctx, network, host)
	var out []string
	for _, a := range addrs {
		out = append(out, a.String())
	}
	return out, err
}

func TestCachingResolver(t *testing.T) {
	type step struct {
		advance  time.Duration // clock moves before the lookup
		set      []string      // upstream answer changes to this before the lookup (nil: unchanged)
		host     string
		network  string
		want     string // first address, "" = error
		upstream int    // upstream calls for (network, host) after the step
	}
	cases := []struct {
		name  string
		opts  CacheOptions
		steps []step
	}{
		{"hit within TTL, refreshed after it", CacheOptions{TTL: time.Minute}, []step{
			{host: "a.example", network: "ip", want: "8.8.8.8", upstream: 1},
			{advance: 59 * time.Second, set: []string{"9.9.9.9"}, host: "a.example", network: "ip", want: "8.8.8.8", upstream: 1},
			{advance: time.Second, host: "a.example", network: "ip", want: "9.9.9.9", upstream: 2},
			{host: "A.Example", network: "ip", want: "9.9.9.9", upstream: 2}, // names are case-insensitive
		}},
		{"networks cached apart", CacheOptions{TTL: time.Minute}, []step{
			{host: "dual.example", network: "ip4", want: "1.1.1.1", upstream: 1},
			{host: "dual.example", network: "ip6", want: "2606:4700::1111", upstream: 1},
			{host: "dual.example", network: "ip4", want: "1.1.1.1", upstream: 1},
		}},
		{"negative cached for NegativeTTL", CacheOptions{TTL: time.Minute, NegativeTTL: 10 * time.Second}, []step{
			{host: "gone.example", network: "ip", want: "", upstream: 1},
			{advance: 9 * time.Second, set: []string{"8.8.4.4"}, host: "gone.example", network: "ip", want: "", upstream: 1},
			{advance: time.Second, host: "gone.example", network: "ip", want: "8.8.4.4", upstream: 2},
		}},
		{"negative TTL never exceeds TTL", CacheOptions{TTL: 5 * time.Second, NegativeTTL: time.Hour}, []step{
			{host: "gone.example", network: "ip", want: "", upstream: 1},
			{advance: 5 * time.Second, set: []string{"8.8.4.4"}, host: "gone.example", network: "ip", want: "8.8.4.4", upstream: 2},
		}},
		{"empty answer is a negative result", CacheOptions{TTL: time.Minute, NegativeTTL: time.Second}, []step{
			{set: []string{}, host: "empty.example", network: "ip", want: "", upstream: 1},
			{host: "empty.example", network: "ip", want: "", upstream: 1},
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			up := newDNSFake(map[string][]string{"a.example": {"8.8.8.8"}, "dual.example": {"1.1.1.1", "2606:4700::1111"}})
			clk := &fakeClock{t: time.Unix(1_000_000, 0)}
			c.opts.Now = clk.now
			r := NewCachingResolver(up, c.opts)
			for i, s := range c.steps {
				clk.advance(s.advance)
				if s.set != nil {
					up.set(s.host, s.set...)
				}
				got, err := lookupStrings(t, r, s.network, s.host)
				switch {
				case s.want == "" && err == nil:
					t.Fatalf("step %d: got %v, want an error", i, got)
				case s.want != "" && (err != nil || len(got) == 0 || got[0] != s.want):
					t.Fatalf("step %d: got %v, %v; want %s", i, got, err, s.want)
				}
				if n := up.count(s.network, strings.ToLower(s.host)); n != s.upstream {
					t.Fatalf("step %d: %d upstream lookups, want %d", i, n, s.upstream)
				}
			}
		})
	}

	t.Run("the error of a negative hit is the upstream one", func(t *testing.T) {
		up := newDNSFake(map[string][]string{})
		r := NewCachingResolver(up, CacheOptions{})
		for range 2 {
			_, err := lookupStrings(t, r, "ip", "nowhere.example")
			var de *net.DNSError
			if !errors.As(err, &de) || !de.IsNotFound {
				t.Fatalf("err = %v, want a not-found DNS error", err)
			}
		}
		if n := up.count("ip", "nowhere.example"); n != 1 {
			t.Errorf("%d upstream lookups, want 1", n)
		}
	})

	t.Run("bounded, least recently used evicted", func(t *testing.T) {
		up := newDNSFake(map[string][]string{"a": {"8.8.8.8"}, "b": {"8.8.8.8"}, "c": {"8.8.8.8"}})
		r := NewCachingResolver(up, CacheOptions{MaxEntries: 2})
		lookupStrings(t, r, "ip", "a")
		lookupStrings(t, r, "ip", "b")
		lookupStrings(t, r, "ip", "a") // a is now more recent than b
		lookupStrings(t, r, "ip", "c") // evicts b
		if r.Len() != 2 {
			t.Errorf("Len = %d, want 2", r.Len())
		}
		lookupStrings(t, r, "ip", "a")
		lookupStrings(t, r, "ip", "b")
		if a, b := up.count("ip", "a"), up.count("ip", "b"); a != 1 || b != 2 {
			t.Errorf("upstream lookups a=%d b=%d, want 1 and 2", a, b)
		}
	})

	t.Run("callers own the returned slice", func(t *testing.T) {
		up := newDNSFake(map[string][]string{"a": {"8.8.8.8"}})
		r := NewCachingResolver(up, CacheOptions{})
		addrs, _ := r.LookupNetIP(context.Background(), "ip", "a")
		addrs[0] = netip.MustParseAddr("127.0.0.1")
		if got, _ := lookupStrings(t, r, "ip", "a"); len(got) != 1 || got[0] != "8.8.8.8" {
			t.Errorf("cache corrupted by a caller: %v", got)
		}
	})
}

// TestCachingResolverSingleflight: 64 concurrent lookups of one name make one upstream
// query; a caller whose context ends stops waiting without cancelling the shared lookup.
func TestCachingResolverSingleflight(t *testing.T) {
	up := newDNSFake(map[string][]string{"busy.example": {"8.8.8.8"}})
	up.hold = make(chan struct{})
	var res results
	r := NewCachingResolver(up, CacheOptions{OnLookup: res.add})

	const n = 64
	var wg sync.WaitGroup
	var ok atomic.Int32
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if got, err := lookupStrings(t, r, "ip", "busy.example"); err == nil && len(got) == 1 && got[0] == "8.8.8.8" {
				ok.Add(1)
			}
		}()
	}
	// One impatient caller gives up while the lookup is held.
	impatient, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := r.LookupNetIP(impatient, "ip", "busy.example")
		errc <- err
	}()
	testwait.Eventually(t, 5*time.Second, "every lookup to reach the cache", func() bool { return res.get("miss")+res.get("shared") == n+1 })
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("impatient caller: %v, want context.Canceled", err)
	}
	close(up.hold)
	wg.Wait()
	if ok.Load() != n {
		t.Errorf("%d of %d callers got the address", ok.Load(), n)
	}
	if c := up.count("ip", "busy.example"); c != 1 {
		t.Errorf("%d upstream lookups, want 1", c)
	}
	if res.get("miss") != 1 || res.get("shared") != n {
		t.Errorf("miss %d shared %d, want 1 and %d", res.get("miss"), res.get("shared"), n)
	}
	if _, err := lookupStrings(t, r, "ip", "busy.example"); err != nil || res.get("hit") != 1 {
		t.Errorf("after the shared lookup: err %v, hits %d, want a cache hit", err, res.get("hit"))
	}
}

// TestCachingResolverLookupTimeout: the shared lookup runs under its own deadline, so a
// resolver that never answers does not hold callers (or the entry) forever.
func TestCachingResolverLookupTimeout(t *testing.T) {
	up := newDNSFake(map[string][]string{"slow.example": {"8.8.8.8"}})
	up.hold = make(chan struct{}) // never closed: only the lookup's deadline ends it
	r := NewCachingResolver(up, CacheOptions{LookupTimeout: 50 * time.Millisecond})
	if _, err := lookupStrings(t, r, "ip", "slow.example"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want the lookup's deadline", err)
	}
}

// TestDialCachedAddressRechecked: the policy applies to cached addresses on every dial, so
// one cache serves dialers of different policies, and a name rebound to a blocked address
// is refused once the cache picks the new answer up.
func TestDialCachedAddressRechecked(t *testing.T) {
	port, accepted := listen(t)
	up := newDNSFake(map[string][]string{"site.example": {"127.0.0.1"}})
	clk := &fakeClock{t: time.Unix(1_000_000, 0)}
	cache := NewCachingResolver(up, CacheOptions{TTL: time.Minute, Now: clk.now})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()

	allow, _ := ParseCIDRs([]string{"127.0.0.0/8"})
	lax := &Dialer{Policy: NewPolicy(allow...), Resolver: cache, Timeout: time.Second}
	conn, err := lax.DialContext(ctx, "tcp", "site.example:"+port)
	if err != nil {
		t.Fatalf("allowed dial: %v", err)
	}
	io.ReadAll(conn)
	conn.Close()

	strict := &Dialer{Policy: NewPolicy(), Resolver: cache, Timeout: time.Second}
	if _, err := strict.DialContext(ctx, "tcp", "site.example:"+port); !errors.Is(err, ErrBlockedAddress) {
		t.Fatalf("strict dial of a cached loopback address: %v, want blocked", err)
	}
	if n := up.count("ip", "site.example"); n != 1 {
		t.Fatalf("%d upstream lookups, want 1 (the strict dial must have used the cache)", n)
	}

	// Rebinding: the name moves to the metadata address; within the TTL the old answer is
	// used, after it the new one, which the lax policy (loopback only) refuses.
	up.set("site.example", "169.254.169.254")
	clk.advance(time.Minute)
	if _, err := lax.DialContext(ctx, "tcp", "site.example:"+port); !errors.Is(err, ErrBlockedAddress) {
		t.Fatalf("dial after rebinding: %v, want blocked", err)
	}
	if n := accepted.Load(); n != 1 {
		t.Errorf("server accepted %d connections, want 1", n)
	}
}
