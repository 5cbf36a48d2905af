package polite_test

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/trawl/trawl/shared/envconfig"
	"github.com/trawl/trawl/shared/policy"
	"github.com/trawl/trawl/shared/polite"
	"github.com/trawl/trawl/shared/polite/politetest"
	"github.com/trawl/trawl/shared/robots"
)

// TestRequests runs the callers' suite on the settings as each service's config reads
// them (the services run it on their own configs: their config tests).
func TestRequests(t *testing.T) {
	politetest.Run(t, func(r *envconfig.Reader) (polite.Settings, error) {
		s := polite.Settings{
			RobotsAgent:    robots.LoadAgent(r),
			RobotsMaxBytes: polite.LoadRobotsMaxBytes(r),
			SecretsDir:     policy.Load(r).SecretsDir,
		}
		return s, r.Err()
	})
}

// TestApplyKeepsReserved: a header the client frames or decodes with is never replaced,
// even by Headers built by hand (Compile refuses them in rules).
func TestApplyKeepsReserved(t *testing.T) {
	h := &polite.Headers{Host: "a.test", Header: http.Header{"Accept-Encoding": {"br"}, "Host": {"evil.test"}, "X-A": {"1"}}}
	tests := []struct{ name, want string }{
		{"Accept-Encoding", "identity"},
		{"Host", ""},
		{"X-A", "1"},
	}
	hdr := http.Header{"Accept-Encoding": {"identity"}}
	h.Apply(hdr)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := hdr.Get(tt.name); got != tt.want {
				t.Errorf("%s = %q, want %q", tt.name, got, tt.want)
			}
		})
	}
}

func TestCheckRobotsMaxBytes(t *testing.T) {
	tests := []struct {
		n  int64
		ok bool
	}{{500 << 10, true}, {16 << 20, true}, {500<<10 - 1, false}, {16<<20 + 1, false}}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.n), func(t *testing.T) {
			if err := polite.CheckRobotsMaxBytes(tt.n); (err == nil) != tt.ok {
				t.Errorf("%v, want ok=%v", err, tt.ok)
			}
		})
	}
}
