package freeport

import (
	"net"
	"strconv"
	"testing"
)

// Every way to ask gives ports that are bindable, below the ephemeral range, and new to
// the process. Among 2,000 picks from the ~22,000 ports below the range, random picks
// would repeat one almost surely, so the set of ports given is what keeps them distinct.
func TestPortsAreFreeBelowTheEphemeralRangeAndNeverGivenTwice(t *testing.T) {
	lo, ok := ephemeralLow()
	if !ok {
		t.Fatal("cannot read /proc/sys/net/ipv4/ip_local_port_range: this test needs Linux")
	}
	seen := map[int]bool{}
	for _, tc := range []struct {
		name string
		pick func() ([]int, error)
	}{
		{"Port", func() ([]int, error) {
			p, err := Port()
			return []int{p}, err
		}},
		{"Ports", func() ([]int, error) { return Ports(5) }},
		{"Addr", func() ([]int, error) {
			a, err := Addr()
			if err != nil {
				return nil, err
			}
			_, p, err := net.SplitHostPort(a)
			if err != nil {
				return nil, err
			}
			n, err := strconv.Atoi(p)
			return []int{n}, err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for i := range 400 {
				ports, err := tc.pick()
				if err != nil {
					t.Fatal(err)
				}
				for _, p := range ports {
					if seen[p] {
						t.Fatalf("port %d given twice", p)
					}
					seen[p] = true
					if p < lowest || p >= lo {
						t.Fatalf("port %d outside [%d, %d), below the ephemeral range", p, lowest, lo)
					}
					if i%50 != 0 {
						continue
					}
					ln, err := net.Listen("tcp", addr(p))
					if err != nil {
						t.Fatalf("port %d given, but: %v", p, err)
					}
					ln.Close()
				}
			}
		})
	}
}
