package fetch

import (
	"context"
	"net"
	"net/netip"

	"github.com/trawl/trawl/shared/safedial"
)

// A request pinned to an address (safedial.Pin: the address a lease was taken on) dials
// exactly that address, and a pooled connection to another address of the host is closed
// instead of used (the transport then retries the request on a fresh connection, as it
// does for any pooled connection that fails before a byte is written).

// offPin reports a connection that does not go to ctx's pinned address.
func offPin(ctx context.Context, conn net.Conn) bool {
	addr, ok := safedial.Pinned(ctx)
	if !ok || conn == nil {
		return false
	}
	ip, err := netip.ParseAddr(remoteIP(conn.RemoteAddr()))
	return err != nil || ip.Unmap() != addr
}
