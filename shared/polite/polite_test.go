package polite_test

import (
	"net/http"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"

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
			RobotsMaxBytes: polite.LoadRobotsSettings(r).MaxBytes,
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

func TestRobotsSettingsValidate(t *testing.T) {
	ok := polite.RobotsSettings{TTL: 24 * time.Hour, ErrorTTL: time.Minute, MaxBytes: 500 << 10}
	tests := []struct {
		name string
		mod  func(*polite.RobotsSettings)
		bad  string // the variable the error names; "" when valid
	}{
		{"defaults", func(*polite.RobotsSettings) {}, ""},
		{"largest file", func(s *polite.RobotsSettings) { s.MaxBytes = 16 << 20 }, ""},
		{"below RFC 9309's minimum", func(s *polite.RobotsSettings) { s.MaxBytes = 500<<10 - 1 }, "TRAWL_ROBOTS_MAX_BYTES"},
		{"above 16 MiB", func(s *polite.RobotsSettings) { s.MaxBytes = 16<<20 + 1 }, "TRAWL_ROBOTS_MAX_BYTES"},
		{"ttl under a minute", func(s *polite.RobotsSettings) { s.TTL, s.ErrorTTL = 59*time.Second, time.Second }, "TRAWL_ROBOTS_TTL"},
		{"error ttl over the ttl", func(s *polite.RobotsSettings) { s.ErrorTTL = 25 * time.Hour }, "TRAWL_ROBOTS_ERROR_TTL"},
		{"error ttl under a second", func(s *polite.RobotsSettings) { s.ErrorTTL = 999 * time.Millisecond }, "TRAWL_ROBOTS_ERROR_TTL"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := ok
			tt.mod(&s)
			err := s.Validate()
			if (err == nil) != (tt.bad == "") || (err != nil && !strings.Contains(err.Error(), tt.bad+"=")) {
				t.Errorf("Validate(%+v) = %v, want an error naming %q", s, err, tt.bad)
			}
		})
	}
}

// TestServerLimits: a claim on a server address applies the host's own rules over the
// address block's, field by field, over the process-wide settings.
func TestServerLimits(t *testing.T) {
	d := func(s string) *policy.Duration { v, _ := time.ParseDuration(s); p := policy.Duration(v); return &p }
	ptr := func(n int) *int { return &n }
	stored := func(scope string, r policy.Rule) policy.Stored {
		sc, err := policy.ParseScope(scope)
		if err != nil {
			t.Fatal(err)
		}
		r.Scope = sc
		return policy.Stored{Rule: r, Origin: policy.Origin{Version: 1}}
	}
	set, err := policy.Compile([]policy.Stored{
		stored("cidr:10.0.0.0/8", policy.Rule{MinDelay: d("5s"), Connections: ptr(2)}),
		stored("host:own.test", policy.Rule{MinDelay: d("1s"), CrawlDelay: &policy.CrawlDelay{Exact: true}}),
	}, 1)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, host, addr string
		minDelay, crawl  time.Duration // 0: unset
		conns            int
	}{
		{"the address block's", "other.test", "10.1.2.3", 5 * time.Second, 0, 2},
		{"the host's over the block's", "own.test", "10.1.2.3", time.Second, 365 * 24 * time.Hour, 2},
		{"the host's alone", "own.test", "192.0.2.1", time.Second, 365 * 24 * time.Hour, 0},
		{"none", "other.test", "192.0.2.1", 0, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lim := polite.ServerLimits(set, tt.host, netip.MustParseAddr(tt.addr))
			var md, cd time.Duration
			if lim.MinDelay != nil {
				md = *lim.MinDelay
			}
			if lim.MaxCrawlDelay != nil {
				cd = *lim.MaxCrawlDelay
			}
			if md != tt.minDelay || cd != tt.crawl || lim.Connections != tt.conns {
				t.Errorf("min delay %s, crawl-delay cap %s, connections %d; want %s, %s, %d", md, cd, lim.Connections, tt.minDelay, tt.crawl, tt.conns)
			}
		})
	}
}

// TestWithoutSecrets: a request that may not carry a rule's credentials keeps its plain
// headers, and the rule's Headers other requests share keep their secrets.
func TestWithoutSecrets(t *testing.T) {
	full := func() *polite.Headers {
		return &polite.Headers{Host: "a.test", Header: http.Header{
			"User-Agent": {"AcmeBot/2"}, "X-Extra": {"plain"}, "X-Token": {"tok"}, "Cookie": {"s=1"}, "Authorization": {"Basic x"},
		}, Secret: []string{"X-Token", "Cookie", "Authorization"}}
	}
	onlySecrets := &polite.Headers{Host: "a.test", Header: http.Header{"Cookie": {"s=1"}}, Secret: []string{"Cookie"}}
	tests := []struct {
		name string
		in   *polite.Headers
		want http.Header // nil: no Headers left
	}{
		{"plain headers stay, secrets go", full(), http.Header{"User-Agent": {"AcmeBot/2"}, "X-Extra": {"plain"}}},
		{"nothing but secrets", onlySecrets, nil},
		{"none", nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var before http.Header
			if tt.in != nil {
				before = tt.in.Header.Clone()
			}
			got := tt.in.WithoutSecrets()
			if tt.want == nil {
				if got != nil {
					t.Fatalf("WithoutSecrets = %+v, want nil", got)
				}
			} else {
				if got == nil || got.Host != tt.in.Host || len(got.Secrets()) != 0 || !reflect.DeepEqual(got.Header, tt.want) {
					t.Fatalf("WithoutSecrets = %+v, want host %s, headers %v, no secret", got, tt.in.Host, tt.want)
				}
			}
			if tt.in != nil && !reflect.DeepEqual(tt.in.Header, before) {
				t.Errorf("the original lost headers: %v, was %v", tt.in.Header, before)
			}
		})
	}
}
