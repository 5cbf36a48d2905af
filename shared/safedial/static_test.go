package safedial

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"slices"
	"testing"
)

type upstream map[string][]netip.Addr

func (u upstream) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if a, ok := u[host]; ok {
		return a, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

func TestStaticResolver(t *testing.T) {
	names, err := ParseStatic([]string{"A.test=127.0.2.1", " b.test = ::1 ", "b.test=127.0.2.2", "b.test=127.0.2.2", ""})
	if err != nil {
		t.Fatal(err)
	}
	r := &StaticResolver{Names: names, Next: upstream{"dns.test": {netip.MustParseAddr("192.0.2.1")}}}
	tests := []struct {
		name, network, host string
		want                []string
		notFound            bool
	}{
		{"a listed name, any case", "ip", "a.TEST", []string{"127.0.2.1"}, false},
		{"every address of a name listed twice, once each", "ip", "b.test", []string{"::1", "127.0.2.2"}, false},
		{"the family asked for", "ip4", "b.test", []string{"127.0.2.2"}, false},
		{"no address of the family", "ip6", "a.test", nil, true},
		{"other names go upstream", "ip", "dns.test", []string{"192.0.2.1"}, false},
		{"upstream's answer stands", "ip", "missing.test", nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := r.LookupNetIP(context.Background(), tt.network, tt.host)
			var dnsErr *net.DNSError
			if tt.notFound {
				if !errors.As(err, &dnsErr) || !dnsErr.IsNotFound {
					t.Fatalf("got %v, %v; want not found", got, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var s []string
			for _, a := range got {
				s = append(s, a.String())
			}
			if !slices.Equal(s, tt.want) {
				t.Fatalf("got %v, want %v", s, tt.want)
			}
		})
	}
	for _, bad := range []string{"a.test", "=127.0.0.1", "a.test=nowhere"} {
		if _, err := ParseStatic([]string{bad}); err == nil {
			t.Errorf("ParseStatic(%q) accepted", bad)
		}
	}
}

// Pick is the address a dial tries first: the first the policy allows, in the resolver's
// order.
func TestPick(t *testing.T) {
	d := &Dialer{Policy: NewPolicy(netip.MustParsePrefix("127.0.0.0/8")),
		Resolver: upstream{"mixed.test": {netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("127.0.0.9"), netip.MustParseAddr("127.0.0.8")},
			"private.test": {netip.MustParseAddr("10.0.0.1")}}}
	if a, err := d.Pick(context.Background(), "mixed.test"); err != nil || a != netip.MustParseAddr("127.0.0.9") {
		t.Fatalf("Pick = %s, %v; want 127.0.0.9, the first allowed", a, err)
	}
	if _, err := d.Pick(context.Background(), "private.test"); !errors.Is(err, ErrBlockedAddress) {
		t.Fatalf("Pick of a refused address: %v, want blocked", err)
	}
}
