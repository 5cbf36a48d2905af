package safedial

import (
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestCheck(t *testing.T) {
	cases := []struct {
		addr   string
		reason string // "" = allowed
	}{
		// IPv4 special-purpose ranges, each at an edge.
		{"0.0.0.0", "unspecified"},
		{"0.255.255.255", "unspecified"},
		{"10.0.0.1", "private"},
		{"10.255.255.255", "private"},
		{"100.64.0.1", "CGNAT"},
		{"100.127.255.255", "CGNAT"},
		{"127.0.0.1", "loopback"},
		{"127.255.255.254", "loopback"},
		{"169.254.169.254", "link-local"},
		{"169.254.0.1", "link-local"},
		{"172.16.0.1", "private"},
		{"172.31.255.255", "private"},
		{"192.0.0.8", "IETF"},
		{"192.0.2.10", "documentation"},
		{"192.88.99.1", "6to4 relay"},
		{"192.168.1.1", "private"},
		{"198.18.0.1", "benchmarking"},
		{"198.19.255.255", "benchmarking"},
		{"198.51.100.7", "documentation"},
		{"203.0.113.9", "documentation"},
		{"224.0.0.1", "multicast"},
		{"239.255.255.250", "multicast"},
		{"240.0.0.1", "reserved"},
		{"255.255.255.255", "broadcast"},
		// Public IPv4, including the neighbours of blocked ranges.
		{"8.8.8.8", ""},
		{"1.1.1.1", ""},
		{"9.255.255.255", ""},
		{"11.0.0.0", ""},
		{"100.63.255.255", ""},
		{"100.128.0.0", ""},
		{"126.255.255.255", ""},
		{"128.0.0.0", ""},
		{"169.253.255.255", ""},
		{"172.15.255.255", ""},
		{"172.32.0.0", ""},
		{"192.0.1.1", ""},
		{"192.167.255.255", ""},
		{"192.169.0.0", ""},
		{"198.17.255.255", ""},
		{"198.20.0.0", ""},
		{"223.255.255.255", ""},
		// IPv6.
		{"::", "unspecified"},
		{"::1", "loopback"},
		{"::7f00:1", "IPv4-compatible"},
		{"fc00::1", "unique local"},
		{"fd12:3456::1", "unique local"},
		{"fe80::1", "link-local"},
		{"fe80::1%eth0", "link-local"},
		{"febf::1", "link-local"},
		{"fec0::1", "site-local"},
		{"ff02::1", "multicast"},
		{"ff0e::1", "multicast"},
		{"2001:db8::1", "documentation"},
		{"3fff::1", "documentation"},
		{"2001::1", "IETF"},
		{"2001:2::1", "IETF"},
		{"100::1", "discard"},
		{"64:ff9b:1::1", "local-use NAT64"},
		{"5f00::1", "segment routing"},
		{"2606:4700:4700::1111", ""},
		{"2a00:1450:4001:80b::200e", ""},
		{"2001:200::1", ""},
		{"fbff:ffff::1", ""},
		// Addresses that embed an IPv4 address are judged by it.
		{"::ffff:127.0.0.1", "loopback"},
		{"::ffff:10.1.2.3", "private"},
		{"::ffff:169.254.169.254", "link-local"},
		{"::ffff:8.8.8.8", ""},
		{"64:ff9b::7f00:1", "NAT64 of loopback"},
		{"64:ff9b::a9fe:a9fe", "NAT64 of link-local"},
		{"64:ff9b::808:808", ""},
		{"2002:7f00:1::1", "6to4 of loopback"},
		{"2002:c0a8:101::1", "6to4 of private"},
		{"2002:808:808::1", ""},
	}
	p := NewPolicy()
	for _, c := range cases {
		t.Run(c.addr, func(t *testing.T) {
			err := p.Check(netip.MustParseAddr(c.addr))
			if c.reason == "" {
				if err != nil {
					t.Fatalf("Check(%s) = %v, want allowed", c.addr, err)
				}
				return
			}
			var be *BlockedError
			if !errors.As(err, &be) || !errors.Is(err, ErrBlockedAddress) {
				t.Fatalf("Check(%s) = %v, want a *BlockedError wrapping ErrBlockedAddress", c.addr, err)
			}
			if !strings.Contains(be.Reason, c.reason) {
				t.Errorf("Check(%s) reason %q, want it to mention %q", c.addr, be.Reason, c.reason)
			}
		})
	}
	t.Run("nil policy blocks", func(t *testing.T) {
		var nilPolicy *Policy
		if err := nilPolicy.Check(netip.MustParseAddr("127.0.0.1")); !errors.Is(err, ErrBlockedAddress) {
			t.Errorf("nil policy allowed loopback: %v", err)
		}
	})
	t.Run("invalid address blocks", func(t *testing.T) {
		if err := p.Check(netip.Addr{}); !errors.Is(err, ErrBlockedAddress) {
			t.Errorf("zero Addr allowed: %v", err)
		}
	})
}

func TestAllowList(t *testing.T) {
	allow, err := ParseCIDRs([]string{"127.0.0.0/8", " fd00::/8", "10.1.2.3", "192.168.7.1/24"})
	if err != nil {
		t.Fatal(err)
	}
	p := NewPolicy(allow...)
	cases := []struct {
		addr    string
		allowed bool
	}{
		{"127.0.0.1", true},
		{"127.9.9.9", true},
		{"::ffff:127.0.0.1", true}, // mapped form of an allowed address
		{"64:ff9b::7f00:1", true},  // NAT64 of an allowed address
		{"::1", false},             // IPv6 loopback is not 127.0.0.0/8
		{"fd00::1", true},
		{"fc00::1", false},
		{"10.1.2.3", true},
		{"10.1.2.4", false},
		{"192.168.7.200", true}, // the prefix is masked to 192.168.7.0/24
		{"192.168.8.1", false},
		{"169.254.169.254", false},
		{"8.8.8.8", true},
	}
	for _, c := range cases {
		t.Run(c.addr, func(t *testing.T) {
			if err := p.Check(netip.MustParseAddr(c.addr)); (err == nil) != c.allowed {
				t.Errorf("Check(%s) = %v, want allowed=%v", c.addr, err, c.allowed)
			}
		})
	}
}

func TestParseCIDRs(t *testing.T) {
	cases := []struct {
		in      []string
		want    []string
		wantErr bool
	}{
		{nil, nil, false},
		{[]string{"127.0.0.0/8"}, []string{"127.0.0.0/8"}, false},
		{[]string{"10.0.0.1/8"}, []string{"10.0.0.0/8"}, false},
		{[]string{"::1", "1.2.3.4", ""}, []string{"::1/128", "1.2.3.4/32"}, false},
		{[]string{"::ffff:1.2.3.4"}, []string{"1.2.3.4/32"}, false},
		{[]string{"127.0.0.0/33"}, nil, true},
		{[]string{"localhost"}, nil, true},
		{[]string{"10.0.0.0/8", "nonsense"}, []string{"10.0.0.0/8"}, true},
	}
	for _, c := range cases {
		t.Run(strings.Join(c.in, ","), func(t *testing.T) {
			got, err := ParseCIDRs(c.in)
			if (err != nil) != c.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, c.wantErr)
			}
			var s []string
			for _, p := range got {
				s = append(s, p.String())
			}
			if strings.Join(s, ",") != strings.Join(c.want, ",") {
				t.Errorf("got %v, want %v", s, c.want)
			}
		})
	}
}

