package config

import (
	"strings"
	"testing"
	"time"

	"github.com/trawl/trawl/shared/envconfig"
	"github.com/trawl/trawl/shared/polite"
	"github.com/trawl/trawl/shared/polite/politetest"
)

func TestDefaults(t *testing.T) {
	c, err := Load(envconfig.FromMap(nil))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatalf("defaults invalid: %v", err)
	}
	if c.Common.HTTPAddr != ":9101" || c.RobotsAgent != "trawl" || c.Concurrency != 64 || c.FetchTimeout != 30*time.Second ||
		c.MaxBody != 16<<20 || c.BodyInlineMax != 1<<20 || c.MaxHeaderBytes != 64<<10 || len(c.AllowCIDRs) != 0 ||
		c.Robots.TTL != 24*time.Hour || c.Robots.ErrorTTL != time.Minute || c.Robots.MaxBytes != 500<<10 || c.UserAgent != DefaultUserAgent ||
		c.DNSTTL != 5*time.Minute || c.DNSNegativeTTL != 30*time.Second || c.DNSCacheSize != 10000 ||
		c.OutcomeBatch != 64 || c.OutcomeLinger != 2*time.Millisecond || c.MaxIdleConns != 4096 || c.DialTimeout != 10*time.Second {
		t.Errorf("unexpected defaults: %+v", c)
	}
}

func TestValidate(t *testing.T) {
	cases := []struct {
		name string
		env  map[string]string
		want string // substring of the error; "" = valid
	}{
		{"allow list", map[string]string{"TRAWL_ALLOW_CIDRS": "127.0.0.0/8, ::1"}, ""},
		{"sizes with units", map[string]string{"TRAWL_MAX_BODY": "4MiB", "TRAWL_ROBOTS_MAX_BYTES": "1MiB"}, ""},
		{"bad cidr", map[string]string{"TRAWL_ALLOW_CIDRS": "127.0.0.0/8,10.0.0.0/99"}, "TRAWL_ALLOW_CIDRS"},
		{"agent with version", map[string]string{"TRAWL_ROBOTS_AGENT": "trawl/0.1"}, "TRAWL_ROBOTS_AGENT"},
		{"agent with digits", map[string]string{"TRAWL_ROBOTS_AGENT": "trawl2"}, "TRAWL_ROBOTS_AGENT"},
		{"agent with space", map[string]string{"TRAWL_ROBOTS_AGENT": "my bot"}, "TRAWL_ROBOTS_AGENT"},
		{"lease too short for the fetch", map[string]string{"TRAWL_LEASE_TTL": "35s"}, "TRAWL_LEASE_TTL"},
		{"lease just long enough", map[string]string{"TRAWL_LEASE_TTL": "36s", "TRAWL_ACK_WAIT": "15s"}, ""},
		{"lease vs longer fetch", map[string]string{"TRAWL_FETCH_TIMEOUT": "2m"}, "TRAWL_LEASE_TTL"},
		{"concurrency zero", map[string]string{"TRAWL_FETCH_CONCURRENCY": "0"}, "TRAWL_FETCH_CONCURRENCY"},
		{"fetch timeout tiny", map[string]string{"TRAWL_FETCH_TIMEOUT": "100ms"}, "TRAWL_FETCH_TIMEOUT"},
		{"dial timeout zero", map[string]string{"TRAWL_DIAL_TIMEOUT": "0s"}, "TRAWL_DIAL_TIMEOUT"},
		{"short fetch timeout alone stays valid", map[string]string{"TRAWL_FETCH_TIMEOUT": "5s"}, ""},
		{"header timeout zero", map[string]string{"TRAWL_HEADER_TIMEOUT": "0"}, "TRAWL_HEADER_TIMEOUT"},
		{"body above the ceiling", map[string]string{"TRAWL_MAX_BODY": "65MiB"}, "TRAWL_MAX_BODY"},
		{"inline body too big for a message", map[string]string{"TRAWL_BODY_INLINE_MAX": "8MiB"}, "TRAWL_BODY_INLINE_MAX"},
		{"every body by reference", map[string]string{"TRAWL_BODY_INLINE_MAX": "0"}, ""},
		{"header cap tiny", map[string]string{"TRAWL_MAX_HEADER_BYTES": "100"}, "TRAWL_MAX_HEADER_BYTES"},
		{"robots ttl short", map[string]string{"TRAWL_ROBOTS_TTL": "10s"}, "TRAWL_ROBOTS_TTL"},
		{"error ttl over ttl", map[string]string{"TRAWL_ROBOTS_ERROR_TTL": "48h"}, "TRAWL_ROBOTS_ERROR_TTL"},
		{"robots under RFC minimum", map[string]string{"TRAWL_ROBOTS_MAX_BYTES": "100KiB"}, "TRAWL_ROBOTS_MAX_BYTES"},
		{"conns per host zero", map[string]string{"TRAWL_MAX_CONNS_PER_HOST": "0"}, "TRAWL_MAX_CONNS_PER_HOST"},
		{"idle conns zero", map[string]string{"TRAWL_MAX_IDLE_CONNS": "0"}, "TRAWL_MAX_IDLE_CONNS"},
		{"idle conns above the ceiling", map[string]string{"TRAWL_MAX_IDLE_CONNS": "100000"}, "TRAWL_MAX_IDLE_CONNS"},
		{"user agent with newline", map[string]string{"TRAWL_USER_AGENT": "a\nb"}, "TRAWL_USER_AGENT"},
		{"dns cache off", map[string]string{"TRAWL_DNS_TTL": "0"}, ""},
		{"policy poll too slow for the 2s bound", map[string]string{"TRAWL_POLICY_POLL": "3s"}, "TRAWL_POLICY_POLL"},
		{"sitemaps on", map[string]string{"TRAWL_SITEMAPS": "On"}, ""},
		{"sitemaps unknown", map[string]string{"TRAWL_SITEMAPS": "yes"}, "TRAWL_SITEMAPS"},
		{"per-server politeness", map[string]string{"TRAWL_POLITENESS": "ip"}, ""},
		{"politeness per something else", map[string]string{"TRAWL_POLITENESS": "domain"}, "TRAWL_POLITENESS"},
		// The request settings' own cases are polite.RequestSettings's; this one shows
		// Validate reaches them.
		{"static name on a refused address", map[string]string{"TRAWL_RESOLVE": "a.test=127.0.2.1"}, "TRAWL_RESOLVE"},
		{"dns cache off ignores negative ttl", map[string]string{"TRAWL_DNS_TTL": "0", "TRAWL_DNS_NEGATIVE_TTL": "0"}, ""},
		{"dns ttl negative", map[string]string{"TRAWL_DNS_TTL": "-1s"}, "TRAWL_DNS_TTL"},
		{"dns ttl too long", map[string]string{"TRAWL_DNS_TTL": "48h"}, "TRAWL_DNS_TTL"},
		{"dns negative over ttl", map[string]string{"TRAWL_DNS_TTL": "10s", "TRAWL_DNS_NEGATIVE_TTL": "30s"}, "TRAWL_DNS_NEGATIVE_TTL"},
		{"dns negative zero", map[string]string{"TRAWL_DNS_NEGATIVE_TTL": "0"}, "TRAWL_DNS_NEGATIVE_TTL"},
		{"dns cache size zero", map[string]string{"TRAWL_DNS_CACHE_SIZE": "0"}, "TRAWL_DNS_CACHE_SIZE"},
		{"outcome batch zero", map[string]string{"TRAWL_OUTCOME_BATCH": "0"}, "TRAWL_OUTCOME_BATCH"},
		{"outcome batch too large", map[string]string{"TRAWL_OUTCOME_BATCH": "1025"}, "TRAWL_OUTCOME_BATCH"},
		{"outcome linger negative", map[string]string{"TRAWL_OUTCOME_LINGER": "-1ms"}, "TRAWL_OUTCOME_LINGER"},
		{"outcome linger too long", map[string]string{"TRAWL_OUTCOME_LINGER": "2s"}, "TRAWL_OUTCOME_LINGER"},
		{"common settings checked", map[string]string{"TRAWL_SHARDS": "0"}, "TRAWL_SHARDS"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := Load(envconfig.FromMap(c.env))
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			err = cfg.Validate()
			if c.want == "" {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("Validate() = %v, want an error about %s", err, c.want)
			}
		})
	}
}

