package fetch

import (
	"context"
	"net"
	"net/netip"
)

// A pin sends a request's connection to one address of its host: the address a lease was
// taken on (per-server politeness). A new connection dials exactly that address, and a
// pooled connection to another address of the host is closed instead of used (the
// transport then retries the request on a fresh connection, as it does for any pooled
// connection that fails before a byte is written).
type pin struct {
	host string // the URL's host, without port
	addr netip.Addr
}

type pinKey struct{}

// At returns ctx with the requests made under it to host pinned to addr.
func At(ctx context.Context, host string, addr netip.Addr) context.Context {
	return context.WithValue(ctx, pinKey{}, pin{host: host, addr: addr.Unmap().WithZone("")})
}

func pinOf(ctx context.Context) (pin, bool) {
	p, ok := ctx.Value(pinKey{}).(pin)
	return p, ok && p.addr.IsValid()
}

// pinnedAddress is the address to dial for addr ("host:port") under ctx's pin: the pinned
// address when addr is the pinned host (a dial to a proxy, or to another host, is left
// alone), else addr.
func pinnedAddress(ctx context.Context, addr string) string {
	p, ok := pinOf(ctx)
	if !ok {
		return addr
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil || host != p.host {
		return addr
	}
	return net.JoinHostPort(p.addr.String(), port)
}

// offPin reports a connection that does not go to ctx's pinned address.
func offPin(ctx context.Context, conn net.Conn) bool {
	p, ok := pinOf(ctx)
	if !ok || conn == nil {
		return false
	}
	ip, err := netip.ParseAddr(remoteIP(conn.RemoteAddr()))
	return err != nil || ip.Unmap() != p.addr
}
