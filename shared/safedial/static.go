package safedial

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
)

// StaticResolver answers the names it lists from its map and asks Next for every other
// (TRAWL_RESOLVE: name-based virtual hosts of a test web on one loopback address). Its
// answers are checked by the address policy on every dial like any other.
type StaticResolver struct {
	Names map[string][]netip.Addr // lower-case name → addresses
	Next  Resolver                // nil: net.DefaultResolver
}

// LookupNetIP answers a listed name with its addresses of the family asked for.
func (r *StaticResolver) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	addrs, ok := r.Names[strings.ToLower(host)]
	if !ok {
		next := r.Next
		if next == nil {
			next = net.DefaultResolver
		}
		return next.LookupNetIP(ctx, network, host)
	}
	out := make([]netip.Addr, 0, len(addrs))
	for _, a := range addrs {
		if network == "ip" || (network == "ip4") == a.Is4() {
			out = append(out, a)
		}
	}
	if len(out) == 0 {
		return nil, &net.DNSError{Err: "no addresses", Name: host, IsNotFound: true}
	}
	return out, nil
}

// ParseStatic reads "name=address" entries (a name listed again gets another address)
// as TRAWL_RESOLVE lists them.
func ParseStatic(list []string) (map[string][]netip.Addr, error) {
	out := map[string][]netip.Addr{}
	var errs []error
	for _, e := range list {
		e = strings.TrimSpace(e)
		if e == "" {
			continue
		}
		name, addr, ok := strings.Cut(e, "=")
		a, err := netip.ParseAddr(strings.TrimSpace(addr))
		name = strings.ToLower(strings.TrimSpace(name))
		if !ok || name == "" || err != nil {
			errs = append(errs, fmt.Errorf("%q: want name=address", e))
			continue
		}
		a = a.Unmap()
		if !slices.Contains(out[name], a) {
			out[name] = append(out[name], a)
		}
	}
	return out, errors.Join(errs...)
}
