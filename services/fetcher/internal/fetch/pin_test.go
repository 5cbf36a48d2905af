package fetch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"testing"
	"time"

	"github.com/trawl/trawl/shared/safedial"
)

// TestPinnedRequestsGoToTheirAddress: a host served at two addresses, requested in turn
// pinned to each. Every request must reach the address it is pinned to, although the
// kept-alive connection of the previous request (to the other address) is pooled under
// the same host.
func TestPinnedRequestsGoToTheirAddress(t *testing.T) {
	a, b := netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("127.0.0.2")
	port := listenPair(t, a, b)
	cfg := testConfig("127.0.0.0/8")
	d := &safedial.Dialer{Policy: safedial.NewPolicy(netip.MustParsePrefix("127.0.0.0/8")),
		Resolver: staticResolver{"moving.test": a.String()}, Timeout: time.Second}
	cfg.Dial = d.DialContext
	c := New(cfg)
	defer c.CloseIdle()
	url := "http://moving.test:" + strconv.Itoa(port) + "/"

	for i, want := range []netip.Addr{a, b, b, a, b} {
		resp, err := c.Get(safedial.Pin(context.Background(), "moving.test", want), url)
		if err != nil {
			t.Fatalf("request %d pinned to %s: %v", i, want, err)
		}
		if got := string(resp.Body); got != want.String() {
			t.Fatalf("request %d pinned to %s was served at %s (remote %s)", i, want, got, resp.RemoteIP)
		}
		if resp.RemoteIP != want.String() {
			t.Fatalf("request %d: remote %s, want %s", i, resp.RemoteIP, want)
		}
	}
	// Unpinned, the host is dialled by name (or a pooled connection is used): no pin leaks.
	if _, err := c.Get(context.Background(), url); err != nil {
		t.Fatal(err)
	}
}

// listenPair serves, on one port of each address, a page naming the address that served it.
func listenPair(t *testing.T, addrs ...netip.Addr) int {
	t.Helper()
	for range 20 {
		l0, err := net.Listen("tcp4", net.JoinHostPort(addrs[0].String(), "0"))
		if err != nil {
			t.Fatal(err)
		}
		port := l0.Addr().(*net.TCPAddr).Port
		ls := []net.Listener{l0}
		for _, a := range addrs[1:] {
			l, err := net.Listen("tcp4", net.JoinHostPort(a.String(), strconv.Itoa(port)))
			if err != nil {
				break
			}
			ls = append(ls, l)
		}
		if len(ls) < len(addrs) {
			for _, l := range ls {
				l.Close()
			}
			continue
		}
		for i, l := range ls {
			name := addrs[i].String()
			srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				_, _ = io.WriteString(w, name)
			})}
			go func() {
				if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
					t.Error(err)
				}
			}()
			t.Cleanup(func() { srv.Close() })
		}
		return port
	}
	t.Fatal(fmt.Errorf("no port free on all of %v", addrs))
	return 0
}
