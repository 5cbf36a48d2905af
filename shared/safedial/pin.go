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

// OffPin reports a connection that does not go to ctx's pinned address: a pooled
// connection of the pinned host to another of its addresses (it moved, or has several).
// A client closes it before writing anything (httptrace GotConn), so that the transport
// dials the pinned address instead, as it does for any pooled connection that fails
// before a byte is written (an HTTP/2 connection, which it does not retry so, fails the
// request: never a request to an unclaimed address).
func OffPin(ctx context.Context, conn net.Conn) bool {
	addr, ok := Pinned(ctx)
	if !ok || conn == nil {
		return false
	}
	if tcp, ok := conn.RemoteAddr().(*net.TCPAddr); ok {
		return tcp.AddrPort().Addr().Unmap() != addr
	}
	ap, err := netip.ParseAddrPort(conn.RemoteAddr().String())
	return err != nil || ap.Addr().Unmap() != addr
}