// fakeResolver answers every name from a table, counting lookups.
type fakeResolver struct {
	answers map[string][]string
	calls   atomic.Int32
}

func (f *fakeResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	f.calls.Add(1)
	list, ok := f.answers[host]
	if !ok {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	var out []netip.Addr
	for _, s := range list {
		out = append(out, netip.MustParseAddr(s))
	}
	return out, nil
}

// listen starts a TCP server on 127.0.0.1 that writes "hello" to every connection and
// counts accepted connections.
func listen(t *testing.T) (port string, accepted *atomic.Int32) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	accepted = new(atomic.Int32)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			c.Write([]byte("hello"))
			c.Close()
		}
	}()
	_, port, _ = net.SplitHostPort(ln.Addr().String())
	return port, accepted
}

// TestDialRebinding: a public-looking name that resolves to a blocked address is refused
// after resolution, before any connection; with the range allowed the same name connects
// to the checked address.
func TestDialRebinding(t *testing.T) {
	port, accepted := listen(t)
	res := &fakeResolver{answers: map[string][]string{
		"evil.example":   {"127.0.0.1"},
		"meta.example":   {"169.254.169.254"},
		"mapped.example": {"::ffff:127.0.0.1"},
		"mixed.example":  {"10.0.0.1", "127.0.0.1"},
		"empty.example":  {},
		"localhost":      {"::1", "127.0.0.1"},
	}}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()

	strict := &Dialer{Policy: NewPolicy(), Resolver: res, Timeout: time.Second}
	for _, host := range []string{"evil.example", "meta.example", "mapped.example", "mixed.example", "127.0.0.1", "[::ffff:127.0.0.1]", "localhost"} {
		t.Run("blocked "+host, func(t *testing.T) {
			addr := host + ":" + port
			_, err := strict.DialContext(ctx, "tcp", addr)
			var be *BlockedError
			if !errors.As(err, &be) || !errors.Is(err, ErrBlockedAddress) {
				t.Fatalf("DialContext(%s) = %v, want blocked", addr, err)
			}
			if !strings.Contains(be.Error(), "blocked address") {
				t.Errorf("error text %q", be.Error())
			}
		})
	}
	if n := accepted.Load(); n != 0 {
		t.Fatalf("%d connections reached the server despite the policy", n)
	}

	t.Run("no such host", func(t *testing.T) {
		_, err := strict.DialContext(ctx, "tcp", "nowhere.example:"+port)
		var dnsErr *net.DNSError
		if !errors.As(err, &dnsErr) || !dnsErr.IsNotFound || errors.Is(err, ErrBlockedAddress) {
			t.Errorf("err = %v, want a not-found DNS error", err)
		}
	})
	t.Run("no addresses", func(t *testing.T) {
		_, err := strict.DialContext(ctx, "tcp", "empty.example:"+port)
		var dnsErr *net.DNSError
		if !errors.As(err, &dnsErr) || !dnsErr.IsNotFound {
			t.Errorf("err = %v, want a not-found DNS error", err)
		}
	})

	allow, _ := ParseCIDRs([]string{"127.0.0.0/8"})
	lax := &Dialer{Policy: NewPolicy(allow...), Resolver: res, Timeout: time.Second}
	t.Run("allowed range connects to the checked address", func(t *testing.T) {
		// mixed.example lists a blocked address first: it is skipped, not dialled.
		for _, host := range []string{"evil.example", "mapped.example", "mixed.example"} {
			conn, err := lax.DialContext(ctx, "tcp", host+":"+port)
			if err != nil {
				t.Fatalf("DialContext(%s): %v", host, err)
			}
			b, _ := io.ReadAll(conn)
			conn.Close()
			if string(b) != "hello" {
				t.Errorf("%s: read %q", host, b)
			}
		}
		if n := accepted.Load(); n != 3 {
			t.Errorf("server accepted %d connections, want 3", n)
		}
	})
}

func TestControlRechecks(t *testing.T) {
	d := &Dialer{Policy: NewPolicy()}
	if err := d.control(context.Background(), "tcp", "127.0.0.1:80", nil); !errors.Is(err, ErrBlockedAddress) {
		t.Errorf("control(127.0.0.1) = %v, want blocked", err)
	}
	if err := d.control(context.Background(), "tcp", "[fe80::1%eth0]:80", nil); !errors.Is(err, ErrBlockedAddress) {
		t.Errorf("control(fe80::1) = %v, want blocked", err)
	}
	if err := d.control(context.Background(), "tcp", "8.8.8.8:443", nil); err != nil {
		t.Errorf("control(8.8.8.8) = %v, want allowed", err)
	}
}
