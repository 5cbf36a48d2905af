// Package safedial is the fetcher's address policy: a dialer that resolves a host itself,
// refuses every address that is not publicly routable, and connects only to an address it
// has checked. Because the check happens after DNS resolution and the connection goes to the
// very address checked, a name that resolves to 127.0.0.1 or 169.254.169.254 (DNS
// rebinding, or a public page redirecting to an internal name) is refused on every
// connection: each page request, each redirect a crawl follows, each robots.txt hop.
//
// Resolution may go through a CachingResolver (TRAWL_DNS_TTL). It caches raw answers, not
// verdicts: every address, cached or fresh, is checked by the policy on every dial, so an
// allow-list change applies at once and a name rebound to a blocked address is refused as
// soon as the new answer is seen (at the latest after the TTL).
//
// With an HTTP proxy configured the transport dials the proxy, not the target, so the
// policy applies to the proxy's address and the proxy resolves the target; such a proxy
// must enforce its own policy (and its address must be allowed with TRAWL_ALLOW_CIDRS if
// it is private).
package safedial

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"syscall"
	"time"
)

// ErrBlockedAddress is wrapped by every refusal. It is permanent: the same URL would be
// refused again.
var ErrBlockedAddress = errors.New("safedial: blocked address")

// BlockedError says which address was refused and why.
type BlockedError struct {
	Host   string     // the name dialled ("" when dialled by address)
	Addr   netip.Addr // the refused address
	Reason string     // the range it fell in, e.g. "loopback 127.0.0.0/8"
}

func (e *BlockedError) Error() string {
	if e.Host != "" && e.Host != e.Addr.String() {
		return fmt.Sprintf("safedial: %s resolves to %s (%s): blocked address", e.Host, e.Addr, e.Reason)
	}
	return fmt.Sprintf("safedial: %s (%s): blocked address", e.Addr, e.Reason)
}

func (e *BlockedError) Unwrap() error { return ErrBlockedAddress }

type blockedRange struct {
	prefix netip.Prefix
	reason string
}

func mustRanges(spec ...string) []blockedRange {
	out := make([]blockedRange, 0, len(spec)/2)
	for i := 0; i < len(spec); i += 2 {
		out = append(out, blockedRange{netip.MustParsePrefix(spec[i]), spec[i+1] + " " + spec[i]})
	}
	return out
}

// blocked lists the ranges that are not publicly routable, from the IANA IPv4 and IPv6
// special-purpose address registries (RFC 6890 and successors). Ranges that embed an IPv4
// address (IPv4-mapped, NAT64, 6to4) are not here: the embedded address is checked instead.
var blocked = mustRanges(
	// IPv4
	"0.0.0.0/8", "unspecified (this network)",
	"10.0.0.0/8", "private",
	"100.64.0.0/10", "shared address space (CGNAT)",
	"127.0.0.0/8", "loopback",
	"169.254.0.0/16", "link-local (cloud metadata)",
	"172.16.0.0/12", "private",
	"192.0.0.0/24", "IETF protocol assignments",
	"192.0.2.0/24", "documentation (TEST-NET-1)",
	"192.88.99.0/24", "6to4 relay anycast",
	"192.168.0.0/16", "private",
	"198.18.0.0/15", "benchmarking",
	"198.51.100.0/24", "documentation (TEST-NET-2)",
	"203.0.113.0/24", "documentation (TEST-NET-3)",
	"224.0.0.0/4", "multicast",
	"255.255.255.255/32", "broadcast",
	"240.0.0.0/4", "reserved",
	// IPv6
	"::/128", "unspecified",
	"::1/128", "loopback",
	"::/96", "IPv4-compatible (deprecated)",
	"64:ff9b:1::/48", "local-use NAT64",
	"100::/64", "discard-only",
	"2001::/23", "IETF protocol assignments",
	"2001:db8::/32", "documentation",
	"3fff::/20", "documentation",
	"5f00::/16", "segment routing SIDs",
	"fc00::/7", "unique local (private)",
	"fe80::/10", "link-local",
	"fec0::/10", "site-local (deprecated)",
	"ff00::/8", "multicast",
)

var (
	nat64     = netip.MustParsePrefix("64:ff9b::/96")
	sixToFour = netip.MustParsePrefix("2002::/16")
)

// Policy decides which addresses may be dialled. The zero value and nil both block every
// non-public address.
type Policy struct {
	allow []netip.Prefix
}

// NewPolicy returns a policy that also lets the given ranges through (tests and local
// demos allow 127.0.0.0/8).
func NewPolicy(allow ...netip.Prefix) *Policy {
	out := make([]netip.Prefix, 0, len(allow))
	for _, p := range allow {
		out = append(out, p.Masked())
	}
	return &Policy{allow: out}
}

