package safedial

import (
	"context"
	"net"
	"net/netip"
	"strings"
)

// A pin sends a request's connections to one address of its host: the address checked and
// claimed for it (per-server politeness). Every process that claims a server address dials
// under the same pin, so a request reaches the address its claim was taken on whichever
// process makes it.
type pin struct {
	host string // the URL's host, without port
	addr netip.Addr
}

type pinKey struct{}

// Pin returns ctx with the dials made under it to host pinned to addr.
func Pin(ctx context.Context, host string, addr netip.Addr) context.Context {
	return context.WithValue(ctx, pinKey{}, pin{host: host, addr: addr.Unmap().WithZone("")})
}

// Unpin returns ctx without its pin: for a request whose connection goes to a proxy,
// which connects to the server itself.
func Unpin(ctx context.Context) context.Context {
	return context.WithValue(ctx, pinKey{}, pin{})
}

// Pinned is ctx's pinned address, if it has one.
func Pinned(ctx context.Context) (netip.Addr, bool) {
	p, ok := ctx.Value(pinKey{}).(pin)
	return p.addr, ok && p.addr.IsValid()
}

// PinnedAddress is the address to dial for addr ("host:port") under ctx's pin: the pinned
// address when addr's host is the pinned host (a dial to a proxy, or to another host, is
// left alone), else addr. The dial then checks that address as any other.
func PinnedAddress(ctx context.Context, addr string) string {
	p, ok := ctx.Value(pinKey{}).(pin)
	if !ok || !p.addr.IsValid() {
		return addr
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil || !strings.EqualFold(host, p.host) {
		return addr
	}
	return net.JoinHostPort(p.addr.String(), port)
}
