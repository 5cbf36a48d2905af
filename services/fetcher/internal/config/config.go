// Package config reads the fetcher's settings from TRAWL_* environment variables.
package config

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/trawl/trawl/shared/crawlmsg"
	"github.com/trawl/trawl/shared/envconfig"
	"github.com/trawl/trawl/shared/frontierconf"
	"github.com/trawl/trawl/shared/policy"
	"github.com/trawl/trawl/shared/polite"
	"github.com/trawl/trawl/shared/politeness"
	"github.com/trawl/trawl/shared/robots"
)

// DefaultHTTPAddr is the fetcher's /metrics address.
const DefaultHTTPAddr = ":9101"

// DefaultUserAgent is sent with every request unless TRAWL_USER_AGENT says otherwise.
const DefaultUserAgent = robots.DefaultUserAgent

// Config is the fetcher's configuration.
type Config struct {
	Common envconfig.Common
	// RequestSettings are TRAWL_DIAL_TIMEOUT, TRAWL_BODY_INLINE_MAX, TRAWL_ALLOW_CIDRS and
	// TRAWL_RESOLVE, the renderers' settings too.
	polite.RequestSettings

	UserAgent       string        // TRAWL_USER_AGENT
	RobotsAgent     string        // TRAWL_ROBOTS_AGENT: product token matched in robots.txt
	Concurrency     int           // TRAWL_FETCH_CONCURRENCY: tasks handled at once
	FetchTimeout    time.Duration // TRAWL_FETCH_TIMEOUT: one request, body included
	HeaderTimeout   time.Duration // TRAWL_HEADER_TIMEOUT
	MaxBody         int64         // TRAWL_MAX_BODY
	MaxHeaderBytes  int64         // TRAWL_MAX_HEADER_BYTES
	MaxConnsPerHost int           // TRAWL_MAX_CONNS_PER_HOST
	MaxIdleConns    int           // TRAWL_MAX_IDLE_CONNS: kept-alive connections over all hosts
	DNSTTL          time.Duration // TRAWL_DNS_TTL: reuse of a resolved name; 0 disables the cache
	DNSNegativeTTL  time.Duration // TRAWL_DNS_NEGATIVE_TTL: reuse of a failed lookup
	DNSCacheSize    int           // TRAWL_DNS_CACHE_SIZE: most names cached
	OutcomeBatch    int           // TRAWL_OUTCOME_BATCH: most outcomes in one crawl.fetched message
	OutcomeLinger   time.Duration // TRAWL_OUTCOME_LINGER: longest wait for a batch to fill
	// PagesPerMessage (TRAWL_PAGES_PER_MESSAGE) is the most pages of one outcome batch that
	// travel in one crawl.pages message (crawlmsg.Bundle); 1 sends each page alone, as
	// releases before bundles did, for readers not upgraded yet.
	PagesPerMessage int
	// Robots are how long robots.txt is kept and how much of it is read, the renderers'
	// settings too: both fill one cache.
	Robots polite.RobotsSettings
	// Politeness is the gap rule, which the fetcher applies to a host it requests outside
	// that host's own tasks (a robots.txt redirect to another host).
	Politeness politeness.Rules
	// Policy is how the live site policies are followed: TRAWL_POLICY_POLL and
	// TRAWL_SECRETS_DIR (the secrets their request settings name).
	Policy policy.Settings
	// Sitemaps is TRAWL_SITEMAPS: SitemapsOn, SitemapsOff or SitemapsAuto (on in adaptive
	// recrawl mode only); see SitemapsEnabled.
	Sitemaps string
}

// Polite are the settings the fetcher's requests are resolved with (polite.New), as
// every process making requests reads them.
func (c Config) Polite() polite.Settings {
	return polite.Settings{RobotsAgent: c.RobotsAgent, RobotsMaxBytes: c.Robots.MaxBytes, SecretsDir: c.Policy.SecretsDir}
}

// TLSHandshakeTimeout is fixed: a handshake that takes longer is a broken server.
const TLSHandshakeTimeout = 10 * time.Second