func TestLoadUnreadable(t *testing.T) {
	_, err := Load(envconfig.FromMap(map[string]string{"TRAWL_FETCH_TIMEOUT": "soon", "TRAWL_MAX_BODY": "big"}))
	if err == nil || !strings.Contains(err.Error(), "TRAWL_FETCH_TIMEOUT") || !strings.Contains(err.Error(), "TRAWL_MAX_BODY") {
		t.Errorf("Load error = %v, want both bad variables named", err)
	}
}

// A one-shot crawl finds the pages it found before sitemaps existed unless they are asked
// for; adaptive recrawl mode reads them by default.
func TestSitemapsEnabled(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		want bool
	}{
		{nil, false},
		{map[string]string{"TRAWL_RECRAWL": "adaptive"}, true},
		{map[string]string{"TRAWL_RECRAWL": "adaptive", "TRAWL_SITEMAPS": "off"}, false},
		{map[string]string{"TRAWL_SITEMAPS": "on"}, true},
		{map[string]string{"TRAWL_SITEMAPS": "auto"}, false},
	} {
		c, err := Load(envconfig.FromMap(tc.env))
		if err != nil {
			t.Fatal(err)
		}
		if got := c.SitemapsEnabled(); got != tc.want {
			t.Errorf("%v: SitemapsEnabled() = %v, want %v", tc.env, got, tc.want)
		}
	}
}

// TestPoliteSuite: the fetcher resolves a site policy's request settings and robots.txt
// limits from its configuration as every process making requests does (the renderer runs
// the same suite on its own).
func TestPoliteSuite(t *testing.T) {
	politetest.Run(t, func(r *envconfig.Reader) (polite.Settings, error) {
		c, err := Load(r)
		return c.Polite(), err
	})
}