// ParseCIDRs parses CIDRs ("127.0.0.0/8", "fd00::/8") or single addresses (taken as /32 or
// /128), as TRAWL_ALLOW_CIDRS lists them.
func ParseCIDRs(list []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	var errs []error
	for _, s := range list {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		if p, err := netip.ParsePrefix(s); err == nil {
			out = append(out, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(s)
		if err != nil {
			errs = append(errs, fmt.Errorf("%q is neither a CIDR nor an address", s))
			continue
		}
		a = a.Unmap()
		out = append(out, netip.PrefixFrom(a, a.BitLen()))
	}
	return out, errors.Join(errs...)
}

// Check returns nil if ip may be dialled, else a *BlockedError.
func (p *Policy) Check(ip netip.Addr) error {
	ip = ip.WithZone("").Unmap()
	if !ip.IsValid() {
		return &BlockedError{Addr: ip, Reason: "invalid address"}
	}
	if p != nil {
		for _, a := range p.allow {
			if a.Contains(ip) {
				return nil
			}
		}
	}
	if ip.Is6() {
		if v4, how, ok := embeddedIPv4(ip); ok {
			if err := p.Check(v4); err != nil {
				return &BlockedError{Addr: ip, Reason: how + " of " + err.(*BlockedError).Reason}
			}
			return nil
		}
	}
	for _, r := range blocked {
		if r.prefix.Contains(ip) {
			return &BlockedError{Addr: ip, Reason: r.reason}
		}
	}
	return nil
}

// embeddedIPv4 extracts the IPv4 address that a NAT64 (64:ff9b::/96) or 6to4 (2002::/16)
// address leads to: where the packet ends up is what matters.
func embeddedIPv4(ip netip.Addr) (netip.Addr, string, bool) {
	b := ip.As16()
	switch {
	case nat64.Contains(ip):
		return netip.AddrFrom4([4]byte(b[12:16])), "NAT64", true
	case sixToFour.Contains(ip):
		return netip.AddrFrom4([4]byte(b[2:6])), "6to4", true
	}
	return netip.Addr{}, "", false
}

// Resolver looks up a host's addresses; *net.Resolver is one.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Dialer dials TCP connections under a Policy.
type Dialer struct {
	Policy   *Policy
	Resolver Resolver      // nil: net.DefaultResolver
	Timeout  time.Duration // per connection attempt; 0: no limit beyond ctx
	// MaxAttempts bounds how many of a host's allowed addresses are tried (default 3).
	MaxAttempts int
}

// DialContext resolves address's host, drops every address the policy refuses, and
// connects to the first allowed address that answers. If every address is refused the
// error is the first *BlockedError. It fits http.Transport.DialContext.
func (d *Dialer) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(address)
	if err != nil {
		return nil, fmt.Errorf("safedial: %w", err)
	}
	allowed, err := d.allowed(ctx, network, host)
	if err != nil {
		return nil, err
	}
	max := d.MaxAttempts
	if max <= 0 {
		max = 3
	}
	nd := &net.Dialer{Timeout: d.Timeout, KeepAlive: 30 * time.Second, ControlContext: d.control}
	var lastErr error
	for i, a := range allowed {
		if i == max {
			break
		}
		conn, err := nd.DialContext(ctx, network, net.JoinHostPort(a.String(), port))
		if err == nil {
			return conn, nil
		}
		lastErr = err
		if ctx.Err() != nil {
			break
		}
	}
	return nil, lastErr
}

// Pick is the address a dial to host would try first: resolved as DialContext resolves
// it (through the same cache) and allowed by the policy. Dialling exactly that address
// (an address literal) keeps a request where Pick said it would go. The error is
// DialContext's for the same host: a failed lookup, or the first *BlockedError.
func (d *Dialer) Pick(ctx context.Context, host string) (netip.Addr, error) {
	allowed, err := d.allowed(ctx, "tcp", host)
	if err != nil {
		return netip.Addr{}, err
	}
	return allowed[0], nil
}

// allowed resolves host (an address literal stands for itself) and keeps the addresses
// the policy allows, in the resolver's order; at least one, or an error.
func (d *Dialer) allowed(ctx context.Context, network, host string) ([]netip.Addr, error) {
	var addrs []netip.Addr
	if ip, perr := netip.ParseAddr(host); perr == nil {
		addrs = []netip.Addr{ip}
	} else {
		r := d.Resolver
		if r == nil {
			r = net.DefaultResolver
		}
		lookup := "ip"
		switch network {
		case "tcp4":
			lookup = "ip4"
		case "tcp6":
			lookup = "ip6"
		}
		var err error
		if addrs, err = r.LookupNetIP(ctx, lookup, host); err != nil {
			return nil, fmt.Errorf("safedial: resolve %s: %w", host, err)
		}
		if len(addrs) == 0 {
			return nil, fmt.Errorf("safedial: resolve %s: %w", host, &net.DNSError{Err: "no addresses", Name: host, IsNotFound: true})
		}
	}
	var firstBlocked error
	allowed := addrs[:0:0]
	for _, a := range addrs {
		if err := d.Policy.Check(a); err != nil {
			if firstBlocked == nil {
				be := err.(*BlockedError)
				be.Host = host
				firstBlocked = be
			}
			continue
		}
		allowed = append(allowed, a.WithZone("").Unmap())
	}
	if len(allowed) == 0 {
		return nil, firstBlocked
	}
	return allowed, nil
}

// control re-checks the address the socket is about to connect to. DialContext already
// dials only checked addresses; this guards against a future code path that does not.
func (d *Dialer) control(_ context.Context, _, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("safedial: control %q: %w", address, err)
	}
	return d.Policy.Check(ap.Addr())
}