// Load reads the configuration. The error reports values that could not be read at all
// (not a number, not a duration); Validate checks the values themselves.
func Load(r *envconfig.Reader) (Config, error) {
	c := Config{
		Common:          envconfig.LoadCommon(r, DefaultHTTPAddr),
		RequestSettings: polite.LoadRequestSettings(r),
		UserAgent:       robots.LoadUserAgent(r),
		RobotsAgent:     robots.LoadAgent(r),
		Concurrency:     r.Int("FETCH_CONCURRENCY", 64),
		FetchTimeout:    r.Duration("FETCH_TIMEOUT", 30*time.Second),
		HeaderTimeout:   r.Duration("HEADER_TIMEOUT", 15*time.Second),
		MaxBody:         r.Bytes("MAX_BODY", 16<<20),
		MaxHeaderBytes:  r.Bytes("MAX_HEADER_BYTES", 64<<10),
		MaxConnsPerHost: r.Int("MAX_CONNS_PER_HOST", 2),
		// Four times the scheduler's default TRAWL_BACK_QUEUES hosts in rotation (4096):
		// with fewer, a host's connection is closed before its next turn and every
		// request dials again.
		MaxIdleConns:    r.Int("MAX_IDLE_CONNS", 4*frontierconf.Defaults.BackQueues),
		DNSTTL:          r.Duration("DNS_TTL", 5*time.Minute),
		DNSNegativeTTL:  r.Duration("DNS_NEGATIVE_TTL", 30*time.Second),
		DNSCacheSize:    r.Int("DNS_CACHE_SIZE", 10000),
		OutcomeBatch:    r.Int("OUTCOME_BATCH", 64),
		OutcomeLinger:   r.Duration("OUTCOME_LINGER", 2*time.Millisecond),
		PagesPerMessage: r.Int("PAGES_PER_MESSAGE", 16),
		Robots:          polite.LoadRobotsSettings(r),
		Politeness:      politeness.Load(r),
		Policy:          policy.Load(r),
		Sitemaps:        strings.ToLower(strings.TrimSpace(r.String("SITEMAPS", SitemapsAuto))),
	}
	return c, r.Err()
}

// MaxBodyLimit is the ceiling of TRAWL_MAX_BODY: bodies above the inline threshold go
// by reference, so the cap bounds memory per task, not the message size.
const MaxBodyLimit = crawlmsg.MaxBody

// TRAWL_SITEMAPS values.
const (
	SitemapsOn   = "on"
	SitemapsOff  = "off"
	SitemapsAuto = "auto"
)

// SitemapsEnabled says whether each robots.txt fetch publishes the host's sitemaps. Auto
// leaves a one-shot crawl as it was (sitemaps change which pages it finds) and turns them
// on in adaptive recrawl mode, where a site's own list of its pages and their lastmod is
// what keeps an index fresh.
func (c Config) SitemapsEnabled() bool {
	switch c.Sitemaps {
	case SitemapsOn:
		return true
	case SitemapsAuto:
		return c.Common.Recrawl == envconfig.RecrawlAdaptive
	}
	return false
}

