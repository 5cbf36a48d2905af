package safedial_test

import (
	"context"
	"net"
	"net/netip"
	"testing"

	"github.com/trawl/trawl/shared/safedial"
)

// TestPin: a pin redirects the dials to its host, however the host is spelt, and nothing
// else; a connection elsewhere than the pinned address is off the pin.
func TestPin(t *testing.T) {
	addr := netip.MustParseAddr("127.0.0.2")
	pinned := safedial.Pin(context.Background(), "a.test", netip.MustParseAddr("::ffff:127.0.0.2"))
	tests := []struct {
		name string
		ctx  context.Context
		dial string
		want string
	}{
		{"the pinned host", pinned, "a.test:80", "127.0.0.2:80"},
		{"the pinned host, spelt otherwise", pinned, "A.Test:443", "127.0.0.2:443"},
		{"another host (a proxy, a redirect's target)", pinned, "proxy.test:3128", "proxy.test:3128"},
		{"no pin", context.Background(), "a.test:80", "a.test:80"},
		{"unpinned", safedial.Unpin(pinned), "a.test:80", "a.test:80"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := safedial.PinnedAddress(tt.ctx, tt.dial); got != tt.want {
				t.Errorf("dial %s: %s, want %s", tt.dial, got, tt.want)
			}
		})
	}
	if got, ok := safedial.Pinned(pinned); !ok || got != addr {
		t.Errorf("Pinned: %v %v, want %s", got, ok, addr)
	}
	t.Run("off the pin", func(t *testing.T) {
		for _, tt := range []struct {
			remote string
			off    bool
		}{{"127.0.0.2", false}, {"127.0.0.1", true}} {
			c := fakeConn{remote: &net.TCPAddr{IP: net.ParseIP(tt.remote), Port: 80}}
			if got := safedial.OffPin(pinned, c); got != tt.off {
				t.Errorf("a connection to %s: off the pin %v, want %v", tt.remote, got, tt.off)
			}
			if safedial.OffPin(context.Background(), c) {
				t.Errorf("a connection to %s is off a pin that is not there", tt.remote)
			}
		}
	})
}

// fakeConn is a connection that only has a remote address: OffPin reads nothing else.
type fakeConn struct {
	net.Conn
	remote net.Addr
}

func (c fakeConn) RemoteAddr() net.Addr { return c.remote }