// Validate reports every invalid setting at once.
func (c Config) Validate() error {
	errs := []error{c.Common.Validate(), c.RequestSettings.Validate(), c.Politeness.Validate(), c.Policy.Validate()}
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	switch c.Sitemaps {
	case SitemapsOn, SitemapsOff, SitemapsAuto:
	default:
		bad("TRAWL_SITEMAPS=%q: want %s, %s or %s", c.Sitemaps, SitemapsAuto, SitemapsOn, SitemapsOff)
	}
	if err := robots.CheckAgent(c.RobotsAgent); err != nil {
		errs = append(errs, err)
	}
	if err := robots.CheckUserAgent(c.UserAgent); err != nil {
		errs = append(errs, err)
	}
	if c.Concurrency < 1 || c.Concurrency > 4096 {
		bad("TRAWL_FETCH_CONCURRENCY=%d: want 1..4096", c.Concurrency)
	} else if c.Concurrency < c.Common.TaskBatch {
		// A message of a full batch must fit in the fetcher's slots.
		bad("TRAWL_FETCH_CONCURRENCY=%d: want at least TRAWL_TASK_BATCH (%d)", c.Concurrency, c.Common.TaskBatch)
	}
	if c.OutcomeBatch < 1 || c.OutcomeBatch > 1024 {
		bad("TRAWL_OUTCOME_BATCH=%d: want 1..1024", c.OutcomeBatch)
	}
	if c.PagesPerMessage < 1 || c.PagesPerMessage > crawlmsg.BundleMaxParts {
		bad("TRAWL_PAGES_PER_MESSAGE=%d: want 1..%d", c.PagesPerMessage, crawlmsg.BundleMaxParts)
	}
	// The linger delays the host's next fetch by as much, so it stays short.
	if c.OutcomeLinger < 0 || c.OutcomeLinger > time.Second {
		bad("TRAWL_OUTCOME_LINGER=%s: want 0..1s", c.OutcomeLinger)
	}
	if c.FetchTimeout < time.Second {
		bad("TRAWL_FETCH_TIMEOUT=%s: want at least 1s", c.FetchTimeout)
	}
	// The task's lease must outlive the request plus publishing, or the scheduler could
	// hand the host to another fetcher while this one still talks to it.
	if c.Common.LeaseTTL <= c.FetchTimeout+5*time.Second {
		bad("TRAWL_LEASE_TTL=%s: must exceed TRAWL_FETCH_TIMEOUT (%s) + 5s", c.Common.LeaseTTL, c.FetchTimeout)
	}
	// Dial and header timeouts above the fetch timeout are allowed: the total still cuts
	// the request, so lowering TRAWL_FETCH_TIMEOUT alone stays valid.
	if c.HeaderTimeout <= 0 {
		bad("TRAWL_HEADER_TIMEOUT=%s: want more than 0", c.HeaderTimeout)
	}
	if c.MaxBody < 1<<10 || c.MaxBody > MaxBodyLimit {
		bad("TRAWL_MAX_BODY=%d: want 1KiB..%d", c.MaxBody, MaxBodyLimit)
	}
	if c.MaxHeaderBytes < 4<<10 || c.MaxHeaderBytes > 1<<20 {
		bad("TRAWL_MAX_HEADER_BYTES=%d: want 4KiB..1MiB", c.MaxHeaderBytes)
	}
	if err := c.Robots.Validate(); err != nil {
		errs = append(errs, err)
	}
	if c.MaxConnsPerHost < 1 || c.MaxConnsPerHost > 64 {
		bad("TRAWL_MAX_CONNS_PER_HOST=%d: want 1..64", c.MaxConnsPerHost)
	}
	if c.MaxIdleConns < 1 || c.MaxIdleConns > 65536 {
		bad("TRAWL_MAX_IDLE_CONNS=%d: want 1..65536", c.MaxIdleConns)
	}
	// A cached name is re-resolved after DNS_TTL at the latest; beyond a day an operator
	// would not notice a site moving.
	if c.DNSTTL < 0 || c.DNSTTL > 24*time.Hour {
		bad("TRAWL_DNS_TTL=%s: want 0 (no cache)..24h", c.DNSTTL)
	}
	if c.DNSTTL > 0 && (c.DNSNegativeTTL < time.Second || c.DNSNegativeTTL > c.DNSTTL) {
		bad("TRAWL_DNS_NEGATIVE_TTL=%s: want 1s..TRAWL_DNS_TTL (%s)", c.DNSNegativeTTL, c.DNSTTL)
	}
	if c.DNSCacheSize < 1 || c.DNSCacheSize > 1_000_000 {
		bad("TRAWL_DNS_CACHE_SIZE=%d: want 1..1000000", c.DNSCacheSize)
	}
	return errors.Join(errs...)
}
